"""Changes -> words: the summary of a diff, a line per kind of change, and where a call is.

Pure functions on text, no torch. What a reviewer reads first comes first: a line of totals,
then one line per kind of change with examples (the calls under them are changed_calls.py's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_fwdorder.calls.change_kinds import FacetChangeKind
from pytest_fwdorder.diff.call_tree import CallTree, build_call_tree
from pytest_fwdorder.diff.changes import Change, ChangeKind, TreeChange, accounted_for
from pytest_fwdorder.diff.consequences import (
    FOLLOWERS_SHOWN,
    Followers,
    describe_passed_on,
    fold_consequences,
)
from pytest_fwdorder.diff.places import (
    at_modules,
    by_module,
    called,
    describe_run_place,
    end_order,
    hedged_look_alikes,
    module_name,
    plural,
    run_around,
    subtree_end,
    which_of,
)
from pytest_fwdorder.diff.tree_changes import unexplained
from pytest_fwdorder.diff.uniform_changes import (
    UniformChange,
    describe_entry_change,
    describe_uniform_change,
    entry_change,
    group_uniform_changes,
)
from pytest_fwdorder.golden.figures import EXAMPLES, listed
from pytest_fwdorder.golden.format import GoldenLine

# Order of the summary: what a reviewer should read first comes first.
_SUMMARY_ORDER = (
    ChangeKind.TYPE_CHANGED,
    ChangeKind.INSERTED,
    ChangeKind.REMOVED,
    ChangeKind.MOVED,
    ChangeKind.RENAMED,
    ChangeKind.INPUT_CHANGED,
    ChangeKind.OUTPUT_CHANGED,
    ChangeKind.SETTINGS_CHANGED,
    ChangeKind.PARAMETERS_CHANGED,
    ChangeKind.MODE_CHANGED,
    ChangeKind.NESTING_CHANGED,
    ChangeKind.REGISTRATION_CHANGED,
    ChangeKind.FROZEN_CHANGED,
    ChangeKind.REUSE_CHANGED,
    ChangeKind.FACET_CHANGED,
    ChangeKind.ODD_BLOCK_FOUND,
    ChangeKind.ODD_BLOCK_GONE,
    ChangeKind.FORWARD_RUN_FOUND,
    ChangeKind.FORWARD_RUN_GONE,
)
# Where a change made throughout a part of the model is said: with the inputs.
_UNIFORM_AT = _SUMMARY_ORDER.index(ChangeKind.INPUT_CHANGED)
# Header findings, counted by what they are about and described item by item.
_FINDINGS = {
    ChangeKind.ODD_BLOCK_FOUND: "block",
    ChangeKind.ODD_BLOCK_GONE: "block",
    ChangeKind.FORWARD_RUN_FOUND: "module",
    ChangeKind.FORWARD_RUN_GONE: "module",
}


# What a change of each kind counts, where it is not a call.
_NOUNS = {
    ChangeKind.REUSE_CHANGED: "module",
}


def summarize(
    changes: list[Change],
    old_lines: list[GoldenLine],
    new_lines: list[GoldenLine],
    nesting: list[TreeChange] | None = None,
    *,
    name_free: bool = False,
    tree: CallTree | None = None,
) -> str:
    """A paragraph: one line of totals, then one line per change to the nesting (a wrap, an
    unwrap, a move to another parent, a renamed subtree), then one per kind of the other
    changes. The per-call changes a change to the nesting explains are not repeated. `tree`
    is the call tree of `new_lines`, where the caller has it."""
    nesting = nesting or []
    tree = tree or build_call_tree(new_lines)
    changes, followers = fold_consequences(unexplained(changes, nesting), new_lines, tree)
    nesting_counts = Counter(change.kind for change in nesting)
    counts = Counter(change.kind for change in changes)
    kinds = [kind for kind in _SUMMARY_ORDER if counts[kind]]
    totals = [
        f"{nesting_counts[kind]} {_NESTING_NOUNS[kind][nesting_counts[kind] != 1]}"
        for kind in _NESTING_NOUNS
        if nesting_counts[kind]
    ]
    totals += [
        total
        for kind in kinds
        # The facets' totals where their kind is, each facet's in its own words.
        for total in (
            _facet_totals(changes)
            if kind is ChangeKind.FACET_CHANGED
            else [
                f"{plural(counts[kind], _FINDINGS[kind])} {kind.value}"
                if kind in _FINDINGS
                else f"{plural(counts[kind], _noun(kind, changes))} {kind.value}"
            ]
        )
    ]
    lines = [
        f"{plural(len(old_lines), 'call')} before, {len(new_lines)} after: "
        + (", ".join(totals) if totals else "only the header differs")
    ]
    for kind, nouns in _NESTING_NOUNS.items():
        # A renumbering is said by the first of its renames (tree_changes._renumbered).
        sentences = [
            change.sentence for change in nesting if change.kind is kind and change.sentence
        ]
        lines += sentences[:EXAMPLES]
        if len(sentences) > EXAMPLES:
            lines.append(f"(+{len(sentences) - EXAMPLES} more {nouns[1]})")
    lines += _kind_lines(
        changes, kinds, (old_lines, new_lines), followers, tree, name_free, nesting
    )
    return "\n".join(line for line in lines if line)


def _kind_lines(
    changes: list[Change],
    kinds: list[ChangeKind],
    lines_of: tuple[list[GoldenLine], list[GoldenLine]],
    followers: Followers,
    tree: CallTree,
    name_free: bool,
    nesting: list[TreeChange],
) -> list[str]:
    """A line per kind of change, in the summary's order; a change made throughout a part of
    the model (a dtype, a batch size) said once, by place, where the inputs' line would be;
    so is a change of the model's input that every change follows from."""
    uniform = group_uniform_changes(changes, tree)
    entry = None if uniform else entry_change(changes, tree)
    if entry is not None:
        passed_on = sum(
            len(followers.get((change.kind, change.position or 0), [])) for change in entry.changes
        )
        return [describe_entry_change(entry, passed_on)]
    grouped = {id(change) for one in uniform for change in one.changes}
    rest = [change for change in changes if id(change) not in grouped]
    old_lines, new_lines = lines_of
    nested = accounted_for(nesting)
    diff = _Changes(rest, old_lines, new_lines, followers, name_free, nesting, nested)
    described = {change.kind for change in rest}
    lines = []
    for kind in kinds:
        if kind is ChangeKind.INPUT_CHANGED or (
            uniform and _SUMMARY_ORDER.index(kind) > _UNIFORM_AT
        ):
            lines += [_describe_uniform(one, diff) for one in uniform]
            uniform = []
        if kind in described:
            lines.append(_describe_kind(diff, kind))
    lines += [_describe_uniform(one, diff) for one in uniform]
    return lines


