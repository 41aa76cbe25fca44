"""Golden call lines -> a typed call tree: each call's parent, children and name-free subtree hash.

Pure, no torch. A trace's lines and a golden's parsed lines give the same tree (both are
`GoldenLine` lists in execution order, nesting by depth). The tree is what the diff aligns:
calls pair within paired parents, and a subtree that kept its shape under another name
(the old `layer2`, now `layer2.0` inside a wrapper) is found by its hash alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_fwdorder.golden_format import GoldenLine

NO_PARENT = -1


@dataclass(frozen=True, slots=True)
class CallTree:
    """The nesting of a list of call lines, by index into `lines`.

    `parents[i]` is the call `i` runs inside (`NO_PARENT` for a top-level call),
    `children[i]` the calls directly inside it in order, `ends[i]` the index after its last
    nested call, and `shapes[i]` a hash of its subtree without any path: class, inputs,
    outputs, facts and mode of every call in it, in order.
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

    def ancestors(self, index: int) -> list[int]:
        """The calls `index` runs inside, innermost first."""
        found = []
        parent = self.parents[index]
        while parent != NO_PARENT:
            found.append(parent)
            parent = self.parents[parent]
        return found

    def contains(self, outer: int, inner: int) -> bool:
        """Whether the call `inner` runs inside `outer` (or is it)."""
        return outer <= inner < self.ends[outer]

    def siblings_before(self, index: int) -> int | None:
        """The call run just before `index` inside the same parent, or None if it is first."""
        parent = self.parents[index]
        row = self.children[parent] if parent != NO_PARENT else self.roots
        position = row.index(index)
        return row[position - 1] if position else None


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
                line.facts,
                line.mode,
                line.operations,
                tuple(shapes[child] for child in children[index]),
            )
        )
    return CallTree(lines, parents, children, ends, shapes, roots)


def where(tree: CallTree, index: int) -> str:
    """Where a call is, by the nearest paths: `in layer3.2 after bn2`, `at the start of
    blocks.5`, or by classes when the lines have no paths (a name-free comparison still
    keeps the real lines' paths, see `located`)."""
    parent = tree.parents[index]
    before = tree.siblings_before(index)
    parent_name = tree.lines[parent].name if parent != NO_PARENT else ""
    if before is None:
        return f"at the start of {parent_name}" if parent_name else "at the start"
    before_name = _relative(tree.lines[before].name, parent_name)
    return f"in {parent_name} after {before_name}" if parent_name else f"after {before_name}"


def _relative(name: str, parent_name: str) -> str:
    """`bn2` for `layer3.2.bn2` inside `layer3.2`: the reader has the parent already."""
    prefix = f"{parent_name}."
    if parent_name and parent_name != "<root>" and name.startswith(prefix):
        return name[len(prefix) :]
    return name
