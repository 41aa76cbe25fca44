"""The costs facet's golden text (`costs=True`): each call's `costs:` fact, the header's
totals and the operations without a FLOP formula, written and read back. No torch.

Every call gets a `costs:` fact (after its module's facts at a first call), and the header
the totals and the operations without a FLOP formula:

    | costs: 32,768 FLOPs (32.8 k), output 4,096 B (4.00 KiB), parameters and buffers 1,088 B (1.06 KiB)
    # costs: 108,544 FLOPs (109 k), parameters and buffers 43,880 B (42.9 KiB), saved for backward 8,960 B (8.75 KiB)
    # uncounted operations (1):
    #   aten.relu x1
"""

from __future__ import annotations

import re

from pytest_fwdorder.calls.facet_records import CallCosts, TraceCosts
from pytest_fwdorder.golden.format import (
    COSTS_FACT,
    GoldenLine,
    fact_title,
    header_sections,
    render_section,
)

COSTS_PREFIX = "# costs: "
UNCOUNTED_SECTION = "uncounted operations"
_FLOPS = re.compile(r"([0-9,]+) FLOPs")
_COUNT_UNITS = ("", "k", "M", "G", "T", "P", "E")
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_count(count: int) -> str:
    """A count to three significant digits with an SI prefix: `231 M`, `1.85 G`, `512`."""
    return _human(count, 1000, _COUNT_UNITS)


def human_bytes(count: int) -> str:
    """Bytes to three significant digits in binary units: `784 KiB`, `44.6 MiB`, `12 B`."""
    return _human(count, 1024, _BYTE_UNITS)


def _human(count: int, base: int, units: tuple[str, ...]) -> str:
    value, unit = float(count), 0
    while abs(value) >= 999.5 and unit < len(units) - 1:  # 999.7 k would round to 1000 k
        value, unit = value / base, unit + 1
    if unit == 0:
        return f"{count} {units[0]}".rstrip()
    digits = 2 if abs(value) < 9.995 else 1 if abs(value) < 99.95 else 0
    return f"{value:.{digits}f} {units[unit]}"


def _amount(count: int, unit: str, human: str) -> str:
    """`802,816 B (784 KiB)`: the exact figure, and the human form where it differs."""
    exact = f"{count:,} {unit}"
    return exact if human in (f"{count} {unit}", str(count)) else f"{exact} ({human})"


def render_call_costs(costs: CallCosts, parameters: bool = True) -> str:
    """A call's costs fact: `costs: 1,024 FLOPs (1.02 k), output 64 B`, then its module's
    own parameter and buffer bytes at its first call (unless parameters are hidden)."""
    text = (
        f"{COSTS_FACT}: {_amount(costs.flops, 'FLOPs', human_count(costs.flops))}, "
        f"output {_amount(costs.output_bytes, 'B', human_bytes(costs.output_bytes))}"
    )
    if parameters and costs.tensor_bytes:
        text += (
            ", parameters and buffers "
            f"{_amount(costs.tensor_bytes, 'B', human_bytes(costs.tensor_bytes))}"
        )
    return text


def render_trace_costs(costs: TraceCosts, parameters: bool = True) -> list[str]:
    """The header's costs: the totals line, then the operations without a FLOP formula."""
    parts = [_amount(costs.flops, "FLOPs", human_count(costs.flops))]
    if parameters:
        parts.append(
            f"parameters and buffers {_amount(costs.tensor_bytes, 'B', human_bytes(costs.tensor_bytes))}"
        )
    if costs.saved_bytes is None:
        parts.append("saved for backward: none (grad disabled)")
    else:
        parts.append(
            f"saved for backward {_amount(costs.saved_bytes, 'B', human_bytes(costs.saved_bytes))}"
        )
    return [
        COSTS_PREFIX + ", ".join(parts),
        *render_section(UNCOUNTED_SECTION, [f"{name} x{count}" for name, count in costs.uncounted]),
    ]


def flops_of(line: GoldenLine) -> int | None:
    """The FLOPs a call line's costs fact gives, or None when it has none."""
    for fact in line.facts:
        if fact_title(fact) == COSTS_FACT:
            match = _FLOPS.search(fact)
            return int(match.group(1).replace(",", "")) if match else None
    return None


def uncounted_operations(header: list[str]) -> dict[str, int] | None:
    """Operation name -> count from the header's uncounted section; None without costs."""
    if not any(line.startswith(COSTS_PREFIX) for line in header):
        return None
    found: dict[str, int] = {}
    for item in header_sections(header).get(UNCOUNTED_SECTION, []):
        name, _, count = item.rpartition(" x")
        if name and count.isdigit():
            found[name] = int(count)
    return found
