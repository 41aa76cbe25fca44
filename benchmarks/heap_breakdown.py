"""Where the heap a trace keeps goes, per call: tracemalloc grouped by the allocating line.

    python benchmarks/heap_breakdown.py              # 100,001 calls (50,000 Linear+ReLU pairs)
    python benchmarks/heap_breakdown.py --pairs 5000 # 10,001 calls

Run it as its own process: the facts caches a trace fills are process-wide, so what ran
before would change the figures (run.py's heap rows run in a fresh child for that reason).
The model is built before the measured span; what is counted is what the trace and the
caches it fills still hold once the forward is over and the collector has run. A dict's
table is charged to the line that last grew it: `bounded_cache.py`'s `self[key] = value` is
the table of the per-module facts cache (`_REMEMBERED`) on this model, whose other caches
hold a few entries.
"""

from __future__ import annotations

import argparse
import gc
import linecache
import sys
import tracemalloc
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import tiny_modules

from pytest_fwdorder import trace_forward


def heap_by_line(pairs: int, lines: int) -> list[tuple[float, int, str]]:
    """(bytes per call, blocks, `file:line  source`) for the lines that kept the most, and a
    last row for the total."""
    calls = 2 * pairs + 1
    model = tiny_modules(pairs).eval()
    inputs = torch.randn(1, 16)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    with torch.no_grad():
        trace = trace_forward(model, inputs)
    gc.collect()  # the trace runs with the collector paused: its cycles are not kept
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    del trace
    # The snapshots' own bookkeeping is not the trace's.
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    differences = after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "lineno")
    rows = []
    for difference in differences[:lines]:
        frame = difference.traceback[0]
        where = frame.filename.split("site-packages/")[-1].split("pytest_fwdorder/")[-1]
        source = linecache.getline(frame.filename, frame.lineno).strip()
        rows.append(
            (
                difference.size_diff / calls,
                difference.count_diff,
                f"{where}:{frame.lineno}  {source[:80]}",
            )
        )
    total = sum(difference.size_diff for difference in differences)
    rows.append((total / calls, sum(d.count_diff for d in differences), f"total, {calls:,} calls"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=50_000, help="Linear+ReLU pairs traced")
    parser.add_argument("--lines", type=int, default=12, help="allocating lines shown")
    arguments = parser.parse_args()
    for per_call, blocks, where in heap_by_line(arguments.pairs, arguments.lines):
        print(f"{per_call:8.1f} B per call {blocks:9,d} blocks  {where}")


if __name__ == "__main__":
    main()
