"""Each golden line kind's parser reads back what its writer writes."""

from __future__ import annotations

from pytest_fwdorder.calls.records import TensorFact
from pytest_fwdorder.golden.format import (
    REUSED_SECTION,
    header_sections,
    make_line,
    render_section,
    render_tensor_fact,
)
from pytest_fwdorder.golden.line_facts import WrittenTensor, facts_of, read_tensor_facts
from pytest_fwdorder.golden.line_values import values_of
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

    items = read_tensor_facts(text)

    assert items == {
        "weight": WrittenTensor(
            "f32[8,3] frozen tied to a.weight, b.weight",
            "f32",
            (8, 3),
            frozenset({"frozen"}),
            frozenset({"a.weight", "b.weight"}),
        ),
        "bias": WrittenTensor("f32[8] not saved", "f32", (8,), frozenset({"not saved"})),
    }
    assert items["weight"].shape == "f32[8,3]"


def test_a_lines_facts_read_back_typed_once_for_lines_alike() -> None:
    facts = (
        "settings: in_features=3, out_features=8, bias=True",
        "parameters: weight f32[8,3], bias f32[8]",
        "buffers: mask f32 uninitialized not saved",
    )
    first, second = (
        make_line(
            depth=0, path=path, module_type="Linear", nth=1, reused=False, frozen=False,
            registered=True, inputs="(f32[2,3])", outputs="f32[2,8]", facts=facts,
        )
        for path in ("a", "b")
    )  # fmt: skip

    read = facts_of(first)

    assert read is facts_of(second)  # lines alike share one reading
    assert read.settings == {"in_features": "3", "out_features": "8", "bias": "True"}
    assert read.tensors_of("parameters")["weight"].sizes == (8, 3)
    assert read.tensors_of("buffers")["mask"] == WrittenTensor(
        "f32 uninitialized not saved", "f32", None, frozenset({"not saved"})
    )
    assert read.by_title["settings"] == facts[0].removeprefix("settings: ")


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


def test_inputs_read_back_typed_once_for_texts_alike() -> None:
    text = "(f32[2,4], i64[], flag=True, x=f32[3])"

    read = values_of(text)

    assert read is values_of("(f32[2,4], i64[], flag=True, x=f32[3])".strip())
    assert read.tensors == (("f32", (2, 4)), ("i64", ()), ("f32", (3,)))
    assert read.values == ("f32[2,4]", "i64[]", "flag=True", "x=f32[3]")
    assert read.blanked == ("T", "T", "flag=True", "x=T")
