"""Readings of a stage flattened into its parent, or of calls wrapped in a new stage. Pure, no torch.

The alignment pairs a stage with the stage that looks most like it. Where a stage was
flattened (its calls now run directly in its parent) beside another change, the old stage
can pair with a neighbour that was never it, and the diff says that neighbour was renamed,
a call was removed from one stage and inserted in another. Read again with the stage's
calls paired, in order, with the run of calls of the same classes in the parent, the same
diff says one stage unwrapped. A new stage put around calls of its parent is the mirror
image, read the same way with the trees swapped.

Each such reading is a list of anchors for `align_trees`, tried by `diff_lines` like the
reading from the calls that stayed (readings.py): kept only where what its stages hold
confirms it and where it states fewer changes than every other reading.
"""

from __future__ import annotations

from bisect import bisect_left

from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.diff.readings import mostly_within

__all__ = ["stage_readings"]

_MOST_READINGS = 6  # each costs an alignment and a classification of the whole diff
_MOST_CELLS = 40_000  # siblings paired in order by a table of this size at most
_MOST_STARTS = 16  # places nearest a stage's where its children's run may start


def stage_readings(
    trees: tuple[CallTree, CallTree], partners: dict[int, int]
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that takes an old stage as flattened into its parent, or
    a new stage as wrapped around calls of its parent, as (old index, new index) pairs.

    Only stages the first reading (`partners`) leaves unpaired, or pairs with a call that
    holds fewer than half their nested calls, are read so, and only where their parent is
    paired and its partner runs calls of the stage's children's classes, in order.
    """
    old_tree, new_tree = trees
    partners_of_new = {new: old for old, new in partners.items()}
    readings: list[list[tuple[int, int]]] = []
    for old_parent, new_parent, old_stage, run in _lent_runs(old_tree, new_tree, partners):
        lent = list(zip(old_tree.children[old_stage], run, strict=True))
        lent += _shifted(old_tree, new_tree, old_stage, run, new_tree.children[new_parent])
        readings.append([(old_parent, new_parent), *lent])
    lent_to_old = _lent_runs(new_tree, old_tree, partners_of_new)
    for new_parent, old_parent, new_stage, run in lent_to_old:
        wrapped = list(zip(run, new_tree.children[new_stage], strict=True))
        shifted = _shifted(new_tree, old_tree, new_stage, run, old_tree.children[old_parent])
        wrapped += [(old, new) for new, old in shifted]
        readings.append([(old_parent, new_parent), *wrapped])
    return readings[:_MOST_READINGS]


def _shifted(
    tree: CallTree, other: CallTree, stage: int, run: list[int], other_siblings: list[int]
) -> list[tuple[int, int]]:
    """The stage's siblings paired with the calls of `other` the stage's unwrapping moved
    them to: those before it with those before the run, those after it with those after
    the run, each side in order by class (a longest common run of classes)."""
    siblings = tree.siblings(stage)
    place, start = siblings.index(stage), other_siblings.index(run[0])
    return _in_order(tree, other, siblings[:place], other_siblings[:start]) + _in_order(
        tree, other, siblings[place + 1 :], other_siblings[start + len(run) :]
    )


def _in_order(
    tree: CallTree, other: CallTree, calls: list[int], others: list[int]
) -> list[tuple[int, int]]:
    """Calls of `tree` paired in order with calls of `other` of their class, as many as a
    longest common subsequence of classes pairs; by place alone past `_MOST_CELLS`."""
    classes = [tree.lines[call].module_type for call in calls]
    other_classes = [other.lines[call].module_type for call in others]
    if len(calls) * len(others) > _MOST_CELLS:
        return [
            (call, partner)
            for call, partner, one, two in zip(calls, others, classes, other_classes, strict=False)
            if one == two
        ]
    # longest[a][b]: the longest common run of classes[a:] and other_classes[b:]
    longest = [[0] * (len(others) + 1) for _ in range(len(calls) + 1)]
    for a in range(len(calls) - 1, -1, -1):
        for b in range(len(others) - 1, -1, -1):
            longest[a][b] = (
                longest[a + 1][b + 1] + 1
                if classes[a] == other_classes[b]
                else max(longest[a + 1][b], longest[a][b + 1])
            )
    pairs, a, b = [], 0, 0
    while a < len(calls) and b < len(others):
        if classes[a] == other_classes[b]:
            pairs.append((calls[a], others[b]))
            a, b = a + 1, b + 1
        elif longest[a + 1][b] >= longest[a][b + 1]:
            a += 1
        else:
            b += 1
    return pairs


def _lent_runs(
    tree: CallTree, other: CallTree, partners: dict[int, int]
) -> list[tuple[int, int, int, list[int]]]:
    """Each stage of `tree` whose parent is paired in `other` and whose children's classes
    run, in order, among that partner's children: (parent, partner, stage, the run)."""
    other_partners = {new: old for old, new in partners.items()}
    found = []
    for parent, stages in enumerate(tree.children):
        if parent not in partners:
            continue
        siblings = other.children[partners[parent]]
        places: dict[str, list[int]] | None = None  # made at the parent's first stage
        for place, stage in enumerate(stages):
            if len(tree.children[stage]) < 2:
                continue
            partner = partners.get(stage)
            if partner is not None and (
                tree.shapes[stage] == other.shapes[partner]
                or _kept_a_child(tree, other, stage, partner, partners)
                or _holds_it(tree, other, stage, partner, partners, other_partners)
            ):
                continue
            if places is None:
                places = {}
                for index, sibling in enumerate(siblings):
                    places.setdefault(other.lines[sibling].module_type, []).append(index)
            run = _run_like(tree, other, stage, siblings, (place, places))
            if run:
                found.append((parent, partners[parent], stage, run))
                if len(found) == _MOST_READINGS:
                    return found
    return found


def _holds_it(
    tree: CallTree,
    other: CallTree,
    stage: int,
    partner: int,
    partners: dict[int, int],
    other_partners: dict[int, int],
) -> bool:
    """Whether a stage's partner holds at least half its nested calls' partners, both ways."""
    return mostly_within(tree, stage, partners, other.ends, partner) and mostly_within(
        other, partner, other_partners, tree.ends, stage
    )


def _kept_a_child(
    tree: CallTree, other: CallTree, stage: int, partner: int, partners: dict[int, int]
) -> bool:
    """Whether one of a stage's children that holds calls pairs with an identical child of
    the stage's partner: layers moved out of a stage beside it, the stage keeping a block,
    are those layers, not the stage flattened and a new stage around the block's calls. A
    layer alone is no such sign: a ReLU kept may be any ReLU."""
    kept = other.children[partner]
    return any(
        tree.children[child]
        and partners.get(child) in kept
        and tree.shapes[child] == other.shapes[partners[child]]
        for child in tree.children[stage]
    )


def _run_like(
    tree: CallTree,
    other: CallTree,
    stage: int,
    siblings: list[int],
    where: tuple[int, dict[str, list[int]]],
) -> list[int]:
    """The run of `siblings` (calls of `other`) whose classes are those of the stage's
    children, in order, nearest the stage's own place among its siblings; empty for none.

    `where`: the stage's place, and where each class is among `siblings`.
    """
    place, places = where
    classes = [tree.lines[child].module_type for child in tree.children[stage]]
    width = len(classes)
    starts = places.get(classes[0], [])
    # The starts nearest the stage's place first, at most _MOST_STARTS of them.
    middle = bisect_left(starts, place)
    nearest = sorted(
        starts[max(0, middle - _MOST_STARTS) : middle + _MOST_STARTS],
        key=lambda start: abs(start - place),
    )[:_MOST_STARTS]
    for start in nearest:
        run = siblings[start : start + width]
        if len(run) == width and all(
            other.lines[call].module_type == one for call, one in zip(run, classes, strict=True)
        ):
            return run
    return []
