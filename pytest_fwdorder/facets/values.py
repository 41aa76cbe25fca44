"""The values facet (`values=True`): a fingerprint of each call's output, from capture to words.

One module holds the whole facet, as a plugin's facet is held (`pytest_fwdorder.Facet`): the
option that switches it on, what it takes while the forward runs, the `values:` fact and the
header line it writes, how that fact is read back into `TensorFingerprint`s, how two of them
compare (within a tolerance) and the words for a change. It is registered as a built-in
plugin (`hookspecs.BUILTIN_PLUGINS`), so the recorder, the golden, the diff and the report
reach it through the `pytest_fwdorder_facets` hook and never name it. It imports torch only
inside the functions that use it, so pytest's start-up (which registers it) imports none.

**Capture.** The recorder hands each call's output to `observe` the moment the call ends,
before any later operation can change it: an in-place activation after a convolution
(`ReLU(inplace=True)`) changes the very tensor the convolution returned, and a hook that
kept the tensor to look at later would see the activation's values. Statistics are over the
finite elements. The forward runs under a fixed seed (recording/seeding.py), restored
afterwards: dropout and other random operations in train mode then draw the same numbers on
every run on one machine, so their fingerprints repeat too.

**Comparison.** Fingerprints are the one part of a golden compared with a tolerance:
floating-point sums depend on thread counts, BLAS and the CPU's instruction set in their
last bits, and a gate that fails on those is a gate people switch off. A statistic (mean,
std, largest absolute value) matches when it is within `absolute + relative x scale` of the
golden's, `scale` being the larger of the two sides' largest absolute values for that
tensor: the mean of a tensor centred on zero has no relative precision of its own, but its
error is bounded by the tensor's magnitude. NaN and Inf counts, and a tensor without finite
values, must be equal.

    | values: mean 0.023451, std 0.41215, absmax 2.0316
    # values: each call's output, the forward run with seed 0
"""

from __future__ import annotations

import math
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fwdorder.calls.facet_records import TensorFingerprint
from pytest_fwdorder.hookspecs import hookimpl
from pytest_fwdorder.options import DEFAULT_VALUES_TOLERANCE, Tolerance
from pytest_fwdorder.recording.seeding import SEED, seeded

if TYPE_CHECKING:
    import torch

    from pytest_fwdorder.calls.facet_records import Facet
    from pytest_fwdorder.options import TraceOptions

# Significant digits of a fingerprint's statistics: finer than any tolerance worth using, so
# rounding never decides a comparison, and short enough to read.
_FINGERPRINT_DIGITS = 5
# One fingerprint's statistics as `render` writes them.
_STATISTIC = re.compile(r"(mean|std|absmax|nan|inf) ([-+0-9.e,a-z]+)")
_NUMBERED = re.compile(r"\[\d+\] ")
_STATISTICS = ("mean", "std", "absmax")
_COUNTS = ("nan", "inf")
Fingerprints = tuple[TensorFingerprint, ...]


@dataclass(frozen=True)
class ValuesFacet:
    """Output fingerprints as a facet: one `values:` fact per call whose output holds tensors.

    `tolerance` is (relative, absolute): how far a statistic may move and still match. A
    trace's own facet has the tolerance its options give (`configured`); the one the hook
    offers has the default, for goldens compared outside a trace (`fwdorder diff`).
    """

    tolerance: Tolerance = DEFAULT_VALUES_TOLERANCE
    title = "values"
    change_words = "values moved beyond the tolerance"
    option = "values"
    # Left out of a structure comparison unless `compare` names it; what it measures.
    compared_on_request = "fingerprints of each call's output"

    def configured(self, options: TraceOptions) -> ValuesFacet:
        """The facet as a trace with `options` records and compares it: with their tolerance."""
        return ValuesFacet((options.values_relative_tolerance, options.values_absolute_tolerance))

    def check_device(self, device: torch.device | str | None) -> None:
        """Refuse meta, where tensors have shapes but no values to fingerprint."""
        import torch

        if device is not None and torch.device(device).type == "meta":
            raise ValueError(
                "values=True fingerprints each call's output values, but on device='meta' "
                "tensors have no values: trace on the CPU (or another real device) for values, "
                "or leave values off for this trace (@pytest.mark.fwdorder(values=False))"
            )

    def running(self) -> AbstractContextManager[None]:
        """Entered around the forward: it runs under seed `SEED`."""
        return seeded()

    def header_line(self) -> str:
        """The golden's header line saying what the facts are and the seed."""
        return f"# values: each call's output, the forward run with seed {SEED}"

    def observe(self, output: object) -> Fingerprints | None:
        """The fingerprints of the output's tensors, taken now as the call ends; None
        for an output without tensors."""
        from pytest_fwdorder.recording.describe import tensors_of

        return tuple(map(fingerprint, tensors_of(output))) or None

    def render(self, value: Fingerprints) -> str:
        """`mean 0.1, std 1, absmax 3.2`, numbered `[0] ...; [1] ...` for several tensors."""
        parts = [_render_one(one) for one in value]
        if len(parts) == 1:
            return parts[0]
        return "; ".join(f"[{number}] {part}" for number, part in enumerate(parts))

    def parse(self, text: str) -> Fingerprints:
        """A `values:` fact's text as the fingerprints it writes, at the golden's precision."""
        return tuple(map(_parse_one, text.split("; ")))

    def same(self, old: Fingerprints, new: Fingerprints) -> bool:
        """Whether every statistic is within the tolerance and every count equal."""
        if old == new:
            return True
        if len(old) != len(new):
            return False
        relative, absolute = self.tolerance
        for before, after in zip(old, new, strict=True):
            if (before.nan, before.inf, before.empty) != (after.nan, after.inf, after.empty):
                return False
            if before.absmax is None or after.absmax is None:
                if (before.absmax is None) != (after.absmax is None):
                    return False
                continue
            allowed = absolute + relative * max(abs(before.absmax), abs(after.absmax))
            for name in _STATISTICS:
                if abs((getattr(before, name) or 0.0) - (getattr(after, name) or 0.0)) > allowed:
                    return False
        return True

    def describe_change(self, old: Fingerprints, new: Fingerprints) -> str:
        """What moved: `mean 0.1 -> 0.2`, with `[1]` before it for an output's second tensor."""
        if len(old) != len(new):
            return f"{len(old)} tensors -> {len(new)}"
        moved: list[str] = []
        for number, (before, after) in enumerate(zip(old, new, strict=True)):
            prefix = f"[{number}] " if len(new) > 1 else ""
            for name in (*_STATISTICS, *_COUNTS):
                was, now = getattr(before, name), getattr(after, name)
                if was != now:
                    moved.append(f"{prefix}{name} {_number(was)} -> {_number(now)}")
            if before.empty != after.empty:
                states = ("values", "empty") if after.empty else ("empty", "values")
                moved.append(f"{prefix}{states[0]} -> {states[1]}")
        return ", ".join(moved)


