"""A trace of a lazy module leaves it as one plain first forward would (issue 33, defect 1).

The initialization stays (the class, the materialized tensors' shapes, the attributes it
set such as `in_channels`); what forward did after it (running statistics) is put back.
The oracle is a twin built the same way that ran one plain forward. Every lazy class
`torch.nn` exports is covered: a new one fails `test_every_lazy_class_torch_has_is_covered`
until it gets a row here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from pytest_fwdorder import trace_forward

# torch's own bookkeeping in a module's __dict__ (hooks, children): not the module's settings.
_INTERNALS = frozenset(vars(nn.Module())) - {"training"}

# Each lazy class: how to build it (several settings) and an input it accepts.
LAZY_CASES: dict[str, list[tuple[Callable[[], nn.Module], tuple[int, ...]]]] = {
    "LazyLinear": [
        (lambda: nn.LazyLinear(3), (2, 4)),
        (lambda: nn.LazyLinear(3, bias=False), (5,)),
    ],
    "LazyConv1d": [
        (lambda: nn.LazyConv1d(3, 2), (1, 4, 5)),
        (lambda: nn.LazyConv1d(4, 3, groups=2), (1, 6, 7)),
    ],
    "LazyConv2d": [(lambda: nn.LazyConv2d(3, 2, stride=2), (1, 4, 6, 6))],
    "LazyConv3d": [(lambda: nn.LazyConv3d(2, 2, bias=False), (1, 3, 4, 4, 4))],
    "LazyConvTranspose1d": [(lambda: nn.LazyConvTranspose1d(3, 2), (1, 4, 5))],
    "LazyConvTranspose2d": [(lambda: nn.LazyConvTranspose2d(2, 3, groups=2), (1, 4, 3, 3))],
    "LazyConvTranspose3d": [(lambda: nn.LazyConvTranspose3d(2, 2), (1, 3, 2, 2, 2))],
    "LazyBatchNorm1d": [
        (lambda: nn.LazyBatchNorm1d(), (4, 3)),
        (lambda: nn.LazyBatchNorm1d(affine=False), (4, 3, 5)),
    ],
    "LazyBatchNorm2d": [(lambda: nn.LazyBatchNorm2d(), (2, 3, 4, 4))],
    "LazyBatchNorm3d": [(lambda: nn.LazyBatchNorm3d(track_running_stats=False), (2, 3, 2, 2, 2))],
    "LazyInstanceNorm1d": [
        (lambda: nn.LazyInstanceNorm1d(affine=True), (2, 4, 5)),
        (lambda: nn.LazyInstanceNorm1d(track_running_stats=True), (2, 4, 5)),
    ],
    "LazyInstanceNorm2d": [(lambda: nn.LazyInstanceNorm2d(affine=True), (2, 3, 4, 4))],
    "LazyInstanceNorm3d": [
        (lambda: nn.LazyInstanceNorm3d(affine=True, track_running_stats=True), (2, 3, 2, 2, 2))
    ],
}


def lazy_classes() -> list[str]:
    """Every lazy module class torch.nn exports, by name."""
    return sorted(
        name
        for name, value in vars(nn).items()
        if isinstance(value, type) and issubclass(value, LazyModuleMixin)
    )


def test_every_lazy_class_torch_has_is_covered() -> None:
    assert lazy_classes() == sorted(LAZY_CASES)


def settings_of(module: nn.Module) -> dict[str, object]:
    """The module's own attributes that are not torch's bookkeeping nor tensors."""
    return {name: value for name, value in vars(module).items() if name not in _INTERNALS}


def tensor_layouts(module: nn.Module) -> dict[str, tuple[type, torch.Size, torch.dtype]]:
    return {
        name: (type(tensor), tensor.shape, tensor.dtype)
        for name, tensor in module.state_dict(keep_vars=True).items()
    }


CASES = [
    pytest.param(build, shape, id=f"{name}-{number}")
    for name, builds in sorted(LAZY_CASES.items())
    for number, (build, shape) in enumerate(builds)
]


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize(("build", "shape"), CASES)
def test_a_traced_lazy_module_equals_a_twin_after_one_plain_forward(
    build: Callable[[], nn.Module], shape: tuple[int, ...], mode: str
) -> None:
    traced, twin = build().train(mode == "train"), build().train(mode == "train")
    inputs = torch.randn(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "forward changed parameters in place" (test_put_back)
        trace_forward(traced, inputs)
    twin(inputs)

    assert type(traced) is type(twin)
    assert settings_of(traced) == settings_of(twin)
    assert tensor_layouts(traced) == tensor_layouts(twin)
    assert len(traced._forward_pre_hooks) == len(twin._forward_pre_hooks) == 0
    assert traced(inputs).shape == twin(inputs).shape  # plain use after the trace works


def test_the_issue_reproduction_lazy_conv_keeps_in_channels() -> None:
    traced, plain = nn.LazyConv1d(3, 2), nn.LazyConv1d(3, 2)
    x = torch.randn(1, 4, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace_forward(traced, x)
    plain(x)

    assert (traced.weight.shape, traced.in_channels) == (torch.Size([3, 4, 2]), 4)
    assert plain.in_channels == 4


def test_a_lazy_instance_norm_works_for_plain_use_after_a_trace() -> None:
    module = nn.LazyInstanceNorm1d(affine=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace_forward(module, torch.randn(2, 4, 5))

    assert module(torch.randn(2, 4, 5)).shape == (2, 4, 5)
    assert module.num_features == 4


def test_what_forward_did_after_the_initialization_is_put_back() -> None:
    """Running statistics: the initialization's values stay, forward's update does not."""
    module = nn.LazyBatchNorm1d()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace_forward(module, torch.randn(8, 3) + 5)

    assert torch.equal(module.running_mean, torch.zeros(3))
    assert torch.equal(module.running_var, torch.ones(3))
    assert module.num_batches_tracked.item() == 0


def test_the_later_golden_names_the_initialized_settings() -> None:
    module = nn.LazyConv1d(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace_forward(module, torch.randn(1, 4, 5))

    assert "in_channels=4" in trace_forward(module, torch.randn(1, 4, 5)).render()


class KeepsALazyLayerInAPlainList(nn.Module):
    """An unregistered lazy layer: the trace meets it at its first call only."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.LazyLinear(3)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[0](x)


def test_an_unregistered_lazy_module_keeps_its_initialized_settings_too() -> None:
    model = KeepsALazyLayerInAPlainList()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unregistered-parameters warning
        trace_forward(model, torch.randn(2, 4))

    assert type(model.layers[0]) is nn.Linear
    assert model.layers[0].in_features == 4
    assert model.layers[0](torch.randn(2, 4)).shape == (2, 3)
