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
    """Look-alike siblings, one more on one side, paired in order leaving out the one whose
    absence moves the others least among their siblings.

    A stage flattened among six look-alike stages leaves five; its calls now run where it
    ran, so the stages after it are further down their parent: the one left out is where
    the gap is. Ties leave out the last, as pairing in order does.
    """
    longer, shorter = (olds, news) if len(olds) > len(news) else (news, olds)
    longer_tree, shorter_tree = (old_tree, new_tree) if longer is olds else (new_tree, old_tree)
    longer_places = _places_among_siblings(longer, longer_tree)
    shorter_places = _places_among_siblings(shorter, shorter_tree)
    # Left out at `gap`: the calls before it pair with the same index, those after with one less.
    before = [0]
    for longer_place, shorter_place in zip(longer_places, shorter_places, strict=False):
        before.append(before[-1] + abs(longer_place - shorter_place))
    after = [0] * (len(shorter) + 1)
    for index in reversed(range(len(shorter))):
        after[index] = after[index + 1] + abs(longer_places[index + 1] - shorter_places[index])
    gap = min(range(len(shorter) + 1), key=lambda at: (before[at] + after[at], -at))
    kept = longer[:gap] + longer[gap + 1 :]
    return (
        list(zip(kept, shorter, strict=True))
        if longer is olds
        else list(zip(shorter, kept, strict=True))
    )


def _places_among_siblings(calls: list[int], tree: CallTree) -> list[int]:
    """Each call's place among its parent's children (the calls share one parent)."""
    place = {call: at for at, call in enumerate(tree.siblings(calls[0]))}
    return [place[call] for call in calls]
