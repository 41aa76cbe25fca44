"""Graph breaks (`graph_breaks=True`): compile the model with dynamo and record where it broke.

The model is compiled with `torch.compile(model, backend=...)` on a backend that needs no
C++ compiler (dynamo's graphs are run as they are, as the "eager" backend does), run on the
traced inputs, then run again with the same inputs to see what compiles a second time.

Where a break happens is read from dynamo's own graph-break log, which names the user's
line and the reason, while the log is written: at that moment the frames of the module
calls dynamo is tracing are on the Python stack, so the innermost one names the module call
(from our index of the model, not from dynamo's numbering). A break dynamo meets first while
tracing a parent (inlining the child) and again while tracing the child's own frame is one
break, named at the child. Dynamo's caches are emptied (`torch._dynamo.reset()`) before
and after, and the model's state is put back as a trace puts it back.

torch._dynamo is imported only when a trace asks for graph breaks.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch import nn

from pytest_fwdorder.calls.facet_records import CompileRecords, GraphBreak, Recompilation
from pytest_fwdorder.recording.model_index import index_model
from pytest_fwdorder.recording.model_state import capture_state, restore_state

BACKEND = "eager"
# Dynamo's graph-break log: `Graph break ... in user code at FILE:LINE\nGraph Break Reason: ...`.
_BREAK_LOCATION = re.compile(r"in user code at (?P<file>.*):(?P<line>[0-9]+)\n")
_REASON_PREFIX = "Graph Break Reason: "
# When the break is met inside a call dynamo was inlining, the reason starts with this
# sentence and a blank line before dynamo's own words.
_INLINED_CALL = "Encountered graph break when attempting to trace"
# Dynamo's first line of a reason -> our words, for the reasons users meet most; any other
# reason is written as dynamo's first line. Older releases word some of them differently
# (`generic_jump TensorVariable()` for a data-dependent branch): both map to the same words.
_REASON_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Data-dependent branching|generic_jump"),
        "data-dependent branch on a tensor's value",
    ),
    (re.compile(r"Tensor\.item\(\)"), "Tensor.item() reads a tensor's value"),
    (re.compile(r"builtin operator `?(?P<name>\w+)`?|builtin: (?P<other>\w+)"), "call of {name}()"),
)
# `Recompiling function forward in FILE:LINE` and its first failed guard, `- GUARD`.
_RECOMPILING = re.compile(r"Recompiling function (?P<name>\S+) in (?P<file>.*):(?P<line>[0-9]+)")
_GUARD = re.compile(r"^\s*- (?P<guard>.+)$", re.MULTILINE)
_GUARD_NUMBER = re.compile(r"^[0-9]+/[0-9]+: ")


@dataclass(slots=True)
class _Seen:
    """What the compiled runs showed: each break as it was logged, graphs per run."""

    breaks: list[GraphBreak] = field(default_factory=list)
    graphs: int = 0
    # The module-call frames met so far, per module path: a new frame is a new call.
    frames: dict[str, list[FrameType]] = field(default_factory=dict)


def compiled_records(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> CompileRecords:
    """Compile `model` with dynamo, call it twice with `args` and `kwargs`, and return where
    the graph broke on the first call and what compiled again on the second.

    The model's state (buffers, attributes, grad mode, random states) is put back afterwards,
    and dynamo's caches are emptied before and after, so that nothing compiled here is reused.
    """
    import torch._dynamo

    index = index_model(model)
    paths = {module_id: entry.path for module_id, entry in index.entries.items()}
    seen = _Seen()
    state = capture_state(index)
    torch._dynamo.reset()
    # The eager trace has shown the forward's own warnings; here dynamo's internal ones
    # (about a non-leaf's .grad it reads while tracing) would fail a suite that turns
    # warnings into errors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _compiled_runs(model, args, kwargs, paths, seen, state)


def _compiled_runs(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    paths: dict[int, str],
    seen: _Seen,
    state: Any,
) -> CompileRecords:
    """The two compiled calls, with dynamo's caches emptied and the model's state put back."""
    import torch._dynamo

    try:
        compiled = torch.compile(model, backend=_counting_backend(seen))
        with _graph_breaks_logged(lambda message: _note_break(message, paths, seen)):
            compiled(*args, **kwargs)
        graphs = seen.graphs
        recompilations = _second_call(compiled, args, kwargs, paths, seen)
    finally:
        torch._dynamo.reset()
        restore_state(state)
        seen.frames.clear()  # the frames hold the model's tensors
    return CompileRecords(
        backend=BACKEND,
        graphs=graphs,
        breaks=tuple(_distinct_breaks(seen.breaks)),
        recompilations=recompilations,
    )


def _counting_backend(seen: _Seen) -> Callable[..., Any]:
    """A backend that counts the graphs dynamo hands it and runs each as it is ("eager")."""

    def backend(graph_module: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        seen.graphs += 1
        return graph_module.forward

    return backend


def _second_call(
    compiled: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    paths: dict[int, str],
    seen: _Seen,
) -> tuple[Recompilation, ...]:
    """Call the compiled model again with the same inputs; a recompilation raises (dynamo's
    `error_on_recompile`), and its message names the function and the guard that failed."""
    import torch._dynamo
    from torch._dynamo.exc import RecompileError

    try:
        with torch._dynamo.config.patch(error_on_recompile=True):
            compiled(*args, **kwargs)
    except RecompileError as error:
        module_path, _ = _innermost_call(error.__traceback__, paths, seen)
        return (_recompilation(str(error), module_path),)
    return ()


def _recompilation(message: str, module_path: str) -> Recompilation:
    """The recompilation a RecompileError's message describes, without dynamo's numbering
    (`0/0: `) or the comment and hint it appends to the guard."""
    where = _RECOMPILING.search(message)
    found = _GUARD.search(message)
    guard = found.group("guard") if found else message.splitlines()[0]
    # Dynamo pads the guard with spaces before its source comment or hint (`  # x += 1`,
    # `  (HINT: ...)`), which say where, not what, and differ between releases.
    guard = re.split(r"\s{2,}", _GUARD_NUMBER.sub("", guard).strip())[0]
    source = (
        f"{os.path.basename(where.group('file'))}:{where.group('line')}" if where else "unknown"
    )
    return Recompilation(module_path=module_path, source=source, guard=guard)


@contextmanager
def _graph_breaks_logged(note: Callable[[str], None]) -> Iterator[None]:
    """Hand each message of dynamo's graph-break log to `note`, for the length of the block.

    The log is switched on for this logger only (its level), kept from reaching the user's
    handlers, and put back as it was on exit.
    """
    from torch._logging import getArtifactLogger  # type: ignore[attr-defined]

    logger = getArtifactLogger("torch._dynamo.symbolic_convert", "graph_breaks")
    handler = _Handler(note)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


class _Handler(logging.Handler):
    """Hands each record's message to a function, in the thread that logs it."""

    def __init__(self, note: Callable[[str], None]) -> None:
        super().__init__(logging.DEBUG)
        self.note = note

    def emit(self, record: logging.LogRecord) -> None:
        self.note(record.getMessage())


