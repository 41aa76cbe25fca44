"""Trace records and their queries."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward


class Block(nn.Module):
    """Calls `act` twice and never calls `spare`."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.spare = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(self.act(x)))


def test_find_returns_every_call_of_a_module_in_order() -> None:
    trace = trace_forward(Block(), torch.randn(1, 4))

    assert [call.index for call in trace.find("act")] == [1, 3]


def test_find_of_a_registered_module_that_never_ran_returns_no_calls() -> None:
    assert trace_forward(Block(), torch.randn(1, 4)).find("spare") == []


def test_find_of_a_path_the_model_does_not_have_names_the_close_paths() -> None:
    trace = trace_forward(Block(), torch.randn(1, 4))

    with pytest.raises(
        LookupError,
        match=r"^no module at 'act2' in this trace of Block: did you mean 'act'\? "
        r"\(trace\.modules lists every path\)$",
    ):
        trace.find("act2")


def test_find_of_a_path_with_nothing_close_says_where_the_paths_are() -> None:
    trace = trace_forward(Block(), torch.randn(1, 4))

    with pytest.raises(
        LookupError,
        match=r"^no module at 'decoder\.layers' in this trace of Block "
        r"\(trace\.modules lists every path\)$",
    ):
        trace.find("decoder.layers")


def test_each_calls_children_are_the_calls_whose_parent_it_is_in_order() -> None:
    # The oracle is the parent link each call keeps, read independently of `children`.
    relu = nn.ReLU()
    block = nn.Sequential(nn.Linear(4, 4), relu, nn.Sequential(nn.Linear(4, 4), relu))
    model = nn.Sequential(block, relu, block)
    with torch.no_grad():
        trace = trace_forward(model, torch.randn(1, 4))

    for call in trace.calls:
        expected = [other for other in trace.calls if other.parent is call]
        assert list(call.children) == expected
        assert isinstance(call.children, tuple)
    leaves = [call for call in trace.calls if not call.children]
    assert len(leaves) == 9  # the oracle can fail: it finds the leaves, not every call
    assert [call.path for call in trace.calls[0].children] == [
        "0",
        "0.1",
        "0",
    ]  # relu is called by the name it was first registered under
