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

from collections.abc import Callable, Hashable
from typing import NamedTuple

from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.golden.format import GoldenLine

_MOST_CELLS = 250_000  # the table's size, beyond which the calls pair by the other passes
# One stage flattened renumbers only what follows it, which the other passes read by place.
_FEWEST_STAGES = 2


class Flattened(NamedTuple):
    """Pairs of flattened stages' calls, and the stages known to have lent theirs."""

    pairs: list[tuple[int, int]]
    lent: set[int]


def flattened_pairs(
    trees: tuple[CallTree, CallTree],
    children: tuple[list[int], list[int]],
    new_parent: int,
    old_to_new: dict[int, int],
    key: Callable[[GoldenLine], Hashable],
) -> Flattened:
    """Pairs of unpaired old stages' calls with the new calls they became, among the
    unpaired `children` (old, new) of two paired calls (`new_parent`, the new one).

    None unless two stages or more (of a class no new child has, none of their calls
    paired) may have lent calls: one flattened and one left out or made another class read
    so, each whole. A stage known to have lent its calls is enough alone, whatever its
    class (`_lends`); those are returned, to be read as unwrapped, not paired.
    """
    old_tree, new_tree = trees
    olds, news = children
    # A stage whose class a new call has may be that call, changed: only stages of a class
    # gone from the new calls are read as flattened, or stages known to have lent calls.
    new_types = {new_tree.lines[j].module_type for j in news}
    new_keys = [key(new_tree.lines[j]) for j in news]
    expanded: list[int] = []
    inside: set[int] = set()
    stages = 0
    lent: set[int] = set()
    for old_index in olds:
        stage_children = old_tree.children[old_index]
        if _lends(trees, old_index, (news, new_keys), new_parent, old_to_new, key):
            taken = [child for child in stage_children if child not in old_to_new]
            expanded += taken
            inside.update(taken)
            stages += 1
            lent.add(old_index)
        elif (
            stage_children
            and old_tree.lines[old_index].module_type not in new_types
            and not any(child in old_to_new for child in stage_children)
        ):
            expanded += stage_children
            inside.update(stage_children)
            stages += 1
        else:
            expanded.append(old_index)
    if not inside or (stages < _FEWEST_STAGES and not lent):
        return Flattened([], set())
    if len(expanded) * len(news) > _MOST_CELLS:
        return Flattened([], set())
    old_keys = [key(old_tree.lines[i]) for i in expanded]
    # The calls before the first stage keep their places: a flatten renumbers only what
    # follows it. Read in order with the rest, the stem's norm and activation were taken for
    # a stage's look-alikes.
    kept = _kept_before(old_keys, new_keys, expanded.index(min(inside)))
    pairs = [
        (expanded[kept + a], news[kept + b])
        for a, b in _common_run(old_keys[kept:], new_keys[kept:])
    ]
    found = [(i, j) for i, j in pairs if i in inside]
    paired_in = {old_tree.parents[i] for i, _ in found}
    return Flattened(found, lent & paired_in)


def _lends(
    trees: tuple[CallTree, CallTree],
    old_index: int,
    news: tuple[list[int], list[Hashable]],
    new_parent: int,
    old_to_new: dict[int, int],
    key: Callable[[GoldenLine], Hashable],
) -> bool:
    """Whether an unpaired old stage lent its calls to the new parent, whatever its class:
    one of its calls is paired with one of the parent's already (a stage flattened beside
    one that stayed), or its single layers run side by side among the parent's
    (`_run_among`); unless a new call of its class holds the rest of its calls, first or
    last (blocks moved out of a stage that stays, a stem split off a body)."""
    old_tree, new_tree = trees
    children = old_tree.children[old_index]
    if not children:
        return False
    new_children, new_keys = news
    known = any(
        child in old_to_new and new_tree.parents[old_to_new[child]] == new_parent
        for child in children
    )
    if not known and not _run_among(old_tree, children, new_tree, new_children, new_keys, key):
        return False
    rest = [key(old_tree.lines[child]) for child in children if child not in old_to_new]
    module_type = old_tree.lines[old_index].module_type
    for j in new_children:
        if new_tree.lines[j].module_type != module_type or not new_tree.children[j]:
            continue
        held = [key(new_tree.lines[child]) for child in new_tree.children[j]]
        if 2 * len(held) >= len(rest) and held in (rest[: len(held)], rest[-len(held) :]):
            return False
    return True


def _run_among(
    old_tree: CallTree,
    children: list[int],
    new_tree: CallTree,
    news: list[int],
    new_keys: list[Hashable],
    key: Callable[[GoldenLine], Hashable],
) -> bool:
    """Whether a stage's calls, two or more and none with nested calls, are found one after
    another among `news`, also without nested calls (their keys `new_keys`): the stage's
    layers now the parent's own, side by side, whatever the stage's class. A container's
    look says too little (any Sequential of one shape is like any other) to tell so."""
    count = len(children)
    if (
        count < _FEWEST_STAGES
        or count > len(news)
        or any(map(old_tree.children.__getitem__, children))
    ):
        return False
    keys = [key(old_tree.lines[child]) for child in children]
    return any(
        new_keys[start : start + count] == keys
        and not any(new_tree.children[j] for j in news[start : start + count])
        for start in range(len(news) - count + 1)
        if new_keys[start] == keys[0]
    )


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
