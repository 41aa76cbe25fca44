"""Readings of a stage flattened into its parent, or of calls wrapped in a new stage. Pure, no torch.

The alignment pairs a stage with the stage that looks most like it. Where a stage was
flattened (its calls now run directly in its parent) beside another change, the old stage
can pair with a neighbour that was never it, and the diff says that neighbour was renamed,
a call was removed from one stage and inserted in another. Read again with the stage's
calls paired, in order, with the run of calls of the same classes in the parent, the same
diff says one stage unwrapped. A new stage put around calls of its parent is the mirror
image, read the same way with the trees swapped. The whole model wrapped in a new one (or
taken out of one) is read from the old model paired with the new model's only call; a
stage wrapped beside a copy of itself, from the stage paired with the call that holds what
it held; and a stage whose call changed class, beside a stage removed or inserted that
holds a call of that other class, as that other stage. A wrap read one level further in is
level_readings.py's; a call read as one like it nearby, counterparts.py's.

Each such reading is a list of anchors for `align_trees`, tried by `diff_lines` like the
reading from the calls that stayed (readings.py): kept only where what its stages hold
confirms it and where it states fewer changes than every other reading.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from pytest_fwdorder.diff import call_keys
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.readings import (
    calls_that_stayed,
    identical,
    mostly_within,
    paired_otherwise,
    undoes_identical,
)

__all__ = [
    "class_readings",
    "copy_readings",
    "model_readings",
    "stage_readings",
    "stayed_in_model",
]

_MOST_READINGS = 6  # each costs an alignment and a classification of the whole diff
_MOST_CELLS = 40_000  # siblings paired in order by a table of this size at most
_MOST_STARTS = 16  # places nearest a stage's where its children's run may start


def stage_readings(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]]
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that takes an old stage as flattened into its parent, or
    a new stage as wrapped around calls of its parent, as (old index, new index) pairs.

    Only stages a reading (`partners`) leaves unpaired, or pairs with a call that holds
    half their nested calls or fewer, are read so, and only where their parent is paired
    and its partner runs calls of the stage's children's classes, in order, between the
    calls the stage's siblings surely are (`_Places`). `maps`: the reading's partners of
    old calls, and of new ones.
    """
    old_tree, new_tree = trees
    partners, partners_of_new = maps
    flattened = _lent_runs(old_tree, new_tree, partners)
    wrapping = _lent_runs(new_tree, old_tree, partners_of_new)
    if not flattened and not wrapping:
        return []
    twins = _named_twins(trees)  # a pass over every call: only where a stage is read again
    readings: list[list[tuple[int, int]]] = []
    for old_parent, new_parent, old_stage, run in flattened:
        lent = list(zip(old_tree.children[old_stage], run, strict=True))
        lent += _shifted(old_tree, new_tree, old_stage, run, new_tree.children[new_parent])
        kept = _keeping_identical(trees, lent, (partners, partners_of_new), twins)
        readings.append([(old_parent, new_parent), *kept])
    for new_parent, old_parent, new_stage, run in wrapping:
        wrapped = list(zip(run, new_tree.children[new_stage], strict=True))
        shifted = _shifted(new_tree, old_tree, new_stage, run, old_tree.children[old_parent])
        wrapped += [(old, new) for new, old in shifted]
        kept = _keeping_identical(trees, wrapped, (partners, partners_of_new), twins)
        readings.append([(old_parent, new_parent), *kept])
    return readings[:_MOST_READINGS]


