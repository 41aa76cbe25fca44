"""Rows of benchmarks/run.py for goldens at scale and for a suite as users run it.

- `linear_time`: a 100,001-call model traced, rendered twice and compared (`trace ==
  other_trace`), side by side with its bare forward and the global-hook floor; then the
  render, the parse and the comparison of its golden alone, and the heap its trace keeps
  (measured in a fresh process, so it does not depend on the rows before it).
- `suite`: a generated project of ten torchvision models, each test asserting its golden,
  run by pytest in a fresh process, against the same ten models' plain forwards run by pytest
  without the plugin and syrupy; and pytest's start-up in a one-test project with the plugin,
  without it, and without syrupy as well.

Each side runs in turn with the others in the same rounds (medians), so a noisy neighbour
slows all of them alike and the ratios stay meaningful.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from models import tiny_modules

import pytest_fwdorder
from pytest_fwdorder import diff_golden, trace_forward
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.golden.upgrades import with_environment
from pytest_fwdorder.snapshot.policy import golden_holds

# Where the package measured was imported from: the subprocesses import the same one.
PACKAGE_ROOT = Path(pytest_fwdorder.__file__).resolve().parents[1]
TARGETS = {"all": 3.0, "parse": 0.5, "bytes per call": 421, "suite": 1.15}
# Linear + ReLU pairs of the 100,001-call model (with the root: 2 * pairs + 1 calls).
PAIRS = 50_000


def met(value: float, target: float) -> str:
    return "yes" if value <= target else "NO"


def linear_time(
    smoke: bool,
    row: Callable[..., Any],
    interleaved_medians: Callable[..., dict[str, float]],
    floor_hooks: Callable[[], Any],
    fresh_trace_heap_bytes: Callable[[int], int],
) -> list[Any]:
    """Trace + 2 renders + compare, render, parse and compare alone, at 100,001 calls; the
    heap per call from `fresh_trace_heap_bytes`, which measures it in a fresh process."""
    pairs = 250 if smoke else PAIRS
    rounds = 1 if smoke else 3
    model = tiny_modules(pairs).eval()
    inputs = torch.randn(1, 16)
    with torch.no_grad():
        reference = trace_forward(model, inputs)

    def traced() -> object:
        with torch.no_grad():
            return trace_forward(model, inputs)

    def trace_renders_compare() -> bool:
        return traced() == reference  # Trace.__eq__: both rendered, the texts compared

    def bare() -> object:
        with torch.no_grad():
            return model(inputs)

    def floor() -> object:
        with floor_hooks(), torch.no_grad():
            return model(inputs)

    medians = interleaved_medians(
        {"all": trace_renders_compare, "trace": traced, "bare": bare, "floor": floor}, rounds
    )
    golden = with_environment(reference.render())
    changed = golden.replace(": ReLU (", ": GELU (", 1)  # one call's class changed
    alone = interleaved_medians(
        {
            "render": reference.render,
            "parse": lambda: parse_golden(golden),
            "holds": lambda: golden_holds(golden, with_environment(reference.render())),
            "diff": lambda: diff_golden(golden, changed).render(),
        },
        rounds,
    )
    calls = 2 * pairs + 1
    return linear_rows(calls, medians, alone, fresh_trace_heap_bytes(pairs) / calls, row)


def linear_rows(
    calls: int,
    medians: dict[str, float],
    alone: dict[str, float],
    heap: float,
    row: Callable[..., Any],
) -> list[Any]:
    return [
        row("linear", f"{calls:,} calls: bare forward", f"{medians['bare']:.2f} s"),
        row(
            "linear",
            f"{calls:,} calls: global no-op hooks (floor)",
            f"{medians['floor']:.2f} s",
            f"{medians['floor'] / medians['bare']:.2f}",
        ),
        row("linear", f"{calls:,} calls: trace_forward alone", f"{medians['trace']:.2f} s"),
        row(
            "linear",
            f"{calls:,} calls: trace + 2 renders + compare (trace == other trace)",
            f"{medians['all']:.2f} s",
            f"{medians['all'] / medians['floor']:.2f} x floor",
            f"<= {TARGETS['all']:.0f} s",
            met(medians["all"], TARGETS["all"]),
        ),
        row("linear", f"{calls:,} calls: render alone", f"{alone['render']:.2f} s"),
        row(
            "linear",
            f"{calls:,} calls: parse of the golden",
            f"{alone['parse']:.2f} s",
            "",
            f"<= {TARGETS['parse']} s",
            met(alone["parse"], TARGETS["parse"]),
        ),
        row(
            "linear",
            f"{calls:,} calls: render + golden_holds (what `trace == snapshot` does)",
            f"{alone['holds']:.2f} s",
        ),
        row(
            "linear", f"{calls:,} calls: failure diff, one class changed", f"{alone['diff']:.2f} s"
        ),
        row(
            "linear",
            f"{calls:,} calls: Python heap the trace keeps, per call (fresh process)",
            f"{heap:.0f} B",
            "",
            f"<= {TARGETS['bytes per call']} B",
            met(heap, TARGETS["bytes per call"]),
        ),
    ]


# --- a suite as users run it ---

# Ten torchvision models that build and run in well under a second each at 64x64 on 2 cores.
SUITE_MODELS = (
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "squeezenet1_1",
    "shufflenet_v2_x1_0",
    "mnasnet0_5",
    "efficientnet_b0",
    "densenet121",
    "regnet_y_400mf",
)

_SUITE_HEAD = """import pytest
import torch
import torchvision

