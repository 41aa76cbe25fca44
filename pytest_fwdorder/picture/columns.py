"""A facet's section after the calls (backward's steps) placed as a column right of a
picture's calls. Pure, no torch and no SVG text (`svg.py` draws what this places)."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_fwdorder.picture.layout import (
    HEADER_HEIGHT,
    MARGIN,
    MAX_LABEL,
    Layout,
    shorten,
    text_width,
)

COLUMN_GAP = 30  # between the calls and a column, and between two columns
COLUMN_INDENT = 14  # per level of a step's indentation
STEP_HEIGHT = 18  # a step's node, as small as a call's operation nodes
STEP_GAP = 6


@dataclass(frozen=True, slots=True)
class ColumnStep:
    """One node of a column: a line of the facet's section, `fc: Linear <- f32[2,4]`."""

    x: int
    y: int
    width: int
    text: str


@dataclass(frozen=True, slots=True)
class Column:
    """A facet's section drawn right of the calls: its title, where the column starts (`x`)
    and its steps, in the order they ran."""

    title: str
    x: int
    steps: tuple[ColumnStep, ...]


def place_columns(layout: Layout, sections: list[tuple[str, list[str]]]) -> list[Column]:
    """A column per (title, lines) of the facets' sections, each right of the last, the
    layout widened and heightened to hold them."""
    return [_place_column(layout, title, lines) for title, lines in sections]


def _place_column(layout: Layout, title: str, lines: list[str]) -> Column:
    """One column right of what the layout holds so far, its lines indented as written."""
    left = layout.width + COLUMN_GAP - MARGIN
    y = MARGIN + HEADER_HEIGHT  # below the column's title
    widest = 0
    steps = []
    for line in lines:
        stripped = line.lstrip(" ")
        indent = (len(line) - len(stripped)) // 2 - 1
        text = shorten(stripped, MAX_LABEL)
        width = text_width(text, small=True) + 16
        x = left + max(indent, 0) * COLUMN_INDENT
        steps.append(ColumnStep(x, y, width, text))
        widest = max(widest, x + width - left)
        y += STEP_HEIGHT + STEP_GAP
    layout.width = left + max(widest, text_width(title)) + MARGIN
    layout.height = max(layout.height, y + MARGIN)
    return Column(title, left, tuple(steps))
