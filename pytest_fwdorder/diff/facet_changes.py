"""The plugins' facets' changes between two paired calls: each facet compares its own typed
values and words the difference (facets/protocol.py). Pure, no torch, no facet named."""

from __future__ import annotations

from pytest_fwdorder.diff.changes import Change, ChangeKind
from pytest_fwdorder.golden.format import GoldenLine


def facet_changes(old_line: GoldenLine, new_line: GoldenLine, position: int) -> list[Change]:
    """One change per facet whose values of two paired calls do not match by its own rule.

    A value on one side only (a facet added or dropped, or a call with nothing to observe)
    is a change too, in the facet's words.
    """
    old_values = {facet.title: (facet, value) for facet, value in old_line.facet_values}
    new_values = {facet.title: (facet, value) for facet, value in new_line.facet_values}
    changes = []
    for title in dict.fromkeys([*old_values, *new_values]):
        old, new = old_values.get(title), new_values.get(title)
        if old is not None and new is not None:
            facet = new[0]
            if facet.same(old[1], new[1]):
                continue
            detail = facet.describe_change(old[1], new[1])
        elif new is not None:
            facet, detail = new[0], f"now {new[0].render(new[1])}"
        elif old is not None:
            facet, detail = old[0], f"was {old[0].render(old[1])}, now none"
        else:
            continue
        change = Change(ChangeKind.FACET_CHANGED, old_line, new_line, detail, position)
        changes.append(change.with_words(facet.change_words))
    return changes
