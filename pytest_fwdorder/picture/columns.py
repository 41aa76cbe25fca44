"""The facets' sections after the calls (`backward:`'s steps, a plugin's facet's) placed as
columns right of a picture's calls. Pure, no torch and no SVG text (`svg.py` draws what this
places)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

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


class PlacedColumns(NamedTuple):
    """The columns placed, and the layout made wide and high enough to hold them too."""

    layout: Layout
    columns: tuple[Column, ...]


def place_columns(layout: Layout, sections: list[tuple[str, list[str]]]) -> PlacedColumns:
    """A column per (title, lines) of the facets' sections, each right of the last, and a
    new layout widened and heightened to hold them (`layout` is left as it was)."""
    width, height = layout.width, layout.height
    columns = []
    for title, lines in sections:
        column, right, bottom = _place_column(width, title, lines)
        columns.append(column)
        width, height = right, max(height, bottom)
    return PlacedColumns(replace(layout, width=width, height=height), tuple(columns))


def _place_column(left_of: int, title: str, lines: list[str]) -> tuple[Column, int, int]:
    """One column right of `left_of` (the width drawn so far), its lines indented as written
    from the least indented one; with the width and height that hold it."""
    left = left_of + COLUMN_GAP - MARGIN
    y = MARGIN + HEADER_HEIGHT  # below the column's title
    widest = 0
    steps = []
    least = min((_indentation(line) for line in lines), default=0)
    for line in lines:
        text = shorten(line.lstrip(" "), MAX_LABEL)
        width = text_width(text, small=True) + 16
        x = left + (_indentation(line) - least) // 2 * COLUMN_INDENT
        steps.append(ColumnStep(x, y, width, text))
        widest = max(widest, x + width - left)
        y += STEP_HEIGHT + STEP_GAP
    right = left + max(widest, text_width(title)) + MARGIN
    return Column(title, left, tuple(steps)), right, y + MARGIN


def _indentation(line: str) -> int:
    """The spaces a section's line starts with (two per level)."""
    return len(line) - len(line.lstrip(" "))