VALUES = ValuesFacet()


@hookimpl
def pytest_fwdorder_facets() -> list[Facet]:
    """The values facet (the built-in plugins' facets answer first, `hookspecs`)."""
    return [VALUES]


def fingerprint(tensor: torch.Tensor) -> TensorFingerprint:
    """The statistics of one tensor's values: mean, std, largest absolute value, NaN and Inf.

    Floating tensors are reduced in their own precision, half precision in float32, every
    other dtype in float64. A tensor whose smallest and largest values are finite has no
    NaN or Inf (either would show there), so only the others pay for counting them.
    """
    import torch

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
        return TensorFingerprint(None, None, None, empty=True)
    low, high = (float(bound) for bound in torch.aminmax(values))
    if math.isfinite(low) and math.isfinite(high):
        std, mean = torch.std_mean(values, correction=0)
        return TensorFingerprint(float(mean), float(std), max(-low, high))
    finite = torch.isfinite(values)
    finite_count = int(finite.sum())
    nan = int(torch.isnan(values).sum())
    if finite_count == 0:
        return TensorFingerprint(None, None, None, nan, elements - nan)
    kept = values[finite]
    std, mean = torch.std_mean(kept, correction=0)
    return TensorFingerprint(
        mean=float(mean),
        std=float(std),
        absmax=float(kept.abs().max()),
        nan=nan,
        inf=elements - finite_count - nan,
    )


def _plain_values(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's values as a plain dense tensor: quantized ones dequantized, sparse ones
    made dense, nested ones as their packed values, a DTensor's as its local shard."""
    import torch

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


def _render_one(one: TensorFingerprint) -> str:
    """`mean 0.023451, std 0.41215, absmax 2.0316`, with `nan N` and `inf N` when there are any."""
    if one.mean is None or one.std is None or one.absmax is None:
        text = "empty" if one.empty else "no finite values"
    else:
        text = (
            f"mean {_significant(one.mean)}, std {_significant(one.std)}, "
            f"absmax {_significant(one.absmax)}"
        )
    if one.nan:
        text += f", nan {one.nan:,}"
    if one.inf:
        text += f", inf {one.inf:,}"
    return text


def _parse_one(text: str) -> TensorFingerprint:
    if text.startswith("["):
        text = _NUMBERED.sub("", text, count=1)
    parts = text.split(", ")
    # Most tensors have finite values only: `mean A, std B, absmax C`, read without a
    # pattern (a golden of 100,000 calls reads as many facts).
    if len(parts) == 3 and text.startswith("mean "):
        try:
            return TensorFingerprint(float(parts[0][5:]), float(parts[1][4:]), float(parts[2][7:]))
        except ValueError:
            pass  # a hand-edited fact: read by the pattern below
    statistics: dict[str, float] = {}
    for name, number in _STATISTIC.findall(text):
        try:
            statistics[name] = float(number.replace(",", ""))
        except ValueError:
            continue
    return TensorFingerprint(
        mean=statistics.get("mean"),
        std=statistics.get("std"),
        absmax=statistics.get("absmax"),
        nan=int(statistics.get("nan", 0)),
        inf=int(statistics.get("inf", 0)),
        empty=text.startswith("empty"),
    )


def _significant(value: float) -> str:
    text = f"{value:.{_FINGERPRINT_DIGITS}g}"
    return "0" if text == "-0" else text


def _number(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if value == int(value) and abs(value) < 1e15 else f"{value:.5g}"
