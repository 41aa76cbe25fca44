"""The syrupy extension that stores a trace as its golden text, one readable file per snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from unicodedata import category
from urllib.parse import quote

from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from pytest_fwdorder.comparisons import note_comparison
from pytest_fwdorder.diff import diff_golden
from pytest_fwdorder.render import FORMAT_VERSION, format_version

if TYPE_CHECKING:
    from syrupy.location import PyTestLocation
    from syrupy.types import SnapshotIndex

# What syrupy drops from a file name: characters some file systems refuse, and control
# characters. Dropping them lets two ids share one file (`a/b` and `ab`); escaping does not.
_UNSAFE_IN_FILE_NAMES = frozenset('\\/?*:|"<>')
_LONGEST_FILE_NAME = 255


@runtime_checkable
class Renderable(Protocol):
    """Anything that renders itself as golden text, such as a `Trace`."""

    def render(self) -> str: ...


class TraceSnapshotExtension(SingleFileSnapshotExtension):
    """Writes `__snapshots__/<test file>/<test name>.fwdorder.txt`, and explains mismatches.

    A failed comparison starts with a summary of what changed (calls inserted, removed,
    renamed, types and shapes changed) before the line diff. Characters a file name cannot
    hold (`/` in a parametrize id, the `\\` of an escaped non-ASCII id) are written as `%XX`:
    `test_model[a/b]` is stored as `test_model[a%2Fb].fwdorder.txt`.
    """

    file_extension = "fwdorder.txt"
    _write_mode = WriteMode.TEXT

    def serialize(self, data: Any, **_: Any) -> str:
        if isinstance(data, str):
            return data
        if isinstance(data, Renderable):
            text = data.render()
            if isinstance(text, str):
                return text
            raise TypeError(
                f"TraceSnapshotExtension stores golden text, but {type(data).__name__}.render() "
                f"returned {type(text).__name__!r}: render() must return a str"
            )
        raise TypeError(
            f"TraceSnapshotExtension stores traces, got {type(data).__name__!r}: compare the "
            "result of forward_trace(...) or trace_forward(...) with the snapshot"
        )

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        yield from explain_mismatch(str(snapshot_data), str(serialized_data))

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        """The golden's file name without extension: the test's name, made safe for a file."""
        name = AbstractSyrupyExtension.get_snapshot_name(test_location=test_location, index=index)
        return _escape_file_name(name)[: cls._longest_stem()]

    @classmethod
    def matches_test_location(
        cls, *, test_location: PyTestLocation, snapshot_location: str
    ) -> bool:
        """Whether the golden at `snapshot_location` belongs to the test, escaped name or not."""
        if super().matches_test_location(
            test_location=test_location, snapshot_location=snapshot_location
        ):
            return True
        location = Path(snapshot_location)
        suffix = f".{cls.file_extension}"
        if (
            not test_location.is_item_parametrized
            or location.parent.name != test_location.basename
            or not location.name.endswith(suffix)
            or not test_location.matches_snapshot_site(snapshot_location)
        ):
            return False
        stem = location.name[: -len(suffix)]
        expected = _escape_file_name(test_location.snapshot_name_parametrized)
        return stem == expected[: cls._longest_stem()] or stem.startswith(
            (f"{expected}.", f"{expected}[")
        )

    @classmethod
    def _longest_stem(cls) -> int:
        return _LONGEST_FILE_NAME - len(f".{cls.file_extension}")


def _escape_file_name(name: str) -> str:
    """`name` with each character a file name cannot hold written as `%XX`: `a/b` -> `a%2Fb`.

    Names that need no escaping are left as they are, so existing golden files keep their
    names.
    """
    return "".join(
        quote(character, safe="")
        if character in _UNSAFE_IN_FILE_NAMES or category(character).startswith("C")
        else character
        for character in name
    )


def explain_mismatch(old_text: str, new_text: str) -> list[str]:
    """What changed from the golden text to the new one: summary, changed calls, header.

    A golden written in another format version is not compared line by line (every line
    would differ): one line says so and how to regenerate it.
    """
    old_version = format_version(old_text)
    if old_version != FORMAT_VERSION:
        written = f"format {old_version}" if old_version is not None else "an unknown format"
        return [
            f"the golden file was written in {written}; this pytest-fwdorder writes format "
            f"{FORMAT_VERSION}: regenerate it with `pytest --snapshot-update` and review the "
            "new golden (see the CHANGELOG for what the format adds)"
        ]
    return diff_golden(old_text, new_text).explanation()


def compare_with_snapshot(trace: Renderable, other: object) -> Any:
    """`trace == snapshot`: compare as golden text, whatever extension the snapshot has.

    A trace stored through another extension (the project's `--snapshot-default-extension`,
    a `snapshot` fixture that calls `use_extension`) would keep only its repr and pass when
    every shape changes, so any extension but this one (or a subclass) is replaced for this
    one assertion. Returns NotImplemented for anything that is not a syrupy snapshot, so
    Python falls back to the other operand's comparison.
    """
    if not isinstance(other, SnapshotAssertion):
        return NotImplemented
    if not isinstance(other.extension, TraceSnapshotExtension):
        other = other(extension_class=TraceSnapshotExtension)
    matched = bool(other == trace)
    note_comparison(other)  # for --fwdorder-report and --fwdorder-save-failed
    return matched


def headline(trace: object) -> str:
    """How a one-line message names a trace: its `headline()` where it has one (a `Trace`'s
    repr also shows its first calls), else its repr."""
    method = getattr(trace, "headline", None)
    return str(method()) if callable(method) else repr(trace)


def explain_snapshot_assertion(trace: Renderable, snapshot: object) -> list[str] | None:
    """The assertion message for a failed `trace == snapshot`, or None to let syrupy explain."""
    if not isinstance(snapshot, SnapshotAssertion) or snapshot.num_executions == 0:
        return None
    result = snapshot.executions.get(snapshot.num_executions - 1)
    if result is None or result.success or result.exception is not None:
        return None
    head = f"{headline(trace)} == snapshot {result.snapshot_name!r}"
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
