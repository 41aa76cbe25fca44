"""Hostile models: each one a way real code breaks naive recorders."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
import torch
import torch.utils.checkpoint
from torch import nn
from torch.nn.modules import module as torch_module

from pytest_fwdorder import record, trace_forward


def global_hook_count() -> int:
    return len(torch_module._global_forward_hooks) + len(torch_module._global_forward_pre_hooks)


def test_no_trace_of_our_hooks_is_left_in_torch() -> None:
    # torch's handle.remove() forgets the with_kwargs flag of a global hook; we must not.
    trace_forward(nn.Linear(2, 2), torch.randn(1, 2))

    assert not torch_module._has_any_global_hook()


def test_ten_thousand_tiny_modules_are_each_recorded() -> None:
    model = nn.Sequential(*[nn.Identity() for _ in range(10_000)])

    trace = trace_forward(model, torch.randn(1))

    assert len(trace) == 10_001
    assert trace[-1].path == "9999"
    assert trace.unused() == []


# Outside the model: a trace puts the model's own lists back (issue 20, item 8).
HOOK_RUNS: list[str] = []


class RegistersHooksInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        handle = self.inner.register_forward_hook(
            lambda module, args, output: HOOK_RUNS.append("hook")
        )
        global_handle = torch_module.register_module_forward_pre_hook(lambda module, args: None)
        try:
            return self.inner(x)
        finally:
            handle.remove()
            global_handle.remove()


def test_a_model_that_adds_and_removes_its_own_hooks_in_forward_is_traced() -> None:
    model = RegistersHooksInForward()
    HOOK_RUNS.clear()

    trace = trace_forward(model, torch.randn(1, 2))

    assert [call.path for call in trace] == ["", "inner"]
    assert HOOK_RUNS == ["hook"]
    assert global_hook_count() == 0


class HookCaller(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(2, 2)
        self.probe = nn.Tanh()
        self.first.register_forward_pre_hook(lambda module, args: (self.probe(args[0]),))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.first(x)


def test_a_module_called_from_inside_a_user_hook_is_recorded_where_it_ran() -> None:
    trace = trace_forward(HookCaller(), torch.randn(1, 2))

    # Our pre-hook runs before the user's, so the hook's call nests inside `first`.
    assert [(call.path, call.depth) for call in trace] == [("", 0), ("first", 1), ("probe", 2)]


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)
        return self.head(x)


def test_activation_checkpointing_runs_the_block_once_in_forward() -> None:
    trace = trace_forward(Checkpointed(), torch.randn(2, 4, requires_grad=True))

    assert trace.counts() == {"": 1, "block": 1, "block.0": 1, "block.1": 1, "head": 1}


def test_activation_checkpointing_recomputes_the_block_in_backward() -> None:
    model = Checkpointed()
    with record(model) as trace:
        model(torch.randn(2, 4, requires_grad=True)).sum().backward()

    # What really ran: the checkpointed block a second time, during backward.
    assert trace.counts() == {"": 1, "block": 2, "block.0": 2, "block.1": 2, "head": 1}
    assert [call.depth for call in trace.find("block")] == [1, 0]


def make_encoder() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()


def test_the_transformer_fast_path_shows_that_submodules_were_skipped() -> None:
    encoder = make_encoder()
    tokens = torch.randn(1, 5, 16)

    with torch.no_grad():
        fast = trace_forward(encoder, tokens)
    slow = trace_forward(encoder, tokens)

    # Under no_grad in eval mode each layer runs one fused kernel: no submodule call.
    assert [call.path for call in fast] == ["", "layers.0", "layers.1"]
    assert "layers.0.self_attn" in slow.counts()
    assert "layers.0.linear1" in slow.counts()


def test_a_thousand_traces_leak_neither_hooks_nor_memory() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU())
    inputs = torch.randn(4, 8)
    for _ in range(50):  # warm caches (dtype and device names, lazy imports)
        trace_forward(model, inputs)
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()

    for _ in range(1000):
        trace_forward(model, inputs)
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert global_hook_count() == 0
    assert not model._forward_hooks
    assert not model._forward_pre_hooks
    assert after - before < 64 * 1024, f"{after - before} bytes kept after 1000 traces"


def test_an_exception_inside_a_record_block_removes_the_hooks() -> None:
    model = nn.Linear(2, 2)

    def use_model_then_fail() -> None:
        with record(model):
            model(torch.randn(1, 2))
            raise KeyError("user error")

    with pytest.raises(KeyError, match="user error"):
        use_model_then_fail()

    assert global_hook_count() == 0
