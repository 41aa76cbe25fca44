"""The facets' changes between two paired calls: each facet (a built-in one or a plugin's)
compares its own typed values and words the difference (calls/facet_records.py). Pure, no
torch, no facet named."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_fwdorder.diff.changes import Change, ChangeKind, declared_kinds
from pytest_fwdorder.diff.ordered_pairing import changed_runs
from pytest_fwdorder.golden.format import FACT_TITLES, GoldenLine
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.golden.line_facts import facts_of
from pytest_fwdorder.hookspecs import call_line_writers, trace_facets

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_fwdorder.calls.change_kinds import FacetChangeKind
    from pytest_fwdorder.calls.facet_records import TraceFacet


def facet_changes(old_line: GoldenLine, new_line: GoldenLine, position: int) -> list[Change]:
    """One change per facet whose values of two paired calls do not match by its own rule.

    A value on one side only (a plugin's facet added or dropped, or a call with nothing to
    observe) is a change too, in the facet's words; not for a facet an option switches on
    (`option`), whose absence on one side is that option, which the header says.
    The golden's side (`old_line`) decides whether two values are the same: its facet has
    the tolerance the golden is held to.
    """
    old_values = {facet.title: (facet, value) for facet, value in old_line.facet_values}
    new_values = {facet.title: (facet, value) for facet, value in new_line.facet_values}
    changes = []
    for title in dict.fromkeys([*old_values, *new_values]):
        # Every title comes from one side or both, so a side missing here has the other.
        old, new = old_values.get(title), new_values.get(title)
        if old is not None and new is not None:
            facet = old[0]
            if facet.same(old[1], new[1]):
                continue
            detail = facet.describe_change(old[1], new[1])
        elif new is not None:
            facet, detail = new[0], f"none -> {new[0].render(new[1])}"
        else:
            facet, value = old_values[title]
            detail = f"{facet.render(value)} -> none"
        if (old is None or new is None) and getattr(facet, "option", None) is not None:
            continue
        changes.append(_facet_change(facet, old_line, new_line, detail, position))
    return changes


def _facet_change(
    facet: Any,
    old_line: GoldenLine | None,
    new_line: GoldenLine | None,
    detail: str,
    position: int | None,
    values: tuple[Any, Any] | None = None,
    kind: FacetChangeKind | None = None,
) -> Change:
    """A change a facet found, counted under its `change_words` or the name of the `kind`
    it declares; with `values` (the two it compared) or a `kind`, the facet is kept, which
    sums them up (`summary_line`, `describe_kind_changes`)."""
    return Change(
        ChangeKind.FACET_CHANGED,
        old_line,
        new_line,
        detail,
        position,
        words=facet.change_words if kind is None else kind.name,
        facet=facet if values is not None or kind is not None else None,
        values=values,
        facet_kind=kind,
    )


def call_line_changes(old_line: GoldenLine, new_line: GoldenLine, position: int) -> list[Change]:
    """One change per line under a call that a facet finds changed, inserted or removed:
    of the kinds it declares (`line_changes`, operations'), or words it says, each counted under
    its `change_words` (`describe_call_line_change`, its lines paired as a line diff pairs
    them)."""
    changes = []
    for facet in call_line_writers(FACT_TITLES):
        mark = facet.line_mark
        old = [text for text in old_line.under if text.startswith(mark)]
        new = [text for text in new_line.under if text.startswith(mark)]
        if old == new:
            continue
        old_values = [facet.read_call_line(text[len(mark) :]) for text in old]
        new_values = [facet.read_call_line(text[len(mark) :]) for text in new]
        kinds_of = getattr(facet, "line_changes", None)
        if kinds_of is not None:
            changes += [
                _kind_change(facet, name, detail, old_line, new_line, position)
                for name, detail in kinds_of(old_values, new_values)
            ]
            continue
        describe = getattr(facet, "describe_call_line_change", None)
        if describe is None:
            continue
        details = []
        for tag, old_start, old_end, new_start, new_end in changed_runs(old, new):
            paired = min(old_end - old_start, new_end - new_start) if tag == "replace" else 0
            details += [
                describe(old_values[old_start + offset], new_values[new_start + offset])
                for offset in range(paired)
            ]
            details += [
                describe(None, new_values[index]) for index in range(new_start + paired, new_end)
            ]
            details += [
                describe(old_values[index], None) for index in range(old_start + paired, old_end)
            ]
        changes += [
            _facet_change(facet, old_line, new_line, detail, position)
            for detail in details
            if detail is not None
        ]
    return changes


def call_fact_facets(facets: Sequence[TraceFacet]) -> tuple[TraceFacet, ...]:
    """Those of `facets` that write a fact per call and read it back (`read_call_fact`)."""
    return tuple(facet for facet in facets if hasattr(facet, "read_call_fact"))


def call_fact_changes(
    old_line: GoldenLine, new_line: GoldenLine, position: int, facets: Sequence[TraceFacet]
) -> list[Change]:
    """One change per facet with one value per trace whose per-call facts of two paired
    calls differ by its own rule (`describe_call_change` gives words, or None for none);
    only where both calls have the fact, read by the facet (`read_call_fact`)."""
    changes = []
    old_facts, new_facts = facts_of(old_line).by_title, facts_of(new_line).by_title
    for facet in facets:
        old_text, new_text = old_facts.get(facet.title), new_facts.get(facet.title)
        if old_text is None or new_text is None or old_text == new_text:
            continue
        read = facet.read_call_fact  # type: ignore[union-attr]
        old, new = read(old_text), read(new_text)
        if old is None or new is None:
            continue
        detail = facet.describe_call_change(old, new)  # type: ignore[union-attr]
        if detail:
            changes.append(_facet_change(facet, old_line, new_line, detail, position, (old, new)))
    return changes


def trace_facet_changes(
    old_header: GoldenHeader, new_header: GoldenHeader, facets: Sequence[TraceFacet]
) -> list[Change]:
    """One change per sentence each facet with one value per trace (backward, graph breaks)
    says of its two values, read from the headers, or per (kind, detail) it gives of a kind
    it declares (costs: `uncounted operation added`); only when both headers hold it."""
    changes = []
    for facet in facets:
        old, new = old_header.facet_value(facet), new_header.facet_value(facet)
        if old is None or new is None:
            continue
        noun = getattr(facet, "change_noun", "")
        changes += [
            _kind_change(facet, *said)
            if isinstance(said, tuple)
            else Change(
                ChangeKind.FACET_CHANGED, None, None, said, words=facet.change_words, noun=noun
            )
            for said in facet.describe_changes(old, new)
        ]
    return changes


def _kind_change(
    facet: Any,
    name: str,
    detail: str,
    old_line: GoldenLine | None = None,
    new_line: GoldenLine | None = None,
    position: int | None = None,
) -> Change:
    """A change of a kind `facet` declares (`change_kinds`), by its name; a facet that gives
    a kind it does not declare is a plugin's mistake, named with the kinds it declares."""
    kinds = declared_kinds()
    if kinds.get(name, (None,))[0] is not facet:
        own = [repr(declared) for declared, (owner, _) in kinds.items() if owner is facet]
        raise ValueError(
            f"facet {facet.title!r} gave a change of kind {name!r}, which its change_kinds do "
            f"not declare ({', '.join(own) or 'none'}): declare it there as a FacetChangeKind"
        )
    return _facet_change(facet, old_line, new_line, detail, position, kind=kinds[name][1])


def unread_fact_changes(old_line: GoldenLine, new_line: GoldenLine, position: int) -> list[Change]:
    """One change per fact that nothing here reads back and whose text differs: a plugin's
    module fact (`pytest_fwdorder_module_facts`), or a facet's whose plugin is not loaded.

    Compared as text, in the fact's own words: `quantization changed ... int8 -> int4`.
    """
    read = {*FACT_TITLES, *(facet.title for facet, _ in old_line.facet_values)}
    read.update(facet.title for facet, _ in new_line.facet_values)
    # A facet with one value per trace writes its per-call facts itself (`call_facts`).
    read.update(facet.title for facet in trace_facets(FACT_TITLES) if hasattr(facet, "call_facts"))
    old_facts, new_facts = facts_of(old_line).by_title, facts_of(new_line).by_title
    changes = []
    for title in dict.fromkeys([*old_facts, *new_facts]):
        if title in read:
            continue
        old, new = old_facts.get(title, "none"), new_facts.get(title, "none")
        if old != new:
            changes.append(
                Change(
                    ChangeKind.FACET_CHANGED,
                    old_line,
                    new_line,
                    f"{old} -> {new}",
                    position,
                    words=f"{title} changed",
                )
            )
    return changes
