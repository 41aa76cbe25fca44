"""The model argument: what is refused with what to do instead, and which wrappers are unwrapped."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from pytest_fwdorder import FwdOrderWarning, trace_forward


class SharedActivation(nn.Module):
    """conv -> relu -> linear -> relu: one ReLU instance, called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.conv(x)).mean(dim=(2, 3))
        return self.relu(self.head(x))


def scripted(module: nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        result: torch.jit.ScriptModule = torch.jit.script(module)
    return result


def test_a_non_module_is_rejected_with_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match=r"expected an nn.Module, got 'int'"):
        trace_forward(3, torch.randn(1))  # type: ignore[arg-type]


def test_passing_forward_instead_of_the_model_says_so() -> None:
    model = nn.Linear(2, 2)

    with pytest.raises(TypeError, match="pass the model, not its forward method"):
        trace_forward(model.forward, torch.randn(1, 2))  # type: ignore[arg-type]


def test_a_module_class_is_named_as_a_class() -> None:
    """Issue 8, defect 12: a module class where the model belongs was not named as one."""
    with pytest.raises(
        TypeError, match=r"got 'type': that is the class; pass an instance \(Linear\(\.\.\.\)\)"
    ):
        trace_forward(nn.Linear, torch.randn(2))


def test_a_tensor_where_the_model_belongs_hints_at_the_argument_order() -> None:
    """Issue 8, defect 12: a tensor where the model belongs did not say the model comes first."""
    with pytest.raises(TypeError, match=r"the model comes first, then its inputs"):
        trace_forward(torch.randn(2), nn.Linear(2, 2))  # type: ignore[arg-type]


def test_a_torchscript_module_is_rejected_with_what_to_do() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        scripted = torch.jit.script(nn.Linear(2, 2))

    with pytest.raises(
        TypeError, match=r"cannot trace a TorchScript module .* before torch.jit.script"
    ):
        trace_forward(scripted, torch.randn(1, 2))


def test_a_fully_scripted_model_keeps_its_clear_type_error() -> None:
    """Issue 8, defect 1: supporting scripted submodules must keep this refusal."""
    with pytest.raises(TypeError, match="cannot trace a TorchScript module"):
        trace_forward(scripted(nn.Linear(4, 2)), torch.randn(1, 4))


def test_a_data_parallel_wrapper_is_unwrapped_with_a_warning() -> None:
    inner = SharedActivation()
    wrapped = nn.DataParallel(inner)

    with pytest.warns(FwdOrderWarning, match="traced the module inside DataParallel"):
        trace = trace_forward(wrapped, torch.randn(1, 3, 8, 8))

    assert trace.root_type == "SharedActivation"
    assert trace == trace_forward(inner, torch.randn(1, 3, 8, 8))


def test_a_compiled_model_is_unwrapped_with_a_warning() -> None:
    inner = SharedActivation()
    compiled = torch.compile(inner)

    with pytest.warns(FwdOrderWarning, match="traced the module inside OptimizedModule"):
        trace = trace_forward(compiled, torch.randn(1, 3, 8, 8))

    assert trace == trace_forward(inner, torch.randn(1, 3, 8, 8))
