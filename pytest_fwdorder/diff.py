"""Trace x Trace -> explained differences. Pure functions, no torch.

Alignment runs in two passes, each a longest increasing subsequence over unique keys
(O(n log n), so two 100,000-call traces diff in well under a second):

1. by identity, (path, class): the calls both traces have, in the same order, are anchors;
   first those whose identity occurs once on each side, then again in each stretch between
   two anchors (so a reused module's call pairs with the one between the same neighbours,
   and its `#nth` follows from the order); common calls out of order are *moved*;
2. between two anchors, by structure, (type, inputs, outputs): pairs found there are
   *renamed* calls (and *nesting changed* if their depth differs); structural pairs out of
   order are *moved* too (two swapped layers of an `nn.Sequential`).

Left over between pairs, calls with the same path and another class are *type changed*;
a call of one module removed in one place and inserted in another is *moved*; the rest are
*removed* or *inserted*. Alignment only pairs indexes; one classification
step then turns every pair into changes (renamed, type, inputs, outputs, nesting, frozen
or registered state).
"""

from __future__ import annotations

import bisect
import difflib
import enum
import html
import re
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from pytest_fwdorder.records import TraceRecords
from pytest_fwdorder.render import (
    BACKWARD_LINE,
    FORMAT_LINE,
    TENSOR_PATTERN,
    GoldenLine,
    backward_lines,
    golden_lines,
    mode_of,
    parse_golden,
    render_header,
    split_top_level,
)


class ChangeKind(str, enum.Enum):
    """What kind of difference a `Change` is; each member equals its text (`"renamed"`)."""

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
    SETTINGS_CHANGED = "settings changed"
    PARAMETERS_CHANGED = "parameters changed"
    MODE_CHANGED = "mode changed"
    REUSE_CHANGED = "reuse count changed"
    OPERATION_CHANGED = "operation changed"
    OPERATION_INSERTED = "operation inserted"
    OPERATION_REMOVED = "operation removed"
    BACKWARD_CHANGED = "backward changed"

    def __str__(self) -> str:
        return self.value


# Order of the summary: what a reviewer should read first comes first.
_SUMMARY_ORDER = (
    ChangeKind.TYPE_CHANGED,
    ChangeKind.INSERTED,
    ChangeKind.REMOVED,
    ChangeKind.MOVED,
    ChangeKind.RENAMED,
    ChangeKind.INPUT_CHANGED,
    ChangeKind.OUTPUT_CHANGED,
    ChangeKind.OPERATION_CHANGED,
    ChangeKind.OPERATION_INSERTED,
    ChangeKind.OPERATION_REMOVED,
    ChangeKind.SETTINGS_CHANGED,
    ChangeKind.PARAMETERS_CHANGED,
    ChangeKind.MODE_CHANGED,
    ChangeKind.NESTING_CHANGED,
    ChangeKind.REGISTRATION_CHANGED,
    ChangeKind.FROZEN_CHANGED,
    ChangeKind.REUSE_CHANGED,
    ChangeKind.BACKWARD_CHANGED,
)
_EXAMPLES = 5
# What a change of each kind counts, where it is not a call.
_NOUNS = {
    ChangeKind.REUSE_CHANGED: "module",
    ChangeKind.OPERATION_CHANGED: "operation",
    ChangeKind.OPERATION_INSERTED: "operation",
    ChangeKind.OPERATION_REMOVED: "operation",
    ChangeKind.BACKWARD_CHANGED: "backward step",
}

# One aligned row: an old and a new line index, either None for a call on one side only.
_AlignedPair = tuple[int | None, int | None]


@dataclass(frozen=True)
class Change:
    """One difference: what kind, the old and the new line (either may be None), in words.

    `position` is the index of the line the change is about: in the new trace, or in the
    old one for removed and moved calls.
    """

    kind: ChangeKind
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


