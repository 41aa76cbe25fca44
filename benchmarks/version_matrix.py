"""The torch version matrix: the zoo and the examples traced under other torch releases,
compared with the committed goldens, the differing lines counted by cause.

    python benchmarks/version_matrix.py --python /tmp/matrix/t28/bin/python \\
        --python /tmp/matrix/t215/bin/python [--models N] [--examples 3]

Each interpreter runs this file again as a worker (`--worker`), with the repository on
PYTHONPATH, so the package under test is this checkout and `same_model` reads that
interpreter's torch. Models are traced as their tests trace them: the zoo from
tests/zoo/catalogue.py under `torch.no_grad()`, the examples with the `forward_trace`
fixture's defaults. Without `--python` only this interpreter runs.

A model counts as byte-equal when its rendered text equals the committed golden, the
`# written with:` line left out (the committed goldens predate it, and no comparison reads
it), and as equal under the rule when `same_model` says so, as the snapshot extension
compares. Differing lines come from difflib over lines, a changed line counted once; each is
put down to one cause, before the rule (the texts as written) and after it (the texts
`comparable_text` compares).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[1]
ZOO_GOLDENS = REPOSITORY / "tests" / "zoo" / "__snapshots__" / "test_torchvision_zoo"
EXAMPLE_GOLDENS = REPOSITORY / "examples" / "__snapshots__"
_ZOO_GOLDEN_NAME = re.compile(r"test_model\[(?P<name>.+)\]\.fwdorder\.txt")
_SETTINGS_FACT = "| settings: "


class Cause(StrEnum):
    """Why a line of a golden differs from the text traced now."""

    SETTINGS_AT_DEFAULT = "settings: argument at default / not taken"
    SETTINGS_VALUE = "settings: a value changed"
    SHAPES = "shapes"
    CALLS = "calls (inserted/removed/renamed)"
    HEADER = "header totals"
    OTHER = "other"


class Outcome(StrEnum):
    """What became of one model under one interpreter."""

    BYTE_EQUAL = "byte-equal"
    SAME_MODEL = "equal under the rule"
    DIFFERS = "differs after the rule"
    NOT_IN_TORCHVISION = "not in this torchvision"
    FAILED = "failed to build or trace"


@dataclass
class ModelResult:
    """One model's comparison with its golden, as the worker sends it back."""

    suite: str  # "zoo" or "examples"
    name: str
    outcome: Outcome
    seconds: float = 0.0
    problem: str = ""
    # [cause, "- old line", "+ new line"] per differing line, before and after the rule.
    before: list[list[str]] = field(default_factory=list)
    after: list[list[str]] = field(default_factory=list)


# -- what both benchmark scripts need: the models, traced as their tests trace them ----------


def zoo_golden_paths(
    limit: int | None = None, first: Callable[[str], bool] | None = None
) -> dict[str, Path]:
    """{model name: committed golden} for the zoo, smallest goldens first.

    With `limit`, only that many: the smallest goldens, so a smoke run stays quick; `first`
    puts the names it accepts ahead of the others (the quantized models, for stability).
    """
    paths = {}
    for path in ZOO_GOLDENS.glob("*.fwdorder.txt"):
        matched = _ZOO_GOLDEN_NAME.fullmatch(path.name)
        if matched:
            paths[matched["name"]] = path
    ordered = sorted(
        paths,
        key=lambda name: (not first(name) if first else False, paths[name].stat().st_size, name),
    )
    return {name: paths[name] for name in ordered[:limit]}


def quiet_warnings() -> None:
    """Silence what the zoo's tests filter (deprecated quantization APIs, uncalibrated
    observers) and what old releases emit, so a worker's output is its result alone."""
    warnings.simplefilter("ignore")


def trace_zoo_model(name: str) -> str:
    """The zoo model's golden text as tests/zoo/test_torchvision_zoo.py traces it."""
    import torch

    sys.path.insert(0, str(REPOSITORY / "tests" / "zoo"))
    from catalogue import case

    from pytest_fwdorder import trace_forward

    zoo_case = case(name)
    model = zoo_case.build()
    with torch.no_grad():
        return trace_forward(model, *zoo_case.real_inputs()).render()


