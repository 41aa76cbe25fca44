"""Readings of a call as a call like it nearby, tried last. Pure, no torch.

A reading may pair a call with one of another class at its place though the other side runs
a call of its class nearby that no call of that class pairs with. The Mish of stage 0 moved
to the start of stage 1, whose Linear was wrapped, reads `type changed at 1.0: Linear ->
Mish`, the wrapper inserted and the Mish removed; stage 0 copied before stage 1 reads the
old stage 1's Mish and Linear as changed into the copy's ELU and SELU. Read again with the
call paired with that counterpart, and the call it was paired with with its own (alone,
with the stages they run in paired, or with those stages kept as the reading paired them),
the same diff says one move and one wrap, or one stage inserted (`counterpart_readings`).
Likewise a call a reading says swapped, or whose settings it says changed, beside an
unpaired sibling of its partner just like it: the Linear removed before a stage, read as
it and the stage swapped and the Linear after the stage removed (`swap_readings`);
MobileNetV3's depthwise block removed, read as it changed into the projection after it
(`kind_readings`). And the partner of a call an unwrap takes out of a stage that lost its
other calls, beside a sibling of that stage just like the partner: a stage removed beside
one flattened, read as both unwrapped (`kept_call_readings`). And a layer a reading moves,
beside a look-alike of it that stayed: of two Linears apart, the first moved to another
stage, read as the second moved (`moved_alike_readings`). A counterpart is looked for near
the call first, and where none is near, anywhere, where it is the one of its class and
facts left unpaired: a GELU and a Linear of blocks apart that took each other's places.
And a stage a reading removes whole beside one of its class it inserts whole elsewhere,
holding what it held but one call: the stage moved as one of its layers was removed
(`changed_stage_readings`). `diffing` tries these
readings last, where no other states fewer changes, and keeps one only where it states
fewer: most diffs try none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import cached_property

from pytest_fwdorder.diff.call_keys import facts_thawed, kind, look
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.readings import identical, joined_anchors

__all__ = [
    "changed_stage_readings",
    "counterpart_readings",
    "kept_call_readings",
    "kind_readings",
    "moved_alike_readings",
    "swap_readings",
]

_MOST_READINGS = 6  # each costs an alignment and a classification of the whole diff
_MOST_CALLS_SEEN = 4_000  # calls looked at for counterparts, at most, in one diff


def counterpart_readings(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    changed: Iterable[int],
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that pairs a call, paired with a call of another class
    (the new calls `changed`), with the nearest call of its own class on the other side that
    no call of that class pairs with, and that call's partner likewise, as (old index, new
    index) pairs. `maps`: the reading's partners of old calls, and of new ones."""
    old_tree, new_tree = trees
    partners, partners_of_new = maps
    changed = list(changed)
    seen = [0]  # calls looked at so far
    lone = _LoneOfKind(trees, maps, changed)
    readings: list[list[tuple[int, int]]] = []
    for new in changed:
        old = partners_of_new.get(new)
        if old is None or _same_stage(trees, old, new):
            continue
        anchors = []
        counterpart = _nearest((new_tree, old_tree), new, old, partners_of_new, seen)
        if counterpart is None:
            counterpart = lone.new_like(old)
        if counterpart is not None:
            anchors.append((old, counterpart))
        counterpart = _nearest((old_tree, new_tree), old, new, partners, seen)
        if counterpart is None:
            counterpart = lone.old_like(new)
        if counterpart is not None:
            anchors.append((counterpart, new))
        if not anchors:
            continue
        moved = _their_stages(trees, anchors, partners)
        kept = _stages_kept(trees, anchors, maps)
        for reading in (anchors, joined_anchors(anchors, moved), joined_anchors(anchors, kept)):
            if reading not in readings:
                readings.append(reading)
        if len(readings) >= _MOST_READINGS or seen[0] > _MOST_CALLS_SEEN:
            break
    return readings[:_MOST_READINGS]