@dataclass(repr=False)
class TraceDiff:
    """The aligned, classified differences between an old and a new trace.

    `pairs` lists `(old index, new index)` of every call found on both sides (in order,
    renamed or moved), sorted by old index: how a caller follows a call across a refactor.
    """

    old_lines: list[GoldenLine]
    new_lines: list[GoldenLine]
    changes: list[Change]
    pairs: list[tuple[int, int]]
    header_changes: list[str] = field(default_factory=list)
    _rows: list[_Row] = field(default_factory=list, repr=False)

    def __bool__(self) -> bool:
        return bool(self.changes or self.header_changes)

    def count(self, kind: ChangeKind | str) -> int:
        """How many changes of one kind (`ChangeKind.RENAMED` or `"renamed"`, ...).

        Raises ValueError for a string that names no kind.
        """
        return len(self.of_kind(kind))

    def of_kind(self, kind: ChangeKind | str) -> list[Change]:
        """The changes of one kind, in order; raises ValueError for an unknown kind."""
        wanted = _change_kind(kind)
        return [change for change in self.changes if change.kind is wanted]

    def summary(self) -> str:
        """A paragraph: one line of totals, then one line per kind of change."""
        if not self:
            return "no differences"
        counts = Counter(change.kind for change in self.changes)
        kinds = [kind for kind in _SUMMARY_ORDER if counts[kind]]
        totals = [
            f"{_plural(counts[kind], _NOUNS.get(kind, 'call'))} "
            f"{kind.value.removeprefix('operation ').removeprefix('backward ')}"
            if kind in _NOUNS and kind is not ChangeKind.REUSE_CHANGED
            else f"{_plural(counts[kind], _NOUNS.get(kind, 'call'))} {kind.value}"
            for kind in kinds
        ]
        lines = [
            f"{len(self.old_lines)} calls before, {len(self.new_lines)} after: "
            + (", ".join(totals) if totals else "only the header differs")
        ]
        lines.extend(_describe_kind(self, kind) for kind in kinds)
        return "\n".join(lines)

    def explanation(self, context: int = 2, max_rows: int = 400) -> list[str]:
        """The message for a failed comparison, as lines: what a reader needs first comes first.

        The summary, a blank line, the aligned calls starting at the first changed one (`-`
        old, `+` new, long unchanged runs elided), then the header lines that changed. pytest
        shows only the first lines unless run with `-vv`, so they carry the changes.
        """
        if not self:
            return ["no differences"]
        lines = [*self.summary().splitlines(), ""]
        calls = self._call_lines(context, max_rows, leading_context=False)
        lines += calls
        if self.header_changes:
            lines += ["", *self.header_changes] if calls else self.header_changes
        return lines

    def render(self, context: int = 2, max_rows: int = 400) -> str:
        """The explanation as one text."""
        return "\n".join(self.explanation(context, max_rows))

    def body(self, context: int = 2, max_rows: int = 400) -> list[str]:
        """The aligned calls with context (`-` old, `+` new), then the header lines that changed."""
        return [*self._call_lines(context, max_rows, leading_context=True), *self.header_changes]

    def _call_lines(self, context: int, max_rows: int, *, leading_context: bool) -> list[str]:
        rows = self._rows
        show = _rows_to_show(rows, context)
        start = 0
        if not leading_context:
            start = next((index for index, row in enumerate(rows) if row.differs), len(rows))
        lines: list[str] = []
        shown = 0
        skipped = 0
        for position in range(start, len(rows)):
            row = rows[position]
            if not show[position]:
                skipped += 1
                continue
            if skipped:
                lines.append(f"  ... {_plural(skipped, 'unchanged call')} ...")
                skipped = 0
            if shown >= max_rows:
                remaining = sum(1 for later in rows[position:] if later.differs)
                lines.append(f"  ... {_plural(remaining, 'more changed row')} not shown")
                return lines
            shown += 1
            if not row.differs and row.new is not None:
                lines.append(f"  {self.new_lines[row.new].text}")
                continue
            old_block = _block(self.old_lines[row.old]) if row.old is not None else []
            new_block = _block(self.new_lines[row.new]) if row.new is not None else []
            lines += _block_diff(old_block, new_block)
        if skipped:
            lines.append(f"  ... {_plural(skipped, 'unchanged call')} ...")
        return lines

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        """The summary, first line as a headline: a REPL shows this, `print` the whole diff."""
        if not self:
            return "<TraceDiff: no differences>"
        first, *rest = self.summary().splitlines()
        return "\n".join(
            [
                f"<TraceDiff: {first}>",
                *(f"  {line}" for line in rest),
                "  print(diff) shows the aligned calls",
            ]
        )

    def _repr_html_(self) -> str:
        """Jupyter's display: the explanation as preformatted, escaped text."""
        return f'<pre class="fwdorder-diff">{html.escape(self.render())}</pre>'


def _block(line: GoldenLine) -> list[str]:
    """A call line, the fact lines under it, and its operations (`ops=True`)."""
    return [line.text, *line.fact_lines, *line.operation_lines]


def _block_diff(old_block: list[str], new_block: list[str]) -> list[str]:
    """Two calls with their facts: the call lines (`-` old, `+` new, or kept when equal),
    then the fact lines that differ. A call on one side only shows whole."""
    if not old_block or not new_block:
        return [*(f"- {text}" for text in old_block), *(f"+ {text}" for text in new_block)]
    if old_block[0] == new_block[0]:
        lines = [f"  {old_block[0]}"]
    else:
        lines = [f"- {old_block[0]}", f"+ {new_block[0]}"]
    old_facts, new_facts = old_block[1:], new_block[1:]
    matcher = difflib.SequenceMatcher(a=old_facts, b=new_facts, autojunk=False)
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag != "equal":  # facts both sides share would only push changes out of view
            lines += [f"- {text}" for text in old_facts[old_start:old_end]]
            lines += [f"+ {text}" for text in new_facts[new_start:new_end]]
    return lines


def _change_kind(kind: ChangeKind | str) -> ChangeKind:
    if isinstance(kind, ChangeKind):
        return kind
    if isinstance(kind, str):
        try:
            return ChangeKind(kind)
        except ValueError:
            pass
    valid = ", ".join(repr(member.value) for member in ChangeKind)
    raise ValueError(f"unknown change kind {kind!r}: use one of {valid}, or a member of ChangeKind")


def diff_traces(old: TraceRecords, new: TraceRecords) -> TraceDiff:
    """What changed from `old` to `new`; raises TypeError if either is not a trace."""
    check_trace("diff_traces", "old", old)
    check_trace("diff_traces", "new", new)
    return diff_lines(
        [*render_header(old), *backward_lines(old)],
        golden_lines(old),
        [*render_header(new), *backward_lines(new)],
        golden_lines(new),
    )


def check_trace(function: str, argument: str, value: object) -> None:
    """Raise TypeError naming the argument if `value` is not a trace."""
    if isinstance(value, TraceRecords):
        return
    if isinstance(value, str):
        hint = "pass what trace_forward returns; for golden text use diff_golden"
    elif callable(getattr(value, "named_modules", None)):  # a model: no torch import here
        hint = "trace the model first: trace_forward(model, *inputs)"
    else:
        hint = "pass what trace_forward returns"
    raise TypeError(
        f"{function} expected a trace as `{argument}`, got {type(value).__name__}: "
        f"{_short_repr(value)}: {hint}"
    )


