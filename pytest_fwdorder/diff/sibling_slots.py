"""The first pass's pairs of look-alike siblings, checked against the names and order of the
siblings around them (tree_alignment.py runs it after pairing identical subtrees). Pure.

Two blocks that look alike pair whole wherever they are, so a change that makes one block
look like a sibling reads as a swap: blocks 16-32-16 and 16-64-16 narrowed to 16-16-16 and
16-32-16 pair the old first with the new second, and the summary says they swapped. Two
rules keep such pairs to what the siblings show:

- **The same slots.** Where a parent's children have the same names, classes and sizes on
  both sides, a look-alike pair across names stands only if the crossed children trade
  places among themselves (a swap, a rotation); else each child keeps its name, and what
  changed inside it is said at its name.
- **The order.** Where the children differ in number (a block deleted), look-alike pairs that
  cross each other give way to the longest in-order pairing of identical children: deleting
  block 1 of 16-32-16, 16-64-16, 16-32-16, 16-64-16 removes block 1, and does not swap the
  next two and remove the last.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

from pytest_fwdorder.diff.call_keys import identity_and_number
from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.diff.ordered_pairing import cheapest_pairs, common_subsequence, crossing

_SMALLEST_SUBTREE = 2  # as tree_alignment.py: a single call pairs only by its name or parent
# The longest in-order pairing of two children lists is a table of their lengths' product:
# above this many cells, the matching blocks of difflib stand in for it.
_LARGEST_TABLE = 250_000


def siblings_in_place(
    old_tree: CallTree,
    new_tree: CallTree,
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
    *,
    match_paths: bool = True,
) -> list[tuple[int, int]]:
    """Undo, in the two maps, the look-alike pairs among siblings that the rules above
    reject, and give the subtrees to pair instead (identical ones, in order).

    Siblings are the children of two calls with the same name, class and number; without
    names (`match_paths=False`), of the outermost calls and of two calls already paired,
    and only the order is kept."""
    instead: list[tuple[int, int]] = []
    for parent, new_parent in list(_parents(old_tree, new_tree, old_to_new, match_paths)):
        olds, news = old_tree.children[parent], new_tree.children[new_parent]
        if len(olds) < 2:
            continue
        among = set(news)
        pairs = [(i, old_to_new[i]) for i in olds if old_to_new.get(i) in among]
        crossed = [(i, j) for i, j in pairs if old_tree.lines[i].path != new_tree.lines[j].path]
        if match_paths and _slots(old_tree, olds) == _slots(new_tree, news):
            old_names = {old_tree.lines[i].path for i, _ in crossed}
            if old_names != {new_tree.lines[j].path for _, j in crossed}:
                _unpair(old_tree, crossed, old_to_new, new_to_old)
        elif len(olds) != len(news) and crossing(pairs):
            _unpair(old_tree, pairs, old_to_new, new_to_old)
            free_olds = [i for i in olds if i not in old_to_new]
            free_news = [j for j in news if j not in new_to_old]
            instead += _identical_in_order(old_tree, new_tree, free_olds, free_news)
    return instead


def _parents(
    old_tree: CallTree, new_tree: CallTree, old_to_new: dict[int, int], match_paths: bool
) -> Iterator[tuple[int, int]]:
    """The old and new calls whose children are siblings of each other."""
    if match_paths:
        new_parents = {
            identity_and_number(line): index
            for index, line in enumerate(new_tree.lines)
            if new_tree.children[index]
        }
        for parent, line in enumerate(old_tree.lines):
            new_parent = new_parents.get(identity_and_number(line))
            if new_parent is not None:
                yield parent, new_parent
        return
    # The outermost calls pair in order when they are as many; others only once paired.
    outermost = dict(zip(old_tree.roots, new_tree.roots, strict=False))
    if len(old_tree.roots) != len(new_tree.roots):
        outermost = {}
    for parent in range(len(old_tree.lines)):
        new_parent = old_to_new.get(parent, outermost.get(parent))
        if new_parent is not None and old_tree.children[parent]:
            yield parent, new_parent


def _slots(tree: CallTree, children: list[int]) -> list[tuple[str, str, int]]:
    """The children's names, classes and sizes, in order."""
    return [
        (tree.lines[index].path, tree.lines[index].module_type, tree.size(index))
        for index in children
    ]


def _unpair(
    old_tree: CallTree,
    pairs: list[tuple[int, int]],
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
) -> None:
    """Take back each pair of subtrees and every pair of calls inside them."""
    for old_index, _ in pairs:
        for inside in range(old_index, old_index + old_tree.size(old_index)):
            partner = old_to_new.pop(inside, None)
            if partner is not None:
                new_to_old.pop(partner, None)


def _identical_in_order(
    old_tree: CallTree, new_tree: CallTree, olds: list[int], news: list[int]
) -> list[tuple[int, int]]:
    """The longest in-order pairing of identical children of two calls or more, among those
    not paired elsewhere."""
    old_keys: list[Hashable] = [_key(old_tree, index) for index in olds]
    new_keys: list[Hashable] = [_key(new_tree, index) for index in news]
    if len(olds) * len(news) > _LARGEST_TABLE:  # a matching-blocks pairing, not the longest
        return [(olds[i], news[j]) for i, j in common_subsequence(old_keys, new_keys)]
    never_near: tuple[list[Hashable], list[Hashable]] = ([0] * len(olds), [1] * len(news))
    return [(olds[i], news[j]) for i, j in cheapest_pairs(old_keys, new_keys, *never_near)]


def _key(tree: CallTree, index: int) -> Hashable:
    # A single call is unpairable here (an object equal only to itself).
    return tree.shapes[index] if tree.size(index) >= _SMALLEST_SUBTREE else object()
