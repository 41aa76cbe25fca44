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
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_fwdorder.cli.parser import PROGRAM, build_parser
from pytest_fwdorder.cli.targets import (
    CommandError,
    ModelBuildError,
    golden_text,
    input_specs,
    load_factory,
    model_builder,
    one_line,
    traced_target,
)
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.golden.folding import colorize_diff, colorize_golden, fold_golden
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.hookspecs import trace_facets
from pytest_fwdorder.picture.svg import Picture, diff_picture, golden_picture
from pytest_fwdorder.report.coverage_table import coverage, golden_coverage
from pytest_fwdorder.report.git_review import ReviewError, collect_review, explain_golden
from pytest_fwdorder.report.review_format import (
    format_golden_text,
    format_json,
    format_markdown,
    format_text,
)

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`) and return the exit status."""
    parser = build_parser()
    try:
        arguments = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse printed the help (0) or a usage error (2)
        return exit_request.code if isinstance(exit_request.code, int) else EXIT_ERROR
    try:
        status: int = _COMMANDS[arguments.command](arguments)
    except CommandError as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `fwdorder show ... | head`: the reader has all it wants
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout at exit
        return EXIT_SAME
    return status


def _show(arguments: argparse.Namespace) -> int:
    if arguments.coverage is not None:
        _write(_coverage_text(arguments) + "\n")
        return EXIT_SAME
    if arguments.sort is not None or arguments.top is not None:
        _write(_table_text(arguments))
        return EXIT_SAME
    _check_picture_options(arguments)
    text = golden_text(arguments.target, arguments)
    if arguments.depth is not None and arguments.depth < 0:
        raise CommandError(f"bad --depth {arguments.depth!r}: give 0 (the root call only) or more")
    if arguments.svg is not None:
        picture = golden_picture(
            text,
            rolled=not arguments.no_roll,
            depth=arguments.depth,
            under=arguments.svg_under,
            sections=arguments.svg_sections,
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
    from pytest_fwdorder.tracing.forward import TensorSpec

    target = arguments.target
    if ":" not in target or Path(target).is_file():
        raise CommandError(
            f"--export needs a model TARGET (package.module:factory), got {target!r}"
        )
    model = model_builder(target, load_factory(target), train=arguments.train)()
    inputs = [
        TensorSpec(shape, dtype).materialize() for shape, dtype in input_specs(target, arguments)
    ]
    try:
        assert_export_matches_eager(model, *inputs)
    except AssertionError as difference:
        _write(f"export: {difference}\n")
        return EXIT_DIFFERENT
    except Exception as error:  # export's own failure, with the note naming the module call
        notes = " ".join(getattr(error, "__notes__", []))
        raise CommandError(
            f"exporting {target} failed: {type(error).__name__}: {one_line(error)} {notes}"
        ) from None
    _write("export (strict=False): the same module calls, order and output shapes as eager\n")
    return EXIT_SAME


def _coverage_text(arguments: argparse.Namespace) -> str:
    """`show --coverage PATTERN`: a model's classes by qualified name, a golden's by the
    names and children its call lines give."""
    target, pattern = arguments.target, arguments.coverage
    if Path(target).is_file() or ":" not in target:
        return golden_coverage(golden_text(target, arguments), pattern).render()
    return coverage(traced_target(target, load_factory(target), arguments), pattern).render()


def _table_text(arguments: argparse.Namespace) -> str:
    """`show --costs --sort flops`: the table of the calls ranked by an order a registered
    facet offers (`table_orders`: the costs' FLOPs), from a trace with that facet."""
    target, order = arguments.target, arguments.sort
    tabled: list[Any] = [
        facet for facet in trace_facets(FACT_TITLES) if hasattr(facet, "table_orders")
    ]
    if order is None:
        example = next((name for facet in tabled for name in facet.table_orders), "ORDER")
        raise CommandError(f"--top {arguments.top!r} needs --sort, such as --sort {example}")
    if arguments.top is not None and arguments.top < 1:
        raise CommandError(f"bad --top {arguments.top!r}: give 1 or more calls to list")
    facet = next(facet for facet in tabled if order in facet.table_orders)
    if not getattr(arguments, facet.option, False):
        option = facet.option.replace("_", "-")
        raise CommandError(
            f"--sort {order} needs the {facet.title}: add --{option} to trace {target} with them"
        )
    if Path(target).is_file() or ":" not in target:
        raise CommandError(
            f"--sort {order} needs a model TARGET (package.module:factory), got "
            f"{target!r}: the table is made from a trace, not a golden file; show the golden "
            "without --sort"
        )
    trace = traced_target(target, load_factory(target), arguments)
    table: str = facet.table(trace.trace_facet_values[facet.title], trace, order, arguments.top)
    return table


def _diff(arguments: argparse.Namespace) -> int:
    _check_picture_options(arguments)
    old_text = golden_text(arguments.old, arguments)
    new_text = golden_text(arguments.new, arguments)
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
        path_map = load_factory(arguments.path_map)
        if not isinstance(path_map, dict):
            raise CommandError(
                f"--path-map {arguments.path_map!r} is a {type(path_map).__name__}, not a "
                "dict of reference path -> candidate path"
            )
    reference, weights = _parity_reference(arguments)
    candidate = model_builder(
        arguments.candidate, load_factory(arguments.candidate), train=arguments.train
    )
    try:
        model = candidate()
        if weights is not None and not arguments.keep_weights:
            copy_mapped_weights(weights, model, path_map)
        report = compare_with_reference(model, reference, path_map=path_map)
    except ModelBuildError as error:
        raise CommandError(str(error)) from None
    except (TypeError, ValueError) as error:
        raise CommandError(one_line(error)) from None
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
            raise CommandError(one_line(error)) from None
        return reference, reference if reference.weights else None
    import torch

    generator = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(shape, generator=generator).to(dtype)
        if dtype.is_floating_point
        else torch.zeros(shape, dtype=dtype)
        for shape, dtype in input_specs(target, arguments)
    ]
    model = model_builder(target, load_factory(target), train=arguments.train)
    try:
        built = model()
        return record_reference(built, *inputs), built
    except ModelBuildError as error:
        raise CommandError(str(error)) from None


def _check_picture_options(arguments: argparse.Namespace) -> None:
    """The picture's options need `--svg`: without it they would do nothing, silently."""
    if arguments.svg is not None:
        return
    flags = ["no_roll"] if getattr(arguments, "no_roll", False) else []
    # A facet's lines under the calls or section column is asked for by `--svg-TITLE`.
    flags += [f"svg_{title}" for title in getattr(arguments, "svg_under", [])]
    flags += [f"svg_{title}" for title in getattr(arguments, "svg_sections", [])]
    if flags:
        raise CommandError(
            f"--{flags[0].replace('_', '-').replace(' ', '-')} changes the picture: add --svg "
            "out.svg to write one"
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


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "show": _show,
    "diff": _diff,
    "review": _review,
    "git-diff": _git_diff,
    "parity": _parity,
}
