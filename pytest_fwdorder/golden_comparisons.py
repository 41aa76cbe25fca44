"""The golden comparisons of a test run, kept for `--fwdorder-report` and
`--fwdorder-save-failed`: one `Comparison` per `trace == snapshot`. No torch.

Nothing is kept unless one of the two options asked for it: the plugin puts a list in
`config.stash` under `COMPARISONS_KEY` and the snapshot comparison appends to it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import pytest

ComparisonStatus = Literal["passed", "failed", "missing", "updated", "created"]
STATUSES: tuple[ComparisonStatus, ...] = get_args(ComparisonStatus)
FAILED_STATUSES: tuple[ComparisonStatus, ...] = ("failed", "missing")
WORKER_OUTPUT_KEY = "fwdorder_comparisons"


@dataclass(frozen=True)
class Comparison:
    """One trace compared with its golden file.

    `status`: "passed" (equal), "failed" (different), "missing" (no golden yet),
    "updated" or "created" (written by `--snapshot-update`). `golden_path` is relative to
    the rootdir where it can be, with `/` separators. `old_text` is the golden's text before
    the comparison (None when there was none), `new_text` the trace's.
    """

    test_id: str
    snapshot_name: str
    golden_path: str
    status: ComparisonStatus
    old_text: str | None
    new_text: str

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES


COMPARISONS_KEY = pytest.StashKey[list[Comparison]]()


def note_comparison(snapshot: Any) -> None:
    """Keep the last comparison a syrupy `SnapshotAssertion` made, if the run asked for it."""
    result = snapshot.executions.get(snapshot.num_executions - 1)
    if result is None:
        return
    item = result.test_location.item
    kept = item.config.stash.get(COMPARISONS_KEY, None)
    if kept is None or result.asserted_data is None:
        return
    kept.append(
        Comparison(
            test_id=item.nodeid,
            snapshot_name=result.snapshot_name,
            golden_path=_relative(Path(result.snapshot_location), item.config.rootpath),
            status=_status(result),
            old_text=None if result.recalled_data is None else str(result.recalled_data),
            new_text=str(result.asserted_data),
        )
    )


def _status(result: Any) -> ComparisonStatus:
    if result.created:
        return "created"
    if result.updated:
        return "updated"
    if result.success:
        return "passed"
    return "missing" if result.recalled_data is None else "failed"


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # a golden outside the rootdir: keep what still names it
        return Path(*path.parts[-3:]).as_posix()


def to_worker_output(comparisons: list[Comparison]) -> list[dict[str, Any]]:
    """Plain dictionaries an xdist worker can send to the controller."""
    return [asdict(comparison) for comparison in comparisons]


def from_worker_output(items: list[dict[str, Any]]) -> list[Comparison]:
    """The comparisons a worker sent, back as `Comparison`s."""
    return [Comparison(**item) for item in items]


def save_failed(comparisons: list[Comparison], directory: Path) -> list[Path]:
    """Write the new trace of every failed golden under `directory`, at the golden's own
    relative path, so `fwdorder diff GOLDEN DIRECTORY/GOLDEN` compares them. Returns the
    files written."""
    written = []
    for comparison in comparisons:
        if not comparison.failed:
            continue
        target = directory / comparison.golden_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(comparison.new_text, encoding="utf-8")
        written.append(target)
    return written