def _example_builders() -> dict[str, Callable[[], str]]:
    """{golden path under examples/__snapshots__: trace}, as each example test traces."""
    import torch
    import torchvision

    sys.path.insert(0, str(REPOSITORY / "examples"))
    from test_finetune_surgery import adapt_resnet18
    from test_sequential import Classifier

    from pytest_fwdorder.tracing.forward import Tracer

    forward_trace = Tracer()  # the fixture without markers or ini options, as the examples run
    return {
        "test_finetune_surgery/test_adapted_resnet18.fwdorder.txt": lambda: forward_trace(
            adapt_resnet18().eval(), torch.randn(2, 1, 64, 64)
        ).render(),
        "test_resnet50/test_resnet50_execution_structure.fwdorder.txt": lambda: forward_trace(
            torchvision.models.resnet50(weights=None).eval(), torch.randn(1, 3, 224, 224)
        ).render(),
        "test_sequential/test_sequential_classifier.fwdorder.txt": lambda: forward_trace(
            Classifier().eval(), torch.randn(4, 3, 32, 32), temperature=2.0
        ).render(),
    }


# -- the comparison, in the worker -----------------------------------------------------------


def differing_lines(
    old_text: str, new_text: str, settled: Callable[[int | None, int | None], bool]
) -> list[list[str]]:
    """[cause, old line, new line] for each line difflib finds changed, inserted or removed.

    A changed line is one entry with both sides; `settled(old_index, new_index)` says whether
    the rule makes that entry's lines equal, which makes it "argument at default".
    """
    old_lines, new_lines = old_text.splitlines(), new_text.splitlines()
    entries = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            continue
        for offset in range(max(old_end - old_start, new_end - new_start)):
            old_index = old_start + offset if old_start + offset < old_end else None
            new_index = new_start + offset if new_start + offset < new_end else None
            old_line = old_lines[old_index] if old_index is not None else ""
            new_line = new_lines[new_index] if new_index is not None else ""
            cause = line_cause(old_line, new_line)
            if cause is Cause.SETTINGS_VALUE and settled(old_index, new_index):
                cause = Cause.SETTINGS_AT_DEFAULT
            entries.append([cause.value, old_line, new_line])
    return entries


def line_cause(old_line: str, new_line: str) -> Cause:
    """The cause of one differing line, from what kind of golden line it is."""
    from pytest_fwdorder.golden.facet_facts import call_line_marks
    from pytest_fwdorder.golden.format import FACT_PREFIX
    from pytest_fwdorder.golden.parse import parse_call_line

    lines = [line for line in (old_line, new_line) if line]
    stripped = [line.lstrip(" ") for line in lines]
    if all(line.startswith("#") for line in lines):
        return Cause.HEADER
    if all(line.startswith(_SETTINGS_FACT) for line in stripped):
        return Cause.SETTINGS_VALUE
    is_call = [
        not line.startswith("#") and not text.startswith((FACT_PREFIX, *call_line_marks()))
        for line, text in zip(lines, stripped, strict=True)
    ]
    if not all(is_call):
        return Cause.OTHER
    if len(lines) == 1:
        return Cause.CALLS
    old_call, new_call = (parse_call_line(line) for line in lines)
    if (old_call.depth, old_call.identity, old_call.module_type) != (
        new_call.depth,
        new_call.identity,
        new_call.module_type,
    ):
        return Cause.CALLS
    if (old_call.inputs, old_call.outputs) != (new_call.inputs, new_call.outputs):
        return Cause.SHAPES
    return Cause.OTHER


