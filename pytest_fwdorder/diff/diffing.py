"""Trace x Trace -> explained differences: the entry points diff_traces, diff_golden and
diff_lines. Pure functions, no torch.

A diff runs in three steps, one module each: `tree_alignment` pairs the old and new calls along their call trees,
`classification` turns the pairs into changes (a `TraceDiff`), and `explanation` puts them
in words. The golden text both sides are read from is `golden.format`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree, build_call_tree
from pytest_fwdorder.diff.changes import ChangeKind
from pytest_fwdorder.diff.classification import TraceDiff, classify_diff
from pytest_fwdorder.diff.counterparts import (
    changed_stage_readings,
    counterpart_readings,
    kept_call_readings,
    kind_readings,
    moved_alike_readings,
    swap_readings,
)
from pytest_fwdorder.diff.level_readings import level_readings
from pytest_fwdorder.diff.readings import (
    calls_that_stayed,
    confirmed,
    joined_anchors,
    paired_otherwise,
    stated_changes,
)
from pytest_fwdorder.diff.stage_readings import (
    class_readings,
    copy_readings,
    model_readings,
    stage_readings,
    stayed_in_model,
)
from pytest_fwdorder.diff.tree_alignment import TreeAlignment, align_trees
from pytest_fwdorder.golden.format import FACT_TITLES, GoldenLine
from pytest_fwdorder.golden.garbage_collection import paused_garbage_collection
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.golden.render import end_lines, golden_lines, render_header
from pytest_fwdorder.hookspecs import plugin_facets

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import Facet

_MOST_CALLS_READ = 200_000  # calls aligned again by the other readings of one diff, at most

__all__ = [
    "check_trace",
    "diff_golden",
    "diff_lines",
    "diff_traces",
]


def diff_traces(old: TraceRecords, new: TraceRecords) -> TraceDiff:
    """What changed from `old` to `new`; raises TypeError if either is not a trace."""
    check_trace("diff_traces", "old", old)
    check_trace("diff_traces", "new", new)
    return diff_lines(
        [*render_header(old), *end_lines(old)],
        golden_lines(old),
        [*render_header(new), *end_lines(new)],
        golden_lines(new),
    )


def check_trace(function: str, argument: str, value: object) -> None:
    """Raise TypeError naming the argument if `value` is not a trace."""
    if isinstance(value, TraceRecords):
        return
    if isinstance(value, str):
        hint = "pass what trace_forward returns; for golden text use diff_golden"
    elif callable(getattr(value, "named_modules", None)):  # a model: no torch import here
        hint = "trace the model first: trace_forward(model, *inputs)"
    else:
        hint = "pass what trace_forward returns"
    raise TypeError(
        f"{function} expected a trace as `{argument}`, got {type(value).__name__}: "
        f"{_short_repr(value)}: {hint}"
    )


def _short_repr(value: object) -> str:
    """The value's repr cut to one line of 80 characters: a model's repr is its whole tree."""
    text = repr(value)
    if len(text) <= 80 and "\n" not in text:
        return text
    return f"{text.splitlines()[0][:77]}..."


def diff_golden(
    old_text: str, new_text: str, *, facets: Sequence[Facet] | None = None
) -> TraceDiff:
    """What changed from one golden text to another (both as `render_trace` writes them).

    `facets` read and compare the facets' facts (the golden's side decides what is the
    same); by default the registered ones, the built-in facets and the plugins'. Raises
    TypeError if either text is not a string.
    """
    for argument, value in (("old_text", old_text), ("new_text", new_text)):
        if not isinstance(value, str):
            raise TypeError(
                f"diff_golden expected golden text as `{argument}`, got "
                f"{type(value).__name__}: {value!r}: pass the text of a golden file "
                "(path.read_text()), or use diff_traces for two traces"
            )
    if facets is None:
        facets = plugin_facets(FACT_TITLES)
    old_header, old_lines = parse_golden(old_text, facets)
    new_header, new_lines = parse_golden(new_text, facets)
    return diff_lines(old_header, old_lines, new_header, new_lines)


def diff_lines(
    old_header: Sequence[str],
    old: list[GoldenLine],
    new_header: Sequence[str],
    new: list[GoldenLine],
    *,
    match_paths: bool = True,
    names: tuple[list[GoldenLine], list[GoldenLine]] | None = None,
) -> TraceDiff:
    """Align and classify two lists of call lines; `match_paths=False` aligns by structure only.

    `names`: the lines to name calls by when `old` and `new` have no paths (a name-free
    comparison), so each change still says where it is.
    """
    # The diff allocates many small lists and tuples and frees none of them until the end:
    # the garbage collector's full passes over the lines found nothing to free and took
    # most of the time on 100,000 calls.
    with paused_garbage_collection():
        old_tree, new_tree = build_call_tree(old), build_call_tree(new)
        headers = (GoldenHeader.of(old_header), GoldenHeader.of(new_header))
        alignment = align_trees(old_tree, new_tree, match_paths=match_paths)
        first = _classified(headers, alignment, names)
        stated = stated_changes(first, new_tree)
        if not stated[0]:  # nothing to read otherwise
            return first
        partners = alignment.partners
        first_kept = _Kept(first, stated, [], partners)
        # Other readings: from the calls that kept their paths, or without names their
        # places (readings.py), and of stages flattened or wrapped (stage_readings.py).
        stayed = calls_that_stayed(old_tree, new_tree, partners, by_place=not match_paths)
        readings = [stayed] if paired_otherwise(partners, stayed) else []
        readings += _readings_from((old_tree, new_tree), first_kept.maps)
        # Read on from apart (`_Reader.fewest_stated`): the calls that stayed in a model the
        # first reading wraps or unwraps whole, and the model wrapped twice, read as each
        # inner call of the chain of wrappers (only the outermost is read with the others).
        inside = stayed_in_model((old_tree, new_tree), partners, by_place=not match_paths)
        inside += model_readings((old_tree, new_tree), partners)[1:]
        # Each reading costs an alignment of the whole diff: fewer of them on large ones.
        budget = max(1, _MOST_CALLS_READ // (len(old) + len(new) + 1))
        reader = _Reader((old_tree, new_tree), match_paths, headers, names)
        return reader.fewest_stated(first_kept, (readings, inside), budget)


@dataclass(frozen=True)
class _Reader:
    """What reads one diff again from a list of anchors: its trees and how it names calls."""

    trees: tuple[CallTree, CallTree]
    match_paths: bool
    headers: tuple[GoldenHeader, GoldenHeader]
    names: tuple[list[GoldenLine], list[GoldenLine]] | None

    def fewest_stated(
        self,
        first: _Kept,
        readings: tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]]],
        budget: int,
    ) -> TraceDiff:
        """Of the first reading and those `readings` start (each the anchors paired before
        any pass), the one that states fewest changes, each kept only where what it anchors
        confirms it. At most `budget` readings are aligned.

        `readings`: those read on from the first (`_read_on`), and those of the whole model
        wrapped or unwrapped that are read on from apart, as the readings of such a wrap that
        `_read_on` tries and does not keep: the wrap beside other changes states more than
        the first reading until what it leaves to read is read (a stage flattened as the
        model was wrapped, the model wrapped twice). Read on from apart, the best reading
        each leads to is kept only where it states fewer changes than the one kept so far.
        """
        tried: tuple[set[tuple[tuple[int, int], ...]], int] = (set(), budget)
        wraps: list[_Kept] = []
        kept = self._read_on(first, readings[0], tried, wraps)
        apart = (self._aligned(anchors, tried) for anchors in readings[1])
        for wrap in [*wraps, *(reading for reading in apart if reading is not None)]:
            candidate = self._read_on(wrap, self._left(wrap), tried, None)
            # Fewer changes stated, not a tie broken (`stated_changes`' last count, moves): a
            # reading that equals the kept one only by its moves leaves the kept one alone.
            if candidate.stated[:3] < kept.stated[:3]:
                kept = candidate
        return kept.reading

    def _read_on(
        self,
        kept: _Kept,
        readings: list[list[tuple[int, int]]],
        tried: tuple[set[tuple[tuple[int, int], ...]], int],
        wraps: list[_Kept] | None,
    ) -> _Kept:
        """The reading that states fewest changes of `kept` and those read on from it.

        The readings are tried in rounds: each round tries them all and keeps the one that
        states fewest changes, whose anchors the next round's readings keep; those are what it
        leaves to read (`_left`): two stages flattened in one diff read as two unwraps. Where
        a round keeps none (or there is none to try), the calls the reading kept pairs with
        calls of another class, says swapped or changed in their settings are read as calls
        like them nearby (`_last_readings`), last: a reading the others reach is not cut
        short by one that states fewer changes in its first round and leaves nothing to
        read after it. `wraps`: where to put the readings of the whole model wrapped or
        unwrapped that no round keeps. `tried`: the anchors aligned so far, and how many may
        be.
        """
        last = False  # whether `readings` are the last readings of the reading kept
        leading: list[list[tuple[int, int]]] = []  # last readings that re-pair kept calls
        while kept.stated[0] and len(tried[0]) < tried[1]:
            if not readings:
                if last:
                    break
                readings, leading = _last_readings(self.trees, kept.maps, kept.reading)
                last = True
                continue
            best = kept  # the round's best reading
            for reading_anchors in readings:
                if len(tried[0]) == tried[1]:
                    break
                # A moved layer's look-alike taken as the one moved re-pairs calls the kept
                # reading paired: its anchors come first.
                joined = (
                    joined_anchors(reading_anchors, kept.anchors)
                    if reading_anchors in leading
                    else joined_anchors(kept.anchors, reading_anchors)
                )
                candidate = self._aligned(joined, tried)
                if candidate is None:
                    continue
                if wraps is not None and _wraps_model(self.trees, reading_anchors):
                    wraps.append(candidate)
                if candidate.stated < best.stated:
                    best = candidate
            if best is kept:
                readings = []  # the last readings next, unless these were
                continue
            if wraps:
                wraps[:] = [wrap for wrap in wraps if wrap is not best]
            kept, last = best, False
            readings = self._left(kept)
        return kept

    def _aligned(
        self,
        anchors: list[tuple[int, int]],
        tried: tuple[set[tuple[tuple[int, int], ...]], int],
    ) -> _Kept | None:
        """The reading `anchors` start, None where they were tried before or what they
        anchor does not confirm them (`readings.confirmed`)."""
        if tuple(anchors) in tried[0] or len(tried[0]) >= tried[1]:
            return None
        tried[0].add(tuple(anchors))
        again = align_trees(*self.trees, match_paths=self.match_paths, anchors=anchors)
        if not confirmed(self.trees, anchors, again.partners):
            return None
        reading = _classified(self.headers, again, self.names)
        return _Kept(reading, stated_changes(reading, self.trees[1]), anchors, again.partners)

    def _left(self, kept: _Kept) -> list[list[tuple[int, int]]]:
        """The anchors of the readings a reading kept leaves to try: where it wraps or
        unwraps the whole model, from the calls that stayed within it (no path kept across
        the wrap), then `_readings_from`'s."""
        readings = stayed_in_model(self.trees, kept.partners, by_place=not self.match_paths)
        return readings + _readings_from(self.trees, kept.maps)


