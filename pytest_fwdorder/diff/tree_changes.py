"""Paired call trees -> the changes people make to a model's nesting, one sentence each.

Pure, no torch. Per call, a wrap reads as one call inserted and every call under it renamed
and nested deeper; here it reads as what was done: `layer2 (Sequential) wraps the old
layer2, now layer2.0 (18 calls renamed under it)`. Each `TreeChange` says which calls'
per-call changes it explains, so a summary states them once.

- wrapped: a new call whose children are old calls that kept their old parent's partner
  as their grandparent, and their order;
- unwrapped: the mirror image, an old call whose children now sit in its place, in order
  (a child run before a sibling it ran after is a move of its own);
- swapped: two calls of one parent that took each other's place in its call order
  (`layer3.1 and layer3.2 (Bottleneck) swapped`), one change, not two moves;
- moved: a call paired with one under another parent, which no wrap or unwrap explains;
- renamed: a call renamed with the calls under it by the same path rewrite
  (`layer2.* -> stage2.*`), one change with a count.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.changes import Change, ChangeKind, TreeChange
from pytest_fwdorder.diff.execution_order import ExecutionOrder
from pytest_fwdorder.diff.look_alike_wraps import hedged_wraps
from pytest_fwdorder.diff.places import named_wrappers, plural
from pytest_fwdorder.diff.sibling_swaps import exchanged
from pytest_fwdorder.diff.tree_alignment import TreeAlignment
from pytest_fwdorder.golden.format import GoldenLine

_UNPAIRED = -2  # the expected parent of a call whose old parent has no partner


def tree_changes(
    alignment: TreeAlignment,
    old_names: list[GoldenLine] | None = None,
    new_names: list[GoldenLine] | None = None,
) -> list[TreeChange]:
    """The wraps, unwraps, moves between parents and renamed subtrees of an alignment.

    `old_names` / `new_names` are the lines to name calls by when the aligned ones have no
    paths (a name-free comparison); by default the aligned lines.
    """
    finder = _Finder(
        alignment,
        old_names or alignment.old_tree.lines,
        new_names or alignment.new_tree.lines,
    )
    trees = (finder.old_tree, finder.new_tree)
    names = (finder.old_names, finder.new_names)
    partners = (finder.old_to_new, finder.new_to_old)
    nesting = [*finder.wraps(), *finder.unwraps()]
    found = finder.renamed_counted(
        hedged_wraps(nesting, trees, partners, names, name_free=finder.name_free)
    )
    found += [*finder.swaps(), *finder.moves()]
    if old_names is None:  # a name-free comparison ignores renames, splits and merges
        found += [*finder.shared(split=True), *finder.shared(split=False), *finder.renames()]
    return found


def unexplained(changes: list[Change], nesting: list[TreeChange]) -> list[Change]:
    """The per-call changes that no change to the nesting explains: a wrap explains its
    wrapper's insertion and the renames and depth changes under it."""
    if not nesting:
        return changes
    old_calls: set[int] = set()
    new_calls: set[int] = set()
    for nesting_change in nesting:
        old_calls |= nesting_change.old_calls
        new_calls |= nesting_change.new_calls
    kept = []
    for change in changes:
        if change.position is not None:
            if change.kind in (ChangeKind.REMOVED, ChangeKind.MOVED):
                if change.position in old_calls:
                    continue
            elif change.kind in _NESTING_KINDS and change.position in new_calls:
                continue
        kept.append(change)
    return kept


_NESTING_KINDS = (ChangeKind.INSERTED, ChangeKind.RENAMED, ChangeKind.NESTING_CHANGED)