class _LoneOfKind:
    """Of the calls a reading leaves unpaired or pairs with a call of another class, the one
    of a call's class and facts (`call_keys.kind`) anywhere in its tree: a GELU of one
    block's MLP and the Linear of another block's mixing that took each other's places,
    read as a type change, one Linear inserted and one GELU removed, are two moves. Found
    only where it is the one of its kind: of two, no trace tells which moved."""

    def __init__(
        self,
        trees: tuple[CallTree, CallTree],
        maps: tuple[dict[int, int], dict[int, int]],
        changed: list[int],
    ) -> None:
        self.trees, self.maps, self.changed = trees, maps, changed

    @cached_property
    def misfits(self) -> tuple[dict[Hashable, list[int]], dict[Hashable, list[int]]]:
        """The old and the new misfits by kind: found once, when first asked for (most
        counterparts are near)."""
        (old_tree, new_tree), (partners, partners_of_new) = self.trees, self.maps
        old_misfits = [*_unpaired(old_tree, partners), *map(partners_of_new.get, self.changed)]
        new_misfits = [*_unpaired(new_tree, partners_of_new), *self.changed]
        return _by_kind(old_tree, old_misfits), _by_kind(new_tree, new_misfits)

    def new_like(self, old: int) -> int | None:
        """The one new misfit of the old call's kind, None where there is none or more."""
        return self._one(1, kind(self.trees[0].lines[old]))

    def old_like(self, new: int) -> int | None:
        """The one old misfit of the new call's kind, None where there is none or more."""
        return self._one(0, kind(self.trees[1].lines[new]))

    def _one(self, side: int, wanted: Hashable) -> int | None:
        found = self.misfits[side].get(wanted, [])
        return found[0] if len(found) == 1 else None


def _unpaired(tree: CallTree, partners: dict[int, int]) -> list[int]:
    """The calls of `tree` without a partner, in order; none where there are too many to
    look at (`_MOST_CALLS_SEEN`)."""
    unpaired = sorted(set(range(len(tree.lines))).difference(partners))
    return unpaired if len(unpaired) <= _MOST_CALLS_SEEN else []


def _by_kind(tree: CallTree, calls: Sequence[int | None]) -> dict[Hashable, list[int]]:
    """The calls by their class and facts (`call_keys.kind`), each once."""
    grouped: dict[Hashable, list[int]] = {}
    for call in dict.fromkeys(calls):
        if call is not None:
            grouped.setdefault(kind(tree.lines[call]), []).append(call)
    return grouped


def _same_stage(trees: tuple[CallTree, CallTree], old: int, new: int) -> bool:
    """Whether two calls hold the same calls, two or more, in order (`readings.identical`):
    a stage made a subclass is that stage. A call holding one call is no such sign: a new
    wrapper around a block holds what the block's parent held."""
    return len(trees[0].children[old]) > 1 and identical(trees, old, new)


def _their_stages(
    trees: tuple[CallTree, CallTree], anchors: list[tuple[int, int]], partners: dict[int, int]
) -> list[tuple[int, int]]:
    """The stages the calls of `anchors` run in, paired, where both run in one and the
    reading (`partners`) pairs them otherwise: a stage moved from the last stage to the end
    of the first, read as the two stages swapped and their layers changed into each other's,
    is each stage where it was and the one stage moved."""
    old_tree, new_tree = trees
    stages = []
    for old, new in anchors:
        old_stage, new_stage = old_tree.parents[old], new_tree.parents[new]
        if NO_PARENT not in (old_stage, new_stage) and partners.get(old_stage) != new_stage:
            stages.append((old_stage, new_stage))
    return stages


def _stages_kept(
    trees: tuple[CallTree, CallTree],
    anchors: list[tuple[int, int]],
    maps: tuple[dict[int, int], dict[int, int]],
) -> list[tuple[int, int]]:
    """The stages the calls of `anchors` run in, each with the partner the reading (`maps`)
    gives it, once: a layer moved to a stage beside one wrapped there leaves both stages
    where they were, which the anchors alone may not say."""
    old_tree, new_tree = trees
    partners, partners_of_new = maps
    stages: list[tuple[int, int]] = []
    for old, new in anchors:
        old_stage, new_stage = old_tree.parents[old], new_tree.parents[new]
        old_partner = partners.get(old_stage)
        if old_stage != NO_PARENT and old_partner is not None:
            stages.append((old_stage, old_partner))
        new_partner = partners_of_new.get(new_stage)
        if new_stage != NO_PARENT and new_partner is not None:
            stages.append((new_partner, new_stage))
    return stages


