"""What `pytest --snapshot-update` accepted, made reviewable: one line per golden written,
the obsolete goldens by file name with the command that removes them, and
`--fwdorder-update-only=PATTERN`, which lets only matching goldens be written. No torch.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from pytest_fwdorder.snapshot.kept_comparisons import golden_outcomes, relative_golden_path

UPDATE_ONLY_OPTION = "--fwdorder-update-only"
# The patterns of --fwdorder-update-only, once checked; absent when it was not given.
_UPDATE_ONLY_KEY = pytest.StashKey[tuple[str, ...]]()
# What a pytest-xdist worker sends the controller: the goldens it compared, the patterns
# that matched one.
UPDATE_ONLY_WORKER_OUTPUT_KEY = "fwdorder_update_only"


@dataclass
class _SeenGoldens:
    """The goldens this process compared under `--fwdorder-update-only`, and the patterns
    that matched one of them, for the summary line on patterns that matched none."""

    goldens: set[str] = field(default_factory=set)
    matched: set[str] = field(default_factory=set)
    # False once a pytest-xdist worker went down without sending its goldens (it crashed):
    # the patterns it matched are unknown, so no pattern is said to have matched nothing.
    complete: bool = True


_SEEN_KEY = pytest.StashKey[_SeenGoldens]()
_GOLDEN_SUFFIX = ".fwdorder.txt"
# What an obsolete-golden line names before it says "and N more".
_LONGEST_LIST = 20


def configure_update_only(config: pytest.Config) -> None:
    """Check `--fwdorder-update-only` and keep its patterns for the comparisons.

    Raises pytest.UsageError when it is given without `--snapshot-update` or with an empty
    pattern. While it limits an update, syrupy deletes no unused golden: the obsolete ones
    are listed with the command that removes them instead.
    """
    patterns = tuple(config.getoption("fwdorder_update_only") or ())
    if not patterns:
        return
    if not getattr(config.option, "update_snapshots", False):
        raise pytest.UsageError(
            f"{UPDATE_ONLY_OPTION} limits which goldens --snapshot-update writes, but "
            f"--snapshot-update is not given (patterns {list(patterns)!r}): add "
            "--snapshot-update, or leave out "
            f"{UPDATE_ONLY_OPTION}"
        )
    empty = [pattern for pattern in patterns if not pattern.strip()]
    if empty:
        raise pytest.UsageError(
            f"{UPDATE_ONLY_OPTION} takes a glob on the golden's path relative to the rootdir, "
            f"got {empty[0]!r}: write for example "
            f"{UPDATE_ONLY_OPTION}='tests/__snapshots__/test_model/*'"
        )
    config.stash[_UPDATE_ONLY_KEY] = patterns
    config.stash[_SEEN_KEY] = _SeenGoldens()
    config.option.no_cleanup = True  # syrupy's own --snapshot-no-cleanup


def may_rewrite(config: pytest.Config, snapshot: Any) -> bool:
    """Whether `--fwdorder-update-only` lets the update write the golden of `snapshot`, the
    syrupy assertion about to compare (always, without the option)."""
    patterns = config.stash.get(_UPDATE_ONLY_KEY, ())
    if not patterns:
        return True
    location = _golden_location(snapshot)
    matching = _matching(config, location, patterns)
    seen = config.stash[_SEEN_KEY]
    seen.matched.update(matching)
    seen.goldens.add(relative_golden_path(Path(location), config.rootpath))
    return bool(matching)


def send_seen_goldens(config: pytest.Config) -> None:
    """In a pytest-xdist worker, at the end of its session: send the controller the goldens
    it compared under `--fwdorder-update-only` and the patterns that matched one."""
    output = getattr(config, "workeroutput", None)
    seen = config.stash.get(_SEEN_KEY, None)
    if output is not None and seen is not None:
        output[UPDATE_ONLY_WORKER_OUTPUT_KEY] = {
            "goldens": sorted(seen.goldens),
            "matched": sorted(seen.matched),
        }


def receive_seen_goldens(config: pytest.Config, worker_output: dict[str, Any]) -> None:
    """On the pytest-xdist controller, as a worker goes down: add what it sent (its
    `config.workeroutput`) to the goldens seen, for `unmatched_patterns_line`."""
    seen = config.stash.get(_SEEN_KEY, None)
    if seen is None:
        return
    sent = worker_output.get(UPDATE_ONLY_WORKER_OUTPUT_KEY)
    if sent is None:
        seen.complete = False
        return
    seen.goldens.update(sent["goldens"])
    seen.matched.update(sent["matched"])


def unmatched_patterns_line(config: pytest.Config) -> str | None:
    """The summary line naming the `--fwdorder-update-only` patterns that matched no golden
    this run compared, or None. Under pytest-xdist the workers match and send what they
    saw (`send_seen_goldens`); the controller says it once for all of them."""
    patterns = config.stash.get(_UPDATE_ONLY_KEY, ())
    seen = config.stash.get(_SEEN_KEY, None)
    if not patterns or seen is None or not seen.complete:
        return None
    unmatched = [pattern for pattern in dict.fromkeys(patterns) if pattern not in seen.matched]
    if not unmatched:
        return None
    example = min(seen.goldens, default="tests/__snapshots__/test_model/test_net.fwdorder.txt")
    test_name = example.rsplit("/", 1)[-1].removesuffix(_GOLDEN_SUFFIX)
    return (
        f"fwdorder: {UPDATE_ONLY_OPTION} pattern {', '.join(map(repr, unmatched))} matched no "
        "golden this run compared, so it wrote nothing; a pattern is a glob on the golden's "
        f"path relative to the rootdir, like {example!r}, or a bare test name like "
        f"{test_name!r}"
    )


def not_rewritten_note(config: pytest.Config, location: str) -> str | None:
    """The last line of a failure message where `--fwdorder-update-only` kept the update
    from writing the golden at `location`, or None where it did not."""
    patterns = config.stash.get(_UPDATE_ONLY_KEY, ())
    if not patterns or _matching(config, location, patterns):
        return None
    shown = relative_golden_path(Path(location), config.rootpath)
    return (
        f"Not written: {shown!r} matches no {UPDATE_ONLY_OPTION} pattern "
        f"({', '.join(map(repr, patterns))}); add a pattern that matches it to accept it."
    )


def _golden_location(snapshot: Any) -> str:
    return str(
        snapshot.extension.get_location(test_location=snapshot.test_location, index=snapshot.index)
    )


def _matching(config: pytest.Config, location: str, patterns: Sequence[str]) -> list[str]:
    """The patterns that match the golden at `location`: a glob on its path relative to the
    rootdir, or one without `/` on its file name or test name (`test_net`, `test_net[*]`),
    as .gitignore matches a name without `/` at any depth."""
    relative = relative_golden_path(Path(location), config.rootpath)
    file_name = relative.rsplit("/", 1)[-1]
    names = (file_name, file_name.removesuffix(_GOLDEN_SUFFIX))
    return [
        pattern
        for pattern in patterns
        if fnmatchcase(relative, pattern)
        or (
            "/" not in pattern
            and any(name == pattern or fnmatchcase(name, pattern) for name in names)
        )
    ]


def accepted_line(golden_path: str, summary: str) -> str:
    """One line of what an update accepted for one golden: `PATH: 1 call inserted: ...`."""
    return f"  {golden_path}: {summary}"


def obsolete_goldens_message(
    session: pytest.Session, put_back: Collection[Path], *, unsafe: bool
) -> str | None:
    """After syrupy's clean-up in an update run: the obsolete goldens (no test asserted
    them) by file name, deleted or kept, with the command that removes kept ones.

    `put_back` are the goldens the deletion guard wrote back: they are not obsolete. An
    `unsafe` session (interrupted, stopped early, collection errors) lists nothing: a golden
    no test asserted may belong to a test that never ran, and the guard says so.
    """
    report = getattr(getattr(session.config, "_syrupy", None), "report", None)
    if unsafe or report is None or not report.update_snapshots or report.disable_unused_snapshots:
        return None
    shown = _obsolete_goldens(report, put_back, session.config.rootpath)
    if not shown:
        return None
    root = session.config.rootpath
    listed = "\n".join(f"  {path}" for path in shown[:_LONGEST_LIST])
    if len(shown) > _LONGEST_LIST:
        listed += f"\n  ... and {len(shown) - _LONGEST_LIST} more"
    if report.should_delete_unused_snapshots:
        return f"fwdorder: deleted {len(shown)} obsolete golden file(s) no test asserted:\n{listed}"
    here = session.config.invocation_params.dir.resolve() == root.resolve()
    command = "rm " + " ".join(shlex.quote(path if here else str(root / path)) for path in shown)
    return (
        f"fwdorder: kept {len(shown)} obsolete golden file(s) no test asserted:\n{listed}\n"
        f"  remove them with `{command}`, or run `pytest --snapshot-update` again with every "
        "test selected"
    )


def _obsolete_goldens(report: Any, put_back: Collection[Path], root: Path) -> list[str]:
    """The paths, relative to `root`, of the goldens in syrupy's unused snapshots."""
    kept_back = {path.resolve() for path in put_back}
    paths = {
        Path(collection.location)
        for collection in report.unused
        if collection.location.endswith(_GOLDEN_SUFFIX)
        and Path(collection.location).resolve() not in kept_back
    }
    return sorted(relative_golden_path(path, root) for path in paths)


class UpdateReview:
    """The lines of an update run: the plugin registers it under `--snapshot-update`.

    The goldens a test wrote arrive on its call report (also from pytest-xdist workers),
    attached by `ci_reports.CiReports`.
    """

    def __init__(self) -> None:
        self.accepted: dict[str, str] = {}
        self.obsolete: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for outcome in golden_outcomes(report):
            if outcome.status in ("updated", "created"):
                self.accepted[outcome.golden_path] = outcome.summary

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.accepted:
            terminalreporter.write_line(
                f"fwdorder: --snapshot-update accepted {len(self.accepted)} golden file(s):"
            )
            for golden_path in sorted(self.accepted):
                terminalreporter.write_line(accepted_line(golden_path, self.accepted[golden_path]))
        if self.obsolete is not None:
            terminalreporter.write_line(self.obsolete)
        unmatched = unmatched_patterns_line(terminalreporter.config)
        if unmatched is not None:
            terminalreporter.write_line(unmatched)
