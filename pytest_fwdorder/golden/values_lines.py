"""The values facet's golden text (`values=True`): each call's `values:` fact of output
fingerprints and the header's seed line, written and read back. No torch.

Every call whose output holds tensors gets a `values:` fact (after its costs), one
fingerprint per output tensor (`[0] ...; [1] ...` for several), and the header says the seed:

    | values: mean 0.023451, std 0.41215, absmax 2.0316
    # values: each call's output, the forward run with seed 0
"""

from __future__ import annotations

import re

from pytest_fwdorder.calls.facet_records import TensorFingerprint
from pytest_fwdorder.golden.format import VALUES_FACT, GoldenLine, fact_title

VALUES_PREFIX = "# values: "
# Significant digits of a fingerprint's statistics: finer than any tolerance worth using, so
# rounding never decides a comparison, and short enough to read.
_FINGERPRINT_DIGITS = 5
# One fingerprint's statistics as `render_fingerprint` writes them.
_STATISTIC = re.compile(r"(mean|std|absmax|nan|inf) ([-+0-9.e,a-z]+)")


def render_fingerprints(fingerprints: tuple[TensorFingerprint, ...]) -> str:
    """A call's values fact: `values: mean 0.1, std 1, absmax 3.2`, numbered `[0] ...; [1]
    ...` when the output holds several tensors."""
    parts = [render_fingerprint(fingerprint) for fingerprint in fingerprints]
    if len(parts) == 1:
        return f"{VALUES_FACT}: {parts[0]}"
    return f"{VALUES_FACT}: " + "; ".join(f"[{number}] {part}" for number, part in enumerate(parts))


def render_fingerprint(fingerprint: TensorFingerprint) -> str:
    """`mean 0.023451, std 0.41215, absmax 2.0316`, with `nan N` and `inf N` when there are any."""
    if fingerprint.mean is None or fingerprint.std is None or fingerprint.absmax is None:
        text = "empty" if fingerprint.elements == 0 else "no finite values"
    else:
        text = (
            f"mean {_significant(fingerprint.mean)}, std {_significant(fingerprint.std)}, "
            f"absmax {_significant(fingerprint.absmax)}"
        )
    if fingerprint.nan:
        text += f", nan {fingerprint.nan:,}"
    if fingerprint.inf:
        text += f", inf {fingerprint.inf:,}"
    return text


def _significant(value: float) -> str:
    text = f"{value:.{_FINGERPRINT_DIGITS}g}"
    return "0" if text == "-0" else text


def values_line(seed: int) -> str:
    """The header line of a golden with fingerprints."""
    return f"{VALUES_PREFIX}each call's output, the forward run with seed {seed}"


def fingerprints_of(line: GoldenLine) -> str | None:
    """The text of a call line's values fact (after `values: `), or None when it has none."""
    for fact in line.facts:
        if fact_title(fact) == VALUES_FACT:
            return fact[len(VALUES_FACT) + 2 :]
    return None


def parse_fingerprints(text: str) -> list[dict[str, float]]:
    """A values fact's text as one dict of statistics per tensor: {'mean': 0.1, 'std': 1.0,
    'absmax': 3.2, 'nan': 0, 'inf': 0}; a tensor without finite values has no mean, std or
    absmax."""
    found: list[dict[str, float]] = []
    for part in text.split("; "):
        statistics: dict[str, float] = {"nan": 0.0, "inf": 0.0}
        for name, number in _STATISTIC.findall(part):
            try:
                statistics[name] = float(number.replace(",", ""))
            except ValueError:
                continue
        found.append(statistics)
    return found