@dataclass(frozen=True)
class _Kept:
    """A reading: its changes, how many it states (`stated_changes`), its anchors and the
    partners of its old calls."""

    reading: TraceDiff
    stated: tuple[int, int, int, int]
    anchors: list[tuple[int, int]]
    partners: dict[int, int]

    @cached_property
    def maps(self) -> tuple[dict[int, int], dict[int, int]]:
        """The partners of old calls, and of new ones: made once, for the readings a
        reading kept leaves and those tried last (not for every reading aligned)."""
        return self.partners, {new: old for old, new in self.partners.items()}


def _wraps_model(trees: tuple[CallTree, CallTree], anchors: list[tuple[int, int]]) -> bool:
    """Whether a reading's first anchor pairs one tree's model with a call nested in the
    other's: the whole model wrapped or unwrapped."""
    old, new = anchors[0]
    old_tree, new_tree = trees
    return (old_tree.parents[old] == NO_PARENT) != (new_tree.parents[new] == NO_PARENT)


def _readings_from(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]]
) -> list[list[tuple[int, int]]]:
    """The anchors of the readings one reading (`maps`: its partners of old calls, and of
    new ones) leaves to try: the whole model wrapped or unwrapped, first (one at most, and
    rare), then stages wrapped beside a copy of themselves, then stages flattened or
    wrapped, then wraps and unwraps read one level further in, then stages whose call
    changed class read as a sibling."""
    return (
        model_readings(trees, maps[0])[:1]
        + copy_readings(trees, maps)
        + stage_readings(trees, maps)
        + level_readings(trees, maps)
        + class_readings(trees, maps)
    )


