"""The golden file's reader: golden text -> its header lines and its call lines, each split
into its parts (`parse_golden`), and the checks that it is this format, whole. No torch.

`golden.format` spells each kind of line; this module reads the call lines back in one pass,
linear in the lines, each line made once with its facts and the facets' lines under it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.golden.facet_facts import call_line_marks, facets_in_text, read_facet_values
from pytest_fwdorder.golden.format import (
    CALLS_PREFIX,
    DIRECT_MARK,
    END_SECTION_TITLE,
    ENVIRONMENT_PREFIX,
    FACT_PREFIX,
    FOLDED_PATTERN,
    FORMAT_PATTERN,
    FORMAT_VERSION,
    FROZEN_MARK,
    MODE_MARKS,
    SCRIPTED_MARK,
    UNREGISTERED_MARK,
    GoldenLine,
)
from pytest_fwdorder.golden.garbage_collection import without_garbage_collection
from pytest_fwdorder.golden.header import GoldenHeader

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import Facet


def end_sections_start(header: Sequence[str]) -> int:
    """Where the facets' sections after the calls begin among the header lines
    `parse_golden` gives: the index of the first one's title line, or the length."""
    titles = (index for index, line in enumerate(header) if END_SECTION_TITLE.fullmatch(line))
    return next(titles, len(header))


def end_section(header: Sequence[str], title: str) -> list[str] | None:
    """The lines of the section titled `title` after the calls (`backward:` ...), without
    its title line, from the header lines `parse_golden` gives; None when there is none."""
    if f"{title}:" not in header:
        return None
    lines = header[header.index(f"{title}:") + 1 :]
    return list(lines[: end_sections_start(lines)])


def format_problem(text: str) -> str | None:
    """Why golden text of another format cannot be compared, as a clause after its name
    (`the golden file ` + clause), or None when it is of this format.

    A newer format says to upgrade: regenerating would downgrade a teammate's golden.
    """
    version = format_version(text)
    if version == FORMAT_VERSION:
        return None
    if not text.strip():
        return (
            "is empty: restore it from version control, or write it with `pytest "
            "--snapshot-update` and review the new golden"
        )
    if version is not None and version > FORMAT_VERSION:
        return (
            f"was written in format {version} by a newer pytest-fwdorder; this one reads "
            f"and writes format {FORMAT_VERSION}: upgrade pytest-fwdorder (pip install -U "
            "pytest-fwdorder) rather than regenerate it, which would downgrade the golden"
        )
    written = f"format {version}" if version is not None else "an unknown format"
    return (
        f"was written in {written}; this pytest-fwdorder writes format {FORMAT_VERSION}: "
        "regenerate it with `pytest --snapshot-update` and review the new golden (see the "
        "CHANGELOG for what the format adds)"
    )


def format_version(text: str) -> int | None:
    """The format number a golden text declares in its first line, or None."""
    first_line = text.split("\n", 1)[0]
    match = FORMAT_PATTERN.fullmatch(first_line.strip())
    return int(match.group(1)) if match else None


def declared_and_written_calls(text: str) -> tuple[int | None, int]:
    """The call count the header's `# calls: N` line declares (None without one), and the
    calls the body holds: its call lines plus the calls folded into them."""
    declared = None
    for line in text.splitlines():
        if line.startswith(CALLS_PREFIX) and line[len(CALLS_PREFIX) :].strip().isdigit():
            declared = int(line[len(CALLS_PREFIX) :])
            break
    _, lines = parse_golden(text)
    folded = sum(
        int(match.group(1)) for line in lines if (match := FOLDED_PATTERN.search(line.text))
    )
    return declared, len(lines) + folded


