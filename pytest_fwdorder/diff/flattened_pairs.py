"""Stages flattened into their parent, paired in order: the old stages' calls against the
new parent's calls. Pure, no torch.

A stage flattened lends its calls to its parent, whose later calls are renumbered: paired
by their numbers, the old `2.0` is taken for the new `2` though the stage before it left
two calls there, and a stage left out reads as calls removed from each of its neighbours.
Read in order instead, the old stages' calls (a stage whose calls all lack a partner stands
for its calls) against the new parent's form one longest common run, by class and shapes;
from the end back, each new call takes the latest old call it can, so the calls of one
stage stay together and a stage left out goes whole. Stages that look alike cannot be told
apart this way: of those, the first reads as the one left out.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable

from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.golden.format import GoldenLine

_MOST_CELLS = 250_000  # the table's size, beyond which the calls pair by the other passes
# One stage flattened renumbers only what follows it, which the other passes read by place.
_FEWEST_STAGES = 2


def flattened_pairs(
    trees: tuple[CallTree, CallTree],
    olds: list[int],
    news: list[int],
    paired_old: Container[int],
    key: Callable[[GoldenLine], Hashable],
) -> list[tuple[int, int]]:
    """Pairs of unpaired old stages' calls with the new calls they became, among the
    unpaired children `olds` and `news` of two paired calls; none unless two stages or more
    (of a class no call in `news` has, none of their calls paired) may have lent calls: one
    flattened and one left out or made another class read so, each whole."""
    old_tree, new_tree = trees
    # A stage whose class a new call has may be that call, changed: only stages of a class
    # gone from the new calls are read as flattened.
    new_types = {new_tree.lines[j].module_type for j in news}
    expanded: list[int] = []
    inside: set[int] = set()
    stages = 0
    for old_index in olds:
        children = old_tree.children[old_index]
        if (
            children
            and old_tree.lines[old_index].module_type not in new_types
            and not any(child in paired_old for child in children)
        ):
            expanded += children
            inside.update(children)
            stages += 1
        else:
            expanded.append(old_index)
    if stages < _FEWEST_STAGES or len(expanded) * len(news) > _MOST_CELLS:
        return []
    old_keys = [key(old_tree.lines[i]) for i in expanded]
    new_keys = [key(new_tree.lines[j]) for j in news]
    # The calls before the first stage keep their places: a flatten renumbers only what
    # follows it. Read in order with the rest, the stem's norm and activation were taken for
    # a stage's look-alikes.
    kept = _kept_before(old_keys, new_keys, expanded.index(min(inside)))
    pairs = [
        (expanded[kept + a], news[kept + b])
        for a, b in _common_run(old_keys[kept:], new_keys[kept:])
    ]
    return [(i, j) for i, j in pairs if i in inside]


def _kept_before(old_keys: list[Hashable], new_keys: list[Hashable], first_stage: int) -> int:
    """How many calls before the first stage's calls are the same on both sides, in place."""
    kept = 0
    while kept < min(first_stage, len(new_keys)) and old_keys[kept] == new_keys[kept]:
        kept += 1
    return kept


def _common_run(old_keys: list[Hashable], new_keys: list[Hashable]) -> list[tuple[int, int]]:
    """A longest common subsequence of two key lists, as index pairs; read from the end,
    each new key takes the latest old key it can."""
    rows, columns = len(old_keys), len(new_keys)
    table = [[0] * (columns + 1) for _ in range(rows + 1)]
    for a in range(rows):
        for b in range(columns):
            table[a + 1][b + 1] = (
                table[a][b] + 1
                if old_keys[a] == new_keys[b]
                else max(table[a][b + 1], table[a + 1][b])
            )
    pairs = []
    a, b = rows, columns
    while a and b:
        if old_keys[a - 1] == new_keys[b - 1]:
            pairs.append((a - 1, b - 1))
            a, b = a - 1, b - 1
        elif table[a][b - 1] >= table[a - 1][b]:
            b -= 1
        else:
            a -= 1
    return pairs[::-1]
