"""A plugin facet's facts in golden text (facets/protocol.py): written, read back into the
facet's typed values once, and put back where the facet calls two goldens' values the same.
No torch, and no facet named: each facet's own `render`, `parse` and `same` decide.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.golden.format import FACT_PREFIX, escape_line_breaks

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_fwdorder.facets.protocol import Facet


def render_facet_fact(facet: Facet, value: object) -> str:
    """A plugin facet's value as a fact line's text: `output elements: 4,096`."""
    return f"{facet.title}: {escape_line_breaks(facet.render(value))}"


def read_facet_values(
    facts: tuple[str, ...], facets: dict[str, Facet]
) -> tuple[tuple[Facet, Any], ...]:
    """The values of the facets among a call's fact lines, each read once by its facet."""
    found = []
    for fact in facts:
        title, _, text = fact.partition(": ")
        facet = facets.get(title)
        if facet is not None:
            found.append((facet, facet.parse(text)))
    return tuple(found)


def within_facets(old_text: str, new_text: str, facets: Sequence[Facet]) -> str:
    """`new_text` with each facet fact that its facet calls the `same` as the golden's put
    back to the golden's own text, so that only values that differ by the facet's rule do.

    Facts are paired through the lines around them (the calls they belong to), as
    fingerprints are, so a golden that also differs in structure keeps its matching facts.
    """
    starts = {f"{FACT_PREFIX}{facet.title}: ": facet for facet in facets}
    if not any(start in new_text for start in starts):
        return new_text
    old_lines = old_text.splitlines(keepends=True)
    new_lines = new_text.splitlines(keepends=True)
    old_keys, new_keys = _keys(old_lines, starts), _keys(new_lines, starts)
    if old_keys == new_keys:
        pairs: list[tuple[int, int]] = [(number, number) for number in range(len(new_lines))]
    else:
        matcher = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False)
        pairs = [
            (block.a + offset, block.b + offset)
            for block in matcher.get_matching_blocks()
            for offset in range(block.size)
        ]
    for old_number, new_number in pairs:
        old_line, new_line = old_lines[old_number], new_lines[new_number]
        start = new_keys[new_number].lstrip(" ")
        facet = starts.get(start)
        if old_line == new_line or facet is None:
            continue
        old_value = facet.parse(old_line.split(start, 1)[1].rstrip("\n"))
        new_value = facet.parse(new_line.split(start, 1)[1].rstrip("\n"))
        if facet.same(old_value, new_value):
            new_lines[new_number] = old_line
    return "".join(new_lines)


def _keys(lines: list[str], starts: dict[str, Facet]) -> list[str]:
    """Each line, with a facet fact's text left out: what pairs the facts."""
    keys = []
    for line in lines:
        stripped = line.lstrip(" ")
        start = next((start for start in starts if stripped.startswith(start)), None)
        keys.append(line if start is None else line[: len(line) - len(stripped)] + start)
    return keys
