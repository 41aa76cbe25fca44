"""The compile and export gates a test calls directly: `assert_no_graph_breaks` and
`assert_export_matches_eager`. Each fails with an AssertionError that names the module call.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from pytest_fwdorder.calls.facet_records import CompileRecords
from pytest_fwdorder.facets.graph_breaks import compiled_records, render_compiled


def assert_no_graph_breaks(
    model: nn.Module, *args: Any, at_most: int = 0, **kwargs: Any
) -> CompileRecords:
    """Compile `model` with dynamo (backend "eager"), call it on the inputs, and fail with
    `AssertionError` when it breaks the graph more than `at_most` times; the message lists
    each break with its module call, reason and source line. Returns what was found.

    Raises TypeError for a model that is not an nn.Module or an `at_most` that is not a
    non-negative int.
    """
    __tracebackhide__ = True
    _check_model(model, "assert_no_graph_breaks")
    if isinstance(at_most, bool) or not isinstance(at_most, int) or at_most < 0:
        raise TypeError(
            f"assert_no_graph_breaks at_most must be a non-negative int, got {at_most!r}: "
            "write at_most=1 to allow one graph break"
        )
    records = compiled_records(model, args, kwargs)
    if len(records.breaks) > at_most:
        allowed = "none allowed" if at_most == 0 else f"at most {at_most} allowed"
        raise AssertionError(
            f"{type(model).__name__} breaks the compiled graph {len(records.breaks)} time(s) "
            f"({allowed}):\n" + "\n".join(render_compiled(records))
        )
    return records


def assert_export_matches_eager(
    model: nn.Module, *args: Any, strict: bool = False, **kwargs: Any
) -> Any:
    """`torch.export.export` the model on the inputs and fail with `AssertionError` when the
    exported program's module calls differ from eager's: a module called another number of
    times, in another order, or returning another shape. Returns the exported program.

    An error of export itself keeps its type and gains a note naming the module call where
    it failed. The message also names the modules export never saw (inlined or lost).
    """
    __tracebackhide__ = True
    _check_model(model, "assert_export_matches_eager")
    from pytest_fwdorder.checks.export_structure import (
        compare_export,
        export_program,
        exported_calls,
    )
    from pytest_fwdorder.tracing.forward import trace_forward

    trace = trace_forward(model, *args, **kwargs)
    program = export_program(model, args, kwargs, strict=strict)
    comparison = compare_export(trace, exported_calls(program), strict=strict)
    if not comparison.matches:
        unseen = (
            f"\nmodules export never saw (inlined or lost): {', '.join(comparison.unseen)}"
            if comparison.unseen
            else ""
        )
        raise AssertionError(
            f"torch.export.export(strict={strict}) of {type(model).__name__} calls its modules "
            "differently from eager:\n  " + "\n  ".join(comparison.differences) + unseen
        )
    return program


def _check_model(model: object, function: str) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{function} expected an nn.Module, got {type(model).__name__!r}: pass the model "
            "and then its inputs"
        )
