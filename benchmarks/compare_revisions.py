"""Two revisions of pytest-fwdorder side by side: the overhead rows, rounds interleaved.

    python benchmarks/compare_revisions.py main            # this tree vs main
    python benchmarks/compare_revisions.py main --rounds 41 --smoke
    python benchmarks/compare_revisions.py main --only ResNet   # the rows whose case names this
    python benchmarks/compare_revisions.py main --scale --only 100,001 --rounds 5
    python benchmarks/compare_revisions.py HEAD~1 --new HEAD    # one commit against its parent

The baseline revision is exported with `git archive` into a temporary folder. One worker
process per revision builds the same models (same seeds); the driver asks them for one
round each in turn (bare forward, the global-hook floor, trace_forward), alternating which
goes first, so a noisy neighbour slows both alike. Rows: medians per revision, microseconds
per call above the floor, traced / bare, and new / old.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def worker_cases(smoke: bool, scale: bool = False) -> dict[str, tuple[object, object]]:
    """The models of the overhead rows, with their inputs, built in a worker process; with
    `scale`, also scale.py's 100,001-call model (its trace alone: the renders and the
    comparison of its `linear_time` row are not the recorder's)."""
    import torch
    import torchvision
    from models import TinyGPT2, tiny_modules

    torch.manual_seed(0)
    if smoke:
        return {
            "tiny modules, 41 calls": (tiny_modules(20).eval(), torch.randn(1, 16)),
            "ResNet-18, 1x3x32x32": (
                torchvision.models.resnet18(weights=None).eval(),
                torch.randn(1, 3, 32, 32),
            ),
        }
    return {
        "tiny modules, 801 calls": (tiny_modules(400).eval(), torch.randn(1, 16)),
        "GPT-2-shaped decoder, 2 layers, 1x16 tokens": (
            TinyGPT2().eval(),
            torch.randint(0, 1000, (1, 16)),
        ),
        "ResNet-50, 1x3x224x224": (
            torchvision.models.resnet50(weights=None).eval(),
            torch.randn(1, 3, 224, 224),
        ),
        **(
            {"tiny modules, 100,001 calls": (tiny_modules(50_000).eval(), torch.randn(1, 16))}
            if scale
            else {}
        ),
    }


