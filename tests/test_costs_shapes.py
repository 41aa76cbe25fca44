"""The costs facet's shape formulas: tensors given as torch gives them, each shape worked out once."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch
from flop_oracle import per_module
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import (
    FlopCounterMode,
    flop_registry,
    get_shape,
    register_flop_formula,
)

from pytest_fwdorder import trace_forward
from pytest_fwdorder.facets.cost_counting import CostMode
from pytest_fwdorder.facets.shape_keys import key_by_looking, key_for_schema, shape_key, shapes_of
from pytest_fwdorder.facets.storage_bytes import SavedTensors

torch.library.define("fwdorder_costs_shapes::tally", "(Tensor x) -> Tensor")
# The shapes the formula below was called with, in order: how often it was worked out.
FORMULA_CALLS: list[tuple[int, ...]] = []


@torch.library.impl("fwdorder_costs_shapes::tally", "CompositeExplicitAutograd")
def _tally(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@register_flop_formula(torch.ops.fwdorder_costs_shapes.tally)
def _tally_flops(x_shape: torch.Size, *args: object, out_shape: object = None) -> int:
    FORMULA_CALLS.append(tuple(x_shape))
    return 3 * x_shape.numel()


class Tally(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.fwdorder_costs_shapes.tally(x)


Pair = namedtuple("Pair", ["first", "second"])


def test_shapes_of_gives_what_torchs_shape_wrapper_gives() -> None:
    # The oracle is torch's own conversion, `tree_map(get_shape, ...)` as `shape_wrapper` does.
    tensor, matrix = torch.zeros(2, 3), torch.zeros(4, 5)
    values = [
        tensor,
        (tensor, 1, None, [matrix, 2.5]),
        [1, 2, 3],
        {"weight": matrix, "eps": 1e-5},
        Pair(tensor, [matrix]),
        torch.Size([7, 8]),
        torch.float32,
        (),
    ]
    for value in values:
        assert shapes_of(value) == tree_map(get_shape, value), value


def test_shape_keys_tell_shapes_and_values_apart_and_refuse_named_tuples() -> None:
    tensor = torch.zeros(2, 3)
    assert shape_key((tensor, [1, 1], None)) == shape_key((torch.ones(2, 3), [1, 1], None))
    assert shape_key((tensor, [1, 1])) != shape_key((tensor, [2, 2]))
    assert shape_key((tensor,)) != shape_key((torch.zeros(3, 2),))
    # A named tuple would be keyed by its tensors' ids, which a later tensor may reuse.
    with pytest.raises(TypeError, match="not cached: Pair"):
        shape_key(Pair(tensor, tensor))


def test_a_formula_runs_once_per_shape_in_the_process_and_counts_at_every_call() -> None:
    # Shapes no other test traces: the figures are kept for the process.
    model = nn.Sequential(Tally(), Tally(), nn.Flatten(0), Tally(), Tally())
    FORMULA_CALLS.clear()
    first = trace_forward(model, torch.randn(3, 11), costs=True)
    assert FORMULA_CALLS == [(3, 11), (33,)]
    second = trace_forward(model, torch.randn(3, 11), costs=True)
    assert FORMULA_CALLS == [(3, 11), (33,)]
    for trace in (first, second):
        assert [call.costs.flops for call in trace.calls if call.costs is not None] == [
            4 * 3 * 33,
            99,
            99,
            0,
            99,
            99,
        ]


def test_a_formula_registered_since_counts_shapes_already_kept() -> None:
    model = nn.Sequential(Tally(), Tally())
    before = trace_forward(model, torch.randn(5, 13), costs=True)
    tally = torch.ops.fwdorder_costs_shapes.tally
    formula = flop_registry.pop(tally)
    register_flop_formula(tally)(lambda x_shape, *args, out_shape=None: 7 * x_shape.numel())
    try:
        after = trace_forward(model, torch.randn(5, 13), costs=True)
    finally:
        flop_registry[tally] = formula
    assert before.costs is not None
    assert after.costs is not None
    assert (before.costs.flops, after.costs.flops) == (2 * 3 * 65, 2 * 7 * 65)


def test_repeated_and_changing_shapes_count_as_flop_counter_mode_counts_them() -> None:
    model = nn.Sequential(
        nn.Linear(16, 32), nn.Linear(32, 16), nn.Linear(16, 32), nn.Linear(32, 32), Tally()
    )
    for batch in (1, 5):
        inputs = torch.randn(batch, 16)
        trace = trace_forward(model, inputs, costs=True)
        with FlopCounterMode(display=False) as counter:
            model(inputs)
        expected = {
            name: sum(counts.values())
            for name, counts in counter.get_flop_counts().items()
            if name != "Global"
        }
        assert trace.costs is not None
        assert trace.costs.flops == counter.get_total_flops()
        found = per_module(trace)
        assert {name: found[name] for name in expected} == expected


def test_an_unhashable_argument_is_worked_out_at_every_run_with_the_same_figure() -> None:
    mode = CostMode(SimpleNamespace(open_calls=[]), SavedTensors(set()))  # type: ignore[arg-type]
    calls: list[object] = []

    def formula(x_shape: torch.Size, options: object, *, out_shape: object = None) -> int:
        calls.append(options)
        return 2 * x_shape.numel()

    tensor = torch.zeros(2, 3)
    for _ in range(2):
        assert mode._shape_flops(formula, (tensor, {"unhashable"}), {}, tensor) == 12
        assert mode._shape_flops(formula, (tensor, ("hashable",)), {}, tensor) == 12
        # A schema that promised tensors alone, given something else: no shape to key by.
        tensors_only = key_for_schema(torch.ops.aten.mm.default)
        assert mode._shape_flops(formula, (tensor, 3), {}, tensor, tensors_only) == 12
    assert calls == [{"unhashable"}, ("hashable",), 3, {"unhashable"}, 3]


class _OperationsSeen(TorchDispatchMode):  # type: ignore[misc]
    """Keeps every aten operation that runs, with its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[torch._ops.OpOverload, tuple[object, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.seen.append((func, args))
        return func(*args, **(kwargs or {}))


def test_keys_made_for_the_schema_equal_keys_made_by_looking_at_each_value() -> None:
    # The oracle is `key_by_looking`, which reads each value's type; the operations and
    # their arguments are those a model's forward really dispatches.
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ConvTranspose2d(4, 2, 2, stride=2, output_padding=0),
        nn.Flatten(),
        nn.Linear(2 * 8 * 8, 5),
        nn.LayerNorm(5),
    ).eval()
    with torch.no_grad(), _OperationsSeen() as mode:
        model(torch.randn(2, 3, 8, 8))
    operations = {str(operation) for operation, _ in mode.seen}
    assert {"aten.convolution.default", "aten.addmm.default"} <= operations
    for operation, args in mode.seen:
        assert key_for_schema(operation)(args) == key_by_looking(args), operation


def test_a_schema_key_changes_with_every_argument_of_a_convolution() -> None:
    convolution = torch.ops.aten.convolution.default
    key = key_for_schema(convolution)
    weight = torch.zeros(4, 3, 3, 3)
    args = (torch.zeros(1, 3, 8, 8), weight, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    changed = [
        torch.zeros(1, 3, 9, 9),
        torch.zeros(4, 3, 1, 1),
        torch.zeros(4),
        [2, 2],
        [1, 1],
        [2, 2],
        True,
        [1, 1],
        3,
    ]
    assert len(changed) == len(args)
    for position, value in enumerate(changed):
        other = (*args[:position], value, *args[position + 1 :])
        assert key(other) != key(args), position
    # Values alone do not change it: shapes are what the formulas read.
    assert key((torch.ones(1, 3, 8, 8), torch.ones_like(weight), *args[2:])) == key(args)
    # Trailing defaults left out give a shorter key, not another operation's.
    assert key(args[:3]) == (args[0].shape, weight.shape, None)


def test_a_schema_key_given_more_values_than_its_schema_looks_at_each() -> None:
    key = key_for_schema(torch.ops.aten.mean.dim)  # (Tensor self, int[1]? dim, bool keepdim)
    tensor = torch.zeros(2, 3)
    assert key((tensor, [1], False, [tensor])) == (tensor.shape, (1,), False, (tensor.shape,))
    with pytest.raises(TypeError, match="not cached: Pair"):
        key((tensor, [1], False, Pair(tensor, tensor)))
