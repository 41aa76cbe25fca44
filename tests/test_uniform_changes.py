"""A change made throughout one part of the model is said once, by place (diff/uniform_changes.py).

The oracle is the model itself: which modules were cast is known from how each case is built,
and torch's own `dtype` of every parameter says which calls' facts changed.
"""

from __future__ import annotations

import re

import torch
import torchvision
from torch import nn

from pytest_fwdorder import diff_traces, trace_forward
from pytest_fwdorder.diff.call_tree import build_call_tree
from pytest_fwdorder.diff.changes import ChangeKind
from pytest_fwdorder.diff.uniform_changes import (
    BATCH,
    DTYPE,
    describe_uniform_change,
    group_uniform_changes,
    uniform_change,
)


class Cast(nn.Module):
    """Runs `inner` in `dtype`, converting its input and output."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.inner, self.dtype = inner.to(dtype), dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.to(self.dtype)).float()


def blocks() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)))


def cast_blocks(casts: dict[int, torch.dtype]) -> nn.Sequential:
    model = blocks()
    for index, dtype in casts.items():
        model[index] = Cast(model[index], dtype)
    return model


def changes_of(after: nn.Module) -> tuple[list, list]:
    x = torch.randn(2, 8)
    difference = diff_traces(trace_forward(blocks(), x), trace_forward(after, x))
    return difference.changes, difference.new_lines


def test_two_parts_cast_to_two_dtypes_are_two_places() -> None:
    after = cast_blocks({0: torch.float16, 2: torch.bfloat16})
    changes, new_lines = changes_of(after)

    casts = group_uniform_changes(changes, build_call_tree(new_lines))

    # The oracle: the modules cast, and their parameters' own dtypes.
    assert {(cast.of, cast.old, cast.new) for cast in casts} == {
        (DTYPE, "f32", "f16"),
        (DTYPE, "f32", "bf16"),
    }
    assert after[0].inner[0].weight.dtype == torch.float16
    assert after[2].inner[0].weight.dtype == torch.bfloat16
    places = {new_lines[cast.place].path for cast in casts}
    assert places == {"0.inner", "2.inner"}


def test_a_stage_not_cast_between_two_cast_ones_splits_the_place() -> None:
    changes, new_lines = changes_of(cast_blocks({0: torch.float16, 2: torch.float16}))

    casts = group_uniform_changes(changes, build_call_tree(new_lines))

    assert sorted(new_lines[cast.place].path for cast in casts) == ["0.inner", "2.inner"]


def test_a_change_of_shape_and_dtype_is_no_cast() -> None:
    after = blocks()
    after[1] = Cast(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)), torch.float16)
    changes, _ = changes_of(after)

    casts = {
        (change.kind, change.new.path): uniform_change(change) for change in changes if change.new
    }

    # Widened and cast: more than a cast, so in no group; the stage's input only was cast.
    assert casts[(ChangeKind.PARAMETERS_CHANGED, "1.inner.0")] is None
    assert casts[(ChangeKind.OUTPUT_CHANGED, "1.inner.0")] is None
    assert casts[(ChangeKind.INPUT_CHANGED, "1.inner")] == (DTYPE, "f32", "f16")
    summary = diff_traces(
        trace_forward(blocks(), torch.randn(2, 8)), trace_forward(after, torch.randn(2, 8))
    ).summary()
    assert "dtype f32 -> f16 within" not in summary, summary
    assert "out_features 8 -> 16" in summary, summary


def test_another_batch_size_is_one_change_whose_counts_cover_every_call() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    before = trace_forward(model, torch.randn(1, 3, 32, 32))
    after = trace_forward(model, torch.randn(2, 3, 32, 32))

    summary = before.diff(after).summary()

    lines = summary.splitlines()
    assert len(lines) == 2, summary
    said = re.fullmatch(
        r"batch size \(dimension 0\) 1 -> 2 in the model: (\d+) inputs and (\d+) outputs "
        r"\(and (\d+) more inputs and outputs they passed on\)",
        lines[1],
    )
    assert said is not None, summary
    # The oracle: every call of this model takes one tensor and gives one, and each has the
    # batch as its first dimension, so each call's input and output changed.
    calls = len(list(before.calls))
    assert calls == len(list(after.calls)) == 76
    assert sum(map(int, said.groups())) == 2 * calls


def test_a_first_dimension_changed_with_a_dtype_is_no_uniform_change() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    before = trace_forward(model, torch.randn(1, 4))
    after = trace_forward(model.double(), torch.randn(2, 4, dtype=torch.float64))

    changes = before.diff(after).changes

    inputs = [change for change in changes if change.kind is ChangeKind.INPUT_CHANGED]
    assert [uniform_change(change) for change in inputs] == [None]
    # Each alone is one (the oracle that the check can say yes).
    alone = trace_forward(nn.Linear(4, 4), torch.randn(2, 4))
    only_batch = trace_forward(nn.Linear(4, 4), torch.randn(1, 4)).diff(alone).changes
    assert {
        uniform_change(change) for change in only_batch if change.kind is ChangeKind.INPUT_CHANGED
    } == {(BATCH, "1", "2")}


def test_stages_cast_apart_side_by_side_are_each_their_own_place() -> None:
    """The second reader's case: layer3 and layer4 each cast in a wrapper of its own read
    `in the model`, the words of a whole model cast, though conv1 to layer2 stayed f32."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    image = torch.randn(1, 3, 32, 32)
    before = trace_forward(model, image)
    model.layer3 = Cast(model.layer3, torch.bfloat16)
    model.layer4 = Cast(model.layer4, torch.bfloat16)

    summary = before.diff(trace_forward(model, image)).summary()

    # The oracle: which stages the model runs in bf16, from their own parameters.
    cast = {
        name
        for name, module in model.named_children()
        if next(module.parameters(), torch.zeros(0)).dtype == torch.bfloat16
    }
    assert cast == {"layer3", "layer4"}
    said = [line for line in summary.splitlines() if line.startswith("dtype f32 -> bf16")]
    assert [line.split(":")[0] for line in said] == [
        "dtype f32 -> bf16 within layer3.inner (Sequential)",
        "dtype f32 -> bf16 within layer4.inner (Sequential)",
    ], summary


