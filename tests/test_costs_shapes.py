"""The costs facet's shape formulas: tensors given as torch gives them, each shape worked out once."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch
from flop_oracle import per_module
from torch import nn
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode, get_shape, register_flop_formula

from pytest_fwdorder import trace_forward
from pytest_fwdorder.facets.cost_counting import CostMode, shape_key, shapes_of

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


def test_a_formula_runs_once_per_shape_and_counts_at_every_call() -> None:
    model = nn.Sequential(Tally(), Tally(), nn.Flatten(0), Tally(), Tally())
    FORMULA_CALLS.clear()
    trace = trace_forward(model, torch.randn(2, 3), costs=True)
    assert FORMULA_CALLS == [(2, 3), (6,)]
    assert [call.costs.flops for call in trace.calls if call.costs is not None] == [
        4 * 3 * 6,
        18,
        18,
        0,
        18,
        18,
    ]


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
    mode = CostMode(SimpleNamespace(open_calls=[]), set())  # type: ignore[arg-type]
    calls: list[object] = []

    def formula(x_shape: torch.Size, options: object, *, out_shape: object = None) -> int:
        calls.append(options)
        return 2 * x_shape.numel()

    tensor = torch.zeros(2, 3)
    for _ in range(2):
        assert mode._shape_flops(formula, (tensor, {"unhashable"}), {}, tensor) == 12
        assert mode._shape_flops(formula, (tensor, ("hashable",)), {}, tensor) == 12
        # A schema that promised tensors alone, given something else: no shape to key by.
        assert mode._shape_flops(formula, (tensor, 3), {}, tensor, tensors_only=True) == 12
    assert calls == [{"unhashable"}, ("hashable",), 3, {"unhashable"}, 3]
