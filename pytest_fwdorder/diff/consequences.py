"""Changes that follow from other changes: an input or output change passed on from the call
it starts at, along the nesting (a parent's first input, its last output) and along the data
flow (the next call's input). Pure, no torch.

`explanation` says each such change once, where it starts, with the calls it passed on to;
`classification` leaves them out of the counts.
"""

from __future__ import annotations

from itertools import pairwise

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree, build_call_tree
from pytest_fwdorder.diff.changes import Change, ChangeKind
from pytest_fwdorder.diff.places import called
from pytest_fwdorder.golden.format import GoldenLine

# Changes of a call's own make-up: its output may differ for them alone.
_OWN_KINDS = (ChangeKind.TYPE_CHANGED, ChangeKind.SETTINGS_CHANGED, ChangeKind.PARAMETERS_CHANGED)
# The calls a change passed on to, each with the kind of change it passed on as.
Followers = dict[tuple[ChangeKind, int], list[tuple[ChangeKind, GoldenLine]]]

_PASSED_ON = (ChangeKind.INPUT_CHANGED, ChangeKind.OUTPUT_CHANGED)
FOLLOWERS_SHOWN = 3  # the calls a change passed on to, named before the rest are counted


def fold_consequences(
    changes: list[Change], new_lines: list[GoldenLine], tree: CallTree | None = None
) -> tuple[list[Change], Followers]:
    """The changes without the input and output changes that only pass another one on, and
    those passed on (each with its kind), by the kind and position of the change they
    follow from.

    A call whose output changed exactly as the last call inside it did (the model's output
    after its head's) passes that change on; so does a call whose input changed exactly as
    the call it runs inside did, being that call's first (conv1's after the model's). Either
    passes through calls between them that hand the value on unchanged (a new wrapper).
    Along the data flow: a call whose input changed exactly as the output of the sibling
    before it, and is that output, takes it on (a wider projection's activation), and a
    call without nested calls that gives what it takes passes its input's change on to its
    output. `tree` is the call tree of `new_lines`, where the caller has built it.
    """
    by_place = {
        (change.kind, change.position): change
        for change in changes
        if change.kind in _PASSED_ON and change.position is not None and change.new is not None
    }
    if len(by_place) < 2:
        return changes, {}
    tree = tree or build_call_tree(new_lines)
    previous_siblings = _previous_siblings(tree)
    changed_itself = {
        change.position
        for change in changes
        if change.kind in _OWN_KINDS and change.position is not None and change.new is not None
    }
    source: dict[tuple[ChangeKind, int], tuple[ChangeKind, int]] = {}
    for (kind, position), change in by_place.items():
        cause = _cause(kind, position, by_place, tree)
        if cause is None:
            cause = _cause_along_the_flow(
                kind, position, by_place, tree, previous_siblings, changed_itself
            )
        if cause is not None and cause.detail == change.detail:
            source[(kind, position)] = (cause.kind, cause.position or 0)
    # Each change's followers in the order the change flows: a call's input, then its output,
    # then what that output became (the next call's input, its parent's output).
    passed_to: dict[tuple[ChangeKind, int], list[tuple[ChangeKind, int]]] = {}
    for place in sorted(source, key=_flow_order):
        passed_to.setdefault(source[place], []).append(place)
    followers: Followers = {}
    for root, first in passed_to.items():
        if root in source:
            continue
        flow = followers.setdefault(root, [])
        waiting = list(reversed(first))
        while waiting:
            place = waiting.pop()
            flow.append((place[0], new_lines[place[1]]))
            waiting += reversed(passed_to.get(place, []))
    kept = [change for change in changes if (change.kind, change.position) not in source]
    return kept, followers


def _flow_order(place: tuple[ChangeKind, int]) -> tuple[int, bool]:
    """A call's input before its output, calls in order."""
    return place[1], place[0] is ChangeKind.OUTPUT_CHANGED


