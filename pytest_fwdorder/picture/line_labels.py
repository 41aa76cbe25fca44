"""The lines under the calls that a picture draws, and the words each node shows of one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.hookspecs import call_line_writers

if TYPE_CHECKING:
    from pytest_fwdorder.calls.call_line_facets import CallLineWriter


class LineLabels:
    """What a node shows of a line under a call, and its tooltip: the facet that wrote it
    (found by its mark) words it short (`picture_label`), else the line's text is shown.

    Made for the facets a picture is asked to draw (`of(titles)`): `drawn` keeps their lines.
    """

    def __init__(self, writers: Sequence[CallLineWriter]) -> None:
        self.writers = writers
        self.marks = tuple(facet.line_mark for facet in writers)

    @classmethod
    def of(cls, titles: Sequence[str]) -> LineLabels:
        """The labels of the registered facets titled `titles`; ValueError for another title."""
        known = {facet.title: facet for facet in call_line_writers(FACT_TITLES)}
        unknown = [titles] if isinstance(titles, str) else [t for t in titles if t not in known]
        if unknown:
            raise ValueError(
                f"cannot draw the lines under the calls of {', '.join(map(repr, unknown))}: "
                "name the titles of facets that write them, in a sequence such as "
                f"{tuple(sorted(known))!r}"
            )
        return cls([known[title] for title in titles])

    def drawn(self, under: Sequence[str]) -> tuple[str, ...]:
        """The lines under a call that these facets wrote, in their order."""
        return tuple(text for text in under if text.startswith(self.marks))

    def __call__(self, text: str) -> tuple[str, str]:
        for facet in self.writers:
            mark = facet.line_mark
            if text.startswith(mark):
                written = text[len(mark) :]
                label = getattr(facet, "picture_label", None)
                shown = written if label is None else label(facet.read_call_line(written))
                return shown, written
        return text, text
