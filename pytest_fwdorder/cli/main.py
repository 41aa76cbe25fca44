"""The `fwdorder` command: look at a model's trace, or compare two, without writing a test.

    fwdorder show torchvision.models:resnet50 --input 1x3x224x224 --device meta --depth 1
    fwdorder show torchvision.models:resnet50 --input 1x3x224x224 --costs --sort flops --top 10
    fwdorder diff tests/__snapshots__/test_model/test_resnet50.fwdorder.txt mymodels:build \\
        --input 1x3x224x224
    fwdorder review origin/main --format markdown >> "$GITHUB_STEP_SUMMARY"
    fwdorder parity reference.safetensors myport:build --path-map myport:PATH_MAP
    git config diff.fwdorder.command "fwdorder git-diff"   # with `*.fwdorder.txt diff=fwdorder`

A TARGET is a golden file, or `package.module:factory`: a model class, a zero-argument
function that builds the model, or a model object. Models are traced in eval mode unless
`--train` is given. The trace options are the ones every entry point takes
(`TraceOptions`), spelled with dashes: `--device`, `--show-devices`, `--hide`,
`--unregistered`, ...

`review` explains every golden file that differs between a git base commit and the work
tree or a head commit, and `git-diff` is git's external diff driver for golden files.

Exit status: 0 when `show` printed the trace or `diff` / `review` found no difference, 1
when they found one, 2 on a usage error, a target that cannot be loaded or built, a forward
that fails, or a git problem such as an unknown base (one line on stderr says which and
what to do). `git-diff` exits 0 once it printed, as git requires of a diff driver.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.checks.coverage import coverage, golden_coverage
from pytest_fwdorder.cli.cost_table import COST_ORDERS, cost_table
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.golden.folding import colorize_diff, colorize_golden, fold_golden
from pytest_fwdorder.golden.format import FORMAT_VERSION
from pytest_fwdorder.golden.parse import format_problem, format_version
from pytest_fwdorder.options import OPTIONS, TraceOptions
from pytest_fwdorder.picture.svg import Picture, diff_picture, golden_picture
from pytest_fwdorder.report.git_review import ReviewError, collect_review, explain_golden
from pytest_fwdorder.report.review_format import (
    format_golden_text,
    format_json,
    format_markdown,
    format_text,
)

if TYPE_CHECKING:
    from torch import nn

    from pytest_fwdorder.trace import Trace

PROGRAM = "fwdorder"
EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2

# `1x3x224x224`: the sizes of one input tensor joined by `x`; `0` and a lone size are fine.
_INPUT_SPEC = re.compile(r"[0-9]+(?:x[0-9]+)*")


class CommandError(Exception):
    """A problem the user can fix, said in one line: the command prints it and exits with 2."""


class _ModelBuildError(Exception):
    """The factory raised or returned something other than a model."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`) and return the exit status."""
    parser = build_parser()
    try:
        arguments = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse printed the help (0) or a usage error (2)
        return exit_request.code if isinstance(exit_request.code, int) else EXIT_ERROR
    try:
        status: int = arguments.run(arguments)
    except CommandError as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `fwdorder show ... | head`: the reader has all it wants
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout at exit
        return EXIT_SAME
    return status


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `fwdorder` and its `show` and `diff` commands."""
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
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Look at a PyTorch model's module calls in execution order, or compare "
        "two traces, without writing a test.",
        epilog="TARGET is a golden file (*.fwdorder.txt) or package.module:factory, where "
        "factory is a model class, a zero-argument function that returns the model, or a "
        "model; the current folder is searched first. Exit status: 0 equal (or shown), "
        "1 different, 2 usage or loading errors.",
    )
    parser.add_argument("--version", action="version", version=f"{PROGRAM} {_version()}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show",
        parents=[common],
        help="print the golden text of a model or a golden file",
        description="Print the golden text: a header of totals, then one line per module "
        "call in execution order.",
    )
    show.add_argument("target", metavar="TARGET")
    show.add_argument(
        "--depth",
        type=int,
        metavar="N",
        help="fold calls nested deeper than N into their parent (0: the root call only); "
        "the printed view only, the header still counts every call",
    )
    show.add_argument(
        "--sort",
        choices=COST_ORDERS,
        help="with --costs and a model TARGET: instead of the golden, a table of the calls "
        "that spend the most FLOPs, by FLOPs with children (flops) or outside them (own-flops)",
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
    _add_picture_options(show, trace=True)
    show.set_defaults(run=_show)
    diff = commands.add_parser(
        "diff",
        parents=[common],
        help="explain what changed from OLD to NEW",
        description="Print what changed from OLD to NEW: a summary, then the aligned calls "
        "(- old, + new) and the header lines that changed. Exit status 0 when equal, 1 when "
        "different.",
    )
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    _add_picture_options(diff, trace=False)
    diff.set_defaults(run=_diff)
    _add_review_commands(commands)
    _add_parity_command(commands, common)
    return parser


def _add_parity_command(commands: Any, common: argparse.ArgumentParser) -> None:
    parity = commands.add_parser(
        "parity",
        parents=[common],
        help="where a port first departs from a recorded reference",
        description="Run CANDIDATE on the inputs of REFERENCE (a file record_reference wrote, "
        "or a model run here on random --input tensors), pair their calls and print the "
        "first divergence and the error at every paired call. The reference's weights are "
        "copied into the candidate through the path map when it has them. Exit status 0 "
        "when it matches, 1 when it diverges.",
    )
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
    parity.set_defaults(run=_parity)


def _add_picture_options(parser: argparse.ArgumentParser, *, trace: bool) -> None:
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
        group.add_argument(
            "--svg-ops",
            action="store_true",
            help="with --svg: draw each call's operations (a golden traced with --ops)",
        )
        group.add_argument(
            "--svg-backward",
            action="store_true",
            help="with --svg: add a column of the backward steps (a golden traced with --backward)",
        )


def _add_color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the output: auto (the default) colours a terminal unless NO_COLOR is set",
    )


def _add_review_commands(commands: Any) -> None:
    """`review` and `git-diff`: golden changes as git sees them."""
    review = commands.add_parser(
        "review",
        help="explain every golden file that differs from a git base commit",
        description="Explain every golden file (**/__snapshots__/**/*.fwdorder.txt) that "
        "differs between BASE and the work tree (or --head REF): added, deleted, or changed "
        "with what changed, then a one-line total. Reads through git only; exit status 0 "
        "when none differs, 1 when some do.",
    )
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
    review.set_defaults(run=_review)
    git_diff = commands.add_parser(
        "git-diff",
        help="git's diff driver for golden files: explained diffs in git diff and git log -p",
        description="The external diff command git runs for golden files. Set it up with "
        '`git config diff.fwdorder.command "fwdorder git-diff"` and the .gitattributes '
        "line `*.fwdorder.txt diff=fwdorder`.",
    )
    git_diff.add_argument(
        "git_arguments",
        nargs="+",
        metavar="ARGUMENT",
        help="what git passes: path old-file old-hex old-mode new-file new-hex new-mode "
        "(and, for a rename, new-path and a message; for an unmerged path, the path only)",
    )
    _add_color_option(git_diff)
    git_diff.set_defaults(run=_git_diff)


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


def parse_input_spec(text: str) -> tuple[int, ...]:
    """`1x3x224x224` as (1, 3, 224, 224); raises CommandError for anything else."""
    if not _INPUT_SPEC.fullmatch(text):
        raise CommandError(
            f"bad --input {text!r}: write the sizes of one tensor joined by 'x', such as "
            "--input 1x3x224x224 (repeat --input for each input the model takes)"
        )
    return tuple(int(size) for size in text.split("x"))


def _show(arguments: argparse.Namespace) -> int:
    if arguments.coverage is not None:
        _write(_coverage_text(arguments) + "\n")
        return EXIT_SAME
    if arguments.sort is not None or arguments.top is not None:
        _write(_cost_table_text(arguments))
        return EXIT_SAME
    _check_picture_options(arguments)
    text = _golden_text(arguments.target, arguments)
    if arguments.depth is not None and arguments.depth < 0:
        raise CommandError(f"bad --depth {arguments.depth!r}: give 0 (the root call only) or more")
    if arguments.svg is not None:
        picture = golden_picture(
            text,
            rolled=not arguments.no_roll,
            depth=arguments.depth,
            operations=arguments.svg_ops,
            backward=arguments.svg_backward,
        )
        _write_picture(picture, arguments.svg, f"the picture of {arguments.target}")
        return EXIT_SAME
    if arguments.depth is not None:
        text = fold_golden(text, arguments.depth)
    _write(colorize_golden(text) if _use_color(arguments.color) else text)
    if arguments.export:
        return _show_export(arguments)
    return EXIT_SAME


def _show_export(arguments: argparse.Namespace) -> int:
    """`show --export`: the exported program's module calls against eager's, in words."""
    from pytest_fwdorder.checks.compile_gates import assert_export_matches_eager
    from pytest_fwdorder.recording.tracing import TensorSpec

    target = arguments.target
    if ":" not in target or Path(target).is_file():
        raise CommandError(
            f"--export needs a model TARGET (package.module:factory), got {target!r}"
        )
    model = _builder(target, _load_factory(target), train=arguments.train)()
    inputs = [
        TensorSpec(shape, dtype).materialize() for shape, dtype in _input_specs(target, arguments)
    ]
    try:
        assert_export_matches_eager(model, *inputs)
    except AssertionError as difference:
        _write(f"export: {difference}\n")
        return EXIT_DIFFERENT
    except Exception as error:  # export's own failure, with the note naming the module call
        notes = " ".join(getattr(error, "__notes__", []))
        raise CommandError(
            f"exporting {target} failed: {type(error).__name__}: {_one_line(error)} {notes}"
        ) from None
    _write("export (strict=False): the same module calls, order and output shapes as eager\n")
    return EXIT_SAME


def _coverage_text(arguments: argparse.Namespace) -> str:
    """`show --coverage PATTERN`: a model's classes by qualified name, a golden's by the
    names and children its call lines give."""
    target, pattern = arguments.target, arguments.coverage
    if Path(target).is_file() or ":" not in target:
        return golden_coverage(_golden_text(target, arguments), pattern).render()
    return coverage(_trace_model(target, _load_factory(target), arguments), pattern).render()


def _cost_table_text(arguments: argparse.Namespace) -> str:
    """`show --costs --sort flops`: the table of the calls that spend the most FLOPs."""
    target = arguments.target
    if arguments.sort is None:
        raise CommandError(f"--top {arguments.top!r} needs --sort, such as --sort flops")
    if arguments.top is not None and arguments.top < 1:
        raise CommandError(f"bad --top {arguments.top!r}: give 1 or more calls to list")
    if not arguments.costs:
        raise CommandError(
            f"--sort {arguments.sort} needs the costs: add --costs to trace {target} with them"
        )
    if Path(target).is_file() or ":" not in target:
        raise CommandError(
            f"--sort {arguments.sort} needs a model TARGET (package.module:factory), got "
            f"{target!r}: a golden file keeps no own FLOPs; show it without --sort"
        )
    trace = _trace_model(target, _load_factory(target), arguments)
    return cost_table(trace, arguments.sort, arguments.top)


def _diff(arguments: argparse.Namespace) -> int:
    _check_picture_options(arguments)
    old_text = _golden_text(arguments.old, arguments)
    new_text = _golden_text(arguments.new, arguments)
    difference = diff_golden(old_text, new_text)
    if arguments.svg is not None:
        picture = diff_picture(difference, rolled=not arguments.no_roll)
        _write_picture(
            picture,
            arguments.svg,
            f"the picture of the diff ({difference.summary().splitlines()[0]})",
        )
        return EXIT_DIFFERENT if difference else EXIT_SAME
    if not difference:
        _write("no differences\n")
        return EXIT_SAME
    lines = difference.explanation()
    _write("\n".join(colorize_diff(lines) if _use_color(arguments.color) else lines) + "\n")
    return EXIT_DIFFERENT


def _parity(arguments: argparse.Namespace) -> int:
    """`fwdorder parity REFERENCE CANDIDATE`: the report of assert_matches_reference."""
    from pytest_fwdorder.checks.parity import compare_with_reference
    from pytest_fwdorder.checks.parity_pairing import copy_mapped_weights

    path_map = None
    if arguments.path_map is not None:
        path_map = _load_factory(arguments.path_map)
        if not isinstance(path_map, dict):
            raise CommandError(
                f"--path-map {arguments.path_map!r} is a {type(path_map).__name__}, not a "
                "dict of reference path -> candidate path"
            )
    reference, weights = _parity_reference(arguments)
    candidate = _builder(
        arguments.candidate, _load_factory(arguments.candidate), train=arguments.train
    )
    try:
        model = candidate()
        if weights is not None and not arguments.keep_weights:
            copy_mapped_weights(weights, model, path_map)
        report = compare_with_reference(model, reference, path_map=path_map)
    except _ModelBuildError as error:
        raise CommandError(str(error)) from None
    except (TypeError, ValueError) as error:
        raise CommandError(_one_line(error)) from None
    _write(f"{report}\n")
    return EXIT_DIFFERENT if report.first_divergence is not None or not report.errors else EXIT_SAME


def _parity_reference(arguments: argparse.Namespace) -> tuple[Any, Any]:
    """The reference and where its weights come from (None when it has none)."""
    from pytest_fwdorder.checks.parity_reference import load_reference, record_reference

    target = arguments.reference
    if target.endswith(".safetensors"):
        try:
            reference = load_reference(target)
        except (OSError, ValueError) as error:
            raise CommandError(_one_line(error)) from None
        return reference, reference if reference.weights else None
    import torch

    generator = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(shape, generator=generator).to(dtype)
        if dtype.is_floating_point
        else torch.zeros(shape, dtype=dtype)
        for shape, dtype in _input_specs(target, arguments)
    ]
    model = _builder(target, _load_factory(target), train=arguments.train)
    try:
        built = model()
        return record_reference(built, *inputs), built
    except _ModelBuildError as error:
        raise CommandError(str(error)) from None


def _check_picture_options(arguments: argparse.Namespace) -> None:
    """The picture's options need `--svg`: without it they would do nothing, silently."""
    if arguments.svg is not None:
        return
    for flag in ("no_roll", "svg_ops", "svg_backward"):
        if getattr(arguments, flag, False):
            raise CommandError(
                f"--{flag.replace('_', '-')} changes the picture: add --svg out.svg to write one"
            )