@without_garbage_collection
def parse_golden(text: str, facets: Sequence[Facet] = ()) -> tuple[GoldenHeader, list[GoldenLine]]:
    """Split golden text into its header (its lines, the facets' sections after the calls
    among them, read into facts once as they are asked for) and its call lines.

    Lines that do not parse as calls (a hand-edited file) are kept as calls of type `?`
    so that a diff still shows them. The facts of `facets` (the built-in ones and the plugins') are read
    into typed values, once, on each line's `facet_values`.
    """
    header: list[str] = []
    calls: list[tuple[str, str]] = []  # each call line, with and without its indent
    # Facts and the lines under calls are gathered by call and each line made once at the
    # end: making a line again per fact made the parse of a large golden cost twice.
    facts: dict[int, list[str]] = {}
    # A facet's line under a call (`~ relu(...)`) goes to the call it is indented under: the
    # last call one level up.
    marks = call_line_marks()
    last_at_depth: dict[int, int] = {}
    under: dict[int, list[str]] = {}
    at_end = False  # in the facets' sections after the calls
    for raw in text.splitlines():
        if not raw or raw.isspace():
            continue
        if raw[0] == "#":
            if not raw.startswith(ENVIRONMENT_PREFIX):
                header.append(raw)
            continue
        # A call line seldom ends with a colon: the check costs one comparison per call.
        if at_end or (raw[-1] == ":" and END_SECTION_TITLE.fullmatch(raw)):
            at_end = True  # the facets read their sections from the header lines
            header.append(raw)
            continue
        fact = raw.lstrip(" ")
        if fact.startswith(FACT_PREFIX) and calls:
            facts.setdefault(len(calls) - 1, []).append(fact[len(FACT_PREFIX) :])
            continue
        if fact.startswith(marks) and calls:
            owner = last_at_depth.get((len(raw) - len(fact)) // 2 - 1, len(calls) - 1)
            under.setdefault(owner, []).append(fact)
            continue
        last_at_depth[(len(raw) - len(fact)) // 2] = len(calls)
        calls.append((raw, fact))
    if not facts and not under:
        return GoldenHeader.of(header), [_call_line(raw, stripped) for raw, stripped in calls]
    lines = _lines_with_facts(calls, facts, under, facets_in_text(text, facets))
    return GoldenHeader.of(header), lines


def _lines_with_facts(
    calls: list[tuple[str, str]],
    facts: dict[int, list[str]],
    under: dict[int, list[str]],
    facets: Sequence[Facet],
) -> list[GoldenLine]:
    """The call lines, each with its facts and the lines under it, and its facets' values
    read once.

    Each line is made once, with its facets' values: making it again with them cost more
    than reading them.
    """
    by_title = {facet.title: facet for facet in facets}
    values_of = (
        {number: read_facet_values(tuple(found), by_title) for number, found in facts.items()}
        if by_title
        else {}
    )
    return [
        _call_line(
            raw,
            stripped,
            tuple(facts.get(number, ())),
            tuple(under.get(number, ())),
            values_of.get(number, ()),
        )
        for number, (raw, stripped) in enumerate(calls)
    ]


def parse_call_line(raw: str) -> GoldenLine:
    """Parse one call line as `golden_lines` writes it."""
    return _call_line(raw, raw.lstrip(" "))


def _call_line(
    raw: str,
    stripped: str,
    facts: tuple[str, ...] = (),
    under: tuple[str, ...] = (),
    facet_values: tuple[tuple[Facet, Any], ...] = (),
) -> GoldenLine:
    """The call line `raw` (`stripped` being it without its indent) with its facts, the
    lines under it and its facets' values; a line that is not a call line is a call of
    type `?`."""
    depth = (len(raw) - len(stripped)) // 2
    parts = call_line_parts(stripped)
    if parts is None:
        unknown = (depth, stripped, "?", 1, True, "", "", raw)
        return GoldenLine(*unknown, facts=facts, under=under, facet_values=facet_values)
    path, words, signature = parts
    signature = signature[1:]  # without the space before the inputs
    module_type, nth, registered, frozen, reused, scripted = words[0], 1, True, False, False, False
    mode, direct = "", False
    for word in words[1:]:
        if word.startswith("#") and word[1:].isdigit():
            nth, reused = int(word[1:]), True
        elif word == UNREGISTERED_MARK:
            registered = False
        elif word == FROZEN_MARK:
            frozen = True
        elif word == SCRIPTED_MARK:
            scripted = True
        elif word == DIRECT_MARK:
            direct = True
        elif word in MODE_MARKS:
            mode = word[1:-1]
    close = _matching_close(signature)
    inputs = signature[: close + 1]
    outputs = signature[close + 1 :].removeprefix(" -> ")
    return GoldenLine(
        depth,
        path,
        module_type,
        nth,
        registered,
        inputs,
        outputs,
        raw,
        frozen,
        reused,
        scripted,
        mode,
        facts,
        under,
        direct,
        facet_values=facet_values,
    )


def call_line_parts(stripped: str) -> tuple[str, list[str], str] | None:
    """A call line without its indent, cut at its parts: the path, the words of its head
    (class, `#nth`, marks) and the rest from the space before the inputs; None when the line
    is not a call line (a hand-edited file).
    """
    path, separator, rest = stripped.partition(": ")
    open_paren = rest.find(" (")
    if not separator or open_paren < 0:
        return None
    return path, rest[:open_paren].split(" "), rest[open_paren:]


# What `_matching_close` looks at: brackets, quotes and the backslash that escapes in quotes.
_BRACKET_OR_QUOTE = re.compile(r"""[()\[\]{}'"\\]""")


# `(f32[1,16], 2)`: parentheses around text without brackets or quotes but shapes' `[...]`;
# its last character closes the first, since nothing inside opens or closes a level.
_SIMPLE_INPUTS = re.compile(r"""\((?:[^()\[\]{}'"\\]|\[[^()\[\]{}'"\\]*\])*\)""")


def _matching_close(text: str) -> int:
    """Index of the bracket that closes the one at text[0], skipping quoted strings.

    Reads only the brackets and quotes (one regular-expression scan), not each character:
    the inputs of a call line are mostly shapes and names. Inputs with no nesting but
    shapes' `[...]` and no quotes, most of them, are matched whole by one expression.
    """
    simple = _SIMPLE_INPUTS.match(text)
    if simple is not None:
        return simple.end() - 1
    level = 0
    quote = ""
    skipped = -1  # the index after a backslash in quotes: an escaped character
    for match in _BRACKET_OR_QUOTE.finditer(text):
        index = match.start()
        if index == skipped:
            continue
        character = match.group()
        if quote:
            if character == "\\":
                skipped = index + 1
            elif character == quote:
                quote = ""
        elif character in "'\"":
            quote = character
        elif character in "([{":
            level += 1
        elif character in ")]}":
            level -= 1
            if level == 0:
                return index
    return len(text) - 1
