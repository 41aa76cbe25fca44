"""Where a diff picture draws each call: the new nesting, with each removed call inside the
box of its old parent. Pure, no torch.

The merged column holds the new trace's calls and each removed call where it was. Drawn by
their golden depths alone, a removed wrapper (an unwrap) would be a one-line box before the
stage it held, and the call it held after the stage would land inside the stage's box. Here
a removed call is drawn one level inside its old parent's box, and a kept call whose old
parent was removed is drawn inside that removed box, so an unwrap reads as the mirror of a
wrap: a removed box around the old stage's boxes and the calls it held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_fwdorder.diff.changes import Change, ChangeKind
from pytest_fwdorder.diff.tree_changes import TreeChange, unexplained
from pytest_fwdorder.golden.format import GoldenLine


def parents(lines: Sequence[GoldenLine]) -> list[int]:
    """Each call's parent index in its trace, -1 for the root."""
    found: list[int] = []
    stack: list[int] = []
    for index, line in enumerate(lines):
        while stack and lines[stack[-1]].depth >= line.depth:
            stack.pop()
        found.append(stack[-1] if stack else -1)
        stack.append(index)
    return found


def drawing_depths(
    rows: Sequence[tuple[int | None, int | None]],
    old_lines: Sequence[GoldenLine],
    new_lines: Sequence[GoldenLine],
) -> list[int]:
    """The depth to draw each merged row at: `rows` are (old index, new index) pairs in
    drawing order, None where a call is only on one side."""
    old_parent, new_parent = parents(old_lines), parents(new_lines)
    drawn_old: dict[int, int] = {}  # old call -> its drawing depth
    drawn_new: dict[int, int] = {}
    removed: set[int] = set()
    open_removed: list[tuple[int, int]] = []  # (depth, old call) of removed boxes still open
    depths: list[int] = []
    for old, new in rows:
        if new is None:
            if old is None:  # on neither side: nothing is drawn for it
                depths.append(0)
                continue
            parent = old_parent[old]
            depth = drawn_old[parent] + 1 if parent in drawn_old else old_lines[old].depth
        else:
            parent = new_parent[new]
            depth = drawn_new[parent] + 1 if parent in drawn_new else new_lines[new].depth
            if old is not None:
                depth += _removed_ancestors_open(old, old_parent, removed, open_removed, depth)
        while open_removed and open_removed[-1][0] >= depth:
            open_removed.pop()
        if old is not None:
            drawn_old[old] = depth
        if new is not None:
            drawn_new[new] = depth
        elif old is not None:
            removed.add(old)
            open_removed.append((depth, old))
        depths.append(depth)
    return depths


def _removed_ancestors_open(
    old: int,
    old_parent: list[int],
    removed: set[int],
    open_removed: list[tuple[int, int]],
    depth: int,
) -> int:
    """How many removed boxes, the old call's nearest ancestors, are still open right above
    `depth`: the kept call is drawn that many levels deeper, inside them."""
    ancestors = []
    parent = old_parent[old]
    while parent in removed:
        ancestors.append(parent)
        parent = old_parent[parent]
    if not ancestors:
        return 0
    # Inside them only when they are the innermost open boxes, one level apart from `depth`
    # down, the nearest ancestor innermost; otherwise the new nesting alone places the call.
    innermost = open_removed[-len(ancestors) :][::-1]
    expected = [(depth + len(ancestors) - 1 - level, call) for level, call in enumerate(ancestors)]
    return len(ancestors) if innermost == expected else 0


@dataclass(frozen=True, slots=True)
class CallMarks:
    """What a diff picture marks on each call, from the diff's changes."""

    moved_old: frozenset[int]  # old calls moved to another place that nothing else explains
    moved_new: frozenset[int]  # their new partners
    explained: frozenset[int]  # new calls whose renames a change to the nesting explains
    kinds: dict[int, list[str]]  # new call -> the kinds of its changes left to show
    # Old call -> its new partner, for the moves a change to the nesting explains (calls
    # grouped into a new block): drawn once, in their new place, not as two moved boxes.
    regrouped: dict[int, int]


def call_marks(
    changes: list[Change], tree_changes: list[TreeChange], pairs: list[tuple[int, int]]
) -> CallMarks:
    """The marks of a diff's calls: a wrap, an unwrap or a renamed subtree explains the
    renames and depth changes of the calls under it, which the summary states once, and a
    wrap or an unwrap the moves of the calls it groups or ungroups."""
    kept = unexplained(changes, tree_changes)
    wrapped = set().union(
        *(change.old_calls for change in tree_changes if change.kind in _WRAP_KINDS)
    )
    all_moved = {change.position for change in changes if change.kind is ChangeKind.MOVED}
    moved_old = all_moved - wrapped
    partners = dict(pairs)
    explained = {
        change.position
        for change in changes
        if change.position is not None and change.kind in _NESTING_KINDS
    } - {change.position for change in kept if change.kind not in _AT_OLD_CALLS}
    kinds: dict[int, list[str]] = {}
    for change in kept:
        if (
            change.kind not in _AT_OLD_CALLS
            and change.old is not None
            and change.position is not None
        ):
            kinds.setdefault(change.position, []).append(change.kind.value)
    return CallMarks(
        moved_old=frozenset(old for old in moved_old if old is not None),
        moved_new=frozenset(partners[old] for old in moved_old if old in partners),
        explained=frozenset(explained),
        kinds=kinds,
        regrouped={
            old: partners[old]
            for old in all_moved - moved_old
            if old is not None and old in partners
        },
    )


# The per-call changes a change to the nesting can explain.
_NESTING_KINDS = (ChangeKind.RENAMED, ChangeKind.NESTING_CHANGED)
# The per-call changes whose position is the old call's index, not the new one's.
_AT_OLD_CALLS = (ChangeKind.REMOVED, ChangeKind.MOVED)
# The changes to the nesting that put calls in another parent without moving them.
_WRAP_KINDS = (ChangeKind.WRAPPED, ChangeKind.UNWRAPPED)
