"""Failed and written goldens in the reports CI already shows: a pytest-html row's extras,
JUnit XML properties, GitHub Actions annotations, and the goldens on each test's report.

No torch, and nothing of pytest-html is imported unless `--html` is given.
"""

from __future__ import annotations

import html
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fwdorder.diff.changed_calls import rows_to_show
from pytest_fwdorder.diff.changes import DiffRow
from pytest_fwdorder.diff.classification import TraceDiff
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.diff.places import plural
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.report.ci_targets import CiTargets
from pytest_fwdorder.snapshot.kept_comparisons import (
    GOLDENS_ATTRIBUTE,
    Comparison,
    GoldenOutcome,
    golden_outcomes,
    take_test_comparisons,
)
from pytest_fwdorder.snapshot.policy import (
    comparable_texts,
    comparison_facets,
    explain_mismatch,
    golden_problem,
)

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import Facet

SUMMARY_PROPERTY = "fwdorder_summary"
GOLDEN_PROPERTY = "fwdorder_golden"
ANNOTATION_TITLE = "pytest-fwdorder"
_MISSING_SUMMARY = "no golden file yet: run `pytest --snapshot-update` to write it, then review it"
_CONTEXT = 2  # unchanged calls shown around each change in the side-by-side rows
_MOST_ROWS = 200
_CELL = "padding:0 8px;font:12px/1.45 ui-monospace,Menlo,monospace;white-space:pre;"
_ROW_COLOURS = {"inserted": "#dafbe1", "removed": "#ffebe9", "changed": "#fff8c5"}


def change_summary(old_text: str, new_text: str, facets: Sequence[Facet] | None = None) -> str:
    """One line of what changed from the golden text to the new one:
    `1 call inserted: layer2.se (SE, with 5 nested calls) after layer2.1`. `facets`: the
    trace's own, as its assertion compared with (`comparison_facets`)."""
    facets = comparison_facets(facets)
    old_text, new_text = comparable_texts(old_text, new_text, facets=facets)
    problem = golden_problem(old_text, new_text)
    if problem is not None:
        return f"the golden file {problem}"
    difference = diff_golden(old_text, new_text, facets=facets)
    if not difference:
        return "only the environment line differs"
    totals, *kinds = difference.summary().splitlines()
    return "; ".join(kinds) or totals


def outcome_of(comparison: Comparison) -> GoldenOutcome:
    """The golden's path, status, and one line of what changed."""
    if comparison.status == "missing":
        summary = _MISSING_SUMMARY
    elif comparison.old_text is None:
        summary = f"new golden, {plural(len(parse_golden(comparison.new_text)[1]), 'call')}"
    else:
        summary = change_summary(comparison.old_text, comparison.new_text, comparison.facets)
    return GoldenOutcome(comparison.golden_path, comparison.status, summary)


def explanation_html(comparison: Comparison) -> str:
    """A failed golden for a pytest-html row: the failure's explanation (summary and changed
    calls), then the changed calls side by side. Every text is escaped."""
    if comparison.old_text is None:
        lines = [f"Snapshot {comparison.snapshot_name!r} does not exist!", _MISSING_SUMMARY]
    else:
        lines = explain_mismatch(
            comparison.old_text,
            comparison.new_text,
            comparison.golden_path,
            facets=comparison.facets,
        )
    parts = [
        f'<div class="fwdorder-golden" data-golden="{html.escape(comparison.golden_path)}">',
        f"<p><b>pytest-fwdorder</b>: golden <code>{html.escape(comparison.golden_path)}</code>"
        f" {html.escape(comparison.status)}</p>",
        '<pre class="fwdorder-explanation" style="white-space:pre-wrap">'
        f"{html.escape(chr(10).join(lines))}</pre>",
    ]
    if comparison.old_text is not None:
        facets = comparison_facets(comparison.facets)
        old_text, new_text = comparable_texts(
            comparison.old_text, comparison.new_text, facets=facets
        )
        if golden_problem(old_text, new_text) is None:
            difference = diff_golden(old_text, new_text, facets=facets)
            if difference.rows:
                parts.append(rows_html(difference))
    parts.append("</div>")
    return "".join(parts)


