"""Changes -> words: the summary, the aligned call lines of a diff, and each change's detail.

Pure functions on text, no torch. What a reviewer reads first comes first: a line of totals,
one line per kind of change with examples, then the calls with context (`-` old, `+` new).
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass

from pytest_fwdorder.diff.changes import Change, ChangeKind, DiffRow
from pytest_fwdorder.diff.tree_changes import TreeChange, unexplained
from pytest_fwdorder.golden.format import (
    TENSOR_PATTERN,
    GoldenLine,
    flops_of,
    human_count,
    initialization_step_parts,
    named_items,
    operation_parts,
    tensor_fact_flags,
    tensor_fact_items,
    tensor_fact_shape,
)
from pytest_fwdorder.golden.parse import split_values, tensor_shapes

# Order of the summary: what a reviewer should read first comes first.
_SUMMARY_ORDER = (
    ChangeKind.TYPE_CHANGED,
    ChangeKind.INSERTED,
    ChangeKind.REMOVED,
    ChangeKind.MOVED,
    ChangeKind.RENAMED,
    ChangeKind.INPUT_CHANGED,
    ChangeKind.OUTPUT_CHANGED,
    ChangeKind.OPERATION_CHANGED,
    ChangeKind.OPERATION_INSERTED,
    ChangeKind.OPERATION_REMOVED,
    ChangeKind.SETTINGS_CHANGED,
    ChangeKind.PARAMETERS_CHANGED,
    ChangeKind.MODE_CHANGED,
    ChangeKind.NESTING_CHANGED,
    ChangeKind.REGISTRATION_CHANGED,
    ChangeKind.FROZEN_CHANGED,
    ChangeKind.REUSE_CHANGED,
    ChangeKind.BACKWARD_CHANGED,
    ChangeKind.FLOPS_CHANGED,
    ChangeKind.UNCOUNTED_OPERATION_ADDED,
    ChangeKind.INITIALIZATION_CHANGED,
    ChangeKind.VALUES_CHANGED,
    ChangeKind.GRAPH_BREAKS_CHANGED,
    ChangeKind.ODD_BLOCK_FOUND,
    ChangeKind.ODD_BLOCK_GONE,
    ChangeKind.FORWARD_RUN_FOUND,
    ChangeKind.FORWARD_RUN_GONE,
)
# Header findings, counted by what they are about and described item by item.
_FINDINGS = {
    ChangeKind.ODD_BLOCK_FOUND: "block",
    ChangeKind.ODD_BLOCK_GONE: "block",
    ChangeKind.FORWARD_RUN_FOUND: "module",
    ChangeKind.FORWARD_RUN_GONE: "module",
}

_EXAMPLES = 5

# What a change of each kind counts, where it is not a call.
_NOUNS = {
    ChangeKind.REUSE_CHANGED: "module",
    ChangeKind.OPERATION_CHANGED: "operation",
    ChangeKind.OPERATION_INSERTED: "operation",
    ChangeKind.OPERATION_REMOVED: "operation",
    ChangeKind.BACKWARD_CHANGED: "backward step",
    ChangeKind.UNCOUNTED_OPERATION_ADDED: "operation",
}


def summarize(
    changes: list[Change],
    old_lines: list[GoldenLine],
    new_lines: list[GoldenLine],
    nesting: list[TreeChange] | None = None,
) -> str:
    """A paragraph: one line of totals, then one line per change to the nesting (a wrap, an
    unwrap, a move to another parent, a renamed subtree), then one per kind of the other
    changes. The per-call changes a change to the nesting explains are not repeated."""
    nesting = nesting or []
    changes = unexplained(changes, nesting)
    nesting_counts = Counter(change.kind for change in nesting)
    counts = Counter(change.kind for change in changes)
    kinds = [kind for kind in _SUMMARY_ORDER if counts[kind]]
    totals = [
        f"{nesting_counts[kind]} {_NESTING_NOUNS[kind][nesting_counts[kind] != 1]}"
        for kind in _NESTING_NOUNS
        if nesting_counts[kind]
    ]
    totals += [
        f"{plural(counts[kind], _FINDINGS[kind])} {kind.value}"
        if kind in _FINDINGS
        else f"{plural(counts[kind], 'uncounted operation')} added"
        if kind is ChangeKind.UNCOUNTED_OPERATION_ADDED
        else kind.value
        if kind in (ChangeKind.INITIALIZATION_CHANGED, ChangeKind.GRAPH_BREAKS_CHANGED)
        else f"{plural(counts[kind], _NOUNS.get(kind, 'call'))} "
        f"{kind.value.removeprefix('operation ').removeprefix('backward ')}"
        if kind in _NOUNS and kind is not ChangeKind.REUSE_CHANGED
        else f"{plural(counts[kind], _NOUNS.get(kind, 'call'))} {kind.value}"
        for kind in kinds
    ]
    lines = [
        f"{len(old_lines)} calls before, {len(new_lines)} after: "
        + (", ".join(totals) if totals else "only the header differs")
    ]
    for kind, nouns in _NESTING_NOUNS.items():
        sentences = [change.sentence for change in nesting if change.kind is kind]
        lines += sentences[:_EXAMPLES]
        if len(sentences) > _EXAMPLES:
            lines.append(f"(+{len(sentences) - _EXAMPLES} more {nouns[1]})")
    diff = _Changes(changes, old_lines, new_lines)
    lines.extend(line for line in (_describe_kind(diff, kind) for kind in kinds) if line)
    return "\n".join(lines)


# The changes to the nesting, in the order a summary gives them, and how it counts them.
_NESTING_NOUNS = {
    ChangeKind.WRAPPED: ("wrap", "wraps"),
    ChangeKind.UNWRAPPED: ("unwrap", "unwraps"),
    ChangeKind.MOVED: ("move to another parent", "moves to another parent"),
    ChangeKind.SPLIT: ("shared module split", "shared modules split"),
    ChangeKind.MERGED: ("merge into a shared module", "merges into shared modules"),
    ChangeKind.RENAMED: ("subtree renamed", "subtrees renamed"),
}


@dataclass(frozen=True, slots=True)
class _Changes:
    """The changes a summary describes, with the lines their positions index."""

    changes: list[Change]
    old_lines: list[GoldenLine]
    new_lines: list[GoldenLine]

    def of_kind(self, kind: ChangeKind) -> list[Change]:
        return [change for change in self.changes if change.kind is kind]


def call_lines(
    rows: list[DiffRow],
    old_lines: list[GoldenLine],
    new_lines: list[GoldenLine],
    context: int,
    max_rows: int,
    *,
    leading_context: bool,
) -> list[str]:
    """The aligned calls as text (`-` old, `+` new), `context` unchanged rows around each
    change and longer unchanged runs elided, at most `max_rows` rows; without
    `leading_context` from the first changed row on."""
    show = rows_to_show(rows, context)
    start = 0
    if not leading_context:
        start = next((index for index, row in enumerate(rows) if row.differs), len(rows))
    lines: list[str] = []
    shown = 0
    skipped = 0
    for position in range(start, len(rows)):
        row = rows[position]
        if not show[position]:
            skipped += 1
            continue
        if skipped:
            lines.append(f"  ... {plural(skipped, 'unchanged call')} ...")
            skipped = 0
        if shown >= max_rows:
            remaining = sum(1 for later in rows[position:] if later.differs)
            lines.append(f"  ... {plural(remaining, 'more changed row')} not shown")
            return lines
        shown += 1
        if not row.differs and row.new is not None:
            lines.append(f"  {new_lines[row.new].text}")
            continue
        old_block = _block(old_lines[row.old]) if row.old is not None else []
        new_block = _block(new_lines[row.new]) if row.new is not None else []
        lines += _block_diff(old_block, new_block)
    if skipped:
        lines.append(f"  ... {plural(skipped, 'unchanged call')} ...")
    return lines


def _block(line: GoldenLine) -> list[str]:
    """A call line, the fact lines under it, and its operations (`ops=True`)."""
    return [line.text, *line.fact_lines, *line.operation_lines]


def _block_diff(old_block: list[str], new_block: list[str]) -> list[str]:
    """Two calls with their facts: the call lines (`-` old, `+` new, or kept when equal),
    then the fact lines that differ. A call on one side only shows whole."""
    if not old_block or not new_block:
        return [*(f"- {text}" for text in old_block), *(f"+ {text}" for text in new_block)]
    if old_block[0] == new_block[0]:
        lines = [f"  {old_block[0]}"]
    else:
        lines = [f"- {old_block[0]}", f"+ {new_block[0]}"]
    old_facts, new_facts = old_block[1:], new_block[1:]
    matcher = difflib.SequenceMatcher(a=old_facts, b=new_facts, autojunk=False)
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag != "equal":  # facts both sides share would only push changes out of view
            lines += [f"- {text}" for text in old_facts[old_start:old_end]]
            lines += [f"+ {text}" for text in new_facts[new_start:new_end]]
    return lines


def rows_to_show(rows: list[DiffRow], context: int) -> list[bool]:
    show = [False] * len(rows)
    last_change = -(10**9)
    for position, row in enumerate(rows):
        if row.differs:
            last_change = position
        show[position] = position - last_change <= context
    next_change = 10**9
    for position in range(len(rows) - 1, -1, -1):
        if rows[position].differs:
            next_change = position
        if next_change - position <= context:
            show[position] = True
    return show


def describe_where(lines: list[GoldenLine], index: int) -> str:
    """`after X (Type)` (previous sibling) or `at the start of X (Type)` (parent) for the line
    at `index`."""
    depth = lines[index].depth
    for earlier in range(index - 1, -1, -1):
        if lines[earlier].depth == depth:
            return f"after {called(lines[earlier])}"
        if lines[earlier].depth < depth:
            return f"at the start of {called(lines[earlier])}"
    return "at the start"


def describe_value_change(old_text: str, new_text: str) -> str:
    """What changed in inputs or outputs: shapes, dtypes, then other values that differ.

    `(1, 4) -> (2, 4)`, `dtype f32 -> f64`, `flag=True -> flag=False`, or both texts whole
    when no shorter account is exact.
    """
    old_tensors, new_tensors = tensor_shapes(old_text), tensor_shapes(new_text)
    parts: list[str] = []
    if old_tensors != new_tensors:
        tensor_change = _tensor_change(old_tensors, new_tensors)
        if tensor_change is None:
            return f"{old_text} -> {new_text}"
        parts.append(tensor_change)
    parts += _other_value_changes(old_text, new_text)
    return " and ".join(parts) if parts else f"{old_text} -> {new_text}"


def _tensor_change(
    old_tensors: list[tuple[str, tuple[int, ...]]], new_tensors: list[tuple[str, tuple[int, ...]]]
) -> str | None:
    """Shapes or dtypes that changed, when the tensors line up one for one; else None."""
    if not old_tensors or len(old_tensors) != len(new_tensors):
        return None
    old_dtypes = [dtype for dtype, _ in old_tensors]
    new_dtypes = [dtype for dtype, _ in new_tensors]
    old_shapes = [shape for _, shape in old_tensors]
    new_shapes = [shape for _, shape in new_tensors]
    if old_dtypes == new_dtypes:
        return f"{_join_shapes(old_shapes)} -> {_join_shapes(new_shapes)}"
    if old_shapes == new_shapes:
        return f"dtype {', '.join(old_dtypes)} -> {', '.join(new_dtypes)}"
    return None


def _other_value_changes(old_text: str, new_text: str) -> list[str]:
    """The values other than tensors that differ: `flag=True -> flag=False`, `added x=1`."""
    old_values, new_values = split_values(old_text), split_values(new_text)
    old_keys = [TENSOR_PATTERN.sub("T", value) for value in old_values]
    new_keys = [TENSOR_PATTERN.sub("T", value) for value in new_values]
    matcher = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False)
    changes = []
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        before = ", ".join(old_values[old_start:old_end])
        after = ", ".join(new_values[new_start:new_end])
        if tag == "replace":
            changes.append(f"{before} -> {after}")
        elif tag == "insert":
            changes.append(f"added {after}")
        elif tag == "delete":
            changes.append(f"dropped {before}")
    return changes


def _join_shapes(shapes: list[tuple[int, ...]]) -> str:
    return ", ".join(str(shape) for shape in shapes)


def describe_operation_change(old_text: str, new_text: str) -> str:
    """`relu -> gelu`, or `softmax input (f32[2,4], -1) -> (f32[2,4], 1)`."""
    old_name, old_arguments, old_output = operation_parts(old_text)
    new_name, new_arguments, new_output = operation_parts(new_text)
    if old_name != new_name:
        return f"{old_name} -> {new_name}"
    if old_arguments != new_arguments:
        return f"{new_name} input {describe_value_change(old_arguments, new_arguments)}"
    return f"{new_name} output {describe_value_change(old_output, new_output)}"


def describe_settings_change(old_text: str, new_text: str) -> str:
    """`kernel_size (3, 3) -> (5, 5), bias True -> False`, or both texts whole."""
    old_settings, new_settings = named_items(old_text), named_items(new_text)
    if old_settings is None or new_settings is None:
        return f"{old_text or '(none)'} -> {new_text or '(none)'}"
    parts = []
    for name, value in new_settings.items():
        before = old_settings.get(name)
        if before is None:
            parts.append(f"added {name}={value}")
        elif before != value:
            parts.append(f"{name} {before} -> {value}")
    parts += [
        f"dropped {name}={value}"
        for name, value in old_settings.items()
        if name not in new_settings
    ]
    return ", ".join(parts)


def describe_tensor_fact_changes(
    old_text: str, new_text: str, path: str, *, whole_module_frozen: bool = False
) -> list[str]:
    """`renamed block.w -> block.weight (f32[64,64])`, `now frozen: 4.weight`, shape changes."""
    old_items, new_items = tensor_fact_items(old_text), tensor_fact_items(new_text)
    prefix = f"{path}." if path and path != "<root>" else ""
    changes: list[str] = []
    removed = [name for name in old_items if name not in new_items]
    added = [name for name in new_items if name not in old_items]
    for name in list(removed):
        old_description = tensor_fact_shape(old_items[name])
        partner = next(
            (other for other in added if tensor_fact_shape(new_items[other]) == old_description),
            None,
        )
        if partner is not None:
            changes.append(f"renamed {prefix}{name} -> {prefix}{partner} ({old_description})")
            removed.remove(name)
            added.remove(partner)
    changes += [f"removed {prefix}{name} ({old_items[name]})" for name in removed]
    changes += [f"added {prefix}{name} ({new_items[name]})" for name in added]
    for name, new_description in new_items.items():
        before = old_items.get(name)
        if before is None or before == new_description:
            continue
        old_flags, new_flags = tensor_fact_flags(before), tensor_fact_flags(new_description)
        if tensor_fact_shape(before) != tensor_fact_shape(new_description):
            changes.append(
                f"{prefix}{name} {tensor_fact_shape(before)} -> {tensor_fact_shape(new_description)}"
            )
        if whole_module_frozen:  # the module's own frozen change says it
            old_flags.discard("frozen")
            new_flags.discard("frozen")
        for flag in sorted(new_flags - old_flags):
            changes.append(f"now {flag}: {prefix}{name}")
        for flag in sorted(old_flags - new_flags):
            changes.append(f"no longer {flag}: {prefix}{name}")
    return changes


def describe_flops_change(old: int, new: int) -> str:
    """`1.85 G -> 2.61 G (+41%)`: the FLOPs before and after, and by how much they changed."""
    change = f" ({(new - old) / old:+.0%})" if old else ""
    return f"{human_count(old)} -> {human_count(new)}{change}"


def describe_initialization_change(old_steps: list[str], new_steps: list[str]) -> str:
    """The first initialization step that moved or changed, in words, and how many differ:
    `initialization order changed: b.weight now before a.weight; every later draw shifted`."""
    old = [initialization_step_parts(step) for step in old_steps]
    new = [initialization_step_parts(step) for step in new_steps]
    first = next(
        (number for number, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )
    differing = sum(
        1 for number in range(max(len(old), len(new)))
        if number >= len(old) or number >= len(new) or old[number] != new[number]
    )  # fmt: skip
    tail = f" ({differing} of {len(new)} steps differ from step {first + 1} on)"
    if first >= len(old):
        target, operations, _ = new[first]
        return f"initialization step added at the end: {target} {operations}{tail}"
    if first >= len(new):
        target, operations, _ = old[first]
        return f"initialization step removed at the end: {target} {operations}{tail}"
    (old_target, old_operations, old_draws) = old[first]
    (new_target, new_operations, new_draws) = new[first]
    old_later = {target for target, _, _ in old[first + 1 :]}
    new_later = {target for target, _, _ in new[first + 1 :]}
    shifted = (
        "; every later draw shifted"
        if any(draws for _, _, draws in new[first:]) and (old_draws or new_draws)
        else ""
    )
    if old_target == new_target:
        draws = f", {old_draws:,} -> {new_draws:,} draws" if old_draws != new_draws else ""
        return (
            f"initialization of {new_target} changed: {old_operations} -> {new_operations}"
            f"{draws}{shifted}{tail}"
        )
    if new_target in old_later and old_target in new_later:
        return f"initialization order changed: {new_target} now before {old_target}{shifted}{tail}"
    if old_target in new_later:
        return (
            f"initialization step added: {new_target} {new_operations} before {old_target}"
            f"{shifted}{tail}"
        )
    if new_target in old_later:
        return f"initialization step removed: {old_target} {old_operations}{shifted}{tail}"
    return (
        f"initialization step {first + 1} changed: {old_target} {old_operations} -> "
        f"{new_target} {new_operations}{shifted}{tail}"
    )


def _biggest_first(changes: list[Change]) -> list[Change]:
    """Cost changes by how many FLOPs they add or take away, the biggest first (stable)."""

    def size(change: Change) -> int:
        old = flops_of(change.old) if change.old is not None else None
        new = flops_of(change.new) if change.new is not None else None
        return abs((new or 0) - (old or 0))

    return sorted(changes, key=size, reverse=True)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def called(line: GoldenLine) -> str:
    """A call as summaries name it: its golden name and its class, `layer1.0.relu #2 (ReLU)`."""
    return f"{line.name} ({line.module_type})"


def _describe_kind(diff: _Changes, kind: ChangeKind) -> str:
    changes = diff.of_kind(kind)
    count = len(changes)
    if kind in _FINDINGS:
        return f"{plural(count, _FINDINGS[kind])} {kind.value}: " + _examples(
            [c.detail for c in changes], separator="; "
        )
    if kind is ChangeKind.TYPE_CHANGED:
        groups: dict[str, int] = {}
        for change in changes:
            groups[change.detail] = groups.get(change.detail, 0) + 1
        parts = [detail if len(groups) == 1 else f"{detail} ({n})" for detail, n in groups.items()]
        only = changes[0].new if count == 1 else None
        where = only.name if only is not None else plural(count, "call")
        return f"type changed at {where}: {', '.join(parts)}"
    if kind in (ChangeKind.INSERTED, ChangeKind.REMOVED, ChangeKind.MOVED):
        return _describe_subtrees(diff, changes, kind)
    if kind is ChangeKind.RENAMED:
        items = [f"{called(c.old)} -> {c.new.name}" for c in changes if c.old and c.new]
        return f"{plural(count, 'call')} renamed: " + _examples(items)
    if kind in (ChangeKind.INPUT_CHANGED, ChangeKind.OUTPUT_CHANGED):
        side = "input" if kind is ChangeKind.INPUT_CHANGED else "output"
        items = [f"{called(c.new)} {side} {c.detail}" for c in changes if c.new is not None]
        return f"{side} changed at {plural(count, 'call')}: " + _examples(items, separator="; ")
    if kind is ChangeKind.REUSE_CHANGED:
        return "reuse count changed: " + _examples([c.detail for c in changes])
    if kind is ChangeKind.OPERATION_CHANGED:
        items = [f"in {c.new.name} ({c.detail.replace(': ', '): ', 1)}" for c in changes if c.new]
        if count == 1:
            return f"operation changed {items[0]}"
        return f"{count} operations changed: " + _examples(items, separator="; ")
    if kind in (ChangeKind.OPERATION_INSERTED, ChangeKind.OPERATION_REMOVED):
        by_call: dict[str, list[str]] = {}
        for change in changes:
            if change.new is not None:
                by_call.setdefault(change.new.name, []).append(change.detail)
        verb = kind.value.removeprefix("operation ")
        per_call = [
            f"{plural(len(details), 'operation')} {verb} in {name}: {', '.join(details)}"
            for name, details in by_call.items()
        ]
        return _examples(per_call, separator="; ")
    if kind is ChangeKind.BACKWARD_CHANGED:
        return "backward order changed: " + _examples([c.detail for c in changes], separator="; ")
    if kind is ChangeKind.FLOPS_CHANGED:
        return f"FLOPs changed at {plural(count, 'call')}: " + _examples(
            [f"{called(c.new)} {c.detail}" for c in _biggest_first(changes) if c.new is not None]
        )
    if kind is ChangeKind.UNCOUNTED_OPERATION_ADDED:
        return "operations without a FLOP formula, counted as 0: " + _examples(
            [c.detail for c in changes]
        )
    if kind in (ChangeKind.INITIALIZATION_CHANGED, ChangeKind.GRAPH_BREAKS_CHANGED):
        return "; ".join(c.detail for c in changes)
    if kind is ChangeKind.VALUES_CHANGED:
        # In the order the calls ended: a parent's output moves because a child's did, so
        # the first call to end with moved values is where the numbers first diverged.
        ended = _end_order(diff.new_lines)
        in_end_order = sorted(
            changes, key=lambda c: ended[c.position] if c.position is not None else 0
        )
        moved = [f"{called(c.new)}: {c.detail}" for c in in_end_order if c.new is not None]
        later = f"; later: {_examples(moved[1:], separator='; ')}" if len(moved) > 1 else ""
        return (
            f"values moved beyond the tolerance at {plural(count, 'call')}, first at "
            f"{moved[0] if moved else '?'}{later}"
        )
    if kind is ChangeKind.SETTINGS_CHANGED:
        # One sentence per call: its settings, and the parameters that follow from them.
        parameters = {
            c.position: c for c in diff.of_kind(ChangeKind.PARAMETERS_CHANGED) if c.new is not None
        }
        items = []
        for c in changes:
            if c.new is None:
                continue
            item = f"{c.new.name} ({c.new.module_type}): {c.detail}"
            along = parameters.get(c.position)
            if along is not None:
                item += f" ({_without_prefix(along.detail, c.new.path)})"
            items.append(item)
        return f"settings changed at {plural(count, 'call')}: " + _examples(items, separator="; ")
    if kind is ChangeKind.PARAMETERS_CHANGED:
        with_settings = {c.position for c in diff.of_kind(ChangeKind.SETTINGS_CHANGED)}
        changes = [c for c in changes if c.position not in with_settings or c.new is None]
        if not changes:
            return ""  # each was said with its call's settings
        said = count - len(changes)
        items = [
            f"{c.new.name} ({c.new.module_type}): {c.detail}"
            if c.new is not None
            else f"the model: {c.detail}"
            for c in changes
        ]
        with_them = f" ({said} with the settings above)" if said else ""
        return f"parameters changed at {plural(count, 'call')}{with_them}: " + _examples(
            items, separator="; "
        )
    if kind in (
        ChangeKind.SETTINGS_CHANGED,
        ChangeKind.PARAMETERS_CHANGED,
        ChangeKind.MODE_CHANGED,
    ):
        items = [
            f"{c.new.name} ({c.new.module_type}): {c.detail}"
            if c.new is not None
            else f"the model: {c.detail}"
            for c in changes
        ]
        return (
            f"{kind.value} at {plural(count, 'call' if kind is not ChangeKind.MODE_CHANGED else 'place')}: "
            + _examples(items, separator="; ")
        )
    items = [f"{called(c.new)} {c.detail}" for c in changes if c.new is not None]
    return f"{kind.value} at {plural(count, 'call')}: " + _examples(items)


def _without_prefix(detail: str, path: str) -> str:
    """`weight f32[...]` for `conv1.weight f32[...]` in a sentence already about conv1."""
    if not path or path == "<root>":
        return detail
    return detail.replace(f"{path}.", "")


def _describe_subtrees(diff: _Changes, changes: list[Change], kind: ChangeKind) -> str:
    """Group inserted, removed or moved calls under the outermost one:
    `layer2.se (SEBlock, with 5 nested calls) after layer2.3`."""
    lines = diff.new_lines if kind is ChangeKind.INSERTED else diff.old_lines
    renamed = {
        (change.old.name, change.new.name): change.old
        for change in diff.of_kind(ChangeKind.RENAMED)
        if change.old is not None and change.new is not None
    }
    items = []
    subtree_end = -1
    nested = 0
    root: Change | None = None
    for change in [*changes, None]:
        if change is not None and change.position is not None and change.position < subtree_end:
            nested += 1
            continue
        if root is not None and root.position is not None:
            line = lines[root.position]
            inner = f", with {plural(nested, 'nested call')}" if nested else ""
            item = f"{line.name} ({line.module_type}{inner}) {root.detail}"
            if kind is ChangeKind.MOVED and root.new is not None:
                partner = renamed.get((root.new.name, line.name))
                if partner is not None:
                    item += f", swapped with {called(partner)}"
            items.append(item)
        if change is None or change.position is None:
            break
        root, nested = change, 0
        subtree_end = _subtree_end(lines, change.position)
    return f"{plural(len(changes), 'call')} {kind.value}: " + _examples(items, separator="; ")


def _end_order(lines: list[GoldenLine]) -> list[int]:
    """Each call's place in the order the calls ended (a call ends after its nested calls)."""
    order = [0] * len(lines)
    open_calls: list[int] = []
    ended = 0
    for index, line in enumerate(lines):
        while open_calls and lines[open_calls[-1]].depth >= line.depth:
            order[open_calls.pop()] = ended
            ended += 1
        open_calls.append(index)
    while open_calls:
        order[open_calls.pop()] = ended
        ended += 1
    return order


def _subtree_end(lines: list[GoldenLine], index: int) -> int:
    depth = lines[index].depth
    end = index + 1
    while end < len(lines) and lines[end].depth > depth:
        end += 1
    return end


def _examples(items: list[str], separator: str = ", ") -> str:
    shown = separator.join(items[:_EXAMPLES])
    if len(items) > _EXAMPLES:
        shown += f" (+{len(items) - _EXAMPLES} more)"
    return shown
