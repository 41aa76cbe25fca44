"""Golden call lines -> a picture's layout: boxes, nesting, rolled runs and edges. Pure, no
torch and no SVG text (`svg.py` draws what this places).

The picture is a top-to-bottom chain in execution order. A call with calls inside is a
container box, its header at the top and its children stacked inside it; every other call
is a one-line box. Sizes come from text length at a fixed character width (the picture
uses a monospace font), so the same lines always give the same coordinates.

Edges show execution order between sibling calls, labelled with the value passed: solid
where one call's output text equals the next call's first input text (the tensor very
likely flows), dashed where only the order is known. A container's header has an edge to
its first child (its input) and its last child one to the container's bottom (its output).
Module hooks do not see residual adds or other tensor operations between calls, and no
tensor identity is tracked: an edge says "ran next, with this shape", not "consumed this".

Consecutive sibling calls whose subtrees are identical after their paths' last index is
set aside (`layers.0`, `layers.1`, ...: types, inputs, outputs, facts and nesting equal)
roll into one box marked `x N` with the path range `layers.0 … layers.31`.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from pytest_fwdorder.diff.changes import Change, DiffRow, TreeChange
from pytest_fwdorder.golden.format import (
    FOLDED_PATTERN,
    GoldenLine,
    split_top_level,
)
from pytest_fwdorder.picture.diff_nesting import call_marks, drawing_depths, place_words
from pytest_fwdorder.picture.line_labels import LineLabels

# What a box says about a diff: unchanged, or how the call changed.
Status = Literal["same", "inserted", "removed", "changed", "moved"]

FONT_SIZE = 12
SMALL_FONT_SIZE = 10
# The advance of one character of a monospace font at 12px and 10px, slightly generous so
# that DejaVu, Liberation and Menlo all fit inside the boxes.
CHARACTER_WIDTH = 7.3
SMALL_CHARACTER_WIDTH = 6.1
HEADER_HEIGHT = 24
EDGE_GAP = 26  # the vertical space an edge and its label take between two boxes
PADDING = 12  # between a container's border and its children
TEXT_INSET = 8  # from a box's left border to its text
BADGE_GAP = 6
LINE_NODE_HEIGHT = 18  # a line under a call (an operation), drawn as a node in its box
LINE_NODE_GAP = 6
ROLL_OFFSET = 3  # how far each card of a rolled run's stack sits behind the one in front
MARGIN = 10
MAX_LABEL = 80  # characters of a box's header; the whole line is in its tooltip
MAX_NAME = 44  # of which its name
MAX_EDGE_LABEL = 40
SHARED_COLOURS = 8  # how many tag colours reused modules cycle through
ELLIPSIS = "…"


class AlignedDiff(Protocol):
    """What a diff picture reads of a diff: `TraceDiff` has it (a protocol, so the picture
    modules need not import the diff's)."""

    old_lines: list[GoldenLine]
    new_lines: list[GoldenLine]
    changes: list[Change]
    pairs: list[tuple[int, int]]
    rows: list[DiffRow]
    tree_changes: list[TreeChange]

    def summary(self) -> str: ...


@dataclass(frozen=True, slots=True)
class PictureCall:
    """One call to draw: its golden line and, in a diff picture, how it changed."""

    line: GoldenLine
    status: Status = "same"
    detail: str = ""  # the kinds of change, `settings changed, output changed`
    name: str = ""  # shown instead of its path: `one of features.10, features.11`
    note: str = ""  # after its class: `moved to dec.0`
    old_place: bool = False  # where a moved call was: drawn faded


@dataclass(slots=True)
class LineNode:
    """A small rounded node inside a call's box: one of the facets' lines under the call
    (an operation, `ops=True`)."""

    x: int
    y: int
    width: int
    text: str  # what the node shows: `relu -> f32[2,16]`
    full_text: str  # the line's text after its mark, for the tooltip


@dataclass(slots=True)
class Box:
    """One call (or a rolled run of identical calls) placed in the picture."""

    x: int
    y: int
    width: int
    height: int
    line: GoldenLine  # the call's line (a rolled run's first call)
    name: str  # the first part of the box's first line: `conv1`, `layers.0 … layers.31`
    kind: str  # the rest: `Conv2d #2 [frozen]`
    level: int  # how deep it is drawn: 0 for an outermost box
    status: Status = "same"
    detail: str = ""
    repeat: int = 1  # a rolled run's number of calls
    last_line: GoldenLine | None = None  # a rolled run's last call
    hidden_calls: int = 0  # calls folded into it (depth limit, `fold`, unchanged in a diff)
    shared_colour: int = -1  # the tag colour of a module called more than once, else -1
    container: bool = False  # children or lines under the call drawn inside it
    call: PictureCall | None = None  # in a diff, with its words (`moved to dec.0`, ...)
    parent: int = -1  # index of the enclosing box, -1 at the top
    line_nodes: list[LineNode] = field(default_factory=list)

    @property
    def header(self) -> str:
        """The box's first line: `conv1: Conv2d #2`."""
        return header_text(self.name, self.kind)

    @property
    def badges(self) -> list[str]:
        """The small marks right of the header, in order: `x32`, `+14 calls`, `shared`."""
        return badges_of(self.repeat, self.hidden_calls, shared=self.shared_colour >= 0)


@dataclass(frozen=True, slots=True)
class Edge:
    """A vertical arrow from one box's bottom (or a header) to the next box's top."""

    x: int
    top: int
    bottom: int
    label: str  # the value passed, `f32[1,64,56,56]`
    solid: bool  # output and next input have the same text


@dataclass(slots=True)
class Layout:
    """Everything a picture places, in drawing order (a box before the boxes inside it)."""

    width: int
    height: int
    boxes: list[Box]
    edges: list[Edge]


@dataclass(slots=True)
class _Node:
    """A call in the tree being laid out, before it has a place."""

    call: PictureCall
    outputs: str  # without a `[+N calls folded]` mark
    children: list[_Node] = field(default_factory=list)
    hidden_calls: int = 0
    repeat: int = 1
    last: GoldenLine | None = None
    signature: int = -1
    changed_inside: bool = False
    width: int = 0
    height: int = 0


def text_width(text: str, small: bool = False) -> int:
    """The width of `text` in the picture's monospace font, in whole pixels."""
    return math.ceil(len(text) * (SMALL_CHARACTER_WIDTH if small else CHARACTER_WIDTH))


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, ending with an ellipsis when it was longer."""
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def lay_out(
    calls: Sequence[PictureCall],
    *,
    rolled: bool = True,
    depth: int | None = None,
    under: Sequence[str] = (),
    fold_unchanged: bool = False,
) -> Layout:
    """Place every call of a trace (or of a diff's merged calls).

    `depth` folds calls nested deeper into their ancestor at that depth (the root is 0), as
    `fwdorder show --depth` does; `under` names the facets whose lines under each call are
    drawn as small nodes inside it (`("operations",)`); `fold_unchanged` folds every box
    whose calls are all unchanged (a diff's context). Raises ValueError for a negative depth
    or a title no registered facet writing lines under the calls has.
    """
    if depth is not None and depth < 0:
        raise ValueError(f"cannot draw to depth {depth!r}: use 0 (the root only) or more")
    roots = _tree(calls, depth)
    labels = LineLabels.of(under) if under else None
    if fold_unchanged:
        for root in roots:
            _fold_unchanged(root)
    if rolled:
        signatures: dict[tuple[object, ...], int] = {}
        for root in roots:
            _sign(root, signatures, labels)
        roots = _roll(roots)
    for root in roots:
        _measure(root, None, labels)
    inner = max([*(root.width for root in roots), _chain_width(roots, None)], default=0)
    placer = _Placer(labels)
    bottom = placer.chain(roots, None, MARGIN, inner, MARGIN)
    return Layout(inner + 2 * MARGIN, bottom + MARGIN, placer.boxes, placer.edges)


def golden_calls(lines: Sequence[GoldenLine]) -> list[PictureCall]:
    """A trace's call lines as unchanged calls to draw."""
    return [PictureCall(line) for line in lines]


def diff_calls(difference: AlignedDiff) -> list[PictureCall]:
    """A diff's calls in one column: the new trace's calls, with each removed call where it
    was; each marked inserted, removed, changed, moved or unchanged, from the diff's own
    aligned rows."""
    marks = call_marks(difference.changes, difference.tree_changes, difference.pairs)
    words = place_words(marks, difference)
    regrouped_new = {new: old for old, new in marks.regrouped.items()}
    calls: list[PictureCall] = []
    drawn_rows: list[tuple[int | None, int | None]] = []
    for row in difference.rows:
        if row.new is None:
            if row.old is None or row.old in marks.regrouped:
                continue  # nothing, or a call drawn in its new place only
            status: Status = "moved" if row.old in marks.moved_old else "removed"
            detail, name, note = words.of_old(row.old, status)
            old_line = difference.old_lines[row.old]
            calls.append(PictureCall(old_line, status, detail, name, note, old_place=bool(note)))
            drawn_rows.append((row.old, None))
            continue
        old = regrouped_new.get(row.new, row.old)
        drawn_rows.append((old, row.new))
        line = difference.new_lines[row.new]
        detail = ", ".join(dict.fromkeys(marks.kinds.get(row.new, [])))
        if row.new in marks.moved_new:
            note = words.of_new(row.new, "moved")[2]
            calls.append(PictureCall(line, "moved", detail or note or "moved", note=note))
        elif old is None:
            calls.append(PictureCall(line, "inserted", *words.of_new(row.new, "inserted")))
        elif row.old is None and detail:  # regrouped by a wrap, and changed besides
            calls.append(PictureCall(line, "changed", detail))
        elif row.old is not None and row.differs and (detail or row.new not in marks.explained):
            calls.append(PictureCall(line, "changed", detail or "text changed"))
        else:
            calls.append(PictureCall(line))
    # Boxes follow the new nesting, each removed call inside its old parent's box.
    depths = drawing_depths(drawn_rows, difference.old_lines, difference.new_lines)
    return [
        call if call.line.depth == depth else replace(call, line=replace(call.line, depth=depth))
        for call, depth in zip(calls, depths, strict=True)
    ]


def _tree(calls: Sequence[PictureCall], depth: int | None) -> list[_Node]:
    """The calls nested by depth; calls deeper than `depth` counted into their ancestor."""
    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for call in calls:
        line = call.line
        while stack and stack[-1][0] >= line.depth:
            stack.pop()
        folded = FOLDED_PATTERN.search(line.outputs)
        outputs = line.outputs[: folded.start()] if folded else line.outputs
        hidden = int(folded.group(1)) if folded else 0
        if depth is not None and line.depth > depth and stack:
            stack[-1][1].hidden_calls += 1 + hidden
            if call.status != "same":
                stack[-1][1].changed_inside = True
            continue
        node = _Node(call, outputs, hidden_calls=hidden, changed_inside=call.status != "same")
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((line.depth, node))
    for root in roots:
        _mark_changed_inside(root)
    return roots


def _mark_changed_inside(node: _Node) -> bool:
    for child in node.children:
        node.changed_inside = _mark_changed_inside(child) or node.changed_inside
    return node.changed_inside


def _fold_unchanged(node: _Node) -> None:
    """Fold the inside of every box with no change in it: the diff's unchanged context."""
    if not node.changed_inside and node.children:
        node.hidden_calls += _count(node.children)
        node.children = []
        return
    for child in node.children:
        _fold_unchanged(child)


def _count(nodes: list[_Node]) -> int:
    return sum(1 + node.hidden_calls + _count(node.children) for node in nodes)


def _sign(node: _Node, signatures: dict[tuple[object, ...], int], labels: LineLabels | None) -> int:
    """A number equal for two subtrees that are the same apart from their own path.

    Children's paths count relative to their parent's (`layers.3.mlp` under `layers.3` is
    `mlp`), so two layers that differ only in their index get the same number.
    """
    line = node.call.line
    children = tuple(
        (_relative(child.call.line.path, line.path), _sign(child, signatures, labels))
        for child in node.children
    )
    key = (
        line.module_type,
        line.nth,
        line.reused,
        line.frozen,
        line.mode,
        line.registered,
        line.scripted,
        line.inputs,
        node.outputs,
        line.facts,
        labels.drawn(line.under) if labels is not None else (),
        node.call.status,
        node.call.detail,
        node.call.note,
        node.hidden_calls,
        children,
    )
    node.signature = signatures.setdefault(key, len(signatures))
    return node.signature


def _relative(path: str, parent_path: str) -> str:
    """`path` under its parent's: `layers.3.mlp` under `layers.3` is `mlp`."""
    if parent_path and path.startswith(parent_path + "."):
        return path[len(parent_path) + 1 :]
    return "\0" + path  # not under its parent's name (a shared module): compared whole


def _index_prefix(path: str) -> str | None:
    """The path without its last index (`layers.31` -> `layers`), or None without one."""
    prefix, _, last = path.rpartition(".")
    return prefix if last.isdigit() else None


def _roll(nodes: list[_Node]) -> list[_Node]:
    """Consecutive siblings with the same signature and indexed paths as one rolled node."""
    rolled: list[_Node] = []
    for node in nodes:
        node.children = _roll(node.children)
        previous = rolled[-1] if rolled else None
        prefix = _index_prefix(node.call.line.path)
        if (
            previous is not None
            and prefix is not None
            and previous.signature == node.signature
            and _index_prefix(previous.call.line.path) == prefix
            and (previous.last or previous.call.line).path != node.call.line.path
        ):
            previous.repeat += 1
            previous.last = node.call.line
            continue
        rolled.append(node)
    return rolled


def _header(node: _Node, parent: _Node | None) -> tuple[str, str]:
    """A box's first line in two parts: the name, and the class with `#nth` and marks."""
    line = node.call.line
    parent_path = parent.call.line.path if parent is not None else ""
    name = node.call.name or _shown_path(line.path, parent_path)
    if node.last is not None:
        name = f"{name} {ELLIPSIS} {_shown_path(node.last.path, parent_path)}"
    rest = line.module_type
    if line.reused and node.repeat == 1:
        rest += f" #{line.nth}"
    marks = [
        *(["frozen"] if line.frozen else []),
        *([line.mode] if line.mode else []),
        *([] if line.registered else ["unregistered"]),
        *(["scripted"] if line.scripted else []),
    ]
    rest += "".join(f" [{mark}]" for mark in marks)
    return shorten(name, MAX_NAME), shorten(rest, MAX_LABEL - MAX_NAME)


def header_text(name: str, rest: str) -> str:
    """The whole first line of a box: `conv1: Conv2d`, or the class alone without a path."""
    return f"{name}: {rest}" if name else rest


def _shown_path(path: str, parent_path: str) -> str:
    """A child's path without its parent's, which the enclosing box already shows."""
    if parent_path and path.startswith(parent_path + "."):
        return path[len(parent_path) + 1 :]
    return path


def _line_node(labels: LineLabels, box: Box, written: str, top: int) -> int:
    """Place a node for one of the facets' lines under the box's call below `top`; returns
    its bottom."""
    shown, full_text = labels(written)
    text = shorten(shown, MAX_LABEL)
    width = text_width(text, small=True) + 16
    top += LINE_NODE_GAP
    box.line_nodes.append(LineNode(box.x + (box.width - width) // 2, top, width, text, full_text))
    return top + LINE_NODE_HEIGHT


def _measure(node: _Node, parent: _Node | None, labels: LineLabels | None) -> None:
    """Each node's width and height, children first."""
    for child in node.children:
        _measure(child, node, labels)
    box_badges = _badge_width(node)
    header = header_text(*_header(node, parent)) + (f" {node.call.note}" if node.call.note else "")
    width = TEXT_INSET + text_width(header) + box_badges + TEXT_INSET
    height = HEADER_HEIGHT
    shown = (
        [shorten(labels(text)[0], MAX_LABEL) for text in labels.drawn(node.call.line.under)]
        if labels is not None
        else []
    )
    if node.children:
        inner = max(child.width for child in node.children)
        width = max(width, inner + 2 * PADDING, _chain_width(node.children, node) + 2 * PADDING)
        height += sum(child.height for child in node.children) + EDGE_GAP * (len(node.children) + 1)
    for text in shown:
        width = max(width, text_width(text, small=True) + 16 + 2 * PADDING)
        height += LINE_NODE_GAP + LINE_NODE_HEIGHT
    if shown:
        height += LINE_NODE_GAP  # below the last line's node, as above each
    node.width = width + (2 * ROLL_OFFSET if node.repeat > 1 else 0)
    node.height = height


def _badge_width(node: _Node) -> int:
    badges = badges_of(node.repeat, node.hidden_calls, shared=node.call.line.reused)
    return sum(BADGE_GAP + badge_width(badge) for badge in badges)


def badges_of(repeat: int, hidden_calls: int, *, shared: bool) -> list[str]:
    """The small marks right of a header, in order: `x32`, `+14 calls` (`+14 calls each`
    in a rolled run), `shared`."""
    found = [f"x{repeat}"] if repeat > 1 else []
    if hidden_calls:
        each = " each" if repeat > 1 else ""
        found.append(f"+{hidden_calls} call{'s' if hidden_calls != 1 else ''}{each}")
    if shared:
        found.append("shared")
    return found


def badge_width(text: str) -> int:
    """The width of a badge's rounded rectangle: its text and a little room."""
    return text_width(text, small=True) + 8


def _chain_width(nodes: list[_Node], parent: _Node | None) -> int:
    """How wide a chain must be for the edge labels right of its centre line."""
    labels = [_edge_label(*pair) for pair in _edge_pairs(nodes, parent)]
    widest = max((text_width(label, small=True) for label, _ in labels), default=0)
    return 2 * (widest + 10)


def _first_input(inputs: str) -> str:
    """The first value of inputs text: `(f32[2,4], mask=None)` -> `f32[2,4]`."""
    inner = inputs[1:-1] if inputs.startswith("(") and inputs.endswith(")") else inputs
    values = split_top_level(inner)
    return values[0] if values else ""


def _edge_pairs(nodes: list[_Node], parent: _Node | None) -> list[tuple[str, str]]:
    """For each edge of a chain, the value sent and the value received, in order."""
    pairs: list[tuple[str, str]] = []
    if not nodes:
        return pairs
    if parent is not None:
        first = _first_input(nodes[0].call.line.inputs)
        pairs.append((_first_input(parent.call.line.inputs), first))
    for before, after in itertools.pairwise(nodes):
        pairs.append((before.outputs, _first_input(after.call.line.inputs)))
    if parent is not None:
        pairs.append((nodes[-1].outputs, parent.outputs))
    return pairs


def _edge_label(sent: str, received: str) -> tuple[str, bool]:
    return shorten(received or sent, MAX_EDGE_LABEL), bool(sent) and sent == received


@dataclass(slots=True)
class _Placer:
    """Gives each measured node its place, appending boxes and edges in drawing order."""

    labels: LineLabels | None  # None: the lines under the calls are not drawn
    boxes: list[Box] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def chain(
        self, nodes: list[_Node], parent: _Node | None, left: int, width: int, top: int
    ) -> int:
        """Place sibling boxes centred in `width` from `top`, joined by edges; returns the
        chain's bottom. Inside a parent, edges also come from its header and go to its end."""
        centre = left + width // 2
        labels = iter([_edge_label(*pair) for pair in _edge_pairs(nodes, parent)])
        parent_index = len(self.boxes) - 1 if parent is not None else -1
        level = self.boxes[parent_index].level + 1 if parent is not None else 0
        y = top
        for position, node in enumerate(nodes):
            if parent is not None or position > 0:
                label, solid = next(labels)
                self.edges.append(Edge(centre, y, y + EDGE_GAP, label, solid))
                y += EDGE_GAP
            self.place(node, parent, left + (width - node.width) // 2, y, parent_index, level)
            y += node.height
        if parent is not None and nodes:
            label, solid = next(labels)
            self.edges.append(Edge(centre, y, y + EDGE_GAP, label, solid))
            y += EDGE_GAP
        return y

    def place(
        self, node: _Node, parent: _Node | None, x: int, y: int, parent_index: int, level: int
    ) -> None:
        """One box at (x, y), then what is drawn inside it."""
        line = node.call.line
        name, kind = _header(node, parent)
        box = Box(
            x=x,
            y=y,
            width=node.width - (2 * ROLL_OFFSET if node.repeat > 1 else 0),
            height=node.height,
            line=line,
            name=name,
            kind=kind,
            level=level,
            status=node.call.status,
            detail=node.call.detail,
            repeat=node.repeat,
            last_line=node.last,
            hidden_calls=node.hidden_calls,
            shared_colour=zlib.crc32(line.path.encode()) % SHARED_COLOURS if line.reused else -1,
            parent=parent_index,
            container=bool(node.children),
            call=node.call,
        )
        self.boxes.append(box)
        bottom = y + HEADER_HEIGHT
        if node.children:
            # The box is the last one placed while its children are: they find it there.
            bottom = self.chain(node.children, node, x + PADDING, box.width - 2 * PADDING, bottom)
        if self.labels is not None:
            for written in self.labels.drawn(line.under):
                bottom = _line_node(self.labels, box, written, bottom)
        box.container = box.container or bool(box.line_nodes)
