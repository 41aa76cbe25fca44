"""Kinds of change a facet gives of its own (`FacetChangeKind`): operations' `operation
inserted`, costs' `uncounted operation added`. Plain, no torch.

A facet declares them in `change_kinds`, and gives a change of one as (the kind's `name`,
detail) where it would give words alone: `line_changes(old_values, new_values)` for the
lines under two paired calls, `describe_changes(old, new)` for two values of the header. A
diff counts each kind under its name (`diff.count("operation inserted")`), the summary's
totals as `2 operations inserted`, and a review's total names the goldens with one by its
`phrase`. A facet may word the summary's line for a kind itself:
`describe_kind_changes(name, changes)`, from (the call as the summary names it, or "" for
one of the header; detail) each.
"""

from __future__ import annotations

from typing import NamedTuple


class FacetChangeKind(NamedTuple):
    """A kind of change a facet gives: what it counts (`noun`), what happened to it (`verb`),
    and how a review's total names the goldens with one (`phrase`)."""

    noun: str
    verb: str
    phrase: str

    @property
    def name(self) -> str:
        """`operation inserted`: what a diff counts the kind's changes under."""
        return f"{self.noun} {self.verb}"
