"""Goldens held back from `--snapshot-update`'s deletion: those of tests that never reached their
assertion, and all of them in a session that stopped early."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from syrupy.data import SnapshotCollections
from syrupy.location import PyTestLocation
from syrupy.session import ItemStatus

from pytest_fwdorder.snapshot.extension import TraceSnapshotExtension

# `--snapshot-update` deletes the goldens no test asserted. A test that stopped before its
# assertion did not assert its golden either, so syrupy would delete it: hold those back.
# Under pytest-xdist the controller deletes, but only the workers know which goldens are
# whose: each worker sends the goldens it holds, by path with their bytes.
HELD_WORKER_OUTPUT_KEY = "fwdorder_held_goldens"
_FROM_WORKERS_KEY = pytest.StashKey[dict[Path, bytes]]()


@dataclass(frozen=True)
class HeldGoldens:
    """What an update run keeps from deletion: all unused goldens (`reason` says why), or
    those of the tests in `unfinished` (failed, errored or skipped before their assertion)."""

    reason: str | None
    unfinished: tuple[str, ...]
    # The unfinished tests' golden texts, put back where syrupy deleted one anyway: it
    # matches skipped tests to goldens by unescaped name, so `test[a%2Fb]` is not matched.
    saved: dict[Path, bytes]
    # The held goldens syrupy was about to delete and did not, filled in by its clean-up.
    kept_from_deletion: set[Path] = field(default_factory=set)


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
    # A worker sees the tests other workers ran as not run: those are theirs to hold.
    worker = hasattr(session.config, "workerinput")
    unfinished = tuple(
        nodeid
        for nodeid, status in statuses.items()
        if status != ItemStatus.PASSED and not (worker and status == ItemStatus.NOT_RUN)
    )
    for nodeid in unfinished:
        statuses[nodeid] = ItemStatus.SKIPPED  # syrupy keeps the goldens of skipped tests
    saved = _golden_texts(session, unfinished) | session.config.stash.get(_FROM_WORKERS_KEY, {})
    held = HeldGoldens(None, unfinished, saved)
    _keep_from_deletion(syrupy_session, held)
    return held


def _keep_from_deletion(syrupy_session: Any, held: HeldGoldens) -> None:
    """Let syrupy's clean-up of this session delete no held golden, so each stays untouched
    (same bytes, same modification time) and leaves syrupy's report.

    Marking a test skipped does not keep a single-file golden from syrupy 7's deletion,
    so the one method that deletes is wrapped, for this session only. Should syrupy
    rename it, `put_back_held_goldens` still writes the deleted goldens back.
    """
    remove = getattr(syrupy_session, "remove_unused_snapshots", None)
    if remove is None or not held.saved:
        return
    held_paths = {path.resolve() for path in held.saved}

    def remove_all_but_held(
        unused_snapshot_collections: SnapshotCollections,
        used_snapshot_collections: SnapshotCollections,
    ) -> None:
        unused = SnapshotCollections()
        for collection in unused_snapshot_collections:
            path = Path(collection.location).resolve()
            if path in held_paths:
                held.kept_from_deletion.add(path)
            else:
                unused.add(collection)
        if syrupy_session.report is not None:
            _leave_out_of_report(syrupy_session.report, held.kept_from_deletion)
        remove(
            unused_snapshot_collections=unused, used_snapshot_collections=used_snapshot_collections
        )

    syrupy_session.remove_unused_snapshots = remove_all_but_held


def send_held_goldens(config: pytest.Config, held: HeldGoldens | None) -> None:
    """In a pytest-xdist worker: send the controller, which deletes, the goldens held."""
    output = getattr(config, "workeroutput", None)
    if output is not None and held is not None and held.saved:
        output[HELD_WORKER_OUTPUT_KEY] = {str(path): text for path, text in held.saved.items()}


def receive_held_goldens(config: pytest.Config, worker_output: dict[str, Any]) -> None:
    """On the pytest-xdist controller, as a worker goes down: keep the goldens it held."""
    sent = worker_output.get(HELD_WORKER_OUTPUT_KEY)
    if sent:
        received = config.stash.setdefault(_FROM_WORKERS_KEY, {})
        received.update({Path(path): text for path, text in sent.items()})


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
            if TraceSnapshotExtension.writes_golden(
                test_location=location, snapshot_location=str(path)
            ):
                texts[path] = path.read_bytes()
    return texts


def put_back_held_goldens(held: HeldGoldens, session: pytest.Session | None = None) -> int:
    """After syrupy's clean-up: write back the held goldens it deleted; how many.

    Those goldens leave the `session`'s snapshot report too, so syrupy's summary does not
    say they were deleted: they are where they were, with the same bytes.
    """
    report = getattr(getattr(session and session.config, "_syrupy", None), "report", None)
    missing = [path for path in held.saved if not path.exists()]
    for path in missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(held.saved[path])
    if missing and report is not None:
        _leave_out_of_report(report, {path.resolve() for path in missing})
    return len(missing)


def _leave_out_of_report(report: Any, paths: set[Path]) -> None:
    """Drop `paths` from syrupy's unused snapshots, which its summary lines count and list."""
    kept = SnapshotCollections()
    for collection in report.unused:
        if Path(collection.location).resolve() not in paths:
            kept.add(collection)
    # `unused` and `num_unused` are cached properties of the report: replace their values.
    report.__dict__["unused"] = kept
    report.__dict__.pop("num_unused", None)


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
    count = (
        _count_goldens_of(session, held.unfinished, report, held.kept_from_deletion)
        + len(held.kept_from_deletion)
        + put_back
    )
    if not count:
        return None
    return (
        f"fwdorder: kept {count} golden file(s) whose test failed, errored or was skipped "
        "before asserting them; they are deleted only when their test passes without "
        "asserting them"
    )


def _count_goldens_of(
    session: pytest.Session, nodeids: tuple[str, ...], report: Any, counted: set[Path]
) -> int:
    """How many discovered goldens no assertion used belong to the tests `nodeids`, leaving
    out those `counted` already."""
    collected = session.config._syrupy._collected_items  # type: ignore[attr-defined]
    locations = [PyTestLocation(collected[nodeid]) for nodeid in nodeids if nodeid in collected]
    count = 0
    for collection in report.discovered:
        if Path(collection.location).resolve() in counted:
            continue
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
