"""The `fwdorder` command line's parser: its commands, their arguments and help texts.

The trace options' flags are derived from `OPTIONS` (one `--show-devices` per
`show_devices`); what each command does is in main.py. A plugin whose facets hook raises
breaks only the commands that need the facets (`_FacetsCheckingParser`), not `--help`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from pytest_fwdorder.calls.call_line_facets import writes_call_lines
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.hookspecs import ENTRY_POINT_GROUP, trace_facets
from pytest_fwdorder.options import OPTIONS

PROGRAM = "fwdorder"

# Each command: its line in `fwdorder --help`, and the description in its own help.
_COMMAND_TEXTS = {
    "show": (
        "print the golden text of a model or a golden file",
        "Print the golden text: a header of totals, then one line per module "
        "call in execution order.",
    ),
    "diff": (
        "explain what changed from OLD to NEW",
        "Print what changed from OLD to NEW: a summary, then the aligned calls "
        "(- old, + new) and the header lines that changed. Exit status 0 when equal, 1 when "
        "different.",
    ),
    "review": (
        "explain every golden file that differs from a git base commit",
        "Explain every golden file (**/__snapshots__/**/*.fwdorder.txt) that "
        "differs between BASE and the work tree (or --head REF): added, deleted, or changed "
        "with what changed, then a one-line total. Reads through git only; exit status 0 "
        "when none differs, 1 when some do.",
    ),
    "git-diff": (
        "git's diff driver for golden files: explained diffs in git diff and git log -p",
        "The external diff command git runs for golden files. Set it up with "
        '`git config diff.fwdorder.command "fwdorder git-diff"` and the .gitattributes '
        "line `*.fwdorder.txt diff=fwdorder`.",
    ),
    "parity": (
        "where a port first departs from a recorded reference",
        "Run CANDIDATE on the inputs of REFERENCE (a file record_reference wrote, "
        "or a model run here on random --input tensors), pair their calls and print the "
        "first divergence and the error at every paired call. The reference's weights are "
        "copied into the candidate through the path map when it has them. Exit status 0 "
        "when it matches, 1 when it diverges.",
    ),
}


class _FacetsCheckingParser(argparse.ArgumentParser):
    """`fwdorder`'s parser: when the plugins' facets could not be had (`facets_problem`), a
    command that needs them is a usage error saying so; `--help` and the others still run."""

    # What went wrong, as a clause: `ValueError: ... (from the pytest_fwdorder_facets hook of
    # the plugin 'x' (module.function))`.
    facets_problem: str | None = None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if self.facets_problem is not None and _needs_facets(parsed):
            self.error(
                f"{self.facets_problem}; `{PROGRAM} {parsed.command}` needs the facets "
                f"(pytest_fwdorder_facets): {_FACETS_FIX}"
            )
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        if self.facets_problem is not None and "--svg-" in message:
            # The `--svg-TITLE` options come from the facets: say why one is missing.
            message += (
                f" (the facets' --svg- options are missing: {self.facets_problem}; {_FACETS_FIX})"
            )
        super().error(message)


_FACETS_FIX = (
    "fix or uninstall the plugin (a package registers one under the "
    f"{ENTRY_POINT_GROUP!r} entry points); `{PROGRAM} --help` and `{PROGRAM} show GOLDEN` "
    "work without the facets"
)


def _needs_facets(parsed: argparse.Namespace) -> bool:
    """Whether a command traces a model or compares goldens, which takes every facet: all but
    `show` of a golden file (printed, folded or drawn as it is)."""
    command = getattr(parsed, "command", None)
    if command != "show":
        return command is not None
    target = str(parsed.target)
    return ":" in target and not Path(target).is_file()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `fwdorder` and its commands; each sets `command`, its name."""
    common = _common_options()
    parser = _FacetsCheckingParser(
        prog=PROGRAM,
        description="Look at a PyTorch model's module calls in execution order, or compare "
        "two traces, without writing a test.",
        epilog="TARGET is a golden file (*.fwdorder.txt) or package.module:factory, where "
        "factory is a model class, a zero-argument function that returns the model, or a "
        "model; the current folder is searched first. Exit status: 0 equal (or shown), "
        "1 different, 2 usage or loading errors.",
    )
    parser.add_argument("--version", action="version", version=f"{PROGRAM} {_version()}")
    facets, parser.facets_problem = _registered_facets()
    sectioned = [facet for facet in facets if hasattr(facet, "end_lines")]
    lined = [facet for facet in facets if writes_call_lines(facet)]
    tabled = [facet for facet in facets if hasattr(facet, "table_orders")]
    commands = parser.add_subparsers(
        title="commands",
        required=True,
        metavar="COMMAND",
        parser_class=argparse.ArgumentParser,  # the check runs once, on the whole line
    )
    for name, add_arguments, parents in (
        (
            "show",
            partial(_add_show_arguments, sectioned=sectioned, tabled=tabled, lined=lined),
            [common],
        ),
        ("diff", _add_diff_arguments, [common]),
        ("review", _add_review_arguments, []),
        ("git-diff", _add_git_diff_arguments, []),  # git's diff driver for golden files
        ("parity", _add_parity_arguments, [common]),
    ):
        help_text, description = _COMMAND_TEXTS[name]
        command = commands.add_parser(
            name, parents=parents, help=help_text, description=description
        )
        command.set_defaults(command=name)  # what `main` runs
        add_arguments(command)
    return parser


