"""Two readings of one diff, and the one that states fewer changes kept. Pure, no torch.

The alignment (tree_alignment.py) pairs greedily, each pass keeping what the ones before it
found. Where a stage's class changed as a layer moved out of it (`2`, a `Sequential`, now a
`Stage` whose inner stage lost a `Linear` to `0`), no pass pairs the old `2` with the new
one: their subtrees differ, and the inner stage shares more of its calls with the old `2`'s
inner stage than `2` does. The first reading then says `2 (Stage) wraps the old 2`, an
unwrap, two moves, an insert and a removal; read again with the calls that kept their path
paired first, the same diff says one type change and one move. A name-free comparison
reads it again from the calls that kept their places (the same place among their
siblings, under calls that kept theirs).

Of the readings (this one, and those of stages flattened or wrapped, stage_readings.py),
the one that states fewest changes is kept (issue 31's rule: when two explanations fit,
the smaller one; `diffing.diff_lines` compares them). This one is read only when the
calls that stayed pair otherwise in the first, so a diff where every call kept its path is
read once, and only kept where what each call that stayed holds confirms it (`confirmed`): a new stage
put at an old stage's path, the old one moved elsewhere, keeps the path and nothing else,
and a reading that pairs the two would say the new stage's calls wrap or replace the old
one's. Pairs of calls that hold identical calls are never undone.
"""

from __future__ import annotations

from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.changes import ChangeKind
from pytest_fwdorder.diff.classification import TraceDiff
from pytest_fwdorder.diff.places import subtree_end
from pytest_fwdorder.diff.tree_changes import unexplained
from pytest_fwdorder.diff.uniform_changes import group_uniform_changes
from pytest_fwdorder.golden.format import GoldenLine

__all__ = [
    "calls_that_stayed",
    "confirmed",
    "joined_anchors",
    "mostly_within",
    "paired_otherwise",
    "stated_changes",
]

# Per-call changes that follow from another change, or cost a reading nothing: a renamed
# call is the same call under the path both readings see, a call's nesting changes with the
# wrap or move that explains it, and its input and output with a change before it.
_FOLLOWING = frozenset(
    {
        ChangeKind.RENAMED,
        ChangeKind.NESTING_CHANGED,
        ChangeKind.INPUT_CHANGED,
        ChangeKind.OUTPUT_CHANGED,
    }
)


def calls_that_stayed(
    old_tree: CallTree,
    new_tree: CallTree,
    partners: dict[int, int],
    *,
    by_place: bool,
    within: tuple[int, int] | None = None,
) -> list[tuple[int, int]]:
    """The calls with nested calls that kept their path (`by_place`: their place among
    their siblings) under a parent that kept its own, from the outermost calls down, as
    (old index, new index); their class may differ (a stage made a subclass is the same
    stage). `within`: an old call and a new one read as the same model (the whole model
    wrapped or unwrapped), paired first, their calls' paths read within theirs.

    None undoes a pair in `partners` (the first reading) of calls that hold identical calls:
    blocks moved out of a stage to before it, the first now at the stage's old path, are
    those blocks, whatever their path says.
    """
    anchors: list[tuple[int, int]] = []
    partners_of_new: dict[int, int] | None = None  # made at the first anchor not in partners
    pending = [(old_tree.roots, new_tree.roots)]
    old_prefix = new_prefix = ""
    if within is not None:
        anchors.append(within)
        pending = [(old_tree.children[within[0]], new_tree.children[within[1]])]
        old_prefix, new_prefix = _prefix(old_tree, within[0]), _prefix(new_tree, within[1])
    while pending:
        old_calls, new_calls = pending.pop()
        # A reused stage called twice under one parent: its calls pair in order.
        new_by_key: dict[object, list[int]] = {}
        for place, j in reversed(list(enumerate(new_calls))):
            if new_tree.children[j]:
                key = place if by_place else _within(new_tree.lines[j].path, new_prefix)
                new_by_key.setdefault(key, []).append(j)
        for place, i in enumerate(old_calls):
            if not old_tree.children[i]:  # before its key: most calls hold none
                continue
            key = place if by_place else _within(old_tree.lines[i].path, old_prefix)
            same_key = new_by_key.get(key)
            if not same_key:
                continue
            j = same_key.pop()
            if partners.get(i) != j:
                if partners_of_new is None:
                    partners_of_new = {new: old for old, new in partners.items()}
                if undoes_identical((old_tree, new_tree), i, j, partners, partners_of_new):
                    continue
            anchors.append((i, j))
            pending.append((old_tree.children[i], new_tree.children[j]))
    return anchors


