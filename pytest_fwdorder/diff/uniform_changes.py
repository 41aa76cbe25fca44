"""A change made throughout one part of the model -> one sentence about that part.

Pure, no torch. A stage cast to f16 (`model.layer4.half()`, behind a wrapper that casts its
input) changes the dtype of its parameters and of the tensors its calls pass on: per kind
of fact that reads as inputs, outputs and parameters changed at a dozen calls each, three
lines about one change. Said by place it is one: `dtype f32 -> f16 within layer4
(Sequential): the parameters and buffers of 10 calls, 7 inputs and 10 outputs`. So is
another batch size: `batch size (dimension 0) 1 -> 2 in the model: 31 inputs and 9 outputs`.
Another input resolution changes each stage's sizes by its own factor, so no one change is
made alike; but where nothing else changed, every shape follows from the model's input:
`the model's input (1, 3, 64, 64) -> (1, 3, 32, 32), and so 29 more inputs and 8 outputs
changed shape`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.change_details import describe_value_change
from pytest_fwdorder.diff.changes import Change, ChangeKind
from pytest_fwdorder.diff.places import at_modules, describe_place, plural
from pytest_fwdorder.golden.format import GoldenLine
from pytest_fwdorder.golden.line_facts import TENSOR_TITLES, facts_of
from pytest_fwdorder.golden.line_values import values_of

# The kinds of change a uniform change is made of; each counted by what it is about.
_UNIFORM_KINDS = (
    ChangeKind.PARAMETERS_CHANGED,
    ChangeKind.INPUT_CHANGED,
    ChangeKind.OUTPUT_CHANGED,
)
# The kinds of change that flow from the model's input along the calls.
_FLOWING_KINDS = (ChangeKind.INPUT_CHANGED, ChangeKind.OUTPUT_CHANGED)


# What a uniform change is of, as its sentence says it.
DTYPE = "dtype"
BATCH = "batch size (dimension 0)"


@dataclass(frozen=True, slots=True)
class UniformChange:
    """One dtype, or one size of the first dimension, changed alike at calls inside one call
    of the new trace.

    `of` says what changed (`DTYPE` or `BATCH`), from `old` to `new` (`f32`, `f16`; `1`,
    `2`). `place` indexes the innermost call of the new lines that holds every one of
    `changes` (itself possibly one of them); `changes` are the input, output and parameter
    changes that are this change and nothing else, in the order they came.
    """

    of: str
    old: str
    new: str
    place: int
    changes: tuple[Change, ...]


def group_uniform_changes(changes: list[Change], tree: CallTree) -> list[UniformChange]:
    """The uniform changes among `changes` that reach two calls or more, each with the place
    that holds them; a change that is more than one (a cast and a new shape) is in none."""
    by_kind: dict[tuple[str, str, str], list[Change]] = {}
    for change in changes:
        uniform = uniform_change(change)
        if uniform is not None:
            by_kind.setdefault(uniform, []).append(change)
    found = []
    for (of, old, new), group in by_kind.items():
        positions = sorted({change.position for change in group if change.position is not None})
        for part in _parts(tree, positions):
            if len(part) < 2:
                continue  # one call's change reads as well by its kind of fact
            inside = [change for change in group if change.position in part]
            place = _innermost_holder(tree, sorted(part))
            found.append(UniformChange(of, old, new, place, tuple(inside)))
    return found


@dataclass(frozen=True, slots=True)
class EntryChange:
    """The model's input changed, and every other change is the shape or dtype of a call's
    input or output that follows from it: no call changed in any other way.

    `old_inputs` and `new_inputs` are the root call's inputs as the golden writes them;
    `changes` are all the changes, the root's input change first.
    """

    old_inputs: str
    new_inputs: str
    changes: tuple[Change, ...]


def entry_change(changes: list[Change], tree: CallTree) -> EntryChange | None:
    """The change of the model's input that every one of `changes` follows from, or None.

    Only where the trace has one root call, the model's input changed, and every change is
    a tensor's shape or dtype in a call's input or output (no setting, parameter, type or
    call changed), so nothing but the input can have made them.
    """
    if len(tree.roots) != 1 or tree.ends[tree.roots[0]] != len(tree.lines):
        return None
    root = tree.roots[0]
    entry = None
    for change in changes:
        if change.kind not in _FLOWING_KINDS or not _tensors_only(change):
            return None
        if change.kind is ChangeKind.INPUT_CHANGED and change.position == root:
            entry = change
    if entry is None or entry.old is None or entry.new is None or len(changes) < 2:
        return None  # one change reads as well by its kind of fact, which names the call
    others = (change for change in changes if change is not entry)
    return EntryChange(entry.old.inputs, entry.new.inputs, (entry, *others))


def _tensors_only(change: Change) -> bool:
    """Whether `change` (an input or output change) is in its tensors' shapes or dtypes
    alone: as many tensors, every other value the same."""
    if change.old is None or change.new is None:
        return False
    side = "inputs" if change.kind is ChangeKind.INPUT_CHANGED else "outputs"
    old_text, new_text = getattr(change.old, side), getattr(change.new, side)
    old, new = values_of(old_text), values_of(new_text)
    return len(old.tensors) == len(new.tensors) and old.blanked == new.blanked


def describe_entry_change(entry: EntryChange, passed_on: int) -> str:
    """`the model's input (1, 3, 64, 64) -> (1, 3, 32, 32), and so 29 more inputs and 8
    outputs changed shape (and 112 more inputs and outputs they passed on)`."""
    detail = describe_value_change(entry.old_inputs, entry.new_inputs)
    inputs = sum(change.kind is ChangeKind.INPUT_CHANGED for change in entry.changes) - 1
    outputs = sum(change.kind is ChangeKind.OUTPUT_CHANGED for change in entry.changes)
    parts = [
        plural(count, noun)
        for count, noun in ((inputs, "more input"), (outputs, "output"))
        if count
    ]
    sentence = f"the model's input {detail}"
    if parts:
        shapes_only = all(
            _dtypes(change, "old") == _dtypes(change, "new") for change in entry.changes
        )
        what = "shape" if shapes_only else "shape or dtype"
        sentence += f", and so {' and '.join(parts)} changed {what}"
    return sentence + _passed_on(passed_on)


def _dtypes(change: Change, side: str) -> list[str]:
    line = getattr(change, side)
    text = line.inputs if change.kind is ChangeKind.INPUT_CHANGED else line.outputs
    return [dtype for dtype, _ in values_of(text).tensors]


def _parts(tree: CallTree, positions: list[int]) -> list[set[int]]:
    """`positions` (sorted) split by place: where the change enters at the call that holds
    them all (the model's input), or reaches every call inside it, they are one place; else
    each call inside it that holds some is one (two stages cast apart, or side by side,
    with a stage that was not are two places, not the whole model)."""
    holder = _innermost_holder(tree, positions)
    if holder in positions:
        return [set(positions)]
    children = tree.roots if holder == NO_PARENT else tree.children[holder]
    parts: list[set[int]] = []
    waiting = iter(positions)
    position = next(waiting, None)
    for child in children:
        inside = set()
        while position is not None and position < tree.ends[child]:
            inside.add(position)
            position = next(waiting, None)
        parts.append(inside)
    if all(parts):
        return [set(positions)]  # in every call the holder runs
    return [part for part in parts if part]


def uniform_change(change: Change) -> tuple[str, str, str] | None:
    """What `change` is, where it is one change made alike to every tensor it changed: a
    dtype (`('dtype', 'f32', 'f16')`: shapes, names and flags kept) or the size of the first
    dimension (`(BATCH, '1', '2')`: dtypes and the other dimensions kept); else None."""
    if change.kind not in _UNIFORM_KINDS or change.old is None or change.new is None:
        return None
    if change.position is None:
        return None
    if change.kind is ChangeKind.PARAMETERS_CHANGED:
        cast = _tensor_facts_cast(change.old, change.new)
        return (DTYPE, *cast) if cast is not None else None
    side = "inputs" if change.kind is ChangeKind.INPUT_CHANGED else "outputs"
    old_text, new_text = getattr(change.old, side), getattr(change.new, side)
    if not _tensors_only(change):
        return None  # a value other than a tensor changed too
    old_tensors, new_tensors = values_of(old_text).tensors, values_of(new_text).tensors
    found = set()
    for (old_dtype, old_shape), (new_dtype, new_shape) in zip(
        old_tensors, new_tensors, strict=True
    ):
        if old_shape == new_shape and old_dtype != new_dtype:
            found.add((DTYPE, old_dtype, new_dtype))
        elif old_dtype == new_dtype and _first_size_only(old_shape, new_shape):
            found.add((BATCH, str(old_shape[0]), str(new_shape[0])))
        elif (old_dtype, old_shape) != (new_dtype, new_shape):
            return None
    return found.pop() if len(found) == 1 else None


def _first_size_only(old: tuple[int, ...], new: tuple[int, ...]) -> bool:
    return len(old) == len(new) >= 1 and old[0] != new[0] and old[1:] == new[1:]


def _tensor_facts_cast(old: GoldenLine, new: GoldenLine) -> tuple[str, str] | None:
    """The one dtype change of a call's parameters and buffers, as `uniform_change` says."""
    old_facts, new_facts = facts_of(old), facts_of(new)
    casts = set()
    for title in TENSOR_TITLES:
        old_tensors, new_tensors = old_facts.tensors_of(title), new_facts.tensors_of(title)
        if old_tensors.keys() != new_tensors.keys():
            return None
        for name, before in old_tensors.items():
            after = new_tensors[name]
            if before == after:
                continue
            if (
                (before.flags, before.tied_to) != (after.flags, after.tied_to)
                or before.sizes is None
                or after.sizes is None
            ):
                return None  # a flag changed too, or a lazy tensor: no cast alone
            if before.sizes != after.sizes:
                return None
            casts.add((before.dtype, after.dtype))
    return casts.pop() if len(casts) == 1 else None


def _innermost_holder(tree: CallTree, positions: list[int]) -> int:
    """The innermost call that is or holds every call at `positions` (sorted), or
    NO_PARENT where no one call does (top-level calls of a trace without a root call)."""
    first, last = positions[0], positions[-1]
    holder = first
    while holder != NO_PARENT and tree.ends[holder] <= last:
        holder = tree.parents[holder]
    return holder


def describe_uniform_change(
    uniform: UniformChange, lines: list[GoldenLine], passed_on: int, *, name_free: bool = False
) -> str:
    """`dtype f32 -> f16 within layer4 (Sequential): the parameters and buffers of 10 calls,
    7 inputs and 10 outputs (and 12 more inputs and outputs they passed on)`."""
    counts = {kind: 0 for kind in _UNIFORM_KINDS}
    for change in uniform.changes:
        counts[change.kind] += 1
    parts = []
    if counts[ChangeKind.PARAMETERS_CHANGED]:
        # Counted by module where one ran more than once, as the parameters' own line is.
        changed = [
            change.new
            for change in uniform.changes
            if change.kind is ChangeKind.PARAMETERS_CHANGED and change.new is not None
        ]
        titles = " and ".join(_changed_titles(uniform.changes))
        parts.append(f"the {titles} of {at_modules(lines, changed)}")
    for kind, noun in ((ChangeKind.INPUT_CHANGED, "input"), (ChangeKind.OUTPUT_CHANGED, "output")):
        if counts[kind]:
            parts.append(plural(counts[kind], noun))
    said = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    more = _passed_on(passed_on)
    where = _within(uniform.place, lines, name_free)
    return f"{uniform.of} {uniform.old} -> {uniform.new} {where}: {said}{more}"


def _changed_titles(changes: tuple[Change, ...]) -> list[str]:
    """Which of `parameters` and `buffers` changed at some call of `changes`."""
    changed = set()
    for change in changes:
        if change.kind is ChangeKind.PARAMETERS_CHANGED and change.old and change.new:
            old_facts, new_facts = facts_of(change.old).by_title, facts_of(change.new).by_title
            changed |= {
                title for title in TENSOR_TITLES if old_facts.get(title) != new_facts.get(title)
            }
    return [title for title in TENSOR_TITLES if title in changed]


def _within(place: int, lines: list[GoldenLine], name_free: bool) -> str:
    if place == NO_PARENT or lines[place].path == "<root>":
        return "in the model"
    line = lines[place]
    if name_free:
        return f"within the {line.module_type} {describe_place(lines, place)}"
    return f"within {line.name} ({line.module_type})"


def _passed_on(count: int) -> str:
    if not count:
        return ""
    said = "input or output" if count == 1 else "inputs and outputs"
    return f" (and {count} more {said} they passed on)"
