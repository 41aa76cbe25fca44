"""What a golden writes onto each tensor's text (`TensorAnnotation`): the built-in devices and
local shapes facets, and a toy annotation from outside the package that reaches the golden,
its header and the comparison the same way.

The toy writes each tensor's element count after it (`f32[2,4]#8`). Its oracle is torch's
global forward hook reading `numel()` of the real tensors, which the annotation never sees.
"""

from __future__ import annotations

import math
import pickle
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from facet_plugins import offered
from torch import nn

from pytest_fwdorder import assert_same_structure, structure_diff, trace_forward
from pytest_fwdorder.calls.facet_records import TensorAnnotation, checked_facets, read_annotations
from pytest_fwdorder.calls.value_descriptions import TensorDescription
from pytest_fwdorder.facets.devices import DEVICES
from pytest_fwdorder.facets.local_shapes import LOCAL_SHAPES, LocalShapesAnnotation
from pytest_fwdorder.golden.format import render_value
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.golden.render import golden_lines

pytest_plugins = ["pytester"]

ANNOTATION_SOURCE = '''
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Elements:
    """A tensor's element count after its text: `f32[2,4]#8`."""

    title = "elements"

    def annotate(self, tensor, text):
        return f"{text}#{math.prod(tensor.shape)}"

    def read(self, text):
        plain, mark, count = text.rpartition("#")
        return (plain, int(count)) if mark else (text, None)

    def header_line(self):
        return "# elements: shown"
'''


@dataclass(frozen=True)
class Elements:
    """The toy annotation as this module uses it (ANNOTATION_SOURCE is the same for a conftest)."""

    title = "elements"

    def annotate(self, tensor: TensorDescription, text: str) -> str:
        return f"{text}#{math.prod(tensor.shape)}"

    def read(self, text: str) -> tuple[str, int | None]:
        plain, mark, count = text.rpartition("#")
        return (plain, int(count)) if mark else (text, None)

    def header_line(self) -> str:
        return "# elements: shown"


@pytest.fixture
def elements(request: pytest.FixtureRequest) -> Iterator[Elements]:
    """The toy annotation, offered by a plugin for the length of one test."""
    annotation = Elements()
    with offered(request.config, annotation):
        yield annotation


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU())


def elements_by_global_hook(root: nn.Module, inputs: torch.Tensor) -> list[tuple[int, int]]:
    """The oracle: each call's (input, output) element counts, in the order calls end."""
    counts: list[tuple[int, int]] = []

    def count(module: nn.Module, args: tuple[torch.Tensor], output: torch.Tensor) -> None:
        counts.append((args[0].numel(), output.numel()))

    handle = nn.modules.module.register_module_forward_hook(count)
    try:
        root(inputs)
    finally:
        handle.remove()
    return counts


def test_a_plugins_annotation_is_on_each_tensors_text_as_the_oracle_counts(
    elements: Elements,
) -> None:
    golden = trace_forward(model(), torch.ones(2, 4)).render()
    # Calls end innermost first: Linear, ReLU, then the Sequential around them.
    (linear, relu, root) = elements_by_global_hook(model(), torch.ones(2, 4))
    assert [line for line in golden.splitlines() if ": " in line and "->" in line] == [
        f"<root>: Sequential (f32[2,4]#{root[0]}) -> f32[2,8]#{root[1]}",
        f"  0: Linear (f32[2,4]#{linear[0]}) -> f32[2,8]#{linear[1]}",
        f"  1: ReLU (f32[2,8]#{relu[0]}) -> f32[2,8]#{relu[1]}",
    ]
    assert [line for line in golden.splitlines() if "elements" in line] == ["# elements: shown"]


def test_the_oracle_counts_elements_that_differ_with_the_input() -> None:
    assert elements_by_global_hook(model(), torch.ones(3, 4))[0] == (12, 24)
    assert elements_by_global_hook(model(), torch.ones(2, 4))[0] != (12, 24)


