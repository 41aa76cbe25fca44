"""The initialization section's writer, kept only for checks/structure.py, which imports it.

The initialization facet is one module (facets/initialization.py: its capture, these lines
written and read back, its words); this copy of its `render_initialization` goes once
checks/structure.py takes the lines from the facet (`INITIALIZATION.header_lines`). No torch.
"""

from __future__ import annotations

from pytest_fwdorder.calls.facet_records import InitializationRecords
from pytest_fwdorder.golden.format import SECTION_ITEM


def render_initialization(records: InitializationRecords) -> list[str]:
    """The header's initialization section, as facets/initialization.py writes it."""
    count = len(records.steps)
    seed = f", seed {records.seed}" if records.seed is not None else ""
    title = (
        f"# initialization ({count} step{'s' if count != 1 else ''}, "
        f"{records.draws:,} random draw{'s' if records.draws != 1 else ''}{seed})"
    )
    lines = [title + (":" if records.steps else "")]
    for step in records.steps:
        draws = f" {step.draws:,} draw{'s' if step.draws != 1 else ''}" if step.draws else ""
        lines.append(f"{SECTION_ITEM}{step.target} {' '.join(step.operations)}{draws}")
    return lines
