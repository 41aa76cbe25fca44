"""Changes that follow from other changes: an input or output change passed on from the call
it starts at, along the nesting (a parent's first input, its last output) and along the data
flow (the next call's input). Pure, no torch.

`explanation` says each such change once, where it starts, with the calls it passed on to;
`classification` leaves them out of the counts.
"""

from __future__ import annotations

from pytest_fwdorder.diff.changes import Change, ChangeKind
from pytest_fwdorder.golden.format import GoldenLine

# Changes of a call's own make-up: its output may differ for them alone.
_OWN_KINDS = (ChangeKind.TYPE_CHANGED, ChangeKind.SETTINGS_CHANGED, ChangeKind.PARAMETERS_CHANGED)
# The calls a change passed on to, each with the kind of change it passed on as.
Followers = dict[tuple[ChangeKind, int], list[tuple[ChangeKind, GoldenLine]]]

_PASSED_ON = (ChangeKind.INPUT_CHANGED, ChangeKind.OUTPUT_CHANGED)


def fold_consequences(
    changes: list[Change], new_lines: list[GoldenLine]
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
    output.
    """
    by_place = {
        (change.kind, change.position): change
        for change in changes
        if change.kind in _PASSED_ON and change.position is not None and change.new is not None
    }
    if len(by_place) < 2:
        return changes, {}
    parents, last_children = _parents_and_last_children(new_lines)
    previous_siblings = _previous_siblings(parents)
    changed_itself = {
        change.position
        for change in changes
        if change.kind in _OWN_KINDS and change.position is not None and change.new is not None
    }
    source: dict[tuple[ChangeKind, int], tuple[ChangeKind, int]] = {}
    for (kind, position), change in by_place.items():
        cause = _cause(kind, position, by_place, new_lines, parents, last_children)
        if cause is None:
            cause = _cause_along_the_flow(
                kind, position, by_place, new_lines, previous_siblings, parents, changed_itself
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
    new_lines: list[GoldenLine],
    parents: list[int | None],
    last_children: dict[int, int],
) -> Change | None:
    """The change of the call's last child (an output) or parent (an input) it passes on."""
    line = new_lines[position]
    if kind is ChangeKind.OUTPUT_CHANGED:
        child = last_children.get(position)
        # Through a call that hands on the same output unchanged (a new wrapper).
        while (
            child is not None
            and (kind, child) not in by_place
            and new_lines[child].outputs == line.outputs
        ):
            child = last_children.get(child)
        return by_place.get((kind, child)) if child is not None else None
    inner, parent = position, parents[position]
    while (
        parent is not None
        and parent + 1 == inner
        and (kind, parent) not in by_place
        and new_lines[parent].inputs == line.inputs
    ):
        inner, parent = parent, parents[parent]
    first = parent is not None and parent + 1 == inner
    return by_place.get((kind, parent)) if first and parent is not None else None


def _cause_along_the_flow(
    kind: ChangeKind,
    position: int,
    by_place: dict[tuple[ChangeKind, int], Change],
    new_lines: list[GoldenLine],
    previous_siblings: list[int | None],
    parents: list[int | None],
    changed_itself: set[int],
) -> Change | None:
    """The output change of the sibling before the call that is its input, or, for a call
    without nested calls that gives what it takes and whose own facts did not change, the
    change of its own input."""
    line = new_lines[position]
    if kind is ChangeKind.INPUT_CHANGED:
        sibling = previous_siblings[position]
        if (
            sibling is None
            or line.inputs != f"({new_lines[sibling].outputs})"
            or _may_take_the_parents_input(position, by_place, new_lines, parents)
        ):
            return None
        return by_place.get((ChangeKind.OUTPUT_CHANGED, sibling))
    leaf = position + 1 == len(new_lines) or new_lines[position + 1].depth <= line.depth
    if not leaf or line.inputs != f"({line.outputs})" or position in changed_itself:
        return None  # a call whose settings changed may give another output for that alone
    return by_place.get((ChangeKind.INPUT_CHANGED, position))


def _may_take_the_parents_input(
    position: int,
    by_place: dict[tuple[ChangeKind, int], Change],
    new_lines: list[GoldenLine],
    parents: list[int | None],
) -> bool:
    """Whether the call's input is also among its parent's, which changed too: the call may
    take that instead of its sibling's output (a second branch on a second input), so which
    one it took cannot be told."""
    parent = parents[position]
    if parent is None or (ChangeKind.INPUT_CHANGED, parent) not in by_place:
        return False
    return new_lines[position].inputs[1:-1] in new_lines[parent].inputs


def _previous_siblings(parents: list[int | None]) -> list[int | None]:
    """Each call's sibling called just before it (None for a first child)."""
    last_child: dict[int | None, int] = {}
    previous: list[int | None] = []
    for index, parent in enumerate(parents):
        previous.append(last_child.get(parent))
        last_child[parent] = index
    return previous


def _parents_and_last_children(
    lines: list[GoldenLine],
) -> tuple[list[int | None], dict[int, int]]:
    """Each line's parent (None at the top) and each parent's last child, by index."""
    parents: list[int | None] = []
    last_children: dict[int, int] = {}
    open_calls: list[int] = []
    for index, line in enumerate(lines):
        while open_calls and lines[open_calls[-1]].depth >= line.depth:
            open_calls.pop()
        parent = open_calls[-1] if open_calls else None
        parents.append(parent)
        if parent is not None:
            last_children[parent] = index
        open_calls.append(index)
    return parents, last_children
