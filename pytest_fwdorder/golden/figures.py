"""How the golden and the messages around it give a large figure to three significant digits
(`1.85 G` FLOPs, `44.6 MiB`) and a long list (its first five and how many more). No torch.
"""

from __future__ import annotations

_COUNT_UNITS = ("", "k", "M", "G", "T", "P", "E")
EXAMPLES = 5  # the items a message lists before it counts the rest
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


def listed(items: list[str], separator: str = ", ", limit: int = EXAMPLES) -> str:
    """The first `limit` items and how many more: `a, b, c, d, e (+2 more)`, as a summary
    lists its examples."""
    shown = separator.join(items[:limit])
    if len(items) > limit:
        shown += f" (+{len(items) - limit} more)"
    return shown
