"""Trace -> golden text, and golden text -> lines: the one owner of the golden format.

Pure functions, no torch. A golden file is a header of `#` lines with totals, then one line
per call in execution order, indented two spaces per nesting level:

    layer1.0.relu: ReLU #2 (f32[1,64,56,56]) -> f32[1,64,56,56]

path, class, which call of that module it is (only for modules called more than once),
`[frozen]` for modules whose own parameters all have requires_grad=False, `[unregistered]`
for modules not registered under the model, `[scripted]` for TorchScript submodules (one
call; what runs inside them is invisible to hooks), inputs (positional, then keyword) and output. No running index numbers, ids, addresses or timings: inserting one
call changes one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_fwdorder.records import (
    Call,
    LiteralDescription,
    MappingDescription,
    ObjectDescription,
    SequenceDescription,
    TensorDescription,
    TraceRecords,
    ValueDescription,
)

FORMAT_LINE = "# pytest-fwdorder trace (format 1)"
# One tensor in inputs or outputs text: dtype and comma-separated sizes, `f32[1,3,224,224]`.
TENSOR_PATTERN = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\]")
UNREGISTERED_MARK = "[unregistered]"
FROZEN_MARK = "[frozen]"
SCRIPTED_MARK = "[scripted]"
RAISED = "raised"
_LISTED_IN_HEADER = 200


@dataclass(frozen=True, slots=True)
class GoldenLine:
    """One call line of a golden file, split into its parts."""

    depth: int
    path: str
    module_type: str
    nth: int
    registered: bool
    inputs: str
    outputs: str
    text: str
    frozen: bool = False
    reused: bool = False  # the module is called more than once, so the line shows `#nth`
    scripted: bool = False

    @property
    def name(self) -> str:
        """The call as the golden line names it: `layer1.0.relu #2`, or `conv1`."""
        name = self.path or self.module_type  # no path when a comparison ignores paths
        return f"{name} #{self.nth}" if self.reused else name

    @property
    def identity(self) -> tuple[str, int]:
        """Which call this is, independent of what it was given: (path, nth)."""
        return (self.path, self.nth)


def render_value(value: ValueDescription | None, devices: bool = False) -> str:
    """One described value as golden text: `f32[1,3,224,224]`, `(f32[2], None)`, `{'a': i64[]}`."""
    if isinstance(value, TensorDescription):
        text = f"{value.dtype}[{','.join(map(str, value.shape))}]"
        return f"{text}@{value.device}" if devices else text
    if isinstance(value, LiteralDescription):
        return value.text
    if isinstance(value, SequenceDescription):
        items = ", ".join(render_value(item, devices) for item in value.items)
        if value.kind == "list":
            return f"[{items}]"
        return f"({items},)" if len(value.items) == 1 else f"({items})"
    if isinstance(value, MappingDescription):
        items = ", ".join(f"{key}: {render_value(item, devices)}" for key, item in value.items)
        prefix = "" if value.type_name == "dict" else value.type_name
        return f"{prefix}{{{items}}}"
    if isinstance(value, ObjectDescription):
        fields = ", ".join(f"{name}={render_value(item, devices)}" for name, item in value.fields)
        return f"{value.type_name}({fields})"
    return "?"  # a call still running has no output yet


def render_inputs(call: Call, devices: bool = False) -> str:
    """Positional then keyword arguments, in parentheses."""
    parts = [render_value(value, devices) for value in call.args]
    parts.extend(f"{name}={render_value(value, devices)}" for name, value in call.kwargs)
    return f"({', '.join(parts)})"


def render_outputs(call: Call, devices: bool = False) -> str:
    return RAISED if call.raised else render_value(call.output, devices)


def make_line(
    *,
    depth: int,
    path: str,
    module_type: str,
    nth: int,
    reused: bool,
    frozen: bool,
    registered: bool,
    inputs: str,
    outputs: str,
    scripted: bool = False,
) -> GoldenLine:
    """A call line and its text; an empty `path` (a comparison ignoring paths) shows no path."""
    head = f"{'  ' * depth}{path + ': ' if path else ''}{module_type}"
    if reused:
        head += f" #{nth}"
    if frozen:
        head += f" {FROZEN_MARK}"
    if not registered:
        head += f" {UNREGISTERED_MARK}"
    if scripted:
        head += f" {SCRIPTED_MARK}"
    return GoldenLine(
        depth=depth,
        path=path,
        module_type=module_type,
        nth=nth,
        registered=registered,
        inputs=inputs,
        outputs=outputs,
        text=f"{head} {inputs} -> {outputs}",
        frozen=frozen,
        reused=reused,
        scripted=scripted,
    )


def golden_lines(trace: TraceRecords) -> list[GoldenLine]:
    """The call lines of a trace's golden text, in order."""
    devices = trace.options.devices
    counts = trace.counts()
    return [
        make_line(
            depth=call.depth,
            path=call.display_path,
            module_type=call.module_type,
            nth=call.nth,
            reused=counts[call.path] > 1,
            frozen=call.frozen,
            registered=call.registered,
            inputs=render_inputs(call, devices),
            outputs=render_outputs(call, devices),
            scripted=call.scripted,
        )
        for call in trace.calls
    ]


