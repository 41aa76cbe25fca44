"""A picture's layout -> SVG text, and the pictures of a golden and of a diff. Pure, no torch.

The SVG is self-contained: no script, no external font, stylesheet or image; colours are
presentation attributes, so it reads the same in a browser, an image viewer or a notebook.
Every name and value is escaped, each box has a `<title>` with its whole golden line (a
browser shows it on hover), and the same golden text always gives the same bytes.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_fwdorder.golden.format import model_of
from pytest_fwdorder.golden.parse import end_section, parse_golden
from pytest_fwdorder.picture.columns import STEP_HEIGHT, Column, place_columns
from pytest_fwdorder.picture.layout import (
    BADGE_GAP,
    EDGE_GAP,
    HEADER_HEIGHT,
    LINE_NODE_HEIGHT,
    MARGIN,
    ROLL_OFFSET,
    SMALL_FONT_SIZE,
    TEXT_INSET,
    AlignedDiff,
    Box,
    Layout,
    Status,
    badge_width,
    diff_calls,
    golden_calls,
    lay_out,
    text_width,
)

SVG_NAMESPACE = "http://www.w3.org/2000/svg"
FONT_FAMILY = "DejaVu Sans Mono, Menlo, Consolas, Liberation Mono, monospace"
SUMMARY_LINE_HEIGHT = 17
LEGEND_HEIGHT = 22
INK = "#1f2328"
MUTED = "#57606a"
TYPE_INK = "#0550ae"
OLD_PLACE_OPACITY = 0.55  # the place a module moved away from, drawn faded
# (fill, border) of a box by its diff status; unchanged boxes are shaded by nesting level.
STATUS_COLOURS: dict[Status, tuple[str, str]] = {
    "inserted": ("#dafbe1", "#1a7f37"),
    "removed": ("#ffebe9", "#cf222e"),
    "changed": ("#fff8c5", "#9a6700"),
    "moved": ("#ddf4ff", "#0969da"),
}
LEVEL_FILLS = ("#f6f8fa", "#eaeef2")
LEAF_FILL = "#ffffff"
BORDER = "#8c959f"
# The diff picture's legend: (fill, border, name) of each status.
_DIFF_LEGEND = (
    (*STATUS_COLOURS["inserted"], "inserted"),
    (*STATUS_COLOURS["removed"], "removed"),
    (*STATUS_COLOURS["changed"], "changed"),
    (*STATUS_COLOURS["moved"], "moved"),
    (LEAF_FILL, BORDER, "unchanged"),
)
# The tag of a module called more than once: one colour per module, the same in every box.
# No blue among them: blue is the `x N` badge of a rolled run.
SHARED_FILLS = (
    "#8250df",
    "#bf3989",
    "#1a7f37",
    "#bc4c00",
    "#9a6700",
    "#cf222e",
    "#116329",
    "#953800",
)
REPEAT_FILL = "#0969da"
HIDDEN_FILL = "#d0d7de"
LINE_NODE_FILL, LINE_NODE_BORDER = "#fff1e5", "#bc4c00"  # a facet's line under a call
COLUMN_FILL, COLUMN_BORDER = "#fbefff", "#8250df"  # a facet's column (backward's steps)
# Characters XML 1.0 forbids even as references: written as their escapes (`\x07`).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Picture:
    """An SVG picture of a trace or a diff: `.svg` is its text, `save(path)` writes it, and
    a notebook shows it (`_repr_svg_`)."""

    svg: str

    def save(self, path: str | Path) -> Path:
        """Write the SVG to `path` (UTF-8) and return the path."""
        target = Path(path)
        target.write_text(self.svg, encoding="utf-8")
        return target

    @property
    def inline_svg(self) -> str:
        """The SVG to put inside an HTML page: without its namespace declaration, which
        HTML gives an `<svg>` element anyway, so the page names no address at all."""
        return self.svg.replace(f' xmlns="{SVG_NAMESPACE}"', "", 1)

    def _repr_svg_(self) -> str:
        return self.svg

    def __repr__(self) -> str:
        size = re.search(r'width="([0-9]+)" height="([0-9]+)"', self.svg)
        shown = f"{size.group(1)} x {size.group(2)} px, " if size else ""
        return f"<Picture: {shown}{len(self.svg):,} bytes of SVG; .save(path) writes it>"


def golden_picture(
    text: str,
    *,
    rolled: bool = True,
    depth: int | None = None,
    under: Sequence[str] = (),
    sections: Sequence[str] = (),
) -> Picture:
    """The picture of one golden text: its calls as nested boxes in execution order.

    `rolled=False` draws every block of a run of identical ones; `depth` folds deeper calls
    into their ancestor (the root is 0); `under` names the facets whose lines under the
    calls are drawn as small nodes in their call's box (`("operations",)`: each call's
    operations, a golden traced with `ops=True`); `sections` names the facets' sections
    after the calls to draw as a column each, right of the calls (`("backward",)`: the
    backward steps of a trace with `backward=True`; a section the golden lacks is not
    drawn). Raises TypeError if `text` is not a string or `sections` is one, ValueError for
    a negative depth or a title in `under` that no facet writing lines under calls has.
    """
    if not isinstance(text, str):
        raise TypeError(
            f"golden_picture expected golden text, got {type(text).__name__}: pass the text "
            "of a golden file (path.read_text()), or call trace.picture() on a trace"
        )
    if isinstance(sections, str):
        raise TypeError(
            f"golden_picture takes the sections to draw as a sequence of titles, got the "
            f"string {sections!r}: write sections=({sections!r},)"
        )
    header, lines = parse_golden(text)
    layout = lay_out(golden_calls(lines), rolled=rolled, depth=depth, under=under)
    found = [(title, end_section(header, title)) for title in sections]
    placed = place_columns(layout, [(title, steps) for title, steps in found if steps is not None])
    model = model_of(header)
    calls = f"{len(lines)} call{'s' if len(lines) != 1 else ''}"
    title = f"{model}: {calls}" if model else calls
    return Picture(render_svg(placed.layout, title=title, columns=placed.columns))


def diff_picture(
    difference: AlignedDiff,
    *,
    rolled: bool = True,
    depth: int | None = None,
    fold_unchanged: bool = True,
) -> Picture:
    """The picture of a diff: the new trace's calls with each removed call where it was,
    inserted green, removed red (struck through), changed yellow, moved blue, under the
    diff's summary and a legend.

    `fold_unchanged` draws a box with no change inside folded (`+N calls`), so the changed
    part stands out; runs of identical unchanged boxes roll unless `rolled=False`.
    """
    layout = lay_out(
        diff_calls(difference), rolled=rolled, depth=depth, fold_unchanged=fold_unchanged
    )
    summary = difference.summary().splitlines()
    return Picture(render_svg(layout, title=summary[0], summary=summary, legend=True))


def render_svg(
    layout: Layout,
    *,
    title: str,
    summary: list[str] | None = None,
    legend: bool = False,
    columns: Sequence[Column] = (),
) -> str:
    """The SVG text of a layout, with `summary` lines and a colour legend above it and the
    facets' `columns` right of it."""
    summary = summary or []
    top = len(summary) * SUMMARY_LINE_HEIGHT + (LEGEND_HEIGHT if legend else 0)
    top += MARGIN if top else 0
    summary_width = max((text_width(line) for line in summary), default=0) + 2 * MARGIN
    width = max(layout.width, summary_width, 520 if legend else 0)
    height = layout.height + top
    parts = svg_opening(width, height, title, summary)
    if legend:
        parts.append(svg_legend(_DIFF_LEGEND, len(summary)))
    parts.append(f'<g class="fo-calls" transform="translate(0,{top})">')
    parts += _boxes(layout.boxes)
    parts += [_edge(edge.x, edge.top, edge.bottom, edge.label, edge.solid) for edge in layout.edges]
    parts += [_column(column) for column in columns]
    parts += ["</g>", "</svg>"]
    return "\n".join(parts) + "\n"