def _write_picture(picture: Picture, target: str, what: str) -> None:
    """The SVG to standard output (`-`), or to a file and one line that says where."""
    if target == "-":
        _write(picture.svg)
        return
    try:
        picture.save(target)
    except OSError as error:
        raise CommandError(f"cannot write the picture to {target!r}: {error}") from None
    _write(f"{PROGRAM}: wrote {what} to {target}\n")


def _review(arguments: argparse.Namespace) -> int:
    try:
        review = collect_review(arguments.base, arguments.head)
    except ReviewError as error:
        raise CommandError(str(error)) from None
    if arguments.format == "markdown":
        _write(format_markdown(review))
    elif arguments.format == "json":
        _write(format_json(review))
    else:
        _write(format_text(review, color=_use_color(arguments.color)))
    return EXIT_DIFFERENT if review else EXIT_SAME


def _git_diff(arguments: argparse.Namespace) -> int:
    """Explain one golden's change, from the files git passes (`/dev/null`: not there)."""
    given = arguments.git_arguments
    if len(given) == 1:  # git's call for an unmerged path
        _write(f"{given[0]}: unmerged: resolve the conflict, then git diff explains it\n")
        return EXIT_SAME
    if len(given) not in (7, 9):
        raise CommandError(
            f"git-diff takes the 7 arguments git passes a diff driver (path old-file old-hex "
            f"old-mode new-file new-hex new-mode), got {len(given)}: {given!r}; set it up "
            'with git config diff.fwdorder.command "fwdorder git-diff"'
        )
    path, old_text, new_text = given[0], _driver_text(given[1]), _driver_text(given[4])
    renamed = [f"renamed from {path}"] if len(given) == 9 else []
    path = given[7] if renamed else path
    if old_text == new_text:  # a rename or a mode change: git calls the driver for those too
        _write("\n".join([f"{path}: the same golden text", *renamed]) + "\n")
        return EXIT_SAME
    lines = format_golden_text(
        explain_golden(path, old_text, new_text),
        color=_use_color(arguments.color, paged_by_git=True),
    )
    _write("\n".join([lines[0], *renamed, *lines[1:]]) + "\n")
    return EXIT_SAME


