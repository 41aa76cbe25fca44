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

One module holds the whole facet behind the protocol (`TraceFacet`, calls/facet_records.py):
its option, what it measures, the header sections it writes and reads back into
`CompileRecords`, and the words for a change. It is registered as a built-in plugin
(`hookspecs.BUILTIN_PLUGINS`), so the trace, the golden and the diff reach it through the
`pytest_fwdorder_facets` hook and never name it. torch is imported only where the model is
compiled (pytest's start-up registers this module), torch._dynamo only when a trace asks
for graph breaks.

    # graph breaks (1 break, 2 graphs, backend eager):
    #   block.1 (call 1): data-dependent branch on a tensor's value at model.py:42
    # recompilations on a second call (0)
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
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.calls.facet_records import CompileRecords, GraphBreak, Recompilation
from pytest_fwdorder.golden.format import SECTION_ITEM, render_section
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.hookspecs import hookimpl

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch
    from torch import nn

    from pytest_fwdorder.calls.facet_records import TraceFacet

BACKEND = "eager"
GRAPH_BREAKS_SECTION = "graph breaks"
RECOMPILATIONS_SECTION = "recompilations on a second call"
# `# graph breaks (1 break, 2 graphs, backend eager):`
_GRAPH_BREAKS_TITLE = re.compile(
    rf"# {GRAPH_BREAKS_SECTION} \((?P<breaks>[0-9]+) breaks?, (?P<graphs>[0-9]+) graphs?, "
    r"backend (?P<backend>[^)]+)\)"
)
# A graph breaks item, `block.1 (call 1): <reason> at model.py:42`.
_BREAK_ITEM = re.compile(r"(?P<path>\S+) \(call (?P<number>[0-9]+)\): (?P<rest>.*)")
_RECOMPILATION_ITEM = re.compile(
    r"(?P<path>\S+): (?P<source>\S+) after the guard (?P<guard>.*) failed"
)
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


class GraphBreaksFacet:
    """Graph breaks as a facet with one value per trace: the `CompileRecords` of the model."""

    title = "graph breaks"
    change_words = "graph breaks changed"
    option = "graph_breaks"
    # The HTML report's warning boxes: (section, noun for one item, what the items are).
    report_warnings = (
        (GRAPH_BREAKS_SECTION, "graph break", "in the model compiled with torch.compile"),
        (RECOMPILATIONS_SECTION, "recompilation", "when the compiled model is called again"),
    )
    record_refusal = (
        "record(graph_breaks=True) cannot compile a block of code: pass the model and its "
        "inputs to trace_forward(model, x, graph_breaks=True), or use "
        "assert_no_graph_breaks(model, x)"
    )

    def measure(
        self,
        model: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        device: torch.device | str | None,
    ) -> CompileRecords:
        """What dynamo makes of the model on the traced inputs; refuses meta."""
        import torch

        if device is not None and torch.device(device).type == "meta":
            raise ValueError(
                "graph_breaks=True runs the compiled model, which a trace on device='meta' "
                "cannot do: trace on the CPU (device=None or 'cpu') to record graph breaks"
            )
        return compiled_records(model, args, kwargs)

    def header_lines(self, value: CompileRecords) -> list[str]:
        return render_compiled(value)

    def read_header(self, header: Sequence[str]) -> CompileRecords | None:
        """The compile sections of a golden's header, or None when it has none."""
        title = next(filter(None, map(_GRAPH_BREAKS_TITLE.match, header)), None)
        if title is None:
            return None
        sections = GoldenHeader.sections_of(header)
        return CompileRecords(
            backend=title.group("backend"),
            graphs=int(title.group("graphs")),
            breaks=tuple(map(_read_break, sections.get(GRAPH_BREAKS_SECTION, []))),
            recompilations=tuple(
                map(_read_recompilation, sections.get(RECOMPILATIONS_SECTION, []))
            ),
        )

    def describe_changes(self, old: CompileRecords, new: CompileRecords) -> list[str]:
        """The count, the graphs, each break and recompilation added or removed, in words:
        `graph breaks 1 -> 0`, `graph break removed in blocks.1 (call 1): ... at model.py:10`."""
        details: list[str] = []
        if len(old.breaks) != len(new.breaks):
            details.append(f"graph breaks {len(old.breaks)} -> {len(new.breaks)}")
        if old.graphs != new.graphs:
            details.append(f"graphs {old.graphs} -> {new.graphs}")
        old_breaks, new_breaks = _break_items(old), _break_items(new)
        details += _added_and_removed("graph break", old_breaks, new_breaks)
        old_again, new_again = _recompilation_items(old), _recompilation_items(new)
        details += _added_and_removed("recompilation", old_again, new_again)
        return details


GRAPH_BREAKS = GraphBreaksFacet()


@hookimpl
def pytest_fwdorder_facets() -> list[TraceFacet]:
    """The graph breaks facet."""
    return [GRAPH_BREAKS]


def render_compiled(records: CompileRecords) -> list[str]:
    """The header's compile sections (`graph_breaks=True`): the graph breaks, each with the
    module call, the reason and the user's line, then what a second call compiled again."""
    count, graphs = len(records.breaks), records.graphs
    title = (
        f"# {GRAPH_BREAKS_SECTION} ({count} break{'s' if count != 1 else ''}, "
        f"{graphs} graph{'s' if graphs != 1 else ''}, backend {records.backend})"
    )
    return [
        title + (":" if records.breaks else ""),
        *(f"{SECTION_ITEM}{item}" for item in _break_items(records)),
        *render_section(RECOMPILATIONS_SECTION, _recompilation_items(records)),
    ]


def _break_items(records: CompileRecords) -> list[str]:
    return [
        f"{found.module_path} (call {found.call_number}): {found.reason} at {found.source}"
        for found in records.breaks
    ]


def _recompilation_items(records: CompileRecords) -> list[str]:
    return [
        f"{again.module_path}: {again.source} after the guard {again.guard} failed"
        for again in records.recompilations
    ]


def _read_break(item: str) -> GraphBreak:
    """A graph breaks item as `_break_items` writes it; an item edited out of shape keeps its
    text as the reason, so that a change to it still shows."""
    match = _BREAK_ITEM.fullmatch(item)
    if match is None:
        return GraphBreak(item, 0, item, "")
    reason, _, source = match.group("rest").rpartition(" at ")
    return GraphBreak(match.group("path"), int(match.group("number")), reason, source)


def _read_recompilation(item: str) -> Recompilation:
    match = _RECOMPILATION_ITEM.fullmatch(item)
    if match is None:
        return Recompilation(item, "", item)
    return Recompilation(match.group("path"), match.group("source"), match.group("guard"))


def _added_and_removed(noun: str, old: list[str], new: list[str]) -> list[str]:
    """`graph break added in <item>` for each item only in new, `... removed in` for old."""
    return [f"{noun} removed in {item}" for item in old if item not in new] + [
        f"{noun} added in {item}" for item in new if item not in old
    ]


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

    from pytest_fwdorder.recording.model_index import index_model
    from pytest_fwdorder.recording.model_state import capture_state

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

    from pytest_fwdorder.recording.model_state import restore_state

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
    from torch import nn

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