def _registered_facets() -> tuple[list[Any], str | None]:
    """The registered facets with one value per trace, or none and why: a plugin's facets
    hook that raises (or offers something that is no facet) must not break `--help`, so it
    is said only when a command needs the facets."""
    try:
        return list(trace_facets(FACT_TITLES)), None
    except Exception as error:
        return [], _facets_problem(error)


def _facets_problem(error: Exception) -> str:
    """A clause for a facets hook that failed: the error, and the plugin whose hook raised it
    or offered what was refused (the note the facets' resolution adds)."""
    notes = "; ".join(getattr(error, "__notes__", ()))
    return f"{type(error).__name__}: {error}" + (f" ({notes})" if notes else "")


def _common_options() -> argparse.ArgumentParser:
    """The options `show`, `diff` and `parity` share: the model's inputs and the trace's."""
    common = argparse.ArgumentParser(add_help=False)
    model = common.add_argument_group("models (for a package.module:factory TARGET)")
    model.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="SIZES",
        help="the sizes of one input tensor joined by 'x', such as 1x3x224x224; repeat it "
        "for a model that takes several inputs",
    )
    model.add_argument(
        "--input-dtype",
        action="append",
        default=[],
        metavar="DTYPE",
        help="a torch dtype name such as float32, float16, bfloat16 or int64: once for "
        "every input, or once per --input in order (default: float32)",
    )
    model.add_argument(
        "--train", action="store_true", help="trace in train mode (default: eval mode)"
    )
    _add_trace_options(common)
    _add_color_option(common)
    return common


def _add_show_arguments(
    show: argparse.ArgumentParser,
    sectioned: Sequence[Any],
    tabled: Sequence[Any],
    lined: Sequence[Any],
) -> None:
    show.add_argument("target", metavar="TARGET")
    show.add_argument(
        "--depth",
        type=int,
        metavar="N",
        help="fold calls nested deeper than N into their parent (0: the root call only); "
        "the printed view only, the header still counts every call",
    )
    orders = [
        f"{order} ({words}, --{facet.option.replace('_', '-')})"
        for facet in tabled
        for order, words in facet.table_orders.items()
    ]
    show.add_argument(
        "--sort",
        # Without the facets (a plugin's hook failed) any order parses, so that the command
        # fails saying why, not that `flops` is no choice.
        choices=[order for facet in tabled for order in facet.table_orders] or None,
        metavar="ORDER",
        help="with a model TARGET and the option that records it: instead of the golden, a "
        "table of the calls ranked by ORDER, an order a facet offers"
        + (f": {', '.join(orders)}" if orders else ""),
    )
    show.add_argument(
        "--top", type=int, metavar="N", help="with --sort: the first N calls only (default: all)"
    )
    show.add_argument(
        "--export",
        action="store_true",
        help="with a model TARGET: also torch.export the model on the inputs (strict=False) "
        "and say whether its module calls are eager's; exit status 1 when they differ",
    )
    show.add_argument(
        "--coverage",
        metavar="PATTERN",
        help="instead of the golden, a table of the classes of the modules whose paths match "
        "PATTERN (layers.*.self_attn.[qv]_proj), with their layer indices",
    )
    _add_picture_options(show, trace=True, sectioned=sectioned, lined=lined)