def _note_break(message: str, paths: dict[int, str], seen: _Seen) -> None:
    """Keep one logged graph break: the module call being traced, the reason, the line."""
    location = _BREAK_LOCATION.search(message)
    if location is None:
        return
    module_path, call_number = _innermost_call(sys._getframe(), paths, seen)
    reason = reason_in_words(message.partition(_REASON_PREFIX)[2])
    source = f"{os.path.basename(location.group('file'))}:{location.group('line')}"
    seen.breaks.append(GraphBreak(module_path, call_number, reason, source))


def reason_in_words(reason: str) -> str:
    """Dynamo's reason for a graph break in our words: its kind, not its hints or the
    operations around it, so that the golden stays the same across releases."""
    if reason.startswith(_INLINED_CALL):
        reason = reason.partition("\n\n")[2] or reason
    first_line = reason.strip().splitlines()[0] if reason.strip() else "unknown reason"
    for pattern, words in _REASON_WORDS:
        match = pattern.search(first_line if "{name}" not in words else reason)
        if match is None:
            continue
        if "{name}" in words:
            return words.format(name=match.group("name") or match.group("other"))
        return words
    return first_line.removeprefix("Unsupported: ").strip()


def _innermost_call(frame: FrameType | Any, paths: dict[int, str], seen: _Seen) -> tuple[str, int]:
    """The innermost module call of the model on the stack at `frame` (a frame, or a
    traceback whose innermost frame is used): its path and which call of that module it is."""
    if frame is not None and not isinstance(frame, FrameType):  # a traceback
        while frame.tb_next is not None:
            frame = frame.tb_next
        frame = frame.tb_frame
    call_code = nn.Module._call_impl.__code__
    while frame is not None:
        if frame.f_code is call_code:
            module = frame.f_locals.get("self")
            path = paths.get(id(module))
            if path is not None:
                return _display(path), _call_number(_display(path), frame, seen)
        frame = frame.f_back
    return "<root>", 1


def _call_number(path: str, frame: FrameType, seen: _Seen) -> int:
    """Which call of the module `frame` is: a frame not met before is its next call."""
    frames = seen.frames.setdefault(path, [])
    for number, known in enumerate(frames, start=1):
        if known is frame:
            return number
    frames.append(frame)
    return len(frames)


def _display(path: str) -> str:
    return path or "<root>"


def _distinct_breaks(logged: list[GraphBreak]) -> Iterator[GraphBreak]:
    """The breaks as the user sees them, in the order dynamo met them.

    Dynamo logs a break inside an inlined child while tracing the parent, then again while
    tracing the child's own frame: the same reason at the same line, under a deeper call.
    Such a break is kept once, at the deepest call; a repeat of the same record is dropped.
    """
    kept: list[GraphBreak] = []
    for found in logged:
        deeper = any(
            (other.reason, other.source) == (found.reason, found.source)
            and _is_inside(other.module_path, found.module_path)
            for other in logged
        )
        if not deeper and found not in kept:
            kept.append(found)
    yield from kept


def _is_inside(path: str, ancestor: str) -> bool:
    """Whether `path` is a module strictly under `ancestor` (display paths)."""
    if path == ancestor:
        return False
    return ancestor == "<root>" or path.startswith(ancestor + ".")