def _describe_uniform(uniform: UniformChange, diff: _Changes) -> str:
    passed_on = sum(
        len(diff.followers.get((change.kind, change.position or 0), []))
        for change in uniform.changes
    )
    return describe_uniform_change(uniform, diff.new_lines, passed_on, name_free=diff.name_free)


def _noun(kind: ChangeKind, changes: list[Change]) -> str:
    """What the totals count changes of `kind` by: a module's facts by module, where one
    of the changed modules ran more than once (`places.at_modules`), else calls."""
    if kind in (ChangeKind.SETTINGS_CHANGED, ChangeKind.PARAMETERS_CHANGED) and by_module(
        [change.new for change in changes if change.kind is kind and change.new is not None]
    ):
        return "module"
    return _NOUNS.get(kind, "call")


def _facet_totals(changes: list[Change]) -> list[str]:
    """The facets' changes in the totals, in each facet's words: those of the kinds a facet
    declares at calls (`2 operations inserted`), the calls with changed values (`3 calls
    output elements changed`), a header facet's sentences where it counts them (`2 backward
    steps changed`) or its words (`graph breaks changed`), then the header's of declared kinds
    (`1 uncounted operation added`)."""
    facets = _facts_first([change for change in changes if change.kind is ChangeKind.FACET_CHANGED])
    totals = [
        f"{plural(count, kind.noun)} {kind.verb}" for kind, count in _kind_counts(facets, False)
    ]
    worded = [c for c in facets if c.facet_kind is None]
    per_call = Counter(c.words for c in worded if not _of_the_header(c))
    of_the_header = Counter((c.words, c.noun) for c in worded if _of_the_header(c))
    totals += [f"{plural(count, 'call')} {words}" for words, count in per_call.items()]
    totals += [
        f"{plural(count, noun)} changed" if noun else words
        for (words, noun), count in of_the_header.items()
    ]
    totals += [
        f"{plural(count, kind.noun)} {kind.verb}" for kind, count in _kind_counts(facets, True)
    ]
    return totals