def compare_with_golden(suite: str, name: str, golden: str, traced: str) -> ModelResult:
    """How the traced text compares with its golden, before and after the rule."""
    from pytest_fwdorder.golden.upgrades import (
        comparable_text,
        same_model,
        with_environment,
        without_environment,
    )

    old_text = without_environment(golden)
    if traced == old_text:
        return ModelResult(suite, name, Outcome.BYTE_EQUAL)
    # What the snapshot extension compares: the golden with the text it would write now.
    equal = same_model(golden, with_environment(traced))
    old_comparable, new_comparable = comparable_text(old_text), comparable_text(traced)
    matcher = difflib.SequenceMatcher(
        None, old_comparable.splitlines(), new_comparable.splitlines(), autojunk=False
    )
    unsettled_old: set[int] = set()
    unsettled_new: set[int] = set()
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag != "equal":
            unsettled_old.update(range(old_start, old_end))
            unsettled_new.update(range(new_start, new_end))

    def settled(old_index: int | None, new_index: int | None) -> bool:
        return old_index not in unsettled_old and new_index not in unsettled_new

    return ModelResult(
        suite,
        name,
        Outcome.SAME_MODEL if equal else Outcome.DIFFERS,
        before=differing_lines(old_text, traced, settled),
        after=differing_lines(old_comparable, new_comparable, lambda *_: False),
    )


def compared_models(limit: int | None) -> Iterator[ModelResult]:
    """Every zoo model (the first `limit`) and every example, traced and compared."""
    import torchvision

    available = set(torchvision.models.list_models())
    cases: list[tuple[str, str, Path, Callable[[], str] | None]] = [
        (
            "zoo",
            name,
            path,
            partial(trace_zoo_model, name) if name in available else None,
        )
        for name, path in zoo_golden_paths(limit).items()
    ]
    cases += [
        ("examples", name.partition("/")[0], EXAMPLE_GOLDENS / name, trace)
        for name, trace in _example_builders().items()
    ]
    for suite, name, golden_path, trace in cases:
        if trace is None:
            yield ModelResult(suite, name, Outcome.NOT_IN_TORCHVISION)
            continue
        start = time.perf_counter()
        try:
            traced = trace()
        except Exception as error:  # an old torchvision's builder may reject our arguments
            problem = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            yield ModelResult(suite, name, Outcome.FAILED, problem=problem)
            continue
        result = compare_with_golden(suite, name, golden_path.read_text(), traced)
        result.seconds = round(time.perf_counter() - start, 2)
        yield result


def run_worker(limit: int | None, output: Path) -> None:
    """Trace and compare everything under this interpreter; write the results as JSON."""
    quiet_warnings()
    import torch
    import torchvision

    results = [asdict(result) for result in compared_models(limit)]
    summary = {
        "torch": torch.__version__.partition("+")[0],
        "torchvision": torchvision.__version__.partition("+")[0],
        "python": sys.executable,
        "results": results,
    }
    output.write_text(json.dumps(summary))


# -- the parent: one worker per interpreter, then the table ---------------------------------


