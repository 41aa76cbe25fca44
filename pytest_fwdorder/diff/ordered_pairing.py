"""Two sequences of keys -> the pairs kept in order: a longest common subsequence, unique
keys first, a longest increasing pairing, pairs by a key (in order, or between pairs already
made), whether pairs cross, and the rows that show them; or the runs where they differ. Pure,
no torch."""

from __future__ import annotations

import bisect
import difflib
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple, TypeVar

ItemT = TypeVar("ItemT")

_SHORT = 500  # stretches up to this many items a side align by a longest common subsequence
# Stretches up to this many items a side align by the cheapest edit (`cheapest_pairs`), where
# a near key is given: a quadratic table, cheap for the children of one call.
_NEAR_SHORT = 64
# One aligned row: an old and a new line index, either None for a call on one side only.
AlignedPair = tuple[int | None, int | None]


def common_subsequence(
    old_keys: Sequence[Hashable], new_keys: Sequence[Hashable]
) -> list[tuple[int, int]]:
    """Positions of a longest common subsequence of two key lists (no junk heuristic: a
    ReLU called often is no less a call)."""
    matcher = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False)
    return [
        (block.a + offset, block.b + offset)
        for block in matcher.get_matching_blocks()
        for offset in range(block.size)
    ]


def cheapest_pairs(
    old_keys: list[Hashable],
    new_keys: list[Hashable],
    old_near: list[Hashable],
    new_near: list[Hashable],
) -> list[tuple[int, int]]:
    """Positions paired in order by the cheapest edit of one key list into the other: two
    items with the same key pair for nothing, two with only the same near key (the same
    class, other shapes) for 1, and leaving an item unpaired costs 2 (removed or inserted).

    A longest common subsequence of the keys alone pairs the look-alike `bn2` of a block
    with the `bn1` of another whose width changed, leaving three calls removed and three
    inserted; here the block's calls pair in place, each changed, for less.
    """
    rows, columns = len(old_keys), len(new_keys)
    # penalty[i][j]: what the cheapest edit of old[i:] into new[j:] is charged.
    penalty = [[0] * (columns + 1) for _ in range(rows + 1)]
    for i in range(rows - 1, -1, -1):
        penalty[i][columns] = penalty[i + 1][columns] + 2
    for j in range(columns - 1, -1, -1):
        penalty[rows][j] = penalty[rows][j + 1] + 2
    for i in range(rows - 1, -1, -1):
        below, here = penalty[i + 1], penalty[i]
        for j in range(columns - 1, -1, -1):
            best = min(below[j], here[j + 1]) + 2
            if old_keys[i] == new_keys[j]:
                best = min(best, below[j + 1])
            elif old_near[i] == new_near[j]:
                best = min(best, below[j + 1] + 1)
            here[j] = best
    pairs = []
    i = j = 0
    while i < rows and j < columns:
        paired = 0 if old_keys[i] == new_keys[j] else 1 if old_near[i] == new_near[j] else None
        if paired is not None and penalty[i][j] == penalty[i + 1][j + 1] + paired:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif penalty[i][j] == penalty[i + 1][j] + 2:
            i += 1
        else:
            j += 1
    return pairs


class ChangedRun(NamedTuple):
    """A run two sequences do not share: `old[old_start:old_end]` became
    `new[new_start:new_end]`; `tag` is "replace", "delete" (nothing new) or "insert"."""

    tag: str
    old_start: int
    old_end: int
    new_start: int
    new_end: int


def changed_runs(old: Sequence[Hashable], new: Sequence[Hashable]) -> list[ChangedRun]:
    """The runs where two sequences differ, in order, with no junk heuristic (as
    `common_subsequence`): what a line diff of them would show."""
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    return [ChangedRun(*opcode) for opcode in matcher.get_opcodes() if opcode[0] != "equal"]


def only_unique(
    old_keys: list[Hashable], new_keys: list[Hashable]
) -> tuple[list[Hashable], list[Hashable]]:
    """The keys found once on each side; every other key made unpairable."""
    old_counts, new_counts = Counter(old_keys), Counter(new_keys)

    def kept(keys: list[Hashable], side: str) -> list[Hashable]:
        return [
            key if old_counts[key] == 1 and new_counts[key] == 1 else (side, position)
            for position, key in enumerate(keys)
        ]

    return kept(old_keys, "old"), kept(new_keys, "new")


