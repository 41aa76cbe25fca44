"""The benchmark suite runs: every benchmark once at tiny sizes, so none of them rots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
RUN = BENCHMARKS / "run.py"


@pytest.mark.slow
def test_every_benchmark_runs_once_at_tiny_sizes() -> None:
    finished = subprocess.run(
        [sys.executable, str(RUN), "--smoke"], capture_output=True, text=True, check=False
    )

    assert finished.returncode == 0, finished.stderr[-2000:]
    table = finished.stdout
    for case in (
        "trace_forward",
        "global no-op hooks (floor)",
        "us per call above the floor",
        "the facets' module facts",
        "torchinfo.summary",
        "torchview.draw_graph",
        "torch.fx.symbolic_trace + ShapeProp",
        "torchscan.summary",
        "torchlens.trace",
        "meta build + trace",
        "torch alone on meta, build + forward, no trace, every kernel run",
        "7B-shaped decoder",
        "render + compare",
        "failure diff",
        "GPT-2-shaped decoder, 2 layers, 1x16 tokens: trace_forward",
        "tiny modules: torchinfo.summary",
        "GPT-2-shaped decoder: torchview.draw_graph",
        "-call model: trace_forward + render + compare",
        "trace memory (Python heap kept by the Trace)",
        "least: shape, dtype and device of every input and output",
        "least: + keyword arguments read before the module runs",
        "the recorder's hooks, above the floor",
        "per trace: least: save and put back torch's, Python's and numpy's random states",
        "all the guarantees at their least vs trace_forward, above the floor",
        "-call model: global no-op hooks (floor)",
        "trace_forward(costs=True), ratio to costs=False",
        "trace_forward(values=True), ratio to a plain trace",
        "builder on meta: initialization=True, ratio to without",
        "SVG rolled",
        "deep-copies 10 BatchNorm1d layers: meta build + trace, ratio to torch alone on meta",
        "deep-copied and its layers made again (timm's pruned builders)",
        "torchvision squeezenet1_1: meta build + trace, ratio to torch alone on meta",
        "calls: trace + 2 renders + compare (trace == other trace)",
        "torchvision models (64x64), pytest: each asserts its golden",
    ):
        assert case in table, f"{case!r} missing from:\n{table}"


@pytest.mark.slow
def test_the_version_matrix_runs_on_two_zoo_models_and_the_examples() -> None:
    finished = subprocess.run(
        [sys.executable, str(BENCHMARKS / "version_matrix.py"), "--models", "2"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert finished.returncode == 0, finished.stderr[-2000:]
    rows = [line.split() for line in finished.stdout.splitlines()]
    zoo_row = next(row for row in rows if row[2:3] == ["zoo"])
    # models, byte-equal, equal under the rule: this torch wrote the goldens.
    assert zoo_row[3:6] == ["2", "2", "2"], finished.stdout
    assert any(row[2:3] == ["examples"] for row in rows), finished.stdout


@pytest.mark.slow
def test_the_cpu_stability_check_runs_on_two_quantized_models() -> None:
    finished = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "cpu_stability.py"),
            "--models",
            "2",
            "--configurations",
            "2",
        ],
        capture_output=True,
        text=True,
        check=False,
    )

    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]
    assert "2 configurations x 2 models (2 quantized)" in finished.stdout
    assert finished.stdout.rstrip().endswith("all identical"), finished.stdout
