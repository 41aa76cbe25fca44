"""The SVG picture of a trace and of a diff: layout, rolling, edges, colours, escaping, and
where it shows (`fwdorder show/diff --svg`, the report, the notebook)."""

from __future__ import annotations

import hashlib
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

# The SE block the docs' diff picture inserts (docs/make_pictures.py), here in a small model.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
from make_pictures import SqueezeExcite
from picture_geometry import legend

from pytest_fwdorder import TensorSpec, trace_forward
from pytest_fwdorder.cli.main import EXIT_DIFFERENT, EXIT_ERROR, EXIT_SAME, main
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.golden.folding import fold_golden
from pytest_fwdorder.golden.parse import end_section, parse_golden
from pytest_fwdorder.picture.columns import COLUMN_INDENT, place_columns
from pytest_fwdorder.picture.layout import Layout, diff_calls, golden_calls, lay_out
from pytest_fwdorder.picture.svg import (
    STATUS_COLOURS,
    Picture,
    diff_picture,
    golden_picture,
    xml_text,
)
from pytest_fwdorder.report.html import render_report
from pytest_fwdorder.snapshot.kept_comparisons import Comparison

SVG = "{http://www.w3.org/2000/svg}"
HEADER = "# pytest-fwdorder trace (format 2)\n# model: Net\n"


