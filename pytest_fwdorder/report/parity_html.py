"""A parity report -> HTML: its section of the `--fwdorder-report` page and its notebook
display. Pure, no torch: every text is escaped.

The section shows the first divergence, where NaN or Inf first appeared, both
environments, the pairing rules, the error at every paired call as a table (rows outside
tolerance marked), the reference calls without a partner, and the picture of the error
per call, folded.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from pytest_fwdorder.picture.parity_picture import CallErrorLike, ParityReportLike, parity_picture
from pytest_fwdorder.report.html import PAGE_STYLE, PARITY_STYLE
from pytest_fwdorder.report.parity_rows import (
    PARITY_COLUMNS,
    PARITY_WORD_COLUMNS,
    call_display_path,
    error_cells,
)


def parity_report_html(report: ParityReportLike) -> str:
    """The parity report as an HTML section (no style: the page or display carries it); its
    first line is the first line of `str(report)`."""
    divergence = report.first_divergence
    headline = str(report).split("\n", 1)[0]
    parts = [f'<div class="fo-summary fo-parity-headline">{html.escape(headline)}</div>']
    non_finite = report.first_non_finite
    if non_finite is not None:
        parts.append(
            f'<div class="fo-warning fo-parity-non-finite">{html.escape(non_finite.non_finite)} '
            f"first appeared at {html.escape(non_finite.candidate_display_path)}</div>"
        )
    parts.append(
        "<h3>Environments</h3>"
        f'<ul class="fo-parity-list fo-parity-environments">'
        f"<li>reference: {html.escape(report.reference_environment)}</li>"
        f"<li>candidate: {html.escape(report.candidate_environment)}</li></ul>"
    )
    rules = "".join(f"<li>{html.escape(rule)}</li>" for rule in report.rules)
    notes = "".join(f"<li>note: {html.escape(note)}</li>" for note in report.notes)
    parts.append(
        f'<h3>Pairing rules</h3><ul class="fo-parity-list fo-parity-rules">{rules}{notes}</ul>'
    )
    parts.append(
        "<h3>Error at each paired call, in the order the reference made its outputs</h3>"
        + _table_html(report.errors, divergence)
    )
    if report.unpaired:
        items = "".join(
            f"<li>{html.escape(call_display_path(path, nth))}: {html.escape(reason)}</li>"
            for path, nth, reason in report.unpaired
        )
        parts.append(
            f"<h3>Reference calls without a partner ({len(report.unpaired)})</h3>"
            f'<ul class="fo-parity-list fo-parity-unpaired">{items}</ul>'
        )
    if report.reference_golden:
        parts.append(
            '<details class="fo-picture"><summary>Picture of the error per call</summary>'
            f'<div class="fo-picture-body">{parity_picture(report).inline_svg}</div></details>'
        )
    return f'<div class="fo-parity">{"".join(parts)}</div>'


def parity_report_page_fragment(report: ParityReportLike) -> str:
    """The parity report for a notebook: the section with its style."""
    return (
        f'<div class="fwdorder"><style>{PAGE_STYLE}{PARITY_STYLE}</style>'
        f"{parity_report_html(report)}</div>"
    )


def _table_html(errors: Sequence[CallErrorLike], divergence: CallErrorLike | None) -> str:
    head = "".join(f"<th>{html.escape(column)}</th>" for column in PARITY_COLUMNS)
    rows = []
    for error in errors:
        classes = " ".join(
            [
                *(["fo-diverges"] if error.diverges else []),
                *(["fo-first-divergence"] if error is divergence else []),
            ]
        )
        cells = error_cells(error)
        rows.append(
            f'<tr class="{classes}" data-reference-path="{html.escape(error.reference.path)}" '
            f'data-candidate-path="{html.escape(error.candidate_path)}">'
            + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells[:PARITY_WORD_COLUMNS])
            + "".join(f'<td class="fo-number">{cell}</td>' for cell in cells[PARITY_WORD_COLUMNS:])
            + "</tr>"
        )
    return (
        f'<table class="fo-parity-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
