"""A wrap or an unwrap of one of several look-alikes, one of which went or came beside it:
which it was, said as what it may have been. Pure, no torch.

Six look-alike stages, the third flattened and the fifth removed, give the goldens that the
fourth flattened and the first removed give: only the places of the calls left are known.
The alignment picks one reading; the summary names every stage that may have been
flattened (`one of 2, 3 (Sequential look-alikes) unwrapped`), and every look-alike that may
have gone, as it does for a look-alike removed alone.

Counted in look-alikes from the start of their run, the one wrapped is the one with as many
kept before it as the new side keeps before the wrapper: of `before` look-alikes there,
none to all of those `inserted` came, and before it none to all of those `removed` went.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from pytest_fwdorder.diff.call_keys import numbered
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.changes import ChangeKind, TreeChange
from pytest_fwdorder.golden.format import GoldenLine


def hedged_wraps(
    changes: list[TreeChange],
    trees: tuple[CallTree, CallTree],
    partners: dict[int, int],
    names: tuple[list[GoldenLine], list[GoldenLine]],
    *,
    name_free: bool,
) -> list[TreeChange]:
    """`changes` (wraps and unwraps), each lone wrap or unwrap among look-alikes that cannot
    be told from them said as one of them, with the look-alikes among which those that went
    or came cannot be told (`TreeChange.look_alikes`); the others as they are. Two
    wraps in one run of look-alikes are left as they are: the count above is for one."""
    reader = _Reader(trees, partners, names, name_free)
    found = {at: reader.lone(change) for at, change in enumerate(changes)}
    runs = Counter(reader.old_runs.key(lone[0]) for lone in found.values() if lone)
    hedged = list(changes)
    for at, lone in found.items():
        if lone is not None and runs[reader.old_runs.key(lone[0])] == 1:
            hedged[at] = reader.hedged(changes[at], *lone)
    return hedged


class _Runs:
    """Each call's place among its siblings, and the run of look-alikes (calls of one
    subtree shape, one after another) it is in, worked out once per parent."""

    def __init__(self, tree: CallTree) -> None:
        self.tree = tree
        self._places: dict[int, tuple[list[int], dict[int, int], list[int], list[int]]] = {}

    def run(self, index: int) -> list[int]:
        """`index` and its look-alikes next to it, in order."""
        siblings, place, starts, ends = self._of(self.tree.parents[index])
        at = place[index]
        return siblings[starts[at] : ends[at]]

    def key(self, index: int) -> tuple[int, int]:
        """Which run `index` is in: its parent and the place of the run's first call."""
        parent = self.tree.parents[index]
        _, place, starts, _ = self._of(parent)
        return parent, starts[place[index]]

    def place(self, index: int) -> tuple[list[int], int]:
        siblings, place, _, _ = self._of(self.tree.parents[index])
        return siblings, place[index]

    def _of(self, parent: int) -> tuple[list[int], dict[int, int], list[int], list[int]]:
        if parent not in self._places:
            siblings = self.tree.roots if parent == NO_PARENT else self.tree.children[parent]
            shapes = [self.tree.shapes[child] for child in siblings]
            starts = list(range(len(siblings)))
            for at in range(1, len(siblings)):
                if shapes[at] == shapes[at - 1]:
                    starts[at] = starts[at - 1]
            ends = [at + 1 for at in range(len(siblings))]
            for at in range(len(siblings) - 2, -1, -1):
                if shapes[at] == shapes[at + 1]:
                    ends[at] = ends[at + 1]
            place = {child: at for at, child in enumerate(siblings)}
            self._places[parent] = (siblings, place, starts, ends)
        return self._places[parent]


