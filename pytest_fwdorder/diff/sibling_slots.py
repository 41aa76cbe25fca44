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
  cross each other give way to the longest in-order pairing of identical children, where it
  pairs as many: deleting block 1 of 16-32-16, 16-64-16, 16-32-16, 16-64-16 removes block 1,
  and does not swap the next two and remove the last. Where it pairs fewer, the crossing
  was real (two blocks swapped and one inserted) and stays.

`children_in_place` then keeps the children of paired calls in place before they pair pass
by pass: renamed in order, in their slots, or unwrapped into their parent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator

from pytest_fwdorder.diff.call_keys import identity_and_number
from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.diff.ordered_pairing import (
    cheapest_pairs,
    common_subsequence,
    crossing,
    same_ends,
)

_SMALLEST_SUBTREE = 2  # as tree_alignment.py: a single call pairs only by its name or parent
# The longest in-order pairing of what differs between two children lists (after the same
# first and last ones) is a table of its lengths' product: above this many cells, the
# look-alikes keep the pairs they have.
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
    and their slots are their classes and sizes alone."""
    instead: list[tuple[int, int]] = []
    for parent, new_parent in list(_parents(old_tree, new_tree, old_to_new, match_paths)):
        olds, news = old_tree.children[parent], new_tree.children[new_parent]
        if len(olds) < 2:
            continue
        among = set(news)
        pairs = [(i, old_to_new[i]) for i in olds if old_to_new.get(i) in among]
        if not pairs:
            continue
        # Crossed: paired with a child of another name; without names, at another place.
        old_place, new_place = (
            _places(old_tree, olds, match_paths),
            _places(new_tree, news, match_paths),
        )
        crossed = [(i, j) for i, j in pairs if old_place[i] != new_place[j]]
        if _slots(old_tree, olds, match_paths) == _slots(new_tree, news, match_paths):
            trees, places = (old_tree, new_tree), (old_place, new_place)
            if not _a_reorder(trees, (olds, news), crossed, places):
                _unpair(old_tree, crossed, old_to_new, new_to_old)
        elif len(olds) != len(news) and crossing(pairs):
            maps = (old_to_new, new_to_old)
            in_order = _identical_in_order((old_tree, new_tree), (olds, news), pairs, maps)
            if len(in_order) >= len(pairs):  # as many in order: the crossing was a choice
                _unpair(old_tree, pairs, old_to_new, new_to_old)
                instead += in_order
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


def _a_reorder(
    trees: tuple[CallTree, CallTree],
    children: tuple[list[int], list[int]],
    crossed: list[tuple[int, int]],
    places: tuple[dict[int, str | int], dict[int, str | int]],
) -> bool:
    """Whether the crossed pairs are part of a reorder of the siblings: their places trade
    among themselves, those left at them each the same layers and shapes as one left on
    the other side (changed in a setting: blocks swapped and one of them given
    `bias=False`). Blocks narrowed so that one looks like a sibling leave blocks of other
    shapes at the places they cross: no reorder."""
    old_places = {places[0][i] for i, _ in crossed}
    new_places = {places[1][j] for _, j in crossed}
    involved = old_places | new_places
    old_left = [i for i in children[0] if places[0][i] in involved - old_places]
    new_left = [j for j in children[1] if places[1][j] in involved - new_places]
    return _same_skeletons(trees, old_left, new_left)


def _same_skeletons(trees: tuple[CallTree, CallTree], olds: list[int], news: list[int]) -> bool:
    """Whether `olds` and `news` are the same layers and shapes in some order (facts aside)."""
    return Counter(_skeleton(trees[0], i) for i in olds) == Counter(
        _skeleton(trees[1], j) for j in news
    )


def _skeleton(tree: CallTree, index: int) -> int:
    """A hash of a call's subtree by classes and shapes alone, without facts or names."""
    line = tree.lines[index]
    inside = tuple(_skeleton(tree, child) for child in tree.children[index])
    return hash((line.module_type, line.inputs, line.outputs, inside))


def _places(tree: CallTree, children: list[int], named: bool) -> dict[int, str | int]:
    """Where each child is among its siblings: its name, or without names its position."""
    if named:
        return {index: tree.lines[index].path for index in children}
    return {index: place for place, index in enumerate(children)}


