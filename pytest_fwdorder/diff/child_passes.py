"""The keys the children of two paired calls pair by, in turn. Pure, no torch."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import NamedTuple

from pytest_fwdorder.diff import call_keys
from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.diff.ordered_pairing import pairs_around_held
from pytest_fwdorder.golden.format import GoldenLine

_Key = Callable[[GoldenLine], Hashable]


class ChildPass(NamedTuple):
    """One pass of the children's pairing."""

    key: _Key
    unique_only: bool  # only keys found once on each side pair
    near_key: _Key | None  # the key of a pairing by the cheapest edit
    wrapped_first: bool  # a wrapped or unwrapped single call is paired before this pass


def child_passes(
    trees: tuple[CallTree, CallTree],
    match_paths: bool,
    children: tuple[list[int], list[int]],
    held: list[tuple[int, int]],
    prefixes: tuple[str, str],
) -> list[ChildPass]:
    """The passes the unpaired `children` of two paired calls pair by, in turn.

    By class and shapes, each unique on both sides first, then by path; named, by path and
    class before those, unless the children's numbers mislead (`_numbers_mislead`), and by
    class alone (each unique) before the path where fewer or more children run than ran.
    The near key pairs by the cheapest edit: name-free, look-alike children in order, a
    call of the same class in place counted as changed (no path tells a block's `bn1` from
    `bn2`). A wrapped single call is paired before look-alikes pair in order, or, where
    numbers mislead, once they have: the number it shares may be a coincidence. `held`:
    children paired already; `prefixes`: the paired calls' paths where they differ.
    """
    mislead = match_paths and _numbers_mislead(trees, *children, held, prefixes)
    near = None if match_paths else call_keys.module_type
    passes = [
        ChildPass(call_keys.structure, True, None, False),
        ChildPass(call_keys.structure, False, near, not mislead),
        ChildPass(call_keys.path, False, None, mislead),
    ]
    if match_paths and not mislead:
        passes[:0] = [
            ChildPass(call_keys.identity, True, None, False),
            ChildPass(call_keys.identity, False, None, False),
        ]
    if match_paths and len(children[0]) != len(children[1]):
        # A call went or came, and what follows it may take other shapes (a strided layer
        # removed): a class left once on each side keeps its call before numbers pair
        # unlike calls. Not a class left several times: a fused `qkv` is not the new `q`.
        passes.insert(-1, ChildPass(call_keys.module_type, True, None, False))
    return passes


def _numbers_mislead(
    trees: tuple[CallTree, CallTree],
    olds: list[int],
    news: list[int],
    held: list[tuple[int, int]],
    prefixes: tuple[str, str],
) -> bool:
    """Whether the children left to pair are numbered, fewer or more than they were, and
    their looks alone pair more of them in order than their numbers first: a layer moved
    out of a Sequential renumbers those after it, and the old `2`, now `1`, would pair with
    the new `2`, a look-alike, by its number, reading the layers between as swapped. Pairs
    by number that cross the others count for the numbers: layers registered by name in
    another order kept their names and were swapped."""
    if len(olds) == len(news):
        return False
    lines = (trees[0].lines, trees[1].lines)
    if not all(call_keys.numbered(lines[0][i].path) for i in olds) or not all(
        call_keys.numbered(lines[1][j].path) for j in news
    ):
        return False
    look = call_keys.structure
    by_look, _ = pairs_around_held(held, *lines, olds, news, [], look, unique_only=False)
    numbers = (
        call_keys.within(call_keys.identity, prefixes[0]),
        call_keys.within(call_keys.identity, prefixes[1]),
    )
    by_number, crossed = pairs_around_held(held, *lines, olds, news, [], *numbers, unique_only=True)
    with_numbers, _ = pairs_around_held(
        held, *lines, olds, news, by_number, look, unique_only=False
    )
    return len(by_look) > len(with_numbers) + len(crossed)
