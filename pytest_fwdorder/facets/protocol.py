"""What a facet is: one module that records a value per call, writes it, reads it back,
compares it and words a change. No torch.

A facet is any object with the members of `Facet`. A plugin (a `conftest.py`, an installed
plugin, or `plugin_manager().register(...)` outside pytest) offers its facets through the
`pytest_fwdorder_facets` hook; every trace then records them, and the golden, the diff,
the pytest failure and the HTML report carry them without naming any:

    class OutputElements:
        title = "output elements"
        change_words = "output elements changed"

        def observe(self, output):  # as each call ends; None: nothing to write
            return sum(t.numel() for t in tensors_in(output)) or None

        def render(self, value):
            return f"{value:,}"

        def parse(self, text):
            return int(text.replace(",", ""))

        def same(self, old, new):
            return old == new

        def describe_change(self, old, new):
            return f"{old:,} -> {new:,}"

writes `| output elements: 4,096` under each call whose output holds tensors, and a
change reads `output elements changed at 1 call: fc (Linear): 40 -> 80`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

# A title is how the golden names the fact (`| output elements: ...`): lowercase words, so
# that it can never be mistaken for a call line or a header section.
_TITLE = re.compile(r"[a-z][a-z0-9_]*( [a-z0-9_]+)*")


@runtime_checkable
class Facet(Protocol):
    """One facet of a trace: a value per call, as it is recorded, written, read and compared.

    `title` names the fact in the golden (`| title: text`, after the call's other facts);
    `change_words` name a change in a diff's summary (`output elements changed`).
    `observe` gets each call's output as the call ends and returns the value to keep, or
    None for nothing (no fact line). `render` writes a value as one line of text and
    `parse` reads that text back into an equal value; `same` says whether two values match
    (exactly, or within a tolerance of the facet's choosing); `describe_change` words the
    difference of two that do not.
    """

    title: str
    change_words: str

    def observe(self, output: object) -> Any: ...

    def render(self, value: Any) -> str: ...

    def parse(self, text: str) -> Any: ...

    def same(self, old: Any, new: Any) -> bool: ...

    def describe_change(self, old: Any, new: Any) -> str: ...


def checked_facets(offered: Iterable[object], taken_titles: Sequence[str]) -> tuple[Facet, ...]:
    """The facets plugins offered, each checked once: a `Facet` with a title of its own.

    `taken_titles` are the fact titles the golden already uses (`settings`, `costs`, ...).
    Raises TypeError for an object that is not a facet and ValueError for a title that is
    malformed or taken.
    """
    facets: list[Facet] = []
    titles = set(taken_titles)
    for facet in offered:
        if not isinstance(facet, Facet):
            missing = [name for name in _MEMBERS if not hasattr(facet, name)]
            raise TypeError(
                f"pytest_fwdorder_facets returned {facet!r}, which is no facet: it lacks "
                f"{', '.join(missing)}; give it every member of pytest_fwdorder.Facet"
            )
        if not isinstance(facet.title, str) or not _TITLE.fullmatch(facet.title):
            raise ValueError(
                f"facet {facet!r} has the title {facet.title!r}: a title is lowercase words "
                "(letters, digits, underscores) such as 'output elements'"
            )
        if facet.title in titles:
            raise ValueError(
                f"facet {facet!r} has the title {facet.title!r}, which another fact of the "
                "golden already uses: give it a title of its own"
            )
        titles.add(facet.title)
        facets.append(facet)
    return tuple(facets)


_MEMBERS = ("title", "change_words", "observe", "render", "parse", "same", "describe_change")
