"""Golden call lines -> a typed call tree: each call's parent, children and name-free subtree hash.

Pure, no torch. A trace's lines and a golden's parsed lines give the same tree (both are
`GoldenLine` lists in execution order, nesting by depth). The tree is what the diff aligns:
calls pair within paired parents, and a subtree that kept its shape under another name
(the old `layer2`, now `layer2.0` inside a wrapper) is found by its hash alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_fwdorder.diff.call_keys import facts_thawed
from pytest_fwdorder.golden.format import GoldenLine

NO_PARENT = -1


@dataclass(frozen=True, slots=True)
class CallTree:
    """The nesting of a list of call lines, by index into `lines`.

    `parents[i]` is the call `i` runs inside (`NO_PARENT` for a top-level call),
    `children[i]` the calls directly inside it in order, `ends[i]` the index after its last
    nested call, and `shapes[i]` a hash of its subtree without any path: class, inputs,
    outputs, facts and mode of every call in it, in order. Facts without their tensors'
    frozen flags and ties (`call_keys.facts_thawed`): a stage frozen as it was wrapped is
    the same stage, its frozen state a change of its own.
    """

    lines: list[GoldenLine]
    parents: list[int]
    children: list[list[int]]
    ends: list[int]
    shapes: list[int]
    roots: list[int]

    def size(self, index: int) -> int:
        """How many calls the subtree at `index` holds, itself included."""
        return self.ends[index] - index

    def siblings(self, index: int) -> list[int]:
        """The calls run inside the same call as `index` (the top-level calls for one of
        them), itself included, in order."""
        parent = self.parents[index]
        return self.roots if parent == NO_PARENT else self.children[parent]

    def ancestors(self, index: int) -> list[int]:
        """The calls `index` runs inside, innermost first."""
        found = []
        parent = self.parents[index]
        while parent != NO_PARENT:
            found.append(parent)
            parent = self.parents[parent]
        return found

    def paired_ancestor(self, index: int, partners: dict[int, int]) -> int:
        """The nearest call `index` runs inside that has a partner, `NO_PARENT` for none."""
        parent = self.parents[index]
        while parent != NO_PARENT and parent not in partners:
            parent = self.parents[parent]
        return parent


def inverts_nesting(
    trees: tuple[CallTree, CallTree],
    maps: tuple[dict[int, int], dict[int, int]],
    old_index: int,
    new_index: int,
) -> bool:
    """Whether pairing an old call with a new one would have either hold (or be) the
    partner of the nearest paired call the other runs inside: a stage flattened as the model
    was wrapped is not the new model, which holds the old one. Only calls paired already
    count. `maps`: the partners of old calls, and of new ones."""
    for tree, index, other, other_index, partners in (
        (trees[0], old_index, trees[1], new_index, maps[0]),
        (trees[1], new_index, trees[0], old_index, maps[1]),
    ):
        outer = tree.paired_ancestor(index, partners)
        if outer != NO_PARENT and other_index <= partners[outer] < other.ends[other_index]:
            return True
    return False


def build_call_tree(lines: list[GoldenLine]) -> CallTree:
    """The call tree of lines in execution order, nested by their depth.

    A line deeper than one below its predecessor (hand-edited text) nests under the nearest
    shallower line, as a reader would take it.
    """
    count = len(lines)
    parents = [NO_PARENT] * count
    children: list[list[int]] = [[] for _ in range(count)]
    ends = [count] * count
    roots: list[int] = []
    open_calls: list[int] = []
    for index, line in enumerate(lines):
        while open_calls and lines[open_calls[-1]].depth >= line.depth:
            ends[open_calls.pop()] = index
        if open_calls:
            parents[index] = open_calls[-1]
            children[open_calls[-1]].append(index)
        else:
            roots.append(index)
        open_calls.append(index)
    shapes = [0] * count
    for index in range(count - 1, -1, -1):  # children before their parent
        line = lines[index]
        shapes[index] = hash(
            (
                line.module_type,
                line.inputs,
                line.outputs,
                facts_thawed(line),
                line.mode,
                line.under,
                tuple(shapes[child] for child in children[index]),
            )
        )
    return CallTree(lines, parents, children, ends, shapes, roots)
