"""The bottom-up pass of the tree alignment: calls with nested calls paired by the nested
calls they share (GumTree's Dice). Pure, no torch.

Children come before their parents, so a stage pairs before the model around it. A call
the stage shares only some of its nested calls with can be the model's instead: the new
model holds the stage's blocks and its siblings' (a stage flattened into its parent, a
block moved between stages). Where the unpaired call around the stage, of the same class,
shares more (a larger Dice), it takes the pair, and the stage looks again (it may hold the
new stage of its blocks), or is left to be read as unwrapped or changed in place. The call
around it takes the pair at a lower Dice too where it is the model (the model stays the
model: its stage flattened, not the model unwrapped around the stage), or where the new
call also holds most of its other calls (a flatten keeps them in place).

A call of another class pairs only where it holds the same number of calls, the paired
ones the very partners (a stage made a subclass reads `type changed`, not a wrapper). Of a
new call and one around it of the old call's class, the one around it pairs where the inner
one leaves half the old call's children or more outside it (`_outer_first`: a backbone
regrouped as a stem and a body is two wraps inside the model).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

from pytest_fwdorder.diff import call_keys
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree, inverts_nesting
from pytest_fwdorder.golden.format import GoldenLine

_DICE_ENOUGH = 0.5


def pair_containers(
    old_tree: CallTree,
    new_tree: CallTree,
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
    *,
    match_paths: bool,
) -> None:
    """Pair, in the two maps, each unpaired old call with nested calls with the new call
    that holds most of its nested calls' partners (Dice at least one half)."""
    # The new calls by path, class and call number, for `_stays_by_name`: named only.
    named = (
        {call_keys.identity_and_number(line): index for index, line in enumerate(new_tree.lines)}
        if match_paths
        else {}
    )
    # First, so the stages around them count them as nested partners.
    _pair_made_subclasses((old_tree, new_tree), (old_to_new, new_to_old))
    dice_of: dict[int, float] = {}  # old calls paired here -> the Dice they paired by
    # The classes of the old calls without a partner: this pass pairs only calls with nested
    # calls, so the layers among them stay unpaired throughout it.
    unpaired_old = Counter(
        line.module_type for index, line in enumerate(old_tree.lines) if index not in old_to_new
    )
    for start in range(len(old_tree.lines) - 1, -1, -1):
        if start in old_to_new or not old_tree.children[start]:
            continue
        # A call that loses its pair to a call around it looks again at once: the stage
        # the model took from it may leave it the stage it holds most of.
        waiting = [start]
        while waiting:
            old_index = waiting.pop()
            best = _best_candidate(
                (old_tree, new_tree), (old_to_new, new_to_old), old_index, dice_of, unpaired_old
            )
            if best is None:
                continue
            dice, candidate = best
            _take(
                old_tree,
                new_tree,
                old_index,
                candidate,
                dice,
                named,
                (old_to_new, new_to_old),
                dice_of,
                waiting,
            )


def _pair_made_subclasses(
    trees: tuple[CallTree, CallTree], maps: tuple[dict[int, int], dict[int, int]]
) -> None:
    """Pair an old call and a new one of another class that hold the same calls, none of
    them paired yet (a stage made a subclass as a flatten before it renumbered it, its
    layers look-alikes of others, so nothing paired inside it), where that body is found
    once on each side and neither is alone in its parent: `type changed`, its calls paired
    inside it later."""
    # Each call's look with its calls' looks, as one number shared by both sides, so a
    # body is compared in the size of its own calls, each numbered once.
    numbers: dict[Hashable, int] = {}
    bodies: tuple[dict[Hashable, list[int]], dict[Hashable, list[int]]] = ({}, {})
    for tree, partners, by_body in zip(trees, maps, bodies, strict=True):
        memo: dict[int, int] = {}
        for index in _unpaired_throughout(tree, partners):
            if _alone_in_its_parent(tree, index):
                continue
            line = tree.lines[index]
            calls = tuple(_numbered(tree, child, numbers, memo) for child in tree.children[index])
            by_body.setdefault((line.inputs, line.outputs, calls), []).append(index)
    (old_tree, new_tree), (old_to_new, new_to_old) = trees, maps
    for held, olds in bodies[0].items():
        news = bodies[1].get(held, [])
        if len(olds) != 1 or len(news) != 1:
            continue
        old_index, new_index = olds[0], news[0]
        if old_tree.lines[old_index].module_type == new_tree.lines[new_index].module_type:
            continue  # one class: identical subtrees, which that pass pairs or leaves
        if inverts_nesting(trees, maps, old_index, new_index):
            continue
        old_to_new[old_index], new_to_old[new_index] = new_index, old_index