def _kind_counts(changes: list[Change], of_the_header: bool) -> list[tuple[FacetChangeKind, int]]:
    """How many changes of each kind the facets declare, at calls or of the header."""
    return list(
        Counter(
            c.facet_kind
            for c in changes
            if c.facet_kind is not None and _of_the_header(c) is of_the_header
        ).items()
    )


# The changes to the nesting, in the order a summary gives them, and how it counts them.
_NESTING_NOUNS = {
    ChangeKind.WRAPPED: ("wrap", "wraps"),
    ChangeKind.UNWRAPPED: ("unwrap", "unwraps"),
    ChangeKind.MOVED: ("move to another parent", "moves to another parent"),
    ChangeKind.SWAPPED: ("swap", "swaps"),
    ChangeKind.SPLIT: ("shared module split", "shared modules split"),
    ChangeKind.MERGED: ("merge into a shared module", "merges into shared modules"),
    ChangeKind.RENAMED: ("subtree renamed", "subtrees renamed"),
}


@dataclass(frozen=True, slots=True)
class _Changes:
    """The changes a summary describes, with the lines their positions index."""

    changes: list[Change]
    old_lines: list[GoldenLine]
    new_lines: list[GoldenLine]
    # The input or output changes that follow from a change, by its position.
    followers: Followers
    name_free: bool = False  # the lines are names for calls aligned without them
    nesting: list[TreeChange] = field(default_factory=list)
    # The old and new calls a change to the nesting accounts for (a wrapped block).
    nested: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())

    def of_kind(self, kind: ChangeKind) -> list[Change]:
        return [change for change in self.changes if change.kind is kind]

    def look_alikes(
        self, index: int, kind: ChangeKind, changed: set[int | None], given_otherwise: set[str]
    ) -> list[int]:
        """The look-alikes a call that went or came (`kind`) cannot be told from
        (`hedged_look_alikes`): none that a change to the nesting accounts for (a block
        wrapped did not go), unless that change is of one of them, which names them."""
        new = kind is ChangeKind.INSERTED
        for change in self.nesting:
            if index in change.look_alikes[new]:
                return list(change.look_alikes[new])
        lines = self.new_lines if new else self.old_lines
        alike = hedged_look_alikes(lines, index, self.name_free, changed, given_otherwise)
        return run_around(alike, index, self.nested[new])


def _facts_first(changes: list[Change]) -> list[Change]:
    """Facet changes with those a facet found between two calls' facts first (`Change.values`:
    a facet with one value per trace, whose facts come first), stable."""
    return sorted(changes, key=lambda change: change.values is None)


def _describe_kind(diff: _Changes, kind: ChangeKind) -> str:
    """The summary's line for the changes of one kind (empty when another line said them)."""
    describe = _DESCRIBERS.get(kind, _describe_per_call)
    return describe(diff, kind, diff.of_kind(kind))


