"""The syrupy extension that stores a trace as its golden text, one readable file per snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.amber import AmberSnapshotExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from pytest_fwdorder.diff import diff_golden
from pytest_fwdorder.trace import Trace


class TraceSnapshotExtension(SingleFileSnapshotExtension):
    """Writes `__snapshots__/<test file>/<test name>.fwdorder.txt`, and explains mismatches.

    A failed comparison starts with a summary of what changed (calls inserted, removed,
    renamed, types and shapes changed) before the line diff.
    """

    file_extension = "fwdorder.txt"
    _write_mode = WriteMode.TEXT

    def serialize(self, data: Any, **_: Any) -> str:
        if isinstance(data, Trace):
            return data.render()
        if isinstance(data, str):
            return data
        raise TypeError(
            f"TraceSnapshotExtension stores traces, got {type(data).__name__!r}: compare the "
            "result of forward_trace(...) or trace_forward(...) with the snapshot"
        )

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        yield from explain_mismatch(str(snapshot_data), str(serialized_data))


def explain_mismatch(old_text: str, new_text: str) -> list[str]:
    """Summary of what changed from the golden text to the new one, then the aligned lines."""
    difference = diff_golden(old_text, new_text)
    return [*difference.summary().splitlines(), "", *difference.body()]


def compare_with_snapshot(trace: Trace, other: object) -> Any:
    """`trace == snapshot`: compare through the trace extension unless the test chose another.

    Returns NotImplemented for anything that is not a syrupy snapshot, so Python falls back
    to the other operand's comparison.
    """
    if not isinstance(other, SnapshotAssertion):
        return NotImplemented
    if type(other.extension) is AmberSnapshotExtension:
        other = other(extension_class=TraceSnapshotExtension)
    return bool(other == trace)


def explain_snapshot_assertion(trace: Trace, snapshot: object) -> list[str] | None:
    """The assertion message for a failed `trace == snapshot`, or None to let syrupy explain."""
    if not isinstance(snapshot, SnapshotAssertion) or snapshot.num_executions == 0:
        return None
    result = snapshot.executions.get(snapshot.num_executions - 1)
    if result is None or result.success or result.exception is not None:
        return None
    head = f"{trace!r} == snapshot {result.snapshot_name!r}"
    if result.recalled_data is None:
        return [
            head,
            f"Snapshot {result.snapshot_name!r} does not exist!",
            "Run `pytest --snapshot-update` to write it, then review the new golden file.",
        ]
    new_text = str(result.asserted_data) if result.asserted_data is not None else trace.render()
    lines = explain_mismatch(str(result.recalled_data), new_text)
    return [
        head,
        *lines,
        "",
        "If the change is intended, accept it with `pytest --snapshot-update`.",
    ]
