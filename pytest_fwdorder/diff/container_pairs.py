"""The bottom-up pass of the tree alignment: calls with nested calls paired by the nested
calls they share (GumTree's Dice). Pure, no torch.

Children come before their parents, so a stage pairs before the model around it. A call
the stage shares only some of its nested calls with can be the model's instead: the new
model holds the stage's blocks and its siblings' (a stage flattened into its parent, a
block moved between stages). Where the unpaired call around the stage, of the same class,
shares more (a larger Dice), it takes the pair, and the stage is left to be read as
unwrapped or changed in place.
"""

from __future__ import annotations

from collections import Counter

from pytest_fwdorder.diff import call_keys
from pytest_fwdorder.diff.call_tree import CallTree

_DICE_ENOUGH = 0.5


def pair_containers(
    old_tree: CallTree,
    new_tree: CallTree,
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
    *,
    match_paths: bool,
) -> None:
    """Pair, in the two maps, each unpaired old call with nested calls with the new call of
    its class that holds most of its nested calls' partners (Dice at least one half)."""
    # The new calls by path, class and call number, for `_stays_by_name`: named only.
    named = (
        {call_keys.identity_and_number(line): index for index, line in enumerate(new_tree.lines)}
        if match_paths
        else {}
    )
    dice_of: dict[int, float] = {}  # old calls paired here -> the Dice they paired by
    for old_index in range(len(old_tree.lines) - 1, -1, -1):
        if old_index in old_to_new or not old_tree.children[old_index]:
            continue
        best = _best_candidate(old_tree, new_tree, old_index, old_to_new, new_to_old, dice_of)
        if best is None:
            continue
        dice, candidate = best
        taken_by = new_to_old.get(candidate)
        if taken_by is not None:  # a call nested in this one paired here by a lower Dice
            del old_to_new[taken_by], dice_of[taken_by]
        elif match_paths:
            maps = (old_to_new, new_to_old)
            candidate = _stays_by_name(old_tree, new_tree, old_index, candidate, named, maps)
        old_to_new[old_index], new_to_old[candidate] = candidate, old_index
        dice_of[old_index] = dice


def _best_candidate(
    old_tree: CallTree,
    new_tree: CallTree,
    old_index: int,
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
    dice_of: dict[int, float],
) -> tuple[float, int] | None:
    """The Dice and the new call of the old call's class that hold most of its nested
    calls' partners, or None where none holds half; a new call paired in this pass with a
    call nested in this one counts where this one shares more with it."""
    end = old_tree.ends[old_index]
    votes: Counter[int] = Counter()
    for nested in range(old_index + 1, end):
        partner = old_to_new.get(nested)
        if partner is None:
            continue
        for ancestor in new_tree.ancestors(partner):
            holder = new_to_old.get(ancestor)
            if holder is None or (holder in dice_of and old_index < holder < end):
                votes[ancestor] += 1
    module_type = old_tree.lines[old_index].module_type
    old_path = old_tree.lines[old_index].path
    best: tuple[float, int, int] | None = None
    for candidate, common in votes.items():
        if new_tree.lines[candidate].module_type != module_type:
            continue
        dice = 2 * common / (old_tree.size(old_index) + new_tree.size(candidate) - 2)
        holder = new_to_old.get(candidate)
        if dice < _DICE_ENOUGH or (holder is not None and dice <= dice_of[holder]):
            continue
        key = (dice, int(new_tree.lines[candidate].path == old_path), -candidate)
        if best is None or key > best:
            best = key
    return None if best is None else (best[0], -best[2])


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
    holds `best` is a wrapper, and never preferred.
    """
    old_to_new, new_to_old = maps
    same = named.get(call_keys.identity_and_number(old_tree.lines[old_index]))
    if same is None or same == best or same in new_to_old or same in new_tree.ancestors(best):
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
    return same if to_same > to_best else best