def _cause(
    kind: ChangeKind,
    position: int,
    by_place: dict[tuple[ChangeKind, int], Change],
    tree: CallTree,
) -> Change | None:
    """The change of the call's last child (an output) or parent (an input) it passes on."""
    lines = tree.lines
    line = lines[position]
    if kind is ChangeKind.OUTPUT_CHANGED:
        child = _last_child(tree, position)
        # Through a call that hands on the same output unchanged (a new wrapper).
        while (
            child is not None
            and (kind, child) not in by_place
            and lines[child].outputs == line.outputs
        ):
            child = _last_child(tree, child)
        return by_place.get((kind, child)) if child is not None else None
    inner, parent = position, tree.parents[position]
    while (
        parent != NO_PARENT
        and parent + 1 == inner
        and (kind, parent) not in by_place
        and lines[parent].inputs == line.inputs
    ):
        inner, parent = parent, tree.parents[parent]
    first = parent != NO_PARENT and parent + 1 == inner
    return by_place.get((kind, parent)) if first else None


def _last_child(tree: CallTree, index: int) -> int | None:
    children = tree.children[index]
    return children[-1] if children else None


def _previous_siblings(tree: CallTree) -> list[int | None]:
    """Each call's sibling run just before it inside the same parent (None for a first)."""
    previous: list[int | None] = [None] * len(tree.lines)
    for siblings in (tree.roots, *tree.children):
        for before, after in pairwise(siblings):
            previous[after] = before
    return previous


def _cause_along_the_flow(
    kind: ChangeKind,
    position: int,
    by_place: dict[tuple[ChangeKind, int], Change],
    tree: CallTree,
    previous_siblings: list[int | None],
    changed_itself: set[int],
) -> Change | None:
    """The output change of the sibling before the call that is its input, or, for a call
    without nested calls that gives what it takes and whose own facts did not change, the
    change of its own input."""
    lines = tree.lines
    line = lines[position]
    if kind is ChangeKind.INPUT_CHANGED:
        sibling = previous_siblings[position]
        if (
            sibling is None
            or line.inputs != f"({lines[sibling].outputs})"
            or _may_take_the_parents_input(position, by_place, tree)
        ):
            return None
        return by_place.get((ChangeKind.OUTPUT_CHANGED, sibling))
    leaf = not tree.children[position]
    if not leaf or line.inputs != f"({line.outputs})" or position in changed_itself:
        return None  # a call whose settings changed may give another output for that alone
    return by_place.get((ChangeKind.INPUT_CHANGED, position))


def _may_take_the_parents_input(
    position: int, by_place: dict[tuple[ChangeKind, int], Change], tree: CallTree
) -> bool:
    """Whether the call's input is also among its parent's, which changed too: the call may
    take that instead of its sibling's output (a second branch on a second input), so which
    one it took cannot be told."""
    parent = tree.parents[position]
    if parent == NO_PARENT or (ChangeKind.INPUT_CHANGED, parent) not in by_place:
        return False
    return tree.lines[position].inputs[1:-1] in tree.lines[parent].inputs


def describe_passed_on(side: str, followers: list[tuple[ChangeKind, GoldenLine]]) -> str:
    """`, and so the output of the model` for the calls a change passed on to; where it
    passed from an input to an output, each says which: `, and so the input of mlp.1
    (GELU), its output and the input of mlp.2 (Linear)`; through a whole stage, the first
    three and a count: `... and 29 more inputs and outputs`."""
    if not followers:
        return ""
    names = ["the model" if line.path == "<root>" else called(line) for _, line in followers]
    sides = ["input" if kind is ChangeKind.INPUT_CHANGED else "output" for kind, _ in followers]
    if all(one == side for one in sides):
        shown = ", ".join(names[:FOLLOWERS_SHOWN])
        if len(names) > FOLLOWERS_SHOWN + 1:
            return f", and so the {side} of {shown} and {len(names) - FOLLOWERS_SHOWN} more"
        return f", and so the {side} of {', '.join(names)}"
    else:
        parts = [
            f"its {one}" if number and names[number - 1] == name else f"the {one} of {name}"
            for number, (one, name) in enumerate(zip(sides, names, strict=True))
        ]
    if len(parts) > FOLLOWERS_SHOWN + 1:  # a change that flows through a whole stage
        rest = sorted(set(sides[FOLLOWERS_SHOWN:]))
        kinds = " and ".join(f"{one}s" for one in rest)
        return (
            f", and so {', '.join(parts[:FOLLOWERS_SHOWN])} and "
            f"{len(parts) - FOLLOWERS_SHOWN} more {kinds}"
        )
    if len(parts) == 1:
        return f", and so {parts[0]}"
    return f", and so {', '.join(parts[:-1])} and {parts[-1]}"
