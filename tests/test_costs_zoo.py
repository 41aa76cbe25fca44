"""`costs=True` on six torchvision models against torch's own `FlopCounterMode`, and meta
against the CPU: the totals, the per-module breakdown, and the golden's costs lines."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torchvision
from flop_oracle import per_module
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from pytest_fwdorder import TensorSpec, trace_forward

# (name, image side, whether the CPU runs it too): ViT-B/16 needs 224, run on meta only.
MODELS = [
    ("resnet18", 64, True),
    ("mobilenet_v3_small", 64, True),
    ("squeezenet1_1", 64, True),
    ("efficientnet_b0", 64, True),
    ("convnext_tiny", 64, True),
    ("vit_b_16", 224, False),
]
pytestmark = pytest.mark.slow


def factory(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        model: nn.Module = getattr(torchvision.models, name)(weights=None)
        return model.eval()

    build.__qualname__ = name
    return build


def flop_counter_on_meta(build: Callable[[], nn.Module], side: int) -> FlopCounterMode:
    """FlopCounterMode's count of the model built and run on meta, as the trace runs it."""
    with torch.device("meta"):
        model = build()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.empty(1, 3, side, side, device="meta"))
    return counter


def costs_lines(text: str) -> list[str]:
    """The golden's costs: the totals, the uncounted operations, each call's costs fact."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("# costs: "))
    end = next(index for index, line in enumerate(lines) if not line.startswith("#"))
    return lines[start:end] + [line for line in lines[end:] if line.lstrip().startswith("| costs:")]


@pytest.mark.parametrize(("name", "side", "on_cpu"), MODELS, ids=[name for name, *_ in MODELS])
def test_flops_equal_flop_counter_modes_in_total_and_per_module(
    name: str, side: int, on_cpu: bool
) -> None:
    build = factory(name)
    with torch.no_grad():
        trace = trace_forward(build, TensorSpec((1, 3, side, side)), device="meta", costs=True)
    counter = flop_counter_on_meta(build, side)

    assert trace.costs is not None
    assert trace.costs.flops == counter.get_total_flops() > 0
    found = per_module(trace)
    expected = {
        module: sum(counts.values())
        for module, counts in counter.get_flop_counts().items()
        if module != "Global"
    }
    assert len(expected) > 1, "FlopCounterMode gave no per-module breakdown"
    assert {module: found.get(module) for module in expected} == expected


@pytest.mark.parametrize(
    ("name", "side"), [(name, side) for name, side, on_cpu in MODELS if on_cpu]
)
def test_costs_lines_on_meta_are_those_on_the_cpu(name: str, side: int) -> None:
    build = factory(name)
    torch.manual_seed(0)
    with torch.no_grad():
        on_cpu = trace_forward(build(), torch.randn(1, 3, side, side), costs=True)
        on_meta = trace_forward(build, TensorSpec((1, 3, side, side)), device="meta", costs=True)

    assert costs_lines(on_meta.render()) == costs_lines(on_cpu.render())
    assert len(costs_lines(on_cpu.render())) > len(on_cpu.calls)


def test_the_comparison_fails_when_the_flops_differ() -> None:
    # The oracle can fail: the same model counted on a larger image is not equal.
    build = factory("squeezenet1_1")
    with torch.no_grad():
        trace = trace_forward(build, TensorSpec((1, 3, 64, 64)), device="meta", costs=True)
    counter = flop_counter_on_meta(build, 72)

    assert trace.costs is not None
    assert trace.costs.flops != counter.get_total_flops()