def _driver_text(file_name: str) -> str | None:
    if file_name == os.devnull or file_name == "/dev/null":
        return None
    try:
        return Path(file_name).read_bytes().decode("utf-8", errors="replace")
    except OSError as error:
        raise CommandError(f"cannot read {file_name!r}, which git passed: {error}") from None


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("pytest-fwdorder")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        from pytest_fwdorder import __version__

        return __version__


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        # A console or redirect whose encoding lacks a character of a module name (cp1252 and
        # a CJK name): write "?" for it rather than fail after the work is done.
        encoding = sys.stdout.encoding or "ascii"
        sys.stdout.write(text.encode(encoding, errors="replace").decode(encoding))
    sys.stdout.flush()


def _use_color(choice: str, *, paged_by_git: bool = False) -> bool:
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):  # https://no-color.org: present and not empty
        return False
    # git pipes a diff driver's output into its pager, and colours when it pages, as we do.
    if paged_by_git and os.environ.get("GIT_PAGER_IN_USE", "").lower() in ("1", "true"):
        return True
    return sys.stdout.isatty()


def _golden_text(target: str, arguments: argparse.Namespace) -> str:
    """The golden text of a TARGET: read from a golden file, or traced from a model."""
    path = Path(target)
    if path.is_file():
        return _read_golden(path)
    if ":" not in target or target.endswith(".txt"):
        raise CommandError(
            f"TARGET {target!r} is neither a file nor package.module:factory: give the path "
            "of a golden file (*.fwdorder.txt), or a model such as torchvision.models:resnet50"
        )
    return _trace_text(target, _load_factory(target), arguments)


