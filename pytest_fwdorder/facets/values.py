"""Fingerprint each call's output values while the forward runs (`values=True`).

The one owner of how fingerprints are taken. The recorder's post-hook hands each call's
output to `FingerprintCollector.observe` the moment the call ends, before any later
operation can change it: an in-place activation after a convolution (`ReLU(inplace=True)`)
changes the very tensor the convolution returned, and a hook that kept the tensor to look
at later would see the activation's values. Statistics are over the finite elements; the
order in which a reduction adds differs between thread counts in the last bits, which the
comparison's tolerance is far above (diff/values_tolerance.py).

The forward runs under a fixed seed (`SEED`, in `seeded`), restored afterwards: with it,
dropout and other random operations in train mode draw the same numbers on every run on
one machine, so their fingerprints repeat too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from pytest_fwdorder.calls.facet_records import TensorFingerprint
from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.recording.describe import tensors_of

SEED = 0


class FingerprintCollector:
    """Keeps the fingerprints of each call's output tensors, by the call's record number."""

    def __init__(self) -> None:
        self.fingerprints: dict[int, tuple[TensorFingerprint, ...]] = {}

    def observe(self, number: int, output: object) -> None:
        """The recorder's output observer: fingerprint `output` now, as the call ends."""
        self.fingerprints[number] = tuple(map(fingerprint, tensors_of(output)))


def fingerprint(tensor: torch.Tensor) -> TensorFingerprint:
    """The statistics of one tensor's values: mean, std, largest absolute value, NaN and Inf.

    Floating tensors are reduced in their own precision, half precision in float32, every
    other dtype in float64. A tensor whose smallest and largest values are finite has no
    NaN or Inf (either would show there), so only the others pay for counting them.
    """
    values = _plain_values(tensor.detach())
    if values.is_complex():
        values = torch.view_as_real(values)
    if values.dtype in (torch.float16, torch.bfloat16) or values.dtype.itemsize < 4:
        values = values.to(torch.float32 if values.is_floating_point() else torch.float64)
    elif not values.is_floating_point():
        values = values.to(torch.float64)
    values = values.reshape(-1)
    elements = values.numel()
    if elements == 0:
        return TensorFingerprint(0, None, None, None)
    low, high = (float(bound) for bound in torch.aminmax(values))
    if math.isfinite(low) and math.isfinite(high):
        std, mean = torch.std_mean(values, correction=0)
        return TensorFingerprint(elements, float(mean), float(std), max(-low, high))
    finite = torch.isfinite(values)
    finite_count = int(finite.sum())
    nan = int(torch.isnan(values).sum())
    if finite_count == 0:
        return TensorFingerprint(elements, None, None, None, nan, elements - nan)
    kept = values[finite]
    std, mean = torch.std_mean(kept, correction=0)
    return TensorFingerprint(
        elements=elements,
        mean=float(mean),
        std=float(std),
        absmax=float(kept.abs().max()),
        nan=nan,
        inf=elements - finite_count - nan,
    )


def _plain_values(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's values as a plain dense tensor: quantized ones dequantized, sparse ones
    made dense, nested ones as their packed values, a DTensor's as its local shard."""
    local = getattr(tensor, "to_local", None)
    if callable(local):
        tensor = local()
    if tensor.is_quantized:
        return tensor.dequantize()
    if tensor.is_nested:
        return tensor.values() if tensor.layout == torch.jagged else tensor.to_padded_tensor(0.0)
    if tensor.layout != torch.strided:
        return tensor.to_dense()
    return tensor


def attach_fingerprints(trace: TraceRecords, collector: FingerprintCollector) -> None:
    """Give each finished call its output's fingerprints; a call that raised gets none."""
    found = collector.fingerprints
    for call in trace.calls:
        call._fingerprints = found.get(call.index)  # type: ignore[attr-defined]
    trace.values_seed = SEED


def check_values_device(device: torch.device | str | None) -> None:
    """Refuse `values=True` on meta, where tensors have shapes but no values to fingerprint."""
    if device is not None and torch.device(device).type == "meta":
        raise ValueError(
            "values=True fingerprints each call's output values, but on device='meta' tensors "
            "have no values: trace on the CPU (or another real device) for values, or leave "
            "values off for this trace (@pytest.mark.fwdorder(values=False))"
        )


@contextmanager
def seeded(seed: int = SEED) -> Iterator[None]:
    """Run the block under `torch.manual_seed(seed)`, with every random state put back after."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []  # type: ignore[no-untyped-call]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
