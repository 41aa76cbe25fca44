"""Trace x Trace -> explained differences: the entry points diff_traces, diff_golden and
diff_lines. Pure functions, no torch.

A diff runs in three steps, one module each: `tree_alignment` pairs the old and new calls along their call trees,
`classification` turns the pairs into changes (a `TraceDiff`), and `explanation` puts them
in words. The golden text both sides are read from is `golden.format`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.diff.call_tree import CallTree, build_call_tree
from pytest_fwdorder.diff.classification import TraceDiff, classify_diff
from pytest_fwdorder.diff.readings import (
    calls_that_stayed,
    confirmed,
    paired_otherwise,
    stated_changes,
)
from pytest_fwdorder.diff.stage_readings import (
    class_readings,
    copy_readings,
    level_readings,
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
        # Other readings: from the calls that kept their paths, or without names their
        # places (readings.py), and of stages flattened or wrapped (stage_readings.py).
        partners = alignment.partners
        stayed = calls_that_stayed(old_tree, new_tree, partners, by_place=not match_paths)
        readings = [stayed] if paired_otherwise(partners, stayed) else []
        readings += _readings_from((old_tree, new_tree), partners)
        if not readings:
            return first
        stated = stated_changes(first, new_tree)
        if not stated[0]:
            return first
        # Each reading costs an alignment of the whole diff: fewer of them on large ones.
        budget = max(1, _MOST_CALLS_READ // (len(old) + len(new) + 1))
        reader = _Reader((old_tree, new_tree), match_paths, headers, names)
        return reader.fewest_stated((first, stated), readings, budget)


@dataclass(frozen=True)
class _Reader:
    """What reads one diff again from a list of anchors: its trees and how it names calls."""

    trees: tuple[CallTree, CallTree]
    match_paths: bool
    headers: tuple[GoldenHeader, GoldenHeader]
    names: tuple[list[GoldenLine], list[GoldenLine]] | None

    def fewest_stated(
        self,
        first: tuple[TraceDiff, tuple[int, int, int, int]],
        readings: list[list[tuple[int, int]]],
        budget: int,
    ) -> TraceDiff:
        """Of the first reading (and the changes it states) and those `readings` start (each
        the anchors paired before any pass), the one that states fewest changes, each kept
        only where what it anchors confirms it.

        The readings are tried in rounds: each round tries them all and keeps the one that
        states fewest changes, whose anchors the next round's readings keep; those are what it
        leaves to read (`_readings_from`): two stages flattened in one diff read as two
        unwraps. At most `budget` readings are aligned.
        """
        kept, fewest = first
        kept_anchors: list[tuple[int, int]] = []
        tried: set[tuple[tuple[int, int], ...]] = set()
        while readings and fewest[0] and len(tried) < budget:
            best: dict[int, int] | None = None  # the partners of the round's best reading
            kept_before = kept_anchors
            for reading_anchors in readings:
                if len(tried) == budget:
                    break
                anchors = _joined(kept_before, reading_anchors)
                if tuple(anchors) in tried:
                    continue
                tried.add(tuple(anchors))
                again = align_trees(*self.trees, match_paths=self.match_paths, anchors=anchors)
                if not confirmed(self.trees, anchors, again.partners):
                    continue
                reading = _classified(self.headers, again, self.names)
                stated = stated_changes(reading, self.trees[1])
                if stated < fewest:
                    kept, fewest, kept_anchors, best = reading, stated, anchors, again.partners
            if best is None:
                break
            # A reading kept that wraps or unwraps the whole model is read again from the
            # calls that stayed within it: no path kept across the wrap.
            readings = stayed_in_model(self.trees, best, by_place=not self.match_paths)
            readings += _readings_from(self.trees, best)
        return kept


def _readings_from(
    trees: tuple[CallTree, CallTree], partners: dict[int, int]
) -> list[list[tuple[int, int]]]:
    """The anchors of the readings one reading (`partners`) leaves to try: the whole model
    wrapped or unwrapped, first (one at most, and rare), then stages wrapped beside a copy
    of themselves, then stages flattened or wrapped, then wraps and unwraps read one level
    further in, then stages whose call changed class read as a sibling."""
    maps = (partners, {new: old for old, new in partners.items()})  # made once for the four
    return (
        model_readings(trees, partners)
        + copy_readings(trees, maps)
        + stage_readings(trees, maps)
        + level_readings(trees, maps)
        + class_readings(trees, maps)
    )


def _joined(kept: list[tuple[int, int]], anchors: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The anchors of a reading kept, then those of another that pair neither call again."""
    joined = list(kept)
    old_paired = {old for old, _ in kept}
    new_paired = {new for _, new in kept}
    for old, new in anchors:
        if old not in old_paired and new not in new_paired:
            joined.append((old, new))
            old_paired.add(old)
            new_paired.add(new)
    return joined


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