def _read_golden(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"cannot read the golden file {str(path)!r}: {error}") from None
    from pytest_fwdorder.snapshot.policy import conflict_problem

    problem = conflict_problem(text) or (format_problem(text) if not text.strip() else None)
    if problem is not None:
        raise CommandError(f"{str(path)!r} {problem}")
    version = format_version(text)
    if version is None:
        first_line = text.split("\n", 1)[0][:80]
        raise CommandError(
            f"{str(path)!r} is not a pytest-fwdorder golden file: its first line is "
            f"{first_line!r}, not '# pytest-fwdorder trace (format {FORMAT_VERSION})'"
        )
    problem = format_problem(text)
    if problem is not None:
        raise CommandError(f"{str(path)!r} {problem}")
    return text


@contextlib.contextmanager
def _current_folder_importable() -> Iterator[None]:
    """Let `mymodels:build` import from the current folder, as `python -m` would."""
    folder = os.getcwd()
    added = folder not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added:
            sys.path.remove(folder)


def _load_factory(target: str) -> Any:
    """The object `package.module:factory` names; CommandError when it cannot be found."""
    module_name, _, attribute_path = target.partition(":")
    if not module_name or not attribute_path:
        raise CommandError(
            f"TARGET {target!r} must be package.module:factory, such as torchvision.models:resnet50"
        )
    try:
        with _current_folder_importable():
            value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise CommandError(
            f"cannot import {module_name!r} for TARGET {target!r}: {error}; check the name, "
            "and run from the folder that holds it or put that folder on PYTHONPATH"
        ) from None
    except Exception as error:
        raise CommandError(
            f"importing {module_name!r} for TARGET {target!r} failed: "
            f"{type(error).__name__}: {_first_line(error)}"
        ) from None
    owner = module_name
    for name in attribute_path.split("."):
        if not hasattr(value, name):
            close = difflib.get_close_matches(name, dir(value), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise CommandError(f"{owner!r} has no attribute {name!r} (TARGET {target!r}){hint}")
        value, owner = getattr(value, name), f"{owner}.{name}"
    return value


def _trace_text(target: str, factory: Any, arguments: argparse.Namespace) -> str:
    """Build the model `factory` makes, trace it on the `--input` tensors, render the trace."""
    return _trace_model(target, factory, arguments).render()


def _trace_model(target: str, factory: Any, arguments: argparse.Namespace) -> Trace:
    """Build the model `factory` makes and trace it on the `--input` tensors."""
    from pytest_fwdorder.errors import MetaTraceError
    from pytest_fwdorder.recording.tracing import TensorSpec, trace_forward

    options = _trace_options(arguments)
    inputs = [TensorSpec(shape, dtype) for shape, dtype in _input_specs(target, arguments)]
    builder = _builder(target, factory, train=arguments.train)
    described = ", ".join(arguments.input)
    try:
        trace = trace_forward(builder, *inputs, **options.as_arguments())
    except _ModelBuildError as error:
        raise CommandError(str(error)) from None
    except MetaTraceError as error:
        if isinstance(error.__cause__, _ModelBuildError):
            raise CommandError(str(error.__cause__)) from None
        raise CommandError(
            f"tracing {target} on the meta device failed: {_one_line(error)}"
        ) from None
    except Exception as error:  # the model's own failure, said in one line
        raise CommandError(
            f"running {target} on inputs {described} failed: {type(error).__name__}: "
            f"{_one_line(error)}"
        ) from None
    return trace


def _trace_options(arguments: argparse.Namespace) -> TraceOptions:
    values = {option.name: option.from_flags(getattr(arguments, option.name)) for option in OPTIONS}
    if values["device"] is not None:
        _check_device(values["device"])
    try:
        return TraceOptions(**values)
    except (TypeError, ValueError) as error:
        raise CommandError(str(error).replace("TraceOptions: ", "", 1)) from None


def _check_device(device: str) -> None:
    import torch

    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise CommandError(
            f"bad --device {device!r}: not a torch device; use cpu, meta or cuda"
        ) from None


def _input_specs(target: str, arguments: argparse.Namespace) -> list[tuple[tuple[int, ...], Any]]:
    """Each --input's sizes with its dtype."""
    import torch

    if not arguments.input:
        raise CommandError(
            f"TARGET {target!r} is a model: give its input sizes, such as --input 1x3x224x224"
        )
    shapes = [parse_input_spec(text) for text in arguments.input]
    names = arguments.input_dtype or ["float32"]
    if len(names) == 1:
        names = names * len(shapes)
    if len(names) != len(shapes):
        raise CommandError(
            f"{len(arguments.input_dtype)} --input-dtype for {len(shapes)} --input: give one "
            "dtype for every input, or one per --input in order"
        )
    dtypes = []
    for name in names:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise CommandError(
                f"bad --input-dtype {name!r}: use a torch dtype name such as float32, "
                "float16, bfloat16 or int64"
            )
        dtypes.append(dtype)
    return list(zip(shapes, dtypes, strict=True))


def _builder(target: str, factory: Any, *, train: bool) -> Callable[[], nn.Module]:
    """A zero-argument function that builds the model with `factory` and sets its mode."""
    from torch import nn

    if not isinstance(factory, nn.Module):
        if not callable(factory):
            raise CommandError(
                f"TARGET {target!r} is a {type(factory).__name__}, not a model class, a "
                "zero-argument function that builds a model, or a model"
            )
        required = _required_parameters(factory)
        if required:
            raise CommandError(
                f"TARGET {target!r} needs arguments to build the model "
                f"({', '.join(required)}): point TARGET at a zero-argument function that "
                "builds it, such as def build(): return Net(num_classes=10)"
            )

    def build() -> nn.Module:
        if isinstance(factory, nn.Module):
            model = factory
        else:
            try:
                model = factory()
            except Exception as error:
                raise _ModelBuildError(
                    f"building the model with {target}() failed: {type(error).__name__}: "
                    f"{_first_line(error)}"
                ) from error
            except SystemExit as exit_request:  # sys.exit(0) must not read as "no differences"
                raise _ModelBuildError(
                    f"building the model with {target}() failed: it called sys.exit() "
                    "instead of returning a model: point TARGET at a function that returns "
                    "the model"
                ) from exit_request
        if not isinstance(model, nn.Module):
            raise _ModelBuildError(
                f"{target}() returned {type(model).__name__!r}, not an nn.Module: point "
                "TARGET at a function that returns the model"
            )
        return model.train(train)

    build.__qualname__ = target
    return build


def _required_parameters(factory: Callable[..., object]) -> list[str]:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins without a readable signature: just call it
        return []
    return [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]


def _first_line(error: BaseException) -> str:
    return str(error).strip().split("\n", 1)[0]


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
