"""numpy's global generator around a trace: put back when forward drew, left alone when not.

Issue 37: saving and setting numpy's state costs tens of microseconds a trace, so it is set
again only when forward moved it. The oracle is `numpy.random.get_state()` itself, and a
draw after the trace compared with one made where no trace ran.
"""

from __future__ import annotations

from typing import Any

import numpy
import pytest
import torch
from torch import nn

from pytest_fwdorder import record, trace_forward


class DrawsFromNumpy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        numpy.random.random(3)
        return x


class DrawsOneNormal(nn.Module):
    """Takes the normal numpy's legacy generator keeps from its last pair, if it keeps one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        numpy.random.standard_normal()
        return x


class LeavesNumpyAlone(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def same_state(first: tuple[Any, ...], second: tuple[Any, ...]) -> bool:
    """Whether two `numpy.random.get_state()` tuples are the same state (key compared by value)."""
    return (
        first[0] == second[0]
        and numpy.array_equal(first[1], second[1])
        and tuple(first[2:]) == tuple(second[2:])
    )


def test_a_model_that_draws_from_numpy_gets_the_generator_put_back() -> None:
    numpy.random.seed(37)
    before = numpy.random.get_state()
    expected = numpy.random.random()  # the draw a test makes where no trace ran
    numpy.random.set_state(before)

    trace_forward(DrawsFromNumpy(), torch.ones(1))

    assert same_state(numpy.random.get_state(), before)
    assert numpy.random.random() == expected


def test_a_normal_taken_from_the_generators_cache_is_put_back() -> None:
    """The cached normal moves no key nor position: only get_state's last fields tell."""
    numpy.random.seed(37)
    numpy.random.standard_normal()  # draws a pair, keeps the second
    before = numpy.random.get_state()
    assert before[3] == 1  # the generator holds a cached normal: the case under test
    expected = numpy.random.standard_normal()
    numpy.random.set_state(before)

    trace_forward(DrawsOneNormal(), torch.ones(1))

    assert same_state(numpy.random.get_state(), before)
    assert numpy.random.standard_normal() == expected


def test_a_model_that_does_not_draw_leaves_the_generator_untouched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    numpy.random.seed(37)
    before = numpy.random.get_state()
    set_states: list[object] = []
    original_set_state = numpy.random.set_state

    def counting_set_state(state: Any) -> None:
        set_states.append(state)
        original_set_state(state)

    monkeypatch.setattr(numpy.random, "set_state", counting_set_state)

    trace_forward(LeavesNumpyAlone(), torch.ones(1))

    assert set_states == []
    assert same_state(numpy.random.get_state(), before)


def test_the_oracle_sees_a_draw_that_is_not_put_back() -> None:
    """Proves the oracle can fail: without the put-back, the state after differs."""
    numpy.random.seed(37)
    before = numpy.random.get_state()
    model = DrawsFromNumpy()

    with record(model, restore_state=False):
        model(torch.ones(1))

    assert not same_state(numpy.random.get_state(), before)