def occurrences(keys: list[Hashable]) -> list[Hashable]:
    """Each key with how many times it came before: `[(k, 0), (k, 1), (m, 0)]`."""
    seen: Counter[Hashable] = Counter()
    unique: list[Hashable] = []
    for key in keys:
        unique.append((key, seen[key]))
        seen[key] += 1
    return unique


def match_in_order(
    old_keys: list[Hashable], new_keys: list[Hashable]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Positions of the unique keys both lists have: the longest in-order pairing, and the
    pairs left out of it because they cross it."""
    old_positions = {key: index for index, key in enumerate(old_keys)}
    common = [
        (old_positions[key], new_index)
        for new_index, key in enumerate(new_keys)
        if key in old_positions
    ]
    in_order = longest_increasing(common)
    kept = set(in_order)
    return in_order, [pair for pair in common if pair not in kept]


def interleave(old_count: int, new_count: int, pairs: list[tuple[int, int]]) -> list[AlignedPair]:
    """Rows for all calls: each pair, preceded by the unpaired calls before it."""
    rows: list[AlignedPair] = []
    old_next = new_next = 0
    for old_index, new_index in [*pairs, (old_count, new_count)]:
        rows += [(index, None) for index in range(old_next, old_index)]
        rows += [(None, index) for index in range(new_next, new_index)]
        rows.append((old_index, new_index))
        old_next, new_next = old_index + 1, new_index + 1
    rows.pop()  # the end, not a pair
    return rows


def longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
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


def pairs_between(
    old_lines: Sequence[ItemT],
    new_lines: Sequence[ItemT],
    olds: list[int],
    news: list[int],
    pairs: list[tuple[int, int]],
    key: Callable[[ItemT], Hashable],
    new_key: Callable[[ItemT], Hashable] | None = None,
    *,
    unique_only: bool,
    near_key: Callable[[ItemT], Hashable] | None = None,
    uneven_only: bool = False,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """`pairs` (in order) with more pairs by `key` in each stretch between two of them, and
    the pairs by `key` that cross those (keys found once on each side only); `new_key`, where
    given, is the key of the new calls.

    `unique_only` pairs only keys found once in the stretch on each side (patience: a reused
    module's calls then pair between the same neighbours); otherwise a key's occurrences pair
    in order, and with a `near_key`, a short stretch by the cheapest edit (`cheapest_pairs`).
    `uneven_only` pairs only in stretches with more items on one side than the other.
    """
    result: list[tuple[int, int]] = []
    crossed: list[tuple[int, int]] = []
    paired_old = {i for i, _ in pairs}
    paired_new = {j for _, j in pairs}
    free_old = [i for i in olds if i not in paired_old]
    free_new = [j for j in news if j not in paired_new]
    previous_old = previous_new = -1
    for anchor in [*pairs, (len(old_lines), len(new_lines))]:
        between_old = free_old[
            bisect.bisect_right(free_old, previous_old) : bisect.bisect_left(free_old, anchor[0])
        ]
        between_new = free_new[
            bisect.bisect_right(free_new, previous_new) : bisect.bisect_left(free_new, anchor[1])
        ]
        uneven = len(between_old) != len(between_new)
        if between_old and between_new and (uneven or not uneven_only):
            old_keys = [key(old_lines[i]) for i in between_old]
            new_keys = [(new_key or key)(new_lines[j]) for j in between_new]
            near: tuple[list[Hashable], list[Hashable]] | None = None
            short = max(len(old_keys), len(new_keys)) <= _NEAR_SHORT
            if near_key is not None and short and not unique_only:
                near = (
                    [near_key(old_lines[i]) for i in between_old],
                    [near_key(new_lines[j]) for j in between_new],
                )
            in_order, out_of_order = _stretch_pairs(old_keys, new_keys, near, unique_only)
            result += [(between_old[i], between_new[j]) for i, j in in_order]
            if unique_only:
                crossed += [(between_old[i], between_new[j]) for i, j in out_of_order]
        if anchor[0] < len(old_lines):
            result.append(anchor)
        previous_old, previous_new = anchor
    return result, crossed


def pairs_around_held(
    held: list[tuple[int, int]],
    old_lines: Sequence[ItemT],
    new_lines: Sequence[ItemT],
    olds: list[int],
    news: list[int],
    pairs: list[tuple[int, int]],
    key: Callable[[ItemT], Hashable],
    new_key: Callable[[ItemT], Hashable] | None = None,
    *,
    unique_only: bool,
    near_key: Callable[[ItemT], Hashable] | None = None,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """`pairs_between`, with `held` (pairs made before, elsewhere) bounding the stretches
    too; they are not among the pairs returned. `pairs` are in order, so without `held`
    this is `pairs_between` itself."""
    found, crossed = pairs_between(
        old_lines, new_lines, olds, news, sorted([*held, *pairs]), key, new_key,
        unique_only=unique_only, near_key=near_key,
    )  # fmt: skip
    kept = set(held)
    return [pair for pair in found if pair not in kept], crossed


def _stretch_pairs(
    old_keys: list[Hashable],
    new_keys: list[Hashable],
    near: tuple[list[Hashable], list[Hashable]] | None,
    unique_only: bool,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The pairs of one stretch of `pairs_between`, by position in it: in order, and out of
    order (keys found once on each side, `unique_only`)."""
    if unique_only:
        return match_in_order(*only_unique(old_keys, new_keys))
    if near is not None:  # a short stretch, with near keys: the cheapest edit
        return cheapest_pairs(old_keys, new_keys, *near), []
    if len(old_keys) <= _SHORT and len(new_keys) <= _SHORT:
        return common_subsequence(old_keys, new_keys), []
    # A long stretch: the same first and last keys in place, then occurrences in order, in
    # O(n log n); without the trim, one call changed mid-way would pair each later look-alike
    # with the next one's partner.
    first, last = same_ends(old_keys, new_keys)
    old_end, new_end = len(old_keys) - last, len(new_keys) - last
    middle, crossed = match_in_order(
        occurrences(old_keys[first:old_end]), occurrences(new_keys[first:new_end])
    )
    pairs = [(index, index) for index in range(first)]
    pairs += [(first + i, first + j) for i, j in middle]
    pairs += [(old_end + index, new_end + index) for index in range(last)]
    return pairs, [(first + i, first + j) for i, j in crossed]


def same_ends(old_keys: Sequence[Hashable], new_keys: Sequence[Hashable]) -> tuple[int, int]:
    """How many keys the two lists share at their start, and then at their end."""
    shortest = min(len(old_keys), len(new_keys))
    first = 0
    while first < shortest and old_keys[first] == new_keys[first]:
        first += 1
    last = 0
    while last < shortest - first and old_keys[-1 - last] == new_keys[-1 - last]:
        last += 1
    return first, last


def unique_pairs(
    old_lines: Sequence[ItemT],
    new_lines: Sequence[ItemT],
    olds: list[int],
    news: list[int],
    taken: list[tuple[int, int]],
    key: Callable[[ItemT], Hashable],
) -> list[tuple[int, int]]:
    """The items at `olds` and `news`, none of them in a pair of `taken`, whose key is found
    once on each side, paired, in old order (wherever they are: they may cross)."""
    taken_old = {i for i, _ in taken}
    taken_new = {j for _, j in taken}
    old_keys = {i: key(old_lines[i]) for i in olds if i not in taken_old}
    new_keys = {j: key(new_lines[j]) for j in news if j not in taken_new}
    old_count, new_count = Counter(old_keys.values()), Counter(new_keys.values())
    by_key = {found: j for j, found in new_keys.items()}
    return [
        (i, by_key[found])
        for i, found in old_keys.items()
        if old_count[found] == 1 and new_count[found] == 1
    ]


def without(
    olds: list[int], news: list[int], pairs: list[tuple[int, int]]
) -> tuple[list[int], list[int]]:
    """`olds` and `news` without the items `pairs` pair."""
    taken_old = {i for i, _ in pairs}
    taken_new = {j for _, j in pairs}
    return [i for i in olds if i not in taken_old], [j for j in news if j not in taken_new]


def crossing(pairs: list[tuple[int, int]]) -> bool:
    """Whether two pairs cross: their new calls in the other order than their old ones."""
    in_new_order = [new for _, new in sorted(pairs)]
    return any(map(int.__gt__, in_new_order, in_new_order[1:]))


def pairs_by_key(
    old_lines: Sequence[ItemT],
    new_lines: Sequence[ItemT],
    olds: list[int],
    news: list[int],
    key: Callable[[ItemT], Hashable],
    new_key: Callable[[ItemT], Hashable] | None = None,
) -> list[tuple[int, int]]:
    """The items at `olds` and `news` with the same key paired in order of their occurrence
    (`new_key` reads the new items where it differs)."""
    waiting: dict[Hashable, list[int]] = defaultdict(list)
    for j in news:
        waiting[(new_key or key)(new_lines[j])].append(j)
    pairs = []
    for i in olds:
        candidates = waiting.get(key(old_lines[i]))
        if candidates:
            pairs.append((i, candidates.pop(0)))
    return pairs
