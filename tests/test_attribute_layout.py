"""The state a trace puts back is planned once per attribute layout (recording/attribute_layout.py).

A model traced again, or another built alike, reuses the plan of where its containers are;
these tests change the model between two traces so that the plan no longer fits, and check
the second trace notices: what forward changes is still put back, or still named.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from pytest_fwdorder import FwdOrderWarning, trace_forward
from pytest_fwdorder.recording import attribute_layout as attribute_layout_module
from pytest_fwdorder.recording.bounded_cache import BoundedCache


class KeepsAHistory(nn.Module):
    """Appends each input's shape to every list or dict attribute of its own (`history`)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.history: object = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name, value in list(vars(self).items()):
            if name.startswith("_"):  # torch's bookkeeping
                continue
            if isinstance(value, list):
                value.append(tuple(x.shape))
            elif isinstance(value, dict):
                value[len(value)] = tuple(x.shape)
        return self.fc(x)


def test_an_attribute_that_becomes_a_list_between_two_traces_is_emptied_again() -> None:
    model = KeepsAHistory()
    trace_forward(model, torch.ones(1, 2))
    history: list[object] = []
    model.history = history  # the same names and as many values: only a type changed

    trace_forward(model, torch.ones(1, 2))

    assert model.history is history
    assert history == []


def test_an_attribute_that_becomes_a_dict_between_two_traces_is_emptied_again() -> None:
    model = KeepsAHistory()
    trace_forward(model, torch.ones(1, 2))
    history: dict[int, object] = {}
    model.history = history

    trace_forward(model, torch.ones(1, 2))

    assert history == {}


def test_the_oracle_sees_what_forward_appends_without_a_trace() -> None:
    # The tests above would pass for a forward that appends nothing.
    model = KeepsAHistory()
    model.history = []

    model(torch.ones(1, 2))

    assert model.history == [(1, 2)]


def test_a_list_attribute_renamed_between_two_traces_is_still_put_back() -> None:
    model = KeepsAHistory()
    model.history = []
    trace_forward(model, torch.ones(1, 2))
    seen = model.history
    del model.history
    model.seen = seen  # the same value types, under another name

    trace_forward(model, torch.ones(1, 2))

    assert model.seen is seen
    assert seen == []


class ListSubclass(list[object]):
    pass


def test_an_attribute_that_becomes_a_list_subclass_between_two_traces_is_named() -> None:
    model = KeepsAHistory()
    model.history = []
    trace_forward(model, torch.ones(1, 2))
    model.history = ListSubclass()  # a subclass is not copied: forward's change is named

    with pytest.warns(FwdOrderWarning, match=r"history \(a ListSubclass attribute\)"):
        trace_forward(model, torch.ones(1, 2))


def test_another_model_built_alike_has_its_own_containers_put_back() -> None:
    first, second = KeepsAHistory(), KeepsAHistory()
    first.history, second.history = [], []
    trace_forward(first, torch.ones(1, 2))

    trace_forward(second, torch.ones(1, 2))

    assert (first.history, second.history) == ([], [])


class AliasesItsParameters(nn.Module):
    """Keeps its own parameter dict under a second name, and adds to it in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2))
        self.same_parameters = self._parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.same_parameters["extra"] = nn.Parameter(torch.zeros(2))
        return x * self.weight


def test_a_parameter_dict_kept_under_a_second_name_is_put_back_once() -> None:
    model = AliasesItsParameters()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace_forward(model, torch.ones(2))

    assert list(model._parameters) == ["weight"]
    assert model.same_parameters is model._parameters


def test_the_plan_of_a_model_with_more_attributes_than_kept_is_made_each_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 37's heap: a plan holds about 400 bytes per module, so a big model's is not kept;
    its containers are put back all the same."""
    monkeypatch.setattr(attribute_layout_module, "MOST_KEPT_ATTRIBUTES", 10)
    monkeypatch.setattr(attribute_layout_module, "_LAYOUTS", BoundedCache(8))
    model = KeepsAHistory()
    model.history = []

    trace_forward(model, torch.ones(1, 2))
    trace_forward(model, torch.ones(1, 2))

    assert model.history == []
    assert len(attribute_layout_module._LAYOUTS) == 0


def test_the_plan_of_a_small_model_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the same model's plan is kept when it fits."""
    monkeypatch.setattr(attribute_layout_module, "_LAYOUTS", BoundedCache(8))
    model = KeepsAHistory()
    model.history = []

    trace_forward(model, torch.ones(1, 2))

    assert model.history == []
    assert len(attribute_layout_module._LAYOUTS) == 1