class _Reader:
    def __init__(
        self,
        trees: tuple[CallTree, CallTree],
        partners: dict[int, int],
        names: tuple[list[GoldenLine], list[GoldenLine]],
        name_free: bool,
    ) -> None:
        self.old_tree, self.new_tree = trees
        self.old_runs, self.new_runs = _Runs(self.old_tree), _Runs(self.new_tree)
        self.old_to_new = partners
        self.new_to_old = {new: old for old, new in partners.items()}
        self.old_names, self.new_names = names
        self.name_free = name_free

    def lone(self, change: TreeChange) -> tuple[int, list[int]] | None:
        """The old call of a wrap or unwrap of one call, and the new calls in its place."""
        if change.kind is ChangeKind.WRAPPED:
            return self._lone_wrap(change)
        if change.kind is ChangeKind.UNWRAPPED:
            return self._lone_unwrap(change)
        return None

    def hedged(self, change: TreeChange, old_call: int, slot: list[int]) -> TreeChange:
        runs = self._runs(old_call, slot)
        if runs is None:
            return change
        olds, news = runs
        removed = [old for old in olds if old != old_call and old not in self.old_to_new]
        inserted = [new for new in news if new not in self.new_to_old]
        before = sum(new < slot[0] for new in news)
        first = max(0, before - len(inserted))
        last = min(len(olds) - 1, before + len(removed))
        if last <= first:
            return change
        may_be = tuple(olds[first : last + 1])
        which = ", ".join(self.old_names[old].name for old in may_be)
        alike = f"({self.old_names[old_call].module_type} look-alikes)"
        if change.kind is ChangeKind.WRAPPED:
            wrapper = self.new_names[slot[0]]
            now = self.new_names[self.new_tree.children[slot[0]][0]].name
            sentence = f"{_called(wrapper)} wraps one of the old {which} {alike}, now {now}"
        else:
            children = ", ".join(self.new_names[new].name for new in slot)
            count = len(slot)
            sentence = (
                f"one of {which} {alike} unwrapped: its {count} "
                f"{'child is' if count == 1 else 'children are'} now {children}"
            )
        look_alikes = (tuple(olds) if removed else (), tuple(news) if inserted else ())
        return replace(change, sentence=sentence, may_be=may_be, look_alikes=look_alikes)

    def _lone_wrap(self, change: TreeChange) -> tuple[int, list[int]] | None:
        """The old call of a wrap of one call by one wrapper, and the wrapper: the slot."""
        wrappers = [new for new in change.new_calls if new not in self.new_to_old]
        if len(wrappers) != 1 or len(self.new_tree.children[wrappers[0]]) != 1:
            return None
        old_call = self.new_to_old.get(self.new_tree.children[wrappers[0]][0])
        if old_call is None:
            return None
        return old_call, wrappers

    def _lone_unwrap(self, change: TreeChange) -> tuple[int, list[int]] | None:
        """The old call of an unwrap of one call, and the new calls its children became,
        which run one after another where it ran: the slot."""
        wrappers = [old for old in change.old_calls if old not in self.old_to_new]
        if len(wrappers) != 1:
            return None
        old_call = wrappers[0]
        children = self.old_tree.children[old_call]
        slot = [self.old_to_new.get(child, NO_PARENT) for child in children]
        if not slot or NO_PARENT in slot:
            return None
        siblings, at = self.new_runs.place(slot[0])
        if siblings[at : at + len(slot)] != slot:
            return None
        return old_call, slot

    def _runs(self, old_call: int, slot: list[int]) -> tuple[list[int], list[int]] | None:
        """The unbroken run of `old_call`'s look-alikes around it, and the new one around
        the slot its calls hold now, in the same parent; None unless each look-alike kept
        on either side is one of the other run's, each other one went or came whole, and
        the named ones may be any of them (their names are numbers)."""
        old_parent = self.old_tree.parents[old_call]
        new_parent = NO_PARENT if old_parent == NO_PARENT else self.old_to_new.get(old_parent)
        if self.new_tree.parents[slot[0]] != new_parent:
            return None
        olds = self.old_runs.run(old_call)
        # The new calls of the old call's shape next to the slot, which is not of it.
        shape = self.old_tree.shapes[old_call]
        siblings, at = self.new_runs.place(slot[0])
        news = []
        if at > 0 and self.new_tree.shapes[siblings[at - 1]] == shape:
            news += self.new_runs.run(siblings[at - 1])
        after = at + len(slot)
        if after < len(siblings) and self.new_tree.shapes[siblings[after]] == shape:
            news += self.new_runs.run(siblings[after])
        if len(olds) < 2 or not news:
            return None
        if not self.name_free and not all(
            numbered(lines[index].path)
            for lines, run in ((self.old_names, olds), (self.new_names, news))
            for index in run
        ):
            return None
        kept_old = {old for old in olds if old != old_call and old in self.old_to_new}
        kept_new = {new for new in news if new in self.new_to_old}
        if {self.old_to_new[old] for old in kept_old} != kept_new:
            return None
        gone = [old for old in olds if old != old_call and old not in kept_old]
        came = [new for new in news if new not in kept_new]
        if not all(_unpaired(self.old_tree, self.old_to_new, old) for old in gone):
            return None
        if not all(_unpaired(self.new_tree, self.new_to_old, new) for new in came):
            return None
        return olds, news


def _unpaired(tree: CallTree, partners: dict[int, int], index: int) -> bool:
    """Whether no call of the subtree at `index` has a partner: it went or came whole."""
    return not any(call in partners for call in range(index, tree.ends[index]))


def _called(line: GoldenLine) -> str:
    return f"{line.name} ({line.module_type})"
