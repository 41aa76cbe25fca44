"""The torch-level operations each module's forward calls directly (`ops=True`): the one owner
of the facet, behind the protocol.

One module holds the facet (`WatchedTraceFacet`, calls/facet_records.py): its option, how it
watches a trace (`OperationsWatcher`, which records through operation_capture.py's function
mode), the golden lines it writes (a line under each call per operation, in the order they
ran among the calls, and the header's count) and how they are read back into typed values
(`OperationLine`, `OperationCount`). It is registered as a built-in plugin
(`hookspecs.BUILTIN_PLUGINS`), so the trace and the golden reach it through the
`pytest_fwdorder_facets` hook and never name it. No torch here: the capture is imported
only when a trace asks for operations.

    # operations: 4 recorded (left out: conversions, torch_modules, views)
    ...
      block.fc: Linear (f32[2,8]) -> f32[2,8]
      ~ relu(f32[2,8]) -> f32[2,8]

The trace keeps what was recorded where the public API gives it too: `Call.operations`,
`Trace.operations`, `Trace.operations_skipped` and `Trace.parameter_uses`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, NamedTuple

from pytest_fwdorder.calls.call_line_facets import LineUnderCall
from pytest_fwdorder.calls.change_kinds import FacetChangeKind
from pytest_fwdorder.golden.figures import listed
from pytest_fwdorder.golden.format import RAISED, render_value
from pytest_fwdorder.hookspecs import hookimpl

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import nn

    from pytest_fwdorder.calls.facet_records import Operation, TraceFacet
    from pytest_fwdorder.calls.records import TraceRecords
    from pytest_fwdorder.calls.value_descriptions import ValueDescription
    from pytest_fwdorder.facets.operation_capture import OperationMode
    from pytest_fwdorder.options import TraceOptions
    from pytest_fwdorder.recording.recorder import Recorder

TITLE = "operations"
# The header line: `# operations: 4 recorded (left out: conversions, torch_modules, views)`.
_COUNT_LINE = re.compile(r"# operations: ([0-9]+) recorded \(left out: (.*)\)")


class OperationLine(str):
    """An operation line's text after its mark, `softmax(f32[2,4], -1) -> f32[2,4]`, with its
    parts read once: `name` (`softmax`), `arguments` (`(f32[2,4], -1)`) and `output`."""

    name: str
    arguments: str
    output: str

    def __new__(cls, text: str) -> OperationLine:
        line = super().__new__(cls, text)
        name, _, rest = text.partition("(")
        arguments, _, output = rest.rpartition(") -> ")
        line.name, line.arguments, line.output = name, f"({arguments})", output
        return line


class OperationCount(NamedTuple):
    """The header's count as a golden gives it: operations recorded, and what was left out."""

    recorded: int
    skipped: tuple[str, ...]


def render_operation(
    operation: Operation, text_of: Callable[[ValueDescription | None], str] = render_value
) -> str:
    """An operation as its golden line shows it: `linear(f32[2,8], fc.weight) -> f32[2,16]`.

    Arguments as they were given, positional then keyword; model parameters and buffers by
    their full names.
    """
    parts = [text_of(value) for value in operation.args]
    parts.extend(f"{name}={text_of(value)}" for name, value in operation.kwargs)
    output = RAISED if operation.raised else text_of(operation.output)
    return f"{operation.name}({', '.join(parts)}) -> {output}"