def _short_repr(value: object) -> str:
    """The value's repr cut to one line of 80 characters: a model's repr is its whole tree."""
    text = repr(value)
    if len(text) <= 80 and "\n" not in text:
        return text
    return f"{text.splitlines()[0][:77]}..."


def diff_golden(old_text: str, new_text: str) -> TraceDiff:
    """What changed from one golden text to another (both as `render_trace` writes them).

    Raises TypeError if either is not a string.
    """
    for argument, value in (("old_text", old_text), ("new_text", new_text)):
        if not isinstance(value, str):
            raise TypeError(
                f"diff_golden expected golden text as `{argument}`, got "
                f"{type(value).__name__}: {value!r}: pass the text of a golden file "
                "(path.read_text()), or use diff_traces for two traces"
            )
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
    aligned, moved = _align(old, new, match_paths=match_paths)
    modes = (mode_of(old_header), mode_of(new_header))
    rows, changes = _classify(old, new, aligned, moved, modes)
    if modes[0] and modes[1] and modes[0] != modes[1]:
        changes.insert(0, Change(ChangeKind.MODE_CHANGED, None, None, f"{modes[0]} -> {modes[1]}"))
    changes.extend(_reuse_changes(old, new))
    changes.extend(_backward_changes(old_header, new_header))
    in_order = [(row.old, row.new) for row in rows if row.old is not None and row.new is not None]
    pairs = sorted([*in_order, *moved.items()])
    return TraceDiff(old, new, changes, pairs, _header_changes(old_header, new_header), rows)


def _align(
    old: list[GoldenLine], new: list[GoldenLine], *, match_paths: bool
) -> tuple[list[_AlignedPair], dict[int, int]]:
    """The aligned rows in display order, and the calls out of order (old -> new index).

    A call out of order shows as two rows, `(old, None)` where it was and `(None, new)` where
    it is now.
    """
    anchors, moved = _anchor_by_identity(old, new) if match_paths else ([], {})
    moved_new = set(moved.values())
    rows: list[_AlignedPair] = []
    old_start = new_start = 0
    for old_index, new_index in [*anchors, (len(old), len(new))]:
        if old_start < old_index or new_start < new_index:  # most anchors follow each other
            gap_old = [i for i in range(old_start, old_index) if i not in moved]
            gap_new = [j for j in range(new_start, new_index) if j not in moved_new]
            gap_pairs, gap_moved = _align_gap(old, new, gap_old, gap_new)
            moved.update(gap_moved)
            rows += _interleave(range(old_start, old_index), range(new_start, new_index), gap_pairs)
        if old_index < len(old):
            rows.append((old_index, new_index))
        old_start, new_start = old_index + 1, new_index + 1
    if match_paths:
        moved.update(_moved_between_gaps(old, new, rows, moved))
    return rows, moved


def _anchor_by_identity(
    old: list[GoldenLine], new: list[GoldenLine]
) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """Calls paired by (path, class) in order, and the calls out of order (old -> new index).

    Patience style: first the calls whose (path, class) occurs once in both stretches, then
    the same again in each stretch between two pairs, so a reused module's calls pair with
    the calls between the same neighbours and `#nth` follows from the order.
    """
    old_keys = [_identity(line) for line in old]
    new_keys = [_identity(line) for line in new]
    anchors: list[tuple[int, int]] = []
    moved: dict[int, int] = {}
    moved_new: set[int] = set()
    stretches = [(range(len(old)), range(len(new)))]
    while stretches:
        old_range, new_range = stretches.pop()
        if len(old_range) == len(new_range) == 1:  # one call between the same neighbours
            if old_keys[old_range.start] == new_keys[new_range.start]:
                anchors.append((old_range.start, new_range.start))
            continue
        old_indexes = [i for i in old_range if i not in moved]
        new_indexes = [j for j in new_range if j not in moved_new]
        in_order, crossed = _identity_pairs(old, new, old_keys, new_keys, old_indexes, new_indexes)
        if not in_order:
            continue  # the stretch is left to structure
        anchors += in_order
        moved.update(crossed)
        moved_new.update(j for _, j in crossed)
        bounds = [(old_range.start - 1, new_range.start - 1), *in_order]
        for (old_before, new_before), (old_after, new_after) in zip(
            bounds, [*in_order, (old_range.stop, new_range.stop)], strict=True
        ):
            if old_after - old_before > 1 and new_after - new_before > 1:
                stretches.append(
                    (range(old_before + 1, old_after), range(new_before + 1, new_after))
                )
    return sorted(anchors), moved


