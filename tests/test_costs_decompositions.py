"""`costs=True` counts an operation through its decomposition once per argument layout, then
runs the operation's own kernel, as the bare forward does, and adds what was counted.

What a decomposition counted is kept for the process: each test uses shapes no other test
uses (7x5 images), so that it meets its layouts first.
"""

from __future__ import annotations

from collections import Counter
from math import prod
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, register_flop_formula

from pytest_fwdorder import trace_forward
from pytest_fwdorder.facets.cost_counting import CostMode
from pytest_fwdorder.facets.storage_bytes import SavedTensors

_DECOMPOSED = "aten._native_batch_norm_legit_no_training.default"
_OWN_KERNEL = "aten.native_batch_norm.default"


class KernelsRun(TorchDispatchMode):  # type: ignore[misc]
    """An outer dispatch mode: the aten operations that reach it, by name.

    Entered before a trace, it sits under the costs facet's mode and sees what that mode runs:
    a decomposition's operations, or the operation itself.
    """

    def __init__(self) -> None:
        super().__init__()
        self.names: Counter[str] = Counter()

    def __torch_dispatch__(  # type: ignore[no-untyped-def]
        self, func, types, args=(), kwargs=None
    ):
        self.names[str(func)] += 1
        return func(*args, **(kwargs or {}))


