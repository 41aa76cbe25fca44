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
    two jumps (`paired_in_order`). Ties leave out the last, as pairing in order does. None
    pair where there are too many to weigh.
    """
    sides = _Sides(olds, news, old_tree, new_tree)
    paired = paired_in_order(*sides.places)
    return [] if paired is None else sides.pairs(paired)


def pairs_by_gaps(
    pairs: list[tuple[int, int]],
    olds: list[int],
    news: list[int],
    old_tree: CallTree,
    new_tree: CallTree,
) -> list[tuple[int, int]]:
    """Look-alikes more on one side, each side under one parent of one path: `least_displaced`'s
    pairs where the calls they leave out explain every other call's place (its shift changes
    only across them) and `pairs` do not; else none.

    `pairs` were made by the calls' names (the new `2` with the old `2`), and need not pair
    every call of the shorter side or keep their order. Two stages of six flattened
    renumber the stages between them, and pairing by name leaves out the wrong ones.
    """
    old_parents = {old_tree.parents[old_index] for old_index in olds}
    new_parents = {new_tree.parents[new_index] for new_index in news}
    if len(old_parents) != 1 or len(new_parents) != 1 or NO_PARENT in old_parents | new_parents:
        return []
    (old_parent,), (new_parent,) = old_parents, new_parents
    if old_tree.lines[old_parent].path != new_tree.lines[new_parent].path:
        return []
    sides = _Sides(olds, news, old_tree, new_tree)
    given = sides.longer_indices(pairs)
    if given is not None and shift_changes(*sides.places, given)[0] == 0:
        return []  # checked first: it is linear, where the best pairing is not
    best = paired_in_order(*sides.places)
    if best is None or shift_changes(*sides.places, best)[0] != 0:
        return []
    return sides.pairs(best)


def one_at_its_depth(
    olds: list[int], news: list[int], old_tree: CallTree, new_tree: CallTree
) -> list[tuple[int, int]]:
    """Of one identical subtree on one side and several on the other, the pair of the one
    at its depth, where it is the only one there (a stage copied and the copy's calls
    wrapped: the stage is the one as deep as it was, not the copy's wrapped calls); else
    none. For a comparison without names, where no path says which."""
    if len(olds) == 1:
        depth = old_tree.lines[olds[0]].depth
        alike = [new for new in news if new_tree.lines[new].depth == depth]
        return [(olds[0], alike[0])] if len(alike) == 1 else []
    if len(news) == 1:
        depth = new_tree.lines[news[0]].depth
        alike = [old for old in olds if old_tree.lines[old].depth == depth]
        return [(alike[0], news[0])] if len(alike) == 1 else []
    return []


class _Sides:
    """Look-alikes more on one side: the longer and the shorter, and their places."""

    def __init__(
        self, olds: list[int], news: list[int], old_tree: CallTree, new_tree: CallTree
    ) -> None:
        self.longer_is_old = len(olds) > len(news)
        self.longer, self.shorter = (olds, news) if self.longer_is_old else (news, olds)
        longer_tree, shorter_tree = (
            (old_tree, new_tree) if self.longer_is_old else (new_tree, old_tree)
        )
        longer_places, longer_count = _places_among_siblings(self.longer, longer_tree)
        shorter_places, shorter_count = _places_among_siblings(self.shorter, shorter_tree)
        self.places = (longer_places, shorter_places, shorter_count - longer_count)

    def pairs(self, paired: list[int]) -> list[tuple[int, int]]:
        """(old, new) pairs of the shorter side's calls with the longer's at `paired`."""
        kept = [self.longer[at] for at in paired]
        if self.longer_is_old:
            return list(zip(kept, self.shorter, strict=True))
        return list(zip(self.shorter, kept, strict=True))

    def longer_indices(self, pairs: list[tuple[int, int]]) -> list[int] | None:
        """Where `pairs` pair each shorter call on the longer side, in order; None if they
        leave one out or cross."""
        partner = {
            new if self.longer_is_old else old: old if self.longer_is_old else new
            for old, new in pairs
        }
        at = {call: index for index, call in enumerate(self.longer)}
        indices = [at.get(partner.get(call, -1), -1) for call in self.shorter]
        if -1 in indices or indices != sorted(set(indices)):
            return None
        return indices


# The most steps `paired_in_order` takes (a few tenths of a second): each shorter place weighs
# its `extra + 1` longer ones against as many next ones. A hundred look-alikes with fifty
# left out take 130,000; twenty thousand with one left out, 80,000.
_MOST_STEPS = 500_000


def paired_in_order(longer: list[int], shorter: list[int], end_shift: int) -> list[int] | None:
    """Which of `longer`'s places pair, in order, with each of `shorter`'s: those whose
    shifts change least where no call is left out, then least in all; on a tie the first
    ones pair.

    A pair's shift is its shorter place less its longer one: it starts at 0, before the
    first sibling, and ends at `end_shift`, the difference in sibling counts. A flattened
    call shifts the pairs after it by its calls less one, so between two pairs with nothing
    left out the shift should stay as it was, and across the calls left out it should
    change least. `after[i, j]`: the least that the pairs after longer `i` with shorter `j`
    cost; a longer place `i` pairs only with a shorter one between `i - extra` and `i`.
    None where that would take more than `_MOST_STEPS` steps.
    """
    extra, last = len(longer) - len(shorter), len(shorter) - 1
    if len(shorter) * (extra + 1) ** 2 > _MOST_STEPS:
        return None

    def shift(i: int, j: int) -> int:
        return shorter[j] - longer[i]

    def candidates(j: int, after_i: int) -> range:  # where shorter `j` may pair, after `after_i`
        return range(max(after_i + 1, j), j + extra + 1)

    after: dict[tuple[int, int], tuple[int, int]] = {}
    for j in range(last, -1, -1):
        for i in candidates(j, -1):
            if j == last:
                after[i, j] = _change(shift(i, j), end_shift, i < len(longer) - 1)
                continue
            after[i, j] = min(
                _plus(
                    _change(shift(i, j), shift(next_i, j + 1), next_i > i + 1),
                    after[next_i, j + 1],
                )
                for next_i in candidates(j + 1, i)
            )
    paired: list[int] = []
    previous_i, previous_shift = -1, 0
    for j in range(len(shorter)):
        choices = candidates(j, previous_i)
        weights = [
            _plus(_change(previous_shift, shift(i, j), i > previous_i + 1), after[i, j])
            for i in choices
        ]
        previous_i = choices[weights.index(min(weights))]
        previous_shift = shift(previous_i, j)
        paired.append(previous_i)
    return paired


def shift_changes(
    longer: list[int], shorter: list[int], end_shift: int, paired: list[int]
) -> tuple[int, int]:
    """What `paired_in_order` counts against a pairing: the changes of shift where nothing
    is left out, and all changes of shift, from 0 before the first sibling to `end_shift`."""
    total, previous_i, previous_shift = (0, 0), -1, 0
    for j, i in enumerate(paired):
        total = _plus(total, _change(previous_shift, shorter[j] - longer[i], i > previous_i + 1))
        previous_i, previous_shift = i, shorter[j] - longer[i]
    return _plus(total, _change(previous_shift, end_shift, previous_i < len(longer) - 1))


def _change(before: int, after: int, left_out: bool) -> tuple[int, int]:
    """A change of shift: its size where no call is left out between, and its size."""
    size = abs(after - before)
    return (0 if left_out else size, size)


def _plus(first: tuple[int, int], second: tuple[int, int]) -> tuple[int, int]:
    return (first[0] + second[0], first[1] + second[1])


def _places_among_siblings(calls: list[int], tree: CallTree) -> tuple[list[int], int]:
    """Each call's place among its parent's children (the calls share one parent), and how
    many children it has."""
    siblings = tree.siblings(calls[0])
    place = {call: at for at, call in enumerate(siblings)}
    return [place[call] for call in calls], len(siblings)