class _Finder:
    def __init__(
        self, alignment: TreeAlignment, old_names: list[GoldenLine], new_names: list[GoldenLine]
    ) -> None:
        self.old_tree: CallTree = alignment.old_tree
        self.new_tree: CallTree = alignment.new_tree
        self.old_to_new = alignment.partners
        self.new_to_old = {new: old for old, new in alignment.partners.items()}
        self.old_names = old_names
        self.new_names = new_names
        # A name-free comparison does not compare names: a rename is never a finding there.
        self.name_free = old_names is not alignment.old_tree.lines
        self.moved = alignment.moved
        self.order = ExecutionOrder(alignment)  # what a wrap or an unwrap cannot hold
        # Two calls that swapped places in their parent: a change of their own, never
        # among the calls a wrap or unwrap renamed.
        self.reordered: set[int] = set()
        for parent in {self.old_tree.parents[index] for index in self.moved}:
            for pair in exchanged(self.old_tree, self.new_tree, self.old_to_new, parent):
                self.reordered.update(pair)
        self.explained_old: set[int] = set()
        self.explained_new: set[int] = set()

    def expected_parent(self, old_index: int) -> int:
        """Where an old call's parent is now: its partner, `NO_PARENT`, or `_UNPAIRED`."""
        parent = self.old_tree.parents[old_index]
        if parent == NO_PARENT:
            return NO_PARENT
        return self.old_to_new.get(parent, _UNPAIRED)

    def explain_subtrees(self, new_roots: list[int]) -> tuple[frozenset[int], frozenset[int], int]:
        """Mark the paired calls of these new subtrees and their partners explained; returns
        them (old, new) and how many have another path than before (none in a name-free
        comparison). A call inserted inside is not explained: it is said on its own."""
        held = list(self._held_in(new_roots))
        olds = frozenset(old_index for _, old_index in held)
        news = frozenset(index for index, _ in held)
        self.explained_old |= olds
        self.explained_new |= news
        renamed = 0
        if not self.name_free:
            renamed = sum(
                self.old_names[old_index].path != self.new_names[index].path
                for index, old_index in held
            )
        return olds, news, renamed

    def _held_in(self, new_roots: list[int]) -> Iterator[tuple[int, int]]:
        """The paired calls (new, old) of these new subtrees that came with them: a call
        nested in a root whose parent was not its old parent's partner, or that was not
        nested in the root's old call, came from elsewhere (a Linear moved into a stage
        that was unwrapped, or into a block of the stage unwrapped), and is a move of its
        own, with the calls under it; one run out of order within its parent (a layer
        swapped inside a wrapped stage) is a swap of its own."""
        for root in new_roots:
            index, end = root, self.new_tree.ends[root]
            old_root = self.new_to_old[root]
            old_end = self.old_tree.ends[old_root]
            while index < end:
                old_index = self.new_to_old.get(index)
                if old_index is None:
                    index += 1
                elif index != root and (
                    self.expected_parent(old_index) not in (self.new_tree.parents[index], _UNPAIRED)
                    or not old_root < old_index < old_end  # from outside the root's old call
                    or self.order.out_of_order(old_index)
                    or (
                        old_index in self.reordered
                        and self.old_tree.parents[old_index] not in self.reordered
                    )
                ):
                    index = self.new_tree.ends[index]
                else:
                    yield index, old_index
                    index += 1

    def old_name(self, index: int) -> str:
        name = self.old_names[index].name
        return "model" if name == "<root>" else name

    def wraps(self) -> list[TreeChange]:
        wrapping, chains = _wrappers_around(self.new_tree, self.new_to_old, self._wrapped_in)
        found = []
        for calls in _one_per_module(wrapping, self.new_names, self._child_paths):
            roots = [child for call in calls for child in wrapping[call]]
            said = wrapping[calls[0]] if len(calls) > 1 else None
            head = named_wrappers(self.new_names, chains[calls[0]], len(calls))
            verb = "wrap" if len(chains[calls[0]]) > 1 else "wraps"
            sentence, olds, news = self._regrouped(f"{head} {verb}", roots, now=", now", said=said)
            wrappers = {holder for call in calls for holder in chains[call]}
            self.explained_new |= wrappers
            found.append(TreeChange(ChangeKind.WRAPPED, sentence, olds, news | wrappers))
        return found

    def _wrapped_in(self, wrapper: int, holder: int) -> list[int]:
        """The new calls in `wrapper` whose old calls ran where `holder` runs now."""
        tree = self.new_tree
        return [
            child
            for child in _through_unpaired(tree, self.new_to_old, wrapper)
            if child in self.new_to_old
            and self.expected_parent(self.new_to_old[child]) == tree.parents[holder]
            and not self.order.out_of_order(self.new_to_old[child])
        ]

    def _kept_from(self, wrapper: int, holder: int) -> list[int]:
        """The new calls of the old calls in `wrapper` that now run where `holder` ran."""
        place = self.expected_parent(holder)
        if place == _UNPAIRED:
            return []
        return [
            self.old_to_new[child]
            for child in _through_unpaired(self.old_tree, self.old_to_new, wrapper)
            if child in self.old_to_new
            and self.new_tree.parents[self.old_to_new[child]] == place
            and not self.order.out_of_order(child)
        ]

    def _child_paths(self, new_children: list[int]) -> tuple[str, ...]:
        """The old and the new paths of paired new calls."""
        old_paths = (self.old_names[self.new_to_old[child]].path for child in new_children)
        return (*old_paths, *(self.new_names[child].path for child in new_children))

    def unwraps(self) -> list[TreeChange]:
        unwrapping, chains = _wrappers_around(
            self.old_tree, self.old_to_new, self._kept_from, held_as=self.new_to_old
        )
        found = []
        for calls in _one_per_module(unwrapping, self.old_names, self._child_paths):
            roots = [child for call in calls for child in unwrapping[call]]
            said = unwrapping[calls[0]] if len(calls) > 1 else None
            head = named_wrappers(self.old_names, chains[calls[0]], len(calls))
            now = " is now" if len(said or roots) == 1 else " are now"
            sentence, olds, news = self._regrouped(f"{head} unwrapped:", roots, now=now, said=said)
            wrappers = {holder for call in calls for holder in chains[call]}
            self.explained_old |= wrappers
            found.append(TreeChange(ChangeKind.UNWRAPPED, sentence, olds | wrappers, news))
        return found

    def _regrouped(
        self, head: str, new_roots: list[int], *, now: str, said: list[int] | None = None
    ) -> tuple[str, frozenset[int], frozenset[int]]:
        """The sentence of a wrap or an unwrap whose children are now these new subtrees, and
        the calls it explains (old, new), marked explained.

        The sentence is `head`, the children's old names and their new names after `now`
        where they differ; `renamed_counted` adds how many calls were renamed under them.
        """
        olds, news, _ = self.explain_subtrees(new_roots)
        if said is None:
            old = ", ".join(self.old_name(self.new_to_old[root]) for root in new_roots)
            new = ", ".join(self.new_names[root].name for root in new_roots)
        else:  # the children of one call of a module wrapped at each of its calls, by path
            old = ", ".join(self.old_names[self.new_to_old[root]].path for root in said)
            new = ", ".join(self.new_names[root].path for root in said)
        sentence = f"{head} the old {old}"
        if old != new:
            sentence += f"{now} {new}"
        return sentence, olds, news

    def renamed_counted(self, changes: list[TreeChange]) -> list[TreeChange]:
        """Wraps and unwraps with how many calls were renamed under each; a call two of them
        hold (a stage flattened in a model wrapped whole) counts once, under the innermost."""
        counted: set[int] = set()
        said = list(changes)
        for at in sorted(range(len(changes)), key=lambda at: len(changes[at].old_calls)):
            fresh = changes[at].old_calls - counted
            counted |= fresh
            renamed = (
                0
                if self.name_free
                else sum(
                    self.old_names[old].path != self.new_names[self.old_to_new[old]].path
                    for old in fresh
                    if old in self.old_to_new
                )
            )
            if renamed:
                sentence = f"{changes[at].sentence} ({plural(renamed, 'call')} renamed under it)"
                said[at] = replace(changes[at], sentence=sentence)
        return said

    def swaps(self) -> list[TreeChange]:
        """Two children of one parent, each now where the other was in its call order."""
        parents = {self.old_tree.parents[old_index] for old_index in self.moved}
        found = []
        for parent in sorted(parents):
            for first, second in self._exchanged(parent):
                new_roots = [self.old_to_new[first], self.old_to_new[second]]
                olds, news, renamed = self.explain_subtrees(new_roots)
                found.append(
                    TreeChange(
                        ChangeKind.SWAPPED, self._swap_sentence(first, second, renamed), olds, news
                    )
                )
        return found

    def _exchanged(self, parent: int) -> list[tuple[int, int]]:
        """Pairs of an old parent's children that swapped places among the children that
        stayed under its partner and that no change found so far explains."""
        return exchanged(self.old_tree, self.new_tree, self.old_to_new, parent, self.explained_old)

    def _swap_sentence(self, first: int, second: int, renamed: int) -> str:
        """`layer3.1 and layer3.2 (Bottleneck) swapped`, with their new names if they took
        each other's (`3 (Tanh) and 5 (ReLU) swapped, now 5 and 3`)."""
        one, other = self.old_names[first], self.old_names[second]
        if one.module_type == other.module_type:
            sentence = f"{one.name} and {other.name} ({one.module_type}) swapped"
        else:
            sentence = (
                f"{one.name} ({one.module_type}) and {other.name} ({other.module_type}) swapped"
            )
        new_one, new_other = (self.new_names[self.old_to_new[index]] for index in (first, second))
        if (new_one.name, new_other.name) != (one.name, other.name):
            sentence += f", now {new_one.name} and {new_other.name}"
            renamed -= sum(
                1 for old, new in ((one, new_one), (other, new_other)) if old.path != new.path
            )
        if renamed > 0:
            sentence += f" ({plural(renamed, 'call')} renamed under them)"
        return sentence

    def unexplained_pairs(self) -> Iterator[tuple[int, int]]:
        """Each pair of calls (old, new), in call order, that no change found so far explains
        (asked again at each step: the change found last may explain the next pair)."""
        for old_index, new_index in sorted(self.old_to_new.items()):
            if old_index not in self.explained_old:
                yield old_index, new_index

    def moves(self) -> list[TreeChange]:
        found = []
        for old_index, new_index in self.unexplained_pairs():
            if self.expected_parent(old_index) == self.new_tree.parents[new_index]:
                continue
            old_line, new_line = self.old_names[old_index], self.new_names[new_index]
            nested = self.old_tree.size(old_index) - 1
            inner = f", with {plural(nested, 'nested call')}" if nested else ""
            if old_line.path != new_line.path:
                to = new_line.name
            else:
                parent = self.new_tree.parents[new_index]
                to = f"into {self.new_names[parent].name}" if parent != NO_PARENT else "to the top"
            olds, news, _ = self.explain_subtrees([new_index])
            found.append(
                TreeChange(
                    ChangeKind.MOVED,
                    f"{old_line.name} ({old_line.module_type}{inner}) moved to {to}"
                    if old_line.path != new_line.path
                    else f"{old_line.name} ({old_line.module_type}{inner}) moved {to}",
                    olds,
                    news,
                )
            )
        return found

    def shared(self, *, split: bool) -> list[TreeChange]:
        """A module called several times now split into one module per call (`split`), or
        several modules now one module called for each (a merge)."""
        one_names, many_names = (
            (self.old_names, self.new_names) if split else (self.new_names, self.old_names)
        )
        pairs = (
            sorted(self.old_to_new.items())
            if split
            else sorted((new, old) for old, new in self.old_to_new.items())
        )
        # Only a module one of whose calls is now made under another path can be shared.
        pairs = [
            (one, many) for one, many in pairs if (one if split else many) not in self.explained_old
        ]
        renamed = {
            one_names[one].path
            for one, many in pairs
            if one_names[one].path != many_names[many].path and many_names[many].path
        }
        renamed.discard("")
        if not renamed:
            return []
        one_counts = Counter(line.path for line in one_names)
        many_counts = Counter(line.path for line in many_names)
        groups: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for one, many in pairs:
            if one_names[one].path in renamed and many_names[many].path:
                groups[one_names[one].path].append((one, many))
        found = []
        for path, group in groups.items():
            targets = [many_names[many].path for _, many in group]
            if not _shared_by(path, targets, (one_counts, many_counts)):
                continue
            others = list(dict.fromkeys(targets))
            olds = frozenset(one if split else many for one, many in group)
            news = frozenset(many if split else one for one, many in group)
            self.explained_old |= olds
            self.explained_new |= news
            module_type = one_names[group[0][0]].module_type
            sentence = (
                f"{path} ({module_type}) split into {', '.join(others)}"
                if split
                else f"{', '.join(others)} ({module_type}) merged into {path}"
            )
            kind = ChangeKind.SPLIT if split else ChangeKind.MERGED
            found.append(TreeChange(kind, sentence, olds, news, shared_path=path))
        return found

    def renames(self) -> list[TreeChange]:
        """Calls renamed with the calls under them by one path rewrite, two calls or more."""
        found = []
        for old_index, new_index in self.unexplained_pairs():
            old_path, new_path = self.old_names[old_index].path, self.new_names[new_index].path
            if old_path == new_path or not old_path or not new_path:
                continue
            following = [
                nested
                for nested in range(new_index + 1, self.new_tree.ends[new_index])
                if _rewritten(
                    self.new_to_old, self.old_names, self.new_names, nested, old_path, new_path
                )
            ]
            if not following:
                continue
            self.explained_new.update([new_index, *following])
            self.explained_old.update([old_index, *(self.new_to_old[i] for i in following)])
            line = self.old_names[old_index]
            found.append(
                TreeChange(
                    ChangeKind.RENAMED,
                    f"{line.name} ({line.module_type}) -> {self.new_names[new_index].name} "
                    f"({plural(len(following) + 1, 'call')} renamed with it)",
                    frozenset([old_index, *(self.new_to_old[i] for i in following)]),
                    frozenset([new_index, *following]),
                )
            )
        return _renumbered(found, self.old_names, self.new_names)


