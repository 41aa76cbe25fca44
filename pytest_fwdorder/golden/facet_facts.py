"""A facet's facts in golden text (calls/facet_records.py): written, read back into the
facet's typed values once, and put back where the facet calls two goldens' values the same.
No torch, and no facet named: each facet's own `render`, `parse` and `same` decide.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.golden.format import FACT_PREFIX, FACT_TITLES, escape_line_breaks
from pytest_fwdorder.hookspecs import call_line_writers

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pytest_fwdorder.calls.facet_records import Facet


def render_facet_fact(facet: Facet, value: object) -> str:
    """A facet's value as a fact line's text: `output elements: 4,096`."""
    return f"{facet.title}: {escape_line_breaks(facet.render(value))}"


def facet_header_lines(facets: Sequence[Facet]) -> list[str]:
    """The header lines of the facets that write one (`header_line`), in their order."""
    lines = []
    for facet in facets:
        header_line = getattr(facet, "header_line", None)
        if header_line is not None:
            lines.append(str(header_line()))
    return lines


def facets_in_text(text: str, facets: Sequence[Facet]) -> tuple[Facet, ...]:
    """The facets whose facts `text` holds: reading the others' facts would find nothing."""
    return tuple(facet for facet in facets if f"{FACT_PREFIX}{facet.title}: " in text)


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


def call_line_marks() -> tuple[str, ...]:
    """The marks that start the registered facets' lines under the calls (`~ `): what sets
    them apart from call lines."""
    return tuple(facet.line_mark for facet in call_line_writers(FACT_TITLES))


def within_facets(old_text: str, new_text: str, facets: Sequence[Facet]) -> str:
    """`new_text` with each facet fact that its facet calls the `same` as the golden's put
    back to the golden's own text, so that only values that differ by the facet's rule do."""
    starts = {f"{FACT_PREFIX}{facet.title}: ": facet for facet in facets}
    if old_text == new_text or not any(start in new_text for start in starts):
        return new_text
    any_start = tuple(starts)

    def start_of(line: str) -> str | None:
        stripped = line.lstrip(" ")
        if not stripped.startswith(any_start):  # most lines: one test for every facet
            return None
        return next(start for start in any_start if stripped.startswith(start))

    def same(start: str, old: str, new: str) -> bool:
        facet = starts[start]
        return bool(facet.same(facet.parse(old), facet.parse(new)))

    return facts_put_back(old_text, new_text, start_of, same)


def facts_put_back(
    old_text: str,
    new_text: str,
    start_of: Callable[[str], str | None],
    same: Callable[[str, str, str], bool],
) -> str:
    """`new_text` with each fact line that `same` calls equal to its golden's put back to the
    golden's text: how a tolerance (values, a plugin facet's) keeps a golden holding.

    `start_of(line)` gives a compared fact line's start (`| values: `), None for any other
    line; `same(start, old, new)` compares two facts' texts after it. Facts are paired
    through the lines around them (the calls they belong to), so a golden that also
    differs in structure keeps its matching facts.
    """
    old_lines = old_text.splitlines(keepends=True)
    new_lines = new_text.splitlines(keepends=True)
    old_keys, new_keys = _keys(old_lines, start_of), _keys(new_lines, start_of)
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
        start = start_of(new_line)
        if old_line == new_line or start is None:
            continue
        old_fact = old_line.split(start, 1)[1].rstrip("\n")
        if same(start, old_fact, new_line.split(start, 1)[1].rstrip("\n")):
            new_lines[new_number] = old_line
    return "".join(new_lines)


def _keys(lines: list[str], start_of: Callable[[str], str | None]) -> list[str]:
    """Each line, with a compared fact's text left out: what pairs the facts."""
    keys = []
    for line in lines:
        start = start_of(line)
        keys.append(line if start is None else line.split(start, 1)[0] + start)
    return keys
