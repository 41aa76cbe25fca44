"""The golden comparisons of a test run, kept for `--fwdorder-report`,
`--fwdorder-save-failed` and the CI reports: one `Comparison` per `trace == snapshot`. No torch.

Nothing is kept unless something asked for it: for the two options the plugin puts a list
in `config.stash` under `COMPARISONS_KEY` and the snapshot comparison appends to it; for
the CI reports (pytest-html, JUnit XML, GitHub annotations, the lines of an update run) it
sets `KEEP_PER_TEST_KEY`, and each test keeps its own failed and written goldens until its
report is made (`take_test_comparisons`).
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

import pytest

from pytest_fwdorder.errors import UnpicklableFacetWarning

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import Facet

ComparisonStatus = Literal["passed", "failed", "missing", "updated", "created"]
STATUSES: tuple[ComparisonStatus, ...] = get_args(ComparisonStatus)
FAILED_STATUSES: tuple[ComparisonStatus, ...] = ("failed", "missing")
WORKER_OUTPUT_KEY = "fwdorder_comparisons"
WORKER_WARNINGS_KEY = "fwdorder_facet_warnings"
# The report attribute that carries a test's goldens to the controller under pytest-xdist.
GOLDENS_ATTRIBUTE = "fwdorder_goldens"


@dataclass(frozen=True)
class Comparison:
    """One trace compared with its golden file.

    `status`: "passed" (equal), "failed" (different), "missing" (no golden yet),
    "updated" or "created" (written by `--snapshot-update`). `golden_path` is relative to
    the rootdir where it can be, with `/` separators. `old_text` is the golden's text before
    the comparison (None when there was none), `new_text` the trace's. `facets` are the
    trace's own (a values facet with its tolerance), so that a report compares as the
    assertion did; None for the registered ones.
    """

    test_id: str
    snapshot_name: str
    golden_path: str
    status: ComparisonStatus
    old_text: str | None
    new_text: str
    facets: tuple[Facet, ...] | None = field(default=None, compare=False)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES


@dataclass(frozen=True)
class ParityFailure:
    """A test that failed `assert_matches_reference`: its id and the parity report as an
    HTML section (`report.parity_html.parity_report_html`), plain strings so that a
    pytest-xdist worker can send it."""

    test_id: str
    section_html: str


COMPARISONS_KEY = pytest.StashKey[list[Comparison]]()
# Kept beside COMPARISONS_KEY, for `--fwdorder-report`.
PARITY_FAILURES_KEY = pytest.StashKey[list[ParityFailure]]()
PARITY_WORKER_OUTPUT_KEY = "fwdorder_parity_failures"
KEEP_PER_TEST_KEY = pytest.StashKey[bool]()
# A test's failed, missing, updated and created goldens, in its own `item.stash`.
_TEST_COMPARISONS_KEY = pytest.StashKey[list[Comparison]]()


def note_comparison(snapshot: Any, facets: tuple[Facet, ...] | None = None) -> None:
    """Keep the last comparison a syrupy `SnapshotAssertion` made, if the run asked for it;
    `facets`: the compared trace's own."""
    result = snapshot.executions.get(snapshot.num_executions - 1)
    if result is None:
        return
    item = result.test_location.item
    kept = item.config.stash.get(COMPARISONS_KEY, None)
    per_test = item.config.stash.get(KEEP_PER_TEST_KEY, False)
    if (kept is None and not per_test) or result.asserted_data is None:
        return
    comparison = Comparison(
        test_id=item.nodeid,
        snapshot_name=result.snapshot_name,
        golden_path=relative_golden_path(Path(result.snapshot_location), item.config.rootpath),
        status=_status(result),
        old_text=None if result.recalled_data is None else str(result.recalled_data),
        new_text=str(result.asserted_data),
        facets=facets,
    )
    if kept is not None:
        kept.append(comparison)
    if per_test and comparison.status != "passed":
        item.stash.setdefault(_TEST_COMPARISONS_KEY, []).append(comparison)


class GoldenOutcome(NamedTuple):
    """What a test's report says of one golden it failed or wrote: its path, status, and
    one line of what changed (`ci_reports.outcome_of`)."""

    golden_path: str
    status: str
    summary: str

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES


def golden_outcomes(report: pytest.TestReport) -> list[GoldenOutcome]:
    """The goldens attached to a call report, also one sent by a pytest-xdist worker."""
    return [GoldenOutcome(**item) for item in getattr(report, GOLDENS_ATTRIBUTE, None) or ()]


