"""The HTML report's bar per call for each facet that draws one (costs: the FLOPs): its style,
each call's measure read from its facts, and the bar with the facet's words. No facet named:
each one's `bar_class`, `bar_measure` and `bar_words` decide (calls/facet_records.py).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from pytest_fwdorder.golden.format import FACT_PREFIX, FACT_TITLES, GoldenLine
from pytest_fwdorder.golden.line_facts import facts_of
from pytest_fwdorder.hookspecs import trace_facets

# The style of a facet's bars (`bar_class`, calls/facet_records.py): only a page or display
# with such a facet's facts carries it, so one without is what it always was.
BAR_STYLE = """
.fwdorder .{name} {{ display: inline-block; width: 80px; height: 8px; margin-left: 8px;
  background: #eaeef2; border-radius: 2px; vertical-align: middle; }}
.fwdorder .{name}-bar {{ display: block; height: 100%; background: #bc4c00;
  border-radius: 2px; }}
.fwdorder .{name}-figure {{ color: #953800; margin-left: 4px; }}
"""


def bar_facets() -> list[Any]:
    """The registered facets that draw a bar per call (`bar_class`, calls/facet_records.py)."""
    return [facet for facet in trace_facets(FACT_TITLES) if hasattr(facet, "bar_class")]


def bars_style(texts: Sequence[str]) -> str:
    """The style of each facet's bars that one of the goldens has facts of."""
    return "".join(
        BAR_STYLE.format(name=facet.bar_class)
        for facet in bar_facets()
        # Fact lines are indented at least two spaces; their line breaks are escaped.
        if any(f"  {FACT_PREFIX}{facet.title}: " in text for text in texts)
    )


def bar_measures(facet: Any, lines: list[GoldenLine]) -> tuple[list[int | None], int] | None:
    """Each call's measure by a facet's facts (`bar_measure`), and their sum over the
    outermost calls (the whole forward's); None when no outermost call has one."""

    def measure_of(line: GoldenLine) -> int | None:
        text = facts_of(line).by_title.get(facet.title)
        value = None if text is None else facet.read_call_fact(text)
        return None if value is None else int(facet.bar_measure(value))

    # The outermost calls first: a golden without the facet's facts reads no other line.
    known = [
        measure for line in lines if line.depth == 0 and (measure := measure_of(line)) is not None
    ]
    return ([measure_of(line) for line in lines], sum(known)) if known else None


def bar_html(facet: Any, measure: int, total: int) -> str:
    """A bar as long as the call's share of the whole forward's measure, and the figures."""
    share = measure / total if total else 0.0
    title, figure = facet.bar_words(measure, total)
    return (
        f'<span class="{facet.bar_class}" title="{html.escape(title)}">'
        f'<span class="{facet.bar_class}-bar" style="width: {100 * share:.1f}%"></span></span>'
        f'<span class="{facet.bar_class}-figure">{html.escape(figure)}</span>'
    )