def _add_diff_arguments(diff: argparse.ArgumentParser) -> None:
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    _add_picture_options(diff, trace=False)


def _add_parity_arguments(parity: argparse.ArgumentParser) -> None:
    parity.add_argument("reference", metavar="REFERENCE")
    parity.add_argument("candidate", metavar="CANDIDATE")
    parity.add_argument(
        "--path-map",
        metavar="package.module:NAME",
        help="a dict of reference path -> candidate path, such as "
        "{'model.layers.{i}.self_attn': 'layers.{i}.attn'} (default: pair by structure)",
    )
    parity.add_argument(
        "--keep-weights",
        action="store_true",
        help="compare the candidate with the weights it was built with",
    )


def _add_picture_options(
    parser: argparse.ArgumentParser,
    *,
    trace: bool,
    sectioned: Sequence[Any] = (),
    lined: Sequence[Any] = (),
) -> None:
    """`--svg` and the options of the picture it writes."""
    group = parser.add_argument_group("picture (an SVG of the calls instead of the text)")
    group.add_argument(
        "--svg",
        metavar="PATH",
        help="write an SVG picture to PATH ('-': standard output) instead of printing the "
        + ("golden text; --depth folds it" if trace else "explanation")
        + "; identical blocks in a row are drawn once, marked xN",
    )
    group.add_argument(
        "--no-roll",
        action="store_true",
        help="with --svg: draw every block of a run of identical blocks",
    )
    if trace:
        # The facets' lines under the calls (`--svg-operations`) and sections after them
        # (`--svg-backward`).
        _add_facet_picture_options(
            parser, group, lined, "svg_under", "draw each call's {title} in its box"
        )
        _add_facet_picture_options(
            parser, group, sectioned, "svg_sections", "add a column of the {title} steps"
        )


def _add_facet_picture_options(
    parser: argparse.ArgumentParser,
    group: argparse._ArgumentGroup,
    facets: Sequence[Any],
    dest: str,
    drawn: str,
) -> None:
    """`--svg-TITLE` for each of `facets`: the titles asked for gather in `dest`, and the help
    says what is drawn of each (`drawn`, with `{title}` in it)."""
    parser.set_defaults(**{dest: []})
    for facet in facets:
        group.add_argument(
            f"--svg-{facet.title.replace(' ', '-')}",
            dest=dest,
            action="append_const",
            const=facet.title,
            help=f"with --svg: {drawn.format(title=facet.title)} (a golden traced with "
            f"--{facet.option.replace('_', '-')})",
        )


def _add_color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the output: auto (the default) colours a terminal unless NO_COLOR is set",
    )


def _add_review_arguments(review: argparse.ArgumentParser) -> None:
    review.add_argument(
        "base",
        nargs="?",
        metavar="BASE",
        help="the commit to compare with (any commit-ish; default: the merge base of the "
        "head with origin/HEAD, else main, else master)",
    )
    review.add_argument(
        "--head", metavar="REF", help="compare with this commit instead of the work tree"
    )
    review.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="text for a terminal (the default), markdown for a pull-request comment or "
        "$GITHUB_STEP_SUMMARY, json for bots",
    )
    _add_color_option(review)


def _add_git_diff_arguments(git_diff: argparse.ArgumentParser) -> None:
    git_diff.add_argument(
        "git_arguments",
        nargs="+",
        metavar="ARGUMENT",
        help="what git passes: path old-file old-hex old-mode new-file new-hex new-mode "
        "(and, for a rename, new-path and a message; for an unmerged path, the path only)",
    )
    _add_color_option(git_diff)


def _add_trace_options(parser: argparse.ArgumentParser) -> None:
    """One flag per trace option, named after it: `show_devices` is `--show-devices`."""
    group = parser.add_argument_group(
        "trace options (the names trace_forward, the fwdorder marker and the ini options take)"
    )
    for option in OPTIONS:
        flag, help_text = "--" + option.name.replace("_", "-"), option.flag_help
        if option.kind in ("flag", "flag_or_function"):
            group.add_argument(flag, action="store_true", help=help_text)
        elif option.kind == "names":  # repeated, each with names separated by commas
            group.add_argument(flag, action="append", default=[], metavar="NAME", help=help_text)
        else:
            group.add_argument(flag, default=option.default, metavar="VALUE", help=help_text)


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("pytest-fwdorder")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        from pytest_fwdorder import __version__

        return __version__
