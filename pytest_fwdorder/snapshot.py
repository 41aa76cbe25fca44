"""The syrupy extension that stores a trace as its golden text, one readable file per snapshot."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from unicodedata import category
from urllib.parse import quote

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.location import PyTestLocation
from syrupy.session import ItemStatus

from pytest_fwdorder.diff import diff_golden
from pytest_fwdorder.fingerprint_tolerance import (
    DEFAULT_TOLERANCE,
    Tolerance,
    within_tolerance,
)
from pytest_fwdorder.golden_comparisons import note_comparison
from pytest_fwdorder.render import declared_and_written_calls, format_problem
from pytest_fwdorder.update_review import may_rewrite, not_rewritten_note
from pytest_fwdorder.upgrades import (
    UpgradeDifferences,
    comparable_text,
    same_model,
    upgrade_differences,
    with_environment,
    without_environment,
)

if TYPE_CHECKING:
    from syrupy.types import SnapshotIndex

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
    # How far output fingerprints may move (`values=True`): the trace's own tolerance, kept
    # by `serialize` for the `matches` and `diff_lines` of the same assertion.
    values_tolerance: Tolerance = DEFAULT_TOLERANCE

    def serialize(self, data: Any, **_: Any) -> str:
        if isinstance(data, str):
            return data
        if isinstance(data, Renderable):
            tolerance = getattr(data, "values_tolerance", None)
            if tolerance is not None:
                self.values_tolerance = tolerance
            text = data.render()
            if isinstance(text, str):
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
        """Whether the golden holds this trace, leaving out what an upgrade changes alone
        (the environment line, and torch.nn settings at this torch's defaults: upgrades.py)
        and output fingerprints that moved within the tolerance (fingerprint_tolerance.py)."""
        old_text = str(snapshot_data)
        new_text = within_tolerance(old_text, str(serialized_data), self.values_tolerance)
        return same_model(old_text, new_text)

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        yield from explain_mismatch(
            str(snapshot_data), str(serialized_data), tolerance=self.values_tolerance
        )

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


def explain_mismatch(
    old_text: str,
    new_text: str,
    golden_name: str | None = None,
    *,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
) -> list[str]:
    """What changed from the golden text to the new one: summary, changed calls, header.

    A golden that cannot be compared line by line (merge-conflict markers, another format,
    cut off, or different only in whitespace) gets one line saying so and what to do.
    `golden_name` names the file in that line. When the golden was written with other
    torch releases, or differs also in what an upgrade changes alone, the first lines say
    so, and the diff leaves those differences out; so it does for output fingerprints that
    moved within `tolerance`.
    """
    upgrades = upgrade_differences(old_text, new_text)
    old_text, new_text = comparable_texts(old_text, new_text, upgrades, tolerance=tolerance)
    problem = golden_problem(old_text, new_text)
    if problem is None:
        return [*upgrades.notes(), *diff_golden(old_text, new_text).explanation()]
    named = f"the golden file {golden_name!r}" if golden_name else "the golden file"
    return [f"{named} {problem}"]


def comparable_texts(
    old_text: str,
    new_text: str,
    upgrades: UpgradeDifferences | None = None,
    *,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
) -> tuple[str, str]:
    """The golden and new texts as `explain_mismatch` diffs them: without the environment
    line, without torch.nn settings at their defaults where those differ, and with the new
    text's fingerprints that match the golden's within `tolerance` written as the golden's."""
    new_text = within_tolerance(old_text, new_text, tolerance)
    if upgrades is None:
        upgrades = upgrade_differences(old_text, new_text)
    if upgrades.settings_lines:
        return comparable_text(old_text), comparable_text(new_text)
    return without_environment(old_text), without_environment(new_text)


def golden_problem(old_text: str, new_text: str) -> str | None:
    """Why the golden text cannot be diffed with the new text, or None when it can."""
    problem = conflict_problem(old_text) or format_problem(old_text)
    if problem is not None:
        return problem
    if _line_ends_trimmed(old_text) == _line_ends_trimmed(new_text):
        return (
            "differs from the new trace only in whitespace at line ends (a trailing space or "
            "the final newline, often trimmed by an editor): rewrite it with `pytest "
            "--snapshot-update`, and keep your editor from trimming *.fwdorder.txt files"
        )
    declared, written_calls = declared_and_written_calls(old_text)
    if declared is not None and written_calls != declared:
        cause = (
            "it looks cut off (a half-written or truncated file), or the count was edited"
            if written_calls < declared
            else "the count or the body was edited by hand"
        )
        return (
            f"does not add up: its header says '# calls: {declared}' but the body holds "
            f"{written_calls} call(s); {cause}: restore it from version control, or rewrite "
            "it with `pytest --snapshot-update` and review the new golden"
        )
    return None


def conflict_problem(text: str) -> str | None:
    """The clause saying a golden holds merge-conflict markers (after `the golden file`),
    or None: pytest and the command line say the same."""
    if not has_conflict_markers(text):
        return None
    return (
        "holds unresolved merge-conflict markers (<<<<<<<, =======, >>>>>>>): resolve "
        "the conflict, or rewrite it with `pytest --snapshot-update` and review the new "
        "golden"
    )


def has_conflict_markers(text: str) -> bool:
    """Whether `text` holds git's merge-conflict markers, left from an unresolved merge."""
    return any(
        line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======" or line == "<<<<<<<"
        for line in text.splitlines()
    )


def looks_cut_off(text: str) -> bool:
    """Whether the golden text holds fewer calls than its header's `# calls: N` declares."""
    declared, written_calls = declared_and_written_calls(text)
    return declared is not None and written_calls < declared


def _line_ends_trimmed(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


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
    note_comparison(other)  # for --fwdorder-report, --fwdorder-save-failed and CI reports
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
    lines = explain_mismatch(
        str(result.recalled_data), new_text, _relative(result.snapshot_location, root)
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


# `--snapshot-update` deletes the goldens no test asserted. A test that stopped before its
# assertion did not assert its golden either, so syrupy would delete it: hold those back.


@dataclass(frozen=True)
class HeldGoldens:
    """What an update run keeps from deletion: all unused goldens (`reason` says why), or
    those of the tests in `unfinished` (failed, errored or skipped before their assertion)."""

    reason: str | None
    unfinished: tuple[str, ...]
    # The unfinished tests' golden texts, put back where syrupy deleted one anyway: it
    # matches skipped tests to goldens by unescaped name, so `test[a%2Fb]` is not matched.
    saved: dict[Path, bytes]


def hold_unfinished_goldens(
    session: pytest.Session, exitstatus: int, *, collection_failed: bool
) -> HeldGoldens | None:
    """Before syrupy's clean-up: keep the goldens a deletion now could wrongly remove.

    An interrupted session, one stopped early (`-x`, `--maxfail`) or with collection errors
    deletes nothing; otherwise the goldens of tests that did not pass are kept.
    """
    syrupy_session = getattr(session.config, "_syrupy", None)
    option = session.config.option
    if syrupy_session is None or not option.update_snapshots or option.no_cleanup:
        return None
    reason = unsafe_session_reason(session, exitstatus, collection_failed=collection_failed)
    if reason is not None:
        option.no_cleanup = True  # syrupy's own --snapshot-no-cleanup, for this session
        return HeldGoldens(reason, (), {})
    statuses: dict[str, ItemStatus] = syrupy_session._selected_items
    unfinished = tuple(nodeid for nodeid, status in statuses.items() if status != ItemStatus.PASSED)
    for nodeid in unfinished:
        statuses[nodeid] = ItemStatus.SKIPPED  # syrupy keeps the goldens of skipped tests
    return HeldGoldens(None, unfinished, _golden_texts(session, unfinished))


def _golden_texts(session: pytest.Session, nodeids: tuple[str, ...]) -> dict[Path, bytes]:
    """The golden files of the tests `nodeids`, by path, with their contents."""
    collected = session.config._syrupy._collected_items  # type: ignore[attr-defined]
    texts: dict[Path, bytes] = {}
    for nodeid in nodeids:
        if nodeid not in collected:
            continue
        location = PyTestLocation(collected[nodeid])
        directory = (
            Path(location.filepath).parent
            / session.config.option.snapshot_dirname
            / location.basename
        )
        for path in directory.glob(f"*.{TraceSnapshotExtension.file_extension}"):
            if TraceSnapshotExtension.matches_test_location(
                test_location=location, snapshot_location=str(path)
            ):
                texts[path] = path.read_bytes()
    return texts


def put_back_held_goldens(held: HeldGoldens) -> int:
    """After syrupy's clean-up: write back the held goldens it deleted; how many."""
    missing = [path for path in held.saved if not path.exists()]
    for path in missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(held.saved[path])
    return len(missing)


def unsafe_session_reason(
    session: pytest.Session, exitstatus: int, *, collection_failed: bool
) -> str | None:
    """Why deleting unused goldens now could lose some, or None when it could not."""
    if exitstatus in (
        pytest.ExitCode.INTERRUPTED,
        pytest.ExitCode.INTERNAL_ERROR,
        pytest.ExitCode.USAGE_ERROR,
    ):
        return "the session was interrupted"
    if session.shouldfail or session.shouldstop:
        return f"the session stopped early ({session.shouldfail or session.shouldstop})"
    if collection_failed:
        return "the session had collection errors"
    return None


def held_goldens_message(
    session: pytest.Session, held: HeldGoldens, put_back: int = 0
) -> str | None:
    """After syrupy's clean-up: the summary line saying how many goldens were kept and why;
    `put_back` counts those syrupy deleted and we wrote back."""
    report = getattr(getattr(session.config, "_syrupy", None), "report", None)
    if report is None:
        return None
    if held.reason is not None:
        count = report.num_unused
        if not count:
            return None
        return (
            f"fwdorder: kept {count} unused golden file(s): {held.reason}; run `pytest "
            "--snapshot-update` again once every test collects and runs to delete them"
        )
    count = _count_goldens_of(session, held.unfinished, report) + put_back
    if not count:
        return None
    rewritten = (
        f" ({put_back} of them listed as deleted in the snapshot report were written back)"
        if put_back
        else ""
    )
    return (
        f"fwdorder: kept {count} golden file(s) whose test failed, errored or was skipped "
        "before asserting them; they are deleted only when their test passes without "
        f"asserting them{rewritten}"
    )


def _count_goldens_of(session: pytest.Session, nodeids: tuple[str, ...], report: Any) -> int:
    """How many discovered goldens no assertion used belong to the tests `nodeids`."""
    collected = session.config._syrupy._collected_items  # type: ignore[attr-defined]
    locations = [PyTestLocation(collected[nodeid]) for nodeid in nodeids if nodeid in collected]
    count = 0
    for collection in report.discovered:
        used = report.used.get(collection.location)
        # A single-file golden is a collection without named snapshots: its file is the unit.
        names = [snapshot.name for snapshot in collection] or [Path(collection.location).stem]
        for name in names:
            if used is not None and (used.get(name) or not collection.has_snapshots):
                continue
            count += any(
                location.matches_snapshot_location(collection.location)
                and location.matches_snapshot_name(name)
                for location in locations
            )
    return count