def _differing_tensors(before: list, after: list) -> int:
    """How many calls' inputs and outputs differ between two traces of one model, read from
    the recorded calls themselves (not from the diff)."""
    pairs = list(zip(before, after, strict=True))
    return sum((old.args, old.kwargs) != (new.args, new.kwargs) for old, new in pairs) + sum(
        old.output != new.output for old, new in pairs
    )


def test_another_input_resolution_is_said_once_as_the_models_input_and_what_followed() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    before = trace_forward(model, torch.randn(1, 3, 64, 64))
    after = trace_forward(model, torch.randn(1, 3, 32, 32))

    summary = before.diff(after).summary()

    lines = summary.splitlines()
    assert len(lines) == 2, summary
    said = re.fullmatch(
        r"the model's input \(1, 3, 64, 64\) -> \(1, 3, 32, 32\), and so (\d+) more inputs "
        r"and (\d+) outputs changed shape \(and (\d+) more inputs and outputs they passed on\)",
        lines[1],
    )
    assert said is not None, summary
    # The oracle: the recorded calls, compared one by one. The head's input and output
    # (after the average pool) kept their shapes, so fewer than every call's changed.
    differing = _differing_tensors(list(before.calls), list(after.calls))
    assert differing < 2 * len(list(before.calls))
    assert 1 + sum(map(int, said.groups())) == differing


def test_another_input_resolution_with_another_change_is_said_by_kind() -> None:
    # Where a call changed besides the shapes it was given, the shapes after it need not
    # follow from the model's input alone: nothing is said to follow from it.
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    before = trace_forward(model, torch.randn(1, 3, 64, 64))
    model.conv1.stride = (1, 1)
    after = trace_forward(model, torch.randn(1, 3, 32, 32))

    summary = before.diff(after).summary()

    assert "the model's input" not in summary, summary
    assert "stride (2, 2) -> (1, 1)" in summary, summary


def test_one_call_whose_input_changed_is_said_by_its_name() -> None:
    # One change reads as well by its kind of fact, which names the call.
    model = nn.Linear(4, 4)

    summary = (
        trace_forward(model, torch.randn(1, 4))
        .diff(trace_forward(model, torch.randn(2, 4)))
        .summary()
    )

    assert summary.splitlines()[1] == (
        "input changed at 1 call: <root> (Linear) input (1, 4) -> (2, 4), "
        "and so the output of the model"
    ), summary


def test_one_value_passed_on_is_said_in_the_singular() -> None:
    changes, new_lines = changes_of(cast_blocks({0: torch.float16}))
    (cast,) = group_uniform_changes(changes, build_call_tree(new_lines))

    one, two = (describe_uniform_change(cast, new_lines, count) for count in (1, 2))

    assert one.endswith("(and 1 more input or output they passed on)"), one
    assert two.endswith("(and 2 more inputs and outputs they passed on)"), two
