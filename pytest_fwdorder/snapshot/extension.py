"""The syrupy extension that stores a trace as its golden text, one readable file per snapshot."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from unicodedata import category
from urllib.parse import quote

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.location import PyTestLocation

from pytest_fwdorder.snapshot.kept_comparisons import note_comparison
from pytest_fwdorder.snapshot.update_summary import may_rewrite, not_rewritten_note

# The plugin imports this module at every pytest start-up; the golden format (policy.py,
# golden/upgrades.py) is imported by the methods that compare a golden, when one is.

if TYPE_CHECKING:
    from syrupy.types import SnapshotIndex

    from pytest_fwdorder.calls.facet_records import Facet

# What syrupy drops from a file name: characters some file systems refuse, and control
# characters. Dropping them lets two ids share one file (`a/b` and `ab`); escaping does not.
# `%` too, so that an id that already reads `a%2Fb` does not share the file of `a/b`.
_UNSAFE_IN_FILE_NAMES = frozenset('\\/?*:|"<>%')
_LONGEST_FILE_NAME = 255
_HASH_LENGTH = 8  # the hex digits of the hash that ends a cut name: `...~1a2b3c4d`
# Which test claimed each golden file of the session, by the file's case-folded path.
_CLAIMED_KEY = pytest.StashKey[dict[tuple[str, str], tuple[str, str]]]()


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
    # The trace's own facets (a values facet with its tolerance), kept by `serialize` for
    # the `matches` and `diff_lines` of the same assertion; None for the registered ones.
    facets: tuple[Facet, ...] | None = None

    def serialize(self, data: Any, **_: Any) -> str:
        if isinstance(data, str):
            return data
        if isinstance(data, Renderable):
            facets = getattr(data, "facets", None)
            if facets is not None:
                self.facets = tuple(facets)
            text = data.render()
            if isinstance(text, str):
                from pytest_fwdorder.golden.upgrades import with_environment

                return with_environment(text)
            raise TypeError(
                f"TraceSnapshotExtension stores golden text, but {type(data).__name__}.render() "
                f"returned {type(text).__name__!r}: render() must return a str"
            )
        raise TypeError(
            f"TraceSnapshotExtension stores traces, got {type(data).__name__!r}: compare the "
            "result of forward_trace(...) or trace_forward(...) with the snapshot"
        )

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        """Whether the golden holds this trace, by the comparison policy (snapshot/policy.py)."""
        from pytest_fwdorder.snapshot.policy import golden_holds

        return golden_holds(str(snapshot_data), str(serialized_data), facets=self.facets)

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        from pytest_fwdorder.snapshot.policy import explain_mismatch

        yield from explain_mismatch(str(snapshot_data), str(serialized_data), facets=self.facets)

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        """The golden's file name without extension: the test's name, made safe for a file."""
        name = AbstractSyrupyExtension.get_snapshot_name(test_location=test_location, index=index)
        stem = cls._file_stem(_escape_file_name(name))
        _claim_golden(test_location, f"{stem}.{cls.file_extension}")
        return stem

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
        return stem == cls._file_stem(expected) or stem.startswith((f"{expected}.", f"{expected}["))

    @classmethod
    def writes_golden(cls, *, test_location: PyTestLocation, snapshot_location: str) -> bool:
        """Whether the test writes the golden at `snapshot_location`: one of its own names.

        Narrower than `matches_test_location`, which syrupy asks to find a test's goldens
        and which takes every file of the module's folder for a test that is not
        parametrized: a golden held back for such a test must be its own (`test_head`, or
        `test_head.1` for its second assertion), not an obsolete one beside it.
        """
        if not cls.matches_test_location(
            test_location=test_location, snapshot_location=snapshot_location
        ):
            return False
        if test_location.is_item_parametrized:
            return True
        name = Path(snapshot_location).name
        stem = name.removesuffix(f".{cls.file_extension}")
        expected = _escape_file_name(test_location.snapshot_name)
        if stem == cls._file_stem(expected) or stem.startswith(f"{expected}."):
            return True
        # A name cut to fit (`_file_stem`) keeps its start: hold any golden cut from it.
        cut = _LONGEST_FILE_NAME - len(f".{cls.file_extension}") - _HASH_LENGTH - 1
        return len(name) == _LONGEST_FILE_NAME and stem.startswith(expected[:cut])

    @classmethod
    def _file_stem(cls, escaped_name: str) -> str:
        """The escaped name, cut to fit a file name with a hash of all of it at the end, so
        that two long names that differ only past the cut keep two files."""
        longest = _LONGEST_FILE_NAME - len(f".{cls.file_extension}")
        if len(escaped_name) <= longest:
            return escaped_name
        digest = hashlib.sha256(escaped_name.encode()).hexdigest()[:_HASH_LENGTH]
        return f"{escaped_name[: longest - _HASH_LENGTH - 1]}~{digest}"


def _claim_golden(test_location: PyTestLocation, file_name: str) -> None:
    """Raise ValueError when another test of this session already writes `file_name`, also
    where the names differ only in case (one file on macOS and Windows)."""
    item = test_location.item
    claimed = item.config.stash.setdefault(_CLAIMED_KEY, {})
    key = (str(Path(test_location.filepath).with_suffix("")), file_name.casefold())
    owner, owned_name = claimed.setdefault(key, (item.nodeid, file_name))
    if owner != item.nodeid:
        where = " on file systems that ignore case (macOS, Windows)"
        raise ValueError(
            f"the tests {owner!r} and {item.nodeid!r} would share the golden file "
            f"{file_name!r}{where if owned_name != file_name else ''}: give one of them "
            "another name or parametrize id"
        )


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
    update = other.update_snapshots
    # --fwdorder-update-only: a golden it leaves out is compared, never written, so a
    # change to it fails its test as without --snapshot-update.
    other.update_snapshots = update and may_rewrite(other.test_location.item.config, other)
    try:
        matched = bool(SnapshotAssertion.__eq__(other, trace))  # syrupy's own, not ours below
    finally:
        other.update_snapshots = update
    facets = getattr(trace, "facets", None)
    # for --fwdorder-report, --fwdorder-save-failed and CI reports
    note_comparison(other, None if facets is None else tuple(facets))
    return matched


class TraceAwareSnapshotAssertion(SnapshotAssertion):
    """A `snapshot` that compares a trace as `trace == snapshot` does, in either order.

    `snapshot == trace` asks the snapshot first, which would store a dump of the trace's
    internals through the default extension.
    """

    __hash__ = SnapshotAssertion.__hash__

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Renderable) and not isinstance(other, SnapshotAssertion):
            return bool(compare_with_snapshot(other, self))
        return super().__eq__(other)


def make_trace_aware(snapshot: object) -> None:
    """Let the `snapshot` fixture's value compare traces in either order."""
    if type(snapshot) is SnapshotAssertion:
        snapshot.__class__ = TraceAwareSnapshotAssertion


