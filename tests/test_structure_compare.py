"""Structure comparison: what it refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from pytest_fwdorder import assert_same_structure, structure_diff, trace_forward
from pytest_fwdorder.errors import StructureMismatchError


def test_structure_diff_against_none_names_the_argument() -> None:
    trace = trace_forward(nn.Linear(2, 2), torch.randn(1, 2))

    with pytest.raises(
        TypeError, match=r"^structure_diff expected a trace as `actual`, got NoneType: None"
    ):
        structure_diff(trace, None)  # type: ignore[arg-type]


def test_assert_same_structure_of_models_says_to_trace_them_first() -> None:
    with pytest.raises(
        TypeError,
        match=r"^assert_same_structure expected a trace as `expected`, got Linear: .*"
        r"trace the model first: trace_forward\(model, \*inputs\)$",
    ):
        assert_same_structure(nn.Linear(2, 2), torch.randn(1, 2))  # type: ignore[arg-type]


@pytest.mark.parametrize("function", [structure_diff, assert_same_structure])
@pytest.mark.parametrize("argument", ["expected", "actual"])
def test_both_comparisons_refuse_a_non_trace_in_either_place_naming_themselves(
    function: Callable[..., object], argument: str
) -> None:
    trace = trace_forward(nn.Linear(2, 2), torch.randn(1, 2))
    traces = {"expected": trace, "actual": trace, argument: "a golden"}

    with pytest.raises(
        TypeError, match=rf"^{function.__name__} expected a trace as `{argument}`, got str: "
    ):
        function(traces["expected"], traces["actual"])


def test_a_hide_that_is_not_facet_names_is_a_type_error_saying_what_to_write() -> None:
    with pytest.raises(TypeError, match=r"hide must name facets, got 5: write hide=\("):
        trace_forward(nn.Linear(2, 2), torch.randn(1, 2), hide=5)  # type: ignore[arg-type]


def kernel_model(kernel: int) -> nn.Module:
    """A 16-channel convolution of `kernel` x `kernel` that keeps the shapes (padding)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, kernel, padding=kernel // 2)
    )


def test_equal_costs_pass_when_compared() -> None:
    image = torch.randn(1, 3, 8, 8)
    expected = trace_forward(kernel_model(1), image, costs=True)
    actual = trace_forward(kernel_model(1), image, costs=True)

    assert not structure_diff(expected, actual, compare=("costs",))
    assert not assert_same_structure(expected, actual, compare=("costs",))


def test_a_cost_change_with_the_same_shapes_fails_only_when_costs_are_compared() -> None:
    image = torch.randn(1, 3, 8, 8)
    expected = trace_forward(kernel_model(1), image, costs=True)
    actual = trace_forward(kernel_model(3), image, costs=True)
    ignore = ("settings", "parameters")  # the kernel size shows there; the shapes do not change

    assert_same_structure(expected, actual, ignore=ignore)
    with pytest.raises(StructureMismatchError, match=r"comparing costs") as raised:
        assert_same_structure(expected, actual, ignore=ignore, compare=("costs",))

    message = str(raised.value)
    assert message.startswith(
        "execution structure differs (ignoring settings, parameters; comparing costs):"
    )
    assert "FLOPs changed at 2 calls:" in message
    assert "1 (Conv2d) 32.8 k -> 295 k (+800%)" in message
    lines = message.splitlines()
    assert "-     | costs: 32,768 FLOPs (32.8 k), output 4,096 B (4.00 KiB)" in lines
    assert "+     | costs: 294,912 FLOPs (295 k), output 4,096 B (4.00 KiB)" in lines
    assert "+ # costs: 350,208 FLOPs (350 k), saved for backward" in message
    assert "parameters and buffers" not in message  # ignored parameters: their bytes too


def test_structure_diff_compares_costs_when_asked() -> None:
    image = torch.randn(1, 3, 8, 8)
    expected = trace_forward(kernel_model(1), image, costs=True)
    actual = trace_forward(kernel_model(3), image, costs=True)
    ignore = ("settings", "parameters")

    assert not structure_diff(expected, actual, ignore)
    assert (
        "FLOPs changed at 2 calls"
        in structure_diff(expected, actual, ignore, compare="costs").summary()
    )


