"""A model's index is kept across its traces, and walked again after any change to the model."""

from __future__ import annotations

import copy
import gc
import weakref
from collections.abc import Callable

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.recording import model_index as model_index_module
from pytest_fwdorder.recording.model_index import ModelIndex, index_model
from pytest_fwdorder.recording.model_state import ModelState, capture_state


class Scaled(nn.Module):
    """A module with a setting, a buffer and a forward of its own."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor
        self.register_buffer("offset", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + self.offset


def build() -> nn.Sequential:
    return nn.Sequential(nn.Linear(2, 3), nn.LeakyReLU(0.1), Scaled(2.0)).eval()


def described(index: ModelIndex) -> list[object]:
    """What a trace takes from an index, by path: no ids, no module objects."""
    return [
        sorted(
            (entry.path, entry.module_type, entry.facts, entry.training)
            for entry in index.entries.values()
        ),
        index.aliases,
        index.callable_paths,
        index.tensors,
        [index.entries[id(module)].path for module in index.modules],
        [index.entries[id(module)].path for module in index.python_modules],
        index.python_paths,  # what the state capture names the modules by (warnings)
        index.facts_by_path,
        index.classes_by_path,
    ]


def kept_after_two_traces(model: nn.Module) -> ModelIndex:
    """The index a third trace would use: kept from the second trace on."""
    for _ in range(2):
        trace_forward(model, torch.ones(1, 2))
    first, second = index_model(model), index_model(model)
    assert second.entries is first.entries  # kept: the oracle below can see reuse
    return second


def test_an_unchanged_model_is_not_walked_again_and_its_kept_index_equals_a_walk() -> None:
    model = build()
    kept = kept_after_two_traces(model)
    fresh = index_model(copy.deepcopy(model))  # new objects: never seen, walked

    assert index_model(model).entries is kept.entries
    assert described(index_model(model)) == described(fresh)
    assert trace_forward(model, torch.ones(1, 2)).render() == (
        trace_forward(copy.deepcopy(model), torch.ones(1, 2)).render()
    )


def add_submodule(model: nn.Sequential) -> None:
    model.append(nn.Identity())


def replace_submodule_by_an_equal_one(model: nn.Sequential) -> None:
    model[1] = nn.LeakyReLU(0.1)


def replace_parameter(model: nn.Sequential) -> None:
    model[0].weight = nn.Parameter(torch.zeros(3, 2))


def replace_parameter_by_another_shape(model: nn.Sequential) -> None:
    model[0].bias = nn.Parameter(torch.zeros(1))


def change_setting(model: nn.Sequential) -> None:
    model[1].negative_slope = 0.2


def change_own_setting(model: nn.Sequential) -> None:
    model[2].factor = 3.0


def flip_requires_grad(model: nn.Sequential) -> None:
    model[0].weight.requires_grad_(False)


def change_data_in_place(model: nn.Sequential) -> None:
    with torch.no_grad():
        model[0].weight.add_(1.0)


def change_dtype(model: nn.Sequential) -> None:
    model[2].double()


def change_mode(model: nn.Sequential) -> None:
    model[2].train()


def add_buffer(model: nn.Sequential) -> None:
    model[1].register_buffer("scale", torch.ones(1))


def make_buffer_non_persistent(model: nn.Sequential) -> None:
    model[2]._non_persistent_buffers_set.add("offset")


def swap_class(model: nn.Sequential) -> None:
    model[1].__class__ = nn.ReLU


def delete_submodule(model: nn.Sequential) -> None:
    del model[1]


def patch_class_forward(model: nn.Sequential) -> None:
    class Other(Scaled):
        def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
            return x

    model[2].__class__ = Other


MUTATIONS: list[tuple[Callable[[nn.Sequential], None], bool]] = [
    # (the change, whether the kept index describes the model differently than a walk)
    (add_submodule, True),
    (replace_submodule_by_an_equal_one, False),
    (replace_parameter, False),
    (replace_parameter_by_another_shape, True),
    (change_setting, True),
    (change_own_setting, False),  # a class of the user's own: its attributes are not facts
    (flip_requires_grad, True),
    (change_data_in_place, False),
    (change_dtype, True),
    (change_mode, False),  # Scaled's code does not read its mode: no mode mark
    (add_buffer, True),
    (make_buffer_non_persistent, True),
    (swap_class, True),
    (delete_submodule, True),
    (patch_class_forward, True),
]


@pytest.mark.parametrize(
    ("mutate", "described_differently"),
    MUTATIONS,
    ids=[mutate.__name__ for mutate, _ in MUTATIONS],
)
def test_any_change_to_the_model_between_traces_makes_the_index_walked_again(
    mutate: Callable[[nn.Sequential], None], described_differently: bool
) -> None:
    model = build()
    kept = kept_after_two_traces(model)

    mutate(model)
    index = index_model(model)

    assert index.entries is not kept.entries
    fresh = index_model(copy.deepcopy(model))
    assert described(index) == described(fresh)
    # The oracle can fail: where the change shows, the kept index no longer describes it.
    assert (described(kept) != described(fresh)) is described_differently


def test_a_kept_index_does_not_keep_the_model_alive() -> None:
    model = build()
    kept_after_two_traces(model)
    alive = weakref.ref(model)

    del model
    gc.collect()

    assert alive() is None


def test_a_model_is_kept_from_its_second_walk_on() -> None:
    model = build()

    first, second, third = index_model(model), index_model(model), index_model(model)

    assert first.entries is not second.entries  # a model seen once pays a weak reference only
    assert third.entries is second.entries


def captured(state: ModelState) -> list[object]:
    """What a state capture holds that the put-back reads: objects by identity, flags by value."""
    return [
        list(map(id, state.modules)),
        state.paths,  # what a warning names a module by
        list(map(id, state.attribute_dicts)),
        state.attribute_lengths,
        state.attribute_names,
        list(map(id, state.attribute_values)),
        list(map(id, state.parameter_dicts)),
        list(map(id, state.watched)),
        [[(name, id(value)) for name, value in copy.items()] for copy in state.copies],
        list(map(id, state.every_dict)),
        state.watched_entries,
        list(map(id, state.parameters)),
        state.parameter_signatures,
        sorted(state.copied_buffers),
        [id(buffer) for group in state.buffer_values.groups for buffer in group.buffers],
        [id(buffer) for buffer, _ in state.buffer_values.singles],
    ]


def test_a_kept_index_gives_the_state_capture_what_a_walk_would() -> None:
    model = build()
    kept_after_two_traces(model)
    walked = model_index_module._walk_model(model, ask_plugins=False)

    from_kept = capture_state(index_model(model))

    assert captured(from_kept) == captured(capture_state(walked))
    # The oracle can fail: a parameter swapped for another makes the captures differ.
    before = captured(from_kept)
    model[0].bias = nn.Parameter(torch.zeros(3))
    assert captured(capture_state(index_model(model))) != before


def test_a_kept_index_reading_is_taken_by_one_capture_only() -> None:
    model = build()
    kept_after_two_traces(model)
    index = index_model(model)

    assert index.reading is not None
    capture_state(index)
    assert index.reading is None  # a second capture reads the model itself


class HoldsNones(nn.Module):
    """A None child and a None parameter: the places the kept index marks one past the last."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 3, bias=False)
        self.register_module("spare", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def fill_none_child(model: HoldsNones) -> None:
    model.spare = nn.Identity()


def fill_none_parameter(model: HoldsNones) -> None:
    model.linear.bias = nn.Parameter(torch.zeros(3))


@pytest.mark.parametrize("fill", [fill_none_child, fill_none_parameter])
def test_a_none_child_or_parameter_filled_between_traces_makes_the_index_walked_again(
    fill: Callable[[HoldsNones], None],
) -> None:
    model = HoldsNones()
    for _ in range(2):
        trace_forward(model, torch.ones(1, 2))
    kept = index_model(model)
    assert index_model(model).entries is kept.entries  # kept, Nones and all

    fill(model)

    assert index_model(model).entries is not kept.entries
