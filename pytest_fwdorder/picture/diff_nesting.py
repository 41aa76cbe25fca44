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
from typing import Protocol

from pytest_fwdorder.diff.changes import Change, ChangeKind, TreeChange
from pytest_fwdorder.diff.places import look_alikes, named_run, subtree_end, which_of
from pytest_fwdorder.diff.tree_changes import unexplained
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
            kinds.setdefault(change.position, []).append(change.kind_words)
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


@dataclass(frozen=True, slots=True)
class PlaceWords:
    """What a diff picture writes on a box where the path alone would mislead, in the
    summary's words: a look-alike's `one of features.10, features.11` in place of its path,
    a moved module's `moved to dec.0` at its old place and `moved from enc.2` at its new."""

    old_names: dict[int, str]  # old call -> the name its box shows instead of its path
    new_names: dict[int, str]  # new call -> the same
    old_notes: dict[int, str]  # old call -> the words after its class
    new_notes: dict[int, str]

    def of_old(self, index: int, status: str) -> tuple[str, str, str]:
        """The tooltip's detail, the name and the note of an old call drawn with `status`."""
        return _words(self.old_names.get(index, ""), self.old_notes.get(index, ""), status)

    def of_new(self, index: int, status: str) -> tuple[str, str, str]:
        """The same for a new call."""
        return _words(self.new_names.get(index, ""), self.new_notes.get(index, ""), status)


def _words(name: str, note: str, status: str) -> tuple[str, str, str]:
    if note:
        return note, name, note
    if name:  # the tooltip says `(removed: the trace cannot tell which look-alike it was)`
        return f"{status}: the trace cannot tell which look-alike it was", name, note
    return status, name, note


class _Diff(Protocol):
    """What the words are made from: a `TraceDiff` (as `layout.AlignedDiff`)."""

    old_lines: list[GoldenLine]
    new_lines: list[GoldenLine]
    changes: list[Change]
    pairs: list[tuple[int, int]]
    tree_changes: list[TreeChange]


def place_words(marks: CallMarks, difference: _Diff) -> PlaceWords:
    """The words of a diff's removed or inserted look-alikes and of its moves to another
    parent, with the names its summary gives them."""
    # A name-free diff aligns lines without paths; it keeps the named ones beside them.
    old_lines = getattr(difference, "old_names", None) or difference.old_lines
    new_lines = getattr(difference, "new_names", None) or difference.new_lines
    kept = unexplained(difference.changes, difference.tree_changes)
    pairs = dict(difference.pairs)
    old_notes, new_notes = _move_notes(marks.moved_old, old_lines, new_lines, pairs)
    old_names = _look_alike_names(kept, ChangeKind.REMOVED, old_lines)
    for change in difference.tree_changes:
        if change.kind is ChangeKind.UNWRAPPED and change.may_be:
            # The stage unwrapped is one of look-alikes (diff/look_alike_wraps.py).
            which = "one of " + named_run([old_lines[index].name for index in change.may_be])
            old_names.update(dict.fromkeys(change.old_calls - pairs.keys(), which))
    return PlaceWords(
        old_names, _look_alike_names(kept, ChangeKind.INSERTED, new_lines), old_notes, new_notes
    )


def _look_alike_names(
    changes: list[Change], kind: ChangeKind, lines: list[GoldenLine]
) -> dict[int, str]:
    """`one of features.10, features.11` for each outermost call removed (or inserted) next
    to siblings alike to it but for their numbered names: the trace cannot tell which one
    it was, so the summary names them all (`which_of`), and so does its box."""
    changed: set[int | None] = {change.position for change in changes if change.kind is kind}
    names: dict[int, str] = {}
    nested_until = -1
    for position in sorted(position for position in changed if position is not None):
        if position < nested_until:
            continue  # inside a call changed with it: the outer box says it
        nested_until = subtree_end(lines, position)
        which = which_of(lines, look_alikes(lines, position, name_free=False), changed)
        if which is not None:
            names[position] = which
    return names


def _move_notes(
    moved_old: frozenset[int],
    old_lines: Sequence[GoldenLine],
    new_lines: Sequence[GoldenLine],
    partners: dict[int, int],
) -> tuple[dict[int, str], dict[int, str]]:
    """At each place of a call moved to another parent, where it went or came from, as the
    summary's `enc.2 (LayerNorm) moved to dec.0`; on the outermost moved call only."""
    old_parent, new_parent = parents(old_lines), parents(new_lines)
    at_old: dict[int, str] = {}
    at_new: dict[int, str] = {}
    for old in sorted(moved_old):
        new = partners.get(old)
        if new is None or old_parent[old] in moved_old:
            continue
        if partners.get(old_parent[old], -1) == new_parent[new]:
            continue  # the same parent: a reorder, which no place note explains
        before, after = old_lines[old], new_lines[new]
        if before.path != after.path:
            at_old[old], at_new[new] = f"moved to {after.name}", f"moved from {before.name}"
        else:  # the same path under another parent: say the parents
            into, was = new_parent[new], old_parent[old]
            at_old[old] = f"moved into {new_lines[into].name}" if into >= 0 else "moved to the top"
            at_new[new] = f"moved from {old_lines[was].name}" if was >= 0 else "moved from the top"
    return at_old, at_new
