"""The part of the facet protocol for lines under the calls (`CallLineWriter`), and the
record of one such line (`LineUnderCall`). Plain, no torch; `facet_records.py` holds the rest
of the protocol, whose `TraceFacetMembers` names these members.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeGuard

from pytest_fwdorder.calls.value_descriptions import ValueDescription


class LineUnderCall(NamedTuple):
    """A line under a call (`CallLineWriter`): the call's index, how many calls of the trace
    had started when it happened (the body writes it after them), its text after the mark.

    A named tuple: a facet gives one per operation, and a frozen dataclass costs several
    times more to make."""

    call_index: int
    after: int
    text: str


class CallLineWriter(Protocol):
    """A facet with one value per trace that writes lines under the calls (operations).

    `line_mark` starts each line (a character and a space, not `| `). `call_lines` gives them
    in the order they are written (`after` never decreasing), `text_of` writing a value as
    the golden does. The body puts each after the first `after` calls, indented under its
    call (dropped with a call a view leaves out); `GoldenLine.under` holds a call's, marks
    included, and a golden line gives their `read_call_line` values by title (`line.values_under("operations")`).

    It may also have `describe_call_line_change(old, new)`: the words for a line of two
    paired calls that changed (both values), was inserted (`old` None) or removed (`new`
    None), or None where the facet's rule calls it no change; a diff counts each under the
    facet's `change_words` (`opened changed at 2 calls: ...`). A facet whose changes have
    kinds of their own (`change_kinds`, calls/change_kinds.py) gives them instead:
    `line_changes(old_values, new_values)`, (kind's name, words) each (operations:
    `("operation inserted", "softmax (op 2 of 4)")`). And `picture_label(value)`:
    what a picture's node for a line shows (operations: `relu -> f32[2,16]`); without it,
    the line's text.
    """

    title: str
    change_words: str
    line_mark: str

    def call_lines(
        self, value: Any, trace: Any, text_of: Callable[[ValueDescription | None], str]
    ) -> Sequence[LineUnderCall]: ...

    def read_call_line(self, text: str) -> Any: ...


def writes_call_lines(facet: object) -> TypeGuard[CallLineWriter]:
    """Whether the facet writes lines under the calls (`line_mark`)."""
    return hasattr(facet, "line_mark")


# A mark: one character that starts no other line of the golden (a fact's `|`, the header's
# `#`, a letter, digit or `<` of a call's path), then a space.
_LINE_MARK = re.compile(r"[^\w\s|#<] ")


def check_line_mark(facet: object, marks: dict[str, str]) -> None:
    """Raises ValueError for a facet that writes lines under the calls with a `line_mark`
    the golden's reader could not tell apart from other lines, or that another facet of
    `marks` (mark -> title) uses; else adds it there. Nothing for another facet."""
    if not writes_call_lines(facet):
        return
    mark = facet.line_mark
    if not isinstance(mark, str) or not _LINE_MARK.fullmatch(mark):
        raise ValueError(
            f"facet {facet.title!r} has the line mark {mark!r}: a mark is one character "
            "other than a letter, a digit, '|', '#' or '<', then a space, such as '% '"
        )
    if mark in marks:
        raise ValueError(
            f"facet {facet.title!r} has the line mark {mark!r}, which the facet "
            f"{marks[mark]!r} already uses: give it a mark of its own"
        )
    marks[mark] = facet.title
