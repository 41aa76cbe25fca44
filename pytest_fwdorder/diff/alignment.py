"""Old and new call lines -> aligned pairs of indexes: which call became which. Pure, no torch.

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
*removed* or *inserted*. Alignment only pairs indexes; `classification` turns every
pair into changes.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Hashable, Sequence

from pytest_fwdorder.golden.format import GoldenLine

# One aligned row: an old and a new line index, either None for a call on one side only.
AlignedPair = tuple[int | None, int | None]


def align_calls(
    old: list[GoldenLine], new: list[GoldenLine], *, match_paths: bool
) -> tuple[list[AlignedPair], dict[int, int]]:
    """The aligned rows in display order, and the calls out of order (old -> new index).

    A call out of order shows as two rows, `(old, None)` where it was and `(None, new)` where
    it is now.
    """
    anchors, moved = _anchor_by_identity(old, new) if match_paths else ([], {})
    moved_new = set(moved.values())
    rows: list[AlignedPair] = []
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
    old: list[GoldenLine], new: list[GoldenLine], rows: list[AlignedPair], moved: dict[int, int]
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
) -> list[AlignedPair]:
    """Rows for a stretch of calls: each pair, preceded by the unpaired calls before it."""
    rows: list[AlignedPair] = []
    old_next, new_next = old_indexes.start, new_indexes.start
    for old_index, new_index in [*pairs, (old_indexes.stop, new_indexes.stop)]:
        rows += [(index, None) for index in range(old_next, old_index)]
        rows += [(None, index) for index in range(new_next, new_index)]
        rows.append((old_index, new_index))
        old_next, new_next = old_index + 1, new_index + 1
    rows.pop()  # the end of the stretch, not a pair
    return rows


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