def _shared_by(path: str, targets: list[str], counts: tuple[Counter[str], Counter[str]]) -> bool:
    """Whether the module at `path`, whose calls are now made by the modules at `targets`
    (one per call, in order), was split into them (or, read the other way, they were merged
    into it): all of its calls, two or more, now made by two modules or more, each new but
    `path` itself, which makes none but the old module's calls (`relu` split into `relu`,
    `relu2`). `counts`: the calls of each path on the one side and on the many side."""
    one_counts, many_counts = counts
    others = set(targets)
    if len(targets) < 2 or len(others) < 2 or len(targets) != one_counts[path]:
        return False
    new_only = all(other == path or other not in one_counts for other in others)
    return new_only and many_counts[path] == targets.count(path)


def _renumbered(
    renames: list[TreeChange], old_names: list[GoldenLine], new_names: list[GoldenLine]
) -> list[TreeChange]:
    """The renames, where siblings in a row moved up or down by one shift (a layer inserted
    or deleted before them: `features.3` -> `features.4`, `features.4` -> `features.5`, ...)
    said once, by the first of them: `features.3 ... features.12 -> features.4 ...
    features.13, renumbered (10 subtrees, 184 calls renamed with them)`; the others keep
    their calls (each is still counted) with no sentence of their own."""
    result = list(renames)
    runs: list[tuple[tuple[str, int], int, list[int]]] = []  # (parent, shift), first, places
    for place, change in enumerate(renames):
        old_path = old_names[min(change.old_calls)].path
        numbered = _numbered(old_path, new_names[min(change.new_calls)].path)
        if numbered is None:
            continue
        key, number = numbered
        if runs and runs[-1][0] == key and runs[-1][1] + len(runs[-1][2]) == number:
            runs[-1][2].append(place)
        else:
            runs.append((key, number, [place]))
    for (parent, shift), first, places in runs:
        if len(places) < 2:
            continue
        last = first + len(places) - 1
        calls = sum(len(renames[place].new_calls) for place in places)
        prefix = f"{parent}." if parent else ""  # children of a top-level Sequential: `0`
        result[places[0]] = replace(
            renames[places[0]],
            sentence=f"{prefix}{first} ... {prefix}{last} -> {prefix}{first + shift} ... "
            f"{prefix}{last + shift}, renumbered ({len(places)} subtrees, {plural(calls, 'call')} "
            "renamed with them)",
        )
        for place in places[1:]:
            result[place] = replace(renames[place], sentence="")
    return result


