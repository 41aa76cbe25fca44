"""Each golden line kind's parser reads back what its writer writes."""

from __future__ import annotations

from pytest_fwdorder.calls.records import TensorFact
from pytest_fwdorder.golden.format import (
    REUSED_SECTION,
    header_sections,
    make_line,
    render_section,
    render_tensor_fact,
    tensor_fact_flags,
    tensor_fact_items,
    tensor_fact_shape,
)
from pytest_fwdorder.golden.parse import call_line_parts, parse_call_line


def test_a_header_section_reads_back_as_its_items_with_the_cut_kept() -> None:
    items = [f"block.{index} x2" for index in range(201)]

    sections = header_sections(render_section(REUSED_SECTION, items))

    assert sections == {REUSED_SECTION: [*items[:200], "... 1 more"]}


def test_tensor_facts_read_back_by_name_with_their_flags_and_ties() -> None:
    weight = TensorFact(
        name="weight",
        kind="parameter",
        dtype="f32",
        shape=(8, 3),
        requires_grad=False,
        persistent=True,
    )
    bias = TensorFact(
        name="bias", kind="buffer", dtype="f32", shape=(8,), requires_grad=False, persistent=False
    )
    text = ", ".join(
        [render_tensor_fact(weight, ("a.weight", "b.weight")), render_tensor_fact(bias)]
    )

    items = tensor_fact_items(text)

    assert items == {
        "weight": "f32[8,3] frozen tied to a.weight, b.weight",
        "bias": "f32[8] not saved",
    }
    assert tensor_fact_shape(items["weight"]) == "f32[8,3]"
    assert tensor_fact_flags(items["weight"]) == {"frozen", "tied to a.weight, b.weight"}
    assert tensor_fact_flags(items["bias"]) == {"not saved"}


def test_a_call_line_reads_back_as_the_line_it_was_made_from() -> None:
    line = make_line(
        depth=1,
        path="layer1.relu",
        module_type="ReLU",
        nth=2,
        reused=True,
        frozen=True,
        registered=False,
        inputs="(f32[1,4])",
        outputs="f32[1,4]",
        scripted=True,
        mode="eval",
    )

    assert parse_call_line(line.text) == line


def test_a_line_that_is_not_a_call_has_no_call_parts() -> None:
    assert call_line_parts("a hand-edited note") is None
    assert call_line_parts("fc: Linear (f32[2]) -> f32[2]") == (
        "fc",
        ["Linear"],
        " (f32[2]) -> f32[2]",
    )