def _describe_findings(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    return f"{plural(len(changes), _FINDINGS[kind])} {kind.value}: " + listed(
        [c.detail for c in changes], separator="; "
    )


def _describe_types(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    """`type changed at relu: ReLU -> SiLU`; for a module called more than once `at
    layer3.1.relu (2 calls)`; for several modules each change with where it happened:
    `at 17 calls: ReLU -> LeakyReLU in relu, layer1.0.relu (2 calls), ...`. Calls without a
    path to give (a comparison that blanked them) are counted, not named."""
    # change -> module path -> calls, in the order the calls ran
    groups: dict[str, dict[str, int]] = {}
    for change in changes:
        modules = groups.setdefault(change.detail, {})
        path = change.new.path if change.new is not None else ""
        modules[path] = modules.get(path, 0) + 1
    if len(changes) == 1 and changes[0].new is not None:
        return f"type changed at {changes[0].new.name}: {changes[0].detail}"
    named = all(path for modules in groups.values() for path in modules)
    if named and len(groups) == 1 and len(only := next(iter(groups.values()))) == 1:
        path, calls = next(iter(only.items()))
        return f"type changed at {path} ({plural(calls, 'call')}): {changes[0].detail}"
    if named:
        parts = [
            f"{detail} in {listed(list(map(_calls_of, modules.items())))}"
            for detail, modules in groups.items()
        ]
    elif len(groups) == 1:
        parts = [changes[0].detail]
    else:
        parts = [f"{detail} ({sum(modules.values())})" for detail, modules in groups.items()]
    return f"type changed at {plural(len(changes), 'call')}: {', '.join(parts)}"


def _calls_of(module: tuple[str, int]) -> str:
    """`layer1.0.relu (2 calls)`, or the path alone for one call."""
    path, calls = module
    return path if calls == 1 else f"{path} ({plural(calls, 'call')})"


def _describe_renames(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    items = [f"{called(c.old)} -> {c.new.name}" for c in changes if c.old and c.new]
    return f"{plural(len(changes), 'call')} renamed: " + listed(items)


def _describe_values_passed(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    side = "input" if kind is ChangeKind.INPUT_CHANGED else "output"
    items = [
        f"{called(c.new)} {side} {c.detail}"
        + describe_passed_on(side, diff.followers.get((kind, c.position or 0), []))
        for c in changes
        if c.new is not None
    ]
    return f"{side} changed at {plural(len(changes), 'call')}: " + listed(items, separator="; ")


def _describe_reuse(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    return "reuse count changed: " + listed([c.detail for c in changes])


def _describe_settings(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    # One sentence per call: its settings, and the parameters that follow from them; the
    # same change at calls of one class said once, so that another is not lost behind it.
    parameters = {
        c.position: c for c in diff.of_kind(ChangeKind.PARAMETERS_CHANGED) if c.new is not None
    }
    items = []
    for c in changes:
        if c.new is None:
            continue
        what = c.detail
        along = parameters.get(c.position)
        if along is not None:
            what += f" ({_without_prefix(along.detail, c.new.path)})"
        items.append((c.new, what))
    at = at_modules(diff.new_lines, [c.new for c in changes if c.new is not None])
    return f"settings changed at {at}: " + listed(_alike_said_once(items), separator="; ")


def _describe_parameters(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    with_settings = {c.position for c in diff.of_kind(ChangeKind.SETTINGS_CHANGED)}
    left = [c for c in changes if c.position not in with_settings or c.new is None]
    if not left:
        return ""  # each was said with its call's settings
    said = len(changes) - len(left)
    with_them = f" ({said} with the settings above)" if said else ""
    of_the_model = [f"the model: {c.detail}" for c in left if c.new is None]
    at_calls = [(c.new, c.detail) for c in left if c.new is not None]
    at = (
        plural(len(changes), "call")
        if of_the_model
        else at_modules(diff.new_lines, [c.new for c in changes if c.new is not None])
    )
    return f"parameters changed at {at}{with_them}: " + listed(
        _alike_said_once(at_calls) + of_the_model, separator="; "
    )


def _alike_said_once(items: list[tuple[GoldenLine, str]]) -> list[str]:
    """`fc (Linear): bias True -> False` per call, in order; a change made alike at calls of
    one class (its tensors named within each) once, where its first call is: `20 BatchNorm2d
    calls (bn1, layer1.0.bn1, layer1.0.bn2, +17 more): eps 1e-05 -> 0.001`."""
    groups: dict[tuple[str, str], list[tuple[GoldenLine, str]]] = {}
    for line, what in items:
        key = (line.module_type, _without_prefix(what, line.path))
        groups.setdefault(key, []).append((line, what))
    said = []
    for (module_type, what), group in groups.items():
        # A module run more than once is named as a module: its facts are not its first call's.
        modules = by_module([line for line, _ in group])
        name: Callable[[GoldenLine], str] = module_name if modules else _call_name
        if len(group) == 1:
            line, written = group[0]
            said.append(f"{name(line)} ({module_type}): {written}")
        else:
            names = [name(line) for line, _ in group]
            shown = ", ".join(names[:FOLLOWERS_SHOWN])
            if len(names) > FOLLOWERS_SHOWN:
                shown += f", +{len(names) - FOLLOWERS_SHOWN} more"
            # The calls first: a change of several tensors is a list of its own.
            what = what.replace("; ", ", ")
            noun = "modules" if modules else "calls"
            said.append(f"{len(group)} {module_type} {noun} ({shown}): {what}")
    return said


def _call_name(line: GoldenLine) -> str:
    return line.name


def _describe_modes(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    return f"{kind.value} at {plural(len(changes), 'place')}: " + listed(
        _at_calls(changes), separator="; "
    )


def _at_calls(changes: list[Change]) -> list[str]:
    """`conv1 (Conv2d): detail` per change, `the model: detail` for one about no call."""
    return [
        f"{c.new.name} ({c.new.module_type}): {c.detail}"
        if c.new is not None
        else f"the model: {c.detail}"
        for c in changes
    ]


def _describe_per_call(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    items = [f"{called(c.new)} {c.detail}" for c in changes if c.new is not None]
    return f"{kind.value} at {plural(len(changes), 'call')}: " + listed(items)


def _describe_subtree_kind(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    return _describe_subtrees(diff, changes, kind)


def _describe_facets(diff: _Changes, kind: ChangeKind, changes: list[Change]) -> str:
    return _describe_facet_changes(diff, changes)


# How the summary words each kind; a kind not listed reads `kind at N calls: ...`.
_DESCRIBERS: dict[ChangeKind, Callable[[_Changes, ChangeKind, list[Change]], str]] = {
    **dict.fromkeys(_FINDINGS, _describe_findings),
    ChangeKind.FACET_CHANGED: _describe_facets,
    ChangeKind.TYPE_CHANGED: _describe_types,
    ChangeKind.INSERTED: _describe_subtree_kind,
    ChangeKind.REMOVED: _describe_subtree_kind,
    ChangeKind.MOVED: _describe_subtree_kind,
    ChangeKind.RENAMED: _describe_renames,
    ChangeKind.INPUT_CHANGED: _describe_values_passed,
    ChangeKind.OUTPUT_CHANGED: _describe_values_passed,
    ChangeKind.REUSE_CHANGED: _describe_reuse,
    ChangeKind.SETTINGS_CHANGED: _describe_settings,
    ChangeKind.PARAMETERS_CHANGED: _describe_parameters,
    ChangeKind.MODE_CHANGED: _describe_modes,
}


def _without_prefix(detail: str, path: str) -> str:
    """`weight f32[...]` for `conv1.weight f32[...]` in a sentence already about conv1."""
    if not path or path == "<root>":
        return detail
    return detail.replace(f"{path}.", "")


def _describe_subtrees(diff: _Changes, changes: list[Change], kind: ChangeKind) -> str:
    """Group inserted, removed or moved calls under the outermost one:
    `layer2.se (SEBlock, with 5 nested calls) after layer2.3`."""
    lines = diff.new_lines if kind is ChangeKind.INSERTED else diff.old_lines
    renamed = {
        (change.old.name, change.new.name): change.old
        for change in diff.of_kind(ChangeKind.RENAMED)
        if change.old is not None and change.new is not None
    }
    items: list[str] = []
    changed = {change.position for change in changes}
    # The calls given something else: where look-alikes are, what they are given may say
    # where each runs, not which it is (`hedged_look_alikes`).
    given_otherwise = {
        line.path
        for change in diff.of_kind(ChangeKind.INPUT_CHANGED)
        for line in (change.old, change.new)
        if line is not None
    }
    said_with_look_alikes: set[int] = set()
    last_nested = -1
    nested = 0
    root: Change | None = None
    for change in [*changes, None]:
        if change is not None and change.position is not None and change.position < last_nested:
            nested += 1
            continue
        if root is not None and root.position in said_with_look_alikes:
            pass  # said with the look-alikes it cannot be told from
        elif root is not None and root.position is not None:
            line = lines[root.position]
            inner = f", with {plural(nested, 'nested call')}" if nested else ""
            item = f"{line.name} ({line.module_type}{inner}) {root.detail}"
            shown = kind is not ChangeKind.MOVED and len(items) < EXAMPLES
            alike = diff.look_alikes(root.position, kind, changed, given_otherwise) if shown else []
            which = which_of(lines, alike, changed)
            if which is not None:
                # The trace cannot tell which of these went (or came): say all of them.
                where = describe_run_place(lines, alike[0], name_free=diff.name_free)
                went = [index for index in alike if index in changed]
                each = " each" if inner and len(went) > 1 else ""
                item = f"{which} ({line.module_type} look-alikes{inner}{each}) {where}"
                said_with_look_alikes.update(went)
            if kind is ChangeKind.MOVED and root.new is not None:
                partner = renamed.get((root.new.name, line.name))
                if partner is not None:
                    item += f", swapped with {called(partner)}"
            items.append(item)
        if change is None or change.position is None:
            break
        root, nested = change, 0
        last_nested = subtree_end(lines, change.position)
    return f"{plural(len(changes), 'call')} {kind.value}: " + listed(items, separator="; ")


def _of_the_header(change: Change) -> bool:
    """Whether a facet's change is of a value the header holds, not of a call's."""
    return change.old is None and change.new is None


def _called_values(change: Change) -> tuple[str, object, object, str]:
    """A facet's change between two calls as its `summary_line` takes it."""
    old, new = change.values or (None, None)
    return called(change.new) if change.new else "", old, new, change.detail


def _describe_facet_changes(diff: _Changes, changes: list[Change]) -> str:
    """One line per facet, in its words: `output elements changed at 1 call: fc (Linear): 40
    -> 80`. Its calls are given in the order they ended: a facet takes a call's value as
    the call ends, and a parent's output moves because a child's did, so the first to end
    is where its values first differed (`..., first at project (Linear): ...; later: ...`).
    A facet of the header says its sentences one after the other (graph breaks), or, where
    it counts them (`noun`), its words and the first five (`backward steps changed: ...`).
    A kind a facet declares gets a line of its own, first at calls and last of the header,
    as the totals give them (`_declared_kind_lines`)."""
    ended = end_order(diff.new_lines)
    by_words: dict[str, list[Change]] = {}
    of_the_header: dict[tuple[str, str], list[str]] = {}
    for change in _facts_first(changes):
        if change.facet_kind is not None:
            continue
        if _of_the_header(change):
            of_the_header.setdefault((change.words, change.noun), []).append(change.detail)
        else:
            by_words.setdefault(change.words, []).append(change)
    lines = _declared_kind_lines(changes, of_the_header=False)
    for words, group in by_words.items():
        summary_line = getattr(group[0].facet, "summary_line", None)
        if summary_line is not None:  # the facet's own line for its changes between calls
            lines.append(summary_line([_called_values(c) for c in group if c.new]))
            continue
        group.sort(key=lambda c: ended[c.position] if c.position is not None else 0)
        items = [f"{called(c.new)}: {c.detail}" for c in group if c.new]
        if len(items) == 1:
            lines.append(f"{words} at 1 call: {items[0]}")
        elif items:
            later = listed(items[1:], separator="; ")
            lines.append(
                f"{words} at {plural(len(group), 'call')}, first at {items[0]}; later: {later}"
            )
    lines += [
        f"{words}: {listed(details, separator='; ')}" if noun else "; ".join(details)
        for (words, noun), details in of_the_header.items()
    ]
    lines += _declared_kind_lines(changes, of_the_header=True)
    return "\n".join(lines)


def _declared_kind_lines(changes: list[Change], *, of_the_header: bool) -> list[str]:
    """A line per kind a facet declares, in the facet's words where it gives them
    (`describe_kind_changes`: operations' `2 operations inserted in <root>: ...`), else
    `2 operations inserted: <root>: softmax (op 2 of 4); ...`."""
    groups: dict[FacetChangeKind, list[Change]] = {}
    for change in changes:
        if change.facet_kind is not None and _of_the_header(change) is of_the_header:
            groups.setdefault(change.facet_kind, []).append(change)
    lines = []
    for kind, group in groups.items():
        said = [(c.new.name if c.new is not None else "", c.detail) for c in group]
        describe = getattr(group[0].facet, "describe_kind_changes", None)
        if describe is not None:
            lines.append(describe(kind.name, said))
            continue
        items = [f"{name}: {detail}" if name else detail for name, detail in said]
        lines.append(
            f"{plural(len(group), kind.noun)} {kind.verb}: " + listed(items, separator="; ")
        )
    return lines
