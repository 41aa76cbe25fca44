"""Calls left between wrapped or unwrapped calls, paired by their place. Pure, no torch.

A wrapper's children pair with the old calls they were by what they are, but a look-alike
(one of two BatchNorm2d of one shape) or a call changed as it was wrapped has no partner
by that. Its place gives it one: between two calls that were wrapped together, or next to
them, the calls left on each side are the same calls, where they are as many and, for more
than one, of the same classes in order. The same holds the other way round for a call
unwrapped, whose children are now its parent's.
"""

from __future__ import annotations

import bisect
from itertools import pairwise
from typing import NamedTuple

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree


def pair_left_in_wrappers(
    old_tree: CallTree,
    new_tree: CallTree,
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
) -> None:
    """Pair, in the two maps, the calls left between the children of each new wrapper
    (`net`, around the old `fc1`, `act`, `fc2`, now `net.0` to `net.2`: `act`, changed to a
    ReLU, is `net.1`) and of each old call unwrapped (`0`, whose `0.0` to `0.5` are now `0`
    to `5`), and, for an unwrapped call, next to its first and last such child."""
    for wrapper in range(len(new_tree.lines)):
        _pair_left(old_tree, new_tree, old_to_new, new_to_old, wrapper, ends=False)
    for unwrapped in range(len(old_tree.lines)):
        _pair_left(new_tree, old_tree, new_to_old, old_to_new, unwrapped, ends=True)


class _Held(NamedTuple):
    """A container of the inner tree and where it stands: its parent's partner in the outer
    tree, that partner's children (the calls it may hold) and its own children."""

    container: int
    outer_parent: int
    outer_siblings: list[int]
    inside: list[int]


def _pair_left(
    outer_tree: CallTree,
    inner_tree: CallTree,
    outer_to_inner: dict[int, int],
    inner_to_outer: dict[int, int],
    container: int,
    *,
    ends: bool,
) -> None:
    """For an unpaired `container` of the inner tree under a paired parent (or outermost),
    whose children pair with children of that parent's partner: the calls left between
    those pairs, and with `ends` before the first and after the last, pair in place."""
    parent = inner_tree.parents[container]
    if container in inner_to_outer or not inner_tree.children[container]:
        return
    if parent != NO_PARENT and parent not in inner_to_outer:
        return
    outer_parent = inner_to_outer.get(parent, NO_PARENT)
    siblings = outer_tree.roots if outer_parent == NO_PARENT else outer_tree.children[outer_parent]
    inside = inner_tree.children[container]
    anchors = sorted(
        (inner_to_outer[j], j)
        for j in inside
        if j in inner_to_outer and outer_tree.parents[inner_to_outer[j]] == outer_parent
    )
    if not anchors:
        held = _Held(container, outer_parent, siblings, inside)
        _pair_lone_held(outer_tree, inner_tree, outer_to_inner, inner_to_outer, held)
        return
    stretches = [
        (_between(siblings, first[0], next_[0]), _between(inside, first[1], next_[1]))
        for first, next_ in pairwise(anchors)
        if next_[1] > first[1]  # reordered inside the wrapper: no place to keep
    ]
    if ends:
        stretches += [
            (_unpaired_run(siblings, anchors[0][0], -1, outer_to_inner), _between(inside, -1, anchors[0][1])),
            (_unpaired_run(siblings, anchors[-1][0], 1, outer_to_inner), _between(inside, anchors[-1][1], len(inner_tree.lines))),
        ]  # fmt: skip
    for outer_calls, inner_calls in stretches:
        outers = [i for i in outer_calls if i not in outer_to_inner]
        inners = [j for j in inner_calls if j not in inner_to_outer]
        if len(outers) != len(inners) or not outers:
            continue
        if len(outers) > 1 or ends:
            classes = [outer_tree.lines[i].module_type for i in outers]
            if classes != [inner_tree.lines[j].module_type for j in inners]:
                continue
        for outer, inner in zip(outers, inners, strict=True):
            outer_to_inner[outer] = inner
            inner_to_outer[inner] = outer


def _pair_lone_held(
    outer_tree: CallTree,
    inner_tree: CallTree,
    outer_to_inner: dict[int, int],
    inner_to_outer: dict[int, int],
    held: _Held,
) -> None:
    """For a container none of whose children is paired (a Softsign wrapped alone beside
    a layer removed): its children pair with the one run of calls of their classes, in
    order, among the calls left unpaired where it stands, between the partners of its
    nearest paired siblings. Where the classes run twice there, none pair."""
    container, outer_parent, outer_siblings, inside = held
    if any(j in inner_to_outer for j in inside):
        return
    siblings = inner_tree.siblings(container)
    place = siblings.index(container)
    before = _nearest_bound(outer_tree, inner_to_outer, siblings[:place][::-1], outer_parent)
    after = _nearest_bound(outer_tree, inner_to_outer, siblings[place + 1 :], outer_parent)
    if before is None or after is None:
        return  # its neighbours' partners run elsewhere: no place to read
    start = before if before != NO_PARENT else -1
    end = after if after != NO_PARENT else len(outer_tree.lines)
    left = [i for i in _between(outer_siblings, start, end) if i not in outer_to_inner]
    classes = [inner_tree.lines[j].module_type for j in inside]
    found = [
        at
        for at in range(len(left) - len(inside) + 1)
        if [outer_tree.lines[i].module_type for i in left[at : at + len(inside)]] == classes
    ]
    if len(found) != 1:
        return
    for outer, inner in zip(left[found[0] : found[0] + len(inside)], inside, strict=True):
        outer_to_inner[outer] = inner
        inner_to_outer[inner] = outer


def _nearest_bound(
    outer_tree: CallTree, inner_to_outer: dict[int, int], siblings: list[int], outer_parent: int
) -> int | None:
    """The partner of the first paired call of `siblings`, as the child of `outer_parent`
    it runs in (a call of a stage unwrapped bounds as the stage); NO_PARENT where none of
    them is paired (no bound), None where that partner runs outside `outer_parent`."""
    paired = next((inner_to_outer[j] for j in siblings if j in inner_to_outer), None)
    if paired is None:
        return NO_PARENT
    while outer_tree.parents[paired] != outer_parent:
        paired = outer_tree.parents[paired]
        if paired == NO_PARENT:
            return None
    return paired


def _between(calls: list[int], first: int, last: int) -> list[int]:
    """The calls strictly between two indexes; `calls` ascend (children in call order)."""
    return calls[bisect.bisect_right(calls, first) : bisect.bisect_left(calls, last)]


def _unpaired_run(siblings: list[int], anchor: int, step: int, paired: dict[int, int]) -> list[int]:
    """The unpaired siblings next to `anchor`, before it (`step` -1) or after it (1), up to
    the first paired one, in order."""
    run = []
    position = bisect.bisect_left(siblings, anchor) + step
    while 0 <= position < len(siblings) and siblings[position] not in paired:
        run.append(siblings[position])
        position += step
    return run if step > 0 else run[::-1]
