"""Golden text -> HTML: the `--fwdorder-report` page and a trace's notebook display.

Pure functions, no torch. The page is one self-contained file: its style and script are
inline, it loads nothing from the network, and it reads well with the script off (trees
are `<details>` elements; only search and expand-all need the script).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from pytest_fwdorder.diff.changed_calls import rows_to_show
from pytest_fwdorder.diff.changes import ChangeKind, DiffRow
from pytest_fwdorder.diff.classification import TraceDiff
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.diff.places import plural
from pytest_fwdorder.golden.format import (
    FACT_PREFIX,
    FACT_TITLES,
    NEVER_CALLED_SECTION,
    UNREGISTERED_SECTION,
    GoldenLine,
    model_of,
)
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.golden.parse import format_problem, parse_golden
from pytest_fwdorder.hookspecs import trace_facets
from pytest_fwdorder.picture.svg import diff_picture
from pytest_fwdorder.report.facet_bars import bar_facets, bar_html, bar_measures, bars_style
from pytest_fwdorder.snapshot.kept_comparisons import Comparison, ParityFailure
from pytest_fwdorder.snapshot.policy import comparison_facets

# Trees of up to this many calls open whole; larger ones open their first levels.
_OPEN_WHOLE = 60
_OPEN_DEPTH = 2
_DIFF_CONTEXT = 2
# Kinds a call on one side only can have; every other kind is about a pair of calls.
_ONE_SIDED = (ChangeKind.INSERTED, ChangeKind.REMOVED, ChangeKind.MOVED)
# Failed goldens first: what a reviewer opens the page for.
_STATUS_ORDER = ("failed", "missing", "updated", "created", "passed")

_STYLE = """
.fwdorder { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; }
.fwdorder h1 { font-size: 20px; margin: 0 0 8px; }
.fwdorder h3 { font-size: 14px; margin: 12px 0 4px; }
.fwdorder .fo-totals { margin: 4px 0 12px; }
.fwdorder .fo-toolbar { position: sticky; top: 0; background: #fff; padding: 8px 0;
  border-bottom: 1px solid #d0d7de; z-index: 1; }
.fwdorder #fo-search { width: 28em; padding: 4px 8px; font-size: 14px; }
.fwdorder .fo-search-status { margin-left: 8px; color: #59636e; }
.fwdorder .fo-index { border-collapse: collapse; margin: 8px 0 16px; }
.fwdorder .fo-index td { padding: 1px 8px 1px 0; }
.fwdorder .fo-entry { border: 1px solid #d0d7de; border-radius: 6px; margin: 10px 0;
  padding: 0 10px; }
.fwdorder .fo-entry > summary { cursor: pointer; padding: 8px 0; font-weight: 600; }
.fwdorder .fo-entry-body { padding-bottom: 10px; overflow-x: auto; }
.fwdorder .fo-badge { display: inline-block; border-radius: 10px; padding: 0 8px;
  font-size: 12px; font-weight: 600; color: #fff; background: #59636e; }
.fwdorder .fo-badge-failed, .fwdorder .fo-badge-missing { background: #cf222e; }
.fwdorder .fo-badge-updated, .fwdorder .fo-badge-created { background: #9a6700; }
.fwdorder .fo-badge-passed { background: #1a7f37; }
.fwdorder .fo-golden, .fwdorder .fo-muted { color: #59636e; font-weight: 400; }
.fwdorder .fo-summary { background: #f6f8fa; border-radius: 6px; padding: 6px 10px;
  white-space: pre-wrap; font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
.fwdorder .fo-warning { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px;
  padding: 4px 10px; margin: 6px 0; }
.fwdorder .fo-warning ul { margin: 2px 0; padding-left: 20px;
  font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
.fwdorder .fo-tree, .fwdorder .fo-tree ul { list-style: none; margin: 0;
  padding-left: 18px; font: 12px/1.5 ui-monospace, SFMono-Regular, Menlo, monospace;
  white-space: nowrap; }
.fwdorder .fo-tree { padding-left: 0; }
.fwdorder .fo-tree summary { cursor: pointer; }
.fwdorder .fo-leaf > .fo-row { padding-left: 14px; }
.fwdorder .fo-path { font-weight: 600; }
.fwdorder .fo-type { color: #0550ae; }
.fwdorder .fo-reuse { color: #8250df; }
.fwdorder .fo-mark { color: #9a6700; }
.fwdorder .fo-io, .fwdorder .fo-nested { color: #59636e; }
.fwdorder .fo-facts { color: #59636e; padding-left: 28px; }
.fwdorder li.fo-unregistered > .fo-row, .fwdorder li.fo-unregistered > details > summary,
.fwdorder .fo-mark-unregistered { background: #ffebe9; color: #82071e; }
.fwdorder li.fo-inserted > .fo-row, .fwdorder li.fo-inserted > details > summary
  { background: #dafbe1; }
.fwdorder li.fo-changed > .fo-row, .fwdorder li.fo-changed > details > summary
  { background: #fff8c5; }
.fwdorder li.fo-hit > .fo-row, .fwdorder li.fo-hit > details > summary
  { outline: 2px solid #0969da; background: #ddf4ff; }
.fwdorder .fo-diff { border-collapse: collapse; width: 100%; table-layout: fixed;
  font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; margin: 6px 0; }
.fwdorder .fo-diff th { text-align: left; font: 600 13px system-ui, sans-serif;
  border-bottom: 1px solid #d0d7de; }
.fwdorder .fo-diff td { vertical-align: top; white-space: pre-wrap; overflow-wrap: anywhere;
  padding: 0 6px; border-left: 1px solid #d0d7de; }
.fwdorder .fo-diff tr.fo-removed td.fo-old, .fwdorder .fo-diff tr.fo-changed td.fo-old
  { background: #ffebe9; }
.fwdorder .fo-diff tr.fo-inserted td.fo-new, .fwdorder .fo-diff tr.fo-changed td.fo-new
  { background: #dafbe1; }
.fwdorder .fo-diff tr.fo-moved td.fo-old, .fwdorder .fo-diff tr.fo-moved td.fo-new
  { background: #ddf4ff; }
.fwdorder .fo-diff tr.fo-skip td { color: #59636e; text-align: center;
  background: #f6f8fa; }
.fwdorder .fo-kinds { color: #59636e; font-style: italic; }
.fwdorder .fo-fact-changed { font-weight: 600; }
.fwdorder .fo-picture { margin: 8px 0; }
.fwdorder .fo-picture > summary { cursor: pointer; font-weight: 600; }
.fwdorder .fo-picture-body { overflow: auto; max-height: 80vh; border: 1px solid #d0d7de;
  border-radius: 6px; margin-top: 4px; }
"""

PAGE_STYLE = _STYLE  # also the style of a parity report's notebook display

# Only a page with a failed parity check carries it: the report's section and table.
PARITY_STYLE = """
.fwdorder .fo-parity-table { border-collapse: collapse; margin: 6px 0;
  font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
.fwdorder .fo-parity-table th { text-align: left; font: 600 13px system-ui, sans-serif;
  border-bottom: 1px solid #d0d7de; padding: 0 8px; }
.fwdorder .fo-parity-table td { padding: 0 8px; white-space: nowrap; }
.fwdorder .fo-parity-table td.fo-number { text-align: right; }
.fwdorder .fo-parity-table tr.fo-diverges td { background: #ffebe9; }
.fwdorder .fo-parity-table tr.fo-first-divergence td { font-weight: 700; }
.fwdorder .fo-parity-list { margin: 2px 0; padding-left: 20px;
  font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
"""


_SCRIPT = """
(function () {
  "use strict";
  var input = document.getElementById("fo-search");
  var status = document.getElementById("fo-search-status");
  function search() {
    var query = input.value.trim().toLowerCase();
    var hits = 0, traces = 0, first = null;
    document.querySelectorAll(".fo-hit").forEach(function (node) {
      node.classList.remove("fo-hit");
    });
    document.querySelectorAll(".fo-entry").forEach(function (entry) {
      var found = 0;
      if (query) {
        entry.querySelectorAll(".fo-tree li.fo-node").forEach(function (node) {
          var path = node.getAttribute("data-path").toLowerCase();
          var type = node.getAttribute("data-type").toLowerCase();
          if (path.indexOf(query) < 0 && type.indexOf(query) < 0) { return; }
          node.classList.add("fo-hit");
          found += 1;
          if (first === null) { first = node; }
          for (var parent = node.parentElement; parent && parent !== entry;
               parent = parent.parentElement) {
            if (parent.tagName === "DETAILS") { parent.open = true; }
          }
        });
        if (found) { entry.open = true; }
      }
      entry.hidden = Boolean(query) && found === 0;
      hits += found;
      traces += found ? 1 : 0;
    });
    status.textContent = query
      ? hits + (hits === 1 ? " call matches" : " calls match") + " in " + traces +
        (traces === 1 ? " trace" : " traces")
      : "";
    if (first !== null) { first.scrollIntoView({block: "center"}); }
  }
  input.addEventListener("input", search);
  document.querySelectorAll(".fo-index a").forEach(function (link) {
    link.addEventListener("click", function () {  // a closed entry opens when linked to
      var entry = document.getElementById(link.getAttribute("href").slice(1));
      if (entry !== null) { entry.open = true; }
    });
  });
  document.querySelectorAll("button[data-action]").forEach(function (button) {
    button.addEventListener("click", function () {
      var open = button.getAttribute("data-action") === "expand";
      var tree = button.closest(".fo-entry-body").querySelector(".fo-tree");
      tree.querySelectorAll("details").forEach(function (details) { details.open = open; });
    });
  });
})();
"""


def render_report(
    comparisons: Sequence[Comparison],
    *,
    title: str = "pytest-fwdorder",
    parity_failures: Sequence[ParityFailure] = (),
) -> str:
    """The whole report page: every comparison with its call tree, failed ones first.

    Failed, missing, updated and created goldens open; passed ones closed. Each failed or
    updated one shows the summary of what changed and the side-by-side diff. Tests that
    failed `assert_matches_reference` come first, each with its parity report.
    """
    ordered = sorted(
        comparisons,
        key=lambda comparison: (_STATUS_ORDER.index(comparison.status), comparison.test_id),
    )
    counts = {status: 0 for status in _STATUS_ORDER}
    for comparison in ordered:
        counts[comparison.status] += 1
    totals = ", ".join(f"{counts[status]} {status}" for status in _STATUS_ORDER if counts[status])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No favicon request: the page must not reach for anything outside itself.
        '<link rel="icon" href="data:,">',
        f"<title>{html.escape(title)} report</title>",
        f"<style>{_STYLE}{bars_style([comparison.new_text for comparison in ordered])}"
        f"{PARITY_STYLE if parity_failures else ''}</style></head>",
        '<body><div class="fwdorder">',
        f"<h1>{html.escape(title)}: forward traces compared with their goldens</h1>",
        f'<div class="fo-totals">{plural(len(ordered), "trace")} compared'
        + (f": {totals}" if totals else "")
        + (f"; {plural(len(parity_failures), 'parity check')} failed" if parity_failures else "")
        + "</div>",
        '<div class="fo-toolbar"><input id="fo-search" type="search" autocomplete="off" '
        'placeholder="Search calls by path or type (layer2.se, Conv2d)" '
        'aria-label="Search calls by path or type">'
        '<span id="fo-search-status" class="fo-search-status" role="status"></span></div>',
    ]
    if not ordered:
        parts.append("<p>No trace was compared with a golden file in this run.</p>")
    else:
        parts.append(_index_html(ordered))
    parts += [_parity_entry_html(failure, number) for number, failure in enumerate(parity_failures)]
    parts += [_entry_html(comparison, number) for number, comparison in enumerate(ordered)]
    parts += ["</div>", f"<script>{_SCRIPT}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"


def trace_html(golden_text: str) -> str:
    """A trace as an HTML fragment for a notebook: totals, the never-called and unregistered
    modules, and the collapsible call tree. Works without a script."""
    header, lines = parse_golden(golden_text)
    return (
        f'<div class="fwdorder"><style>{_STYLE}{bars_style([golden_text])}</style>'
        f'<div class="fo-totals">{html.escape(_headline(header, lines))}</div>'
        f"{_warnings_html(header)}{_tree_html(lines, {})}</div>"
    )


def aligned_rows(difference: TraceDiff) -> list[DiffRow]:
    """The rows of a side-by-side view: the diff's own aligned rows.

    Calls paired in order share a row; between pairs, the old side's unpaired calls come
    first, then the new side's, as `TraceDiff.explanation` lists them. A moved call shows
    twice, on its old row and on its new one.
    """
    return difference.rows


def _index_html(comparisons: Sequence[Comparison]) -> str:
    rows = [
        f'<tr><td>{_badge(comparison.status)}</td><td><a href="#entry-{number}">'
        f"{html.escape(comparison.test_id)}</a></td></tr>"
        for number, comparison in enumerate(comparisons)
    ]
    return f'<table class="fo-index">{"".join(rows)}</table>'


def _entry_html(comparison: Comparison, number: int) -> str:
    header, lines = parse_golden(comparison.new_text)
    open_attribute = "" if comparison.status == "passed" else " open"
    body: list[str] = []
    marks: dict[int, str] = {}
    if comparison.status in ("failed", "updated") and comparison.old_text is not None:
        problem = format_problem(comparison.old_text)
        if problem is not None:
            body.append(f'<div class="fo-warning">The golden file {html.escape(problem)}.</div>')
        else:
            facets = comparison_facets(comparison.facets)  # the trace's, as its assertion
            difference = diff_golden(comparison.old_text, comparison.new_text, facets=facets)
            marks = _tree_marks(difference)
            body.append(_diff_html(difference, comparison.status))
            if comparison.status == "failed" and difference:
                body.append(_picture_html(difference))
    elif comparison.status == "missing":
        body.append(
            '<div class="fo-warning">No golden file yet: run <code>pytest --snapshot-update'
            "</code> to write it, then review it.</div>"
        )
    body.append(_warnings_html(header))
    body.append(
        "<h3>Call tree"
        + (" (now)" if comparison.status in ("failed", "updated") else "")
        + ' <button type="button" data-action="expand">Expand all</button> '
        '<button type="button" data-action="collapse">Collapse all</button></h3>'
    )
    body.append(_tree_html(lines, marks))
    return (
        f'<details class="fo-entry" id="entry-{number}" data-status="{comparison.status}"'
        f' data-test="{html.escape(comparison.test_id)}"{open_attribute}>'
        f"<summary>{_badge(comparison.status)} {html.escape(comparison.test_id)} "
        f'<span class="fo-golden">{html.escape(comparison.golden_path)} · '
        f"{html.escape(_headline(header, lines))}</span></summary>"
        f'<div class="fo-entry-body">{"".join(body)}</div></details>'
    )


def _parity_entry_html(failure: ParityFailure, number: int) -> str:
    """A test that failed assert_matches_reference, open, with its parity report."""
    return (
        f'<details class="fo-entry fo-parity-entry" id="parity-{number}" data-status="failed"'
        f' data-test="{html.escape(failure.test_id)}" open>'
        f"<summary>{_badge('failed')} {html.escape(failure.test_id)} "
        '<span class="fo-golden">parity with a recorded reference</span></summary>'
        f'<div class="fo-entry-body">{failure.section_html}</div></details>'
    )


def _picture_html(difference: TraceDiff) -> str:
    """The diff's picture, folded so the page stays light: unchanged blocks drawn folded."""
    return (
        '<details class="fo-picture"><summary>Picture of the change</summary>'
        f'<div class="fo-picture-body">{diff_picture(difference).inline_svg}</div></details>'
    )


def _headline(header: GoldenHeader, lines: list[GoldenLine]) -> str:
    model = model_of(header)
    calls = plural(len(lines), "call")
    modules = plural(len({line.path for line in lines}), "module")
    return f"{model}: {calls} of {modules}" if model else f"{calls} of {modules}"


def _badge(status: str) -> str:
    return f'<span class="fo-badge fo-badge-{status}">{status}</span>'


def _warnings_html(header: GoldenHeader) -> str:
    """Boxes listing the never-called and the unregistered modules, and the sections the
    registered facets name in `report_warnings` (graph breaks), when there are any."""
    sections = header.sections
    boxes = []
    warnings = [
        (NEVER_CALLED_SECTION, "module", "registered but never called in this forward"),
        (
            UNREGISTERED_SECTION,
            "module",
            "called but not registered under the model: not trained, not saved",
        ),
        *(
            warning
            for facet in trace_facets(FACT_TITLES)
            for warning in getattr(facet, "report_warnings", ())
        ),
    ]
    for title, noun, explanation in warnings:
        items = sections.get(title, [])
        if items:
            listed = "".join(f"<li>{html.escape(item)}</li>" for item in items)
            boxes.append(
                f'<div class="fo-warning" data-section="{html.escape(title)}">'
                f"<strong>{plural(len(items), noun)}</strong> {explanation}:"
                f"<ul>{listed}</ul></div>"
            )
    return "".join(boxes)


def _tree_marks(difference: TraceDiff) -> dict[int, str]:
    """New-side line index -> how the tree highlights it: inserted or changed."""
    marks: dict[int, str] = {}
    for row in aligned_rows(difference):
        if row.new is not None and row.differs:
            marks[row.new] = "fo-inserted" if row.old is None else "fo-changed"
    return marks


def _tree_html(lines: list[GoldenLine], marks: dict[int, str]) -> str:
    """The calls as nested lists; a call with calls inside is a `<details>` element."""
    parents, ends = _structure(lines)
    to_open = set()
    for index in marks:
        parent = parents[index]
        while parent is not None and parent not in to_open:
            to_open.add(parent)
            parent = parents[parent]
    counts: dict[str, int] = {}
    for line in lines:
        counts[line.path] = counts.get(line.path, 0) + 1
    open_depth = 10**9 if len(lines) <= _OPEN_WHOLE else _OPEN_DEPTH
    bars = [
        (facet, measured)
        for facet in bar_facets()
        if (measured := bar_measures(facet, lines)) is not None
    ]
    parts = ['<ul class="fo-tree">']
    open_depths: list[int] = []
    for index, line in enumerate(lines):
        while open_depths and open_depths[-1] >= line.depth:
            open_depths.pop()
            parts.append("</ul></details></li>")
        classes = " ".join(
            ["fo-node", *([] if line.registered else ["fo-unregistered"])]
            + ([marks[index]] if index in marks else [])
        )
        attributes = (
            f'class="{classes}" data-path="{html.escape(line.path)}" '
            f'data-type="{html.escape(line.module_type)}"'
        )
        nested = ends[index] - index - 1
        row = _call_html(line, counts[line.path], nested)
        for facet, (measures, total) in bars:
            measure = measures[index]
            if measure is not None:
                row += bar_html(facet, measure, total)
        facts = "".join(f'<div class="fo-fact">{html.escape(fact)}</div>' for fact in line.facts)
        facts_html = f'<div class="fo-facts">{facts}</div>' if facts else ""
        if nested:
            is_open = line.depth < open_depth or index in to_open
            parts.append(
                f"<li {attributes}><details{' open' if is_open else ''}>"
                f"<summary>{row}</summary>{facts_html}<ul>"
            )
            open_depths.append(line.depth)
        else:
            parts.append(
                f"<li {attributes.replace('fo-node', 'fo-node fo-leaf', 1)}>"
                f'<div class="fo-row">{row}</div>{facts_html}</li>'
            )
    parts += ["</ul></details></li>"] * len(open_depths)
    parts.append("</ul>")
    return "".join(parts)


def _structure(lines: list[GoldenLine]) -> tuple[list[int | None], list[int]]:
    """Each line's parent index (None at the top) and the index after its last descendant."""
    parents: list[int | None] = []
    ends = [len(lines)] * len(lines)
    stack: list[int] = []
    for index, line in enumerate(lines):
        while stack and lines[stack[-1]].depth >= line.depth:
            ends[stack.pop()] = index
        parents.append(stack[-1] if stack else None)
        stack.append(index)
    return parents, ends


def _call_html(line: GoldenLine, calls_of_module: int, nested: int) -> str:
    if line.module_type == "?":  # a line that does not parse as a call: shown as it is
        return f'<span class="fo-io">{html.escape(line.text.strip())}</span>'
    parts = [
        f'<span class="fo-path">{html.escape(line.path)}</span>: '
        f'<span class="fo-type">{html.escape(line.module_type)}</span>'
    ]
    if calls_of_module > 1:
        parts.append(
            f' <span class="fo-reuse" title="this module is called {calls_of_module} times">'
            f"#{line.nth} of {calls_of_module}</span>"
        )
    marks = [
        *(["frozen"] if line.frozen else []),
        *([line.mode] if line.mode else []),
        *([] if line.registered else ["unregistered"]),
        *(["scripted"] if line.scripted else []),
    ]
    parts += [f' <span class="fo-mark fo-mark-{mark}">[{mark}]</span>' for mark in marks]
    parts.append(
        f' <span class="fo-io">{html.escape(line.inputs)} -&gt; {html.escape(line.outputs)}</span>'
    )
    if nested:
        parts.append(f' <span class="fo-nested">({plural(nested, "call")} inside)</span>')
    return "".join(parts)


def _diff_html(difference: TraceDiff, status: str) -> str:
    """The summary, then old and new calls side by side with the changed rows highlighted."""
    if not difference:
        return '<div class="fo-summary">no differences</div>'
    summary = f'<div class="fo-summary">{html.escape(difference.summary())}</div>'
    rows = aligned_rows(difference)
    moved_old: set[int] = {
        change.position
        for change in difference.changes
        if change.kind is ChangeKind.MOVED and change.position is not None
    }
    moved_new = {new for old, new in difference.pairs if old in moved_old}
    kinds: dict[int, list[str]] = {}
    for change in difference.changes:
        if change.kind not in _ONE_SIDED and change.position is not None:
            kinds.setdefault(change.position, []).append(change.kind_words)
    shown = rows_to_show(rows, _DIFF_CONTEXT)
    table = [
        '<table class="fo-diff"><thead><tr><th>golden file (before)</th>'
        f"<th>{'this run' if status == 'failed' else 'written by this run'}</th></tr></thead>"
        "<tbody>"
    ]
    skipped = 0
    for position, row in enumerate(rows):
        if not shown[position]:
            skipped += 1
            continue
        if skipped:
            table.append(_skip_row(skipped))
            skipped = 0
        table.append(_diff_row(difference, row, moved_old, moved_new, kinds))
    if skipped:
        table.append(_skip_row(skipped))
    table.append("</tbody></table>")
    header = ""
    if difference.header_changes:
        lines = "".join(
            f'<div class="{"fo-old" if line.startswith("-") else "fo-new"}">'
            f"{html.escape(line)}</div>"
            for line in difference.header_changes
        )
        header = f'<h3>Header</h3><div class="fo-summary fo-header-diff">{lines}</div>'
    return f"<h3>What changed</h3>{summary}{''.join(table)}{header}"


def _diff_row(
    difference: TraceDiff,
    row: DiffRow,
    moved_old: set[int],
    moved_new: set[int],
    kinds: dict[int, list[str]],
) -> str:
    old_line = difference.old_lines[row.old] if row.old is not None else None
    new_line = difference.new_lines[row.new] if row.new is not None else None
    if not row.differs:
        kind = "fo-same"
    elif row.old in moved_old or row.new in moved_new:
        kind = "fo-moved"
    elif old_line is None:
        kind = "fo-inserted"
    elif new_line is None:
        kind = "fo-removed"
    else:
        kind = "fo-changed"
    old_facts = set(old_line.facts) if old_line is not None else set()
    new_facts = set(new_line.facts) if new_line is not None else set()
    old_cell = _diff_cell(old_line, new_facts if new_line is not None else None, row.differs)
    new_cell = _diff_cell(new_line, old_facts if old_line is not None else None, row.differs)
    label = ""
    if row.new is not None and row.new in kinds:
        label = f' <span class="fo-kinds">({", ".join(kinds[row.new])})</span>'
    elif kind == "fo-moved":
        label = ' <span class="fo-kinds">(moved)</span>'
    old_path = html.escape(old_line.path) if old_line is not None else ""
    new_path = html.escape(new_line.path) if new_line is not None else ""
    return (
        f'<tr class="{kind}" data-old-path="{old_path}" data-new-path="{new_path}">'
        f'<td class="fo-old">{old_cell}</td><td class="fo-new">{new_cell}{label}</td></tr>'
    )


def _diff_cell(line: GoldenLine | None, other_facts: set[str] | None, differs: bool) -> str:
    """A call and, where the row differs, the fact lines (those the other side lacks in bold)."""
    if line is None:
        return ""
    parts = [html.escape(line.text)]
    if differs:
        indent = "  " * (line.depth + 1)
        for fact in line.facts:
            if other_facts is not None and fact in other_facts:
                continue  # facts both sides share would only push the changes out of view
            parts.append(
                f'\n<span class="fo-fact-changed">{indent}{FACT_PREFIX}{html.escape(fact)}</span>'
            )
    return "".join(parts)


def _skip_row(count: int) -> str:
    return f'<tr class="fo-skip"><td colspan="2">… {plural(count, "unchanged call")} …</td></tr>'