def test_without_the_plugin_no_tensor_is_annotated() -> None:
    trace = trace_forward(model(), torch.ones(2, 4))
    assert trace.options.annotations == ()
    assert "#" not in "".join(line for line in trace.render().splitlines() if "->" in line)


def test_the_toy_annotation_implements_the_public_protocol() -> None:
    assert isinstance(Elements(), TensorAnnotation)
    assert not isinstance(object(), TensorAnnotation)


def test_the_built_in_annotations_write_what_the_goldens_have_always_shown() -> None:
    # The texts the distributed goldens and `--show-devices` tests pin, in their order.
    dtensor = TensorDescription((2, 16), "f32", "cuda:0", "Shard(1)", (2, 8))
    assert render_value(dtensor) == "f32[2,16]{Shard(1)}"
    assert render_value(dtensor, (LOCAL_SHAPES,)) == "f32[2,16]{Shard(1) local=[2,8]}"
    assert render_value(dtensor, (DEVICES,)) == "f32[2,16]{Shard(1)}@cuda:0"
    assert (
        render_value(dtensor, (DEVICES, LOCAL_SHAPES)) == "f32[2,16]{Shard(1) local=[2,8]}@cuda:0"
    )
    plain = TensorDescription((2, 4), "f32", "cpu")
    assert render_value(plain, (DEVICES, LOCAL_SHAPES)) == "f32[2,4]@cpu"


@pytest.mark.parametrize(
    "description",
    [
        TensorDescription((2, 16), "f32", "cuda:0", "Shard(1)", (2, 8)),
        TensorDescription((4,), "bf16", "privateuseone:1", "Shard(0),Replicate()", (2,)),
        TensorDescription((2, 4), "f32", "meta"),
        TensorDescription((), "i64", "cpu", "Partial(sum)", ()),
    ],
)
def test_each_annotation_reads_back_what_it_wrote_whatever_the_others(
    description: TensorDescription,
) -> None:
    annotations: tuple[Any, ...] = (DEVICES, Elements(), LOCAL_SHAPES)
    text = render_value(description, annotations)

    plain, values = read_annotations(text, annotations)

    assert plain == render_value(description)
    shard_shape = description.local_shape if description.placements is not None else None
    assert values == {
        "devices": description.device,
        "elements": math.prod(description.shape),
        "local shapes": shard_shape,
    }


def test_a_text_without_the_annotations_reads_back_as_none() -> None:
    assert read_annotations("f32[2,4]", (DEVICES, LOCAL_SHAPES)) == (
        "f32[2,4]",
        {"devices": None, "local shapes": None},
    )
    # An `@` that is not a device is left in the text.
    assert DEVICES.read("'a@b c'") == ("'a@b c'", None)


def test_a_golden_with_devices_parses_back_into_the_same_lines() -> None:
    trace = trace_forward(model(), torch.ones(2, 4), show_devices=True, show_local_shapes=True)

    header, lines = parse_golden(trace.render())

    assert lines == golden_lines(trace)
    assert lines[0].outputs == "f32[2,8]@cpu"
    assert header[-2:] == ["# devices: shown", "# local shapes: shown"]


def test_a_traces_annotations_pickle_and_compare_as_values() -> None:
    options = trace_forward(model(), torch.ones(2, 4), show_local_shapes=True).options
    assert options.annotations == (LocalShapesAnnotation(rank=None),)
    assert pickle.loads(pickle.dumps(options)) == options
    assert (
        LocalShapesAnnotation("rank 1 of 2").header_line() == "# local shapes: shown (rank 1 of 2)"
    )


@dataclass(frozen=True)
class DevicesAgain(Elements):
    """A plugin's annotation that takes the built-in devices annotation's title."""

    title = "devices"


def test_an_annotation_whose_title_is_taken_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"DevicesAgain\(\) has the title 'devices', which"):
        checked_facets([DEVICES, Elements(), DevicesAgain()], ())


