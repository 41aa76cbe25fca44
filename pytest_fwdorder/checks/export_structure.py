"""Exported structure: the module calls `torch.export` records, compared with the eager trace.

`torch.export.export(model, args, strict=...)` writes on each operation of its graph the
stack of module calls it ran under (`nn_module_stack`: a key per call, `b.relu@1` for a
module's second call, the module's path and class). The calls, in the order their first
operation appears, with their number per module and the shape of their last operation's
output, are the exported structure; `compare_export` sets it against the eager trace's calls:
same modules, same order, same number of calls of each, same output shapes. A call that
runs no operation (a module that only returns its input) leaves nothing in the graph, so
the eager calls compared are those whose module export saw at all; modules export never
saw are listed apart as inlined or lost.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from pytest_fwdorder.calls.records import TraceRecords


@dataclass(frozen=True, slots=True)
class ExportedCall:
    """One module call in an exported program: path, which call of that module, its class
    and the shape of its last operation's first tensor output (None when it has none)."""

    path: str
    call_number: int
    module_type: str
    output_shape: tuple[int, ...] | None


@dataclass(frozen=True)
class ExportComparison:
    """What export made of the module calls, against eager: each difference in words
    (empty when they agree), and the modules export never saw."""

    strict: bool
    exported: tuple[ExportedCall, ...]
    differences: tuple[str, ...]
    unseen: tuple[str, ...]

    @property
    def matches(self) -> bool:
        return not self.differences


def export_program(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *, strict: bool
) -> Any:
    """`torch.export.export` the model; an error of export keeps its type and gains a note
    naming the module call where it failed, read from its traceback."""
    try:
        with warnings.catch_warnings():  # export's own warnings, not the forward's
            warnings.simplefilter("ignore")
            return torch.export.export(model, args, kwargs, strict=strict)
    except Exception as error:
        where = _failing_module(error, model)
        error.add_note(
            f"pytest-fwdorder: torch.export.export(strict={strict}) failed"
            + (f" in the call of {where}" if where else "")
        )
        raise


def _failing_module(error: BaseException, model: nn.Module) -> str:
    """The innermost module of `model` whose forward is on the error's traceback (non-strict
    export runs the real forward), or '' when none is."""
    paths = {id(module): path or "<root>" for path, module in model.named_modules()}
    found = ""
    traceback = error.__traceback__
    call_code = nn.Module._call_impl.__code__
    while traceback is not None:
        frame = traceback.tb_frame
        if frame.f_code is call_code:
            found = paths.get(id(frame.f_locals.get("self")), found)
        traceback = traceback.tb_next
    return found


def exported_calls(program: Any) -> tuple[ExportedCall, ...]:
    """The module calls of an exported program, in the order their first operation runs
    (a parent before its children), each with the shape of its last operation's output."""
    calls: dict[str, ExportedCall] = {}  # by nn_module_stack key, one per call
    numbers: dict[str, int] = {}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        shape = _first_shape(node.meta.get("val"))
        for key, (path, qualified_type) in (node.meta.get("nn_module_stack") or {}).items():
            call = calls.get(key)
            if call is None:
                numbers[path] = numbers.get(path, 0) + 1
                call = ExportedCall(path, numbers[path], qualified_type.rpartition(".")[2], None)
            calls[key] = replace(call, output_shape=shape)
    return tuple(calls.values())


def _first_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a node's value, or of the first tensor of a tuple of values."""
    if isinstance(value, (tuple, list)):
        value = value[0] if value else None
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(size) for size in shape)
    except TypeError:  # a symbolic size
        return None


def compare_export(
    trace: TraceRecords, exported: Sequence[ExportedCall], *, strict: bool
) -> ExportComparison:
    """The differences between the eager trace's module calls and the exported ones."""
    eager_counts: dict[str, int] = {}
    for call in trace.calls:
        eager_counts[call.path] = eager_counts.get(call.path, 0) + 1
    # A module registered under several names is one module: export may name a call by
    # any of them, the trace by the first.
    first_name = {other: path for path, others in trace.aliases.items() for other in others}
    exported = [replace(call, path=first_name.get(call.path, call.path)) for call in exported]
    exported = _renumbered(exported)
    export_counts: dict[str, int] = {}
    for exported_call in exported:
        export_counts[exported_call.path] = export_counts.get(exported_call.path, 0) + 1
    differences: list[str] = []
    for path, count in export_counts.items():
        eager = eager_counts.get(path, 0)
        if eager == 0:
            differences.append(f"export calls {_name(path)}, eager never does")
        elif count != eager:
            differences.append(f"export calls {_name(path)} {_times(count)}, eager {_times(eager)}")
    unseen = tuple(_name(path) for path in eager_counts if path not in export_counts)
    seen = [
        (call.path, call.nth, call.output_tensors)
        for call in trace.calls
        if call.path in export_counts and not call.raised
    ]
    if not differences:
        differences += _order_difference([(path, nth) for path, nth, _ in seen], exported)
    if not differences:
        differences += _shape_differences(seen, exported, eager_counts)
    return ExportComparison(strict, tuple(exported), tuple(differences), unseen)


def _renumbered(exported: list[ExportedCall]) -> list[ExportedCall]:
    """The calls with each module's calls numbered again, in order (after aliases merged)."""
    numbers: dict[str, int] = {}
    renumbered = []
    for call in exported:
        numbers[call.path] = numbers.get(call.path, 0) + 1
        renumbered.append(replace(call, call_number=numbers[call.path]))
    return renumbered


def _order_difference(eager: list[tuple[str, int]], exported: Sequence[ExportedCall]) -> list[str]:
    """The first call export makes in another order than eager, in words."""
    in_export = [(call.path, call.call_number) for call in exported]
    for position, (eager_call, export_call) in enumerate(zip(eager, in_export, strict=False)):
        if eager_call != export_call:
            before = f"after {_call(*eager[position - 1])}" if position else "first"
            return [
                f"export calls {_call(*export_call)} where eager calls {_call(*eager_call)} "
                f"({before})"
            ]
    return []


def _shape_differences(
    seen: list[tuple[str, int, Any]], exported: Sequence[ExportedCall], counts: dict[str, int]
) -> list[str]:
    """Calls whose single tensor output eager gives another shape than export's last
    operation in that call (calls that return several tensors are not compared)."""
    shapes = {(call.path, call.call_number): call.output_shape for call in exported}
    differences = []
    for path, nth, outputs in seen:
        exported_shape = shapes.get((path, nth))
        if len(outputs) != 1 or exported_shape is None:
            continue
        if tuple(outputs[0].shape) != exported_shape:
            number = f" (call {nth})" if counts[path] > 1 else ""
            differences.append(
                f"{_name(path)}{number} returns {_shape(outputs[0].shape)} in eager, "
                f"{_shape(exported_shape)} in export"
            )
    return differences


def _name(path: str) -> str:
    return path or "<root>"


def _call(path: str, nth: int) -> str:
    return f"{_name(path)} (call {nth})"


_TIMES = ("never", "once", "twice", "three times", "four times", "five times", "six times")


def _times(count: int) -> str:
    return _TIMES[count] if count < len(_TIMES) else f"{count} times"


def _shape(shape: Sequence[int]) -> str:
    return f"[{','.join(map(str, shape))}]"
