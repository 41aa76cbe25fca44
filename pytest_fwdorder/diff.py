"""Trace x Trace -> explained differences. Pure functions, no torch.

Alignment runs in two passes, each a longest increasing subsequence over unique keys
(O(n log n), so two 100,000-call traces diff in well under a second):

1. by identity, (path, nth, class): the calls both traces have, in the same order, are
   anchors; common calls out of order are *moved*;
2. between two anchors, by structure, (type, inputs, outputs): pairs found there are
   *renamed* calls (and *nesting changed* if their depth differs); the rest are *removed*
   or *inserted*.

Left over between pairs, calls with the same path and another class are *type changed*.
Pairs whose inputs, outputs, nesting, frozen or registered state differ are changed so.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_fwdorder.render import (
    FORMAT_LINE,
    TENSOR_PATTERN,
    GoldenLine,
    golden_lines,
    parse_golden,
    render_header,
)

if TYPE_CHECKING:
    from pytest_fwdorder.trace import Trace

INSERTED = "inserted"
REMOVED = "removed"
MOVED = "moved"
RENAMED = "renamed"
TYPE_CHANGED = "type changed"
INPUT_CHANGED = "input changed"
OUTPUT_CHANGED = "output changed"
NESTING_CHANGED = "nesting changed"
REGISTRATION_CHANGED = "registration changed"
FROZEN_CHANGED = "frozen state changed"
REUSE_CHANGED = "reuse count changed"

# Order of the summary: what a reviewer should read first comes first.
KINDS = (
    TYPE_CHANGED,
    INSERTED,
    REMOVED,
    MOVED,
    RENAMED,
    INPUT_CHANGED,
    OUTPUT_CHANGED,
    NESTING_CHANGED,
    REGISTRATION_CHANGED,
    FROZEN_CHANGED,
    REUSE_CHANGED,
)
_EXAMPLES = 5


@dataclass(frozen=True)
class Change:
    """One difference: what kind, the old and the new line (either may be None), in words.

    `position` is the index of the line the change is about: in the new trace, or in the
    old one for removed and moved calls.
    """

    kind: str
    old: GoldenLine | None
    new: GoldenLine | None
    detail: str
    position: int | None = None


@dataclass(frozen=True)
class _Row:
    """One row of the aligned view: indexes into old and new lines, and whether it differs."""

    old: int | None
    new: int | None
    differs: bool


@dataclass
class TraceDiff:
    """The aligned, classified differences between an old and a new trace."""

    old_lines: list[GoldenLine]
    new_lines: list[GoldenLine]
    rows: list[_Row]
    changes: list[Change]
    header_changes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changes or self.header_changes)

    def count(self, kind: str) -> int:
        """How many changes of one kind (`"inserted"`, `"renamed"`, ...)."""
        return sum(1 for change in self.changes if change.kind == kind)

    def of_kind(self, kind: str) -> list[Change]:
        return [change for change in self.changes if change.kind == kind]

    def summary(self) -> str:
        """A paragraph: one line of totals, then one line per kind of change."""
        if not self:
            return "no differences"
        totals = [
            f"{_plural(self.count(kind), 'call') if kind != REUSE_CHANGED else _plural(self.count(kind), 'module')} {kind}"
            for kind in KINDS
            if self.count(kind)
        ]
        lines = [
            f"{len(self.old_lines)} calls before, {len(self.new_lines)} after: "
            + (", ".join(totals) if totals else "only the header differs")
        ]
        lines.extend(_describe_kind(self, kind) for kind in KINDS if self.count(kind))
        return "\n".join(lines)

    def render(self, context: int = 2, max_rows: int = 400) -> str:
        """Summary, then the aligned calls: `-` old, `+` new, long unchanged runs elided."""
        return "\n".join([self.summary(), "", *self.body(context, max_rows)])

    def body(self, context: int = 2, max_rows: int = 400) -> list[str]:
        """The aligned lines under the summary, as a list of text lines."""
        lines = list(self.header_changes)
        show = _rows_to_show(self.rows, context)
        shown = 0
        skipped = 0
        for position, row in enumerate(self.rows):
            if not show[position]:
                skipped += 1
                continue
            if skipped:
                lines.append(f"  ... {_plural(skipped, 'unchanged call')} ...")
                skipped = 0
            if shown >= max_rows:
                remaining = sum(1 for later in self.rows[position:] if later.differs)
                lines.append(f"  ... {_plural(remaining, 'more changed row')} not shown")
                return lines
            shown += 1
            if not row.differs:
                assert row.new is not None  # unchanged rows have both sides
                lines.append(f"  {self.new_lines[row.new].text}")
                continue
            if row.old is not None:
                lines.append(f"- {self.old_lines[row.old].text}")
            if row.new is not None:
                lines.append(f"+ {self.new_lines[row.new].text}")
        if skipped:
            lines.append(f"  ... {_plural(skipped, 'unchanged call')} ...")
        return lines

    def __str__(self) -> str:
        return self.render()


def diff_traces(old: Trace, new: Trace) -> TraceDiff:
    """What changed from `old` to `new`."""
    return diff_lines(render_header(old), golden_lines(old), render_header(new), golden_lines(new))


def diff_golden(old_text: str, new_text: str) -> TraceDiff:
    """What changed from one golden text to another (both as `render_trace` writes them)."""
    old_header, old_lines = parse_golden(old_text)
    new_header, new_lines = parse_golden(new_text)
    return diff_lines(old_header, old_lines, new_header, new_lines)


def diff_lines(
    old_header: list[str],
    old: list[GoldenLine],
    new_header: list[str],
    new: list[GoldenLine],
    *,
    match_paths: bool = True,
) -> TraceDiff:
    """Align and classify two lists of call lines; `match_paths=False` aligns by structure only."""
    rows: list[_Row] = []
    changes: list[Change] = []
    if match_paths:
        anchors, moved_old, moved_new = _anchor_by_identity(old, new)
    else:
        anchors, moved_old, moved_new = [], set(), set()
    old_start = new_start = 0
    for old_index, new_index in [*anchors, (len(old), len(new))]:
        gap_old = list(range(old_start, old_index))
        gap_new = list(range(new_start, new_index))
        _align_gap(old, new, gap_old, gap_new, moved_old, moved_new, rows, changes)
        if old_index < len(old):
            pair_changes = _compare_pair(old[old_index], new[new_index], new_index)
            # A `#1` mark that appears because the module is now reused changes the text only.
            text_changed = old[old_index].text != new[new_index].text
            rows.append(_Row(old_index, new_index, bool(pair_changes) or text_changed))
            changes.extend(pair_changes)
        old_start, new_start = old_index + 1, new_index + 1
    changes.extend(_reuse_changes(old, new))
    return TraceDiff(old, new, rows, changes, _header_changes(old_header, new_header))


def _anchor_by_identity(
    old: list[GoldenLine], new: list[GoldenLine]
) -> tuple[list[tuple[int, int]], set[int], set[int]]:
    old_positions = {key: index for index, key in enumerate(_unique_keys(old, _identity))}
    common = [
        (old_positions[key], new_index)
        for new_index, key in enumerate(_unique_keys(new, _identity))
        if key in old_positions
    ]
    anchors = _longest_increasing(common)
    anchored = set(anchors)
    moved = [pair for pair in common if pair not in anchored]
    return anchors, {i for i, _ in moved}, {j for _, j in moved}


def _align_gap(
    old: list[GoldenLine],
    new: list[GoldenLine],
    gap_old: list[int],
    gap_new: list[int],
    moved_old: set[int],
    moved_new: set[int],
    rows: list[_Row],
    changes: list[Change],
) -> None:
    """Pair a gap's calls by structure (renamed), then same path with another class (type
    changed); the rest are removed, inserted or moved."""
    pairable_old = [i for i in gap_old if i not in moved_old]
    pairable_new = [j for j in gap_new if j not in moved_new]
    structural = _pairs_by(old, new, pairable_old, pairable_new, _structure)
    pairs: list[tuple[int, int, bool]] = []  # (old, new, paired by structure)
    previous_old = previous_new = -1
    for anchor_old, anchor_new in [*structural, (len(old), len(new))]:
        between_old = pairable_old[
            bisect.bisect_right(pairable_old, previous_old) : bisect.bisect_left(
                pairable_old, anchor_old
            )
        ]
        between_new = pairable_new[
            bisect.bisect_right(pairable_new, previous_new) : bisect.bisect_left(
                pairable_new, anchor_new
            )
        ]
        pairs += [(i, j, False) for i, j in _pairs_by(old, new, between_old, between_new, _path)]
        if anchor_old < len(old):
            pairs.append((anchor_old, anchor_new, True))
        previous_old, previous_new = anchor_old, anchor_new
    old_iter, new_iter = iter(gap_old), iter(gap_new)
    old_next, new_next = next(old_iter, None), next(new_iter, None)
    ending: list[tuple[int | None, int | None, bool]] = [*pairs, (None, None, False)]
    for old_index, new_index, by_structure in ending:
        while old_next is not None and (old_index is None or old_next < old_index):
            rows.append(_Row(old_next, None, True))
            if old_next in moved_old:
                changes.append(Change(MOVED, old[old_next], None, "", old_next))
            else:
                changes.append(
                    Change(REMOVED, old[old_next], None, _where(old, old_next), old_next)
                )
            old_next = next(old_iter, None)
        while new_next is not None and (new_index is None or new_next < new_index):
            rows.append(_Row(None, new_next, True))
            if new_next not in moved_new:  # a moved call was counted once, on its old side
                changes.append(
                    Change(INSERTED, None, new[new_next], _where(new, new_next), new_next)
                )
            new_next = next(new_iter, None)
        if old_index is None or new_index is None:
            break
        old_line, new_line = old[old_index], new[new_index]
        if by_structure:
            pair_changes = []
            if old_line.identity != new_line.identity:
                detail = f"{old_line.name} -> {new_line.name}"
                pair_changes.append(Change(RENAMED, old_line, new_line, detail, new_index))
            if old_line.depth != new_line.depth:
                detail = f"depth {old_line.depth} -> {new_line.depth}"
                pair_changes.append(Change(NESTING_CHANGED, old_line, new_line, detail, new_index))
        else:
            pair_changes = _compare_pair(old_line, new_line, new_index)
        changes.extend(pair_changes)
        rows.append(
            _Row(old_index, new_index, bool(pair_changes) or old_line.text != new_line.text)
        )
        old_next, new_next = next(old_iter, None), next(new_iter, None)


def _pairs_by(
    old: list[GoldenLine],
    new: list[GoldenLine],
    old_indexes: list[int],
    new_indexes: list[int],
    key: Callable[[GoldenLine], Hashable],
) -> list[tuple[int, int]]:
    """The longest in-order pairing of two index lists whose lines share a key."""
    if not old_indexes or not new_indexes:
        return []
    old_keys = _unique_keys([old[i] for i in old_indexes], key)
    positions = {found: index for index, found in enumerate(old_keys)}
    common = [
        (positions[found], index)
        for index, found in enumerate(_unique_keys([new[j] for j in new_indexes], key))
        if found in positions
    ]
    return [(old_indexes[i], new_indexes[j]) for i, j in _longest_increasing(common)]


def _compare_pair(old_line: GoldenLine, new_line: GoldenLine, position: int) -> list[Change]:
    changes = []
    if old_line.module_type != new_line.module_type:
        changes.append(
            Change(
                TYPE_CHANGED,
                old_line,
                new_line,
                f"{old_line.module_type} -> {new_line.module_type}",
                position,
            )
        )
    if old_line.inputs != new_line.inputs:
        changes.append(
            Change(
                INPUT_CHANGED,
                old_line,
                new_line,
                _value_change(old_line.inputs, new_line.inputs),
                position,
            )
        )
    if old_line.outputs != new_line.outputs:
        changes.append(
            Change(
                OUTPUT_CHANGED,
                old_line,
                new_line,
                _value_change(old_line.outputs, new_line.outputs),
                position,
            )
        )
    if old_line.depth != new_line.depth:
        changes.append(
            Change(
                NESTING_CHANGED,
                old_line,
                new_line,
                f"depth {old_line.depth} -> {new_line.depth}",
                position,
            )
        )
    if old_line.registered != new_line.registered:
        state = "now registered" if new_line.registered else "no longer registered"
        changes.append(Change(REGISTRATION_CHANGED, old_line, new_line, state, position))
    if old_line.frozen != new_line.frozen:
        state = "now frozen" if new_line.frozen else "no longer frozen"
        changes.append(Change(FROZEN_CHANGED, old_line, new_line, state, position))
    return changes


def _reuse_changes(old: list[GoldenLine], new: list[GoldenLine]) -> list[Change]:
    old_counts = _counts(old)
    new_counts = _counts(new)
    return [
        Change(REUSE_CHANGED, None, None, f"{path} {count} -> {new_counts[path]}")
        for path, count in old_counts.items()
        if path in new_counts and new_counts[path] != count
    ]


def _counts(lines: list[GoldenLine]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in lines:
        counts[line.path] = counts.get(line.path, 0) + 1
    return counts


def _header_changes(old_header: list[str], new_header: list[str]) -> list[str]:
    old_header = [line for line in old_header if line != FORMAT_LINE]
    new_header = [line for line in new_header if line != FORMAT_LINE]
    if old_header == new_header:
        return []
    lines: list[str] = []
    matcher = difflib.SequenceMatcher(a=old_header, b=new_header, autojunk=False)
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            continue
        lines.extend(f"- {line}" for line in old_header[old_start:old_end])
        lines.extend(f"+ {line}" for line in new_header[new_start:new_end])
    return lines


def _identity(line: GoldenLine) -> Hashable:
    # The class is part of a call's identity for anchoring: wrapping a model moves `0` from
    # a Linear to the wrapper, and the two must not anchor each other.
    return (line.path, line.nth, line.module_type)


def _path(line: GoldenLine) -> Hashable:
    return line.identity


def _structure(line: GoldenLine) -> Hashable:
    # No depth: wrapping a model (`nn.Sequential(model)`) shifts every depth by one, and its
    # calls must still pair up; the depth change is reported as a nesting change.
    return (line.module_type, line.inputs, line.outputs)


def _unique_keys(
    lines: Sequence[GoldenLine], key: Callable[[GoldenLine], Hashable]
) -> list[Hashable]:
    """Each line's key, made unique by how many times the same key came before."""
    seen: dict[Hashable, int] = {}
    keys: list[Hashable] = []
    for line in lines:
        base = key(line)
        occurrence = seen.get(base, 0)
        seen[base] = occurrence + 1
        keys.append((base, occurrence))
    return keys


