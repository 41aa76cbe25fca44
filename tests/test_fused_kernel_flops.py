"""Fused CPU kernels are counted by the formula of what they compute (issue 33, defect 3).

The oracle is FlopCounterMode on meta, where torch runs the operations the CPU's fused
kernels stand for, each with a torch formula. The CPU figure, per call and in total,
must equal it: the LSTM of the issue was 0 FLOPs on the CPU and 11,520 on meta.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional
from torch.utils.flop_counter import FlopCounterMode

from pytest_fwdorder import trace_forward
from pytest_fwdorder.facets.cost_counting import cost_formulas
from pytest_fwdorder.facets.fused_kernel_flops import fused_kernel_formulas


class Attention(nn.Module):
    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return functional.scaled_dot_product_attention(query, key, value, **self.options)


def encoder_layer() -> nn.Module:
    return nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()


CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[Any, ...]], bool]] = {
    "lstm": (lambda: nn.LSTM(4, 8), lambda: (torch.randn(5, 3, 4),), False),
    "lstm-2-layers-bidirectional-batch-first": (
        lambda: nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True),
        lambda: (torch.randn(3, 5, 4),),
        False,
    ),
    "lstm-unbatched-no-bias": (
        lambda: nn.LSTM(4, 6, bias=False),
        lambda: (torch.randn(5, 4),),
        False,
    ),
    "gru": (lambda: nn.GRU(4, 8, num_layers=2), lambda: (torch.randn(5, 3, 4),), False),
    "rnn-relu-bidirectional": (
        lambda: nn.RNN(4, 8, nonlinearity="relu", bidirectional=True),
        lambda: (torch.randn(5, 3, 4),),
        False,
    ),
    "attention": (Attention, lambda: (torch.randn(2, 2, 5, 4),) * 3, False),
    "attention-causal-cross": (
        lambda: Attention(is_causal=True),
        lambda: (torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 6)),
        False,
    ),
    "multi-head-attention-eval-no-grad": (
        lambda: nn.MultiheadAttention(8, 2, batch_first=True).eval(),
        lambda: ((x := torch.randn(2, 5, 8)), x, x),
        True,
    ),
    "multi-head-attention-train": (
        lambda: nn.MultiheadAttention(8, 2, batch_first=True),
        lambda: ((x := torch.randn(2, 5, 8)), x, x),
        False,
    ),
}


def flop_counter_on_meta(model: nn.Module, inputs: tuple[Any, ...], no_grad: bool) -> int:
    """FlopCounterMode's total for a meta copy of the model (an input given twice stays one)."""
    meta_model = copy.deepcopy(model).to("meta")
    placed: dict[int, torch.Tensor] = {}
    meta_inputs = tuple(placed.setdefault(id(x), x.to("meta")) for x in inputs)
    with FlopCounterMode(display=False) as counter, torch.no_grad() if no_grad else nullcontext():
        meta_model(*meta_inputs)
    return int(counter.get_total_flops())


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_flops_equal_flop_counter_modes_on_meta(name: str) -> None:
    build, inputs_of, no_grad = CASES[name]
    torch.manual_seed(0)
    model, inputs = build(), inputs_of()
    with torch.no_grad() if no_grad else nullcontext():
        cpu = trace_forward(model, *inputs, costs=True)
        meta = trace_forward(model, *inputs, costs=True, device="meta")
    expected = flop_counter_on_meta(model, inputs, no_grad)

    assert cpu.costs is not None
    assert meta.costs is not None
    assert cpu.costs.flops == meta.costs.flops == expected > 0
    assert [call.costs.flops for call in cpu.calls] == [call.costs.flops for call in meta.calls]
    assert not {kernel for kernel, _ in cpu.costs.uncounted} & {
        str(k) for k in fused_kernel_formulas()
    }


def test_the_issue_reproduction_lstm_is_no_longer_zero_flops_on_the_cpu() -> None:
    lstm, x = nn.LSTM(4, 8), torch.randn(5, 3, 4)
    cpu = trace_forward(lstm, x, costs=True)
    meta = trace_forward(lstm, x, costs=True, device="meta")

    assert cpu.costs is not None
    assert meta.costs is not None
    assert cpu.costs.flops == meta.costs.flops == 11_520


def test_the_flop_oracle_can_fail() -> None:
    # A longer sequence costs more: the oracle tells the two apart.
    lstm = nn.LSTM(4, 8)
    cpu = trace_forward(lstm, torch.randn(5, 3, 4), costs=True)

    assert cpu.costs is not None
    assert cpu.costs.flops != flop_counter_on_meta(lstm, (torch.randn(6, 3, 4),), False)


def test_torch_formula_wins_over_ours_where_a_release_has_one() -> None:
    ours = fused_kernel_formulas()
    kernel = next(iter(ours))

    def torch_formula(*args: object, **kwargs: object) -> int:
        return 0

    assert cost_formulas({})[kernel] is ours[kernel]
    assert cost_formulas({kernel: torch_formula})[kernel] is torch_formula