def _identity_pairs(
    old: list[GoldenLine],
    new: list[GoldenLine],
    old_keys: list[tuple[str, str]],
    new_keys: list[tuple[str, str]],
    old_indexes: list[int],
    new_indexes: list[int],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Pairs in one stretch by (path, class): the keys found once on each side; failing
    those, the outermost calls by occurrence (a reused block's calls, whose children then
    pair inside each); failing those, every call by occurrence."""
    if not old_indexes or not new_indexes:
        return [], []
    old_counts = Counter(old_keys[i] for i in old_indexes)
    new_counts = Counter(new_keys[j] for j in new_indexes)
    unique = {key for key, count in old_counts.items() if count == 1 and new_counts[key] == 1}
    if unique:
        return _match_indexes(
            old_keys,
            new_keys,
            [i for i in old_indexes if old_keys[i] in unique],
            [j for j in new_indexes if new_keys[j] in unique],
            unique_already=True,
        )
    old_depth = min(old[i].depth for i in old_indexes)
    new_depth = min(new[j].depth for j in new_indexes)
    outermost = _match_indexes(
        old_keys,
        new_keys,
        [i for i in old_indexes if old[i].depth == old_depth],
        [j for j in new_indexes if new[j].depth == new_depth],
    )
    if outermost[0]:
        return outermost
    return _match_indexes(old_keys, new_keys, old_indexes, new_indexes)


def _match_indexes(
    old_keys: list[tuple[str, str]],
    new_keys: list[tuple[str, str]],
    old_indexes: list[int],
    new_indexes: list[int],
    *,
    unique_already: bool = False,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """`_match` over the keys at some indexes, each made unique by its occurrence there."""
    old_at: list[Hashable] = [old_keys[i] for i in old_indexes]
    new_at: list[Hashable] = [new_keys[j] for j in new_indexes]
    if not unique_already:
        old_at, new_at = _occurrences(old_at), _occurrences(new_at)
    in_order, crossed = _match(old_at, new_at)
    return (
        [(old_indexes[i], new_indexes[j]) for i, j in in_order],
        [(old_indexes[i], new_indexes[j]) for i, j in crossed],
    )


def _occurrences(keys: list[Hashable]) -> list[Hashable]:
    """Each key with how many times it came before: `[(k, 0), (k, 1), (m, 0)]`."""
    seen: Counter[Hashable] = Counter()
    unique: list[Hashable] = []
    for key in keys:
        unique.append((key, seen[key]))
        seen[key] += 1
    return unique


def _moved_between_gaps(
    old: list[GoldenLine], new: list[GoldenLine], rows: list[_AlignedPair], moved: dict[int, int]
) -> dict[int, int]:
    """Calls left unpaired on both sides with the same (path, class): one call moved.

    A reused module's call taken from one place and made in another leaves a removed and an
    inserted call of the same module; they pair in order of their calls.
    """
    moved_new = set(moved.values())
    removed: dict[tuple[str, str], list[int]] = {}
    inserted: dict[tuple[str, str], list[int]] = {}
    for old_index, new_index in rows:
        if new_index is None and old_index is not None and old_index not in moved:
            removed.setdefault(_identity(old[old_index]), []).append(old_index)
        elif old_index is None and new_index is not None and new_index not in moved_new:
            inserted.setdefault(_identity(new[new_index]), []).append(new_index)
    return {
        old_index: new_index
        for key, old_indexes in removed.items()
        if key[0]  # a line without a path (hand-edited text) is no module's call
        for old_index, new_index in zip(old_indexes, inserted.get(key, []), strict=False)
    }


def _align_gap(
    old: list[GoldenLine], new: list[GoldenLine], gap_old: list[int], gap_new: list[int]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Pair a gap's calls by structure, then by path between those pairs.

    Returns the pairs in order, and the structural pairs out of order (moved calls).
    """
    structural, crossed = _pairs_by(old, new, gap_old, gap_new, _structure)
    crossed_old = {i for i, _ in crossed}
    crossed_new = {j for _, j in crossed}
    pairable_old = [i for i in gap_old if i not in crossed_old]
    pairable_new = [j for j in gap_new if j not in crossed_new]
    pairs: list[tuple[int, int]] = []
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
        pairs += _pairs_by(old, new, between_old, between_new, _path)[0]
        if anchor_old < len(old):
            pairs.append((anchor_old, anchor_new))
        previous_old, previous_new = anchor_old, anchor_new
    return pairs, crossed


def _interleave(
    old_indexes: range, new_indexes: range, pairs: list[tuple[int, int]]
) -> list[_AlignedPair]:
    """Rows for a stretch of calls: each pair, preceded by the unpaired calls before it."""
    rows: list[_AlignedPair] = []
    old_next, new_next = old_indexes.start, new_indexes.start
    for old_index, new_index in [*pairs, (old_indexes.stop, new_indexes.stop)]:
        rows += [(index, None) for index in range(old_next, old_index)]
        rows += [(None, index) for index in range(new_next, new_index)]
        rows.append((old_index, new_index))
        old_next, new_next = old_index + 1, new_index + 1
    rows.pop()  # the end of the stretch, not a pair
    return rows


def _classify(
    old: list[GoldenLine],
    new: list[GoldenLine],
    aligned: list[_AlignedPair],
    moved: dict[int, int],
    modes: tuple[str, str] = ("", ""),
) -> tuple[list[_Row], list[Change]]:
    """Turn each aligned row into the changes it shows: the one place changes are made."""
    moved_new = set(moved.values())
    rows: list[_Row] = []
    changes: list[Change] = []
    for old_index, new_index in aligned:
        if old_index is not None and new_index is not None:
            pair_changes = _compare_pair(old[old_index], new[new_index], new_index, modes)
            changes += pair_changes
            # A `#1` mark that appears because the module is now reused changes the text only.
            differs = bool(pair_changes) or old[old_index].text != new[new_index].text
            rows.append(_Row(old_index, new_index, differs))
        elif old_index is not None:
            if old_index in moved:
                changes += _moved_changes(old, new, old_index, moved[old_index], modes)
            else:
                detail = _where(old, old_index)
                changes.append(Change(ChangeKind.REMOVED, old[old_index], None, detail, old_index))
            rows.append(_Row(old_index, None, True))
        elif new_index is not None:
            if new_index not in moved_new:  # a moved call was counted once, on its old side
                detail = _where(new, new_index)
                changes.append(Change(ChangeKind.INSERTED, None, new[new_index], detail, new_index))
            rows.append(_Row(None, new_index, True))
    return rows, changes


def _moved_changes(
    old: list[GoldenLine],
    new: list[GoldenLine],
    old_index: int,
    new_index: int,
    modes: tuple[str, str] = ("", ""),
) -> list[Change]:
    """A call out of order: moved (to where, or to which name), and what else changed."""
    old_line, new_line = old[old_index], new[new_index]
    if old_line.path == new_line.path:  # the call number follows the order, not a rename
        detail = f"now {_where(new, new_index)}"
    else:
        detail = f"-> {new_line.name}"
    others = [
        change
        for change in _compare_pair(old_line, new_line, new_index, modes)
        if change.kind is not ChangeKind.RENAMED  # the move names the new path
    ]
    return [Change(ChangeKind.MOVED, old_line, new_line, detail, old_index), *others]


def _match(
    old_keys: list[Hashable], new_keys: list[Hashable]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Positions of keys both lists have: the longest in-order pairing, and the rest."""
    old_positions = {key: index for index, key in enumerate(old_keys)}
    common = [
        (old_positions[key], new_index)
        for new_index, key in enumerate(new_keys)
        if key in old_positions
    ]
    in_order = _longest_increasing(common)
    kept = set(in_order)
    return in_order, [pair for pair in common if pair not in kept]


def _pairs_by(
    old: list[GoldenLine],
    new: list[GoldenLine],
    old_indexes: list[int],
    new_indexes: list[int],
    key: Callable[[GoldenLine], Hashable],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Pairs of two index lists whose lines share a key: the longest in-order pairing, and
    the pairs left out of it because they cross it."""
    if not old_indexes or not new_indexes:
        return [], []
    in_order, crossed = _match(
        _unique_keys([old[i] for i in old_indexes], key),
        _unique_keys([new[j] for j in new_indexes], key),
    )
    return (
        [(old_indexes[i], new_indexes[j]) for i, j in in_order],
        [(old_indexes[i], new_indexes[j]) for i, j in crossed],
    )


def _compare_pair(
    old_line: GoldenLine,
    new_line: GoldenLine,
    position: int,
    modes: tuple[str, str] = ("", ""),
) -> list[Change]:
    """Every way two paired calls differ, each as a change about the new line.

    `modes` are the old and new model's modes: a call's mode changes only where it does not
    follow the model's own change.
    """
    if (
        old_line.text == new_line.text
        and old_line.facts == new_line.facts
        and old_line.operations == new_line.operations
    ):
        return []  # the text, facts and operations show every part compared below
    found: list[tuple[ChangeKind, str]] = []
    if old_line.path != new_line.path:  # `#3` -> `#2` is a renumbering, not a rename
        found.append((ChangeKind.RENAMED, f"{old_line.name} -> {new_line.name}"))
    if old_line.module_type != new_line.module_type:
        found.append((ChangeKind.TYPE_CHANGED, f"{old_line.module_type} -> {new_line.module_type}"))
    if old_line.inputs != new_line.inputs:
        found.append((ChangeKind.INPUT_CHANGED, _value_change(old_line.inputs, new_line.inputs)))
    if old_line.outputs != new_line.outputs:
        found.append((ChangeKind.OUTPUT_CHANGED, _value_change(old_line.outputs, new_line.outputs)))
    if old_line.depth != new_line.depth:
        found.append((ChangeKind.NESTING_CHANGED, f"depth {old_line.depth} -> {new_line.depth}"))
    if old_line.registered != new_line.registered:
        state = "now registered" if new_line.registered else "no longer registered"
        found.append((ChangeKind.REGISTRATION_CHANGED, state))
    if old_line.frozen != new_line.frozen:
        state = "now frozen" if new_line.frozen else "no longer frozen"
        found.append((ChangeKind.FROZEN_CHANGED, state))
    old_mode, new_mode = old_line.mode or modes[0], new_line.mode or modes[1]
    if old_mode and new_mode and old_mode != new_mode and (old_mode, new_mode) != modes:
        found.append((ChangeKind.MODE_CHANGED, f"{old_mode} -> {new_mode}"))
    if old_line.facts != new_line.facts and (
        (old_line.facts and new_line.facts) or (_first_call(old_line) and _first_call(new_line))
    ):
        found += _fact_changes(old_line, new_line)
    if old_line.operations != new_line.operations:
        found += _operation_changes(old_line.operations, new_line.operations)
    return [Change(kind, old_line, new_line, detail, position) for kind, detail in found]


def _operation_changes(old: tuple[str, ...], new: tuple[str, ...]) -> list[tuple[ChangeKind, str]]:
    """One change per operation changed, inserted or removed in a call's forward.

    The detail says where: `op 3 of 7: relu -> gelu` (numbers in the new call, or the old
    one for a removed operation).
    """
    found: list[tuple[ChangeKind, str]] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(old_end - old_start, new_end - new_start) if tag == "replace" else 0
        for offset in range(paired):
            where = f"op {new_start + offset + 1} of {len(new)}"
            change = _operation_change(old[old_start + offset], new[new_start + offset])
            found.append((ChangeKind.OPERATION_CHANGED, f"{where}: {change}"))
        for index in range(new_start + paired, new_end):
            name = _operation_parts(new[index])[0]
            found.append((ChangeKind.OPERATION_INSERTED, f"{name} (op {index + 1} of {len(new)})"))
        for index in range(old_start + paired, old_end):
            name = _operation_parts(old[index])[0]
            found.append((ChangeKind.OPERATION_REMOVED, f"{name} (op {index + 1} of {len(old)})"))
    return found


def _operation_parts(text: str) -> tuple[str, str, str]:
    """An operation line's name, arguments and output: `relu`, `(f32[2])`, `f32[2]`."""
    name, _, rest = text.partition("(")
    arguments, _, output = rest.rpartition(") -> ")
    return name, f"({arguments})", output


def _operation_change(old_text: str, new_text: str) -> str:
    """`relu -> gelu`, or `softmax input (f32[2,4], -1) -> (f32[2,4], 1)`."""
    old_name, old_arguments, old_output = _operation_parts(old_text)
    new_name, new_arguments, new_output = _operation_parts(new_text)
    if old_name != new_name:
        return f"{old_name} -> {new_name}"
    if old_arguments != new_arguments:
        return f"{new_name} input {_value_change(old_arguments, new_arguments)}"
    return f"{new_name} output {_value_change(old_output, new_output)}"


def _backward_changes(old_header: list[str], new_header: list[str]) -> list[Change]:
    """The backward sections (`backward=True`), compared as text: one change per differing run.

    Only when both sides recorded backward; a side without it differs in the header.
    """
    old_steps, new_steps = _backward_section(old_header), _backward_section(new_header)
    if old_steps is None or new_steps is None or old_steps == new_steps:
        return []
    changes: list[Change] = []
    matcher = difflib.SequenceMatcher(a=old_steps, b=new_steps, autojunk=False)
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            continue
        before = " / ".join(line.strip() for line in old_steps[old_start:old_end]) or "nothing"
        after = " / ".join(line.strip() for line in new_steps[new_start:new_end]) or "nothing"
        where = f"step {new_start + 1} of {len(new_steps)}"
        changes.append(
            Change(ChangeKind.BACKWARD_CHANGED, None, None, f"{where}: {before} -> {after}")
        )
    return changes


def _backward_section(header: list[str]) -> list[str] | None:
    if BACKWARD_LINE not in header:
        return None
    return header[header.index(BACKWARD_LINE) + 1 :]


def _first_call(line: GoldenLine) -> bool:
    """A module's first call, where its facts are, even when it has none.

    Without a path (a comparison that ignores paths) calls are not told apart by module,
    and only calls that both show facts are compared.
    """
    return line.nth == 1 and bool(line.path)


def _fact_changes(old_line: GoldenLine, new_line: GoldenLine) -> list[tuple[ChangeKind, str]]:
    """Settings, parameters and buffers that changed between two first calls of a module.

    Settings of two different classes are not compared (a type change says it all), and a
    module frozen or unfrozen as a whole is not repeated parameter by parameter.
    """
    old_facts, new_facts = _facts_by_title(old_line), _facts_by_title(new_line)
    found: list[tuple[ChangeKind, str]] = []
    same_class = old_line.module_type == new_line.module_type
    if same_class and old_facts.get("settings") != new_facts.get("settings"):
        found.append(
            (
                ChangeKind.SETTINGS_CHANGED,
                _settings_change(old_facts.get("settings", ""), new_facts.get("settings", "")),
            )
        )
    tensor_changes: list[str] = []
    for title in ("parameters", "buffers"):
        if old_facts.get(title) != new_facts.get(title):
            tensor_changes += _tensor_fact_changes(
                old_facts.get(title, ""),
                new_facts.get(title, ""),
                new_line.path or old_line.path,
                whole_module_frozen=old_line.frozen != new_line.frozen,
            )
    if tensor_changes:
        found.append((ChangeKind.PARAMETERS_CHANGED, "; ".join(tensor_changes)))
    return found


def _facts_by_title(line: GoldenLine) -> dict[str, str]:
    facts: dict[str, str] = {}
    for fact in line.facts:
        title, _, text = fact.partition(": ")
        facts[title] = text
    return facts


def _settings_change(old_text: str, new_text: str) -> str:
    """`kernel_size (3, 3) -> (5, 5), bias True -> False`, or both texts whole."""
    old_settings, new_settings = _named_items(old_text), _named_items(new_text)
    if old_settings is None or new_settings is None:
        return f"{old_text or '(none)'} -> {new_text or '(none)'}"
    parts = []
    for name, value in new_settings.items():
        before = old_settings.get(name)
        if before is None:
            parts.append(f"added {name}={value}")
        elif before != value:
            parts.append(f"{name} {before} -> {value}")
    parts += [
        f"dropped {name}={value}"
        for name, value in old_settings.items()
        if name not in new_settings
    ]
    return ", ".join(parts)


def _named_items(text: str) -> dict[str, str] | None:
    """`a=1, b=(3, 3)` as {'a': '1', 'b': '(3, 3)'}; None if some item has no name."""
    items: dict[str, str] = {}
    for item in split_top_level(text):
        name, separator, value = item.partition("=")
        if not separator or not name.isidentifier():
            return None
        items[name] = value
    return items


def _tensor_fact_changes(
    old_text: str, new_text: str, path: str, *, whole_module_frozen: bool = False
) -> list[str]:
    """`renamed block.w -> block.weight (f32[64,64])`, `now frozen: 4.weight`, shape changes."""
    old_items, new_items = _tensor_items(old_text), _tensor_items(new_text)
    prefix = f"{path}." if path and path != "<root>" else ""
    changes: list[str] = []
    removed = [name for name in old_items if name not in new_items]
    added = [name for name in new_items if name not in old_items]
    for name in list(removed):
        old_description = _without_flags(old_items[name])
        partner = next(
            (other for other in added if _without_flags(new_items[other]) == old_description),
            None,
        )
        if partner is not None:
            changes.append(f"renamed {prefix}{name} -> {prefix}{partner} ({old_description})")
            removed.remove(name)
            added.remove(partner)
    changes += [f"removed {prefix}{name} ({old_items[name]})" for name in removed]
    changes += [f"added {prefix}{name} ({new_items[name]})" for name in added]
    for name, new_description in new_items.items():
        before = old_items.get(name)
        if before is None or before == new_description:
            continue
        old_flags, new_flags = _flags(before), _flags(new_description)
        if _without_flags(before) != _without_flags(new_description):
            changes.append(
                f"{prefix}{name} {_without_flags(before)} -> {_without_flags(new_description)}"
            )
        if whole_module_frozen:  # the module's own frozen change says it
            old_flags.discard("frozen")
            new_flags.discard("frozen")
        for flag in sorted(new_flags - old_flags):
            changes.append(f"now {flag}: {prefix}{name}")
        for flag in sorted(old_flags - new_flags):
            changes.append(f"no longer {flag}: {prefix}{name}")
    return changes


_TENSOR_FLAGS = ("frozen", "not saved")


# One tensor fact as render writes it: `weight f32[8,3] frozen tied to a.weight, b.weight`.
_TENSOR_ITEM = re.compile(r"[^ ,]+ [a-z][a-z0-9]*(\[[0-9,]*\]| uninitialized)")


def _tensor_items(text: str) -> dict[str, str]:
    """`weight f32[8,3], bias f32[8] frozen` as {'weight': 'f32[8,3]', 'bias': 'f32[8] frozen'}.

    A `tied to` list holds commas of its own: a piece that does not start a tensor fact
    belongs to the one before it.
    """
    items: dict[str, str] = {}
    last = ""
    for piece in split_top_level(text):
        if last and not _TENSOR_ITEM.match(piece):
            items[last] += f", {piece}"
            continue
        last, _, description = piece.partition(" ")
        items[last] = description
    return items


def _without_flags(description: str) -> str:
    """The dtype and shape of a tensor fact: `f32[8] frozen tied to x` -> `f32[8]`."""
    return description.split(" ", 1)[0]


def _flags(description: str) -> set[str]:
    """The flags after dtype and shape, as whole words; a tie as one flag with its names."""
    rest = description.split(" ", 1)[1] if " " in description else ""
    rest, tied, names = rest.partition("tied to ")
    found = {flag for flag in _TENSOR_FLAGS if re.search(rf"(^| ){flag}( |$)", rest)}
    if tied:
        found.add(f"tied to {names}")
    return found


def _reuse_changes(old: list[GoldenLine], new: list[GoldenLine]) -> list[Change]:
    old_counts = _counts(old)
    new_counts = _counts(new)
    return [
        Change(ChangeKind.REUSE_CHANGED, None, None, f"{path} {count} -> {new_counts[path]}")
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


def _identity(line: GoldenLine) -> tuple[str, str]:
    # The class is part of a call's identity for anchoring: wrapping a model moves `0` from
    # a Linear to the wrapper, and the two must not anchor each other. The call number is
    # not: it follows from the order, and one call more or less renumbers the rest.
    return (line.path, line.module_type)


def _path(line: GoldenLine) -> Hashable:
    return line.path


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
    """`after X (Type)` (previous sibling) or `at the start of X (Type)` (parent) for the line
    at `index`."""
    depth = lines[index].depth
    for earlier in range(index - 1, -1, -1):
        if lines[earlier].depth == depth:
            return f"after {_called(lines[earlier])}"
        if lines[earlier].depth < depth:
            return f"at the start of {_called(lines[earlier])}"
    return "at the start"


# Inputs and outputs text, cut into tokens: a tensor, a quoted string, a bracket or comma
# (where one value ends), a lower-case word (so `x=f32[2]` keeps its tensor whole), a char.
_VALUE_TOKEN = re.compile(
    rf"{TENSOR_PATTERN.pattern}|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|[()\[\]{{}},]|[a-z][a-z0-9]*|."
)
_SEPARATORS = frozenset("()[]{},")


def _value_change(old_text: str, new_text: str) -> str:
    """What changed in inputs or outputs: shapes, dtypes, then other values that differ.

    `(1, 4) -> (2, 4)`, `dtype f32 -> f64`, `flag=True -> flag=False`, or both texts whole
    when no shorter account is exact.
    """
    old_tensors, new_tensors = _shapes(old_text), _shapes(new_text)
    parts: list[str] = []
    if old_tensors != new_tensors:
        tensor_change = _tensor_change(old_tensors, new_tensors)
        if tensor_change is None:
            return f"{old_text} -> {new_text}"
        parts.append(tensor_change)
    parts += _other_value_changes(old_text, new_text)
    return " and ".join(parts) if parts else f"{old_text} -> {new_text}"


def _tensor_change(
    old_tensors: list[tuple[str, tuple[int, ...]]], new_tensors: list[tuple[str, tuple[int, ...]]]
) -> str | None:
    """Shapes or dtypes that changed, when the tensors line up one for one; else None."""
    if not old_tensors or len(old_tensors) != len(new_tensors):
        return None
    old_dtypes = [dtype for dtype, _ in old_tensors]
    new_dtypes = [dtype for dtype, _ in new_tensors]
    old_shapes = [shape for _, shape in old_tensors]
    new_shapes = [shape for _, shape in new_tensors]
    if old_dtypes == new_dtypes:
        return f"{_join_shapes(old_shapes)} -> {_join_shapes(new_shapes)}"
    if old_shapes == new_shapes:
        return f"dtype {', '.join(old_dtypes)} -> {', '.join(new_dtypes)}"
    return None


def _other_value_changes(old_text: str, new_text: str) -> list[str]:
    """The values other than tensors that differ: `flag=True -> flag=False`, `added x=1`."""
    old_values, new_values = _values(old_text), _values(new_text)
    old_keys = [TENSOR_PATTERN.sub("T", value) for value in old_values]
    new_keys = [TENSOR_PATTERN.sub("T", value) for value in new_values]
    matcher = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False)
    changes = []
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        before = ", ".join(old_values[old_start:old_end])
        after = ", ".join(new_values[new_start:new_end])
        if tag == "replace":
            changes.append(f"{before} -> {after}")
        elif tag == "insert":
            changes.append(f"added {after}")
        elif tag == "delete":
            changes.append(f"dropped {before}")
    return changes


def _values(text: str) -> list[str]:
    """The innermost values of inputs or outputs text: `(f32[2], flag=True)` -> two values."""
    values: list[str] = []
    current: list[str] = []
    for token in _VALUE_TOKEN.finditer(text):
        if token.group() in _SEPARATORS:
            if "".join(current).strip():
                values.append("".join(current).strip())
            current = []
        else:
            current.append(token.group())
    if "".join(current).strip():
        values.append("".join(current).strip())
    return values


def _shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    return [
        (dtype, tuple(int(size) for size in sizes.split(",") if size))
        for dtype, sizes in TENSOR_PATTERN.findall(text)
    ]


def _join_shapes(shapes: list[tuple[int, ...]]) -> str:
    return ", ".join(str(shape) for shape in shapes)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _called(line: GoldenLine) -> str:
    """A call as summaries name it: its golden name and its class, `layer1.0.relu #2 (ReLU)`."""
    return f"{line.name} ({line.module_type})"


def _describe_kind(diff: TraceDiff, kind: ChangeKind) -> str:
    changes = diff.of_kind(kind)
    count = len(changes)
    if kind is ChangeKind.TYPE_CHANGED:
        groups: dict[str, int] = {}
        for change in changes:
            groups[change.detail] = groups.get(change.detail, 0) + 1
        parts = [detail if len(groups) == 1 else f"{detail} ({n})" for detail, n in groups.items()]
        return f"type changed at {_plural(count, 'call')}: {', '.join(parts)}"
    if kind in (ChangeKind.INSERTED, ChangeKind.REMOVED, ChangeKind.MOVED):
        return _describe_subtrees(diff, changes, kind)
    if kind is ChangeKind.RENAMED:
        items = [f"{_called(c.old)} -> {c.new.name}" for c in changes if c.old and c.new]
        return f"{_plural(count, 'call')} renamed: " + _examples(items)
    if kind in (ChangeKind.INPUT_CHANGED, ChangeKind.OUTPUT_CHANGED):
        side = "input" if kind is ChangeKind.INPUT_CHANGED else "output"
        items = [f"{_called(c.new)} {side} {c.detail}" for c in changes if c.new is not None]
        return f"{side} changed at {_plural(count, 'call')}: " + _examples(items, separator="; ")
    if kind is ChangeKind.REUSE_CHANGED:
        return "reuse count changed: " + _examples([c.detail for c in changes])
    if kind is ChangeKind.OPERATION_CHANGED:
        items = [f"in {c.new.name} ({c.detail.replace(': ', '): ', 1)}" for c in changes if c.new]
        if count == 1:
            return f"operation changed {items[0]}"
        return f"{count} operations changed: " + _examples(items, separator="; ")
    if kind in (ChangeKind.OPERATION_INSERTED, ChangeKind.OPERATION_REMOVED):
        by_call: dict[str, list[str]] = {}
        for change in changes:
            if change.new is not None:
                by_call.setdefault(change.new.name, []).append(change.detail)
        verb = kind.value.removeprefix("operation ")
        per_call = [
            f"{_plural(len(details), 'operation')} {verb} in {name}: {', '.join(details)}"
            for name, details in by_call.items()
        ]
        return _examples(per_call, separator="; ")
    if kind is ChangeKind.BACKWARD_CHANGED:
        return "backward order changed: " + _examples([c.detail for c in changes], separator="; ")
    if kind in (
        ChangeKind.SETTINGS_CHANGED,
        ChangeKind.PARAMETERS_CHANGED,
        ChangeKind.MODE_CHANGED,
    ):
        items = [
            f"{c.new.name} ({c.new.module_type}): {c.detail}"
            if c.new is not None
            else f"the model: {c.detail}"
            for c in changes
        ]
        return (
            f"{kind.value} at {_plural(count, 'call' if kind is not ChangeKind.MODE_CHANGED else 'place')}: "
            + _examples(items, separator="; ")
        )
    items = [f"{_called(c.new)} {c.detail}" for c in changes if c.new is not None]
    return f"{kind.value} at {_plural(count, 'call')}: " + _examples(items)


def _describe_subtrees(diff: TraceDiff, changes: list[Change], kind: ChangeKind) -> str:
    """Group inserted, removed or moved calls under the outermost one:
    `layer2.se (SEBlock, with 5 nested calls) after layer2.3`."""
    lines = diff.new_lines if kind is ChangeKind.INSERTED else diff.old_lines
    renamed = {
        (change.old.name, change.new.name): change.old
        for change in diff.of_kind(ChangeKind.RENAMED)
        if change.old is not None and change.new is not None
    }
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
            item = f"{line.name} ({line.module_type}{inner}) {root.detail}"
            if kind is ChangeKind.MOVED and root.new is not None:
                partner = renamed.get((root.new.name, line.name))
                if partner is not None:
                    item += f", swapped with {_called(partner)}"
            items.append(item)
        if change is None or change.position is None:
            break
        root, nested = change, 0
        subtree_end = _subtree_end(lines, change.position)
    return f"{_plural(len(changes), 'call')} {kind.value}: " + _examples(items, separator="; ")


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
