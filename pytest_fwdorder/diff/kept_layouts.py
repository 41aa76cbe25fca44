"""Calls with nested calls whose own shapes changed as they moved, paired by their layout.
Pure, no torch.

A block swapped with a neighbour that changes the shapes it takes (a squeeze-excitation run
before a strided depthwise convolution, not after) keeps its layers, but neither it nor its
first and last layers look as they did. Its middle layers, of unchanged shapes, are paired
across parents afterwards, each the one look-alike of its facts; this pass pairs the block
around them, so the change reads as a swap with shapes changed, not as the block removed,
another inserted and its layers moved into it.
"""

from __future__ import annotations

from collections import Counter

from pytest_fwdorder.diff.call_tree import CallTree, inverts_nesting


def pair_kept_layouts(
    old_tree: CallTree,
    new_tree: CallTree,
    old_to_new: dict[int, int],
    new_to_old: dict[int, int],
) -> list[int]:
    """Pair, in the two maps, each unpaired old call with nested calls and the unpaired new
    call that holds the partners of half its children or more, where the two are of one
    class and run children of the same classes in the same order, and none of the new
    call's children is paired outside the old one. Innermost first. Returns the old calls
    paired."""
    paired: list[int] = []
    for old_index in range(len(old_tree.lines) - 1, -1, -1):
        children = old_tree.children[old_index]
        if old_index in old_to_new or not children:
            continue
        held = Counter(new_tree.parents[old_to_new[c]] for c in children if c in old_to_new)
        if not held:
            continue
        candidate, common = held.most_common(1)[0]
        if (
            2 * common >= len(children)
            and candidate not in new_to_old
            and _same_layout(old_tree, new_tree, old_index, candidate)
            and all(
                old_tree.parents[new_to_old[child]] == old_index
                for child in new_tree.children[candidate]
                if child in new_to_old
            )
            and not inverts_nesting(
                (old_tree, new_tree), (old_to_new, new_to_old), old_index, candidate
            )
        ):
            old_to_new[old_index], new_to_old[candidate] = candidate, old_index
            paired.append(old_index)
    return paired


def _same_layout(old_tree: CallTree, new_tree: CallTree, old_index: int, new_index: int) -> bool:
    """Whether the two calls are of one class and run children of the same classes in order."""
    old_lines, new_lines = old_tree.lines, new_tree.lines
    return old_lines[old_index].module_type == new_lines[new_index].module_type and [
        old_lines[child].module_type for child in old_tree.children[old_index]
    ] == [new_lines[child].module_type for child in new_tree.children[new_index]]