def headline(trace: object) -> str:
    """How a one-line message names a trace: its `headline()` where it has one (a `Trace`'s
    repr also shows its first calls), else its repr."""
    method = getattr(trace, "headline", None)
    return str(method()) if callable(method) else repr(trace)


def explain_snapshot_assertion(
    trace: Renderable, snapshot: object, root: Path | None = None
) -> list[str] | None:
    """The assertion message for a failed `trace == snapshot`, or None to let syrupy explain."""
    if not isinstance(snapshot, SnapshotAssertion) or snapshot.num_executions == 0:
        return None
    result = snapshot.executions.get(snapshot.num_executions - 1)
    if result is None or result.success or result.exception is not None:
        return None
    head = f"{headline(trace)} == snapshot {result.snapshot_name!r}"
    note = not_rewritten_note(result.test_location.item.config, result.snapshot_location)
    if result.recalled_data is None:
        return [
            head,
            f"Snapshot {result.snapshot_name!r} does not exist!",
            note or "Run `pytest --snapshot-update` to write it, then review the new golden file.",
        ]
    new_text = str(result.asserted_data) if result.asserted_data is not None else trace.render()
    from pytest_fwdorder.snapshot.policy import explain_mismatch

    lines = explain_mismatch(
        str(result.recalled_data),
        new_text,
        _relative(result.snapshot_location, root),
        facets=getattr(trace, "facets", None),
    )
    if note is not None:  # first, where pytest's shortened message still shows it
        return [head, note, *lines]
    return [
        head,
        *lines,
        "",
        "If the change is intended, accept it with `pytest --snapshot-update`.",
    ]


def _relative(location: str, root: Path | None) -> str:
    """The golden's path relative to `root` where it lies under it, else as it is."""
    path = Path(location)
    if root is not None and path.is_relative_to(root):
        return str(path.relative_to(root))
    return location