def _unpaired_throughout(tree: CallTree, partners: dict[int, int]) -> list[int]:
    """The unpaired calls with nested calls none of which is paired, in order; not the
    model's own, which no parent asks about and which pairs with no other class here."""
    children, parents = tree.children, tree.parents
    containers = [
        i
        for i in range(len(children) - 1, -1, -1)
        if children[i] and i not in partners and parents[i] != NO_PARENT
    ]
    clear: set[int] = set()
    for index in containers:  # its nested calls come after it: bottom-up
        if all(
            child not in partners and (not children[child] or child in clear)
            for child in children[index]
        ):
            clear.add(index)
    return sorted(clear)


def _numbered(
    tree: CallTree, index: int, numbers: dict[Hashable, int], memo: dict[int, int]
) -> int:
    """The number of a call's look with the looks of the calls under it (`numbers`)."""
    if index not in memo:
        held = tuple(_numbered(tree, child, numbers, memo) for child in tree.children[index])
        memo[index] = numbers.setdefault((call_keys.look(tree.lines[index]), held), len(numbers))
    return memo[index]


def _alone_in_its_parent(tree: CallTree, index: int) -> bool:
    """Whether a call is the model's own or the one call its parent runs: what holds the
    same calls as it there is a wrapper's reading (its calls wrapped in a Sequential inside
    it, the model wrapped whole), not a class changed."""
    parent = tree.parents[index]
    return parent == NO_PARENT or tree.children[parent] == [index]


def _take(
    old_tree: CallTree,
    new_tree: CallTree,
    old_index: int,
    candidate: int,
    dice: float,
    named: dict[tuple[str, str, int], int],
    maps: tuple[dict[int, int], dict[int, int]],
    dice_of: dict[int, float],
    waiting: list[int],
) -> None:
    """Pair the old call with `candidate` (or, by name, the call it stays in), taking the
    pair from the nested call that held it; that call joins `waiting`."""
    old_to_new, new_to_old = maps
    taken_by = new_to_old.get(candidate)
    if taken_by is not None:  # a call nested in this one paired here by a lower Dice
        del old_to_new[taken_by], dice_of[taken_by]
        waiting.append(taken_by)
    elif named:  # a named comparison
        candidate = _stays_by_name(old_tree, new_tree, old_index, candidate, named, maps)
    old_to_new[old_index], new_to_old[candidate] = candidate, old_index
    dice_of[old_index] = dice


def _best_candidate(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    dice_of: dict[int, float],
    unpaired_old: Counter[str],
) -> tuple[float, int] | None:
    """The Dice and the new call that holds most of the old call's nested calls' partners
    (of its class, or of another holding exactly them: `_eligible`), or the call of its
    class around that one (`_outer_first`); None where none holds half. A new call paired
    in this pass with a call nested in this one counts where this one shares more."""
    (old_tree, new_tree), (_, new_to_old) = trees, maps
    votes, paired_nested = _votes(trees, maps, old_index, dice_of)
    eligible: dict[int, float] = {}
    for candidate, common in votes.items():
        if inverts_nesting(trees, maps, old_index, candidate):
            continue  # never a pairing the nesting contradicts
        dice = 2 * common / (old_tree.size(old_index) + new_tree.size(candidate) - 2)
        if _eligible(trees, maps, (old_index, candidate), (common, paired_nested, dice), dice_of):
            eligible[candidate] = dice
    if not eligible:
        return None
    old_line = old_tree.lines[old_index]

    def rank(candidate: int) -> tuple[float, bool, bool, int]:
        line = new_tree.lines[candidate]
        same = line.module_type == old_line.module_type
        return eligible[candidate], same, line.path == old_line.path, -candidate

    candidate = max(eligible, key=rank)
    candidate = _outer_first(trees, maps, (old_index, candidate), eligible, unpaired_old)
    holder = new_to_old.get(candidate)
    # A flatten takes the pair from the call nested in this one at that call's Dice, so an
    # unwrapped call around this one cannot take it back by a Dice lower still.
    dice = eligible[candidate]
    return (max(dice, dice_of[holder]) if holder is not None else dice), candidate


def _votes(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    dice_of: dict[int, float],
) -> tuple[Counter[int], int]:
    """For each new call, how many of the old call's nested calls have their partner in it
    (a call paired in this pass with one nested in the old call counts), and how many of
    the old call's nested calls have a partner."""
    (old_tree, new_tree), (old_to_new, new_to_old) = trees, maps
    end = old_tree.ends[old_index]
    votes: Counter[int] = Counter()
    paired_nested = 0
    for nested in range(old_index + 1, end):
        partner = old_to_new.get(nested)
        if partner is None:
            continue
        paired_nested += 1
        for ancestor in new_tree.ancestors(partner):
            holder = new_to_old.get(ancestor)
            if holder is None or (holder in dice_of and old_index < holder < end):
                votes[ancestor] += 1
    return votes, paired_nested


