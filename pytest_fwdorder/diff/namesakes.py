"""Calls that kept their names (name-free: their places) on both sides. Pure, no torch.

A subtree left alone on each side with the same shapes pairs whole across parents: the
layer moved from `enc` to `dec`. It may also be a coincidence of shapes. A stride removed
upstream doubles every size after it, and the squeeze-excitation of MobileNetV3's block 13
now has the shapes block 12's had: paired across, the two would read as swapped, though
each kept its name and class. Such a pair is left for the passes that pair by name.
"""

from __future__ import annotations

from collections.abc import Hashable

from pytest_fwdorder.diff.call_keys import structure
from pytest_fwdorder.diff.call_tree import CallTree

__all__ = ["Namesakes"]


class Namesakes:
    """Each call's name on both sides, and the call of each name, made when first asked.

    Named, a call's name is its path and call number; name-free, its place: its position
    among its siblings and how many they are, at each level from the root, so that a call
    inserted or removed beside an ancestor changes the places after it.
    """

    def __init__(self, trees: tuple[CallTree, CallTree], named: bool) -> None:
        self.trees = trees
        self.named = named
        self._names: list[tuple[list[Hashable], dict[Hashable, int]]] = []

    def kept(
        self, old_index: int, new_index: int, maps: tuple[dict[int, int], dict[int, int]]
    ) -> bool:
        """Whether two calls of different names each have a namesake of their own class on
        the other side, still unpaired and not taking each other's inputs and outputs, as
        two that swapped names would (`maps`: the partners of old calls, of new ones)."""
        if not self._names:
            self._names = [_names(tree, self.named) for tree in self.trees]
        (old_names, old_calls), (new_names, new_calls) = self._names
        old_name, new_name = old_names[old_index], new_names[new_index]
        if old_name == new_name:
            return False
        old_tree, new_tree = self.trees
        old_namesake, new_namesake = new_calls.get(old_name), old_calls.get(new_name)
        return (
            old_namesake is not None
            and new_namesake is not None
            and old_namesake not in maps[1]
            and new_namesake not in maps[0]
            and new_tree.lines[old_namesake].module_type == old_tree.lines[old_index].module_type
            and old_tree.lines[new_namesake].module_type == new_tree.lines[new_index].module_type
            # Two that swapped names are each other's namesakes, of the same inputs and
            # outputs (two blocks swapped, one changed inside): a swap.
            and structure(old_tree.lines[new_namesake]) != structure(new_tree.lines[old_namesake])
        )


def _names(tree: CallTree, named: bool) -> tuple[list[Hashable], dict[Hashable, int]]:
    """Each call's name, in order, and the call of each name."""
    names: list[Hashable]
    if named:
        names = [(line.path, line.nth) for line in tree.lines]
    else:
        places: list[tuple[tuple[int, int], ...]] = [()] * len(tree.lines)
        for position, root in enumerate(tree.roots):
            places[root] = ((position, len(tree.roots)),)
        for index, children in enumerate(tree.children):  # a parent before its children
            for position, child in enumerate(children):
                places[child] = (*places[index], (position, len(children)))
        names = list(places)
    return names, {name: index for index, name in enumerate(names)}