def _longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of pairs (sorted by second item) increasing in the first item."""
    tails: list[int] = []
    tail_index: list[int] = []
    previous = [-1] * len(pairs)
    for position, (first, _) in enumerate(pairs):
        slot = bisect.bisect_left(tails, first)
        if slot == len(tails):
            tails.append(first)
            tail_index.append(position)
        else:
            tails[slot] = first
            tail_index[slot] = position
        previous[position] = tail_index[slot - 1] if slot else -1
    result = []
    position = tail_index[-1] if tail_index else -1
    while position >= 0:
        result.append(pairs[position])
        position = previous[position]
    return result[::-1]


def _rows_to_show(rows: list[_Row], context: int) -> list[bool]:
    show = [False] * len(rows)
    last_change = -(10**9)
    for position, row in enumerate(rows):
        if row.differs:
            last_change = position
        show[position] = position - last_change <= context
    next_change = 10**9
    for position in range(len(rows) - 1, -1, -1):
        if rows[position].differs:
            next_change = position
        if next_change - position <= context:
            show[position] = True
    return show


def _where(lines: list[GoldenLine], index: int) -> str:
    """`after X` (previous sibling) or `at the start of X` (parent) for the line at `index`."""
    depth = lines[index].depth
    for earlier in range(index - 1, -1, -1):
        if lines[earlier].depth == depth:
            return f"after {lines[earlier].name}"
        if lines[earlier].depth < depth:
            return f"at the start of {lines[earlier].name}"
    return "at the start"


def _shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    return [
        (dtype, tuple(int(size) for size in sizes.split(",") if size))
        for dtype, sizes in TENSOR_PATTERN.findall(text)
    ]


def _value_change(old_text: str, new_text: str) -> str:
    old_tensors, new_tensors = _shapes(old_text), _shapes(new_text)
    if old_tensors and len(old_tensors) == len(new_tensors):
        old_dtypes = [dtype for dtype, _ in old_tensors]
        new_dtypes = [dtype for dtype, _ in new_tensors]
        old_shapes = [shape for _, shape in old_tensors]
        new_shapes = [shape for _, shape in new_tensors]
        if old_dtypes == new_dtypes:
            return f"{_join_shapes(old_shapes)} -> {_join_shapes(new_shapes)}"
        if old_shapes == new_shapes:
            return f"dtype {', '.join(old_dtypes)} -> {', '.join(new_dtypes)}"
    return f"{old_text} -> {new_text}"


def _join_shapes(shapes: list[tuple[int, ...]]) -> str:
    return ", ".join(str(shape) for shape in shapes)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _describe_kind(diff: TraceDiff, kind: str) -> str:
    changes = diff.of_kind(kind)
    count = len(changes)
    if kind == TYPE_CHANGED:
        groups: dict[str, int] = {}
        for change in changes:
            groups[change.detail] = groups.get(change.detail, 0) + 1
        parts = [detail if len(groups) == 1 else f"{detail} ({n})" for detail, n in groups.items()]
        return f"type changed at {_plural(count, 'call')}: {', '.join(parts)}"
    if kind in (INSERTED, REMOVED):
        return _describe_subtrees(diff, changes, kind)
    if kind == RENAMED:
        return f"{_plural(count, 'call')} renamed: " + _examples([c.detail for c in changes])
    if kind == MOVED:
        return f"{_plural(count, 'call')} moved: " + _examples(
            [f"{c.old.name} ({c.old.module_type})" for c in changes if c.old is not None]
        )
    if kind in (INPUT_CHANGED, OUTPUT_CHANGED):
        side = "input" if kind == INPUT_CHANGED else "output"
        items = [f"{c.new.name} {side} {c.detail}" for c in changes if c.new is not None]
        return f"{side} changed at {_plural(count, 'call')}: " + _examples(items, separator="; ")
    if kind == REUSE_CHANGED:
        return "reuse count changed: " + _examples([c.detail for c in changes])
    items = [f"{c.new.name} {c.detail}" for c in changes if c.new is not None]
    return f"{kind} at {_plural(count, 'call')}: " + _examples(items)


def _describe_subtrees(diff: TraceDiff, changes: list[Change], kind: str) -> str:
    """Group inserted/removed calls under the outermost one: `layer2.se (SEBlock) after layer2.3`."""
    lines = diff.new_lines if kind == INSERTED else diff.old_lines
    items = []
    subtree_end = -1
    nested = 0
    root: Change | None = None
    for change in [*changes, None]:
        if change is not None and change.position is not None and change.position < subtree_end:
            nested += 1
            continue
        if root is not None and root.position is not None:
            line = lines[root.position]
            inner = f", with {_plural(nested, 'nested call')}" if nested else ""
            items.append(f"{line.name} ({line.module_type}{inner}) {root.detail}")
        if change is None or change.position is None:
            break
        root, nested = change, 0
        subtree_end = _subtree_end(lines, change.position)
    return f"{_plural(len(changes), 'call')} {kind}: " + _examples(items, separator="; ")


def _subtree_end(lines: list[GoldenLine], index: int) -> int:
    depth = lines[index].depth
    end = index + 1
    while end < len(lines) and lines[end].depth > depth:
        end += 1
    return end


def _examples(items: list[str], separator: str = ", ") -> str:
    shown = separator.join(items[:_EXAMPLES])
    if len(items) > _EXAMPLES:
        shown += f" (+{len(items) - _EXAMPLES} more)"
    return shown