class Layer(nn.Module):
    def __init__(self, size: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.up = nn.Linear(size, hidden)
        self.act = nn.ReLU()
        self.down = nn.Linear(hidden, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Stack(nn.Module):
    def __init__(self, layers: int = 32, odd: int | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            Layer(hidden=24 if index == odd else 16) for index in range(layers)
        )
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def stages(*, squeeze_excite: bool = False, kernel: int = 3) -> nn.Module:
    second: list[nn.Module] = [nn.Conv2d(4, 4, kernel, padding=kernel // 2), nn.ReLU()]
    if squeeze_excite:
        second.append(SqueezeExcite(4))
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()),
        nn.Sequential(*second),
        nn.Flatten(),
    )


def golden(model: nn.Module, *shape: int) -> str:
    return trace_forward(model.eval(), TensorSpec(shape)).render()


def boxes(svg: str) -> list[ElementTree.Element]:
    """Every box of a picture, in drawing order (a box before the boxes inside it)."""
    root = ElementTree.fromstring(svg)
    return [group for group in root.iter(f"{SVG}g") if "fo-box" in group.get("class", "")]


def box_of(svg: str, path: str) -> ElementTree.Element:
    (found,) = [box for box in boxes(svg) if box.get("data-path") == path]
    return found


def frame_fill(box: ElementTree.Element) -> str | None:
    frame = box.find(f"{SVG}rect[@class='fo-frame']")
    assert frame is not None
    return frame.get("fill")


def header_text(box: ElementTree.Element) -> str:
    header = box.find(f"{SVG}text[@class='fo-header']")
    assert header is not None
    return "".join(header.itertext())


def badges(box: ElementTree.Element) -> list[str]:
    return [
        "".join(badge.itertext())
        for badge in box.findall(f"{SVG}g")
        if "fo-badge" in badge.get("class", "")
    ]


def edges(svg: str) -> list[tuple[str, str]]:
    """Each edge's class (`fo-solid` / `fo-dashed`) and label, in order."""
    root = ElementTree.fromstring(svg)
    return [
        (group.get("class", "").split()[1], "".join(group.itertext()))
        for group in root.iter(f"{SVG}g")
        if "fo-edge" in group.get("class", "")
    ]


def layout_of(text: str, **options: object) -> Layout:
    return lay_out(golden_calls(parse_golden(text)[1]), **options)  # type: ignore[arg-type]


def test_the_same_golden_gives_the_same_bytes_twice() -> None:
    text = golden(Stack(4), 1, 8)

    assert golden_picture(text).svg == golden_picture(text).svg


def test_a_trace_and_its_golden_text_give_the_same_picture() -> None:
    trace = trace_forward(Stack(4).eval(), torch.randn(1, 8))

    assert trace.picture().svg == golden_picture(trace.render()).svg


def test_a_picture_is_well_formed_and_self_contained() -> None:
    svg = golden_picture(golden(Stack(3), 1, 8)).svg

    ElementTree.fromstring(svg)
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg" ')
    assert "<script" not in svg
    assert "href" not in svg
    assert "@import" not in svg
    assert svg.count("http") == 1  # the namespace, nothing fetched


PROBES = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "a&b",
    "it's",
    "]]><x>",
]


@pytest.mark.parametrize("probe", PROBES)
def test_a_hostile_module_name_and_class_reach_the_svg_escaped(probe: str) -> None:
    hostile_class = type(f"Evil{probe}", (nn.Identity,), {})
    model = nn.Sequential()
    model.add_module(probe, hostile_class())
    model.add_module("after", nn.Identity())

    text = golden(model, 1, 2)

    svg = golden_picture(text).svg

    ElementTree.fromstring(svg)
    assert probe not in svg
    # The golden's class is its first word: a class name with a space is cut there.
    assert box_of(svg, probe).get("data-type") == parse_golden(text)[1][1].module_type


@pytest.mark.parametrize("probe", PROBES)
def test_hostile_settings_and_shapes_in_golden_text_reach_the_svg_escaped(probe: str) -> None:
    text = (
        f"{HEADER}<root>: Net (f32[2], note={probe!r}) -> f32[2]\n"
        f"  | settings: text={probe}\n"
        f"  a: Odd{probe} (f32[2]) -> {probe}\n"
        f"  b: Linear (f32[2]) -> f32[2]\n"
    )

    svg = golden_picture(text).svg

    ElementTree.fromstring(svg)
    assert probe not in svg
    assert "<root>" not in svg


def test_characters_xml_cannot_hold_are_written_as_escapes() -> None:
    text = f"{HEADER}<root>: Net (f32[2]) -> f32[2]\n  a\x07b: Linear (f32[2]) -> f32[2]\n"

    svg = golden_picture(text).svg

    ElementTree.fromstring(svg)
    assert "\x07" not in svg
    assert xml_text("a\x07<") == "a\\x07&lt;"


def test_thirty_two_identical_layers_are_one_box_marked_x32() -> None:
    svg = golden_picture(golden(Stack(32), 1, 8)).svg

    rolled = [box for box in boxes(svg) if box.get("data-repeat")]
    assert [box.get("data-repeat") for box in rolled] == ["32"]
    assert header_text(rolled[0]) == "layers.0 … layers.31: Layer"
    assert badges(rolled[0]) == ["x32"]
    assert [box.get("data-path") for box in boxes(svg)] == [
        "<root>",
        "layers.0",
        "layers.0.up",
        "layers.0.act",
        "layers.0.down",
        "head",
    ]


def test_a_layer_that_differs_splits_the_run() -> None:
    layout = layout_of(golden(Stack(32, odd=5), 1, 8))

    top_level = [box for box in layout.boxes if box.level == 1]
    assert [(box.line.path, box.repeat) for box in top_level] == [
        ("layers.0", 5),
        ("layers.5", 1),
        ("layers.6", 26),
        ("head", 1),
    ]


def test_without_rolling_every_layer_has_its_box() -> None:
    layout = layout_of(golden(Stack(32), 1, 8), rolled=False)

    assert len([box for box in layout.boxes if box.line.module_type == "Layer"]) == 32
    assert all(box.repeat == 1 for box in layout.boxes)


class ReusesOneActivation(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.second = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.second(self.act(self.first(self.act(x)))))


def test_each_call_of_a_reused_module_is_its_own_box_with_its_number_and_one_colour() -> None:
    svg = golden_picture(golden(ReusesOneActivation(), 1, 4)).svg

    calls = [box for box in boxes(svg) if box.get("data-path") == "act"]
    assert [header_text(box) for box in calls] == ["act: ReLU #1", "act: ReLU #2", "act: ReLU #3"]
    assert all("fo-shared" in box.get("class", "") for box in calls)
    tag_fills = {
        rect.get("fill")
        for box in calls
        for badge in box.findall(f"{SVG}g[@class='fo-badge fo-badge-shared']")
        for rect in badge.findall(f"{SVG}rect")
    }
    assert len(tag_fills) == 1
    assert "fo-shared" not in box_of(svg, "first").get("class", "")


def test_a_child_box_lies_inside_its_parents_box() -> None:
    layout = layout_of(golden(Stack(2), 1, 8), rolled=False)

    for box in layout.boxes:
        if box.parent < 0:
            continue
        parent = layout.boxes[box.parent]
        assert parent.x < box.x
        assert box.x + box.width < parent.x + parent.width
        assert parent.y < box.y
        assert box.y + box.height < parent.y + parent.height
    parents = {box.line.path: layout.boxes[box.parent].line.path for box in layout.boxes[1:]}
    assert parents["layers.1.up"] == "layers.1"
    assert parents["layers.1"] == "<root>"


EDGES_GOLDEN = (
    f"{HEADER}<root>: Net (f32[2]) -> f32[5]\n"
    "  a: Linear (f32[2]) -> f32[3]\n"
    "  b: Linear (f32[3]) -> f32[4]\n"
    "  c: Linear (f32[9]) -> f32[5]\n"
)


def test_an_edge_is_solid_where_output_and_next_input_match_and_dashed_otherwise() -> None:
    svg = golden_picture(EDGES_GOLDEN).svg

    assert edges(svg) == [
        ("fo-solid", "f32[2]"),  # the root's input into its first call
        ("fo-solid", "f32[3]"),  # a -> b: a's output is b's input
        ("fo-dashed", "f32[9]"),  # b -> c: only the order is known
        ("fo-solid", "f32[5]"),  # c's output is the root's
    ]


def test_only_the_first_input_is_compared_for_an_edge() -> None:
    text = (
        f"{HEADER}<root>: Net (f32[2]) -> f32[3]\n"
        "  a: Linear (f32[2]) -> f32[3]\n"
        "  b: Attention (f32[3], mask=f32[9]) -> f32[3]\n"
    )

    assert edges(golden_picture(text).svg)[1] == ("fo-solid", "f32[3]")


def test_a_depth_limit_folds_deeper_calls_into_their_box() -> None:
    svg = golden_picture(golden(Stack(2), 1, 8), depth=1, rolled=False).svg

    assert [box.get("data-path") for box in boxes(svg)] == [
        "<root>",
        "layers.0",
        "layers.1",
        "head",
    ]
    assert badges(box_of(svg, "layers.0")) == ["+3 calls"]


def test_a_golden_folded_in_its_text_shows_the_folded_calls_as_a_badge() -> None:
    folded = fold_golden(golden(Stack(2), 1, 8), 1)

    svg = golden_picture(folded, rolled=False).svg

    assert badges(box_of(svg, "layers.1")) == ["+3 calls"]
    assert "folded" not in "".join(label for _, label in edges(svg))


def test_a_negative_depth_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot draw to depth -1"):
        golden_picture(EDGES_GOLDEN, depth=-1)


def test_a_picture_of_something_that_is_not_text_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match=r"call trace.picture\(\) on a trace"):
        golden_picture(Stack(2))  # type: ignore[arg-type]