def _eligible(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    calls: tuple[int, int],
    shares: tuple[int, int, float],
    dice_of: dict[int, float],
) -> bool:
    """Whether the new call may pair with the old one (`calls`), given how many of the old
    call's nested calls it holds, how many of those have partners, and their Dice (`shares`)."""
    (old_tree, new_tree), (_, new_to_old) = trees, maps
    old_index, candidate = calls
    common, paired_nested, dice = shares
    # A call of another class pairs only where it holds as many calls as the old one and
    # the paired ones are exactly the partners of those nested in the old call (a stage
    # made a subclass: `type changed`), and where no call of its own class shares more;
    # otherwise it reads as a wrapper around the old call's partners.
    same_type = new_tree.lines[candidate].module_type == old_tree.lines[old_index].module_type
    if not same_type and not (
        new_tree.size(candidate) == old_tree.size(old_index)
        and common == paired_nested == _paired_within(new_tree, candidate, new_to_old)
        and not _in_the_parents_place(old_tree, old_index, new_tree.lines[candidate])
    ):
        return False
    holder = new_to_old.get(candidate)
    if holder is None:
        return dice >= _DICE_ENOUGH
    if dice >= _DICE_ENOUGH and dice > dice_of[holder]:
        return True
    # Taking the pair from a nested call is asked only where the Dice alone does not give
    # it (`_holds_the_rest` reads every call in the old one), and at any share: a stage
    # flattened into its parent lends it calls the stage's Dice does not count, and the
    # parent's own layers pair only later.
    return same_type and _takes_from_nested(trees, maps, old_index, holder, candidate)


def _outer_first(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    calls: tuple[int, int],
    eligible: dict[int, float],
    unpaired_old: Counter[str],
) -> int:
    """`best`, or the nearest call of the old call's class around it where `best` leaves
    half of the old call's children or more outside it, inside that call: layers grouped
    into a stem and a body are two wraps inside the model, not the model wrapped and its
    stem moved out (the unpaired leaves beside a stage lower the Dice of the call that
    holds both). A model wrapped whole, with a head beside it, keeps `best`, which holds
    all its children; so does a stage wrapped with a layer after it. A `best` of another
    class that is the only call in a call of the old call's class and path is not the old
    call made a subclass: a Sequential put inside a block is not the block made a
    Sequential (without names, no trace tells the two apart)."""
    old_tree, new_tree = trees
    old_index, best = calls
    module_type = old_tree.lines[old_index].module_type
    top_level = old_tree.parents[old_index] == NO_PARENT
    for outer in new_tree.ancestors(best):
        if (
            outer in eligible
            and (top_level or new_tree.parents[outer] != NO_PARENT)
            and new_tree.lines[outer].module_type == module_type
            and (
                (
                    new_tree.lines[best].module_type != module_type
                    and new_tree.children[outer] == [best]
                    and call_keys.kept_path(old_tree.lines[old_index], new_tree.lines[outer])
                )
                or _keeps_children_outside(trees, maps, old_index, (best, outer), unpaired_old)
            )
        ):
            return outer
    return best


def _keeps_children_outside(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    calls: tuple[int, int],
    unpaired_old: Counter[str],
) -> bool:
    """Whether half of the old call's children or more are in the new call `outer` but not
    in `inner` (`calls`): paired there, or of a class an unpaired new call there has
    (counted once) that the unpaired old calls outside this one leave over."""
    (old_tree, new_tree), (old_to_new, new_to_old) = trees, maps
    inner, outer = calls
    in_inner = range(inner, new_tree.ends[inner])
    in_outer = range(outer + 1, new_tree.ends[outer])
    found = 0
    unpaired: Counter[str] = Counter()
    for child in old_tree.children[old_index]:
        partner = old_to_new.get(child)
        if partner is None:
            unpaired[old_tree.lines[child].module_type] += 1
        elif partner in in_outer and partner not in in_inner:
            found += 1
    left = Counter(
        new_tree.lines[index].module_type
        for index in in_outer
        if index not in in_inner and index not in new_to_old
    )
    # The unpaired old calls outside this one may be those: they do not count.
    left.subtract(unpaired_old)
    left.update(
        old_tree.lines[index].module_type
        for index in range(old_index, old_tree.ends[old_index])
        if index not in old_to_new
    )
    found += sum((unpaired & +left).values())
    return 2 * found >= len(old_tree.children[old_index])


