"""Graph breaks old x new -> changes (`graph_breaks=True`): the count, each break added or
removed, each recompilation added or removed, in words. Pure, no torch.

    graph breaks 1 -> 0
    graph break removed in blocks.1 (call 1): data-dependent branch on a tensor's value at model.py:10
"""

from __future__ import annotations

from pytest_fwdorder.diff.changes import Change, ChangeKind
from pytest_fwdorder.golden.graph_breaks_lines import (
    graph_break_counts,
    graph_break_items,
    recompilation_items,
)


def graph_break_changes(old_header: list[str], new_header: list[str]) -> list[Change]:
    """What changed in the compile sections, one change per sentence; only when both
    goldens recorded graph breaks."""
    old_counts, new_counts = graph_break_counts(old_header), graph_break_counts(new_header)
    if old_counts is None or new_counts is None:
        return []
    details: list[str] = []
    if old_counts[0] != new_counts[0]:
        details.append(f"graph breaks {old_counts[0]} -> {new_counts[0]}")
    if old_counts[1] != new_counts[1]:
        details.append(f"graphs {old_counts[1]} -> {new_counts[1]}")
    details += _added_and_removed(
        "graph break", graph_break_items(old_header), graph_break_items(new_header)
    )
    details += _added_and_removed(
        "recompilation", recompilation_items(old_header), recompilation_items(new_header)
    )
    return [Change(ChangeKind.GRAPH_BREAKS_CHANGED, None, None, detail) for detail in details]


def _added_and_removed(noun: str, old: list[str], new: list[str]) -> list[str]:
    """`graph break added in <item>` for each item only in new, `... removed in` for old."""
    return [f"{noun} removed in {item}" for item in old if item not in new] + [
        f"{noun} added in {item}" for item in new if item not in old
    ]
