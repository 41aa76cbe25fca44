"""Stand-ins for a meta trace: made from the user's own tensors, which stay where they were."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from pytest_fwdorder import FwdOrderWarning, MetaTraceError, TensorSpec, trace_forward


def test_a_module_registered_twice_is_not_frozen_on_meta() -> None:
    """Issue 8, defect 2: a module registered under two names showed as [frozen] on meta."""
    linear = nn.Linear(10, 10)
    model = nn.Sequential(linear, nn.ReLU(), linear)

    on_cpu = trace_forward(model, torch.randn(1, 10))
    on_meta = trace_forward(model, TensorSpec((1, 10)), device="meta")

    assert on_meta.render() == on_cpu.render()
    assert not any(call.frozen for call in on_meta)


def test_an_uninitialized_lazy_parameter_on_meta_is_a_meta_trace_error_naming_it() -> None:
    """Issue 8, defect 4: a lazy parameter on meta raised torch's raw error, misleadingly."""
    model = nn.Sequential(nn.LazyLinear(3))

    with pytest.raises(
        MetaTraceError, match=r"lazy parameter '0\.weight' is not initialized"
    ) as raised:
        trace_forward(model, TensorSpec((1, 4)), device="meta")

    assert not any("forward raised" in note for note in getattr(raised.value, "__notes__", []))
    assert isinstance(model[0].weight, nn.UninitializedParameter)


class QuantizedBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # quantized tensors are deprecated
            codes = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
        self.register_buffer("codes", codes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_a_stand_in_that_cannot_be_made_leaves_every_weight_where_it_was() -> None:
    """Found reviewing 0.2.0: when one stand-in fails, those already made are put back."""
    model = QuantizedBuffer()

    with pytest.raises(MetaTraceError, match="cannot make stand-ins on 'meta'"):
        trace_forward(model, TensorSpec((1, 2)), device="meta")

    assert model.linear.weight.device.type == "cpu"
    assert model(torch.ones(1, 2)).shape == (1, 2)


class PlainListNorm(nn.Module):
    """Keeps its BatchNorm in a plain list: reached in forward, not registered."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = [nn.BatchNorm1d(2)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norms[0](x)


def test_an_unregistered_module_gets_stand_ins_on_meta() -> None:
    """Found reviewing 0.2.0: a module kept in a plain list was given no stand-ins."""
    model = PlainListNorm().eval()

    with pytest.warns(FwdOrderWarning, match="not registered"):
        trace = trace_forward(model, TensorSpec((4, 2)), device="meta")

    assert trace[1].output_tensors[0].device == "meta"
    assert model.norms[0].weight.device.type == "cpu"