# Wall time, or the process's CPU time: on a shared machine the second leaves out the time
# other processes held the cores, which wall time counts for whichever revision was running.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def worker(smoke: bool, clock: str, threads: int | None, scale: bool) -> None:
    """Answer `round CASE` with one timing of each candidate, as a JSON line on stdout."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)

    import pytest_fwdorder
    from pytest_fwdorder import trace_forward

    # The revision's own benchmark helpers (models, the floor), next to its package.
    sys.path.insert(0, str(Path(pytest_fwdorder.__file__).resolve().parents[1] / "benchmarks"))
    from run import global_noop_hooks

    cases = worker_cases(smoke, scale)
    candidates: dict[str, dict[str, Callable[[], object]]] = {}
    calls: dict[str, int] = {}
    for name, (model, inputs) in cases.items():

        def bare(model: object = model, inputs: object = inputs) -> object:
            with torch.no_grad():
                return model(inputs)  # type: ignore[operator]

        def floor(model: object = model, inputs: object = inputs) -> object:
            with global_noop_hooks(), torch.no_grad():
                return model(inputs)  # type: ignore[operator]

        def traced(model: object = model, inputs: object = inputs) -> object:
            with torch.no_grad():
                return trace_forward(model, inputs)  # type: ignore[arg-type]

        candidates[name] = {"bare": bare, "floor": floor, "traced": traced}
        calls[name] = len(trace_forward(model, inputs))  # type: ignore[arg-type]
        for run in candidates[name].values():  # warm-up: lazy imports, first-call caches
            run()
    print(json.dumps({"package": pytest_fwdorder.__file__, "calls": calls}), flush=True)
    for round_index, line in enumerate(sys.stdin):
        command, _, case = line.strip().partition(" ")
        if command != "round":
            break
        timings = {}
        order = list(candidates[case].items())
        for candidate, run in order if round_index % 2 == 0 else order[::-1]:
            start = CLOCKS[clock]()
            run()
            timings[candidate] = CLOCKS[clock]() - start
        print(json.dumps(timings), flush=True)


def export_revision(revision: str, into: Path) -> Path:
    """The package tree of `revision`, exported with git archive (no worktree touched)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "tree.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), revision],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def start_worker(
    package_root: Path, smoke: bool, options: list[str]
) -> tuple[subprocess.Popen[str], dict[str, object]]:
    environment = {**os.environ, "PYTHONPATH": str(package_root)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", *options]
    if smoke:
        command.append("--smoke")
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(
            f"the worker for {package_root} exited before it was ready (its error is above): "
            "a baseline too old for this script, or a broken tree"
        )
    return process, json.loads(line)


def ask_round(process: subprocess.Popen[str], case: str) -> dict[str, float]:
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(f"round {case}\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())  # type: ignore[no-any-return]


def compare(
    baseline: str,
    rounds: int,
    smoke: bool,
    options: list[str],
    only: list[str] | None = None,
    new: str | None = None,
) -> None:
    with tempfile.TemporaryDirectory(prefix="fwdorder-baseline-") as folder:
        old_root = export_revision(baseline, Path(folder) / "old")
        new_root = ROOT if new is None else export_revision(new, Path(folder) / "new")
        workers = {
            "old": start_worker(old_root, smoke, options),
            "new": start_worker(new_root, smoke, options),
        }
        for label, (_, header) in workers.items():
            print(f"{label}: {header['package']}")
        calls: dict[str, int] = workers["new"][1]["calls"]  # type: ignore[assignment]
        if only:
            calls = {
                case: count for case, count in calls.items() if any(map(case.__contains__, only))
            }
        samples = {
            (label, case, candidate): []
            for label in workers
            for case in calls
            for candidate in ("bare", "floor", "traced")
        }
        for round_index in range(rounds):
            for case in calls:
                labels = ["old", "new"] if round_index % 2 == 0 else ["new", "old"]
                for label in labels:
                    for candidate, seconds in ask_round(workers[label][0], case).items():
                        samples[(label, case, candidate)].append(seconds)
        for process, _ in workers.values():
            assert process.stdin is not None
            process.stdin.write("stop\n")
            process.stdin.close()
            process.wait()
    print_rows(samples, calls, rounds)


def print_rows(
    samples: dict[tuple[str, str, str], list[float]], calls: dict[str, int], rounds: int
) -> None:
    median = {key: statistics.median(values) for key, values in samples.items()}
    print(f"medians of {rounds} interleaved rounds")
    print(
        "| case | revision | bare ms | floor / bare | traced ms | traced / bare | us per call above floor |"
    )
    print("|---|---|---|---|---|---|---|")
    for case, count in calls.items():
        above = {}
        for label in ("old", "new"):
            bare, floor, traced = (
                median[(label, case, name)] for name in ("bare", "floor", "traced")
            )
            above[label] = (traced - floor) / count * 1e6
            print(
                f"| {case} | {label} | {bare * 1e3:.2f} | {floor / bare:.3f} | "
                f"{traced * 1e3:.2f} | {traced / bare:.3f} | {above[label]:.1f} |"
            )
        traced_ratio = median[("new", case, "traced")] / median[("old", case, "traced")]
        print(
            f"| {case} | new / old | | | {traced_ratio:.3f} | | {above['new'] / above['old']:.3f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("baseline", nargs="?", default="main", help="git revision to compare with")
    parser.add_argument(
        "--new", help="git revision to time as the new one (default: this working tree)"
    )
    parser.add_argument("--rounds", type=int, default=31, help="interleaved rounds per case")
    parser.add_argument("--smoke", action="store_true", help="tiny models, for a quick check")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="what a timing measures"
    )
    parser.add_argument("--threads", type=int, help="torch's intra-op threads in the workers")
    parser.add_argument(
        "--only", action="append", help="time only the cases whose name holds this (repeatable)"
    )
    parser.add_argument(
        "--scale", action="store_true", help="add the 100,001-call model (scale.py's linear row)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        worker(arguments.smoke, arguments.clock, arguments.threads, arguments.scale)
        return
    options = ["--clock", arguments.clock, *(["--scale"] if arguments.scale else [])]
    if arguments.threads is not None:
        options += ["--threads", str(arguments.threads)]
    print(f"clock: {arguments.clock}, torch threads: {arguments.threads or 'default'}")
    compare(
        arguments.baseline,
        arguments.rounds,
        arguments.smoke,
        options,
        arguments.only,
        arguments.new,
    )


if __name__ == "__main__":
    main()