def render_header(trace: TraceRecords) -> list[str]:
    """The `#` lines above the calls: totals, reuse, unused and unregistered modules."""
    counts = trace.counts()
    reused = [(path, count) for path, count in counts.items() if count > 1]
    unused = trace.unused()
    unregistered = list(dict.fromkeys(call.display_path for call in trace.unregistered()))
    header = [
        FORMAT_LINE,
        f"# model: {trace.root_type}",
        f"# calls: {len(trace.calls)}",
        f"# modules called: {len(counts)}",
    ]
    header += _section(
        "called more than once", [f"{path or '<root>'} x{count}" for path, count in reused]
    )
    header += _section("registered but never called", [path or "<root>" for path in unused])
    header += _section("called but not registered under the model", unregistered)
    aliased = [f"{path or '<root>'} = {', '.join(names)}" for path, names in trace.aliases.items()]
    if aliased:
        header += _section("registered under several names", aliased)
    if trace.options.devices:
        header.append("# devices: shown")
    return header


def _section(title: str, items: list[str]) -> list[str]:
    lines = [f"# {title} ({len(items)})" + (":" if items else "")]
    lines.extend(f"#   {item}" for item in items[:_LISTED_IN_HEADER])
    if len(items) > _LISTED_IN_HEADER:
        lines.append(f"#   ... {len(items) - _LISTED_IN_HEADER} more")
    return lines


def render_trace(trace: TraceRecords) -> str:
    """The whole golden text of a trace, ending with a newline."""
    body = [line.text for line in golden_lines(trace)]
    return "\n".join([*render_header(trace), *body]) + "\n"


def parse_golden(text: str) -> tuple[list[str], list[GoldenLine]]:
    """Split golden text into its header lines and its call lines.

    Lines that do not parse as calls (a hand-edited file) are kept as calls of type `?`
    so that a diff still shows them.
    """
    header: list[str] = []
    lines: list[GoldenLine] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw.startswith("#"):
            header.append(raw)
            continue
        lines.append(parse_call_line(raw))
    return header, lines


def parse_call_line(raw: str) -> GoldenLine:
    """Parse one call line as `golden_lines` writes it."""
    stripped = raw.lstrip(" ")
    depth = (len(raw) - len(stripped)) // 2
    path, separator, rest = stripped.partition(": ")
    open_paren = rest.find(" (")
    if not separator or open_paren < 0:
        return GoldenLine(depth, stripped, "?", 1, True, "", "", raw)
    head, signature = rest[:open_paren], rest[open_paren + 1 :]
    words = head.split(" ")
    module_type, nth, registered, frozen, reused, scripted = words[0], 1, True, False, False, False
    for word in words[1:]:
        if word.startswith("#") and word[1:].isdigit():
            nth, reused = int(word[1:]), True
        elif word == UNREGISTERED_MARK:
            registered = False
        elif word == FROZEN_MARK:
            frozen = True
        elif word == SCRIPTED_MARK:
            scripted = True
    close = _matching_close(signature)
    inputs = signature[: close + 1]
    outputs = signature[close + 1 :].removeprefix(" -> ")
    return GoldenLine(
        depth, path, module_type, nth, registered, inputs, outputs, raw, frozen, reused, scripted
    )


def _matching_close(text: str) -> int:
    """Index of the bracket that closes the one at text[0], skipping quoted strings."""
    level = 0
    quote = ""
    index = 0
    while index < len(text):
        character = text[index]
        if quote:
            if character == "\\":
                index += 1
            elif character == quote:
                quote = ""
        elif character in "'\"":
            quote = character
        elif character in "([{":
            level += 1
        elif character in ")]}":
            level -= 1
            if level == 0:
                return index
        index += 1
    return len(text) - 1
