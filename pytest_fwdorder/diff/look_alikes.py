"""A call's look-alike among the children of a call on the other side: where the tree
alignment finds the old call a new wrapper holds (or the new one an unwrapped call was
inside), and the children left over that are found once on each side (swapped, or moved
within their parent). Pure, no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pytest_fwdorder.diff import call_keys
from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.diff.ordered_pairing import crossing, pairs_between, unique_pairs
from pytest_fwdorder.golden.format import GoldenLine


def first_alike(
    tree: CallTree, parent: int, line: GoldenLine, partners: dict[int, int]
) -> int | None:
    """The unpaired child of `parent` that is `line`'s look-alike (class, shapes, facts), else
    the first with its class, input and facts (any facts where it is the one of its class:
    a layer resized as it was wrapped); else its one unpaired child of that class, where it
    kept its output or has calls of its own (a stem wrapped as its input channels changed:
    the wrap and the settings change explain it with fewer changes than a type change and an
    insertion); None when there is no such child, or several. Where `parent` holds only a
    wrapper (`fc`, now `fc.0.0` in two Sequentials), the look-alike is looked for in it."""
    same_class = [
        child
        for child in tree.children[parent]
        if child not in partners and tree.lines[child].module_type == line.module_type
    ]
    if not same_class:
        lone = _lone_wrapper(tree, parent, partners)
        return None if lone is None else first_alike(tree, lone, line, partners)
    look = call_keys.look(line)
    for child in same_class:
        if call_keys.look(tree.lines[child]) == look:
            return child
    facts = call_keys.facts_thawed(line)
    for child in same_class:
        # With its input, the old call if it kept its facts too (settings, parameter
        # shapes) or its output (a setting changed that keeps the shapes: its bias gone),
        # or if nothing else there could be it: of two new layers of other shapes (a
        # low-rank `fc`), neither is the old one, and no wrap is said.
        held = tree.lines[child]
        kept = (
            len(same_class) == 1
            or call_keys.facts_thawed(held) == facts
            or held.outputs == line.outputs
        )
        if held.inputs == line.inputs and kept:
            return child
    if len(same_class) == 1:
        child = same_class[0]
        # Its output kept, or calls of its own to pair by their names within it (a stage
        # wrapped as its dtype changed): a wrap; a lone call changed at both ends is not.
        if tree.lines[child].outputs == line.outputs or tree.children[child]:
            return child
    return None


def held_by_a_renumbered_sibling(
    trees: tuple[CallTree, CallTree], olds: list[int], old_index: int, new_index: int
) -> bool:
    """Whether the new call is more likely an unpaired old sibling of `old_index` (of its
    class, with calls, each of whose look is found among the new call's) than a wrapper
    around `old_index`: a stage renumbered by a flatten before it, with a layer moved into
    it (`0.2` holding two Linears, now `0.3` holding them and a Hardsigmoid), beside the old
    `0.3`, a Linear, which it does not wrap."""
    old_tree, new_tree = trees
    held = Counter(call_keys.look(new_tree.lines[child]) for child in new_tree.children[new_index])
    module_type = new_tree.lines[new_index].module_type
    for sibling in olds:
        children = old_tree.children[sibling]
        if sibling == old_index or not children:
            continue
        if old_tree.lines[sibling].module_type != module_type:
            continue
        looks = Counter(call_keys.look(old_tree.lines[child]) for child in children)
        if looks <= held:
            return True
    return False


def _lone_wrapper(tree: CallTree, parent: int, partners: dict[int, int]) -> int | None:
    """The one call `parent` runs, where it is unpaired and runs calls of its own (a wrapper
    inside a wrapper); else None."""
    children = tree.children[parent]
    if len(children) != 1 or children[0] in partners or not tree.children[children[0]]:
        return None
    return children[0]


def exact_alike(
    tree: CallTree, parent: int, line: GoldenLine, partners: dict[int, int]
) -> int | None:
    """The one unpaired child of `parent` without nested calls that is `line`'s exact
    look-alike (class, shapes and facts, frozen or not), else None."""
    look = call_keys.look_thawed(line)
    alike = [
        child
        for child in tree.children[parent]
        if child not in partners
        and not tree.children[child]
        and call_keys.look_thawed(tree.lines[child]) == look
    ]
    return alike[0] if len(alike) == 1 else None


def wrapped_partner(
    old_tree: CallTree,
    new_tree: CallTree,
    old_index: int,
    new_index: int,
    old_partners: dict[int, int],
    new_partners: dict[int, int],
) -> tuple[int, int] | None:
    """The pair that makes two calls of one name and class a wrap: the old call (without
    nested calls) and its exact look-alike inside the new one, or the mirror image, frozen
    or not; None when they are the same call (perhaps frozen now) or no look-alike is there."""
    old_line, new_line = old_tree.lines[old_index], new_tree.lines[new_index]
    old_leaf, new_leaf = not old_tree.children[old_index], not new_tree.children[new_index]
    # A module's later calls show no facts: one with calls inside is no longer the same call.
    if old_leaf == new_leaf and call_keys.look_thawed(old_line) == call_keys.look_thawed(new_line):
        return None
    if old_leaf:
        inner = exact_alike(new_tree, new_index, old_line, new_partners)
        if inner is not None:
            return old_index, inner
    if new_leaf:
        inner = exact_alike(old_tree, old_index, new_line, old_partners)
        if inner is not None:
            return inner, new_index
    return None


def replaced_beside(
    old_tree: CallTree,
    new_tree: CallTree,
    olds: list[int],
    news: list[int],
    pairs: list[tuple[int, int]],
    *,
    named: bool,
) -> list[tuple[int, int]]:
    """`pairs` (in order) with the children left between two of them paired by their role
    (`call_keys.role`), found once on each side, where one side has more: a LayerNorm
    inserted before the GELU that took a ReLU's place, not the ReLU's type changed to
    LayerNorm and a GELU inserted. `named`: only calls with numbered paths pair here, which
    say where a call is; a name (`act`) says which, and the call of that name is it."""

    def placed(lines: list[GoldenLine], indexes: list[int]) -> list[int]:
        return [index for index in indexes if not named or call_keys.numbered(lines[index].path)]

    old_lines, new_lines = old_tree.lines, new_tree.lines
    found, _ = pairs_between(
        old_lines,
        new_lines,
        placed(old_lines, olds),
        placed(new_lines, news),
        pairs,
        call_keys.role,
        unique_only=True,
        uneven_only=True,
    )
    return found


def swapped(
    old_tree: CallTree,
    new_tree: CallTree,
    olds: list[int],
    news: list[int],
    pairs: list[tuple[int, int]],
    contents_elsewhere: Callable[[int, int], bool],
) -> list[tuple[int, int]]:
    """Children left unpaired (not in `pairs`) whose class, shapes and facts are found once
    on each side: look-alikes that changed places (two activations swapped). Not two of
    which one's nested calls all pair outside the other (`contents_elsewhere`): a stage
    flattened beside a new wrapper of its class is not that wrapper, moved."""
    old_lines, new_lines = old_tree.lines, new_tree.lines
    found = unique_pairs(old_lines, new_lines, olds, news, pairs, call_keys.look)
    return [
        (i, j)
        for i, j in found
        if old_lines[i].path != new_lines[j].path and not contents_elsewhere(i, j)
    ]


def with_layers_moved(
    old_tree: CallTree,
    new_tree: CallTree,
    olds: list[int],
    news: list[int],
    pairs: list[tuple[int, int]],
    crossed: list[tuple[int, int]],
    *,
    named: bool,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """`pairs` (in order) and `crossed` (out of order) with the children still unpaired,
    without nested calls, whose class and facts (settings, tensors) are found once on each
    side: one layer moved within its parent past layers that change what it takes (a
    Dropout moved after the head), not one removed and another inserted. Crossing the
    pairs, it moved; else it kept its place and its shapes changed.

    `named`: the calls have paths, and only those with numbered ones pair here, or two that
    exchanged names (`_renames`): a name (`drop_in`, `drop_out`) tells a call apart, so
    one gone and another come are that."""
    old_lines, new_lines = old_tree.lines, new_tree.lines
    renamed = _renames(old_lines, new_lines, [*pairs, *crossed])
    freed, taken = set(renamed), set(renamed.values())

    def movable(tree: CallTree, index: int, exchanged: set[str]) -> bool:
        path = tree.lines[index].path
        return tree.size(index) == 1 and (
            not named or call_keys.numbered(path) or call_keys.last_name(path) in exchanged
        )

    found = [
        (i, j)
        for i, j in unique_pairs(
            old_lines,
            new_lines,
            [i for i in olds if movable(old_tree, i, taken)],
            [j for j in news if movable(new_tree, j, freed)],
            [*pairs, *crossed],
            call_keys.kind,
        )
        if not named
        or (call_keys.numbered(old_lines[i].path) and call_keys.numbered(new_lines[j].path))
        or renamed.get(call_keys.last_name(new_lines[j].path))
        == call_keys.last_name(old_lines[i].path)
    ]
    for pair in found:
        if crossing([pair, *pairs]):
            crossed = [*crossed, pair]
        else:
            pairs = sorted([*pairs, pair])
    return pairs, crossed


def _renames(
    old_lines: list[GoldenLine], new_lines: list[GoldenLine], pairs: list[tuple[int, int]]
) -> dict[str, str]:
    """The renames among `pairs` (children of one pair of calls), old name -> new name. A
    call renamed to the name of an unpaired old call (`maxpool`, now `relu`) freed its own
    name; the unpaired new call under that name, of the old one's class and facts, is it:
    the two names exchanged. Last names, so a parent renamed too (the model wrapped, `relu`
    now `0.relu`) changes nothing."""
    renamed = {}
    for i, j in pairs:
        old_name, new_name = (
            call_keys.last_name(old_lines[i].path),
            call_keys.last_name(new_lines[j].path),
        )
        if old_name != new_name:
            renamed[old_name] = new_name
    return renamed


def lone_look_alike(tree: CallTree, wrapper: int, inner: int, shape: int) -> bool:
    """Whether `inner` is all `wrapper` holds, and as it was (`shape`)."""
    return tree.children[wrapper] == [inner] and tree.shapes[inner] == shape
