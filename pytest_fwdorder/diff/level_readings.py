"""Readings of a wrap one level further in. Pure, no torch.

A reading may pair an old stage with a call inside a new wrapper, and say that the stage's
other calls moved into the wrapper beside it; pair a stage put in a wrapper of its own, as
calls in it changed, with the wrapper, which took its path; or pair a stage flattened with
its biggest block, changed inside, and say the block was unwrapped. Each reading here is a
list of anchors for `align_trees`, tried by `diff_lines` like those of stage_readings.py:
kept only where what its stages hold confirms it and where it states fewer changes than
every other reading.
"""

from __future__ import annotations

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.readings import mostly_within

__all__ = ["level_readings"]

_MOST_READINGS = 6  # each costs an alignment and a classification of the whole diff


def level_readings(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]]
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that takes a wrap one level further in.

    A reading may pair an old stage with the call inside a new wrapper, and say that the
    stage's other calls moved into the wrapper beside it: three changes where the wrapper
    is the old stage and one call in it was wrapped. Read so where the wrapper is unpaired,
    one of its children pairs with the old stage and another with one of the old stage's
    children, and the two stages' parents pair (or both are the root). The mirror image for
    an old stage read as unwrapped. And a stage paired with a wrapper of its own put around
    it as calls in it changed, read as the wrapper's only call (`_wrapped_alone`); and a
    stage flattened whose biggest block took its place, read as that block (`_one_level_out`,
    both ways). A plain wrap never meets these: most diffs try none.
    """
    old_tree, new_tree = trees
    partners, partners_of_new = maps
    readings = [[(old, new)] for new, old in _one_level_in(new_tree, old_tree, partners_of_new)]
    readings += [[(old, new)] for old, new in _one_level_in(old_tree, new_tree, partners)]
    readings += [[pair] for pair in _wrapped_alone(trees, maps)]
    readings += [[(old, new)] for old, new in _one_level_out(old_tree, new_tree, partners)]
    readings += [[(old, new)] for new, old in _one_level_out(new_tree, old_tree, partners_of_new)]
    return readings[:_MOST_READINGS]


def _wrapped_alone(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]]
) -> list[tuple[int, int]]:
    """(old call, new call) it may be: a stage put in a wrapper of its own as calls in it
    changed, which a reading (`maps`) pairs with the wrapper (no pass pairs the stage with
    itself, whose calls changed, and the wrapper took its path), read as the wrapper's only
    call (`_alone_in`); or the mirror image, a stage taken out of one."""
    old_tree, new_tree = trees
    partners, partners_of_new = maps
    found: list[tuple[int, int]] = []
    # Calls that run one call each (most run none or several), a comprehension each: this
    # looks at every pair of every diff read again.
    for old, new in _running_one(new_tree, partners_of_new):
        if old_tree.parents[old] != NO_PARENT:  # the model's wraps: `model_readings`'
            inner = _alone_in(trees, (old, new), partners_of_new)
            if inner is not None:
                found.append((old, inner))
    for new, old in _running_one(old_tree, partners):
        if new_tree.parents[new] != NO_PARENT and len(new_tree.children[new]) != 1:
            inner = _alone_in((new_tree, old_tree), (new, old), partners)
            if inner is not None:
                found.append((inner, new))
    return found[:_MOST_READINGS]


def _running_one(tree: CallTree, partners_of: dict[int, int]) -> list[tuple[int, int]]:
    """(partner, call) for each paired call of `tree`, but the model, that runs one call."""
    return [
        (partners_of[call], call)
        for call, children in enumerate(tree.children)
        if len(children) == 1 and call in partners_of and tree.parents[call] != NO_PARENT
    ]


def _alone_in(
    trees: tuple[CallTree, CallTree], pair: tuple[int, int], other_partners: dict[int, int]
) -> int | None:
    """The only call of a pair's call in `trees[1]` (the wrapper), where it may be the
    pair's call in `trees[0]` (the stage): of the stage's class, holding calls, and unpaired
    or paired with a call nested in the stage (`other_partners`: the partners of
    `trees[1]`'s calls), while the stage runs two calls or more; None otherwise."""
    tree, other = trees
    stage, wrapper = pair
    inner = other.children[wrapper][0]
    partner = other_partners.get(inner)
    if (
        len(tree.children[stage]) > 1
        and other.children[inner]
        and other.lines[inner].module_type == tree.lines[stage].module_type
        and (partner is None or stage < partner < tree.ends[stage])
    ):
        return inner
    return None


def _one_level_in(
    tree: CallTree, other: CallTree, partners: dict[int, int]
) -> list[tuple[int, int]]:
    """(stage of `tree` left unpaired, call of `other` it may be): a child of the stage
    pairs with the call, which holds calls, another child pairs with one of the call's
    children, and the call's parent pairs with the stage's (or both are the root)."""
    found: list[tuple[int, int]] = []
    for stage, children in enumerate(tree.children):
        if len(children) < 2 or stage in partners:
            continue
        parent = tree.parents[stage]
        for child in children:
            partner = partners.get(child)
            if partner is None or not other.children[partner]:
                continue
            other_parent = other.parents[partner]
            if not (
                (parent == other_parent == NO_PARENT)
                or (parent != NO_PARENT and partners.get(parent) == other_parent)
            ):
                continue
            kept = set(other.children[partner])
            if any(partners.get(sibling) in kept for sibling in children if sibling != child):
                found.append((stage, partner))
                if len(found) == _MOST_READINGS:
                    return found
    return found


def _one_level_out(
    tree: CallTree, other: CallTree, partners: dict[int, int]
) -> list[tuple[int, int]]:
    """(child of a paired stage of `tree`, the stage's partner in `other`): the child holds
    most of the stage's calls, is of its partner's class, and most of its own calls pair
    within that partner, while half or more of the stage's other children that pair do so
    outside it. A stage flattened whose biggest block, changed inside, took the stage's
    partner: read as the block unwrapped into it and the stage's other calls moved out,
    where the stage was unwrapped and the block kept. Where the other children stay in the
    partner, the stage is where it was (its block flattened as a layer in it was wrapped).
    One pass over the calls that run two or more: this looks at every diff read again."""
    found: list[tuple[int, int]] = []
    ends = tree.ends
    for stage, children in enumerate(tree.children):
        if len(children) < 2 or tree.parents[stage] == NO_PARENT:  # the model: `model_readings`
            continue
        partner = partners.get(stage)
        if partner is None:
            continue
        half = ends[stage] - stage
        # Over half of a stage with a sibling beside it: three calls or more, so a stage too.
        child = next((child for child in children if 2 * (ends[child] - child) > half), None)
        if (
            child is not None
            and tree.lines[child].module_type == other.lines[partner].module_type
            and partners.get(child) != partner
            and mostly_within(tree, child, partners, (other.ends, partner), more_than_half=True)
            and _others_left(tree, other, (stage, child, partner), partners)
        ):
            found.append((child, partner))
            if len(found) == _MOST_READINGS:
                return found
    return found


def _others_left(
    tree: CallTree, other: CallTree, calls: tuple[int, int, int], partners: dict[int, int]
) -> bool:
    """Whether half or more of the stage's children but `child` that pair, and one at
    least, pair outside the partner (`calls`: the stage, its child, the stage's partner)."""
    stage, child, partner = calls
    end = other.ends[partner]
    placed = [
        partners[sibling]
        for sibling in tree.children[stage]
        if sibling != child and sibling in partners
    ]
    outside = sum(not partner < place < end for place in placed)
    return 2 * outside >= len(placed) > 0