class OperationsFacet:
    """Operations as a facet with one value per trace: the count the header gives, recorded
    while the trace runs, with each call's `Operation`s given to it when the trace ends;
    written as a line under its call per operation, read back as `OperationLine`s."""

    title = TITLE
    change_words = "operations changed"
    option = "ops"
    line_mark = "~ "
    # The kinds of change `line_changes` gives, each counted under its name by a diff.
    change_kinds = tuple(
        FacetChangeKind("operation", verb, f"with operations {verb}")
        for verb in ("changed", "inserted", "removed")
    )

    def watcher(self, options: TraceOptions) -> OperationsWatcher:
        return OperationsWatcher(options.ops_skip)

    def header_lines(self, value: OperationCount) -> list[str]:
        return []  # its count goes with what the trace recorded besides calls (`summary_lines`)

    def summary_lines(self, value: OperationCount) -> list[str]:
        left_out = ", ".join(value.skipped) or "nothing"
        return [f"# operations: {value.recorded} recorded (left out: {left_out})"]

    def call_lines(
        self,
        value: OperationCount,
        trace: TraceRecords,
        text_of: Callable[[ValueDescription | None], str],
    ) -> list[LineUnderCall]:
        """One line per operation, in the order they ran."""
        return [
            LineUnderCall(
                operation.call_index, operation.after, render_operation(operation, text_of)
            )
            for operation in trace.operations
        ]

    def read_call_line(self, text: str) -> OperationLine:
        return OperationLine(text)

    def line_changes(
        self, old: Sequence[OperationLine], new: Sequence[OperationLine]
    ) -> list[tuple[str, str]]:
        """One (change kind, detail) per operation changed, inserted or removed in a call's
        forward; the detail says where: `op 3 of 7: relu -> gelu` (numbers in the new call,
        or the old one for a removed operation)."""
        from pytest_fwdorder.diff.ordered_pairing import changed_runs

        found: list[tuple[str, str]] = []
        for tag, old_start, old_end, new_start, new_end in changed_runs(old, new):
            paired = min(old_end - old_start, new_end - new_start) if tag == "replace" else 0
            for offset in range(paired):
                where = f"op {new_start + offset + 1} of {len(new)}"
                change = _describe_change(old[old_start + offset], new[new_start + offset])
                found.append(("operation changed", f"{where}: {change}"))
            for index in range(new_start + paired, new_end):
                found.append(
                    ("operation inserted", f"{new[index].name} (op {index + 1} of {len(new)})")
                )
            for index in range(old_start + paired, old_end):
                found.append(
                    ("operation removed", f"{old[index].name} (op {index + 1} of {len(old)})")
                )
        return found

    def describe_kind_changes(self, kind: str, changes: Sequence[tuple[str, str]]) -> str:
        """The summary's line for the changes of one kind (`line_changes`), from (the call,
        detail) each: `operation changed in <root> (op 1 of 2): relu -> gelu`, `2 operations
        changed: in a (...); in b (...)`, `2 operations inserted in <root>: softmax (op 2 of
        4), mul (op 3 of 4)`, the calls one after the other."""
        if kind == "operation changed":
            items = [f"in {call} ({detail.replace(': ', '): ', 1)}" for call, detail in changes]
            if len(items) == 1:
                return f"operation changed {items[0]}"
            return f"{len(items)} operations changed: " + listed(items, separator="; ")
        by_call: dict[str, list[str]] = {}
        for call, detail in changes:
            by_call.setdefault(call, []).append(detail)
        verb = kind.removeprefix("operation ")
        per_call = [
            f"{len(details)} operation{'s' if len(details) != 1 else ''} {verb} in {call}: "
            + ", ".join(details)
            for call, details in by_call.items()
        ]
        return listed(per_call, separator="; ")

    def picture_label(self, value: OperationLine) -> str:
        """What a picture's node shows of an operation: `relu -> f32[2,16]`."""
        return f"{value.name} -> {value.output}"

    def read_header(self, header: Sequence[str]) -> OperationCount | None:
        """The header's count; None for a golden recorded without operations."""
        for line in header:
            match = _COUNT_LINE.fullmatch(line)
            if match is not None:
                left_out = match.group(2)
                skipped = () if left_out == "nothing" else tuple(left_out.split(", "))
                return OperationCount(int(match.group(1)), skipped)
        return None

    def describe_changes(self, old: OperationCount, new: OperationCount) -> list[str]:
        # The count is compared as a header line, and each call's operations as its lines.
        return []


def _describe_change(old: OperationLine, new: OperationLine) -> str:
    """`relu -> gelu`, or `softmax input (f32[2,4], -1) -> (f32[2,4], 1)`."""
    from pytest_fwdorder.diff.change_details import describe_value_change

    if old.name != new.name:
        return f"{old.name} -> {new.name}"
    if old.arguments != new.arguments:
        return f"{new.name} input {describe_value_change(old.arguments, new.arguments)}"
    return f"{new.name} output {describe_value_change(old.output, new.output)}"


OPERATIONS = OperationsFacet()


@hookimpl
def pytest_fwdorder_facets() -> list[TraceFacet]:
    """The operations facet."""
    return [OPERATIONS]


class OperationsWatcher:
    """Records the operations each call's forward makes while a trace runs, and gives them
    to the trace when it ends (a `TraceWatcher`, calls/facet_records.py)."""

    def __init__(self, skipped: tuple[str, ...]) -> None:
        self.skipped = skipped
        self.modes: list[OperationMode] = []
        self.count: OperationCount | None = None

    def watching(self) -> nullcontext[None]:
        return nullcontext()

    def started(self, recorder: Recorder) -> None:
        pass  # the recording starts inside the recorder's (`recording`)

    @contextmanager
    def recording(self, recorder: Recorder, root: nn.Module) -> Iterator[None]:
        """Record operations into the recorder's open calls for the length of the block.
        torch only now."""
        from pytest_fwdorder.facets.operation_capture import operations_recorded

        with operations_recorded(recorder, root, self.skipped) as mode:
            self.modes.append(mode)
            yield

    def trace_ended(self, trace: TraceRecords) -> None:
        """Give the finished trace its operations and parameter uses."""
        from pytest_fwdorder.facets.operation_capture import attach_operations

        for mode in self.modes:
            attach_operations(trace, mode)
        if trace.operations_skipped is not None:
            self.count = OperationCount(len(trace.operations), trace.operations_skipped)

    def value(self) -> OperationCount | None:
        return self.count
