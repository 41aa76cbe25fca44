"""A costs trace -> the table of its most expensive calls (`fwdorder show --costs --sort flops`: the costs facet's table).

Pure: reads the calls' `CallCosts`, formats numbers as the golden does (`golden.figures`).
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pytest_fwdorder.calls.facet_records import CallCosts
from pytest_fwdorder.calls.records import Call, TraceRecords
from pytest_fwdorder.golden.figures import (
    human_bytes,
    human_count,
)

CostOrder = Literal["flops", "own-flops"]
COST_ORDERS: tuple[CostOrder, ...] = ("flops", "own-flops")

_HEADINGS = ("FLOPs with children", "share", "own FLOPs", "output", "call")


def cost_table(trace: TraceRecords, order: CostOrder = "flops", top: int | None = None) -> str:
    """The calls that spend the most FLOPs, most first, as an aligned text table.

    `order` "flops" sorts by the call's FLOPs with its children's, "own-flops" by those of
    its own forward outside its children; ties keep the execution order. `top` keeps the
    first N rows (None: every call). Raises ValueError for a trace recorded without costs.
    """
    if trace.costs is None:
        raise ValueError(
            f"cost_table needs a trace recorded with costs=True, got one of {trace.root_type!r} "
            "without: trace it again with costs=True (fwdorder show --costs)"
        )
    costed = [(call, call.costs) for call in trace.calls if call.costs is not None]
    column = 0 if order == "flops" else 1
    costed.sort(key=lambda pair: -(pair[1].flops, pair[1].own_flops)[column])
    shown = costed if top is None else costed[:top]
    total = trace.costs.flops
    calls_of = Counter(call.path for call in trace.calls)
    rows = [
        _HEADINGS,
        *(_row(call, costs, total, calls_of[call.path] > 1) for call, costs in shown),
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(_HEADINGS) - 1)]
    lines = [_title(trace, order, len(shown), len(costed))]
    for row in rows:
        cells = [cell.rjust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    lines += [
        "FLOPs with children: the call's own operations and its children's; own FLOPs: its",
        "forward's outside its children; share: FLOPs with children / the forward's total;",
        "output: the bytes of its outputs",
    ]
    return "\n".join(lines) + "\n"


def _title(trace: TraceRecords, order: CostOrder, shown: int, calls: int) -> str:
    total = trace.costs.flops if trace.costs is not None else 0
    sorted_by = "FLOPs with children" if order == "flops" else "own FLOPs"
    which = f"top {shown} of {calls} calls" if shown < calls else f"{calls} calls"
    return (
        f"# {trace.root_type}: {which} by {sorted_by}; forward total "
        f"{total:,} FLOPs ({human_count(total)})"
    )


def _row(call: Call, costs: CallCosts, total: int, reused: bool) -> tuple[str, ...]:
    share = f"{100 * costs.flops / total:.1f}%" if total else "-"
    return (
        _figure(costs.flops, "", human_count(costs.flops)),
        share,
        _figure(costs.own_flops, "", human_count(costs.own_flops)),
        _figure(costs.output_bytes, " B", human_bytes(costs.output_bytes)),
        # Named as the golden names it: `layer1.0.relu #2` for a module called again.
        f"{call.display_path}{f' #{call.nth}' if reused else ''} ({call.module_type})",
    )


def _figure(count: int, unit: str, human: str) -> str:
    """`802,816 B (784 KiB)`: the exact figure, and the human form where it differs."""
    exact = f"{count:,}{unit}"
    return exact if human.rstrip() == f"{count}{unit}".strip() else f"{exact} ({human})"