def _nearest(
    trees: tuple[CallTree, CallTree],
    place: int,
    call: int,
    partners: dict[int, int],
    seen: list[int],
) -> int | None:
    """The call of `trees[0]` nearest `place` (a call of it), within the call two levels
    above it (or the whole tree), of the class of `call` (one of `trees[1]`), that is
    unpaired or paired with a call of another class (`partners`: those of `trees[0]`'s
    calls); None if none. Looked for outwards from `place`, the calls looked at counted in
    `seen`, up to `_MOST_CALLS_SEEN` in all."""
    tree, other = trees
    wanted = other.lines[call].module_type
    above = tree.parents[place]
    if above != NO_PARENT:
        above = tree.parents[above]
    start, end = (0, len(tree.lines)) if above == NO_PARENT else (above, tree.ends[above])
    for distance in range(1, max(place - start, end - 1 - place) + 1):
        if seen[0] > _MOST_CALLS_SEEN:
            return None
        seen[0] += 2
        for index in (place - distance, place + distance):
            if start <= index < end and _misfit(trees, index, wanted, partners):
                return index
    return None


def _misfit(
    trees: tuple[CallTree, CallTree], index: int, wanted: str, partners: dict[int, int]
) -> bool:
    """Whether the call `index` of `trees[0]` is of class `wanted` and unpaired or paired
    with a call of another class."""
    tree, other = trees
    if tree.lines[index].module_type != wanted:
        return False
    partner = partners.get(index)
    return partner is None or other.lines[partner].module_type != wanted


