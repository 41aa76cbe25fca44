"""Look-alike siblings paired in their order: the last pass of the tree alignment, and the
first pass's pairing of look-alikes one more on one side. Pure, no torch.

Two children of one parent whose subtrees are alike in everything but their paths (two
`Linear(8, 8)` layers, two identical blocks) can be told apart by their names alone, and
names say where a call is, not which module makes it: a block inserted before `2.1.0`
renumbers `2.1.0` and `2.1.1` to `2.1.1` and `2.1.2`, and paired by name the two layers
read as swapped. Nothing in a trace shows such a swap, so look-alike siblings that stayed
under one parent pair in the order they run, each with its nested calls, unless every one
of them kept its name: blocks registered by name in another order (`0, 2, 1`) were
swapped, and their names say so.
"""

from __future__ import annotations

from collections import defaultdict

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree


def pair_look_alikes_in_order(
    old_tree: CallTree,
    new_tree: CallTree,
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
) -> set[int]:
    """Re-pair, in the two maps, look-alike siblings paired against their order; returns the
    old calls (nested ones included) whose partner changed."""
    changed: set[int] = set()
    parents = [NO_PARENT, *(index for index in old_to_new if old_tree.children[index])]
    for parent in parents:
        for olds in _look_alike_groups(old_tree, new_tree, old_to_new, parent):
            news = sorted(old_to_new[old_index] for old_index in olds)
            if [old_to_new[old_index] for old_index in olds] == news or all(
                old_tree.lines[old_index].path == new_tree.lines[old_to_new[old_index]].path
                for old_index in olds
            ):
                continue
            for old_index in olds:
                del new_to_old[old_to_new[old_index]]
            for old_index, new_index in zip(olds, news, strict=True):
                for offset in range(old_tree.size(old_index)):
                    old_to_new[old_index + offset] = new_index + offset
                    new_to_old[new_index + offset] = old_index + offset
                changed.update(range(old_index, old_tree.ends[old_index]))
    return changed


def _look_alike_groups(
    old_tree: CallTree, new_tree: CallTree, old_to_new: dict[int, int], parent: int
) -> list[list[int]]:
    """The old `parent`'s children paired under its partner, unchanged (their subtrees alike
    on both sides), grouped by what they look like, in their order; groups of two or more."""
    if parent == NO_PARENT:
        siblings, new_parent = old_tree.roots, NO_PARENT
    else:
        siblings, new_parent = old_tree.children[parent], old_to_new[parent]
    groups: dict[int, list[int]] = defaultdict(list)
    for child in siblings:
        partner = old_to_new.get(child)
        if (
            partner is not None
            and new_tree.parents[partner] == new_parent
            and old_tree.shapes[child] == new_tree.shapes[partner]
            and _paired_whole(old_tree, old_to_new, child, partner)
        ):
            groups[old_tree.shapes[child]].append(child)
    return [olds for olds in groups.values() if len(olds) > 1]


def _paired_whole(
    tree: CallTree, old_to_new: dict[int, int], old_index: int, new_index: int
) -> bool:
    """Whether every call nested in the old call pairs with the call at its offset in the
    new one: a subtree paired whole, which can be re-paired whole."""
    return all(
        old_to_new.get(old_index + offset) == new_index + offset
        for offset in range(1, tree.size(old_index))
    )


def least_displaced(
    olds: list[int], news: list[int], old_tree: CallTree, new_tree: CallTree
) -> list[tuple[int, int]]:
    """Look-alike siblings, more on one side, paired in order leaving out the ones whose
    absence explains how the others moved among their siblings.

    A stage flattened among six look-alike stages leaves five; its calls now run where it
    ran, so the stages after it are further down their parent, and the stages before it are
    where they were: the one left out is where the others' places jump. Two flattened leave
    two jumps (`paired_in_order`). Ties leave out the last, as pairing in order does.
    """
    longer, shorter = (olds, news) if len(olds) > len(news) else (news, olds)
    longer_tree, shorter_tree = (old_tree, new_tree) if longer is olds else (new_tree, old_tree)
    longer_places, longer_count = _places_among_siblings(longer, longer_tree)
    shorter_places, shorter_count = _places_among_siblings(shorter, shorter_tree)
    paired = paired_in_order(longer_places, shorter_places, shorter_count - longer_count)
    kept = [longer[at] for at in paired]
    return (
        list(zip(kept, shorter, strict=True))
        if longer is olds
        else list(zip(shorter, kept, strict=True))
    )


def paired_in_order(longer: list[int], shorter: list[int], end_shift: int) -> list[int]:
    """Which of `longer`'s places pair, in order, with each of `shorter`'s: those whose
    shifts change least where no call is left out, then least in all; on a tie the first
    ones pair.

    A pair's shift is its shorter place less its longer one: it starts at 0, before the
    first sibling, and ends at `end_shift`, the difference in sibling counts. A flattened
    call shifts the pairs after it by its calls less one, so between two pairs with nothing
    left out the shift should stay as it was, and across the calls left out it should
    change least. `after[i, j]`: the least that the pairs after longer `i` with shorter `j`
    cost; a longer place `i` pairs only with a shorter one between `i - extra` and `i`.
    """
    extra, last = len(longer) - len(shorter), len(shorter) - 1

    def shift(i: int, j: int) -> int:
        return shorter[j] - longer[i]

    def change(before: int, after_shift: int, left_out: bool) -> tuple[int, int]:
        size = abs(after_shift - before)
        return (0 if left_out else size, size)

    def candidates(j: int, after_i: int) -> range:  # where shorter `j` may pair, after `after_i`
        return range(max(after_i + 1, j), j + extra + 1)

    def plus(first: tuple[int, int], second: tuple[int, int]) -> tuple[int, int]:
        return (first[0] + second[0], first[1] + second[1])

    after: dict[tuple[int, int], tuple[int, int]] = {}
    for j in range(last, -1, -1):
        for i in candidates(j, -1):
            if j == last:
                after[i, j] = change(shift(i, j), end_shift, i < len(longer) - 1)
                continue
            after[i, j] = min(
                plus(
                    change(shift(i, j), shift(next_i, j + 1), next_i > i + 1), after[next_i, j + 1]
                )
                for next_i in candidates(j + 1, i)
            )
    paired: list[int] = []
    previous_i, previous_shift = -1, 0
    for j in range(len(shorter)):
        choices = candidates(j, previous_i)
        costs = [
            plus(change(previous_shift, shift(i, j), i > previous_i + 1), after[i, j])
            for i in choices
        ]
        previous_i = choices[costs.index(min(costs))]
        previous_shift = shift(previous_i, j)
        paired.append(previous_i)
    return paired


def _places_among_siblings(calls: list[int], tree: CallTree) -> tuple[list[int], int]:
    """Each call's place among its parent's children (the calls share one parent), and how
    many children it has."""
    siblings = tree.siblings(calls[0])
    place = {call: at for at, call in enumerate(siblings)}
    return [place[call] for call in calls], len(siblings)
