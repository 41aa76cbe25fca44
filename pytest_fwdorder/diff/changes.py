"""The records a diff is made of: the kinds of change, one Change, one aligned DiffRow.

Plain data, no torch: `tree_alignment` pairs calls, `classification` turns the pairs into these
records, `explanation` puts them in words, and the report draws its rows from them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from pytest_fwdorder.calls.change_kinds import FacetChangeKind
from pytest_fwdorder.golden.format import FACT_TITLES, GoldenLine
from pytest_fwdorder.hookspecs import trace_facets


class ChangeKind(str, enum.Enum):
    """What kind of difference a `Change` is; each member equals its text (`"renamed"`)."""

    INSERTED = "inserted"
    REMOVED = "removed"
    MOVED = "moved"
    SWAPPED = "swapped"
    WRAPPED = "wrapped"
    UNWRAPPED = "unwrapped"
    SPLIT = "split"
    MERGED = "merged"
    RENAMED = "renamed"
    TYPE_CHANGED = "type changed"
    INPUT_CHANGED = "input changed"
    OUTPUT_CHANGED = "output changed"
    NESTING_CHANGED = "nesting changed"
    REGISTRATION_CHANGED = "registration changed"
    FROZEN_CHANGED = "frozen state changed"
    SETTINGS_CHANGED = "settings changed"
    PARAMETERS_CHANGED = "parameters changed"
    MODE_CHANGED = "mode changed"
    REUSE_CHANGED = "reuse count changed"
    # A facet (calls/facet_records.py) whose values differ; `Change.words` say which (`FLOPs
    # changed`, `backward steps changed`, or a kind of its own: `operation inserted`).
    FACET_CHANGED = "facet changed"
    # Header findings that appear or go (the odd block out, forwards run without a call).
    ODD_BLOCK_FOUND = "differing from the peers now"
    ODD_BLOCK_GONE = "agreeing with the peers now"
    FORWARD_RUN_FOUND = "running forward without a call now"
    FORWARD_RUN_GONE = "no longer running forward without a call"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Change:
    """One difference: what kind, the old and the new line (either may be None), in words.

    `position` is the index of the line the change is about: in the new trace, or in the
    old one for removed and moved calls.
    """

    kind: ChangeKind
    old: GoldenLine | None
    new: GoldenLine | None
    detail: str
    position: int | None = None
    # For a facet's change, the facet's own words for it (`output elements changed`), and
    # for one of a value the header holds, what one such change counts (`backward step`;
    # "" for none: the summary then gives the words alone).
    words: str = ""
    noun: str = ""
    # For a change a facet found between two calls' facts (`read_call_fact`): the facet,
    # and its old and new values as it read them, for its own summary line (`summary_line`).
    facet: Any = field(default=None, compare=False, repr=False)
    values: tuple[Any, Any] | None = field(default=None, compare=False, repr=False)
    # For a change of a kind the facet declares (`FacetChangeKind`, `operation inserted`):
    # that kind; `words` are its name and `facet` the facet that words its summary line.
    facet_kind: FacetChangeKind | None = field(default=None, compare=False, repr=False)

    @property
    def kind_words(self) -> str:
        """What a summary calls this kind of change: a facet's words, or the kind's text."""
        return self.words or self.kind.value

    @property
    def counted_words(self) -> str:
        """What a review counts this change as: what a facet counts, changed (`backward
        steps changed`), a facet's words, or the kind's text."""
        return f"{self.noun}s changed" if self.noun else self.kind_words


@dataclass(frozen=True, slots=True)
class TreeChange:
    """One change to the nesting, in words, and the calls whose per-call changes it explains
    (indexes of old and new calls)."""

    kind: ChangeKind
    sentence: str
    old_calls: frozenset[int]
    new_calls: frozenset[int]
    # A split or merge: the path of the shared module, whose reuse count it changed.
    shared_path: str = ""
    # A wrap of one of several look-alikes beside others that went (old) or came (new):
    # the old calls it may be, and the look-alikes among which those that went (old) or
    # came (new) cannot be told (diff/look_alike_wraps.py).
    may_be: tuple[int, ...] = ()
    look_alikes: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())


def accounted_for(nesting: list[TreeChange]) -> tuple[frozenset[int], frozenset[int]]:
    """The old and new calls that changes to the nesting account for: none of them went or
    came (a block wrapped is not removed)."""
    return (
        frozenset().union(*(change.old_calls for change in nesting)),
        frozenset().union(*(change.new_calls for change in nesting)),
    )


@dataclass(frozen=True)
class DiffRow:
    """One row of the aligned view, as the text diff and the report show it: indexes into the
    old and new lines (either None for a call on one side only), and whether it differs."""

    old: int | None
    new: int | None
    differs: bool


def change_kind(kind: ChangeKind | FacetChangeKind | str) -> ChangeKind | str:
    """The member a kind or its text names, or the name of a kind a facet declares
    (`"operation inserted"`, `FacetChangeKind`); raises ValueError listing the kinds there
    are."""
    if isinstance(kind, ChangeKind):
        return kind
    if isinstance(kind, str):
        try:
            return ChangeKind(kind)
        except ValueError:
            pass
    declared = declared_kinds()
    name = kind.name if isinstance(kind, FacetChangeKind) else kind
    if isinstance(name, str) and name in declared:
        return name
    valid = ", ".join(repr(name) for name in [*(member.value for member in ChangeKind), *declared])
    raise ValueError(f"unknown change kind {kind!r}: use one of {valid}, or a member of ChangeKind")


def declared_kinds() -> dict[str, tuple[Any, FacetChangeKind]]:
    """The kinds of change the registered facets declare (`change_kinds`), by name, each
    with its facet. Raises ValueError for one whose name a `ChangeKind` or another facet's
    kind has: its changes would be counted as those."""
    facets = trace_facets(FACT_TITLES)
    if _DECLARED and _DECLARED[0][0] is facets:
        return _DECLARED[0][1]
    declared: dict[str, tuple[Any, FacetChangeKind]] = {}
    for facet in facets:
        for kind in getattr(facet, "change_kinds", ()):
            name = kind.name
            taken = "a built-in kind" if name in _BUILT_IN_KINDS else None
            if name in declared:
                taken = f"facet {declared[name][0].title!r}"
            if taken is not None:
                raise ValueError(
                    f"facet {facet.title!r} declares the change kind {name!r}, which {taken} "
                    "already has: give it a noun or verb of its own"
                )
            declared[name] = (facet, kind)
    _DECLARED[:] = [(facets, declared)]
    return declared


_BUILT_IN_KINDS = frozenset(member.value for member in ChangeKind)
# The kinds the facets resolved last declare, with those facets (the same tuple until a
# plugin offering facets comes or goes, and held, so its id is not reused): every change
# of a declared kind asks.
_DECLARED: list[tuple[tuple[Any, ...], dict[str, tuple[Any, FacetChangeKind]]]] = []


def is_of_kind(change: Change, kind: ChangeKind | str) -> bool:
    """Whether `change` is of `kind` (as `change_kind` gives it): a member, or the name of a
    kind a facet declares."""
    if isinstance(kind, ChangeKind):
        return change.kind is kind
    return change.facet_kind is not None and change.kind_words == kind