def run_interpreter(python: str, limit: int | None) -> dict[str, Any]:
    """Run the worker under `python` and read back its results, with its wall time."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPOSITORY), *filter(None, [environment.get("PYTHONPATH")])]
    )
    environment["PYTHONWARNINGS"] = "ignore"
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "results.json"
        command = [python, str(Path(__file__).resolve()), "--worker", "--output", str(output)]
        if limit is not None:
            command += ["--models", str(limit)]
        start = time.perf_counter()
        finished = subprocess.run(
            command, env=environment, capture_output=True, text=True, check=False
        )
        if finished.returncode != 0 or not output.exists():
            raise SystemExit(
                f"the worker under {python!r} failed with exit status {finished.returncode}: "
                f"{finished.stderr[-2000:]}\ncheck that this interpreter has torch, torchvision "
                "and syrupy installed"
            )
        summary: dict[str, Any] = json.loads(output.read_text())
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return summary


_BEFORE = list(Cause)
_AFTER = [cause for cause in Cause if cause is not Cause.SETTINGS_AT_DEFAULT]
_SHORT = {
    Cause.SETTINGS_AT_DEFAULT: "default",
    Cause.SETTINGS_VALUE: "value",
    Cause.SHAPES: "shapes",
    Cause.CALLS: "calls",
    Cause.HEADER: "header",
    Cause.OTHER: "other",
}


def table_rows(summaries: list[dict[str, Any]]) -> list[list[str]]:
    """One row per torch release and suite: models, outcomes, lines by cause."""
    rows = []
    for summary in summaries:
        for suite in ("zoo", "examples"):
            results = [result for result in summary["results"] if result["suite"] == suite]
            outcomes = Counter(result["outcome"] for result in results)
            before = Counter(line[0] for result in results for line in result["before"])
            after = Counter(line[0] for result in results for line in result["after"])
            byte_equal = outcomes[Outcome.BYTE_EQUAL]
            rows.append(
                [
                    summary["torch"],
                    summary["torchvision"],
                    suite,
                    str(len(results)),
                    str(byte_equal),
                    str(byte_equal + outcomes[Outcome.SAME_MODEL]),
                    str(outcomes[Outcome.NOT_IN_TORCHVISION]),
                    str(outcomes[Outcome.FAILED]),
                    " ".join(str(before[cause]) for cause in _BEFORE),
                    str(sum(before.values())),
                    " ".join(str(after[cause]) for cause in _AFTER),
                    str(sum(after.values())),
                    f"{summary['seconds']:.0f}",
                ]
            )
    return rows


def print_table(rows: list[list[str]]) -> None:
    heading = [
        "torch",
        "vision",
        "suite",
        "models",
        "byte-equal",
        "same_model",
        "not in tv",
        "failed",
        "lines before: " + " ".join(_SHORT[cause] for cause in _BEFORE),
        "total",
        "lines after: " + " ".join(_SHORT[cause] for cause in _AFTER),
        "total",
        "s",
    ]
    widths = [max(len(row[column]) for row in [heading, *rows]) for column in range(len(heading))]
    for row in [heading, *rows]:
        print("  ".join(value.rjust(width) for value, width in zip(row, widths, strict=True)))


def print_details(summaries: list[dict[str, Any]], examples: int) -> None:
    """Examples of each cause before the rule, and every line that differs after it."""
    for summary in summaries:
        release = f"torch {summary['torch']} / torchvision {summary['torchvision']}"
        results = summary["results"]
        for result in results:
            if result["outcome"] in (Outcome.NOT_IN_TORCHVISION, Outcome.FAILED):
                print(
                    f"\n{release}: {result['suite']} {result['name']}: {result['outcome']}"
                    + (f" ({result['problem']})" if result["problem"] else "")
                )
        for cause in Cause:
            shown = [
                (result["name"], line)
                for result in results
                for line in result["before"]
                if line[0] == cause
            ]
            if shown:
                print(f"\n{release}, before the rule, {cause} ({len(shown)} lines), e.g.:")
                for name, (_, old_line, new_line) in shown[:examples]:
                    print(f"  {name}:\n    - {old_line.strip()}\n    + {new_line.strip()}")
        remaining = [result for result in results if result["after"]]
        if remaining:
            print(f"\n{release}, every line that still differs after the rule:")
        for result in remaining:
            print(f"  {result['suite']} {result['name']}:")
            for cause, old_line, new_line in result["after"]:
                print(f"    [{cause}]\n      - {old_line.strip()}\n      + {new_line.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python",
        action="append",
        help="an interpreter with a torch release to measure (repeat; default: this one)",
    )
    parser.add_argument(
        "--models", type=int, help="only the N zoo models with the smallest goldens"
    )
    parser.add_argument("--examples", type=int, default=3, help="example lines shown per cause")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        run_worker(arguments.models, arguments.output)
        return
    summaries = []
    for python in arguments.python or [sys.executable]:
        summaries.append(run_interpreter(python, arguments.models))
        print(
            f"measured {python}: torch {summaries[-1]['torch']}, {summaries[-1]['seconds']} s",
            flush=True,
        )
    print(
        "\nlines by cause: default = settings: argument at default / not taken, value = settings: "
        "a value changed, shapes, calls (inserted/removed/renamed), header totals, other\n"
    )
    print_table(table_rows(summaries))
    print_details(summaries, arguments.examples)


if __name__ == "__main__":
    main()
