"""The boxes of a picture's SVG read back as rectangles, for tests that check its geometry
(containment, order, non-overlap) without the layout code: an independent reading."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

SVG = "{http://www.w3.org/2000/svg}"


@dataclass(frozen=True)
class Frame:
    """One box of the picture: its module path, diff status and rectangle."""

    path: str
    status: str  # `same`, `inserted`, `removed`, `changed` or `moved`
    x: float
    y: float
    width: float
    height: float

    def contains(self, other: Frame) -> bool:
        """Whether `other` lies wholly inside this rectangle (and is not this one)."""
        return (
            other is not self
            and self.x <= other.x
            and self.y <= other.y
            and other.x + other.width <= self.x + self.width
            and other.y + other.height <= self.y + self.height
        )

    def overlaps(self, other: Frame) -> bool:
        return not (
            self.x + self.width <= other.x
            or other.x + other.width <= self.x
            or self.y + self.height <= other.y
            or other.y + other.height <= self.y
        )


def frames(svg: str) -> list[Frame]:
    """Every box's frame, in document order."""
    found = []
    for group in ElementTree.fromstring(svg).iter(f"{SVG}g"):
        classes = group.get("class", "").split()
        if "fo-box" not in classes:
            continue
        rect = next(r for r in group.findall(f"{SVG}rect") if r.get("class") == "fo-frame")
        found.append(
            Frame(
                group.get("data-path", ""),
                classes[1].removeprefix("fo-"),
                *(float(rect.get(name, "0")) for name in ("x", "y", "width", "height")),
            )
        )
    return found


def frame(found: list[Frame], path: str, status: str | None = None) -> Frame:
    """The one frame of `path` (with `status`, when given)."""
    matches = [f for f in found if f.path == path and status in (None, f.status)]
    assert len(matches) == 1, (path, status, matches)
    return matches[0]


def enclosing(found: list[Frame], inner: Frame) -> Frame | None:
    """The smallest frame that contains `inner`: the box it is drawn in."""
    around = [f for f in found if f.contains(inner)]
    return min(around, key=lambda f: f.width * f.height, default=None)


def overlapping_siblings(found: list[Frame]) -> list[tuple[str, str]]:
    """Pairs of boxes drawn in the same box that overlap (there should be none)."""
    parents = {id(f): enclosing(found, f) for f in found}
    return [
        (first.path, second.path)
        for index, first in enumerate(found)
        for second in found[index + 1 :]
        if parents[id(first)] is parents[id(second)] and first.overlaps(second)
    ]


def legend(svg: str) -> list[tuple[str | None, str | None, str]]:
    """A picture's legend, left to right: each swatch's fill and border, and its name."""
    root = ElementTree.fromstring(svg)
    (group,) = [group for group in root.iter(f"{SVG}g") if group.get("class") == "fo-legend"]
    swatches, names = group.findall(f"{SVG}rect"), group.findall(f"{SVG}text")
    assert len(swatches) == len(names)
    return [
        (swatch.get("fill"), swatch.get("stroke"), "".join(name.itertext()))
        for swatch, name in zip(swatches, names, strict=True)
    ]