def test_compared_costs_include_the_uncounted_operations() -> None:
    image = torch.randn(1, 3, 8, 8)
    expected = trace_forward(nn.Sequential(nn.Linear(8, 8)), image, costs=True)
    actual = trace_forward(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), image, costs=True)

    summary = structure_diff(
        expected, actual, ignore=({"ReLU": "Linear"},), compare=("costs",)
    ).summary()

    assert "uncounted operation added" in summary


def test_comparing_an_unknown_measurement_says_which_are_known() -> None:
    trace = trace_forward(nn.Linear(2, 2), torch.randn(1, 2), costs=True)

    with pytest.raises(
        ValueError,
        match=r"^cannot compare 'flops': name one of 'costs', 'initialization', 'values', the ",
    ):
        assert_same_structure(trace, trace, compare=("flops",))


def test_comparing_costs_of_traces_without_them_says_to_trace_with_costs() -> None:
    with_costs = trace_forward(nn.Linear(2, 2), torch.randn(1, 2), costs=True)
    without = trace_forward(nn.Linear(2, 2), torch.randn(1, 2))

    with pytest.raises(
        ValueError,
        match=r"^assert_same_structure\(compare=\('costs',\)\) needs what each call costs, "
        r"and `actual` has none: trace both with costs=True",
    ):
        assert_same_structure(with_costs, without, compare=("costs",))
    with pytest.raises(ValueError, match=r"`expected` and `actual` have none: trace both"):
        structure_diff(without, without, compare=("costs",))


def _tanh_and_relu_traces() -> tuple[object, object]:
    x = torch.randn(1, 4)
    torch.manual_seed(0)
    tanh = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    torch.manual_seed(0)
    relu = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    return trace_forward(tanh, x, backward=True), trace_forward(relu, x, backward=True)


def test_types_taken_as_the_same_are_the_same_in_the_backward_section() -> None:
    tanh, relu = _tanh_and_relu_traces()
    # The oracle: the backward sections differ in the class only (its step names it).
    assert "1: Tanh <- f32[1,4]" in tanh.render().splitlines()[-3:][1]
    assert "1: ReLU <- f32[1,4]" in relu.render().splitlines()[-3:][1]

    passed = assert_same_structure(tanh, relu, ignore=({"Tanh": "ReLU"},))
    every_type = structure_diff(tanh, relu, ignore=("types",)).summary()

    assert passed.summary().startswith("same structure"), passed.summary()
    # Every type ignored: the section's classes too (a setting of ReLU's that Tanh has not
    # is another matter, said as such).
    assert "backward" not in every_type, every_type


def test_types_taken_as_the_same_leave_another_backward_change_found() -> None:
    tanh, _ = _tanh_and_relu_traces()
    torch.manual_seed(0)
    # ReLU, and the first layer's weight frozen: its gradient step is gone from backward.
    deeper = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    deeper[0].requires_grad_(False)
    frozen = trace_forward(deeper, torch.randn(1, 4), backward=True)

    with pytest.raises(StructureMismatchError, match="backward step"):
        assert_same_structure(tanh, frozen, ignore=({"Tanh": "ReLU"}, "frozen"))


class _Scaled(nn.Module):
    """A Linear inside a container that may hold a parameter of its own (a layer scale)."""

    def __init__(self, scaled: bool) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        if scaled:
            self.gamma = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        return y * self.gamma if hasattr(self, "gamma") else y


def test_a_name_free_comparison_sees_a_parameter_added_to_a_module_that_had_none() -> None:
    x = torch.randn(1, 4)
    plain = trace_forward(nn.Sequential(_Scaled(False)), x)
    scaled = trace_forward(nn.Sequential(_Scaled(True)), x)
    # The oracle: torch's own parameters of the container, and the named comparison.
    assert [
        name for name, _ in nn.Sequential(_Scaled(True))[0].named_parameters(recurse=False)
    ] == ["gamma"]
    assert "added 0.gamma (f32[4])" in plain.diff(scaled).summary()

    with pytest.raises(StructureMismatchError, match=r"added gamma \(f32\[4\]\)"):
        assert_same_structure(plain, scaled, ignore=("paths",))
