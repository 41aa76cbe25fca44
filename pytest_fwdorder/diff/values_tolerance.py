"""Compare output fingerprints (`values=True`) within a tolerance. Pure, no torch.

Fingerprints are the one part of a golden compared with a tolerance: floating-point sums
depend on thread counts, BLAS and the CPU's instruction set in their last bits, and a gate
that fails on those is a gate people switch off. Everything else is compared exactly.

A statistic (mean, std, largest absolute value) matches when it is within
`absolute + relative x scale` of the golden's, `scale` being the larger of the two sides'
largest absolute values for that tensor: the mean of a tensor centred on zero has no
relative precision of its own, but its error is bounded by the tensor's magnitude. NaN and
Inf counts, and a tensor without finite values, must be equal.
"""

from __future__ import annotations

from pytest_fwdorder.golden.facet_facts import facts_put_back
from pytest_fwdorder.golden.format import (
    FACT_PREFIX,
    VALUES_FACT,
)
from pytest_fwdorder.golden.values_lines import parse_fingerprints
from pytest_fwdorder.options import DEFAULT_VALUES_TOLERANCE, Tolerance

_VALUES_FACT_START = f"{FACT_PREFIX}{VALUES_FACT}: "
_STATISTICS = ("mean", "std", "absmax")
_COUNTS = ("nan", "inf")


def within_tolerance(old_text: str, new_text: str, tolerance: Tolerance) -> str:
    """`new_text` with each values fact that matches the golden's within `tolerance`
    replaced by the golden's own text, so that only fingerprints that moved beyond it differ.

    Facts are paired through the lines around them (the calls they belong to), so a golden
    that also differs in structure still gets its matching fingerprints tolerated.
    """
    if _VALUES_FACT_START not in new_text or _VALUES_FACT_START not in old_text:
        return new_text
    return facts_put_back(
        old_text,
        new_text,
        lambda line: _VALUES_FACT_START if _is_values_fact(line) else None,
        lambda _start, old, new: fingerprints_match(old, new, tolerance),
    )


def fingerprints_match(old: str, new: str, tolerance: Tolerance = DEFAULT_VALUES_TOLERANCE) -> bool:
    """Whether two values facts' texts (after `values: `) match within `tolerance`."""
    if old == new:
        return True
    old_tensors, new_tensors = parse_fingerprints(old), parse_fingerprints(new)
    if len(old_tensors) != len(new_tensors):
        return False
    relative, absolute = tolerance
    for old_statistics, new_statistics in zip(old_tensors, new_tensors, strict=True):
        if any(old_statistics.get(name) != new_statistics.get(name) for name in _COUNTS):
            return False
        old_has, new_has = "absmax" in old_statistics, "absmax" in new_statistics
        if old_has != new_has:
            return False
        if not old_has:
            continue
        scale = max(abs(old_statistics["absmax"]), abs(new_statistics["absmax"]))
        allowed = absolute + relative * scale
        for name in _STATISTICS:
            if abs(old_statistics.get(name, 0.0) - new_statistics.get(name, 0.0)) > allowed:
                return False
    return True


def moved_statistics(old: str, new: str) -> list[str]:
    """What moved between two values facts' texts, for a message: `mean 0.1 -> 0.2`, with
    `[1]` before it for the second tensor of an output."""
    old_tensors, new_tensors = parse_fingerprints(old), parse_fingerprints(new)
    if len(old_tensors) != len(new_tensors):
        return [f"{len(old_tensors)} tensors -> {len(new_tensors)}"]
    moved: list[str] = []
    several = len(new_tensors) > 1
    for number, (old_statistics, new_statistics) in enumerate(
        zip(old_tensors, new_tensors, strict=True)
    ):
        prefix = f"[{number}] " if several else ""
        for name in (*_STATISTICS, *_COUNTS):
            before, after = old_statistics.get(name), new_statistics.get(name)
            if before != after:
                moved.append(f"{prefix}{name} {_number(before)} -> {_number(after)}")
    return moved


def _number(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if value == int(value) and abs(value) < 1e15 else f"{value:.5g}"


def _is_values_fact(line: str) -> bool:
    return line.lstrip(" ").startswith(_VALUES_FACT_START)
