"""The diff pictures of five everyday refactors from the corpus (wrap, unwrap, a move to
another parent, a deleted block, a call inserted in one of three blocks): their boxes
follow the nesting of the models, read from the SVG's rectangles and checked against the
models' own module trees (`named_modules`), not against the layout code."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

import pytest
from picture_geometry import SVG, Frame, enclosing, frame, frames, overlapping_siblings
from refactor_corpus import REFACTORS
from refactor_pictures import CHECKED, pictured

from pytest_fwdorder import diff_picture, structure_diff, trace_forward


def drawn_in(found: list[Frame], path: str, *, old: bool) -> Frame | None:
    """The box a call of `path` is drawn as: in the old model a removed box first, in the new
    one a box that is not removed."""
    matches = [f for f in found if f.path == path]
    if old:
        removed = [f for f in matches if f.status == "removed"]
        matches = removed or matches
    else:
        matches = [f for f in matches if f.status != "removed"]
    return matches[0] if len(matches) == 1 else None


@pytest.mark.parametrize("name", list(CHECKED))
def test_every_box_lies_inside_the_box_of_its_parent_module(name: str) -> None:
    svg, old_parents, new_parents = pictured(name)
    found = frames(svg)

    outside = []
    for box in found[1:]:
        old = box.status == "removed" or box.path not in new_parents
        parents = old_parents if old else new_parents
        parent_path = parents[box.path]
        parent = drawn_in(found, parent_path, old=old)
        while parent is None and parent_path != "<root>":
            parent_path = parents[parent_path]
            parent = drawn_in(found, parent_path, old=old)
        if parent is None or not parent.contains(box):
            outside.append((box.path, box.status, parent_path))

    assert outside == []
    assert overlapping_siblings(found) == []


def test_the_oracle_sees_a_box_drawn_outside_its_parent() -> None:
    svg, _, _ = pictured("insert")
    moved_out = svg.replace('data-path="blocks.1.mlp.3"', 'data-path="blocks.2.norm1"', 1)

    found = frames(moved_out)
    box = frame(found, "blocks.2.norm1")

    assert not frame(found, "blocks.2").contains(box)
    assert enclosing(found, box) == frame(found, "blocks.1.mlp")


def test_a_wrap_is_a_new_box_around_the_old_stage_and_the_call_after_it() -> None:
    found = frames(pictured("wrap")[0])

    wrapper = frame(found, "layer2", "inserted")
    stage, extra = frame(found, "layer2.0", "same"), frame(found, "layer2.1", "inserted")

    assert enclosing(found, stage) == wrapper
    assert enclosing(found, extra) == wrapper
    assert stage.y + stage.height < extra.y


def test_an_unwrap_is_a_removed_box_around_the_stage_and_the_call_it_held() -> None:
    found = frames(pictured("unwrap")[0])

    wrapper = frame(found, "layer2", "removed")
    stage, extra = frame(found, "layer2", "same"), frame(found, "layer2.1", "removed")

    assert enclosing(found, stage) == wrapper
    assert enclosing(found, extra) == wrapper
    assert not stage.contains(extra)
    assert stage.y + stage.height < extra.y


def test_a_moved_norm_is_drawn_in_its_new_parent_and_where_it_was() -> None:
    found = frames(pictured("move")[0])

    assert enclosing(found, frame(found, "dec.0")) == frame(found, "dec")
    assert enclosing(found, frame(found, "enc.2")) == frame(found, "enc")
    assert not frame(found, "enc").contains(frame(found, "dec.0"))


def test_a_deleted_block_is_drawn_whole_where_it_was() -> None:
    found = frames(pictured("delete")[0])

    block = frame(found, "features.11", "removed")
    before, after = frame(found, "features.10"), frame(found, "features.11", "same")

    assert enclosing(found, block) == frame(found, "features")
    assert before.y + before.height < block.y < block.y + block.height < after.y
    inside = [f for f in found if f.path.startswith("features.11.block")]
    assert len(inside) == 18
    assert all(block.contains(f) and f.status == "removed" for f in inside)


def test_an_inserted_call_is_inside_the_one_block_it_was_added_to() -> None:
    found = frames(pictured("insert")[0])

    dropout = frame(found, "blocks.1.mlp.3", "inserted")

    assert enclosing(found, dropout) == frame(found, "blocks.1.mlp")
    assert frame(found, "blocks.1").contains(dropout)
    assert not frame(found, "blocks.0").contains(dropout)
    assert not frame(found, "blocks.2").contains(dropout)
    linear = frame(found, "blocks.1.mlp.2")
    assert linear.y + linear.height < dropout.y


def test_calls_grouped_into_a_new_block_are_drawn_inside_it_and_not_as_moved() -> None:
    svg, _, _ = pictured("group")
    found = frames(svg)

    block = frame(found, "2", "inserted")

    assert [f.path for f in found if enclosing(found, f) == block] == ["2.0", "2.1"]
    # The summary says one wrap and one rename, nothing moved: no box may say otherwise.
    summary = [text.text or "" for text in ElementTree.fromstring(svg).iter(f"{SVG}text")]
    assert "wraps the old 2, 3" in " ".join(summary)
    assert not any("moved" in line for line in summary if "calls" in line or "->" in line)
    assert [f.path for f in found if f.status == "moved"] == []


def test_a_subtree_renamed_by_a_deleted_block_is_drawn_unchanged_as_the_summary_says() -> None:
    svg, old_parents, _ = pictured("delete")
    found = frames(svg)

    # 19 calls removed (the block and its 18 nested calls); the stage after it renamed
    # `features.12 -> features.11` with its 3 calls, which the summary states once.
    removed = [f.path for f in found if f.status == "removed"]
    assert len(removed) == 19
    assert all(path == "features.11" or path.startswith("features.11.") for path in removed)
    assert len([path for path in old_parents if path.startswith("features.11.")]) == 18
    assert [(f.path, f.status) for f in found if f.status not in ("same", "removed")] == []


def box_group(svg: str, path: str, position: int) -> ElementTree.Element:
    """The `position`-th box group (document order) whose data-path is `path`."""
    groups = [
        group
        for group in ElementTree.fromstring(svg).iter(f"{SVG}g")
        if "fo-box" in group.get("class", "").split() and group.get("data-path") == path
    ]
    return groups[position]


def header_of(group: ElementTree.Element) -> str:
    """A box's first line as it reads in the picture: its header's text, tspans joined."""
    header = next(text for text in group.findall(f"{SVG}text") if text.get("class") == "fo-header")
    return "".join(header.itertext())


def summary_lines(svg: str) -> list[str]:
    return [
        "".join(text.itertext())
        for text in ElementTree.fromstring(svg).iter(f"{SVG}text")
        if text.get("class") == "fo-summary"
    ]


def test_a_moved_norm_says_at_each_of_its_places_where_it_went_as_the_summary_does() -> None:
    svg = pictured("move")[0]
    # The summary's own sentence names both places: `enc.2 (LayerNorm) moved to dec.0`.
    sentence = next(line for line in summary_lines(svg) if " moved to " in line)
    match = re.fullmatch(r"(\S+) \((\w+)\) moved to (\S+)", sentence)
    assert match is not None, sentence
    old_path, module_type, new_path = match.groups()

    old_place, new_place = box_group(svg, old_path, 0), box_group(svg, new_path, 0)

    assert header_of(old_place) == f"2: {module_type} moved to {new_path}"
    assert header_of(new_place) == f"0: {module_type} moved from {old_path}"


def test_the_place_a_module_moved_away_from_is_drawn_faded_and_dashed() -> None:
    svg = pictured("move")[0]

    old_place, new_place = box_group(svg, "enc.2", 0), box_group(svg, "dec.0", 0)

    def frame_rect(group: ElementTree.Element) -> ElementTree.Element:
        return next(r for r in group.findall(f"{SVG}rect") if r.get("class") == "fo-frame")

    assert "fo-old-place" in old_place.get("class", "").split()
    assert frame_rect(old_place).get("stroke-dasharray")
    assert float(old_place.get("opacity", "1")) < 1
    assert "fo-old-place" not in new_place.get("class", "").split()
    assert frame_rect(new_place).get("stroke-dasharray") is None
    assert new_place.get("opacity") is None


def test_a_deleted_look_alike_block_is_labelled_as_the_summary_names_it() -> None:
    svg = pictured("delete")[0]
    # The summary cannot tell the look-alikes apart: `one of features.10, features.11 (...`.
    removal = next(line for line in summary_lines(svg) if "removed: one of " in line)
    named = re.search(r"removed: (one of [^(]+) \((\w+) look-alikes", removal)
    assert named is not None, removal
    words, module_type = named.group(1), named.group(2)

    block = box_group(svg, "features.11", 0)

    assert block.get("class", "").split()[1] == "fo-removed"
    assert header_of(block) == f"{words}: {module_type}"
    tooltip = block.findtext(f"{SVG}title") or ""
    assert tooltip.startswith(f"{words}: {module_type} ")
    assert not tooltip.startswith("features.11")


@pytest.mark.parametrize("name", list(CHECKED))
def test_every_other_box_tooltip_starts_with_the_path_of_its_call(name: str) -> None:
    svg = pictured(name)[0]

    wrong = []
    for group in ElementTree.fromstring(svg).iter(f"{SVG}g"):
        if "fo-box" not in group.get("class", "").split():
            continue
        tooltip = group.findtext(f"{SVG}title") or ""
        if not tooltip.startswith(("one of ", f"{group.get('data-path')}: ")):
            wrong.append(tooltip.splitlines()[0])

    assert wrong == []


def name_free_picture(name: str) -> str:
    """The picture of one pictured refactor compared without paths (`structure_diff`)."""
    refactor = next(refactor for refactor in REFACTORS if refactor.name == CHECKED[name])
    before = trace_forward(refactor.before(), *refactor.example())
    after = trace_forward(refactor.after(), *(refactor.example_after or refactor.example)())
    return diff_picture(structure_diff(before, after, ignore=("paths",))).svg


def boxes_with(svg: str, css_class: str) -> list[ElementTree.Element]:
    return [
        group
        for group in ElementTree.fromstring(svg).iter(f"{SVG}g")
        if {"fo-box", css_class} <= set(group.get("class", "").split())
    ]


def test_a_name_free_picture_names_a_removed_look_alike_as_its_summary_does() -> None:
    svg = name_free_picture("delete")

    removal = next(line for line in summary_lines(svg) if "removed: one of " in line)
    assert "19 calls removed: one of features.10, features.11 (" in removal
    removed = boxes_with(svg, "fo-removed")[0]

    assert header_of(removed) == "one of features.10, features.11: InvertedResidual"


def test_a_name_free_picture_says_where_a_module_moved_as_its_summary_does() -> None:
    svg = name_free_picture("move")

    assert "enc.2 (LayerNorm) moved to dec.0" in summary_lines(svg)
    old_place = boxes_with(svg, "fo-old-place")
    new_place = [
        box for box in boxes_with(svg, "fo-moved") if "fo-old-place" not in box.get("class", "")
    ]

    assert [header_of(box) for box in old_place] == ["LayerNorm moved to dec.0"]
    assert [header_of(box) for box in new_place] == ["LayerNorm moved from enc.2"]
