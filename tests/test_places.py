"""Where a call is, in words (diff/places.py): said for one call by walking back through the
lines, and for many by one pass over them; both must say the same of every call."""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.diff.places import describe_place, place_describer
from pytest_fwdorder.golden.format import GoldenLine
from pytest_fwdorder.golden.parse import parse_golden


def _lines(model: nn.Module, *inputs: torch.Tensor) -> list[GoldenLine]:
    return parse_golden(trace_forward(model, *inputs).render())[1]


def test_one_pass_says_of_every_call_what_the_walk_back_says() -> None:
    cases = [
        _lines(torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 32, 32)),
        _lines(
            nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Tanh()), nn.ReLU()),
            torch.randn(1, 4),
        ),
    ]
    for lines in cases:
        describe = place_describer(lines)
        said = [describe(index) for index in range(len(lines))]
        assert said == [describe_place(lines, index) for index in range(len(lines))]
        # The oracle can tell places apart: the stem's first call and a block's are not alike.
        assert len(set(said)) > len(lines) // 2


def test_one_pass_names_the_parent_and_the_sibling_before() -> None:
    lines = _lines(
        nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Tanh())), torch.randn(1, 4)
    )
    describe = place_describer(lines)
    assert [line.path for line in lines] == ["<root>", "0", "1", "1.0", "1.1"]
    assert [describe(index) for index in range(len(lines))] == [
        "at the start",
        "at the start of the model",
        "after 0",
        "at the start of 1",
        "in 1 after 1.0",
    ]