def _numbered(old_path: str, new_path: str) -> tuple[tuple[str, int], int] | None:
    """((parent, shift), old number) for `a.3` -> `a.4`; None for any other rename."""
    old_parent, _, old_number = old_path.rpartition(".")
    new_parent, _, new_number = new_path.rpartition(".")
    if old_parent != new_parent or not old_number.isdigit() or not new_number.isdigit():
        return None
    return (old_parent, int(new_number) - int(old_number)), int(old_number)


def _rewritten(
    new_to_old: dict[int, int],
    old_names: list[GoldenLine],
    new_names: list[GoldenLine],
    new_index: int,
    old_prefix: str,
    new_prefix: str,
) -> bool:
    """Whether a nested call's path changed by the same rewrite as its renamed ancestor's."""
    old_index = new_to_old.get(new_index)
    if old_index is None:
        return False
    old_path, new_path = old_names[old_index].path, new_names[new_index].path
    if old_prefix == "<root>" or new_prefix == "<root>":
        return False
    return (
        old_path.startswith(f"{old_prefix}.")
        and new_path == new_prefix + old_path[len(old_prefix) :]
    )


def _one_per_module(
    wrapping: dict[int, list[int]],
    names: list[GoldenLine],
    child_paths: Callable[[list[int]], tuple[str, ...]],
) -> list[list[int]]:
    """The wrapper calls of `wrapping` (wrapper index in `names` -> the new calls it wraps or
    wrapped) grouped into one wrap per module, in call order: every call of one module, each
    around calls of the same modules (`child_paths`), is one wrap or unwrap (a module called
    twice is wrapped once); any other call is one of its own."""
    calls_of = Counter(line.path for line in names)
    groups: dict[tuple[str, ...], list[int]] = {}
    for wrapper, children in wrapping.items():
        groups.setdefault((names[wrapper].path, *child_paths(children)), []).append(wrapper)
    found = []
    for (path, *_), calls in groups.items():
        if len(calls) > 1 and len(calls) == calls_of[path]:
            found.append(calls)
        else:
            found += [[call] for call in calls]
    return sorted(found)


