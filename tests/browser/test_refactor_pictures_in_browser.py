"""The diff pictures of five refactors (wrap, unwrap, a move to another parent, a deleted
block, a call inserted in one of three blocks) as headless Chromium draws them: each box's
group, as laid out with the browser's own fonts (getBBox), lies inside its enclosing box's
frame, and each header's text inside its own frame. Screenshots go to tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from refactor_pictures import PICTURED, pictured

pytestmark = pytest.mark.browser

# For every box: its frame, its header text's box, and the frame of the box it is drawn in
# (its nearest enclosing box group), all as the browser lays them out.
MEASURE = """
var frameOf = function (group) {
  var rect = Array.from(group.children).find(function (c) {
    return c.getAttribute('class') === 'fo-frame'; });
  var b = rect.getBBox(); return [b.x, b.y, b.width, b.height];
};
return Array.from(document.querySelectorAll('g.fo-box')).map(function (group) {
  var outer = group.parentElement.closest('g.fo-box');
  var header = Array.from(group.children).find(function (c) {
    return c.getAttribute('class') === 'fo-header'; }).getBBox();
  var whole = group.getBBox();
  return {path: group.getAttribute('data-path'), status: group.getAttribute('class'),
          frame: frameOf(group), whole: [whole.x, whole.y, whole.width, whole.height],
          header: [header.x, header.y, header.width, header.height],
          outer: outer ? frameOf(outer) : null,
          outerPath: outer ? outer.getAttribute('data-path') : null};
});
"""


def inside(inner: list[float], outer: list[float]) -> bool:
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and inner[0] + inner[2] <= outer[0] + outer[2]
        and inner[1] + inner[3] <= outer[1] + outer[3]
    )


def measured(browser: Any, name: str, folder: Path) -> list[dict[str, Any]]:
    path = folder / f"{name}.svg"
    path.write_text(pictured(name)[0], encoding="utf-8")
    browser.get(path.as_uri())
    boxes: list[dict[str, Any]] = browser.execute_script(MEASURE)
    browser.save_screenshot(str(folder / f"{name}.png"))
    print(f"screenshot: {folder / name}.png")
    return boxes


def the_box(boxes: list[dict[str, Any]], path: str, status: str) -> dict[str, Any]:
    (found,) = [box for box in boxes if box["path"] == path and f"fo-{status}" in box["status"]]
    return found


@pytest.mark.parametrize("name", list(PICTURED))
def test_every_box_and_its_header_lie_inside_the_box_around_them(
    browser: Any, tmp_path: Path, name: str
) -> None:
    boxes = measured(browser, name, tmp_path)

    assert len(boxes) > 5
    spilling = [
        (box["path"], box["outerPath"])
        for box in boxes
        if box["outer"] is not None and not inside(box["whole"], box["outer"])
    ]
    cut_headers = [box["path"] for box in boxes if not inside(box["header"], box["frame"])]
    assert spilling == []
    assert cut_headers == []


def test_a_wrapper_contains_the_old_stage_and_an_unwrap_is_its_mirror(
    browser: Any, tmp_path: Path
) -> None:
    wrap = measured(browser, "wrap", tmp_path)
    wrapper = the_box(wrap, "layer2", "inserted")
    for path, status in (("layer2.0", "same"), ("layer2.1", "inserted")):
        assert inside(the_box(wrap, path, status)["whole"], wrapper["frame"])

    unwrap = measured(browser, "unwrap", tmp_path)
    removed = the_box(unwrap, "layer2", "removed")
    stage, extra = the_box(unwrap, "layer2", "same"), the_box(unwrap, "layer2.1", "removed")
    assert inside(stage["whole"], removed["frame"])
    assert inside(extra["whole"], removed["frame"])
    assert not inside(extra["whole"], stage["frame"])