OPERATIONS_GOLDEN = (
    f"{HEADER}<root>: Net (f32[2,4]) -> f32[2,4]\n"
    "  ~ relu(f32[2,4]) -> f32[2,4]\n"
    "  ~ add(f32[2,4], f32[2,4]) -> f32[2,4]\n"
    "  a: Linear (f32[2,4]) -> f32[2,4]\n"
    "backward:\n"
    "  <root>: Net <- f32[2,4]\n"
    "    a: Linear <- f32[2,4]\n"
)


def test_operations_are_small_nodes_only_when_asked() -> None:
    drawn = golden_picture(OPERATIONS_GOLDEN, under=("operations",)).svg
    plain = golden_picture(OPERATIONS_GOLDEN).svg

    root = ElementTree.fromstring(drawn)
    nodes = [group for group in root.iter(f"{SVG}g") if group.get("class") == "fo-line-under"]
    assert ["".join(node.itertext()) for node in nodes] == [
        "relu(f32[2,4]) -> f32[2,4]relu -> f32[2,4]",
        "add(f32[2,4], f32[2,4]) -> f32[2,4]add -> f32[2,4]",
    ]
    assert "fo-line-under" not in plain


def test_the_backward_steps_are_a_second_column_only_when_asked() -> None:
    drawn = golden_picture(OPERATIONS_GOLDEN, sections=("backward",)).svg

    root = ElementTree.fromstring(drawn)
    steps = [group for group in root.iter(f"{SVG}g") if group.get("class") == "fo-backward-step"]
    assert [step.findtext(f"{SVG}title") for step in steps] == [
        "<root>: Net <- f32[2,4]",
        "a: Linear <- f32[2,4]",
    ]
    assert "fo-backward" not in golden_picture(OPERATIONS_GOLDEN).svg