def rows_html(difference: TraceDiff) -> str:
    """The golden's calls and the new ones side by side, changed rows coloured, long runs of
    unchanged calls left out."""
    rows = difference.rows
    shown = rows_to_show(rows, _CONTEXT)
    body: list[str] = []
    skipped = written = 0
    for row, show in zip(rows, shown, strict=True):
        if not show:
            skipped += 1
            continue
        if skipped:
            body.append(_skipped_row(skipped))
            skipped = 0
        if written == _MOST_ROWS:
            body.append(_skipped_row(sum(shown) - written, "more row"))
            break
        written += 1
        body.append(_row_html(difference, row))
    else:
        if skipped:
            body.append(_skipped_row(skipped))
    return (
        '<table class="fwdorder-rows" style="border-collapse:collapse"><thead><tr>'
        '<th style="text-align:left">golden file (before)</th>'
        '<th style="text-align:left">this run</th></tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _row_html(difference: TraceDiff, row: DiffRow) -> str:
    old = difference.old_lines[row.old].text if row.old is not None else ""
    new = difference.new_lines[row.new].text if row.new is not None else ""
    if not row.differs:
        kind = "same"
    elif row.old is None:
        kind = "inserted"
    else:
        kind = "removed" if row.new is None else "changed"
    colour = f"background:{_ROW_COLOURS[kind]};" if kind in _ROW_COLOURS else ""
    return (
        f'<tr data-kind="{kind}"><td style="{_CELL}{colour}">{html.escape(old)}</td>'
        f'<td style="{_CELL}{colour}">{html.escape(new)}</td></tr>'
    )


def _skipped_row(count: int, noun: str = "unchanged call") -> str:
    return f'<tr data-kind="skipped"><td colspan="2">… {plural(count, noun)} …</td></tr>'


def annotation_line(file: str, line: int, message: str) -> str:
    """A GitHub Actions workflow command that marks `file` at `line` as failed."""
    return (
        f"::error file={_escape_property(file)},line={line},"
        f"title={_escape_property(ANNOTATION_TITLE)}::{_escape_data(message)}"
    )


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


class CiReports:
    """Puts each test's failed and written goldens on its reports; the plugin registers it
    when `ci_targets` finds a report that shows them."""

    def __init__(self, targets: CiTargets) -> None:
        self.targets = targets
        self.annotations: dict[tuple[str, str], str] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        comparisons = take_test_comparisons(item) if call.when == "call" else []
        outcomes = [outcome_of(comparison) for comparison in comparisons]
        if self.targets.junit:
            # On the item, as `record_property` does: JUnit XML reads the teardown report.
            for outcome in outcomes:
                if outcome.failed:
                    item.user_properties.append((SUMMARY_PROPERTY, outcome.summary))
                    item.user_properties.append((GOLDEN_PROPERTY, outcome.golden_path))
        report = yield
        if outcomes:
            setattr(report, GOLDENS_ATTRIBUTE, [outcome._asdict() for outcome in outcomes])
        failed = [comparison for comparison in comparisons if comparison.failed]
        if self.targets.html and failed:
            report.extras = [*getattr(report, "extras", []), *map(_html_extra, failed)]  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.targets.github:
            return
        file, line, _ = report.location
        for outcome in golden_outcomes(report):
            if outcome.failed:
                message = f"{outcome.summary} (golden {outcome.golden_path})"
                self.annotations[(report.nodeid, outcome.golden_path)] = annotation_line(
                    file, (line or 0) + 1, message
                )

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for annotation in self.annotations.values():
            terminalreporter.write_line(annotation)


def _html_extra(comparison: Comparison) -> Any:
    from pytest_html import extras  # type: ignore[import-untyped]  # only with --html

    return extras.html(explanation_html(comparison))