def test_a_conftest_annotation_reaches_the_golden_and_its_comparison(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        ANNOTATION_SOURCE
        + textwrap.dedent(
            """
            import os
            import pytest

            @pytest.hookimpl
            def pytest_fwdorder_facets():
                return [Elements()] if os.environ.get("ANNOTATE", "1") == "1" else []
            """
        )
    )
    pytester.makepyfile(
        test_model=textwrap.dedent(
            """
            import torch
            from torch import nn

            def test_model(forward_trace, snapshot):
                model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
                assert forward_trace(model, torch.ones(2, 4)) == snapshot
            """
        )
    )
    pytester.runpytest("--snapshot-update", "-p", "no:randomly").assert_outcomes(passed=1)
    (golden,) = pytester.path.joinpath("__snapshots__").rglob("*.fwdorder.txt")
    assert "<root>: Sequential (f32[2,4]#8) -> f32[2,8]#16\n" in golden.read_text()
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANNOTATE", "0")
        failed = pytester.runpytest("-p", "no:randomly")
    failed.assert_outcomes(failed=1)
    assert (
        "input changed at 1 call: <root> (Sequential) input f32[2,4]#8 -> f32[2,4]"
        in failed.stdout.str()
    )


class Unreadable:
    """An annotation that cannot read its text back."""

    title = "unreadable"

    def annotate(self, tensor: TensorDescription, text: str) -> str:
        return f"{text}!"

    def header_line(self) -> str:
        return "# unreadable: shown"


def test_an_annotation_without_read_is_refused_naming_what_it_lacks() -> None:
    with pytest.raises(
        TypeError,
        match=r"Unreadable object .*, which is no facet: it lacks read; give it every member "
        r"of TensorAnnotation",
    ):
        checked_facets([Unreadable()], ())


def test_a_structure_comparison_ignores_an_annotation_named_by_its_title(
    elements: Elements,
) -> None:
    """`ignore=("elements",)` leaves a plugin's annotation out, as `"backward"` leaves out a
    section: the batch size changes each tensor's element count, which the oracle counts."""
    two, three = trace_forward(model(), torch.ones(2, 4)), trace_forward(model(), torch.ones(3, 4))
    assert elements_by_global_hook(model(), torch.ones(2, 4)) != elements_by_global_hook(
        model(), torch.ones(3, 4)
    )
    # Without naming it the annotation is compared: ignoring the batch leaves `#8` vs `#12`.
    assert "#8" in str(structure_diff(two, three, ignore=("batch",)))
    same = assert_same_structure(two, three, ignore=("batch", "elements"))
    assert "same structure" in str(same)
    # The annotation alone is not the batch: with shapes compared, the shapes still differ.
    with pytest.raises(AssertionError, match=r"differs \(ignoring elements\):\n.*input"):
        assert_same_structure(two, three, ignore=("elements",))


def test_an_unknown_ignore_name_lists_the_annotations_titles(elements: Elements) -> None:
    trace = trace_forward(model(), torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"cannot ignore 'elemnts': .*'elements'"):
        structure_diff(trace, trace, ignore=("elemnts",))


def test_a_structure_comparison_of_devices_can_ignore_them() -> None:
    """`show_devices=True` traces of one model on two devices (the meta device stands in for
    an accelerator) compare equal once `"devices"` is ignored, and differ until then."""
    cpu = trace_forward(model(), torch.ones(2, 4), show_devices=True)
    meta = trace_forward(model().to("meta"), torch.ones(2, 4, device="meta"), show_devices=True)
    assert "@meta" in meta.render()
    assert "@cpu" in cpu.render()
    assert "@cpu" in str(structure_diff(cpu, meta))
    assert "same structure" in str(assert_same_structure(cpu, meta, ignore=("devices",)))


def test_an_annotation_no_trace_shows_may_still_be_ignored() -> None:
    """`ignore=("devices",)` in a test that runs where traces show no devices is no error,
    as `"backward"` is none for traces without backward steps."""
    trace = trace_forward(model(), torch.ones(2, 4))
    assert DEVICES not in trace.options.annotations
    assert not assert_same_structure(trace, trace, ignore=("devices",))