class Norms(nn.Module):
    """Four batch norm calls in two layouts: `first` called twice, `second` in its layout."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.BatchNorm2d(4)
        self.second = nn.BatchNorm2d(4)
        self.widen = nn.Conv2d(4, 8, 1)
        self.wide = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.second(self.first(self.first(x)))
        return self.wide(self.widen(x))


def _kernels(run: Any) -> Counter[str]:
    with KernelsRun() as kernels:
        run()
    return kernels.names


def test_a_decomposed_operation_is_decomposed_once_per_layout_then_runs_its_own_kernel() -> None:
    model, image = Norms().eval(), torch.randn(3, 4, 7, 5)
    bare = _kernels(lambda: model(image))
    assert (bare[_OWN_KERNEL], bare[_DECOMPOSED]) == (4, 0)  # the oracle sees the kernels run
    traced = _kernels(lambda: trace_forward(model, image, costs=True))
    # Decomposed at the first call of each layout (4 and 8 channels), its own kernel after,
    # in this trace and the next.
    assert (traced[_OWN_KERNEL], traced[_DECOMPOSED]) == (2, 2)
    again = _kernels(lambda: trace_forward(model, image, costs=True))
    assert (again[_OWN_KERNEL], again[_DECOMPOSED]) == (4, 0)
    with torch.no_grad():  # grad mode is part of the layout
        without_grad = _kernels(lambda: trace_forward(model, image, costs=True))
    assert (without_grad[_OWN_KERNEL], without_grad[_DECOMPOSED]) == (2, 2)


def test_counts_kept_from_before_a_formula_was_registered_are_not_used() -> None:
    model, image = Norms().eval(), torch.randn(3, 4, 7, 6)
    before = trace_forward(model, image, costs=True)
    assert before.costs is not None
    assert before.costs.flops == 3 * 7 * 6 * 4 * 8 * 2  # the conv's
    legit = torch.ops.aten._native_batch_norm_legit_no_training
    register_flop_formula(legit)(lambda input_shape, *args, **kwargs: prod(input_shape))
    try:
        after = trace_forward(model, image, costs=True)
    finally:
        del flop_registry[legit]
    assert after.costs is not None
    norms = 3 * (3 * 4 * 7 * 6) + 3 * 8 * 7 * 6  # each call's elements, by the new formula
    assert after.costs.flops == before.costs.flops + norms
    assert "aten._native_batch_norm_legit_no_training" not in dict(after.costs.uncounted)


def test_the_figures_of_calls_run_by_their_own_kernel_are_those_of_their_decomposition() -> None:
    # `second` trains: same shapes as `first`, another decomposition. A layout that left out
    # the training flag would count `second` as `first` was counted.
    model, image = Norms().eval(), torch.randn(2, 4, 7, 5)
    model.second.train()
    trace = trace_forward(model, image, costs=True)
    # The oracle: each call traced alone, where it is the first of its layout.
    alone = Counter[str]()
    inputs = {"first": image, "second": image, "wide": torch.randn(2, 8, 7, 5)}
    for name, calls in (("first", 2), ("second", 1), ("wide", 1)):
        layer = getattr(model, name)
        for _ in range(calls):
            single = trace_forward(layer, inputs[name], costs=True)
            assert single.costs is not None
            alone.update(dict(single.costs.uncounted))
    assert trace.costs is not None
    assert dict(trace.costs.uncounted) == dict(alone)
    assert dict(trace.costs.uncounted)["aten._native_batch_norm_legit_no_training"] == 3


def test_a_replayed_call_leaves_its_unused_statistics_out_as_its_decomposition_did() -> None:
    # Eval-mode batch norm's second and third outputs are left out of the saved bytes (they
    # hold a value per channel on meta and none on the CPU): each call adds their storages,
    # whether it ran through its decomposition or its own kernel.
    layer, image = nn.BatchNorm1d(3).eval(), torch.randn(7, 3, requires_grad=True)
    open_call = type("OpenCall", (), {"number": 0})()
    recorder = type("Recorder", (), {"open_calls": [open_call], "reading_outputs": False})()
    ignored: set[int] = set()
    mode = CostMode(recorder, SavedTensors(ignored))  # type: ignore[arg-type]
    kept = []  # autograd keeps the statistics while the outputs live: their storages stay apart
    added = []
    with mode:
        for _ in range(3):
            before = len(ignored)
            kept.append(layer(image))
            added.append(len(ignored) - before)
    assert added == [2, 2, 2]
    assert mode.own_flops == {}  # batch norm has no formula: nothing is made up for it
    assert mode.uncounted == {"aten._native_batch_norm_legit_no_training": 3}


def test_statistics_made_without_grad_are_not_left_out() -> None:
    # Without grad autograd saves nothing, so there is nothing to leave out: the set stays as
    # it was, and what is counted does not change.
    layer, image = nn.BatchNorm1d(3).eval(), torch.randn(7, 3)
    open_call = type("OpenCall", (), {"number": 0})()
    recorder = type("Recorder", (), {"open_calls": [open_call], "reading_outputs": False})()
    ignored: set[int] = set()
    mode = CostMode(recorder, SavedTensors(ignored))  # type: ignore[arg-type]
    with torch.no_grad(), mode:
        for _ in range(3):
            layer(image)
    assert ignored == set()
    assert mode.uncounted == {"aten._native_batch_norm_legit_no_training": 3}


class FrozenBackbone(nn.Module):
    """Batch norms run without grad inside forward (or with their parameters frozen), then a
    head that autograd saves for: the statistics they make are freed at once."""

    def __init__(self, without_grad: bool) -> None:
        super().__init__()
        self.without_grad = without_grad
        self.backbone = nn.Sequential(
            *[layer for _ in range(6) for layer in (nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))]
        ).eval()
        if not without_grad:
            self.backbone.requires_grad_(False)
        self.head = nn.Sequential(
            *[layer for _ in range(6) for layer in (nn.Linear(64, 64), nn.Tanh())]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.set_grad_enabled(not self.without_grad and torch.is_grad_enabled()):
            x = self.backbone(x)
        return self.head(x.flatten(1))


@pytest.mark.parametrize("without_grad", [True, False], ids=["no_grad", "frozen"])
def test_saved_bytes_after_a_frozen_backbone_are_those_autograd_saves(without_grad: bool) -> None:
    # The statistics' storages are freed as soon as they are made; a later tensor autograd
    # saves may take the same storage address, and must still be counted.
    model, image = FrozenBackbone(without_grad), torch.randn(2, 4, 4, 4)
    expected = _saved_by_autograd(model, image)
    assert expected > 0
    for _ in range(3):  # later traces replay the batch norms' kept counts
        trace = trace_forward(model, image, costs=True)
        assert trace.costs is not None
        assert trace.costs.saved_bytes == expected


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "regnet_y_400mf"])
def test_saved_bytes_of_a_torchvision_model_half_frozen_are_those_autograd_saves(name: str) -> None:
    # Before, these read 8,192 or 16,384 B for 20,992 (MobileNetV3) and 0 B for 3,520 (RegNet),
    # varying from run to run with the storage addresses taken again.
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval()
    children = list(model.children())
    for child in children[: len(children) // 2]:
        child.requires_grad_(False)
    image = torch.randn(2, 3, 64, 64)
    expected = _saved_by_autograd(model, image)
    assert expected > 0
    for _ in range(2):
        trace = trace_forward(model, image, costs=True)
        assert trace.costs is not None
        assert trace.costs.saved_bytes == expected


def _saved_by_autograd(model: nn.Module, inputs: torch.Tensor) -> int:
    """The oracle: torch's own saved-tensor hooks around a plain forward, each storage once,
    the model's own tensors left out."""
    own = {tensor.untyped_storage()._cdata for tensor in model.state_dict().values()}
    saved: dict[int, int] = {}
    alive = []  # held, so that no storage address is taken again during the forward

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = tensor.untyped_storage()._cdata
        if key not in own and key not in saved:
            saved[key] = tensor.untyped_storage().nbytes()
            alive.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(inputs)
    return sum(saved.values())