def _slots(tree: CallTree, children: list[int], named: bool) -> list[tuple[str, str, int]]:
    """The children's names (where `named`), classes and sizes, in order."""
    return [
        (tree.lines[index].path if named else "", tree.lines[index].module_type, tree.size(index))
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
    trees: tuple[CallTree, CallTree],
    children: tuple[list[int], list[int]],
    pairs: list[tuple[int, int]],
    maps: tuple[dict[int, int], dict[int, int]],
) -> list[tuple[int, int]]:
    """The longest in-order pairing of identical children of two calls or more, among those
    `pairs` pair and those nothing pairs: the same first and last ones, then the rest by a
    table of their lengths' product (none where it would be too large)."""
    old_tree, new_tree = trees
    in_pairs = {i for i, _ in pairs} | {j for _, j in pairs}
    olds = [i for i in children[0] if i in in_pairs or i not in maps[0]]
    news = [j for j in children[1] if j in in_pairs or j not in maps[1]]
    old_keys = [_key(old_tree, index) for index in olds]
    new_keys = [_key(new_tree, index) for index in news]
    first, last = same_ends(old_keys, new_keys)
    old_end, new_end = len(olds) - last, len(news) - last
    if (old_end - first) * (new_end - first) > _LARGEST_TABLE:
        return []
    middle = cheapest_pairs(
        old_keys[first:old_end],
        new_keys[first:new_end],
        [0] * (old_end - first),
        [1] * (new_end - first),
    )
    found = [(k, k) for k in range(first)]
    found += [(first + i, first + j) for i, j in middle]
    found += [(old_end + k, new_end + k) for k in range(last)]
    # A single call keeps the order here but pairs by the later passes.
    return [(olds[i], news[j]) for i, j in found if old_tree.size(olds[i]) >= _SMALLEST_SUBTREE]


def _alike_by_name(trees: tuple[CallTree, CallTree], olds: list[int], news: list[int]) -> bool:
    """Whether each of `olds` looks as the one of `news` with its name does."""
    old_tree, new_tree = trees
    by_name = {new_tree.lines[j].path: new_tree.shapes[j] for j in news}
    return all(by_name.get(old_tree.lines[i].path) == old_tree.shapes[i] for i in olds)


def _key(tree: CallTree, index: int) -> Hashable:
    return (tree.size(index) >= _SMALLEST_SUBTREE, tree.shapes[index])


