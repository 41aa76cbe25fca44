"""A wrap or an unwrap of one of several look-alikes, one of which went or came beside it:
which it was, said as what it may have been. Pure, no torch.

Six look-alike stages, the third flattened and the fifth removed, give the goldens that the
fourth flattened and the first removed give: only the places of the calls left are known.
The alignment picks one reading; the summary names every stage that may have been
flattened (`one of 2, 3 (Sequential look-alikes) unwrapped`), and every look-alike that may
have gone, as it does for a look-alike removed alone.

Counted from the start of their run, the one wrapped is the one with as many look-alikes
kept before it as the new side keeps before its wrapper, where each other wrapper counts as
the one it holds: of those before the wrapper there, none to all of those `inserted` came,
and before the one wrapped none to all of those `removed` went.
"""

from __future__ import annotations

from dataclasses import replace

from pytest_fwdorder.diff.call_keys import numbered
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.changes import ChangeKind, TreeChange
from pytest_fwdorder.diff.places import called, named_run
from pytest_fwdorder.golden.format import GoldenLine


def hedged_wraps(
    changes: list[TreeChange],
    trees: tuple[CallTree, CallTree],
    partners: tuple[dict[int, int], dict[int, int]],
    names: tuple[list[GoldenLine], list[GoldenLine]],
    *,
    name_free: bool,
) -> list[TreeChange]:
    """`changes` (wraps and unwraps), each lone wrap or unwrap among look-alikes that cannot
    be told from them said as one of them, with the look-alikes among which those that went
    or came cannot be told (`TreeChange.look_alikes`); the others as they are. `partners`:
    old -> new and new -> old."""
    reader = _Reader(trees, partners, names, name_free)
    runs: dict[tuple[int, int], list[tuple[int, int, list[int]]]] = {}
    for at, change in enumerate(changes):
        lone = reader.lone(change)
        if lone is not None:
            runs.setdefault(reader.old_runs.key(lone[0]), []).append((at, *lone))
    hedged = list(changes)
    for wraps in runs.values():
        for at, change in reader.hedged([(changes[at], old, slot) for at, old, slot in wraps]):
            hedged[wraps[at][0]] = change
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
        partners: tuple[dict[int, int], dict[int, int]],
        names: tuple[list[GoldenLine], list[GoldenLine]],
        name_free: bool,
    ) -> None:
        self.old_tree, self.new_tree = trees
        self.old_runs, self.new_runs = _Runs(self.old_tree), _Runs(self.new_tree)
        self.old_to_new, self.new_to_old = partners
        self.old_names, self.new_names = names
        self.name_free = name_free

    def lone(self, change: TreeChange) -> tuple[int, list[int]] | None:
        """The old call of a wrap or unwrap of one call, and the new calls in its place."""
        if change.kind is ChangeKind.WRAPPED:
            return self._lone_wrap(change)
        if change.kind is ChangeKind.UNWRAPPED:
            return self._lone_unwrap(change)
        return None

    def hedged(
        self, wraps: list[tuple[TreeChange, int, list[int]]]
    ) -> list[tuple[int, TreeChange]]:
        """Of the wraps and unwraps of one run of look-alikes (each with its old call and
        its slot), those said as one of the look-alikes, by their place in `wraps`."""
        runs = self._runs(wraps)
        if runs is None:
            return []
        olds, members = runs
        wrapped = {old_call for _, old_call, _ in wraps}
        removed = [old for old in olds if old not in wrapped and old not in self.old_to_new]
        news = [member for member in members if isinstance(member, int)]
        inserted = [new for new in news if new not in self.new_to_old]
        look_alikes = (tuple(olds) if removed else (), tuple(news) if inserted else ())
        places = {member: at for at, member in enumerate(members) if isinstance(member, tuple)}
        found = []
        for at, (change, old_call, slot) in enumerate(wraps):
            place = places[tuple(slot)]
            first = max(0, place - len(inserted))
            last = min(len(olds) - 1, place + len(removed))
            if last > first:
                may_be = tuple(olds[first : last + 1])
                sentence = self._sentence(change, old_call, slot, may_be)
                found.append(
                    (at, replace(change, sentence=sentence, may_be=may_be, look_alikes=look_alikes))
                )
        return found

    def _sentence(
        self, change: TreeChange, old_call: int, slot: list[int], may_be: tuple[int, ...]
    ) -> str:
        which = named_run([self.old_names[old].name for old in may_be])
        alike = f"({self.old_names[old_call].module_type} look-alikes)"
        if change.kind is ChangeKind.WRAPPED:
            wrapper = self.new_names[slot[0]]
            now = self.new_names[self.new_tree.children[slot[0]][0]].name
            return f"{called(wrapper)} wraps one of the old {which} {alike}, now {now}"
        children = ", ".join(self.new_names[new].name for new in slot)
        count = len(slot)
        return (
            f"one of {which} {alike} unwrapped: its {count} "
            f"{'child is' if count == 1 else 'children are'} now {children}"
        )

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

    def _runs(
        self, wraps: list[tuple[TreeChange, int, list[int]]]
    ) -> tuple[list[int], list[int | tuple[int, ...]]] | None:
        """The unbroken run of look-alikes the wraps' old calls are in, and the new one
        around their slots in the same parent: each new look-alike, and each slot as one
        member (a tuple of its calls). None unless each look-alike kept on either side is
        one of the other run's, each other one went or came whole, and the named ones may be
        any of them (their names are numbers)."""
        old_call = wraps[0][1]
        old_parent = self.old_tree.parents[old_call]
        new_parent = NO_PARENT if old_parent == NO_PARENT else self.old_to_new.get(old_parent)
        if any(self.new_tree.parents[slot[0]] != new_parent for _, _, slot in wraps):
            return None
        olds = self.old_runs.run(old_call)
        members = self._members(olds[0], [slot for _, _, slot in wraps])
        if members is None or len(olds) < 2:
            return None
        news = [member for member in members if isinstance(member, int)]
        if not self.name_free and not all(
            numbered(lines[index].path)
            for lines, run in ((self.old_names, olds), (self.new_names, news))
            for index in run
        ):
            return None
        wrapped = {old_call for _, old_call, _ in wraps}
        kept_old = {old for old in olds if old not in wrapped and old in self.old_to_new}
        kept_new = {new for new in news if new in self.new_to_old}
        if {self.old_to_new[old] for old in kept_old} != kept_new:
            return None
        gone = [old for old in olds if old not in wrapped and old not in kept_old]
        came = [new for new in news if new not in kept_new]
        if not all(_unpaired(self.old_tree, self.old_to_new, old) for old in gone):
            return None
        if not all(_unpaired(self.new_tree, self.new_to_old, new) for new in came):
            return None
        return olds, members

    def _members(
        self, old_look_alike: int, slots: list[list[int]]
    ) -> list[int | tuple[int, ...]] | None:
        """The new calls of `old_look_alike`'s shape next to the slots, and the slots, in
        order, with no other call between; None where that run does not hold every slot."""
        shape = self.old_tree.shapes[old_look_alike]
        siblings, at = self.new_runs.place(slots[0][0])
        starting = {slot[0]: tuple(slot) for slot in slots}
        ending = {slot[-1]: tuple(slot) for slot in slots}
        first = at
        while first > 0:
            before = siblings[first - 1]
            if before in ending:
                first -= len(ending[before])
            elif self.new_tree.shapes[before] == shape:
                first -= 1
            else:
                break
        members: list[int | tuple[int, ...]] = []
        place = first
        while place < len(siblings):
            call = siblings[place]
            if call in starting:
                members.append(starting[call])
                place += len(starting[call])
            elif self.new_tree.shapes[call] == shape:
                members.append(call)
                place += 1
            else:
                break
        held = sum(isinstance(member, tuple) for member in members)
        return members if held == len(slots) else None


def _unpaired(tree: CallTree, partners: dict[int, int], index: int) -> bool:
    """Whether no call of the subtree at `index` has a partner: it went or came whole."""
    return not any(call in partners for call in range(index, tree.ends[index]))