MODELS = {models!r}


def build(name):
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).eval()
"""

_GOLDEN_TESTS = """
from pytest_fwdorder import trace_forward


@pytest.mark.parametrize("name", MODELS)
def test_golden(name, snapshot):
    with torch.no_grad():
        assert trace_forward(build(name), torch.randn(1, 3, 64, 64)) == snapshot
"""

_FORWARD_TESTS = """

@pytest.mark.parametrize("name", MODELS)
def test_forward(name):
    with torch.no_grad():
        build(name)(torch.randn(1, 3, 64, 64))
"""

_WITHOUT_PLUGIN = ("-p", "no:fwdorder")
_WITHOUT_SYRUPY = ("-p", "no:syrupy")


def pytest_seconds(project: Path, *arguments: str) -> float:
    """Wall seconds of `python -m pytest -q <arguments>` in `project`, the package this
    process measures first on the path; raises RuntimeError when pytest fails.

    Bytecode is written and read back, as for an installed wheel (pip compiles it, and
    pytest keeps its rewritten plugin modules): with PYTHONDONTWRITEBYTECODE set, every run
    would compile this package's source again, which no installed copy does.
    """
    environment = dict(os.environ)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PACKAGE_ROOT), environment.get("PYTHONPATH")])
    )
    start = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *arguments],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if finished.returncode != 0:
        raise RuntimeError(f"pytest {' '.join(arguments)} failed:\n{finished.stdout[-3000:]}")
    return seconds


def alternating_medians(runs: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median of each run's own seconds, the runs alternating within every round."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for round_index in range(rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            samples[name].append(runs[name]())
    return {name: statistics.median(values) for name, values in samples.items()}


def suite(smoke: bool, row: Callable[..., Any]) -> list[Any]:
    """The ten-model golden suite vs the same plain forwards, and pytest's start-up."""
    models = SUITE_MODELS[:1] if smoke else SUITE_MODELS
    rounds = 1 if smoke else 3
    with tempfile.TemporaryDirectory(prefix="fwdorder-suite-") as folder:
        project = Path(folder)
        head = _SUITE_HEAD.format(models=models)
        (project / "test_goldens.py").write_text(head + _GOLDEN_TESTS)
        (project / "test_forwards.py").write_text(head + _FORWARD_TESTS)
        (project / "test_one.py").write_text("def test_one():\n    assert True\n")
        # Writes the goldens, and the bytecode every run after reads.
        pytest_seconds(project, "test_goldens.py", "--snapshot-update")
        pytest_seconds(project, "test_forwards.py", *_WITHOUT_PLUGIN, *_WITHOUT_SYRUPY)
        suite_medians = alternating_medians(
            {
                "goldens": lambda: pytest_seconds(project, "test_goldens.py"),
                "forwards": lambda: pytest_seconds(
                    project, "test_forwards.py", *_WITHOUT_PLUGIN, *_WITHOUT_SYRUPY
                ),
            },
            rounds,
        )
        start_up = alternating_medians(
            {
                "plugin": lambda: pytest_seconds(project, "test_one.py"),
                "no plugin": lambda: pytest_seconds(project, "test_one.py", *_WITHOUT_PLUGIN),
                "neither": lambda: pytest_seconds(
                    project, "test_one.py", *_WITHOUT_PLUGIN, *_WITHOUT_SYRUPY
                ),
            },
            1 if smoke else 7,
        )
    return suite_rows(len(models), suite_medians, start_up, row)


def suite_rows(
    count: int, suite_medians: dict[str, float], start_up: dict[str, float], row: Callable[..., Any]
) -> list[Any]:
    ratio = suite_medians["goldens"] / suite_medians["forwards"]
    plugin_ms = (start_up["plugin"] - start_up["no plugin"]) * 1e3
    syrupy_ms = (start_up["no plugin"] - start_up["neither"]) * 1e3
    return [
        row(
            "suite",
            f"{count} torchvision models (64x64), pytest: plain forwards, no plugin, no syrupy",
            f"{suite_medians['forwards']:.2f} s",
        ),
        row(
            "suite",
            f"{count} torchvision models (64x64), pytest: each asserts its golden",
            f"{suite_medians['goldens']:.2f} s",
            f"{ratio:.2f}",
            f"<= {TARGETS['suite']}",
            met(ratio, TARGETS["suite"]),
        ),
        row(
            "suite",
            "pytest start-up, one-test project: with the plugin",
            f"{start_up['plugin']:.2f} s",
            f"{plugin_ms:+.0f} ms for the plugin",
        ),
        row(
            "suite",
            "pytest start-up, one-test project: -p no:fwdorder",
            f"{start_up['no plugin']:.2f} s",
            f"{syrupy_ms:+.0f} ms for syrupy's own import",
        ),
        row(
            "suite",
            "pytest start-up, one-test project: -p no:fwdorder -p no:syrupy",
            f"{start_up['neither']:.2f} s",
        ),
    ]
