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
