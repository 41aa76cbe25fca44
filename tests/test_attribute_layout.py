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


def test_the_plan_of_a_model_with_more_attributes_than_kept_stays_out_of_the_shared_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 37's heap: a plan holds about 400 bytes per module, so a big model's is not kept
    among the plans models share (it rides with that model's kept index alone); its
    containers are put back all the same."""
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


def _count_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record each plan made (its attribute count), with plans kept by size disabled."""
    monkeypatch.setattr(attribute_layout_module, "MOST_KEPT_ATTRIBUTES", 10)
    monkeypatch.setattr(attribute_layout_module, "_LAYOUTS", BoundedCache(8))
    plans: list[int] = []
    plan_layout = attribute_layout_module._plan_layout

    def counted(names: list[str], value_types: list[type]) -> object:
        plans.append(len(names))
        return plan_layout(names, value_types)

    monkeypatch.setattr(attribute_layout_module, "_plan_layout", counted)
    return plans


class HooksItsOwnList(nn.Module):
    """Appends to `_state_dict_hooks` when something has made that a list."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self._state_dict_hooks, list):
            self._state_dict_hooks.append(tuple(x.shape))
        return self.fc(x)


def test_the_plan_of_a_big_model_rides_along_with_its_kept_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 37: past the size bound, a model traced again (its index kept from its second
    trace on) is planned no more."""
    plans = _count_plans(monkeypatch)
    model = HooksItsOwnList()

    for _ in range(4):
        trace_forward(model, torch.ones(1, 2))

    assert len(plans) == 2  # the first trace's (no index kept yet) and the second's


def test_a_big_model_walked_again_is_planned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: an index walked afresh (its model changed) holds no plan."""
    plans = _count_plans(monkeypatch)
    model = HooksItsOwnList()
    for _ in range(3):
        trace_forward(model, torch.ones(1, 2))
    model.scale = 2.0  # a new attribute: the kept index no longer holds

    trace_forward(model, torch.ones(1, 2))

    assert len(plans) == 3
    assert model.scale == 2.0


@pytest.mark.parametrize("bound", [10, 2**17], ids=["kept-with-the-index", "kept-by-size"])
def test_a_kept_plan_is_not_used_once_a_torch_dict_becomes_a_list(
    monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """The kept index does not compare torch's hook dicts (no fact reads them), so the plan
    it keeps is checked against the value types: the list is watched and put back."""
    monkeypatch.setattr(attribute_layout_module, "MOST_KEPT_ATTRIBUTES", bound)
    monkeypatch.setattr(attribute_layout_module, "_LAYOUTS", BoundedCache(8))
    model = HooksItsOwnList()
    for _ in range(3):
        trace_forward(model, torch.ones(1, 2))
    hooks: list[object] = ["kept"]
    model._state_dict_hooks = hooks  # type: ignore[assignment]

    trace_forward(model, torch.ones(1, 2))

    assert model._state_dict_hooks is hooks
    assert hooks == ["kept"]


def _plain_plan(names: list[str], value_types: list[type]) -> object:
    """The plan worked out attribute by attribute, as its docstrings state it: the oracle of
    the plan made from codes and translate tables."""
    internal = [name in attribute_layout_module.MODULE_INTERNALS for name in names]
    dicts = [issubclass(kind, dict) for kind in value_types]
    containers = [issubclass(kind, (list, dict, set)) for kind in value_types]
    user_dicts = bytes(d and not i for d, i in zip(dicts, internal, strict=True))
    return attribute_layout_module.AttributeLayout(
        names,
        value_types,
        bytes(dicts),
        bytes(
            d and name not in ("_parameters", "_buffers")
            for d, name in zip(dicts, names, strict=True)
        ),
        user_dicts if any(user_dicts) else None,
        bytes(kind is list for kind in value_types) if list in value_types else None,
        bytes(kind is set for kind in value_types) if set in value_types else None,
        [
            place
            for place, (c, i) in enumerate(zip(containers, internal, strict=True))
            if c and not i
        ],
    )


class _Records(list):  # type: ignore[type-arg]
    """A list subclass: named among the unwatched, not copied."""


class _Seen(dict):  # type: ignore[type-arg]
    """A dict subclass: copied as a plain dict."""


@pytest.mark.parametrize("seed", range(5))
def test_the_plan_marks_what_an_attribute_by_attribute_reading_marks(seed: int) -> None:
    import random

    chooser = random.Random(seed)
    name_pool = [
        *sorted(attribute_layout_module.MODULE_INTERNALS),
        "history",
        "cache",
        "eps",
        "seen",
    ]
    type_pool: list[type] = [int, float, str, tuple, dict, _Seen, list, _Records, set, frozenset]
    count = chooser.randrange(1, 400)
    names = [chooser.choice(name_pool) for _ in range(count)]
    value_types = [chooser.choice(type_pool) for _ in range(count)]

    assert attribute_layout_module._plan_layout(names, value_types) == _plain_plan(
        names, value_types
    )


def test_the_plan_of_real_modules_marks_what_an_attribute_by_attribute_reading_marks() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.LazyLinear(3), KeepsAHistory())
    model[3].history = {}
    model.register_buffer("mask", torch.ones(2), persistent=False)
    dicts = [vars(module) for module in model.modules()]
    names = [name for attributes in dicts for name in attributes]
    value_types = [type(value) for attributes in dicts for value in attributes.values()]

    assert attribute_layout_module._plan_layout(names, value_types) == _plain_plan(
        names, value_types
    )


def test_the_plain_plan_tells_a_list_from_a_list_subclass() -> None:
    """The oracle above can fail: the plans of a plain list and of a subclass differ."""
    plain = _plain_plan(["history"], [list])
    subclass = _plain_plan(["history"], [_Records])

    assert plain != subclass
    assert attribute_layout_module._plan_layout(["history"], [_Records]) != plain