def svg_opening(
    width: int, height: int, title: str, summary: list[str], css_class: str = "fwdorder-picture"
) -> list[str]:
    """The opening of a picture's SVG: the root element, its title, a white background and the
    `summary` lines (the first in bold); the caller adds the body and closes the root."""
    parts = [
        f'<svg xmlns="{SVG_NAMESPACE}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{FONT_FAMILY}" font-size="12" '
        f'class="{css_class}" role="img">',
        f"<title>{xml_text(title)}</title>",
        f'<rect class="fo-background" width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    for number, line in enumerate(summary):
        weight = ' font-weight="bold"' if number == 0 else ""
        parts.append(
            f'<text class="fo-summary" x="{MARGIN}" y="{MARGIN + 12 + number * SUMMARY_LINE_HEIGHT}"'
            f' fill="{INK}"{weight}>{xml_text(line)}</text>'
        )
    return parts


def xml_text(text: str) -> str:
    """`text` safe inside an XML element or a quoted attribute: `<`, `&` and quotes as
    references, characters XML cannot hold as their escapes."""
    visible = _NOT_XML.sub(lambda match: match.group().encode("unicode_escape").decode(), text)
    return html.escape(visible, quote=True)


def svg_legend(items: Sequence[tuple[str, str, str]], summary_lines: int) -> str:
    """A picture's colour legend, under its `summary_lines` lines of summary: for each
    (fill, border, name) in `items`, a swatch and its name, left to right, in a row
    `LEGEND_HEIGHT` high."""
    y = MARGIN + summary_lines * SUMMARY_LINE_HEIGHT + 4
    parts = ['<g class="fo-legend">']
    x = MARGIN
    for fill, border, name in items:
        parts.append(
            f'<rect x="{x}" y="{y}" width="14" height="14" rx="2" fill="{fill}" stroke="{border}"/>'
            f'<text x="{x + 19}" y="{y + 11}" font-size="{SMALL_FONT_SIZE + 1}" fill="{INK}">'
            f"{name}</text>"
        )
        x += 19 + text_width(name) + 18
    parts.append("</g>")
    return "".join(parts)


def _boxes(boxes: list[Box]) -> list[str]:
    """Each box as a group, a container's group holding its children's."""
    children: dict[int, list[int]] = {}
    for index, box in enumerate(boxes):
        children.setdefault(box.parent, []).append(index)
    parts: list[str] = []

    def draw(index: int) -> None:
        parts.append(_box_open(boxes[index]))
        for child in children.get(index, []):
            draw(child)
        parts.append("</g>")

    for index in children.get(-1, []):
        draw(index)
    return parts


def _box_open(box: Box) -> str:
    """A box's group up to its children: tooltip, rectangle, header, badges, operations."""
    fill, border = _colours(box)
    old_place = box.call is not None and box.call.old_place
    classes = " ".join(
        [
            "fo-box",
            f"fo-{box.status}",
            *(["fo-container"] if box.container else []),
            *(["fo-rolled"] if box.repeat > 1 else []),
            *(["fo-shared"] if box.shared_colour >= 0 else []),
            *(["fo-old-place"] if old_place else []),
        ]
    )
    parts = [
        f'<g class="{classes}" data-path="{xml_text(box.line.path)}" '
        f'data-type="{xml_text(box.line.module_type)}"'
        + (f' data-repeat="{box.repeat}"' if box.repeat > 1 else "")
        + (f' opacity="{OLD_PLACE_OPACITY}"' if old_place else "")
        + ">",
        f"<title>{xml_text(_tooltip(box))}</title>",
    ]
    for offset in (2 * ROLL_OFFSET, ROLL_OFFSET) if box.repeat > 1 else ():
        parts.append(
            f'<rect class="fo-stack" x="{box.x + offset}" y="{box.y + offset}" '
            f'width="{box.width}" height="{box.height}" rx="4" fill="{fill}" stroke="{border}"/>'
        )
    parts.append(
        f'<rect class="fo-frame" x="{box.x}" y="{box.y}" width="{box.width}" '
        f'height="{box.height}" rx="4" fill="{fill}" stroke="{border}"'
        + (' stroke-width="2"' if box.status != "same" else "")
        + (' stroke-dasharray="5 3"' if old_place else "")
        + "/>"
    )
    struck = ' text-decoration="line-through"' if box.status == "removed" else ""
    weight = ' font-weight="bold"' if box.container else ""
    name = f'<tspan fill="{INK}">{xml_text(box.name)}: </tspan>' if box.name else ""
    words = box.call.note if box.call is not None else ""
    note = (
        f'<tspan class="fo-note" fill="{MUTED}" font-style="italic"> {xml_text(words)}</tspan>'
        if words
        else ""
    )
    parts.append(
        f'<text class="fo-header" x="{box.x + TEXT_INSET}" y="{box.y + 16}"{weight}{struck}>'
        f'{name}<tspan fill="{TYPE_INK}">{xml_text(box.kind)}</tspan>{note}</text>'
    )
    parts += _badges(box)
    for node in box.line_nodes:
        parts.append(
            f'<g class="fo-line-under"><title>{xml_text(node.full_text)}</title>'
            f'<rect x="{node.x}" y="{node.y}" width="{node.width}" '
            f'height="{LINE_NODE_HEIGHT}" rx="9" fill="{LINE_NODE_FILL}" '
            f'stroke="{LINE_NODE_BORDER}"/><text x="{node.x + 8}" y="{node.y + 13}" '
            f'font-size="{SMALL_FONT_SIZE}" fill="{INK}">{xml_text(node.text)}</text></g>'
        )
    return "".join(parts)


def _colours(box: Box) -> tuple[str, str]:
    if box.status != "same":
        return STATUS_COLOURS[box.status]
    if box.container:
        return LEVEL_FILLS[box.level % len(LEVEL_FILLS)], BORDER
    return LEAF_FILL, BORDER


def _tooltip(box: Box) -> str:
    """What hovering a box shows: its golden line and facts, a rolled run's last line, and
    in a diff what changed."""
    first = box.line.text.strip()
    if box.call is not None and box.call.name:  # `one of features.10, ...`, not one path
        first = box.call.name + first.removeprefix(box.line.path)
    lines = [first, *(f"| {fact}" for fact in box.line.facts)]
    if box.last_line is not None:
        lines += [
            f"… {box.repeat - 2} more like it …" if box.repeat > 2 else "",
            box.last_line.text.strip(),
        ]
    if box.status != "same":
        lines.append(f"({box.detail or box.status})")
    return "\n".join(line for line in lines if line)


def _badges(box: Box) -> list[str]:
    """The header's badges, right-aligned: `x32`, `+14 calls`, `shared`."""
    badges = box.badges
    x = box.x + box.width - TEXT_INSET - sum(badge_width(badge) + BADGE_GAP for badge in badges)
    parts: list[str] = []
    for badge in badges:
        x += BADGE_GAP
        if badge == "shared":
            fill, ink, kind = SHARED_FILLS[box.shared_colour], "#ffffff", "shared"
        elif badge.startswith("x"):
            fill, ink, kind = REPEAT_FILL, "#ffffff", "repeat"
        else:
            fill, ink, kind = HIDDEN_FILL, INK, "hidden"
        width = badge_width(badge)
        parts.append(
            f'<g class="fo-badge fo-badge-{kind}"><rect x="{x}" y="{box.y + 5}" width="{width}" '
            f'height="14" rx="7" fill="{fill}"/><text x="{x + 4}" y="{box.y + 16}" '
            f'font-size="{SMALL_FONT_SIZE}" fill="{ink}" font-weight="bold">{badge}</text></g>'
        )
        x += width
    return parts


def _edge(x: int, top: int, bottom: int, label: str, solid: bool) -> str:
    """A downward arrow with the value passed written right of it."""
    dash = "" if solid else ' stroke-dasharray="4 3"'
    tip = bottom - 1
    return (
        f'<g class="fo-edge fo-{"solid" if solid else "dashed"}">'
        f'<line x1="{x}" y1="{top + 1}" x2="{x}" y2="{tip - 5}" stroke="{MUTED}" '
        f'stroke-width="1.3"{dash}/>'
        f'<path d="M{x - 4},{tip - 6} L{x + 4},{tip - 6} L{x},{tip} Z" fill="{MUTED}"/>'
        f'<text x="{x + 7}" y="{top + EDGE_GAP // 2 + 4}" font-size="{SMALL_FONT_SIZE}" '
        f'fill="{MUTED}">{xml_text(label)}</text></g>'
    )


def _column(column: Column) -> str:
    """A facet's column: its title, then one small node per step, in the order they ran
    (classes `fo-backward` and `fo-backward-step` for backward's)."""
    name = column.title.replace(" ", "-")
    parts = [
        f'<g class="fo-{name}">',
        f'<text x="{column.x}" y="{MARGIN + HEADER_HEIGHT - 8}" font-weight="bold" '
        f'fill="{INK}">{xml_text(column.title)}</text>',
    ]
    for step in column.steps:
        parts.append(
            f'<g class="fo-{name}-step"><title>{xml_text(step.text)}</title>'
            f'<rect x="{step.x}" y="{step.y}" width="{step.width}" height="{STEP_HEIGHT}" '
            f'rx="9" fill="{COLUMN_FILL}" stroke="{COLUMN_BORDER}"/>'
            f'<text x="{step.x + 8}" y="{step.y + 13}" font-size="{SMALL_FONT_SIZE}" '
            f'fill="{INK}">{xml_text(step.text)}</text></g>'
        )
    parts.append("</g>")
    return "".join(parts)