def _prefix(tree: CallTree, index: int) -> str:
    """What the paths of the calls nested in `index` start with: its path and a dot, or
    nothing for the model."""
    return "" if tree.parents[index] == NO_PARENT else f"{tree.lines[index].path}."


def _within(path: str, prefix: str) -> object:
    """The key a call stays by, named: its path read within `prefix` (a path outside it
    keeps no key of those within; the whole path where `prefix` is empty)."""
    if path.startswith(prefix):
        return path[len(prefix) :]
    return (prefix, path)


def undoes_identical(
    trees: tuple[CallTree, CallTree],
    old_index: int,
    new_index: int,
    partners: dict[int, int],
    partners_of_new: dict[int, int],
) -> bool:
    """Whether pairing these two calls would undo a pair of identical calls, either's."""
    new_partner, old_partner = partners.get(old_index), partners_of_new.get(new_index)
    return (new_partner is not None and identical(trees, old_index, new_partner)) or (
        old_partner is not None and identical(trees, old_partner, new_index)
    )


def identical(trees: tuple[CallTree, CallTree], old_index: int, new_index: int) -> bool:
    """Whether two calls hold identical calls, in order: a stage moved and made a subclass
    (or given another setting) is that stage, whatever its own call says."""
    old_tree, new_tree = trees
    if old_tree.shapes[old_index] == new_tree.shapes[new_index]:
        return True
    old_children, new_children = old_tree.children[old_index], new_tree.children[new_index]
    return len(old_children) == len(new_children) and all(
        old_tree.shapes[i] == new_tree.shapes[j]
        for i, j in zip(old_children, new_children, strict=True)
    )


def mostly_within(
    tree: CallTree,
    index: int,
    partners: dict[int, int],
    other: tuple[list[int], int],
    *,
    more_than_half: bool = False,
) -> bool:
    """Whether at least half (or more than half) of the calls nested in `index` pair with
    calls nested in a call of the other tree; `other` is that tree's ends and the call."""
    other_ends, other_index = other
    nested = range(index + 1, tree.ends[index])
    within = sum(other_index < partners.get(call, -1) < other_ends[other_index] for call in nested)
    if more_than_half:
        return 2 * within > len(nested)
    return 2 * within >= len(nested) > 0


def confirmed(
    trees: tuple[CallTree, CallTree], anchors: list[tuple[int, int]], partners: dict[int, int]
) -> bool:
    """Whether what each pair of `anchors` holds confirms it in the reading they start
    (`partners`): at least half of the calls nested in either pair with calls nested in the
    other, or at least half of the children of either do and none of the rest holds one that
    does, each child counted with what it holds as one (a pair of layers, holding none, needs
    nothing). A new stage put at an old one's path, the old one moved elsewhere, is not
    confirmed; a stage that lost a block of most of its calls to another stage and kept its
    other layers is."""
    old_tree, new_tree = trees
    partners_of_new = {new: old for old, new in partners.items()}
    return all(
        (
            mostly_within(old_tree, i, partners, (new_tree.ends, j))
            and mostly_within(new_tree, j, partners_of_new, (old_tree.ends, i))
        )
        or (
            _children_mostly_within(old_tree, i, partners, (new_tree.ends, j))
            and _children_mostly_within(new_tree, j, partners_of_new, (old_tree.ends, i))
        )
        for i, j in anchors
        if old_tree.size(i) > 1 or new_tree.size(j) > 1
    )