def children_in_place(
    trees: tuple[CallTree, CallTree],
    children: tuple[list[int], list[int]],
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
    *,
    match_paths: bool,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Before the children of two paired calls pair pass by pass (tree_alignment.py): the
    pairs to make at once, and those made already that the passes must keep in order.

    - The same calls in the same order under other names (a ModuleList's modules registered
      in another order, run as before), where by their names they differ: each pairs with
      the one at its place, renamed; the others beside them pair pass by pass.
    - The same slots (names, classes and sizes in order; without names, classes and sizes)
      where the calls left are not the same layers and shapes in another order (settings
      aside): each pairs with the one at its slot, and what changed in it is said there
      (every block narrowed by half is no block renamed, inserted and removed).
    - The calls inside some old children, and the other old children, the same calls in
      the same order as the new children: those children were unwrapped (a nested
      Sequential flattened into its parent), and each call pairs with the one at its place;
      and the mirror image, children grouped into new wrappers (layers into blocks).
    - Where children were inserted or removed, those paired already hold the others in order
      (a block deleted, or a layer copied before a block: no look-alikes swapped).
    """
    old_tree, new_tree = trees
    old_children, new_children = children
    maps = (old_to_new, new_to_old)
    held: list[tuple[int, int]] = []
    if len(old_children) != len(new_children):
        among = set(new_children)
        held = [(i, old_to_new[i]) for i in old_children if old_to_new.get(i) in among]
    flattened = _flattened(trees, children, maps)
    if flattened:
        return flattened, held
    # The mirror image: consecutive children grouped into new wrappers (layers into blocks).
    grouped = _flattened(trees[::-1], children[::-1], maps[::-1])
    if grouped:
        return [(i, j) for j, i in grouped], held
    if len(old_children) != len(new_children) or not _in_place_so_far(children, *maps):
        return [], held
    olds = [i for i in old_children if i not in old_to_new]
    news = [j for j in new_children if j not in new_to_old]
    # Where the calls at a place look alike but differ by their names, those were renamed
    # (others beside them may have changed: the head given bias=False).
    alike = [
        (i, j) for i, j in zip(olds, news, strict=True) if old_tree.shapes[i] == new_tree.shapes[j]
    ]
    renamed_in_order = (
        match_paths
        and bool(alike)
        and not _alike_by_name(trees, [i for i, _ in alike], [j for _, j in alike])
    )
    if renamed_in_order and len(alike) < len(olds):
        return alike, held
    in_slots = renamed_in_order or (
        _slots(old_tree, old_children, match_paths) == _slots(new_tree, new_children, match_paths)
        and not _same_skeletons(trees, olds, news)
    )
    return (list(zip(olds, news, strict=True)) if in_slots else []), held


def _flattened(
    trees: tuple[CallTree, CallTree],
    children: tuple[list[int], list[int]],
    maps: tuple[dict[int, int], dict[int, int]],
) -> list[tuple[int, int]]:
    """The pairs of old children unwrapped into their parent (`children_in_place`), one
    level deep or all the way down, or []: the calls at each place one call (`_fits`), most
    of them alike. Only the old children that do not fit their place are opened, so a kept
    block changed inside stays a block; where that finds no way, every unpaired one is."""
    old_tree, new_tree = trees
    for levels in (1, len(old_tree.lines)):
        opened = _opened_where_needed(trees, children, maps, levels)
        every = _expanded(old_tree, children[0], maps[0], levels)
        for expanded in (opened, every) if every != opened else (opened,):
            if len(expanded) == len(children[0]) or len(expanded) != len(children[1]):
                continue  # nothing unwrapped, or not as many calls
            pairs = list(zip(expanded, children[1], strict=True))
            same = sum(old_tree.shapes[i] == new_tree.shapes[j] for i, j in pairs)
            if 2 * same <= len(pairs) or not all(_fits(trees, i, j) for i, j in pairs):
                continue
            if same < len(pairs) and _better_out_of_place(trees, pairs):
                continue  # a call removed and another come, not those between changed
            if all(maps[0].get(i, j) == j and maps[1].get(j, i) == i for i, j in pairs):
                return [(i, j) for i, j in pairs if i not in maps[0]]
    return []


def _better_out_of_place(trees: tuple[CallTree, CallTree], pairs: list[tuple[int, int]]) -> bool:
    """Whether more of the calls of `pairs` (made at their places) pair in order by their
    layers and shapes (settings aside), some left out, than at their places: a call
    removed and another come a few places on, not each call between changed into its
    neighbour. Such a stretch is left to the passes that pair in order."""
    old_keys = [_skeleton(trees[0], i) for i, _ in pairs]
    new_keys = [_skeleton(trees[1], j) for _, j in pairs]
    at_places = sum(old == new for old, new in zip(old_keys, new_keys, strict=True))
    return len(common_subsequence(old_keys, new_keys)) > at_places


def _opened_where_needed(
    trees: tuple[CallTree, CallTree],
    children: tuple[list[int], list[int]],
    maps: tuple[dict[int, int], dict[int, int]],
    levels: int,
) -> list[int]:
    """The old children in order, each unpaired one that does not fit the new child at its
    place replaced by its own children, to `levels` levels (`_expanded`, opening only what
    must be opened), or [] where the old calls run out of ways to fit."""
    old_tree = trees[0]
    news = children[1]
    expanded: list[int] = []

    def visit(index: int, levels_left: int) -> bool:
        place = len(expanded)
        if place < len(news) and _fits(trees, index, news[place]):
            expanded.append(index)
            return True
        inside = old_tree.children[index]
        if inside and index not in maps[0] and levels_left:
            return all(visit(child, levels_left - 1) for child in inside)
        return False

    return expanded if all(visit(index, levels) for index in children[0]) else []


def _fits(trees: tuple[CallTree, CallTree], old_index: int, new_index: int) -> bool:
    """Whether two calls at one place of an unwrapped (or grouped) stretch are one call:
    alike, or changed where it stands (a block of the same class changed inside, a single
    call that takes the same input changed in type or settings). Most of the stretch must be
    alike (`_flattened`), so a change cannot pass for an unwrap."""
    old_tree, new_tree = trees
    if old_tree.shapes[old_index] == new_tree.shapes[new_index]:
        return True
    old_line, new_line = old_tree.lines[old_index], new_tree.lines[new_index]
    old_inside, new_inside = old_tree.children[old_index], new_tree.children[new_index]
    if old_inside and new_inside:
        return old_line.module_type == new_line.module_type
    return not old_inside and not new_inside and old_line.inputs == new_line.inputs


def _expanded(tree: CallTree, calls: list[int], paired: dict[int, int], levels: int) -> list[int]:
    """`calls` with each unpaired one that has nested calls replaced by its children, to
    `levels` levels."""
    expanded: list[int] = []
    for index in calls:
        inside = tree.children[index]
        if inside and index not in paired and levels:
            expanded += _expanded(tree, inside, paired, levels - 1)
        else:
            expanded.append(index)
    return expanded


def _in_place_so_far(
    children: tuple[list[int], list[int]], old_to_new: dict[int, int], new_to_old: dict[int, int]
) -> bool:
    """Whether each child paired already pairs with the one at its place, and no child
    left unpaired faces a paired one."""
    return all(
        old_to_new.get(old_index, new_index) == new_index
        and (old_index in old_to_new) == (new_index in new_to_old)
        for old_index, new_index in zip(*children, strict=True)
    )
