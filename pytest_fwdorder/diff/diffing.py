"""Trace x Trace -> explained differences: the entry points diff_traces, diff_golden and
diff_lines. Pure functions, no torch.

A diff runs in three steps, one module each: `tree_alignment` pairs the old and new calls along their call trees,
`classification` turns the pairs into changes (a `TraceDiff`), and `explanation` puts them
in words. The golden text both sides are read from is `golden.format`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.diff.call_tree import build_call_tree
from pytest_fwdorder.diff.classification import TraceDiff, classify_diff
from pytest_fwdorder.diff.readings import (
    calls_that_stayed,
    confirmed,
    paired_otherwise,
    stated_changes,
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
        # Another reading, from the calls that kept their paths, or without names their
        # places (readings.py).
        partners = alignment.partners
        stayed = calls_that_stayed(old_tree, new_tree, partners, by_place=not match_paths)
        if not paired_otherwise(partners, stayed):
            return first
        stated = stated_changes(first, new_tree)
        if not stated:
            return first
        again = align_trees(old_tree, new_tree, match_paths=match_paths, anchors=stayed)
        if not confirmed((old_tree, new_tree), stayed, again.partners):
            return first
        second = _classified(headers, again, names)
        return second if stated_changes(second, new_tree) < stated else first


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
