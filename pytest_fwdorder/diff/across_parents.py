"""Calls the tree alignment left unpaired within their parents, paired across parents where
one explanation alone fits. Pure, no torch.

The same module called elsewhere (its path and class, named); the one look-alike with the
same facts (class, shapes, settings, tensors: a module moved), or the one layer without
settings of its class and shapes, moved to a stage that is paired (a Sigmoid taken out of
one stage and put in another, the one it left kept or removed); named, the one layer of
its last name and facts that went and the one that came (a ViT's final norm moved to the
front of the head, where it normalises the class token alone and so takes other shapes),
where one of the calls they run in is paired: of a block removed whole and one inserted
whole, each with its ReLU, no ReLU moved; and last, named or not, the one layer of its
class and facts that went and the one that came, whatever its shapes, moved to a stage
that is paired (`enc.2 (LayerNorm)` now `dec.0`, a GELU moved from one decoder block's MLP
to another's). Where two such layers went, or came, no trace tells which moved, and none is
paired; unless one of them ran in a call that stays and the others in calls that went (or
came) with them: the one in a call that stays moved, the smaller reading.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable

from pytest_fwdorder.diff import call_keys
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.golden.format import GoldenLine


def pair_across_parents(
    trees: tuple[CallTree, CallTree],
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
    *,
    match_paths: bool,
) -> list[int]:
    """Pair, in the two maps, the calls left over that only one explanation fits; returns
    the old calls paired, each paired against the execution order."""
    old_tree, new_tree = trees
    old_lines, new_lines = old_tree.lines, new_tree.lines
    olds = [i for i in range(len(old_lines)) if i not in old_to_new]
    news = [j for j in range(len(new_lines)) if j not in new_to_old]
    if not olds or not news:
        return []
    paired: list[int] = []
    maps = (old_to_new, new_to_old)

    def pair(old_index: int, new_index: int) -> None:
        old_to_new[old_index], new_to_old[new_index] = new_index, old_index
        paired.append(old_index)

    if match_paths:
        removed: dict[Hashable, list[int]] = defaultdict(list)
        for i in olds:
            if old_lines[i].path:
                removed[call_keys.path_and_class(old_lines[i])].append(i)
        for j in news:
            candidates = removed.get(call_keys.path_and_class(new_lines[j]))
            # Not a stage flattened, its calls paired where they run now, with the new
            # stage put at its path (a copy of a sibling put before it).
            if candidates and not contents_elsewhere(trees, maps, candidates[0], j):
                pair(candidates.pop(0), j)
    # Each pass: its key, the calls it takes, and whether only those in calls that stay.
    passes: list[tuple[Callable[[GoldenLine], Hashable], Callable[[CallTree, int], bool], bool]]
    passes = [(call_keys.look, _layer_or_with_facts, False)]
    if match_paths:
        passes.append((_name_and_kind, _named_layer, False))
    passes.append((call_keys.kind, _layer, False))
    # Then, of the layers left, those in calls that stay: the one that went from a stage
    # that stays is the one that moved, not one of a stage removed whole (which went with
    # it), and the mirror image; the smaller reading.
    passes += [(call_keys.look, _layer, True), (call_keys.kind, _layer, True)]
    for key, takes, staying in passes:
        left_old = [i for i in olds if i not in old_to_new and takes(old_tree, i)]
        left_new = [j for j in news if j not in new_to_old and takes(new_tree, j)]
        if staying:
            left_old = [i for i in left_old if _in_a_paired_call(old_tree, old_to_new, i)]
            left_new = [j for j in left_new if _in_a_paired_call(new_tree, new_to_old, j)]
        for i, j in _found_once(old_lines, new_lines, left_old, left_new, key):
            if _same_parent(trees, old_to_new, i, j):  # its parent's alignment left it
                continue  # out: no move to explain
            if (key is call_keys.kind or not old_lines[i].facts) and not _lands_in_a_paired_call(
                trees, maps, j
            ):
                continue  # a move only to a stage that stays
            if key is _name_and_kind and _both_parents_unpaired(trees, maps, i, j):
                continue  # a layer of a subtree that went, and of another that came
            pair(i, j)
    return paired


def _in_a_paired_call(tree: CallTree, partners: dict[int, int], index: int) -> bool:
    """Whether a call runs in a paired call, or at the top."""
    parent = tree.parents[index]
    return parent == NO_PARENT or parent in partners


def _layer(tree: CallTree, index: int) -> bool:
    """Whether a call is a layer: it runs no module inside it."""
    return tree.size(index) == 1


def _layer_or_with_facts(tree: CallTree, index: int) -> bool:
    """Whether a call may be paired by its look: a layer (a Sigmoid taken out of one stage
    and put in another is one move, not a call removed and one inserted), or a call with
    facts of its own."""
    return tree.size(index) == 1 or bool(tree.lines[index].facts)


def _found_once(
    old_lines: list[GoldenLine],
    new_lines: list[GoldenLine],
    olds: list[int],
    news: list[int],
    key: Callable[[GoldenLine], Hashable],
) -> list[tuple[int, int]]:
    """The calls at `olds` and `news` whose key is found once on each side, paired."""
    old_count = Counter(key(old_lines[i]) for i in olds)
    new_count = Counter(key(new_lines[j]) for j in news)
    by_key = {key(new_lines[j]): j for j in news}
    return [
        (i, by_key[found])
        for i in olds
        if old_count[found := key(old_lines[i])] == 1 and new_count[found] == 1
    ]


def _name_and_kind(line: GoldenLine) -> Hashable:
    """A call's last name with its class and facts (`ln`, a LayerNorm of 768 features)."""
    return call_keys.last_name(line.path), call_keys.kind(line)


