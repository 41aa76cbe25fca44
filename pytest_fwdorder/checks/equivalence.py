"""Numerical equivalence of two models, call by call, and copying weights by call pairing."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from pytest_fwdorder.calls.records import Call, RenderOptions, TraceRecords
from pytest_fwdorder.diff.diffing import diff_traces
from pytest_fwdorder.errors import NotEquivalentError
from pytest_fwdorder.recording.recorder import Recorder, recording
from pytest_fwdorder.recording.resolve import resolve_model
from pytest_fwdorder.trace import Trace


@dataclass(frozen=True)
class CallComparison:
    """How far one call's outputs in the second model are from the first model's.

    `diverges` is True when some element is off by more than `atol + rtol * |first|`, or
    when `problem` names a mismatch that is not a number (count, shape, NaN placement).
    """

    first: Call
    second: Call
    max_abs_diff: float
    diverges: bool
    problem: str = ""


@dataclass(frozen=True)
class EquivalenceReport:
    """The outcome of `assert_equivalent`: every paired call, in the order outputs were made."""

    first_trace: Trace
    second_trace: Trace
    comparisons: list[CallComparison]
    unpaired: int
    atol: float
    rtol: float

    @property
    def first_divergence(self) -> CallComparison | None:
        return next((item for item in self.comparisons if item.diverges), None)

    def __str__(self) -> str:
        divergence = self.first_divergence
        if divergence is None:
            largest = max((item.max_abs_diff for item in self.comparisons), default=0.0)
            text = (
                f"equivalent: {len(self.comparisons)} paired calls within atol {self.atol:g} "
                f"+ rtol {self.rtol:g}; largest max abs diff {largest:.3g}"
            )
        else:
            call = divergence.first
            where = (
                f"first divergence at {call.display_path} (call {call.index + 1} of "
                f"{len(self.first_trace)})"
            )
            if divergence.problem:
                text = f"{where}: {divergence.problem}"
            else:
                text = (
                    f"{where}: max abs diff {divergence.max_abs_diff:.2g} > atol {self.atol:g} "
                    f"+ rtol {self.rtol:g} x |expected|"
                )
            if divergence.second.path != call.path:
                text += f" (paired with {divergence.second.display_path})"
        if self.unpaired:
            text += f"; {self.unpaired} calls could not be paired by structure"
        return text


def assert_equivalent(
    first: nn.Module,
    second: nn.Module,
    *inputs: Any,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    **keyword_inputs: Any,
) -> EquivalenceReport:
    """Fail at the first call whose outputs differ between two models beyond tolerance.

    Runs both models on copies of the same inputs, from the same random state, pairs their
    calls by structure (identity first, then type and shapes, so renamed modules pair up) and
    checks each pair's output tensors, in the order they were computed:
    `|second - first| <= atol + rtol * |first|`. Equal weights are the caller's job; see
    `copy_weights`. Raises `NotEquivalentError` (an AssertionError) naming the first call
    that diverges, e.g. `first divergence at layer3.2.bn2 (call 87 of 151): max abs diff
    3.1e-02 > atol 1e-05 ...`; returns the report otherwise.
    """
    __tracebackhide__ = True  # the message says it all; our frames would only add noise
    first_run = _run(
        resolve_model(first, entry_point="assert_equivalent"),
        inputs,
        keyword_inputs,
        capture_outputs=True,
    )
    second_run = _run(
        resolve_model(second, entry_point="assert_equivalent"),
        inputs,
        keyword_inputs,
        capture_outputs=True,
    )
    # _run asks the recorder for Traces
    first_trace, first_outputs = cast(Trace, first_run.trace), first_run.captured
    second_trace, second_outputs = cast(Trace, second_run.trace), second_run.captured
    pairs = _pair_calls(first_trace, second_trace)
    second_by_index = {call.index: outputs for call, outputs in second_outputs}
    comparisons = []
    for first_call, expected in first_outputs:  # in the order outputs were computed
        second_call = pairs.get(first_call.index)
        if second_call is None or second_call.index not in second_by_index:
            continue
        comparisons.append(
            _compare(
                first_call, second_call, expected, second_by_index[second_call.index], atol, rtol
            )
        )
    report = EquivalenceReport(
        first_trace,
        second_trace,
        comparisons,
        unpaired=len(first_trace) - len(pairs),
        atol=atol,
        rtol=rtol,
    )
    if report.first_divergence is not None:
        raise NotEquivalentError(str(report))
    return report


def copy_weights(
    source: nn.Module, target: nn.Module, *inputs: Any, **keyword_inputs: Any
) -> list[tuple[str, str]]:
    """Copy parameters and buffers from `source` into `target`, module by paired call.

    Both models are traced on `inputs`; calls are paired by structure, not by state_dict key,
    so a module renamed in a refactor (`relu` split into `relu1`..`relu3`, `fc` now `head`)
    still gets its weights. Returns (source path, target path) of each module copied. Raises
    ValueError if a module of `target` that holds weights has no partner, or shapes differ.
    """
    source_root = resolve_model(source, entry_point="copy_weights")
    target_root = resolve_model(target, entry_point="copy_weights")
    with torch.no_grad():
        source_trace = _run(source_root, inputs, keyword_inputs).trace
        target_trace = _run(target_root, inputs, keyword_inputs).trace
    pairs = _pair_calls(source_trace, target_trace)
    copied: list[tuple[str, str]] = []
    done: set[str] = set()
    for source_call in source_trace:
        target_call = pairs.get(source_call.index)
        if target_call is None or not (source_call.registered and target_call.registered):
            continue
        if target_call.path in done:
            continue
        done.add(target_call.path)
        from_module = source_root.get_submodule(source_call.path)
        to_module = target_root.get_submodule(target_call.path)
        if _copy_own_tensors(from_module, to_module, source_call.path, target_call.path):
            copied.append((source_call.path, target_call.path))
    missing = [
        path
        for path, module in target_root.named_modules()
        if path not in done and _has_own_tensors(module)
    ]
    if missing:
        raise ValueError(
            f"copy_weights found no partner in the source for {len(missing)} target module(s) "
            f"holding weights: {', '.join(missing[:5])}: their calls did not pair by structure; "
            "compare the two traces with assert_same_structure to see where they differ"
        )
    return copied


def _run(
    root: nn.Module,
    inputs: Sequence[Any],
    keyword_inputs: dict[str, Any],
    *,
    capture_outputs: bool = False,
) -> Recorder:
    """Record one forward of `root` on copies of the inputs: an in-place op in one model must
    not change what the next model is given."""
    with recording(
        root, RenderOptions(), capture_outputs=capture_outputs, trace_type=Trace
    ) as recorder:
        root(*copy.deepcopy(tuple(inputs)), **copy.deepcopy(keyword_inputs))
    return recorder


def _pair_calls(first: TraceRecords, second: TraceRecords) -> dict[int, Call]:
    """first call index -> paired call of `second` (in order, renamed or moved), from the diff."""
    return {
        first_index: second[second_index]
        for first_index, second_index in diff_traces(first, second).pairs
    }


def _compare(
    first_call: Call,
    second_call: Call,
    expected: list[torch.Tensor],
    actual: list[torch.Tensor],
    atol: float,
    rtol: float,
) -> CallComparison:
    if len(expected) != len(actual):
        problem = f"{len(expected)} output tensors in the first model, {len(actual)} in the second"
        return CallComparison(first_call, second_call, float("inf"), True, problem)
    largest = 0.0
    for first_tensor, second_tensor in zip(expected, actual, strict=True):
        if first_tensor.shape != second_tensor.shape:
            problem = f"output shape {tuple(first_tensor.shape)} -> {tuple(second_tensor.shape)}"
            return CallComparison(first_call, second_call, float("inf"), True, problem)
        if first_tensor.numel() == 0 or first_tensor.device.type == "meta":
            continue
        reference, other = first_tensor.double(), second_tensor.double()
        if not torch.equal(reference.isnan(), other.isnan()):
            return CallComparison(
                first_call, second_call, float("nan"), True, "NaN in one model's outputs only"
            )
        difference = (other - reference).abs().nan_to_num(0.0)
        largest = max(largest, float(difference.max()))
        if bool((difference > atol + rtol * reference.abs().nan_to_num(0.0)).any()):
            return CallComparison(first_call, second_call, largest, True)
    return CallComparison(first_call, second_call, largest, False)


def _has_own_tensors(module: nn.Module) -> bool:
    return any(
        value is not None for value in (*module._parameters.values(), *module._buffers.values())
    )


def _copy_own_tensors(
    from_module: nn.Module, to_module: nn.Module, from_path: str, to_path: str
) -> bool:
    names = [name for name, value in from_module._parameters.items() if value is not None]
    names += [name for name, value in from_module._buffers.items() if value is not None]
    if not names:
        return False
    with torch.no_grad():
        for name in names:
            source_tensor = getattr(from_module, name)
            target_tensor = getattr(to_module, name, None)
            if not isinstance(target_tensor, torch.Tensor):
                raise ValueError(
                    f"copy_weights paired {from_path or '<root>'} with {to_path or '<root>'}, "
                    f"but the target has no tensor named {name!r}: the paired modules differ "
                    "in kind; check the pairing with assert_same_structure"
                )
            if target_tensor.shape != source_tensor.shape:
                raise ValueError(
                    f"copy_weights cannot copy {from_path}.{name} {tuple(source_tensor.shape)} "
                    f"into {to_path}.{name} {tuple(target_tensor.shape)}: shapes differ"
                )
            target_tensor.copy_(source_tensor)
    return True
