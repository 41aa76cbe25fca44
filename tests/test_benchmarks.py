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
        "7B-shaped decoder",
        "render + compare",
        "failure diff",
    ):
        assert case in table, f"{case!r} missing from:\n{table}"