def swap_readings(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    swapped: Iterable[frozenset[int]],
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that pairs a call of a swap (`swapped`: the old calls
    each swap explains) with an unpaired sibling of its partner that holds what it holds
    (`readings.identical`), or its partner with such a sibling of the call: a Linear
    removed before a stage and a Linear after it, read as the first Linear and the stage
    swapped and the second removed, is the second kept; a stage made a subclass beside one
    that lost a layer, read as its look-alike swapped with a neighbour, is its subclass."""
    old_tree, partners = trees[0], maps[0]
    seen = [0]  # siblings looked at so far
    readings: list[list[tuple[int, int]]] = []
    for old_calls in swapped:
        for old in sorted(old_calls):
            new = partners.get(old)
            if new is not None and old_tree.parents[old] not in old_calls:  # not one held
                _add_alike(readings, trees, maps, (old, new), identical, seen)
        if len(readings) >= _MOST_READINGS:
            break
    return readings[:_MOST_READINGS]


def moved_alike_readings(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    moved: Iterable[int],
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that takes, of a layer a reading moves to another parent
    (`moved`: the old calls of its moves), a sibling just like it that stayed in their
    parent as the one moved, the pairs exchanged. Of two Linears apart, the first moved to
    another stage, read as the second moved and the first taken past the layer between them
    (a move that a wrap around that layer hid)."""
    old_tree, new_tree = trees
    partners = maps[0]
    seen = 0
    readings: list[list[tuple[int, int]]] = []
    for old in moved:
        new = partners.get(old)
        parent = old_tree.parents[old]
        if new is None or old_tree.size(old) != 1 or parent == NO_PARENT:
            continue
        stayed_in = partners.get(parent)
        if stayed_in is None or new_tree.parents[new] == stayed_in:
            continue
        siblings = old_tree.siblings(old)
        seen += len(siblings)
        for other in siblings:
            if (
                other != old
                and other in partners
                and new_tree.parents[partners[other]] == stayed_in
                and old_tree.size(other) == 1
                and _exchangeable(trees, old, other)
            ):
                reading = sorted([(other, new), (old, partners[other])])
                if reading not in readings:
                    readings.append(reading)
        if len(readings) >= _MOST_READINGS or seen > _MOST_CALLS_SEEN:
            break
    return readings[:_MOST_READINGS]


def _exchangeable(trees: tuple[CallTree, CallTree], old: int, other: int) -> bool:
    """Whether two old layers look alike: class, shapes and facts."""
    lines = trees[0].lines
    return look(lines[old]) == look(lines[other])


def kind_readings(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    changed: Iterable[int],
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that pairs a call whose settings changed (the new calls
    `changed`), or the stage it runs in, with an unpaired sibling of its partner of the
    same classes and settings throughout (`_same_kinds`), or its partner with such a
    sibling of the call: MobileNetV3's depthwise block removed leaves the projection after
    it at its path, read as the depthwise block changed into it and the projection
    removed."""
    old_tree, new_tree = trees
    seen = [0]  # siblings looked at so far
    readings: list[list[tuple[int, int]]] = []
    for new in changed:
        old = maps[1].get(new)
        if old is None:
            continue
        _add_alike(readings, trees, maps, (old, new), _same_kinds, seen)
        old_stage, new_stage = old_tree.parents[old], new_tree.parents[new]
        if maps[0].get(old_stage) == new_stage != NO_PARENT:  # the stage it runs in
            _add_alike(readings, trees, maps, (old_stage, new_stage), _same_kinds, seen)
        if len(readings) >= _MOST_READINGS or seen[0] > _MOST_CALLS_SEEN:
            break
    return readings[:_MOST_READINGS]


def _add_alike(
    readings: list[list[tuple[int, int]]],
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    pair: tuple[int, int],
    alike: Callable[[tuple[CallTree, CallTree], int, int], bool],
    seen: list[int],
) -> None:
    """Add to `readings` (each once) the pair's old call with each unpaired sibling of its
    new one that `alike` finds like it, and the new call with each such sibling of the old
    one; `seen` counts the siblings looked at, up to `_MOST_CALLS_SEEN` in all."""
    (old_tree, new_tree), (old, new) = trees, pair
    old_siblings, new_siblings = old_tree.siblings(old), new_tree.siblings(new)
    seen[0] += len(old_siblings) + len(new_siblings)
    if seen[0] > _MOST_CALLS_SEEN:
        return
    found = [
        [(old, sibling)]
        for sibling in new_siblings
        if sibling not in maps[1] and alike(trees, old, sibling)
    ]
    found += [
        [(sibling, new)]
        for sibling in old_siblings
        if sibling not in maps[0] and alike(trees, sibling, new)
    ]
    readings += [reading for reading in found if reading not in readings]


def _same_kinds(trees: tuple[CallTree, CallTree], old: int, new: int) -> bool:
    """Whether two calls and the calls they hold are of the same classes and settings, in
    order, whatever their inputs and outputs."""
    old_tree, new_tree = trees
    if old_tree.size(old) != new_tree.size(new):
        return False
    return all(
        old_line.module_type == new_line.module_type
        and facts_thawed(old_line) == facts_thawed(new_line)
        for old_line, new_line in zip(
            old_tree.lines[old : old_tree.ends[old]],
            new_tree.lines[new : new_tree.ends[new]],
            strict=True,
        )
    )


def kept_call_readings(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    unwrapped: Iterable[frozenset[int]],
    wrapped: Iterable[frozenset[int]],
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that pairs the partner of a call an unwrap takes out of a
    stage that lost other calls with a sibling of that stage holding what the partner holds
    (`readings.identical`), and the mirror image for a wrap that gained other calls.

    A stage removed beside one flattened, its first layer like the layer that stays between
    them, reads as two unwraps, that layer and the rest of the stage removed; with the
    layer that stayed paired, it reads as the stage removed whole. `unwrapped`: the old
    calls each unwrap explains; `wrapped`: the new calls each wrap explains.
    """
    old_tree, new_tree = trees
    seen = [0]  # siblings looked at so far
    pairs = [pair for calls in unwrapped for pair in _kept_pairs(trees, maps[0], calls, seen)]
    pairs += [
        (old, new)
        for calls in wrapped
        for new, old in _kept_pairs((new_tree, old_tree), maps[1], calls, seen)
    ]
    return [[pair] for pair in dict.fromkeys(pairs)][:_MOST_READINGS]


def _kept_pairs(
    trees: tuple[CallTree, CallTree],
    partners: dict[int, int],
    calls: frozenset[int],
    seen: list[int],
) -> list[tuple[int, int]]:
    """`kept_call_readings` on one side: (sibling, partner) pairs, of `trees[0]` and
    `trees[1]`, for the calls of `trees[0]` that one unwrap explains (a wrap, with the trees
    flipped), the stage the one among them that is unpaired; `partners` those of
    `trees[0]`'s calls."""
    tree, other = trees
    found: list[tuple[int, int]] = []
    for stage in sorted(calls):
        children = tree.children[stage]
        kept = [child for child in children if child in partners]
        if stage in partners or not kept or len(kept) == len(children):
            continue  # a call it renamed, or a stage that lost nothing
        siblings = [sibling for sibling in tree.siblings(stage) if sibling != stage]
        seen[0] += len(siblings) * len(kept)
        if seen[0] > _MOST_CALLS_SEEN:
            break
        found += [
            (sibling, partners[child])
            for child in kept
            for sibling in siblings
            if identical((tree, other), sibling, partners[child])
        ]
    return found


def changed_stage_readings(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    removed: Iterable[int],
    inserted: Iterable[int],
) -> list[list[tuple[int, int]]]:
    """The anchors of each reading that pairs a stage a reading removes whole with one it
    inserts whole elsewhere, of its class and facts, holding what it held with one call more
    or one fewer: a stage moved to the start of another as one of its layers was removed,
    read as the stage removed with both its calls and one inserted with the other. Only the
    one such stage on each side is paired: of two, no trace tells which moved. `removed`
    and `inserted`: the old and new calls the reading says went and came."""
    old_tree, new_tree = trees
    old_roots = _stage_roots(old_tree, removed, maps[0])
    new_roots = _stage_roots(new_tree, inserted, maps[1])
    if len(old_roots) * len(new_roots) > _MOST_CALLS_SEEN:
        return []
    found = [
        (old, new)
        for old in old_roots
        for new in new_roots
        if kind(old_tree.lines[old]) == kind(new_tree.lines[new])
        and _one_call_apart(trees, maps, old, new)
    ]
    olds = Counter(old for old, _ in found)
    news = Counter(new for _, new in found)
    return [[pair] for pair in found if olds[pair[0]] == news[pair[1]] == 1][:_MOST_READINGS]


def _stage_roots(tree: CallTree, went: Iterable[int], partners: dict[int, int]) -> list[int]:
    """Of the calls `went`, those that hold calls and run in no other of them."""
    gone = set(went)
    return [
        call
        for call in sorted(gone)
        if tree.children[call] and tree.parents[call] not in gone and call not in partners
    ]


def _one_call_apart(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old: int,
    new: int,
) -> bool:
    """Whether two stages hold the same calls, in order, but for one more on one side, that
    one unpaired (removed or inserted), and none of those they share is paired outside the
    other stage: a stage unwrapped, whose calls are paired where they run now, did not move.
    A call more that moved is left to the readings of moves: the model wrapped whole as a
    stage was flattened and a layer of the next moved reads as that stage moved into the
    flattened one, two moves where three changes were made, the paths of the layers
    flattened kept, which no trace tells from the truth."""
    # Each side: its tree, its stage, its partners, and the other side's tree and stage.
    sides = [(trees[0], old, maps[0], trees[1], new), (trees[1], new, maps[1], trees[0], old)]
    if len(trees[0].children[old]) > len(trees[1].children[new]):
        sides.reverse()  # the shorter side first: the old stage holds the call more
    shorter, longer = (
        [tree.shapes[child] for child in tree.children[stage]] for tree, stage, *_ in sides
    )
    if len(longer) != len(shorter) + 1 or not shorter:
        return False
    extra = next(
        (at for at in range(len(longer)) if longer[:at] + longer[at + 1 :] == shorter), None
    )
    if extra is None:
        return False
    longer_tree, longer_stage = sides[1][0], sides[1][1]
    more = longer_tree.children[longer_stage][extra]
    extra_calls = range(more, longer_tree.ends[more])
    if any(call in sides[1][2] for call in extra_calls):
        return False  # the call more moved (a model wrapped whole as a stage was flattened)
    for tree, stage, partners, other_tree, other in sides:
        for nested in range(stage + 1, tree.ends[stage]):
            partner = partners.get(nested)
            if partner is not None and not other < partner < other_tree.ends[other]:
                return False
    return True