def class_readings(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]]
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that takes a stage, whose call changed class, as another.

    A stage removed beside one that lost a layer can leave the stage kept paired by its
    place with the one removed, and the layer it kept read as a layer of another class
    (`type changed at 0.0: Linear -> Tanh`). Where a call changed class inside stages that
    pair, an unpaired sibling of either stage, of the other's class, that holds a call of
    the class the changed call has on the other side is read as that other stage. A type
    replaced among stages that all pair (most diffs) meets no such sibling. One pass over
    the pairs and one over the unpaired calls: a class replaced in every block of a long
    stack costs no more than its calls.
    """
    old_tree, new_tree = trees
    partners, partners_of_new = maps
    # By (a stage's parent, its partner's class, the changed call's class there): the
    # stage and its partner; for each side.
    changed: tuple[_ByPlace, _ByPlace] = ({}, {})
    for old_call, new_call in partners.items():
        old_class = old_tree.lines[old_call].module_type
        new_class = new_tree.lines[new_call].module_type
        old_stage, new_stage = old_tree.parents[old_call], new_tree.parents[new_call]
        if old_class == new_class or old_stage == NO_PARENT or partners.get(old_stage) != new_stage:
            continue
        old_key = (old_tree.parents[old_stage], new_tree.lines[new_stage].module_type, new_class)
        new_key = (new_tree.parents[new_stage], old_tree.lines[old_stage].module_type, old_class)
        changed[0].setdefault(old_key, []).append((old_stage, new_stage))
        changed[1].setdefault(new_key, []).append((new_stage, old_stage))
    if not changed[0]:
        return []
    readings = [[pair] for pair in _unpaired_siblings(old_tree, partners, changed[0])]
    readings += [
        [(old, new)] for new, old in _unpaired_siblings(new_tree, partners_of_new, changed[1])
    ]
    return readings[:_MOST_READINGS]


# (parent, class, class) -> [(stage, its partner)]
_ByPlace = dict[tuple[int, str, str], list[tuple[int, int]]]


def _unpaired_siblings(
    tree: CallTree, partners: dict[int, int], changed: _ByPlace
) -> list[tuple[int, int]]:
    """(call of `tree` left unpaired, the other tree's stage it may be): a sibling of a
    stage in `changed`, of its partner's class, that runs a call of the class the changed
    call has on the other side."""
    lines = tree.lines
    found: list[tuple[int, int]] = []
    for sibling, children in enumerate(tree.children):
        if not children or sibling in partners:
            continue
        parent, sibling_class = tree.parents[sibling], lines[sibling].module_type
        for child_class in {lines[child].module_type for child in children}:
            for stage, partner in changed.get((parent, sibling_class, child_class), ()):
                if stage != sibling:
                    found.append((sibling, partner))
        if len(found) >= _MOST_READINGS:
            break
    return found


def model_readings(
    trees: tuple[CallTree, CallTree], partners: dict[int, int]
) -> list[list[tuple[int, int]]]:
    """The anchors of a reading that takes the whole model as wrapped in a new one (the new
    model's only call is the old model), or as unwrapped from one; none for most diffs.
    The model wrapped twice or more: one reading for each call of the chain of one call
    each, the outermost first (the innermost is the old model where nothing else changed,
    an outer one where a stage of the model was flattened into a wrapper of its own).

    Proposed only where the reading (`partners`) pairs the two models though one runs two
    calls or more in it and the other one call of its class, which holds calls. A stage
    flattened as the model was wrapped: such a reading pairs the old stage with the new
    model's only call (the old model) and says each call beside the stage moved into it.
    The one anchor is the two models: the rest is aligned again under it, where no stage in
    the old model can pair with the new model (`call_tree.inverts_nesting`).
    """
    old_tree, new_tree = trees
    if len(old_tree.roots) != 1 or len(new_tree.roots) != 1:
        return []
    old_root, new_root = old_tree.roots[0], new_tree.roots[0]
    if partners.get(old_root) != new_root:
        return []
    old_model_in_new = _only_calls(trees, old_root, new_root, model_is_old=True)
    if old_model_in_new:
        return [[(old_root, call)] for call in old_model_in_new]
    new_model_in_old = _only_calls(trees, new_root, old_root, model_is_old=False)
    return [[(call, new_root)] for call in new_model_in_old]


def _only_calls(
    trees: tuple[CallTree, CallTree], model: int, other_model: int, *, model_is_old: bool
) -> list[int]:
    """The calls `other_model` (the other tree's model) runs that may be `model` wrapped:
    its only call, of the model's class and holding calls, and that call's only call of
    the same kind, and so on, while `model` runs two calls or more; none otherwise."""
    tree, other = trees if model_is_old else (trees[1], trees[0])
    calls = other.children[other_model]
    chain: list[int] = []
    while (
        len(calls) == 1
        and len(tree.children[model]) > 1
        and other.children[calls[0]]
        and other.lines[calls[0]].module_type == tree.lines[model].module_type
    ):
        chain.append(calls[0])
        calls = other.children[calls[0]]
    return chain


def copy_readings(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]]
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that takes a stage (the model too) as wrapped in a new
    one beside a copy of itself, or as unwrapped from one; none for most diffs.

    `nn.Sequential(stage, copy.deepcopy(stage))` where `stage` was: a reading that pairs
    the old stage with the new one reads each of its calls as wrapped with a copy of the
    others. Where a reading (`maps`) pairs two stages that differ and one runs several
    calls, the first of the other's class that holds what the other held
    (`readings.identical`) is read as it: the one anchor, the rest aligned again under it.
    The stage and its copy look alike: one reading says as much as the other.
    """
    found: list[list[tuple[int, int]]] = []
    for old_stage, new_stage in maps[0].items():
        if trees[0].shapes[old_stage] == trees[1].shapes[new_stage]:
            continue  # the same calls: nothing wrapped (most pairs)
        wrapped = _copied_in(trees, old_stage, new_stage, stage_is_old=True)
        if wrapped is not None:
            found.append([(old_stage, wrapped)])
        unwrapped = _copied_in(trees, new_stage, old_stage, stage_is_old=False)
        if unwrapped is not None:
            found.append([(unwrapped, new_stage)])
        if len(found) >= _MOST_READINGS:
            break
    return found[:_MOST_READINGS]


def _copied_in(
    trees: tuple[CallTree, CallTree], stage: int, partner: int, *, stage_is_old: bool
) -> int | None:
    """Of the calls `partner` (the stage's partner in the other tree) runs, if several, the
    first of the stage's class that holds what the stage holds; None otherwise."""
    tree, other = trees if stage_is_old else (trees[1], trees[0])
    calls = other.children[partner]
    if len(calls) < 2 or not tree.children[stage]:
        return None
    stage_class = tree.lines[stage].module_type
    for call in calls:
        if (
            other.lines[call].module_type == stage_class
            and other.children[call]
            and identical(trees, *((stage, call) if stage_is_old else (call, stage)))
        ):
            return call
    return None


def stayed_in_model(
    trees: tuple[CallTree, CallTree], partners: dict[int, int], *, by_place: bool
) -> list[list[tuple[int, int]]]:
    """The anchors of a reading from the calls that stayed in a model wrapped or unwrapped
    whole (`readings.calls_that_stayed` within it), where a reading (`partners`) pairs the
    old model with a child of the new one, or the reverse, and pairs one of those calls
    otherwise: every path changed with the wrap, so none kept its own, and a stage that
    lent most of its calls to another pairs with that one. None for most diffs."""
    old_tree, new_tree = trees
    if len(old_tree.roots) != 1 or len(new_tree.roots) != 1:
        return []
    old_root, new_root = old_tree.roots[0], new_tree.roots[0]
    inner = partners.get(old_root)
    if inner is not None and new_tree.parents[inner] == new_root:
        within = (old_root, inner)
    else:
        outer = [old for old in old_tree.children[old_root] if partners.get(old) == new_root]
        if not outer:
            return []
        within = (outer[0], new_root)
    stayed = calls_that_stayed(old_tree, new_tree, partners, by_place=by_place, within=within)
    return [stayed] if paired_otherwise(partners, stayed) else []


def _named_twins(trees: tuple[CallTree, CallTree]) -> dict[int, int]:
    """Old calls -> the new call of the same path and the same subtree, for paths called
    once on each side whose last name is not a number (a numbered child is numbered again
    when one before it is taken out): the same module, whatever any reading pairs."""
    old_tree, new_tree = trees
    old_counts = Counter(line.path for line in old_tree.lines)
    new_at: dict[str, int] = {}
    new_counts: Counter[str] = Counter()
    for index, line in enumerate(new_tree.lines):
        new_at[line.path] = index
        new_counts[line.path] += 1
    twins = {}
    for index, line in enumerate(old_tree.lines):
        path = line.path
        twin = new_at.get(path)
        if (
            twin is not None
            and path
            and old_counts[path] == new_counts[path] == 1  # one path, two calls: which?
            and not call_keys.numbered(path)
            and old_tree.shapes[index] == new_tree.shapes[twin]
        ):
            twins[index] = twin
    return twins


def _keeping_identical(
    trees: tuple[CallTree, CallTree],
    anchors: list[tuple[int, int]],
    pairs: tuple[dict[int, int], dict[int, int]],
    twins: dict[int, int],
) -> list[tuple[int, int]]:
    """The anchors but those that undo a pair of identical calls (`readings.identical`:
    the same subtree, or the same calls in it, found whatever it is called) of the reading
    they start from, or part a call from its named twin (`twins`); a pair of identical
    calls is kept. Stages swapped beside a stage flattened are those stages, swapped, not
    each paired in order by class with the other and changed into it."""
    twin_of_new = {new: old for old, new in twins.items()}
    return [
        (old, new)
        for old, new in anchors
        if twins.get(old, new) == new
        and twin_of_new.get(new, old) == old
        and (identical(trees, old, new) or not undoes_identical(trees, old, new, *pairs))
    ]


def _shifted(
    tree: CallTree, other: CallTree, stage: int, run: list[int], other_siblings: list[int]
) -> list[tuple[int, int]]:
    """The stage's siblings paired with the calls of `other` the stage's unwrapping moved
    them to: those before it with those before the run, those after it with those after
    the run, each side in order by class or by what they hold (`_in_order`)."""
    siblings = tree.siblings(stage)
    place, start = siblings.index(stage), other_siblings.index(run[0])
    return _in_order(tree, other, siblings[:place], other_siblings[:start]) + _in_order(
        tree, other, siblings[place + 1 :], other_siblings[start + len(run) :]
    )


def _in_order(
    tree: CallTree, other: CallTree, calls: list[int], others: list[int]
) -> list[tuple[int, int]]:
    """Calls of `tree` paired in order with calls of `other` of their class, or that hold
    what they hold (a stage made a subclass, `readings.identical`), as many as a longest
    common subsequence pairs; by class and place alone past `_MOST_CELLS`."""
    classes = [tree.lines[call].module_type for call in calls]
    other_classes = [other.lines[call].module_type for call in others]
    if len(calls) * len(others) > _MOST_CELLS:
        return [
            (call, partner)
            for call, partner, one, two in zip(calls, others, classes, other_classes, strict=False)
            if one == two
        ]
    held, other_held = _held(tree, calls), _held(other, others)

    def alike(a: int, b: int) -> bool:
        return classes[a] == other_classes[b] or (held[a] is not None and held[a] == other_held[b])

    # longest[a][b]: the longest common run of calls[a:] and others[b:], pairwise alike
    longest = [[0] * (len(others) + 1) for _ in range(len(calls) + 1)]
    for a in range(len(calls) - 1, -1, -1):
        for b in range(len(others) - 1, -1, -1):
            longest[a][b] = (
                longest[a + 1][b + 1] + 1
                if alike(a, b)
                else max(longest[a + 1][b], longest[a][b + 1])
            )
    pairs, a, b = [], 0, 0
    while a < len(calls) and b < len(others):
        if alike(a, b):
            pairs.append((calls[a], others[b]))
            a, b = a + 1, b + 1
        elif longest[a + 1][b] >= longest[a][b + 1]:
            a += 1
        else:
            b += 1
    return pairs


def _held(tree: CallTree, calls: list[int]) -> list[tuple[int, ...] | None]:
    """The subtrees each call's children make, in order (what `readings.identical` compares),
    or None for a call that holds none."""
    return [tuple(tree.shapes[child] for child in tree.children[call]) or None for call in calls]


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
        places: _Places | None = None  # made at the parent's first stage
        for place, stage in enumerate(stages):
            children = tree.children[stage]
            if len(children) < 2:
                continue
            partner = partners.get(stage)
            if partner is not None and (
                tree.shapes[stage] == other.shapes[partner]
                or _kept_a_child(tree, other, stage, partner, partners)
                or _holds_it(tree, other, stage, partner, partners, other_partners)
            ):
                continue
            if places is None:
                siblings = other.children[partners[parent]]
                places = _Places((tree, other), siblings, stages, (partners, other_partners))
            # A stage this reading already reads as flattened needs no other reading.
            if partner is None and all(partners.get(child) in places.at for child in children):
                continue
            run = places.run_like([tree.lines[child].module_type for child in children], place)
            if run:
                found.append((parent, partners[parent], stage, run))
                if len(found) == _MOST_READINGS:
                    return found
    return found


class _Places:
    """Where calls are among the children of a paired parent's partner (`siblings`), and
    between which of them each of the parent's own children may have run."""

    def __init__(
        self,
        trees: tuple[CallTree, CallTree],
        siblings: list[int],
        stages: list[int],
        pairs: tuple[dict[int, int], dict[int, int]],
    ) -> None:
        other = trees[1]
        self.other, self.siblings = other, siblings
        self.of_class: dict[str, list[int]] = {}
        self.at: dict[int, int] = {}  # each sibling's place
        for index, sibling in enumerate(siblings):
            self.of_class.setdefault(other.lines[sibling].module_type, []).append(index)
            self.at[sibling] = index
        # A stage's calls ran after the partners of the children before it and before those
        # of the children after it: call order rules out a run anywhere else. Only pairs a
        # look-alike could not have made bound it (`_sure`); a numbered child after the
        # stage is numbered again when the stage's calls take its place, one before it not.
        unique = _unique(trees[0], stages) | _unique(other, siblings)
        # Each child's sure place as a child before the stage, and as one after it.
        places = [self._sure_places(trees, stage, pairs, unique) for stage in stages]
        self.after, latest = [], -1
        for as_one_before, _ in places:
            self.after.append(latest)
            latest = max(latest, as_one_before)
        self.before, earliest = [0] * len(stages), len(siblings)
        for place in range(len(stages) - 1, -1, -1):
            self.before[place] = earliest
            as_one_after = places[place][1]
            earliest = min(earliest, as_one_after if as_one_after >= 0 else len(siblings))

    def _sure_places(
        self,
        trees: tuple[CallTree, CallTree],
        call: int,
        pairs: tuple[dict[int, int], dict[int, int]],
        unique: set[int],
    ) -> tuple[int, int]:
        """The place among the siblings that a child of the parent is surely at, as a
        child before the stage and as one after it: its partner's, for a pair no look-alike
        could have made (`_sure`, told which calls no sibling looks like); -1 for none."""
        sure_before, sure_after = _sure(trees, call, pairs, unique)
        place = self.at.get(pairs[0][call], -1) if sure_before else -1
        return place, place if sure_after else -1

    def run_like(self, classes: list[str], place: int) -> list[int]:
        """The run of siblings whose classes are `classes`, in order, between the partners
        of the children around `place`, nearest `place`; empty for none."""
        width, after, before = len(classes), self.after[place], self.before[place]
        starts = self.of_class.get(classes[0], [])
        # The starts nearest where the stage ran first (right after the calls before it, if
        # any is paired), at most _MOST_STARTS of them.
        expected = after + 1 if after >= 0 else place
        middle = bisect_left(starts, expected)
        nearest = sorted(
            starts[max(0, middle - _MOST_STARTS) : middle + _MOST_STARTS],
            key=lambda start: abs(start - expected),
        )[:_MOST_STARTS]
        for start in nearest:
            run = self.siblings[start : start + width]
            if (
                after < start
                and start + width <= before
                and len(run) == width
                and all(
                    self.other.lines[call].module_type == one
                    for call, one in zip(run, classes, strict=True)
                )
            ):
                return run
        return []


def _sure(
    trees: tuple[CallTree, CallTree],
    call: int,
    pairs: tuple[dict[int, int], dict[int, int]],
    unique: set[int],
) -> tuple[bool, bool]:
    """Whether a call's pair is one no look-alike could have made, for a child before the
    stage and for one after it: it kept its path (after the stage, one whose last name is
    not a number: the stage's calls taking its place number it again), or it holds calls,
    half of which or more pair within its partner, both ways, and one of the two is the
    only one of its subtree among its siblings (`unique`). `pairs`: the partners of
    `trees[0]`'s calls, and of the other's."""
    tree, other = trees
    partners, other_partners = pairs
    partner = partners.get(call)
    if partner is None:
        return False, False
    kept_path = call_keys.kept_path(tree.lines[call], other.lines[partner])
    if kept_path and not call_keys.numbered(tree.lines[call].path):
        return True, True
    holds_its_calls = bool(tree.children[call]) and (
        (call in unique or partner in unique)
        and mostly_within(tree, call, partners, (other.ends, partner))
        and mostly_within(other, partner, other_partners, (tree.ends, call))
    )
    return kept_path or holds_its_calls, holds_its_calls


def _unique(tree: CallTree, calls: list[int]) -> set[int]:
    """The calls whose subtree none of the others in `calls` shares."""
    counts = Counter(tree.shapes[call] for call in calls)
    return {call for call in calls if counts[tree.shapes[call]] == 1}


def _holds_it(
    tree: CallTree,
    other: CallTree,
    stage: int,
    partner: int,
    partners: dict[int, int],
    other_partners: dict[int, int],
) -> bool:
    """Whether a stage's partner holds more than half its nested calls' partners, both
    ways: a stage whose partner holds half of them may have lent the other half."""
    return mostly_within(
        tree, stage, partners, (other.ends, partner), more_than_half=True
    ) and mostly_within(other, partner, other_partners, (tree.ends, stage), more_than_half=True)


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
