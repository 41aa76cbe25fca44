"""Aligned calls -> classified changes: the one place a difference gets its kind, and the
TraceDiff that holds them with the aligned rows. Pure, no torch.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pytest_fwdorder.calls.change_kinds import FacetChangeKind
from pytest_fwdorder.diff.call_tree import CallTree, build_call_tree
from pytest_fwdorder.diff.change_details import (
    describe_settings_change,
    describe_tensor_fact_changes,
    describe_value_change,
    renamed_ties,
)
from pytest_fwdorder.diff.changed_calls import call_lines
from pytest_fwdorder.diff.changes import (
    Change,
    ChangeKind,
    DiffRow,
    TreeChange,
    change_kind,
    is_of_kind,
)
from pytest_fwdorder.diff.consequences import fold_consequences
from pytest_fwdorder.diff.explanation import summarize
from pytest_fwdorder.diff.facet_changes import (
    call_fact_changes,
    call_fact_facets,
    call_line_changes,
    facet_changes,
    trace_facet_changes,
    unread_fact_changes,
)
from pytest_fwdorder.diff.ordered_pairing import AlignedPair, changed_runs
from pytest_fwdorder.diff.places import describe_where, place_describer
from pytest_fwdorder.diff.tree_alignment import TreeAlignment
from pytest_fwdorder.diff.tree_changes import tree_changes, unexplained
from pytest_fwdorder.golden.format import (
    FACT_TITLES,
    GoldenLine,
    is_first_call,
    render_forward_run,
    render_odd_block,
)
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.golden.line_facts import TENSOR_TITLES, facts_of
from pytest_fwdorder.hookspecs import trace_facets

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import TraceFacet


@dataclass(repr=False)
class TraceDiff:
    """The aligned, classified differences between an old and a new trace.

    `pairs` lists `(old index, new index)` of every call found on both sides (in order,
    renamed or moved), sorted by old index: how a caller follows a call across a refactor.
    """

    old_lines: list[GoldenLine]
    new_lines: list[GoldenLine]
    changes: list[Change]
    pairs: list[tuple[int, int]]
    header_changes: list[str] = field(default_factory=list)
    # The aligned rows the diff shows, in order: what the explanation and the report draw.
    rows: list[DiffRow] = field(default_factory=list, repr=False)
    # The changes to the nesting (wraps, moves, renamed subtrees), each explaining many of
    # the per-call `changes`: what the summary says first.
    tree_changes: list[TreeChange] = field(default_factory=list, repr=False)
    # What a passing name-free comparison ignored, said first: `same structure (...)`.
    verdict: str = ""
    # The lines with their paths when `old_lines` and `new_lines` have none (a name-free
    # comparison): what the summary names calls by.
    old_names: list[GoldenLine] = field(default_factory=list, repr=False)
    new_names: list[GoldenLine] = field(default_factory=list, repr=False)
    # The call tree of the new lines the summary names calls by, built once: the alignment's
    # own where those are the aligned lines (a name-free comparison's are blanked).
    new_tree: CallTree | None = field(default=None, repr=False)

    def _new_tree(self) -> CallTree:
        if self.new_tree is None:
            self.new_tree = build_call_tree(self.new_names or self.new_lines)
        return self.new_tree

    @property
    def _rows(self) -> list[DiffRow]:
        """The rows under their name from before they were public."""
        return self.rows

    def __bool__(self) -> bool:
        return bool(self.changes or self.header_changes)

    def count(self, kind: ChangeKind | FacetChangeKind | str) -> int:
        """How many changes of one kind (`ChangeKind.RENAMED` or `"renamed"`, ..., or a kind
        a facet declares: `"operation inserted"`).

        Raises ValueError for a string that names no kind.
        """
        return len(self.of_kind(kind))

    def of_kind(self, kind: ChangeKind | FacetChangeKind | str) -> list[Change]:
        """The changes of one kind, in order; raises ValueError for an unknown kind."""
        wanted = change_kind(kind)
        return [change for change in self.changes if is_of_kind(change, wanted)]

    def summary(self) -> str:
        """A paragraph: one line of totals, then one line per change to the nesting and one
        per kind of the other changes."""
        verdict = [self.verdict] if self.verdict else []
        if not self:
            return "\n".join([*verdict, "no differences"])
        return "\n".join(
            [
                *verdict,
                summarize(
                    self.changes,
                    self.old_names or self.old_lines,
                    self.new_names or self.new_lines,
                    self.tree_changes,
                    name_free=bool(self.old_names),
                    tree=self._new_tree(),
                ),
            ]
        )

    def explained_counts(self) -> dict[str, int]:
        """How many changes of each kind the summary states: a change to the nesting counts
        once (one wrap, not its renamed calls), the per-call changes it explains not at all,
        nor an input or output change that only passes another on (the model's output after
        its head's).
        """
        kept, _ = fold_consequences(
            unexplained(self.changes, self.tree_changes),
            self.new_names or self.new_lines,
            self._new_tree(),
        )
        # A facet's changes count under the facet's own words.
        kinds = [change.kind.value for change in self.tree_changes]
        kinds += [change.kind_words for change in kept]
        counts: dict[str, int] = {}
        for kind in kinds:
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def explanation(self, context: int = 2, max_rows: int = 400) -> list[str]:
        """The message for a failed comparison, as lines: what a reader needs first comes first.

        The summary, a blank line, the aligned calls starting at the first changed one (`-`
        old, `+` new, long unchanged runs elided), then the header lines that changed. pytest
        shows only the first lines unless run with `-vv`, so they carry the changes.
        """
        if not self:
            return ["no differences"]
        lines = [*self.summary().splitlines(), ""]
        calls = self._call_lines(context, max_rows, leading_context=False)
        lines += calls
        if self.header_changes:
            lines += ["", *self.header_changes] if calls else self.header_changes
        return lines

    def render(self, context: int = 2, max_rows: int = 400) -> str:
        """The explanation as one text."""
        return "\n".join(self.explanation(context, max_rows))

    def body(self, context: int = 2, max_rows: int = 400) -> list[str]:
        """The aligned calls with context (`-` old, `+` new), then the header lines that changed."""
        return [*self._call_lines(context, max_rows, leading_context=True), *self.header_changes]

    def _call_lines(self, context: int, max_rows: int, *, leading_context: bool) -> list[str]:
        return call_lines(
            self.rows,
            self.old_lines,
            self.new_lines,
            context,
            max_rows,
            leading_context=leading_context,
        )

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        """The summary, first line as a headline: a REPL shows this, `print` the whole diff."""
        if not self:
            return "<TraceDiff: no differences>"
        first, *rest = self.summary().splitlines()
        return "\n".join(
            [
                f"<TraceDiff: {first}>",
                *(f"  {line}" for line in rest),
                "  print(diff) shows the aligned calls",
            ]
        )

    def _repr_html_(self) -> str:
        """Jupyter's display: the explanation as preformatted, escaped text."""
        return f'<pre class="fwdorder-diff">{html.escape(self.render())}</pre>'


def classify_diff(
    old_header: GoldenHeader,
    old: list[GoldenLine],
    new_header: GoldenHeader,
    new: list[GoldenLine],
    aligned: list[AlignedPair],
    moved: dict[int, int],
    alignment: TreeAlignment | None = None,
    names: tuple[list[GoldenLine], list[GoldenLine]] | None = None,
) -> TraceDiff:
    """The diff of two aligned golden texts: every change, the pairs and the rows to show.

    `names` are the lines to name calls by when `old` and `new` have none (a name-free
    comparison): the changes then say where each call is in both models.
    """
    modes = (old_header.mode, new_header.mode)
    facets = trace_facets(FACT_TITLES)
    rows, changes = _classify(old, new, aligned, moved, modes, call_fact_facets(facets), names)
    if names is not None:
        changes = _named(changes, names, aligned, moved)
    if modes[0] and modes[1] and modes[0] != modes[1]:
        changes.insert(0, Change(ChangeKind.MODE_CHANGED, None, None, f"{modes[0]} -> {modes[1]}"))
    nesting = tree_changes(alignment, *(names or (None, None))) if alignment is not None else []
    # A module split or merged changed its reuse count by that: said once, as the split.
    shared = {change.shared_path for change in nesting if change.shared_path}
    changes.extend(change for path, change in _reuse_changes(old, new) if path not in shared)
    changes.extend(trace_facet_changes(old_header, new_header, facets))
    changes.extend(_finding_changes(old_header, new_header))
    in_order = [(row.old, row.new) for row in rows if row.old is not None and row.new is not None]
    pairs = sorted([*in_order, *moved.items()])
    old_names, new_names = names or ([], [])
    return TraceDiff(
        old,
        new,
        changes,
        pairs,
        _header_changes(old_header, new_header),
        rows,
        nesting,
        old_names=old_names,
        new_names=new_names,
        new_tree=alignment.new_tree if alignment is not None and names is None else None,
    )


def _named(
    changes: list[Change],
    names: tuple[list[GoldenLine], list[GoldenLine]],
    aligned: list[AlignedPair],
    moved: dict[int, int],
) -> list[Change]:
    """The changes with their calls' named lines, and places said by the nearest names."""
    old_names, new_names = names
    partner_of_new = {new: old for old, new in aligned if old is not None and new is not None}
    partner_of_new.update({new: old for old, new in moved.items()})
    old_place, new_place = place_describer(old_names), place_describer(new_names)
    named = []
    for change in changes:
        old_line = change.old
        new_line = change.new
        detail = change.detail
        position = change.position
        if change.kind is ChangeKind.REMOVED and position is not None:
            old_line, detail = old_names[position], old_place(position)
        elif change.kind is ChangeKind.INSERTED and position is not None:
            new_line, detail = new_names[position], new_place(position)
        elif change.kind is ChangeKind.MOVED and position is not None:
            old_line = old_names[position]
            new_line = new_names[moved[position]]
            detail = f"now {new_place(moved[position])}"
        elif position is not None and change.new is not None:
            new_line = new_names[position]
            old_index = partner_of_new.get(position)
            old_line = old_names[old_index] if old_index is not None else change.old
        named.append(replace(change, old=old_line, new=new_line, detail=detail))
    return named


def _classify(
    old: list[GoldenLine],
    new: list[GoldenLine],
    aligned: list[AlignedPair],
    moved: dict[int, int],
    modes: tuple[str, str] = ("", ""),
    facets: tuple[TraceFacet, ...] = (),
    names: tuple[list[GoldenLine], list[GoldenLine]] | None = None,
) -> tuple[list[DiffRow], list[Change]]:
    """Turn each aligned row into the changes it shows: the one place changes are made.

    `facets` are those that write a fact per call and compare it (`call_fact_facets`);
    `names` the lines to name calls by in a name-free comparison."""
    moved_new = set(moved.values())
    rows: list[DiffRow] = []
    changes: list[Change] = []
    firsts = _FirstCalls(old, new, names)
    for old_index, new_index in aligned:
        if old_index is not None and new_index is not None:
            pair_changes = _compare_pair(old[old_index], new[new_index], new_index, modes, facets)
            pair_changes += _split_module_facts(old, new, old_index, new_index, firsts)
            changes += pair_changes
            # A `#1` mark that appears because the module is now reused changes the text only.
            differs = bool(pair_changes) or old[old_index].text != new[new_index].text
            rows.append(DiffRow(old_index, new_index, differs))
        elif old_index is not None:
            if old_index in moved:
                changes += _moved_changes(old, new, old_index, moved[old_index], modes, facets)
            else:
                detail = describe_where(old, old_index)
                changes.append(Change(ChangeKind.REMOVED, old[old_index], None, detail, old_index))
            rows.append(DiffRow(old_index, None, True))
        elif new_index is not None:
            if new_index not in moved_new:  # a moved call was counted once, on its old side
                detail = describe_where(new, new_index)
                changes.append(Change(ChangeKind.INSERTED, None, new[new_index], detail, new_index))
            rows.append(DiffRow(None, new_index, True))
    return rows, changes


def _split_module_facts(
    old: list[GoldenLine],
    new: list[GoldenLine],
    old_index: int,
    new_index: int,
    firsts: _FirstCalls,
) -> list[Change]:
    """Where a shared module split pairs a new module's first call with the shared one's
    later call, which shows no facts: what changed in the facts against the shared module's
    first call (a split's `b.1` against `act`). Modules merged into one are not: the merged
    module's facts changed once, at its first call. A name-free comparison tells modules
    apart by the paths of its names (`_FirstCalls.names`)."""
    old_line, new_line = old[old_index], new[new_index]
    if is_first_call(old_line) or not is_first_call(new_line):
        return []
    old_path, new_path = firsts.path(0, old_index), firsts.path(1, new_index)
    if (
        old_path == new_path
        or not (old_path and new_path)  # the root, or a comparison without names
        or old_line.module_type != new_line.module_type
    ):
        return []
    old_facts = firsts.first_call(old_path)
    if old_facts is None or old_facts.facts == new_line.facts:
        return []
    found = _fact_changes(old_facts, new_line)
    return [Change(kind, old_line, new_line, detail, new_index) for kind, detail in found]


@dataclass
class _FirstCalls:
    """The old trace's modules' first calls, where their facts are, by path: made when a
    split first needs them. `names`: the lines of a name-free comparison's names, whose paths
    say which module each blanked line is (its lines are the same calls, in order)."""

    old: list[GoldenLine]
    new: list[GoldenLine]
    names: tuple[list[GoldenLine], list[GoldenLine]] | None = None
    _by_path: dict[str, GoldenLine] | None = None

    def path(self, side: int, index: int) -> str:
        """The path of the line at `index` of the old (0) or new (1) side."""
        lines = self.names[side] if self.names else (self.old, self.new)[side]
        return lines[index].path

    def first_call(self, path: str) -> GoldenLine | None:
        """The old line of the first call of the module at `path`, None for no such module."""
        if self._by_path is None:
            self._by_path = {}
            for index, line in enumerate(self.old):
                if is_first_call(line):
                    self._by_path.setdefault(self.path(0, index), line)
        return self._by_path.get(path)


def _moved_changes(
    old: list[GoldenLine],
    new: list[GoldenLine],
    old_index: int,
    new_index: int,
    modes: tuple[str, str] = ("", ""),
    facets: tuple[TraceFacet, ...] = (),
) -> list[Change]:
    """A call out of order: moved (to where, or to which name), and what else changed."""
    old_line, new_line = old[old_index], new[new_index]
    if old_line.path == new_line.path:  # the call number follows the order, not a rename
        detail = f"now {describe_where(new, new_index)}"
    else:
        detail = f"-> {new_line.name}"
    others = [
        change
        for change in _compare_pair(old_line, new_line, new_index, modes, facets)
        if change.kind is not ChangeKind.RENAMED  # the move names the new path
    ]
    return [Change(ChangeKind.MOVED, old_line, new_line, detail, old_index), *others]


def _compare_pair(
    old_line: GoldenLine,
    new_line: GoldenLine,
    position: int,
    modes: tuple[str, str] = ("", ""),
    facets: tuple[TraceFacet, ...] = (),
) -> list[Change]:
    """Every way two paired calls differ, each as a change about the new line.

    `modes` are the old and new model's modes: a call's mode changes only where it does not
    follow the model's own change; `facets` compare the facts they write per call.
    """
    if (
        old_line.text == new_line.text
        and old_line.facts == new_line.facts
        and old_line.under == new_line.under
    ):
        return []  # the text, facts and lines under the call show every part compared below
    found: list[tuple[ChangeKind, str]] = []
    if old_line.path != new_line.path:  # `#3` -> `#2` is a renumbering, not a rename
        found.append((ChangeKind.RENAMED, f"{old_line.name} -> {new_line.name}"))
    if old_line.module_type != new_line.module_type:
        found.append((ChangeKind.TYPE_CHANGED, f"{old_line.module_type} -> {new_line.module_type}"))
    if old_line.inputs != new_line.inputs:
        found.append(
            (ChangeKind.INPUT_CHANGED, describe_value_change(old_line.inputs, new_line.inputs))
        )
    if old_line.outputs != new_line.outputs:
        found.append(
            (ChangeKind.OUTPUT_CHANGED, describe_value_change(old_line.outputs, new_line.outputs))
        )
    if old_line.depth != new_line.depth:
        found.append((ChangeKind.NESTING_CHANGED, f"depth {old_line.depth} -> {new_line.depth}"))
    if old_line.registered != new_line.registered:
        state = "now registered" if new_line.registered else "no longer registered"
        found.append((ChangeKind.REGISTRATION_CHANGED, state))
    if old_line.frozen != new_line.frozen:
        state = "now frozen" if new_line.frozen else "no longer frozen"
        found.append((ChangeKind.FROZEN_CHANGED, state))
    old_mode, new_mode = old_line.mode or modes[0], new_line.mode or modes[1]
    if old_mode and new_mode and old_mode != new_mode and (old_mode, new_mode) != modes:
        found.append((ChangeKind.MODE_CHANGED, f"{old_mode} -> {new_mode}"))
    if old_line.facts != new_line.facts and (
        (old_line.facts and new_line.facts) or (is_first_call(old_line) and is_first_call(new_line))
    ):
        found += _fact_changes(old_line, new_line)
    changes = [Change(kind, old_line, new_line, detail, position) for kind, detail in found]
    if facets and old_line.facts != new_line.facts:
        changes += call_fact_changes(old_line, new_line, position, facets)
    if old_line.under != new_line.under:
        changes += call_line_changes(old_line, new_line, position)
    return changes + _plugin_fact_changes(old_line, new_line, position)


def _plugin_fact_changes(old_line: GoldenLine, new_line: GoldenLine, position: int) -> list[Change]:
    """What the facets and the plugins' module facts say changed, each in its own words."""
    changes = []
    if old_line.facet_values or new_line.facet_values:
        changes += facet_changes(old_line, new_line, position)
    if old_line.facts != new_line.facts and (
        (old_line.facts and new_line.facts) or (is_first_call(old_line) and is_first_call(new_line))
    ):
        changes += unread_fact_changes(old_line, new_line, position)
    return changes


def _finding_changes(old_header: GoldenHeader, new_header: GoldenHeader) -> list[Change]:
    """Odd blocks and forwards run without a call that appear in the header or leave it, by
    the position or module they are about (a changed count or label is the header's)."""
    blocks = _appeared_and_gone(
        {item.path: render_odd_block(item) for item in old_header.odd_blocks},
        {item.path: render_odd_block(item) for item in new_header.odd_blocks},
        (ChangeKind.ODD_BLOCK_FOUND, ChangeKind.ODD_BLOCK_GONE),
    )
    return blocks + _appeared_and_gone(
        {run.path: render_forward_run(run) for run in old_header.forward_runs},
        {run.path: render_forward_run(run) for run in new_header.forward_runs},
        (ChangeKind.FORWARD_RUN_FOUND, ChangeKind.FORWARD_RUN_GONE),
    )


def _appeared_and_gone(
    old: dict[str, str], new: dict[str, str], kinds: tuple[ChangeKind, ChangeKind]
) -> list[Change]:
    """A change of the first kind per item only `new` holds, then of the second per item
    only `old` holds, each detailed by the item's text."""
    found, gone = kinds
    return [Change(found, None, None, text) for path, text in new.items() if path not in old] + [
        Change(gone, None, None, text) for path, text in old.items() if path not in new
    ]


def _fact_changes(old_line: GoldenLine, new_line: GoldenLine) -> list[tuple[ChangeKind, str]]:
    """Settings, parameters and buffers that changed between two first calls of a module.

    Settings of two different classes are not compared (a type change says it all), and a
    module frozen or unfrozen as a whole is not repeated parameter by parameter.
    """
    old_facts, new_facts = facts_of(old_line), facts_of(new_line)
    found: list[tuple[ChangeKind, str]] = []
    same_class = old_line.module_type == new_line.module_type
    if same_class and old_facts.by_title.get("settings") != new_facts.by_title.get("settings"):
        found.append((ChangeKind.SETTINGS_CHANGED, describe_settings_change(old_facts, new_facts)))
    tensor_changes: list[str] = []
    renamed = _path_rewrite(old_line.path, new_line.path)
    for title in TENSOR_TITLES:
        if old_facts.by_title.get(title) != new_facts.by_title.get(title):
            tensor_changes += describe_tensor_fact_changes(
                renamed_ties(old_facts.tensors_of(title), renamed),
                new_facts.tensors_of(title),
                new_line.path or old_line.path,
                whole_module_frozen=old_line.frozen != new_line.frozen,
            )
    if tensor_changes:
        found.append((ChangeKind.PARAMETERS_CHANGED, "; ".join(tensor_changes)))
    return found


def _path_rewrite(old_path: str, new_path: str) -> tuple[str, str]:
    """The prefixes every path was renamed by where a model was wrapped or unwrapped whole,
    old and new (`emb` now `model.emb`: `("", "model.")`); `("", "")` otherwise. A module
    renamed on its own (`layers.0` now `blocks.0`) says nothing of its siblings' names."""
    if old_path == new_path or "<root>" in (old_path, new_path):
        return "", ""
    if new_path.endswith(f".{old_path}"):
        return "", new_path[: -len(old_path)]
    if old_path.endswith(f".{new_path}"):
        return old_path[: -len(new_path)], ""
    return "", ""


def _reuse_changes(old: list[GoldenLine], new: list[GoldenLine]) -> list[tuple[str, Change]]:
    """Each module called another number of times, with its path."""
    old_counts = _counts(old)
    new_counts = _counts(new)
    return [
        (
            path,
            Change(ChangeKind.REUSE_CHANGED, None, None, f"{path} {count} -> {new_counts[path]}"),
        )
        for path, count in old_counts.items()
        # No path: a name-free comparison, where the count would be every call's.
        if path and path in new_counts and new_counts[path] != count
    ]


def _counts(lines: list[GoldenLine]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in lines:
        counts[line.path] = counts.get(line.path, 0) + 1
    return counts


def _header_changes(old_header: GoldenHeader, new_header: GoldenHeader) -> list[str]:
    old_lines, new_lines = old_header.compared_lines, new_header.compared_lines
    if old_lines == new_lines:
        return []
    lines: list[str] = []
    for _, old_start, old_end, new_start, new_end in changed_runs(old_lines, new_lines):
        lines.extend(f"- {line}" for line in old_lines[old_start:old_end])
        lines.extend(f"+ {line}" for line in new_lines[new_start:new_end])
    return lines
