"""Changes -> the aligned call lines of a diff: the changed calls with context (`-` old, `+`
new), their facts and operations, long unchanged runs elided. Pure functions on text, no torch.
"""

from __future__ import annotations

from pytest_fwdorder.diff.changes import DiffRow
from pytest_fwdorder.diff.ordered_pairing import changed_runs
from pytest_fwdorder.diff.places import plural
from pytest_fwdorder.golden.format import GoldenLine


def call_lines(
    rows: list[DiffRow],
    old_lines: list[GoldenLine],
    new_lines: list[GoldenLine],
    context: int,
    max_rows: int,
    *,
    leading_context: bool,
) -> list[str]:
    """The aligned calls as text (`-` old, `+` new), `context` unchanged rows around each
    change and longer unchanged runs elided, at most `max_rows` rows; without
    `leading_context` from the first changed row on."""
    show = rows_to_show(rows, context)
    start = 0
    if not leading_context:
        start = next((index for index, row in enumerate(rows) if row.differs), len(rows))
    lines: list[str] = []
    shown = 0
    skipped = 0
    for position in range(start, len(rows)):
        row = rows[position]
        if not show[position]:
            skipped += 1
            continue
        if skipped:
            lines.append(f"  ... {plural(skipped, 'unchanged call')} ...")
            skipped = 0
        if shown >= max_rows:
            remaining = sum(1 for later in rows[position:] if later.differs)
            lines.append(f"  ... {plural(remaining, 'more changed row')} not shown")
            return lines
        shown += 1
        if not row.differs and row.new is not None:
            lines.append(f"  {new_lines[row.new].text}")
            continue
        old_block = _block(old_lines[row.old]) if row.old is not None else []
        new_block = _block(new_lines[row.new]) if row.new is not None else []
        lines += _block_diff(old_block, new_block)
    if skipped:
        lines.append(f"  ... {plural(skipped, 'unchanged call')} ...")
    return lines


def _block(line: GoldenLine) -> list[str]:
    """A call line, the fact lines under it, and the facets' lines under it (`~ relu(...)`)."""
    return [line.text, *line.fact_lines, *line.under_lines]


def _block_diff(old_block: list[str], new_block: list[str]) -> list[str]:
    """Two calls with their facts: the call lines (`-` old, `+` new, or kept when equal),
    then the fact lines that differ. A call on one side only shows whole."""
    if not old_block or not new_block:
        return [*(f"- {text}" for text in old_block), *(f"+ {text}" for text in new_block)]
    if old_block[0] == new_block[0]:
        lines = [f"  {old_block[0]}"]
    else:
        lines = [f"- {old_block[0]}", f"+ {new_block[0]}"]
    old_facts, new_facts = old_block[1:], new_block[1:]
    # Only the runs that differ: facts both sides share would push changes out of view.
    for _, old_start, old_end, new_start, new_end in changed_runs(old_facts, new_facts):
        lines += [f"- {text}" for text in old_facts[old_start:old_end]]
        lines += [f"+ {text}" for text in new_facts[new_start:new_end]]
    return lines


def rows_to_show(rows: list[DiffRow], context: int) -> list[bool]:
    show = [False] * len(rows)
    last_change = -(10**9)
    for position, row in enumerate(rows):
        if row.differs:
            last_change = position
        show[position] = position - last_change <= context
    next_change = 10**9
    for position in range(len(rows) - 1, -1, -1):
        if rows[position].differs:
            next_change = position
        if next_change - position <= context:
            show[position] = True
    return show