def _in_the_parents_place(old_tree: CallTree, old_index: int, line: GoldenLine) -> bool:
    """Whether a new call has the class and path of the call the old one runs inside: a
    Sequential taken from around a block's layers holds what the block now holds, but the
    block is the block, not the Sequential made a subclass (without names, no trace tells
    the two apart)."""
    parent = old_tree.parents[old_index]
    if parent == NO_PARENT:
        return False
    parent_line = old_tree.lines[parent]
    return parent_line.module_type == line.module_type and call_keys.kept_path(parent_line, line)


def _paired_within(tree: CallTree, index: int, paired: dict[int, int]) -> int:
    """How many of the calls nested in `index` have a partner."""
    return sum(nested in paired for nested in range(index + 1, tree.ends[index]))


def _takes_from_nested(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    holder: int,
    candidate: int,
) -> bool:
    """Whether the old call takes `candidate` from `holder`, a call nested in it that
    shares a larger part of itself: two top-level calls of one class (the model is the
    model: its stages flattened, not the model unwrapped around one), or a call that also
    holds most of the rest (`_holds_the_rest`)."""
    if _both_top_level(trees, old_index, candidate):
        return True
    return _holds_the_rest(trees, maps, old_index, holder, candidate)


def _both_top_level(trees: tuple[CallTree, CallTree], old_index: int, new_index: int) -> bool:
    old_tree, new_tree = trees
    return old_tree.parents[old_index] == NO_PARENT and new_tree.parents[new_index] == NO_PARENT


def _holds_the_rest(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    holder: int,
    candidate: int,
) -> bool:
    """Whether `candidate`, which the old call `holder` nested in this one holds, also holds
    most of this call's other nested calls: `holder` flattened into this call, not this
    call unwrapped around it.

    With the holder's pair, the calls of the old one outside the holder would be read as
    moved into it, or removed while look-alikes are inserted there; a flatten keeps them
    where they are. Those not paired yet count by class, against the new call's unpaired
    calls that the holder's own unpaired calls leave over.
    """
    old_tree, new_tree = trees
    old_to_new, new_to_old = maps
    in_holder = range(holder, old_tree.ends[holder])
    rest = [i for i in range(old_index + 1, old_tree.ends[old_index]) if i not in in_holder]
    if not rest:
        return False
    found = 0
    unpaired_rest: Counter[str] = Counter()
    for index in rest:
        partner = old_to_new.get(index)
        if partner is None:
            unpaired_rest[old_tree.lines[index].module_type] += 1
        elif candidate in new_tree.ancestors(partner):
            found += 1
    pool = Counter(
        new_tree.lines[index].module_type
        for index in range(candidate + 1, new_tree.ends[candidate])
        if index not in new_to_old
    )
    pool.subtract(
        old_tree.lines[index].module_type for index in in_holder if index not in old_to_new
    )
    found += sum((unpaired_rest & +pool).values())
    return 2 * found > len(rest)


def _stays_by_name(
    old_tree: CallTree,
    new_tree: CallTree,
    old_index: int,
    best: int,
    named: dict[tuple[str, str, int], int],
    maps: tuple[dict[int, int], dict[int, int]],
) -> int:
    """`best`, or the unpaired new call of the old one's path and class where more of the
    old call's own children are there than under `best`.

    A child moved whole to another parent (`enc.2`, now `dec.0`) votes with all its
    nested calls for its new parent; the children that stayed are single calls that
    pair later, by name. Without this, the parent that received the child would pair
    with the old parent, and two unchanged containers read as swapped. A new call that
    holds `best` is preferred the same way: a wrapper (`layer2`, around the old stage now
    `layer2.0`) holds none of the old call's children but through `best`, and a parent
    that kept its other children holds them itself.
    """
    old_to_new, new_to_old = maps
    same = named.get(call_keys.identity_and_number(old_tree.lines[old_index]))
    if same is None or same == best or same in new_to_old:
        return best
    to_same = to_best = 0
    for child in old_tree.children[old_index]:
        partner = old_to_new.get(child)
        if partner is None:
            partner = named.get(call_keys.identity_and_number(old_tree.lines[child]))
            if partner is None or partner in new_to_old:
                continue
        parent = new_tree.parents[partner]
        to_same += parent == same
        to_best += parent == best
    # A tie goes to the name where it is a word (`proj`), which says what a call is; a
    # number says only where it is, and a model wrapped whole renumbers its stages.
    named_by_word = not call_keys.numbered(old_tree.lines[old_index].path)
    return same if to_same > to_best or (named_by_word and to_same == to_best > 0) else best