def _children_mostly_within(
    tree: CallTree, index: int, partners: dict[int, int], other: tuple[list[int], int]
) -> bool:
    """Whether at least half of the children of `index` pair with calls nested in a call of
    the other tree, and none of the others holds a call that does (a wrapper around a block
    and one layer is not that block); `other` is that tree's ends and the call."""
    other_ends, other_index = other

    def within(call: int) -> bool:
        return other_index < partners.get(call, -1) < other_ends[other_index]

    children = tree.children[index]
    outside = [child for child in children if not within(child)]
    if any(within(nested) for child in outside for nested in range(child, tree.ends[child])):
        return False
    return 2 * (len(children) - len(outside)) >= len(children) > 0


def paired_otherwise(partners: dict[int, int], stayed: list[tuple[int, int]]) -> bool:
    """Whether a reading (`partners`) pairs a call that stayed with another call."""
    return any(partners.get(i) != j for i, j in stayed)


def joined_anchors(
    kept: list[tuple[int, int]], anchors: list[tuple[int, int]]
) -> list[tuple[int, int]]:
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


def stated_changes(diff: TraceDiff, new_tree: CallTree) -> tuple[int, int, int, int]:
    """How many changes a reading states: each change to the nesting but a renamed subtree,
    each call inserted or removed (a call left unpaired is one the reading does not
    explain), each call moved with its nested calls, a dtype changed throughout a stage
    once, and each other per-call change none of them explains but those that follow from
    another; then, for a tie, the same with each subtree inserted or removed counted once
    (a stage flattened and one removed, not two stages each unwrapped from one block and
    with the other removed); then, for a tie still, with each rename that no wrap or unwrap
    explains counted too (a model wrapped whole as a stage was flattened, not two layers
    moved, a subtree renamed and calls renamed); then the moves alone: of two readings that
    state as much, the one that moves fewer calls (a wrap and an unwrap keep each call in
    its order, where two moves take calls out of theirs). `new_tree` is the call tree of the
    new calls, which both readings share."""
    nesting = [change for change in diff.tree_changes if change.kind is not ChangeKind.RENAMED]
    calls = unexplained(diff.changes, diff.tree_changes)
    uniform = group_uniform_changes(calls, new_tree)
    grouped = {id(change) for one in uniform for change in one.changes}
    stated = len(nesting) + len(uniform)
    at: dict[ChangeKind, list[int]] = {kind: [] for kind in _WHOLE_KINDS}
    for change in calls:
        if id(change) in grouped or change.kind in _FOLLOWING:
            continue
        if change.kind in at and change.position is not None:
            at[change.kind].append(change.position)
        if change.kind is not ChangeKind.MOVED or change.position is None:
            stated += 1
    moved = _roots(at[ChangeKind.MOVED], diff.old_lines)  # moved with its nested calls
    stated += moved
    inserted, removed = at[ChangeKind.INSERTED], at[ChangeKind.REMOVED]
    subtrees = _roots(inserted, diff.new_lines) + _roots(removed, diff.old_lines)
    whole = stated - len(inserted) - len(removed) + subtrees
    renamed = sum(change.kind is ChangeKind.RENAMED for change in diff.tree_changes)
    renamed += sum(change.kind is ChangeKind.RENAMED for change in calls)
    moved += sum(change.kind is ChangeKind.MOVED for change in nesting)
    return stated, whole, whole + renamed, moved


# The changes of calls that go, come or move with their nested calls.
_WHOLE_KINDS = (ChangeKind.MOVED, ChangeKind.INSERTED, ChangeKind.REMOVED)


def _roots(positions: list[int], lines: list[GoldenLine]) -> int:
    """How many of the calls at `positions` are not nested in another of them."""
    roots, end = 0, -1
    for position in sorted(positions):
        if position >= end:
            roots += 1
            end = subtree_end(lines, position)
    return roots
