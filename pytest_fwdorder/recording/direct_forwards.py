"""Forwards run without a module call: find them, record the ones that can be seen truthfully.

Module hooks fire only when a module is called. `self.mlp.forward(x)`, `super().forward(x)`
on another module or a bound forward kept elsewhere run a module's code without them, so
the golden would silently lack those runs. For the length of a trace this module watches:

- "watch": each Python module gets an instance attribute `forward`, a function that calls
  the module's own forward. `Module._call_impl` calls `self.forward`, so it runs for hooked
  calls and for `module.forward(...)` alike; from its caller's frame it tells the two apart.
  A direct run is recorded as a call of its own (its inputs and output are the ones forward
  gets and returns), marked `[direct]`. The attribute is put back exactly at the end (the
  module's own instance `forward`, if it had one, or none), before the model's state is
  compared with what it was.
- "profile": also a profile function (`sys.setprofile`, this thread only, for the block)
  that sees each module class's forward code start: one started neither by a module call,
  nor by the watch, nor by a forward of the same module (a subclass's `super().forward`)
  ran without a call. It sees the arguments only as bound names, not as given, so such runs
  are listed in the header, not recorded. Python 3.11 has no cheaper way to see code start
  (3.12's `sys.monitoring` would be); it costs about 1.5-1.9 times a trace's time.

What neither sees: a forward that a module's code runs on a module that is not part of the
model (there is no path to name it by), and runs in other threads.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from itertools import repeat
from pathlib import PurePath
from types import CodeType, FrameType
from typing import Any

from torch import nn

from pytest_fwdorder.calls.facet_records import ForwardRun
from pytest_fwdorder.errors import warn_at_caller

__all__ = ["DIRECT_MARK_HOW", "forwards_watched", "is_watching_forward"]

DIRECT_MARK_HOW = "called as .forward"
_ABSENT = object()
_VARARGS = 0x04  # inspect.CO_VARARGS


def _module_call_codes() -> frozenset[CodeType]:
    """The code of torch's frames that call `self.forward` for a module call: `_call_impl`
    (and the functions inside it, `inner`), `_slow_forward` (under the JIT tracer)."""
    found = [nn.Module._call_impl.__code__]
    found += [value for value in found[0].co_consts if isinstance(value, CodeType)]
    slow_forward = getattr(nn.Module, "_slow_forward", None)
    if slow_forward is not None:
        found.append(slow_forward.__code__)
    return frozenset(found)


_MODULE_CALL_CODES = _module_call_codes()
# Asked by id: a code object's hash is worked out afresh from its contents at every ask
# (about a microsecond for `_call_impl`'s), an int's costs nothing. The codes above, and
# the classes of the modules traced, keep these ids theirs.
_MODULE_CALL_CODE_IDS = frozenset(map(id, _MODULE_CALL_CODES))


class _Watch:
    """One trace's watch: the runs it saw, by (module id, how, caller, location)."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.thread_id = threading.get_ident()
        self.runs: dict[tuple[int, str, str | None, str], int] = {}
        self.direct_numbers: list[int] = []
        self.forward_codes: frozenset[CodeType] = frozenset()  # "profile"'s, held

    def note(self, module: nn.Module, how: str, caller: FrameType | None) -> None:
        """Count one run of `module`'s forward without a call, from the `caller` frame."""
        open_calls = self.recorder.open_calls
        caller_path = open_calls[-1].entry.path if open_calls else None
        location = "?"
        if caller is not None:
            location = f"{PurePath(caller.f_code.co_filename).name}:{caller.f_lineno}"
        key = (id(module), how, caller_path, location)
        self.runs[key] = self.runs.get(key, 0) + 1

    def run_direct(
        self,
        module: nn.Module,
        forward: Callable[..., Any],
        caller: FrameType,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Run `module.forward(...)` called directly, recorded as a call between the
        recorder's own hooks, and count it."""
        recorder = self.recorder
        self.note(module, DIRECT_MARK_HOW, caller)
        before_forward, after_forward = recorder.hook_pair
        number = len(recorder.records)
        before_forward(module, args)
        recorded = len(recorder.records) > number
        if recorded:
            self.direct_numbers.append(number)
        try:
            output = forward(*args, **kwargs)
        except BaseException:
            if recorded:
                after_forward(module, args)  # as torch's always_call hook says it raised
            raise
        if recorded:
            after_forward(module, args, kwargs, output)
        return output

    def forward_runs(self) -> tuple[ForwardRun, ...]:
        """The runs seen, in the order first seen, for the modules the recorder knows."""
        entries = self.recorder.entries
        found = []
        for (module_id, how, caller, location), count in self.runs.items():
            entry = entries.get(module_id)
            if entry is None:
                continue  # not part of the model: no path to name it by
            recorded = how == DIRECT_MARK_HOW
            found.append(
                ForwardRun(entry.path, entry.module_type, how, caller, location, count, recorded)
            )
        return tuple(found)


def _forward_watched(
    thread_id: int,
    watch: _Watch,
    module: nn.Module,
    forward: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """The instance attribute `forward` of one module for the length of a trace, with its
    first four arguments bound by `partial` (made in C: a trace gives one to every module)."""
    caller = _get_frame(1)  # the caller of the partial, which makes no frame of its own
    if id(caller.f_code) in _MODULE_CALL_CODE_IDS or _get_ident() != thread_id:
        return forward(*args, **kwargs)  # a module call: the hooks record it
    return watch.run_direct(module, forward, caller, args, kwargs)


class _WatchingForward(partial[Any]):
    """`_forward_watched` with its first four arguments bound: the `forward` a module holds
    for the length of a trace.

    `__wrapped__` (which `inspect.signature(module.forward)` follows to the module's own
    forward) is read from the bound arguments rather than set on each one: setting it would
    give every one of them a `__dict__`, a third of the watch's cost on a model of many
    modules. A subclass, still called in C (no frame of its own).
    """

    __slots__ = ()

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        forward: Callable[..., Any] = self.args[3]
        return forward


_FORWARD_WATCHED_CODE: CodeType = _forward_watched.__code__
_get_frame, _get_ident = sys._getframe, threading.get_ident
_FORWARD = operator.attrgetter("forward")


def is_watching_forward(value: object) -> bool:
    """Whether `value` is the `forward` a trace's watch gave a module for its length."""
    return type(value) is _WatchingForward


def _install_watch(
    watch: _Watch, modules: list[nn.Module]
) -> tuple[list[dict[str, Any]], list[object], list[_WatchingForward]]:
    """Give each module its watching `forward`: (their `__dict__`s, what each held under
    `forward` before, or _ABSENT, and the watching forwards). Each step is a `map` in C."""
    attribute_dicts = list(map(vars, modules))
    forwards = list(map(_FORWARD, modules))
    wrappers = list(
        map(
            _WatchingForward,
            repeat(_forward_watched),
            repeat(watch.thread_id),
            repeat(watch),
            modules,
            forwards,
        )
    )
    previous = list(map(dict.get, attribute_dicts, repeat("forward"), repeat(_ABSENT)))
    deque(map(dict.__setitem__, attribute_dicts, repeat("forward"), wrappers), maxlen=0)
    return attribute_dicts, previous, wrappers


def _remove_watch(
    attribute_dicts: list[dict[str, Any]], previous: list[object], wrappers: list[_WatchingForward]
) -> None:
    """Put back what each module held under `forward` (nothing, mostly) where the watch's
    forward is still there; where forward replaced it, the model's state check puts that back."""
    if all(map(operator.is_, previous, repeat(_ABSENT))) and all(
        map(operator.is_, map(dict.get, attribute_dicts, repeat("forward")), wrappers)
    ):
        deque(map(dict.__delitem__, attribute_dicts, repeat("forward")), maxlen=0)
        return
    for attributes, before, wrapper in zip(attribute_dicts, previous, wrappers, strict=True):
        if attributes.get("forward") is not wrapper:
            continue
        if before is _ABSENT:
            del attributes["forward"]
        else:
            attributes["forward"] = before


@contextmanager
def forwards_watched(recorder: Any, modules: list[nn.Module], mode: str) -> Iterator[None]:
    """Watch `modules`' forwards for runs without a call as `mode` says ("watch", "profile"
    or "off"); at the end put every instance attribute back and give the trace what was
    seen (`forward_runs`, `direct_calls`)."""
    if mode == "off":
        yield
        return
    watch = _Watch(recorder)
    installed: tuple[list[dict[str, Any]], list[object], list[_WatchingForward]] | None = None
    previous_profile = sys.getprofile()
    profiling = False
    try:
        installed = _install_watch(watch, modules)
        if mode == "profile":
            if previous_profile is not None:
                warn_at_caller(
                    f"direct_forwards='profile' needs the profile hook, which "
                    f"{previous_profile!r} holds: only module.forward(...) runs are watched "
                    "in this trace. Stop the profiler, or use direct_forwards='watch'"
                )
            else:
                sys.setprofile(_profile_function(watch, modules))
                profiling = True
        yield
    finally:
        if profiling:
            sys.setprofile(previous_profile)
        if installed is not None:
            _remove_watch(*installed)
        recorder.trace.forward_runs = watch.forward_runs()
        recorder.trace.direct_calls = frozenset(watch.direct_numbers)


def forward_codes(modules: list[nn.Module]) -> frozenset[CodeType]:
    """The code each module class's forward starts with, and the code of the functions its
    decorators wrap (`__wrapped__`), for every class in the modules' class hierarchies."""
    codes: set[CodeType] = set()
    seen: set[type] = set()
    for module in modules:
        for cls in type(module).__mro__:
            if cls in seen:
                continue
            seen.add(cls)
            function = cls.__dict__.get("forward")
            while function is not None:
                code = getattr(function, "__code__", None)
                if isinstance(code, CodeType) and code is not _FORWARD_UNIMPLEMENTED:
                    codes.add(code)
                function = getattr(function, "__wrapped__", None)
    return frozenset(codes)


_FORWARD_UNIMPLEMENTED = nn.Module.forward.__code__
_RUN_DIRECT_CODE = _Watch.run_direct.__code__


def _first_argument(frame: FrameType) -> object:
    """The first argument of the function running in `frame` (its `self`), or None."""
    code = frame.f_code
    if code.co_argcount:
        return frame.f_locals.get(code.co_varnames[0])
    if code.co_flags & _VARARGS:  # `def wrapper(*args, **kwargs)`: self is args[0]
        args = frame.f_locals.get(code.co_varnames[code.co_kwonlyargcount])
        return args[0] if isinstance(args, tuple) and args else None
    return None


def _profile_function(watch: _Watch, modules: list[nn.Module]) -> Callable[..., None]:
    """The profile function of "profile": counts forward code started without a call."""
    watch.forward_codes = forward_codes(modules)  # held: their ids stay theirs
    codes = frozenset(map(id, watch.forward_codes))  # asked by id, as above
    # A module call, the watch's `.forward` and its recorded direct run start forward code.
    accounted = _MODULE_CALL_CODE_IDS | {id(_FORWARD_WATCHED_CODE), id(_RUN_DIRECT_CODE)}
    entries, note = watch.recorder.entries, watch.note

    def profile(frame: FrameType, event: str, argument: object) -> None:
        if event != "call" or id(frame.f_code) not in codes:
            return
        caller = frame.f_back
        if caller is None or id(caller.f_code) in accounted:
            return
        module = _first_argument(frame)
        if id(module) not in entries:
            return
        if id(caller.f_code) in codes and _first_argument(caller) is module:
            return  # a subclass's super().forward, or a decorator's call, on the same module
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)  # 3.11+: qualified
        note(module, f"run as {name}", caller)  # type: ignore[arg-type]

    return profile
