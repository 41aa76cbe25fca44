"""A builder on meta: what the builder's function mode walks in each torch call's arguments.

Its cost per call must follow what the call reads, not the containers it is handed:
`Tensor.__deepcopy__(self, memo)` is handed deepcopy's memo, which holds every tensor
copied so far, and walking it made a builder that deep-copies its model quadratic.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, ItemsView, Iterator, KeysView, ValuesView
from typing import Any

import torch
from torch import nn

from pytest_fwdorder import TensorSpec, trace_forward
from pytest_fwdorder.recording.describe import tensors_of


class CountingMemo(dict[int, Any]):
    """deepcopy's memo, counting how often anything reads through all of its entries."""

    def __init__(self) -> None:
        super().__init__()
        self.walks = 0

    def __iter__(self) -> Iterator[int]:
        self.walks += 1
        return super().__iter__()

    def keys(self) -> KeysView[int]:
        self.walks += 1
        return super().keys()

    def values(self) -> ValuesView[Any]:
        self.walks += 1
        return super().values()

    def items(self) -> ItemsView[int, Any]:
        self.walks += 1
        return super().items()


class SeesMemo(torch.overrides.TorchFunctionMode):
    """Counts the torch calls whose arguments include `memo`, from outside the build."""

    def __init__(self, memo: object) -> None:
        super().__init__()
        self.memo = memo
        self.calls_handed_memo = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if any(value is self.memo for value in (*args, *kwargs.values())):
            self.calls_handed_memo += 1
        return func(*args, **kwargs)


def deep_copying_builder(memo: CountingMemo, layers: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        model = nn.Sequential(*[nn.BatchNorm1d(4) for _ in range(layers)])
        return copy.deepcopy(model, memo).eval()

    return build


def test_a_builder_that_deep_copies_buffers_never_walks_deepcopys_memo() -> None:
    memo = CountingMemo()

    with SeesMemo(memo) as seen:
        trace = trace_forward(deep_copying_builder(memo, 8), TensorSpec((2, 4)), device="meta")

    # The builder's mode is handed the memo: once per buffer (3 in each BatchNorm1d).
    assert seen.calls_handed_memo == 8 * 3
    assert memo.walks == 0
    assert len(trace) == 9
    assert trace[-1].output_tensors[0].device == "meta"


def test_the_counting_memo_counts_a_walk_that_goes_into_mappings() -> None:
    """The oracle can fail: the walk the builder used before (describe's `tensors_of`, which
    goes into every mapping) reads the memo's entries and is counted."""
    memo = CountingMemo()
    copy.deepcopy(torch.ones(2), memo)

    found = tensors_of(((torch.ones(1), memo), {}))

    assert memo.walks == 1
    # The argument, the copy, and the original deepcopy keeps alive in the memo.
    assert len(found) == 3


def test_a_deep_copied_tensor_whose_values_the_builder_reads_still_gets_real_values() -> None:
    def build() -> nn.Module:
        widths = copy.deepcopy(torch.arange(3) * 2 + 4).tolist()  # [4, 6, 8]
        return nn.Linear(widths[0], widths[1])

    trace = trace_forward(build, TensorSpec((1, 4)), device="meta")

    assert trace[0].output_shapes == [(1, 6)]
    assert trace[0].output_tensors[0].device == "meta"


def test_tensors_read_through_a_list_argument_still_get_real_values() -> None:
    def build() -> nn.Module:
        first = torch.arange(2) + 3
        second = torch.arange(2) + 5
        widths = torch.cat([first, second]).tolist()  # [3, 4, 5, 6]: needs both sites
        return nn.Linear(widths[0], widths[3])

    trace = trace_forward(build, TensorSpec((1, 3)), device="meta")

    assert trace[0].output_shapes == [(1, 6)]
