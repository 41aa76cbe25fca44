"""Which paired calls run out of the execution order they had: what a wrap or an unwrap
cannot hold, as neither changes the order of the calls it holds.

Pure, no torch. Of a stage whose layers moved to the end of its sibling, then both made one
stage, a wrap or an unwrap around the layers reads the move away: `1 (Stage) wraps the old 1`
and `1.1 unwrapped`, though ReLU6 and Tanh now run before the stage moved. `ExecutionOrder`
says which calls the longest run of pairs in execution order leaves out, so that the wraps
and unwraps leave them to be said as moves.
"""

from __future__ import annotations

from collections import defaultdict
from operator import itemgetter

from pytest_fwdorder.diff.call_keys import look
from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.diff.ordered_pairing import longest_increasing
from pytest_fwdorder.diff.tree_alignment import TreeAlignment

__all__ = ["ExecutionOrder"]


class ExecutionOrder:
    """The paired calls of an alignment that run out of the order they had (made once,
    when first asked: most diffs move nothing)."""

    def __init__(self, alignment: TreeAlignment) -> None:
        self.alignment = alignment
        self.reordered: set[int] | None = None
        self.kinds: dict[tuple[str, int], list[int]] | None = None
        self.signatures: dict[int, tuple[object, ...]] = {}  # old call -> `_signature`

    def out_of_order(self, old_index: int) -> bool:
        """Whether an old call runs out of the execution order it had, and its parent does
        not, and no look-alike may have taken its place (`_has_look_alike`): which of two
        look-alikes went where cannot be told, and a wrap around one reads the same."""
        if old_index not in self.alignment.moved:  # the cheap test first: most are in order
            return False
        reordered = self._reordered()
        parent = self.alignment.old_tree.parents[old_index]
        return (
            old_index in reordered
            and parent not in reordered
            and not self._has_look_alike(old_index)
        )

    def _reordered(self) -> set[int]:
        """The old calls out of the longest run of pairs in execution order: the alignment's
        `moved` also holds calls paired across parents, which it keeps out of its run
        whether or not they kept their order. A pair whose class changed is left out of the
        run: a layer fused away (a BatchNorm now an Identity) keeps its place by name, not by
        what it runs, and a ReLU fused into the conv before it runs before it now."""
        if self.reordered is None:
            old_lines = self.alignment.old_tree.lines
            new_lines = self.alignment.new_tree.lines
            pairs = sorted(
                (
                    (old, new)
                    for old, new in self.alignment.partners.items()
                    if old_lines[old].module_type == new_lines[new].module_type
                ),
                key=itemgetter(1),
            )
            in_order = {old for old, _ in longest_increasing(pairs)}
            self.reordered = {old for old in self.alignment.moved if old not in in_order}
        return self.reordered

    def _has_look_alike(self, old_index: int) -> bool:
        """Whether an old call just like this one (class, shapes, facts and the classes of
        the calls under it) was left unpaired, or paired across this one's pair (each now
        where the other would run): a stage flattened beside a look-alike removed, whose
        blocks the alignment may pair with either stage's; two Linears taken for each
        other."""
        tree = self.alignment.old_tree
        if self.kinds is None:
            self.kinds = defaultdict(list)
            for index, line in enumerate(tree.lines):
                self.kinds[line.module_type, tree.size(index)].append(index)
        kind = (tree.lines[old_index].module_type, tree.size(old_index))
        mine = self._signature(old_index)
        partners = self.alignment.partners
        return any(
            other != old_index
            and (
                other not in partners
                or (other < old_index) != (partners[other] < partners[old_index])
            )
            and self._signature(other) == mine
            for other in self.kinds[kind]
        )

    def _signature(self, old_index: int) -> tuple[object, ...]:
        """`_signature` of an old call, worked out once: the calls of one kind are each
        compared with every call moved."""
        if old_index not in self.signatures:
            self.signatures[old_index] = _signature(self.alignment.old_tree, old_index)
        return self.signatures[old_index]


def _signature(tree: CallTree, index: int) -> tuple[object, ...]:
    """A call's class, shapes and facts, and the classes of the calls under it in order."""
    line = tree.lines[index]
    under = tuple(tree.lines[nested].module_type for nested in range(index + 1, tree.ends[index]))
    return (look(line), under)