def _last_readings(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]], diff: TraceDiff
) -> tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]]]:
    """The anchors of the readings tried last from a reading (its `maps` and changes):
    of the calls it pairs with calls of another class, says swapped, or says changed in
    their settings, each as a call like it nearby, of the calls its unwraps and wraps keep
    out of stages that lost or gained others, and of the layers it moves, each as a
    look-alike sibling (counterparts.py); then those last of them, which re-pair calls the
    reading paired and so come before its anchors."""
    changed, settings, removed, inserted = [], [], [], []
    for change in diff.changes:
        if change.position is None:
            continue
        if change.kind is ChangeKind.TYPE_CHANGED:
            changed.append(change.position)
        elif change.kind is ChangeKind.SETTINGS_CHANGED:
            settings.append(change.position)
        elif change.kind is ChangeKind.REMOVED:
            removed.append(change.position)
        elif change.kind is ChangeKind.INSERTED:
            inserted.append(change.position)
    swapped, unwrapped, wrapped, moved = [], [], [], []
    for tree_change in diff.tree_changes:
        if tree_change.kind is ChangeKind.SWAPPED:
            swapped.append(tree_change.old_calls)
        elif tree_change.kind is ChangeKind.MOVED:
            moved.append(min(tree_change.old_calls))
        elif tree_change.kind is ChangeKind.UNWRAPPED:
            unwrapped.append(tree_change.old_calls)
        elif tree_change.kind is ChangeKind.WRAPPED:
            wrapped.append(tree_change.new_calls)
    if not (changed or swapped or settings or unwrapped or wrapped or moved or removed):
        return [], []
    leading = moved_alike_readings(trees, maps, moved)
    readings = (
        counterpart_readings(trees, maps, changed)
        + swap_readings(trees, maps, swapped)
        + kind_readings(trees, maps, settings)
        + kept_call_readings(trees, maps, unwrapped, wrapped)
        + changed_stage_readings(trees, maps, removed, inserted)
    )
    return readings + leading, leading


def _classified(
    headers: tuple[GoldenHeader, GoldenHeader],
    alignment: TreeAlignment,
    names: tuple[list[GoldenLine], list[GoldenLine]] | None,
) -> TraceDiff:
    """The changes one alignment reads: `classify_diff` on its trees' lines."""
    return classify_diff(
        headers[0],
        alignment.old_tree.lines,
        headers[1],
        alignment.new_tree.lines,
        alignment.rows,
        alignment.moved,
        alignment,
        names,
    )