def _wrappers_around(
    tree: CallTree,
    partners: dict[int, int],
    held: Callable[[int, int], list[int]],
    *,
    held_as: dict[int, int] | None = None,
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Each call of `tree` without a partner that wraps (or wrapped) others: the new calls
    `held(wrapper, holder)` gives for the innermost call of its unpaired chain
    (`_unpaired_chain`) that gives any, and the chain up to that call, outermost first, then
    the unpaired calls inside it whose calls it holds. `held_as` maps the calls `held` gives
    to `tree`'s (an unwrap's new calls to the old); None where they are `tree`'s own (a
    wrap's)."""
    wrapping: dict[int, list[int]] = {}
    chains: dict[int, list[int]] = {}
    claimed: set[int] = set()  # the calls inside a wrapper found already, said with it
    for wrapper in range(len(tree.lines)):
        if wrapper in partners or wrapper in claimed:
            continue
        outward = _unpaired_chain(tree, partners, wrapper)
        for depth, holder in enumerate(outward):
            found = held(wrapper, holder)
            if found:
                wrapping[wrapper] = found
                held_here = set(found) if held_as is None else {held_as[call] for call in found}
                inner = [
                    index
                    for index in _through_unpaired(tree, partners, wrapper, containers=True)
                    if any(child in held_here for child in tree.children[index])
                ]
                chains[wrapper] = [*outward[: depth + 1][::-1], *inner]
                claimed.update(inner)
                break
    return wrapping, chains


def _through_unpaired(
    tree: CallTree, partners: dict[int, int], wrapper: int, *, containers: bool = False
) -> list[int]:
    """The calls directly in `wrapper`, each one without a partner and with calls of its own
    opened into those (a Sequential flattened two levels at once: the old `1.1`'s calls are
    the old `1`'s too); with `containers`, the calls so opened instead."""
    found: list[int] = []
    for child in tree.children[wrapper]:
        if child not in partners and tree.children[child]:
            if containers:
                found.append(child)
            found += _through_unpaired(tree, partners, child, containers=containers)
        elif not containers:
            found.append(child)
    return found


def _unpaired_chain(tree: CallTree, partners: dict[int, int], wrapper: int) -> list[int]:
    """`wrapper`, then each call it runs inside that has no partner and runs nothing else
    (a wrapper around a wrapper), innermost first: the wrappers one change may have put
    around the calls under `wrapper`."""
    chain = [wrapper]
    parent = tree.parents[wrapper]
    while parent != NO_PARENT and parent not in partners and len(tree.children[parent]) == 1:
        chain.append(parent)
        parent = tree.parents[parent]
    return chain
