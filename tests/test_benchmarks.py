"""The benchmark suite runs: every benchmark once at tiny sizes, so none of them rots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


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
    ):
        assert case in table, f"{case!r} missing from:\n{table}"
