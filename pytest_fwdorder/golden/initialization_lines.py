"""The initialization facet's golden text (`initialization=True`): the header's section of
initialization steps, written and read back. No torch.

    # initialization (3 steps, 544 random draws, seed 0):
    #   fc.weight kaiming_uniform_(a=2.236) 512 draws
    #   fc.bias uniform_(a=-0.1768, b=0.1768) 32 draws
"""

from __future__ import annotations

import re

from pytest_fwdorder.calls.facet_records import InitializationRecords
from pytest_fwdorder.golden.format import SECTION_ITEM, header_sections

INITIALIZATION_SECTION = "initialization"
INITIALIZATION_PREFIX = f"# {INITIALIZATION_SECTION} ("
_DRAWS = re.compile(r" ([0-9,]+) draws?$")


def render_initialization(records: InitializationRecords) -> list[str]:
    """The header's initialization section: a title with the totals, then one step a line."""
    count = len(records.steps)
    seed = f", seed {records.seed}" if records.seed is not None else ""
    title = (
        f"{INITIALIZATION_PREFIX}{count} step{'s' if count != 1 else ''}, "
        f"{records.draws:,} random draw{'s' if records.draws != 1 else ''}{seed})"
    )
    lines = [title + (":" if records.steps else "")]
    for step in records.steps:
        draws = f" {step.draws:,} draw{'s' if step.draws != 1 else ''}" if step.draws else ""
        lines.append(f"{SECTION_ITEM}{step.target} {' '.join(step.operations)}{draws}")
    return lines


def initialization_steps(header: list[str]) -> list[str] | None:
    """The initialization section's step lines (without `#   `), or None without a section."""
    return header_sections(header).get(INITIALIZATION_SECTION)


def initialization_step_parts(step: str) -> tuple[str, str, int]:
    """A step line as (target, operations, draws): `fc.weight`, `kaiming_uniform_(a=2.236)`, 512."""
    match = _DRAWS.search(step)
    draws = int(match.group(1).replace(",", "")) if match else 0
    body = step[: match.start()] if match else step
    if body.startswith("(temporary "):  # `(temporary f32[3,3]) randn(3, 3)`
        end = body.index(")") + 1
        return body[:end], body[end:].strip(), draws
    target, _, operations = body.partition(" ")
    return target, operations, draws
