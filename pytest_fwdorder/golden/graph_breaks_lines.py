"""The graph breaks facet's golden text (`graph_breaks=True`): the header's graph breaks
and recompilations sections, written and read back. No torch."""

from __future__ import annotations

import re

from pytest_fwdorder.calls.facet_records import CompileRecords
from pytest_fwdorder.golden.format import _SECTION_ITEM, header_sections, render_section

GRAPH_BREAKS_SECTION = "graph breaks"
RECOMPILATIONS_SECTION = "recompilations on a second call"
# `# graph breaks (1 break, 2 graphs, backend eager):`
_GRAPH_BREAKS_TITLE = re.compile(
    rf"# {GRAPH_BREAKS_SECTION} \((?P<breaks>[0-9]+) breaks?, (?P<graphs>[0-9]+) graphs?, "
)


def render_compiled(records: CompileRecords) -> list[str]:
    """The header's compile sections (`graph_breaks=True`): the graph breaks, each with the
    module call, the reason and the user's line, then what a second call compiled again.

        # graph breaks (1 break, 2 graphs, backend eager):
        #   block.1 (call 1): data-dependent branch on a tensor's value at model.py:42
        # recompilations on a second call (0)
    """
    count, graphs = len(records.breaks), records.graphs
    title = (
        f"# {GRAPH_BREAKS_SECTION} ({count} break{'s' if count != 1 else ''}, "
        f"{graphs} graph{'s' if graphs != 1 else ''}, backend {records.backend})"
    )
    lines = [title + (":" if records.breaks else "")]
    lines += [
        f"{_SECTION_ITEM}{found.module_path} (call {found.call_number}): {found.reason} at "
        f"{found.source}"
        for found in records.breaks
    ]
    return lines + render_section(
        RECOMPILATIONS_SECTION,
        [
            f"{again.module_path}: {again.source} after the guard {again.guard} failed"
            for again in records.recompilations
        ],
    )


def graph_break_counts(header: list[str]) -> tuple[int, int] | None:
    """(graph breaks, graphs) from the header's graph breaks title; None without one."""
    for line in header:
        match = _GRAPH_BREAKS_TITLE.match(line)
        if match:
            return int(match.group("breaks")), int(match.group("graphs"))
    return None


def graph_break_items(header: list[str]) -> list[str]:
    """The graph breaks section's items, `block.1 (call 1): ... at model.py:42`."""
    return header_sections(header).get(GRAPH_BREAKS_SECTION, [])


def recompilation_items(header: list[str]) -> list[str]:
    """The recompilations section's items, `<root>: model.py:10 after the guard ... failed`."""
    return header_sections(header).get(RECOMPILATIONS_SECTION, [])
