"""Two children of one parent that took each other's place in its call order. Pure, no torch.

The alignment asks before it picks the calls it shows in order: of blocks 0, 1, 2 run as
2, 1, 0, the longest in-order pairing keeps one of the swapped blocks and pushes block 1
out as a false move; with both swapped blocks out of order, block 1 stays where it was.
The explanation asks again for its `0 and 2 (Sequential) swapped` sentence.
"""

from __future__ import annotations

from collections.abc import Collection

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree


def exchanged(
    old_tree: CallTree,
    new_tree: CallTree,
    partners: dict[int, int],
    parent: int,
    leave_out: Collection[int] = (),
) -> list[tuple[int, int]]:
    """Pairs of the old `parent`'s children, among those that stayed under its partner (and
    not in `leave_out`), that exchanged places: the child at rank `k` now at rank `l` and the
    one at `l` now at `k`. `parent` is `NO_PARENT` for the top-level calls."""
    stayed, now = _ranks(old_tree, new_tree, partners, parent, leave_out)
    return [
        (stayed[position], stayed[was])
        for position, was in enumerate(now)
        if was > position and now[was] == position
    ]


def far_swaps(old_tree: CallTree, new_tree: CallTree, partners: dict[int, int]) -> set[int]:
    """The old calls, nested ones included, of children swapped across siblings that kept
    their places (blocks 0 and 2 of three): to show out of order, so the siblings between
    stay in order. A swap of neighbours is left to the in-order pairing, which shows one of
    them moved either way."""
    found: set[int] = set()
    parents = [NO_PARENT, *(index for index in partners if old_tree.children[index])]
    for parent in parents:
        stayed, now = _ranks(old_tree, new_tree, partners, parent, ())
        for position, was in enumerate(now):
            if (
                was > position + 1
                and now[was] == position
                and all(now[between] == between for between in range(position + 1, was))
            ):
                for child in (stayed[position], stayed[was]):
                    found.update(range(child, old_tree.ends[child]))
    return found


def _ranks(
    old_tree: CallTree,
    new_tree: CallTree,
    partners: dict[int, int],
    parent: int,
    leave_out: Collection[int],
) -> tuple[list[int], list[int]]:
    """The old `parent`'s children that stayed under its partner, in the old order, and the
    old rank of each in the new order."""
    if parent == NO_PARENT:
        siblings, new_parent = old_tree.roots, NO_PARENT
    elif parent in partners:
        siblings, new_parent = old_tree.children[parent], partners[parent]
    else:
        return [], []
    stayed = [
        child
        for child in siblings
        if child in partners
        and child not in leave_out
        and new_tree.parents[partners[child]] == new_parent
    ]
    rank = {child: position for position, child in enumerate(stayed)}
    return stayed, [rank[child] for child in sorted(stayed, key=partners.__getitem__)]