def _named_layer(tree: CallTree, index: int) -> bool:
    """Whether a call is a layer (no nested calls) with facts and a name, not a number."""
    line = tree.lines[index]
    return tree.size(index) == 1 and bool(line.facts) and not call_keys.numbered(line.path)


def _both_parents_unpaired(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    new_index: int,
) -> bool:
    """Whether neither call's parent is paired: each is a layer of a subtree that went and of
    one that came, ResNet's block removed from one stage and another inserted in another,
    each with its ReLU. Its name says which layer of its block it is, not that it moved."""
    old_parent, new_parent = trees[0].parents[old_index], trees[1].parents[new_index]
    return (
        old_parent != NO_PARENT
        and new_parent != NO_PARENT
        and old_parent not in maps[0]
        and new_parent not in maps[1]
    )


def _lands_in_a_paired_call(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    new_index: int,
) -> bool:
    """Whether the new call runs in a paired call, or at the top: a layer moved to a stage
    that stays (the one it left may be gone), not one of a stage wrapped around its
    neighbours, which the passes by place pair in order (paired here, out of order, the
    wrap would hide a layer moved past it)."""
    return _in_a_paired_call(trees[1], maps[1], new_index)


def _same_parent(
    trees: tuple[CallTree, CallTree], old_to_new: dict[int, int], old_index: int, new_index: int
) -> bool:
    """Whether the two calls run in partners (or both at the top)."""
    old_parent = trees[0].parents[old_index]
    return old_to_new.get(old_parent, NO_PARENT) == trees[1].parents[new_index]


def contents_elsewhere(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    new_index: int,
) -> bool:
    """Whether every call nested in either call has a partner, none of them in the other:
    a stage flattened whose blocks are paired already is not the call of another class left
    where it was, nor the new stage put at its path. A call that kept some calls, or lost
    some, may be it. `maps`: the partners of old calls, and of new ones."""
    old_tree, new_tree = trees
    if not (old_tree.children[old_index] and new_tree.children[new_index]):
        return False  # a stage replaced by a leaf (`Identity`) is a type change
    sides = (
        (old_tree, old_index, maps[0], new_tree, new_index),
        (new_tree, new_index, maps[1], old_tree, old_index),
    )
    for tree, index, partners, other_tree, other in sides:
        nested = range(index + 1, tree.ends[index])
        if all(call in partners for call in nested) and not any(
            other < partners[call] < other_tree.ends[other] for call in nested
        ):
            return True
    return False
