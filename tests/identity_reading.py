"""The second oracle of the explanation fuzzes: how many changes the refactor itself states.

A diff picks, of the readings it tries, the one that states fewest changes
(`stated_changes`). The refactor knows which new module is which old one, so the reading it
would give is known: the diff aligned from the pairs of each old module's calls with its very
module's calls in the new model, classified and counted the same way. A diff that states
more changes than that reading picked a longer explanation where a shorter true one fits (a
layer moved read as one removed and another inserted): the issue asks for the smaller.

The diff's own arguments (its lines, headers and names) are taken from the call the diff
makes, named or name-free, so both readings are read from the very same lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from pytest_fwdorder import Trace, TraceDiff, structure_diff
from pytest_fwdorder.checks import structure
from pytest_fwdorder.diff import diffing
from pytest_fwdorder.diff.call_tree import build_call_tree
from pytest_fwdorder.diff.readings import stated_changes
from pytest_fwdorder.diff.tree_alignment import align_trees
from pytest_fwdorder.golden.header import GoldenHeader

# (diff's stated changes, the refactor's), the first two counts of `stated_changes`: each
# change with each call inserted or removed, and with each subtree once. Its last two, renames
# and moves, break ties, and of look-alikes side by side (which of two Tanh layers is the
# copy) a tie the refactor breaks one way may fairly be broken the other.
Stated = tuple[tuple[int, int], tuple[int, int]]


def stated_beside_identity(
    before: Trace, after: Trace, was: dict[str, str | None], *, named: bool
) -> Stated:
    """How many changes the diff of two traces states, and the refactor's reading of it.

    `was`: each new module's path -> the old path of the module it is (None for a new one),
    `<root>` for the model. A module copied beside itself has two new paths of one old one:
    the refactor's reading takes the first copy of each, then the last, and keeps the one
    that states less.
    """
    with _diff_arguments() as arguments:
        difference = (
            before.diff(after) if named else structure_diff(before, after, ignore=("paths",))
        )
    (old_header, old_lines, new_header, new_lines), options = arguments[0]
    trees = (build_call_tree(old_lines), build_call_tree(new_lines))
    headers = (GoldenHeader.of(old_header), GoldenHeader.of(new_header))
    names = options.get("names")
    match_paths = options.get("match_paths", True)
    named_lines = names if names is not None else (old_lines, new_lines)
    readings = []
    for which in (_first, _last):
        anchors = _identity_anchors(*named_lines, was, which)
        again = align_trees(*trees, match_paths=match_paths, anchors=anchors)
        reading = diffing._classified(headers, again, names)
        readings.append(_first_two(stated_changes(reading, trees[1])))
    return _first_two(stated_changes(difference, trees[1])), min(readings)


def _first_two(counted: tuple[int, int, int, int]) -> tuple[int, int]:
    return counted[0], counted[1]


@contextmanager
def _diff_arguments() -> Iterator[list[tuple[tuple[Any, ...], dict[str, Any]]]]:
    """The arguments of each `diff_lines` call made in the block, named or name-free."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    real = diffing.diff_lines

    def recorded(*args: Any, **kwargs: Any) -> TraceDiff:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    with (
        mock.patch.object(diffing, "diff_lines", recorded),
        mock.patch.object(structure, "diff_lines", recorded),
    ):
        yield calls


def _first(paths: list[str]) -> str:
    return paths[0]


def _last(paths: list[str]) -> str:
    return paths[-1]


def _identity_anchors(
    old_lines: list[Any],
    new_lines: list[Any],
    was: dict[str, str | None],
    which: Callable[[list[str]], str],
) -> list[tuple[int, int]]:
    """(old index, new index) of each call of an old module and its module's call now, in
    old order; of copies of one old module, the one `which` picks of their paths in order."""
    old_index = {(line.path, line.nth): index for index, line in enumerate(old_lines)}
    copies: dict[str, list[str]] = {}
    for line in new_lines:
        original = was.get(line.path)
        if original is not None and line.path not in copies.setdefault(original, []):
            copies[original].append(line.path)
    anchors = []
    for index, line in enumerate(new_lines):
        original = was.get(line.path)
        if original is None or which(copies[original]) != line.path:
            continue
        old = old_index.get((original, line.nth))
        if old is not None:
            anchors.append((old, index))
    return sorted(anchors)
