"""A recorded reference kept with a test's goldens: written and updated by `--snapshot-update`,
read back otherwise, and cleaned up by syrupy with the test's other snapshots."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from pytest_fwdorder.checks.parity_reference import Reference, reference_from_bytes
from pytest_fwdorder.errors import ReferenceMismatchError


class ReferenceSnapshotExtension(SingleFileSnapshotExtension):
    """Stores a `Reference` as `__snapshots__/<test file>/<test name>.reference.safetensors`."""

    file_extension = "reference.safetensors"
    _write_mode = WriteMode.BINARY

    def serialize(self, data: Any, **_: Any) -> bytes:
        return _stored_reference(self, data).to_bytes()


class ReferenceTextSnapshotExtension(SingleFileSnapshotExtension):
    """Stores the text of a `Reference` beside it, `<test name>.reference.txt`, for review."""

    file_extension = "reference.txt"
    _write_mode = WriteMode.TEXT

    def serialize(self, data: Any, **_: Any) -> str:
        return _stored_reference(self, data).text()


def _stored_reference(extension: SingleFileSnapshotExtension, data: Any) -> Reference:
    """`data`, which an extension of a reference's files stores; TypeError when it is not
    a `Reference`, naming the extension."""
    if not isinstance(data, Reference):
        raise TypeError(
            f"{type(extension).__name__} stores a Reference, got {type(data).__name__!r}: "
            "pass what record_reference returns"
        )
    return data


def reference_snapshot(snapshot: SnapshotAssertion, record: Callable[[], Reference]) -> Reference:
    """The test's recorded reference, kept beside its goldens.

    With `--snapshot-update`, calls `record()` (say `lambda: record_reference(build(), ids,
    weights=True)`) and writes the tensor file and its text under `__snapshots__/<test
    file>/<test name>.reference.safetensors` and `.reference.txt`; otherwise reads them and
    never calls `record`, so a run without the reference's framework, release or device can
    compare with it. syrupy deletes both with the test's other snapshots when the test is
    gone. Raises ReferenceMismatchError when no reference was recorded for this test yet.
    """
    __tracebackhide__ = True
    tensors = snapshot.use_extension(ReferenceSnapshotExtension)
    text = snapshot.use_extension(ReferenceTextSnapshotExtension)
    location = Path(
        tensors.extension.get_location(test_location=tensors.test_location, index=tensors.index)
    )
    if tensors.update_snapshots:
        reference = record()
        if not isinstance(reference, Reference):
            raise TypeError(
                f"reference_snapshot's record() returned {type(reference).__name__!r}: return "
                "what record_reference returns"
            )
    elif location.is_file():
        reference = reference_from_bytes(location.read_bytes(), source=str(location))
    else:
        raise ReferenceMismatchError(
            f"no reference recorded for this test at {str(location)!r}: run pytest "
            "--snapshot-update where record() can build the reference model"
        )
    # Both assertions pass in a plain run (the data is what was read) and mark the files as
    # used, so syrupy keeps them; with --snapshot-update they write them. syrupy's own
    # comparison: the plugin's `snapshot` would take anything with a render() as a trace.
    if not (
        SnapshotAssertion.__eq__(tensors, reference) and SnapshotAssertion.__eq__(text, reference)
    ):
        raise ReferenceMismatchError(
            f"the reference text beside {str(location)!r} does not match its tensor file: "
            "run pytest --snapshot-update to write both again"
        )
    return dataclasses.replace(reference, path=location)