def test_a_section_the_golden_lacks_draws_no_column() -> None:
    drawn = golden_picture(OPERATIONS_GOLDEN, sections=("backward", "gradients")).svg

    assert drawn.count('class="fo-backward"') == 1
    assert "fo-gradients" not in drawn


def test_sections_given_as_one_string_is_a_type_error_saying_what_to_write() -> None:
    with pytest.raises(TypeError, match=r"write sections=\('backward',\)"):
        golden_picture(OPERATIONS_GOLDEN, sections="backward")


def test_svg_backward_draws_the_backward_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = tmp_path / "net.fwdorder.txt"
    golden.write_text(OPERATIONS_GOLDEN, encoding="utf-8")

    status = main(["show", str(golden), "--svg", "-", "--svg-backward"])

    assert status == EXIT_SAME
    expected = golden_picture(OPERATIONS_GOLDEN, sections=("backward",)).svg
    assert capsys.readouterr().out == expected
    assert expected != golden_picture(OPERATIONS_GOLDEN).svg


class Checkpointed(nn.Module):
    """A block run under activation checkpointing: its recomputed steps nest in backward."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=False))


def _backward_models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {
        "nested": nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), nn.Linear(8, 2)),
        "checkpointed": Checkpointed(),
    }


# The SHA-256 of each picture as 8c09104 drew it, before columns were placed for any facet's
# section: the backward column must stay byte for byte what it was.
_BACKWARD_PICTURES = {
    "nested": ("a72ec64fa0bd1ce59c548125f4c82c4745f991a4b5309437d98bf7076aa7a474", 5077),
    "checkpointed": ("cee031a60b1004e306e1de93bcfca34b495cbff12c31acbfb71f89cba3f98f68", 5889),
}


@pytest.mark.parametrize("name", sorted(_BACKWARD_PICTURES))
def test_the_backward_column_of_a_traced_model_is_drawn_as_before(name: str) -> None:
    model = _backward_models()[name]
    trace = trace_forward(model, torch.randn(3, 4), backward=True)

    svg = trace.picture(sections=("backward",)).svg

    assert (hashlib.sha256(svg.encode()).hexdigest(), len(svg)) == _BACKWARD_PICTURES[name]
    assert svg != trace.picture().svg  # the oracle can fail: without the column it differs


# A plugin's facet's section after the calls, its lines at the left edge and nested below.
TOY_SECTION_GOLDEN = (
    f"{HEADER}<root>: Net (f32[2,4]) -> f32[2,4]\n"
    "  a: Linear (f32[2,4]) -> f32[2,4]\n"
    "weight signs:\n"
    "a: Linear\n"
    "  weight: -\n"
    "  bias: +\n"
)


def _column_steps(svg: str, title: str) -> list[tuple[str, int]]:
    """Each step of a column: its text and its indentation in pixels, from the SVG."""
    root = ElementTree.fromstring(svg)
    (column,) = [group for group in root.iter(f"{SVG}g") if group.get("class") == f"fo-{title}"]
    left = int(column.find(f"{SVG}text").get("x"))  # the column's title starts it
    return [
        (step.findtext(f"{SVG}title"), int(step.find(f"{SVG}rect").get("x")) - left)
        for step in column.iter(f"{SVG}g")
        if step.get("class") == f"fo-{title}-step"
    ]


def _indentation_levels(golden: str, title: str) -> list[int]:
    """The oracle: each line of a section's indentation, in levels of two spaces, from the
    section's least indented line."""
    lines = golden.splitlines()
    section = lines[lines.index(f"{title}:") + 1 :]
    spaces = [len(line) - len(line.lstrip(" ")) for line in section]
    return [(count - min(spaces)) // 2 for count in spaces]


def test_a_plugin_facets_section_is_a_column_indented_as_it_is_written() -> None:
    drawn = golden_picture(TOY_SECTION_GOLDEN, sections=("weight signs",)).svg

    steps = _column_steps(drawn, "weight-signs")
    levels = _indentation_levels(TOY_SECTION_GOLDEN, "weight signs")

    assert levels == [0, 1, 1]
    assert [text for text, _ in steps] == ["a: Linear", "weight: -", "bias: +"]
    # Before, a line at the left edge and one indented once were both drawn at the left.
    assert [indent for _, indent in steps] == [level * COLUMN_INDENT for level in levels]
    assert _indentation_levels(OPERATIONS_GOLDEN, "backward") == [0, 1]
    backward = _column_steps(
        golden_picture(OPERATIONS_GOLDEN, sections=("backward",)).svg, "backward"
    )
    assert [indent for _, indent in backward] == [0, COLUMN_INDENT]


def test_placing_columns_leaves_the_layout_as_it_was_and_returns_a_bigger_one() -> None:
    header, lines = parse_golden(TOY_SECTION_GOLDEN)
    layout = lay_out(golden_calls(lines))
    width, height = layout.width, layout.height

    placed = place_columns(layout, [("weight signs", end_section(header, "weight signs") or [])])

    assert (layout.width, layout.height) == (width, height)
    assert placed.layout.width > width
    assert placed.layout.boxes == layout.boxes
    assert [column.title for column in placed.columns] == ["weight signs"]


def test_svg_backward_without_svg_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = tmp_path / "net.fwdorder.txt"
    golden.write_text(OPERATIONS_GOLDEN, encoding="utf-8")

    status = main(["show", str(golden), "--svg-backward"])

    assert status == EXIT_ERROR
    assert "--svg-backward changes the picture: add --svg out.svg" in capsys.readouterr().err


def test_an_inserted_block_is_green_in_the_diff_picture() -> None:
    difference = diff_golden(
        golden(stages(), 1, 3, 4, 4), golden(stages(squeeze_excite=True), 1, 3, 4, 4)
    )

    svg = diff_picture(difference).svg

    inserted = [box for box in boxes(svg) if "fo-inserted" in box.get("class", "")]
    assert [box.get("data-path") for box in inserted] == ["1.2", "1.2.pool", "1.2.fc", "1.2.gate"]
    assert {frame_fill(box) for box in inserted} == {STATUS_COLOURS["inserted"][0]}
    assert "4 calls inserted" in svg


def test_a_removed_block_is_red_and_struck_where_it_was() -> None:
    difference = diff_golden(
        golden(stages(squeeze_excite=True), 1, 3, 4, 4), golden(stages(), 1, 3, 4, 4)
    )

    svg = diff_picture(difference).svg

    removed = [box for box in boxes(svg) if "fo-removed" in box.get("class", "")]
    assert [box.get("data-path") for box in removed] == ["1.2", "1.2.pool", "1.2.fc", "1.2.gate"]
    assert {frame_fill(box) for box in removed} == {STATUS_COLOURS["removed"][0]}
    header = removed[0].find(f"{SVG}text[@class='fo-header']")
    assert header is not None
    assert header.get("text-decoration") == "line-through"
    order = [box.get("data-path") for box in boxes(svg)]
    assert order.index("1.1") < order.index("1.2") < order.index("2")


def test_changed_settings_are_yellow_and_say_what_changed() -> None:
    difference = diff_golden(golden(stages(), 1, 3, 4, 4), golden(stages(kernel=5), 1, 3, 4, 4))

    svg = diff_picture(difference).svg

    changed = [box for box in boxes(svg) if "fo-changed" in box.get("class", "")]
    assert [box.get("data-path") for box in changed] == ["1.0"]
    assert frame_fill(changed[0]) == STATUS_COLOURS["changed"][0]
    assert "settings changed" in (changed[0].findtext(f"{SVG}title") or "")


def test_unchanged_blocks_of_a_diff_are_folded_and_can_be_drawn_whole() -> None:
    difference = diff_golden(
        golden(stages(), 1, 3, 4, 4), golden(stages(squeeze_excite=True), 1, 3, 4, 4)
    )

    folded = diff_picture(difference).svg
    whole = diff_picture(difference, fold_unchanged=False).svg

    assert badges(box_of(folded, "0")) == ["+2 calls"]
    assert "0.1" not in [box.get("data-path") for box in boxes(folded)]
    assert "0.1" in [box.get("data-path") for box in boxes(whole)]


def test_a_diff_of_two_traces_draws_as_the_diff_of_their_goldens() -> None:
    old = trace_forward(stages().eval(), torch.randn(1, 3, 4, 4))
    new = trace_forward(stages(squeeze_excite=True).eval(), torch.randn(1, 3, 4, 4))

    picture = diff_picture(old.diff(new))

    assert isinstance(picture, Picture)
    assert picture._repr_svg_() == picture.svg
    assert picture.svg == diff_picture(diff_golden(old.render(), new.render())).svg


def test_a_picture_saves_to_a_file(tmp_path: Path) -> None:
    picture = trace_forward(Stack(2).eval(), torch.randn(1, 8)).picture()

    written = picture.save(tmp_path / "stack.svg")

    assert written.read_text(encoding="utf-8") == picture.svg
    assert repr(picture).startswith("<Picture: ")


@pytest.fixture
def golden_files(tmp_path: Path) -> tuple[Path, Path]:
    old = tmp_path / "old.fwdorder.txt"
    new = tmp_path / "new.fwdorder.txt"
    old.write_text(golden(stages(), 1, 3, 4, 4), encoding="utf-8")
    new.write_text(golden(stages(squeeze_excite=True), 1, 3, 4, 4), encoding="utf-8")
    return old, new


def test_show_svg_writes_the_picture_and_says_where(
    golden_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, _ = golden_files
    out = tmp_path / "out.svg"

    status = main(["show", str(old), "--svg", str(out)])

    assert status == EXIT_SAME
    assert out.read_text(encoding="utf-8") == golden_picture(old.read_text(encoding="utf-8")).svg
    assert capsys.readouterr().out == f"fwdorder: wrote the picture of {old} to {out}\n"


def test_show_svg_to_standard_output_applies_depth_and_no_roll(
    golden_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, _ = golden_files

    status = main(["show", str(old), "--svg", "-", "--depth", "1", "--no-roll"])

    text = old.read_text(encoding="utf-8")
    assert status == EXIT_SAME
    assert capsys.readouterr().out == golden_picture(text, depth=1, rolled=False).svg


def test_diff_svg_writes_the_diff_picture_and_exits_1(
    golden_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = golden_files
    out = tmp_path / "diff.svg"

    status = main(["diff", str(old), str(new), "--svg", str(out)])

    assert status == EXIT_DIFFERENT
    assert "fo-inserted" in out.read_text(encoding="utf-8")
    assert capsys.readouterr().out.startswith("fwdorder: wrote the picture of the diff (")


def test_a_picture_option_without_svg_is_a_usage_error(
    golden_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, _ = golden_files

    status = main(["show", str(old), "--no-roll"])

    assert status == EXIT_ERROR
    assert "--no-roll changes the picture: add --svg out.svg" in capsys.readouterr().err


def test_a_picture_that_cannot_be_written_is_a_one_line_error(
    golden_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, _ = golden_files

    status = main(["show", str(old), "--svg", str(tmp_path)])

    assert status == EXIT_ERROR
    assert "cannot write the picture to" in capsys.readouterr().err


def report_entry(status: str, new_text: str, old_text: str | None) -> str:
    comparison = Comparison(
        test_id="tests/test_model.py::test_a",
        snapshot_name="test_a",
        golden_path="tests/__snapshots__/test_model/test_a.fwdorder.txt",
        status=status,  # type: ignore[arg-type]
        old_text=old_text,
        new_text=new_text,
    )
    return render_report([comparison])


def test_the_report_shows_the_diff_picture_of_a_failing_golden() -> None:
    old, new = golden(stages(), 1, 3, 4, 4), golden(stages(squeeze_excite=True), 1, 3, 4, 4)

    page = report_entry("failed", new, old)

    assert page.count('<details class="fo-picture">') == 1
    assert diff_picture(diff_golden(old, new)).inline_svg in page
    assert "http://www.w3.org" not in page  # inline SVG needs no namespace


@pytest.mark.parametrize("status", ["passed", "updated", "created"])
def test_the_report_draws_no_picture_for_a_golden_that_did_not_fail(status: str) -> None:
    old, new = golden(stages(), 1, 3, 4, 4), golden(stages(squeeze_excite=True), 1, 3, 4, 4)

    page = report_entry(status, new if status != "passed" else old, old)

    assert "fo-picture" not in page.split("</style>", 1)[1]
    assert "<svg" not in page


def test_in_a_diff_only_unchanged_runs_roll() -> None:
    difference = diff_golden(golden(Stack(5), 1, 8), golden(Stack(5, odd=2), 1, 8))

    layout = lay_out(diff_calls(difference), fold_unchanged=False)

    top_level = [box for box in layout.boxes if box.level == 1]
    assert [(box.line.path, box.repeat, box.status) for box in top_level] == [
        ("layers.0", 2, "same"),
        ("layers.2", 1, "same"),
        ("layers.3", 2, "same"),
        ("head", 1, "same"),
    ]
    changed = [box.line.path for box in layout.boxes if box.status == "changed"]
    assert changed == ["layers.2.up", "layers.2.act", "layers.2.down"]


MOVED_OLD = f"{HEADER}<root>: Net (f32[2]) -> f32[2]\n  a: Linear (f32[2]) -> f32[2]\n  b: ReLU (f32[2]) -> f32[2]\n  c: Tanh (f32[2]) -> f32[2]\n"
MOVED_NEW = f"{HEADER}<root>: Net (f32[2]) -> f32[2]\n  b: ReLU (f32[2]) -> f32[2]\n  c: Tanh (f32[2]) -> f32[2]\n  a: Linear (f32[2]) -> f32[2]\n"


def test_a_moved_call_is_blue_where_it_was_and_where_it_is() -> None:
    svg = diff_picture(diff_golden(MOVED_OLD, MOVED_NEW)).svg

    order = [(box.get("data-path"), box.get("class", "").split()[1]) for box in boxes(svg)]
    assert order == [
        ("<root>", "fo-same"),
        ("a", "fo-moved"),
        ("b", "fo-same"),
        ("c", "fo-same"),
        ("a", "fo-moved"),
    ]
    moved = [box for box in boxes(svg) if "fo-moved" in box.get("class", "")]
    assert {frame_fill(box) for box in moved} == {STATUS_COLOURS["moved"][0]}


def test_a_wrap_is_drawn_as_a_new_box_around_the_old_calls_left_unchanged() -> None:
    from pytest_fwdorder.picture.layout import diff_calls

    torch.manual_seed(0)
    layers = (nn.Linear(2, 2), nn.ReLU())
    before = trace_forward(nn.Sequential(*layers), torch.randn(1, 2))
    after = trace_forward(nn.Sequential(nn.Sequential(*layers), nn.Identity()), torch.randn(1, 2))

    drawn = [
        (call.line.depth, call.line.path, call.status) for call in diff_calls(before.diff(after))
    ]

    assert drawn == [
        (0, "<root>", "inserted"),
        (1, "0", "same"),
        (2, "0.0", "same"),
        (2, "0.1", "same"),
        (1, "1", "inserted"),
    ]


LEGEND_OLD = (
    f"{HEADER}<root>: Net (f32[2]) -> f32[2]\n  a: Linear (f32[2]) -> f32[2]\n"
    "  b: ReLU (f32[2]) -> f32[2]\n  e: Sigmoid (f32[2]) -> f32[2]\n  f: Tanh (f32[2]) -> f32[2]\n"
)
# a moved, b unchanged, e changed, f removed, g inserted.
LEGEND_NEW = (
    f"{HEADER}<root>: Net (f32[2]) -> f32[2]\n  b: ReLU (f32[2]) -> f32[2]\n"
    "  a: Linear (f32[2]) -> f32[2]\n  e: Sigmoid (f32[2]) -> f32[3]\n  g: GELU (f32[2]) -> f32[2]\n"
)


def test_the_diff_legend_shows_each_status_in_the_colours_of_its_boxes() -> None:
    svg = diff_picture(diff_golden(LEGEND_OLD, LEGEND_NEW)).svg

    # The oracle: the colours each status's boxes are drawn in, read from the boxes.
    drawn = {}
    for box in boxes(svg):
        if "fo-container" not in box.get("class", ""):
            frame = box.find(f"{SVG}rect[@class='fo-frame']")
            assert frame is not None
            status = box.get("class", "").split()[1].removeprefix("fo-")
            drawn["unchanged" if status == "same" else status] = (
                frame.get("fill"),
                frame.get("stroke"),
            )

    assert legend(svg) == [
        (*drawn[name], name) for name in ("inserted", "removed", "changed", "moved", "unchanged")
    ]


def test_svg_operations_draws_each_calls_operations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = tmp_path / "net.fwdorder.txt"
    golden.write_text(OPERATIONS_GOLDEN, encoding="utf-8")

    status = main(["show", str(golden), "--svg", "-", "--svg-operations"])

    assert status == EXIT_SAME
    expected = golden_picture(OPERATIONS_GOLDEN, under=("operations",)).svg
    assert capsys.readouterr().out == expected
    assert expected != golden_picture(OPERATIONS_GOLDEN).svg


def test_svg_operations_without_svg_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = tmp_path / "net.fwdorder.txt"
    golden.write_text(OPERATIONS_GOLDEN, encoding="utf-8")

    status = main(["show", str(golden), "--svg-operations"])

    assert status == EXIT_ERROR
    assert "--svg-operations changes the picture: add --svg out.svg" in capsys.readouterr().err
