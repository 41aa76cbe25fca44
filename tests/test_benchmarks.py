"""The benchmark suite runs: every benchmark once at tiny sizes, so none of them rots."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from pytest_fwdorder import trace_forward

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
RUN = BENCHMARKS / "run.py"


@pytest.fixture(scope="module")
def smoke_table() -> str:
    """The table `run.py --smoke` prints, run once for the tests that read it."""
    finished = subprocess.run(
        [sys.executable, str(RUN), "--smoke"], capture_output=True, text=True, check=False
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    return finished.stdout


def table_rows(table: str) -> dict[str, list[str]]:
    """Each row of a printed table by its case: [section, case, median, ratio, target, met]."""
    rows: dict[str, list[str]] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6:
            rows[cells[1]] = cells
    return rows


def fresh_child_heap_bytes(pairs: int) -> int:
    """The heap a trace of `pairs` Linear+ReLU pairs keeps, as run.py's child measures it."""
    finished = subprocess.run(
        [sys.executable, str(RUN), "--child", "trace_heap", "--pairs", str(pairs)],
        capture_output=True,
        text=True,
        check=True,
    )
    measured: int = json.loads(finished.stdout.strip().splitlines()[-1])[
        "bytes"
    ]  # as run.py reads it
    return measured


@pytest.mark.slow
def test_every_benchmark_runs_once_at_tiny_sizes(smoke_table: str) -> None:
    table = smoke_table
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
        "trace memory (Python heap kept by the Trace, fresh process), 51 calls",
        "trace memory (Python heap kept by the Trace, fresh process), 501 calls",
        "trace memory per call, 501 calls / 51 calls",
        "501 calls: Python heap the trace keeps, per call (fresh process)",
        "least: shape, dtype and device of every input and output",
        "least: + keyword arguments read before the module runs",
        "the recorder's hooks, above the floor",
        "per trace: least: save and put back torch's, Python's and numpy's random states",
        "all the guarantees at their least vs trace_forward, above the floor",
        "tiny modules at scale: all the guarantees at their least vs trace_forward, above the floor",
        "-call model: global no-op hooks (floor)",
        "trace_forward(costs=True), ratio to costs=False",
        "least: FlopCounterMode alone, ratio to the bare forward",
        "least: a dispatch mode that only runs each operation, ratio to the bare forward",
        "least: a dispatch mode that counts each operation's FLOPs, each figure kept by shapes",
        "trace_forward(costs=True) at its least, ratio to costs=False: the floor",
        "ResNet-18: least: the floor and all the guarantees at their least vs trace_forward",
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
def test_the_least_counting_row_counts_the_flops_flop_counter_mode_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The row prices a guarantee, so its mode must keep it: the oracle is torch's own
    # FlopCounterMode. Each model runs twice, the second time from the figures kept by shapes.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    run = importlib.import_module("run")
    models = importlib.import_module("models")
    cases = [
        (torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 32, 32)),
        (models.TinyGPT2().eval(), torch.randint(0, 1000, (1, 16))),
    ]

    class KeptByOperationAlone(run.LeastCountingMode):  # type: ignore[name-defined,misc]
        """The same count with one figure kept per operation, whatever its shapes."""

        def __init__(self) -> None:
            super().__init__()
            self.figures = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            output = func(*args, **(kwargs or {}))
            formula = run.flop_registry.get(func._overloadpacket)
            if formula is not None:
                if func not in self.figures:
                    self.figures[func] = formula(*args, **(kwargs or {}), out_val=output)
                self.flops += self.figures[func]
            return output

    totals = []
    for model, inputs in cases:
        oracle = FlopCounterMode(display=False)
        with torch.no_grad():
            with oracle:
                model(inputs)
            counted = []
            for _ in range(2):
                with run.LeastCountingMode() as least:
                    model(inputs)
                counted.append(least.flops)

        assert counted == [oracle.get_total_flops()] * 2, model
        assert counted[0] > 0
        totals.append(counted[0])

    # The oracle tells a count that keeps one figure per operation from the true one:
    # ResNet-18 runs one convolution overload at several shapes.
    resnet, inputs = cases[0]
    with torch.no_grad(), KeptByOperationAlone() as by_operation:
        resnet(inputs)
    assert by_operation.flops != totals[0]


@pytest.mark.slow
def test_the_heap_rows_read_a_fresh_process_and_show_the_target(smoke_table: str) -> None:
    rows = table_rows(smoke_table)
    scale_row = rows["trace memory (Python heap kept by the Trace, fresh process), 501 calls"]
    linear_row = rows["501 calls: Python heap the trace keeps, per call (fresh process)"]
    # Oracle: another fresh process, started here, measuring the same 250-pair model.
    fresh = fresh_child_heap_bytes(250) / 501

    for row, value in ((scale_row, scale_row[3]), (linear_row, linear_row[2])):
        # Two fresh processes differ by a few hundred bytes (hash seeds size dicts apart).
        assert abs(float(value.split()[0]) - fresh) <= 0.01 * fresh, (row, fresh)
        assert row[4].startswith("<= 421 B"), row
        assert row[5] == ("yes" if float(value.split()[0]) <= 421 else "NO"), row


@pytest.mark.slow
def test_the_heap_a_trace_keeps_depends_on_earlier_traces_in_one_process() -> None:
    # Why the heap rows run in a fresh child: the same measurement after another trace in
    # the same process reads otherwise (the oracle above could fail).
    after_another_trace = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, run\n"
            "from models import tiny_modules\n"
            "from pytest_fwdorder import trace_forward\n"
            "with torch.no_grad():\n"
            "    trace_forward(tiny_modules(2500).eval(), torch.randn(1, 16))\n"
            "print(run.trace_heap_bytes(250))\n",
        ],
        cwd=BENCHMARKS,
        capture_output=True,
        text=True,
        check=True,
    )

    assert abs(int(after_another_trace.stdout) - fresh_child_heap_bytes(250)) > 501


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


@pytest.mark.slow
def test_the_heap_breakdown_counts_each_call_object_at_its_size() -> None:
    finished = subprocess.run(
        [sys.executable, str(BENCHMARKS / "heap_breakdown.py"), "--pairs", "25", "--lines", "40"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert finished.returncode == 0, finished.stderr[-2000:]
    rows = finished.stdout.splitlines()
    call_row = next(row for row in rows if "new_call(Call)" in row)
    # Oracle: sys.getsizeof of a Call made here, independent of tracemalloc.
    with torch.no_grad():
        call = trace_forward(nn.Sequential(nn.ReLU()), torch.zeros(1))[0]
    assert call_row.split()[:2] == [f"{sys.getsizeof(call):.1f}", "B"], finished.stdout
    assert call_row.split()[4:5] == ["51"], finished.stdout  # one block a call
    assert rows[-1].endswith("total, 51 calls"), finished.stdout