def take_test_comparisons(item: pytest.Item) -> list[Comparison]:
    """The test's failed and written goldens noted since the last call, and forget them."""
    comparisons = item.stash.get(_TEST_COMPARISONS_KEY, [])
    item.stash[_TEST_COMPARISONS_KEY] = []
    return comparisons


def _status(result: Any) -> ComparisonStatus:
    if result.created:
        return "created"
    if result.updated:
        return "updated"
    if result.success:
        return "passed"
    return "missing" if result.recalled_data is None else "failed"


def relative_golden_path(path: Path, root: Path) -> str:
    """The golden's path relative to `root` with `/` separators, where it lies under it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # a golden outside the rootdir: keep what still names it
        return Path(*path.parts[-3:]).as_posix()


def to_worker_output(comparisons: list[Comparison]) -> tuple[list[dict[str, Any]], list[str]]:
    """Plain dictionaries an xdist worker can send to the controller (the facets, objects of
    their plugins' classes, travel pickled), and the warnings for the controller to give.

    Facets that cannot be pickled are left out (the controller's reports then compare with
    the registered facets), with one warning naming the first and why. It travels as text:
    warned in the worker's session end, it would raise there under `filterwarnings = error`
    and lose every comparison the worker sends.
    """
    sent, unsent = [], []
    for comparison in comparisons:
        facets = _pickled(comparison.facets)
        if isinstance(facets, _Unpicklable):
            unsent.append(facets)
            facets = None
        sent.append(
            {
                **{part.name: getattr(comparison, part.name) for part in fields(comparison)},
                "facets": facets,
            }
        )
    return sent, [_unsent_warning(unsent[0], len(unsent))] if unsent else []


def from_worker_output(items: list[dict[str, Any]]) -> tuple[list[Comparison], list[str]]:
    """The comparisons a worker sent, back as `Comparison`s, and a warning where facets could
    not be unpickled here (they are left out)."""
    problems: list[Exception] = []
    comparisons = []
    for item in items:
        facets, problem = _unpickled(item.get("facets"))
        comparisons.append(Comparison(**{**item, "facets": facets}))
        if problem is not None:
            problems.append(problem)
    if not problems:
        return comparisons, []
    error = problems[0]
    return comparisons, [
        f"the facets of {_goldens(len(problems))} sent by a pytest-xdist worker could not be "
        f"unpickled here ({type(error).__name__}: {error}): the report compares with the "
        "registered facets instead, without the trace's own (a tolerance it was given); "
        "make the facets' classes importable where pytest runs (not defined in a test "
        "function)"
    ]


def warn_of_facets(messages: list[str]) -> None:
    """Each message of `to_worker_output` or `from_worker_output` as an
    `UnpicklableFacetWarning`, on the controller once its reports are written."""
    for message in messages:
        warnings.warn(message, UnpicklableFacetWarning, stacklevel=2)


class _Unpicklable(NamedTuple):
    """A facet that pickle refused, and pickle's error."""

    facet: Facet
    error: Exception


def _pickled(facets: tuple[Facet, ...] | None) -> bytes | _Unpicklable | None:
    if facets is None:
        return None
    try:
        return pickle.dumps(facets)
    except Exception as error:  # a facet holding a lambda or a local class
        return _refused_facet(facets, error)


def _refused_facet(facets: tuple[Facet, ...], error: Exception) -> _Unpicklable:
    """The first of `facets` that pickle refuses on its own, with pickle's error (`error`,
    the whole tuple's, when each pickles alone)."""
    for facet in facets:
        try:
            pickle.dumps(facet)
        except Exception as own_error:
            return _Unpicklable(facet, own_error)
    return _Unpicklable(facets[0], error)


def _unsent_warning(first: _Unpicklable, count: int) -> str:
    facet, error = first
    return (
        f"the facet {getattr(facet, 'title', '?')!r} ({type(facet).__qualname__}) cannot be "
        f"sent from a pytest-xdist worker: pickling it failed ({type(error).__name__}: "
        f"{error}); {_goldens(count)} compare with the registered facets instead, without "
        "the trace's own (a tolerance it was given), in --fwdorder-report and the CI reports: "
        "keep the facet's attributes picklable (no lambdas or local functions)"
    )


def _goldens(count: int) -> str:
    return "1 golden" if count == 1 else f"{count} goldens"


def _unpickled(data: bytes | None) -> tuple[tuple[Facet, ...] | None, Exception | None]:
    """The facets a worker sent (or None), and the error where they could not be unpickled."""
    try:
        return (None if data is None else tuple(pickle.loads(data))), None  # our own worker's
    except Exception as error:  # a facet class the controller cannot import
        return None, error


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
