"""Coverage you can assert on: every module matching a path pattern is of one class.

`assert_coverage(trace, pattern, is_a="lora.Linear")` fails naming the layers that miss, or
a pattern that matches nothing (an adapter that matched nothing is a silent no-op). The
table it reads is `report/coverage_table.py`'s. Pure functions of a trace's records, no torch.
"""

from __future__ import annotations

from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.errors import CoverageError, did_you_mean
from pytest_fwdorder.report.coverage_table import Coverage, coverage, layer_ranges

__all__ = ["assert_coverage"]


def assert_coverage(trace: TraceRecords, pattern: str, *, is_a: str | type) -> Coverage:
    """Assert that every module matching `pattern` is of the class `is_a` (a class, or a
    name as `class_matches` reads it: `"lora.Linear"`); return the coverage.

    Raises `CoverageError` (an AssertionError) naming the layers and paths that are not,
    or when nothing matches the pattern (an adapter that matched nothing is a silent no-op).
    """
    __tracebackhide__ = True
    wanted = is_a if isinstance(is_a, str) else f"{is_a.__module__}.{is_a.__qualname__}"
    found = coverage(trace, pattern)
    if not found.rows:
        close = did_you_mean(pattern, trace.module_classes or trace.modules)
        raise CoverageError(
            f"no module of {trace.root_type} matches {pattern!r}{close or ''}: check the "
            "pattern (each `*` matches one name of a dotted path, `**` any number)"
        )
    missing = found.missing(wanted)
    if missing:
        count = sum(len(row.paths) for row in missing)
        indices = sorted({index for row in missing for index in row.indices if index is not None})
        details = "; ".join(
            f"{row.class_name} at {', '.join(row.paths[:8])}{' ...' if len(row.paths) > 8 else ''}"
            for row in missing
        )
        layers = (
            f" in layer{'s' if len(indices) > 1 else ''} {layer_ranges(indices)}" if indices else ""
        )
        raise CoverageError(
            f"{count} of {found.matched} modules matching {pattern!r} are not {wanted}"
            f"{layers}: {details}\n{found.render()}"
        )
    return found
