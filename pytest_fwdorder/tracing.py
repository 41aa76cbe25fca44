"""The public ways to trace: `trace_forward`, `record`, and the `Tracer` behind the fixture."""

from __future__ import annotations

import difflib
import gc
import inspect
import linecache
import operator
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors
from torch.utils.weak import WeakIdKeyDictionary

from pytest_fwdorder.backward import BackwardRecorder
from pytest_fwdorder.describe import tensors_of
from pytest_fwdorder.distributed import compiled_code_run_eagerly, process_rank
from pytest_fwdorder.errors import (
    EmptyTraceError,
    MetaTraceError,
    UnregisteredModuleError,
    warn_at_caller,
)
from pytest_fwdorder.hooks import call_view_hooks_exist, call_views_from_plugins
from pytest_fwdorder.operations import OperationMode, attach_operations, operations_recorded
from pytest_fwdorder.options import (
    OPERATION_GROUPS,
    OPTION_NAMES,
    TraceOptions,
    check_option_values,
)
from pytest_fwdorder.recorder import recording, resolve_model
from pytest_fwdorder.records import Call, RenderOptions
from pytest_fwdorder.trace import Trace


@dataclass(frozen=True)
class TensorSpec:
    """A tensor given by shape and dtype only: made as an empty meta tensor on `device='meta'`.

    On a real device it becomes `torch.randn` (floating dtypes) or zeros (other dtypes),
    so the same spec serves meta and real runs.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        if not isinstance(self.shape, (tuple, list, torch.Size)):
            raise TypeError(
                f"TensorSpec shape must be a tuple of ints, got {type(self.shape).__name__} "
                f"{self.shape!r}: write TensorSpec((1, 3, 224, 224))"
            )
        sizes = []
        for size in self.shape:
            if isinstance(size, bool) or not hasattr(size, "__index__"):
                raise TypeError(
                    f"TensorSpec shape must hold ints, got {size!r} in {self.shape!r}: "
                    "write TensorSpec((1, 3, 224, 224))"
                )
            sizes.append(operator.index(size))
        if any(size < 0 for size in sizes):
            raise ValueError(
                f"TensorSpec shape must be non-negative ints, got {self.shape!r}: "
                "write TensorSpec((1, 3, 224, 224))"
            )
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(
                f"TensorSpec dtype must be a torch.dtype, got {self.dtype!r}: "
                "write dtype=torch.float16"
            )
        object.__setattr__(self, "shape", tuple(sizes))

    def materialize(self, device: torch.device | str | None = None) -> torch.Tensor:
        """A tensor of this shape and dtype on `device` (CPU when None)."""
        target = torch.device(device if device is not None else "cpu")
        if target.type == "meta":
            return torch.empty(self.shape, dtype=self.dtype, device=target)
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return torch.randn(self.shape, dtype=self.dtype, device=target)
        return torch.zeros(self.shape, dtype=self.dtype, device=target)


def trace_forward(
    model: nn.Module | Callable[[], nn.Module],
    *args: Any,
    device: torch.device | str | None = None,
    show_devices: bool = False,
    hide: Iterable[str] = (),
    unregistered: str = "warn",
    show_local_shapes: bool = False,
    fold: Iterable[str] = (),
    ops: bool = False,
    ops_skip: Iterable[str] = OPERATION_GROUPS,
    backward: bool | Callable[[Any], Any] = False,
    model_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Trace:
    """Run `model(*args, **kwargs)` once and return the record of every module call.

    `model` may also be a zero-argument function that builds the model: with
    `device='meta'` its factory calls and every parameter and buffer it registers land on
    meta (no weights are allocated or initialised), while its own arithmetic whose values it
    reads keeps real CPU values (such a builder is called again, at most 8 times in all,
    with the tensors whose values it read made on the CPU).
    With `device`, inputs (tensors or `TensorSpec`) are placed on it and an existing model
    runs with stand-in parameters there, untouched. `hide` leaves facets out of the golden
    (`"settings"`, `"parameters"`, `"mode"`, `"argument_names"`); `unregistered="error"`
    raises `UnregisteredModuleError` instead of warning when a module that owns parameters
    runs without being registered under the model. `show_local_shapes` writes each DTensor's
    local shard shape after its placements. `fold` names module paths or types whose calls
    the golden writes as one line each, their inside summarized. `ops` records the
    torch-level operations each module's forward calls directly (`ops_skip` says what is
    left out: `"views"`, `"conversions"`, `"torch_modules"` or operation names); `backward`
    runs backward from the output (True: from the sum of its floating tensors; or a
    function of the output that returns the loss) and records its order, leaving every
    `.grad` as it was. The trace options are keyword-only; a
    model keyword argument that has an option's name goes in `model_kwargs={"device": ...}`.

    The model is left as it was: parameters, buffers, plain attributes, training and
    requires_grad flags, grad mode, the random states; no hook stays registered, also when
    forward raises. On `device='meta'` any failure of forward is a `MetaTraceError` whose
    cause is the original error.
    """
    kwargs = _merge_model_kwargs(kwargs, model_kwargs)
    options = _trace_options(
        device, show_devices, hide, unregistered, show_local_shapes, fold, ops, ops_skip, backward
    )
    root = _build(model, device)
    args = _place(args, device)
    kwargs = _place(kwargs, device)
    backward_recorder = BackwardRecorder(options.backward) if options.backward else None
    operations: list[OperationMode] = []
    with (
        _collector_paused(),
        _meta_failures_explained(device) as traces,
        compiled_code_run_eagerly(root),
        _backward_watched(backward_recorder),
        recording(root, _render_options(options), device=device) as recorder,
        _operations_recorded(recorder, root, options, operations),
        _autocast_refused(device),
    ):
        traces.append(recorder.trace)
        if backward_recorder is None:
            root(*args, **kwargs)
        else:
            backward_recorder.recorder = recorder
            with torch.enable_grad():
                output = root(*args, **kwargs)
            backward_recorder.run(root, (args, kwargs), output)
    _finish_facets(recorder.trace, operations, backward_recorder)
    _check_and_choose_views(recorder.trace, options)
    return recorder.trace


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the length of one traced forward.

    A trace makes many small objects that live until it is rendered; with the collector on,
    each adds to the count that starts a full collection over every object of the process
    (torch's included): about a third of a trace of small modules. Only `trace_forward`
    pauses it, for one forward; a `record` block runs the user's own code and leaves it on.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@contextmanager
def record(
    model: nn.Module,
    *,
    device: torch.device | str | None = None,
    show_devices: bool = False,
    hide: Iterable[str] = (),
    unregistered: str = "warn",
    show_local_shapes: bool = False,
    fold: Iterable[str] = (),
    ops: bool = False,
    ops_skip: Iterable[str] = OPERATION_GROUPS,
    backward: bool | Callable[[Any], Any] = False,
    restore_state: bool = True,
    allow_empty: bool = False,
) -> Iterator[Trace]:
    """Record every call of `model`'s modules made in this thread inside the block.

    Yields a `Trace` that holds the calls once the block ends (several forwards, a generate
    loop): hooks keep raw records while the block runs, and the calls are built at its end.
    Nothing after the block is recorded. With `device` the model runs there with stand-in
    parameters and tensors made in the block land there (on 'meta', pass meta inputs:
    `TensorSpec(...).materialize('meta')` or `torch.empty(..., device='meta')`). The other
    options are `trace_forward`'s; with `backward`, the backward passes the block runs itself
    are recorded (the block's own loss: `backward`'s loss function is not used). With
    `restore_state` (the default) the model's parameters, buffers and flags are put back at
    the end, as `trace_forward` does. A block that never calls the model raises
    `EmptyTraceError` unless `allow_empty`.
    """
    root = resolve_model(model, entry_point="record")
    options = _trace_options(
        device, show_devices, hide, unregistered, show_local_shapes, fold, ops, ops_skip, backward
    )
    backward_recorder = BackwardRecorder(options.backward) if options.backward else None
    operations: list[OperationMode] = []
    with (
        compiled_code_run_eagerly(root),
        _backward_watched(backward_recorder),
        recording(
            root, _render_options(options), device=device, restore_state=restore_state
        ) as recorder,
        _operations_recorded(recorder, root, options, operations),
        _autocast_refused(device),
    ):
        if backward_recorder is not None:
            backward_recorder.recorder = recorder
        yield recorder.trace
    trace = recorder.trace
    _finish_facets(trace, operations, backward_recorder)
    if not trace.calls and not allow_empty:
        raise EmptyTraceError(
            f"record({trace.root_type}) saw no call of the model or its modules inside the "
            "block: call the model itself inside the `with` block (not a copy of it), or "
            "pass allow_empty=True if an empty trace is what you mean to test"
        )
    _check_and_choose_views(trace, options)


@dataclass(frozen=True)
class Tracer:
    """`trace_forward` and `record` with default options: what the `forward_trace` fixture is.

    Defaults come from the `fwdorder` marker and the `fwdorder_*` ini options; options
    given to a call win over them. A model keyword argument that has an option's name goes
    in `model_kwargs`, as for `trace_forward`.
    """

    options: TraceOptions = field(default_factory=TraceOptions)

    def __call__(
        self,
        model: nn.Module | Callable[[], nn.Module],
        *args: Any,
        model_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Trace:
        options = self._with(kwargs)
        return trace_forward(
            model, *args, **_as_arguments(options), model_kwargs=model_kwargs, **kwargs
        )

    def record(self, model: nn.Module, **options_and_flags: Any) -> AbstractContextManager[Trace]:
        """Like `pytest_fwdorder.record`, with this tracer's default options."""
        options = self._with(options_and_flags)
        return record(model, **_as_arguments(options), **options_and_flags)

    def _with(self, given: dict[str, Any]) -> TraceOptions:
        """This tracer's options updated with those in `given` (which are taken out of it)."""
        chosen = {name: given.pop(name) for name in OPTION_NAMES if name in given}
        check_option_values(chosen, source="forward_trace")
        return replace(self.options, **chosen)


def _backward_watched(backward_recorder: BackwardRecorder | None) -> AbstractContextManager[Any]:
    """Watch forward for backward's nodes; entered before `recording`, whose hooks run after."""
    return nullcontext() if backward_recorder is None else backward_recorder.forward_watched()


@contextmanager
def _operations_recorded(
    recorder: Any, root: nn.Module, options: TraceOptions, found: list[OperationMode]
) -> Iterator[None]:
    """With `ops`, the function mode that records operations, for the length of the block."""
    if not options.ops:
        yield
        return
    with operations_recorded(recorder, root, options.ops_skip) as mode:
        found.append(mode)
        yield


def _finish_facets(
    trace: Trace, operations: list[OperationMode], backward_recorder: BackwardRecorder | None
) -> None:
    """Give the finished trace its operations and backward steps, when they were recorded."""
    for mode in operations:
        attach_operations(trace, mode)
    if backward_recorder is not None:
        backward_recorder.finish(trace)


def _as_arguments(options: TraceOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in OPTION_NAMES}


def _trace_options(
    device: torch.device | str | None,
    show_devices: bool,
    hide: Iterable[str],
    unregistered: str,
    show_local_shapes: bool,
    fold: Iterable[str],
    ops: bool,
    ops_skip: Iterable[str],
    backward: bool | Callable[[Any], Any],
) -> TraceOptions:
    """The options `trace_forward` and `record` were given, as one checked `TraceOptions`."""
    return TraceOptions(
        _device_name(device),
        show_devices,
        _names(hide),
        unregistered,
        show_local_shapes,
        fold=_names(fold),
        ops=ops,
        ops_skip=_names(ops_skip),
        backward=backward,
    )


def _check_and_choose_views(trace: Trace, options: TraceOptions) -> None:
    """What every finished trace goes through: the unregistered and fold checks, then the
    plugins' call views."""
    __tracebackhide__ = True
    _check_unregistered(trace, options.unregistered)
    _check_fold(trace, options.fold)
    _choose_call_views(trace)


def _check_fold(trace: Trace, fold: tuple[str, ...]) -> None:
    """Warn about `fold` names that match no called module's path or type: a typo would
    otherwise leave the golden unfolded without a word."""
    if not fold:
        return
    known = {call.display_path for call in trace.calls} | {call.module_type for call in trace.calls}
    for name in fold:
        if name in known:
            continue
        lowered = {known_name.lower(): known_name for known_name in sorted(known)}
        close = [lowered[match] for match in difflib.get_close_matches(name.lower(), lowered)]
        warn_at_caller(
            f"fold names no called module: {name!r} is neither a called module's path nor "
            f"its type{'; did you mean ' + ', '.join(close) if close else ''}"
        )


def _check_unregistered(trace: Trace, policy: str) -> None:
    """Warn about (or refuse) modules that own parameters but are not registered."""
    owners = [
        f"{call.path} ({call.module_type}: "
        f"{', '.join(fact.name for fact in call.facts.tensors.parameters)})"
        for call in trace.calls
        if not call.registered
        and call.nth == 1
        and call.facts is not None
        and call.facts.tensors.parameters
    ]
    if not owners:
        return
    message = (
        f"{len(owners)} module(s) own parameters but are not registered under "
        f"{trace.root_type}, so an optimizer over model.parameters() never trains them and "
        f"state_dict() never saves them: {', '.join(owners[:5])}"
        f"{' ...' if len(owners) > 5 else ''}. Keep them in nn.ModuleList or nn.ModuleDict "
        "(not a plain list or dict), or assign them as attributes"
    )
    if policy == "error":
        __tracebackhide__ = True  # the message names the modules; our frames add nothing
        raise UnregisteredModuleError(message)
    warn_at_caller(message)


def _render_options(options: TraceOptions) -> RenderOptions:
    return RenderOptions(
        devices=options.show_devices,
        hidden=frozenset(options.hide),
        local_shapes=options.show_local_shapes,
        rank=process_rank() if options.show_local_shapes else None,
        fold=options.fold,
    )


def _choose_call_views(trace: Trace) -> None:
    """Ask the plugins how each called module's calls are shown (`pytest_fwdorder_call_view`)."""
    if not call_view_hooks_exist():  # as usual: no dict of every call to build
        return
    called = {call.path: call.module_type for call in trace.calls}
    views = call_views_from_plugins(called)
    if views:
        trace.options = replace(trace.options, call_views=views)


def _device_name(device: torch.device | str | None) -> str | None:
    """A torch.device as its name; anything else as given, for `TraceOptions` to check."""
    return str(device) if isinstance(device, torch.device) else device


def _names(value: Iterable[str]) -> Any:
    """An iterable of names as a tuple; a string or anything else as given, for
    `TraceOptions` to split or to refuse with a message that says what to write."""
    return value if isinstance(value, str) or not isinstance(value, Iterable) else tuple(value)


def _merge_model_kwargs(
    kwargs: dict[str, Any], model_kwargs: Mapping[str, Any] | None
) -> dict[str, Any]:
    if model_kwargs is None:
        return kwargs
    if not isinstance(model_kwargs, Mapping):
        raise TypeError(
            f"model_kwargs must be a mapping of the model's keyword arguments, got "
            f"{type(model_kwargs).__name__!r}: write model_kwargs={{'device': 'cuda'}}"
        )
    both = sorted(set(kwargs) & set(model_kwargs))
    if both:
        raise TypeError(
            f"keyword argument(s) {', '.join(map(repr, both))} given both directly and in "
            "model_kwargs: give each once"
        )
    return {**kwargs, **model_kwargs}


def _build(
    model: nn.Module | Callable[[], nn.Module], device: torch.device | str | None
) -> nn.Module:
    # A method bound to a module (`model.forward`), a module class, a tensor: mistakes that
    # resolve_model explains. Any other callable, a builder object's method included, builds.
    if (
        isinstance(model, (nn.Module, torch.Tensor, type))
        or not callable(model)
        or _is_module_method(model)
    ):
        return resolve_model(model, entry_point="trace_forward")
    _check_builder(model)
    if device is not None and torch.device(device).type == "meta":
        built = _build_on_meta(model)
    else:
        with torch.device(device) if device is not None else nullcontext():
            built = model()
    if not isinstance(built, nn.Module):
        raise TypeError(
            f"trace_forward called {_name(model)} as a zero-argument builder and got "
            f"{type(built).__name__!r}, not an nn.Module: the builder must return the model"
        )
    return resolve_model(built, entry_point="trace_forward")


# How many times a builder runs at most, each time with more of its value-read tensors on the CPU.
_BUILD_TRIES = 8


def _build_on_meta(model: Callable[[], nn.Module]) -> object:
    """Call the builder with its factory calls on meta, again with the CPU for the tensors
    whose values it read (found by the failed call), until it builds or nothing is left."""
    on_cpu: frozenset[_Site] = frozenset()
    for attempt in range(_BUILD_TRIES):
        with parameters_and_buffers_on_meta(on_cpu) as build:
            try:
                return model()
            except Exception as error:
                more = build.needed_values - build.registered - on_cpu
                if not more or attempt == _BUILD_TRIES - 1:
                    raise MetaTraceError(
                        _meta_build_failure_message(model, error, build)
                    ) from error
                on_cpu |= more
    raise AssertionError("unreachable: the last try returns or raises")  # pragma: no cover


def _meta_build_failure_message(
    model: Callable[[], nn.Module], error: Exception, build: _MetaBuild
) -> str:
    name = getattr(model, "__qualname__", repr(model))
    failure = f"building the model for the meta device failed in {name!r}: " + (
        f"{type(error).__name__}: {_without_period(error)}."
    )
    memory = _memory_bytes()
    if memory is not None and build.registered_bytes > memory:
        return (
            f"{failure} It registered {build.registered_bytes / 2**30:.1f} GiB of parameters "
            f"and buffers before it failed, more than this machine's {memory / 2**30:.1f} GiB "
            "of memory, so it cannot be built on the CPU either: fix the line that fails on "
            "meta, or build a smaller configuration of the model."
        )
    return (
        f"{failure} If it builds on the CPU, build it there and pass the model with "
        "device='meta': its weights are replaced by meta stand-ins for the trace."
    )


def _memory_bytes() -> int | None:
    """This machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# Where a factory call was made: the innermost line outside torch and this package.
_Site = tuple[str, int]


def _factory_site() -> _Site:
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(
        (_TORCH_DIRECTORY, _OUR_DIRECTORY)
    ):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno)


class _MetaBuild(TorchFunctionMode):
    """While a builder runs: factory calls without a device land on meta, except those made
    at `on_cpu` sites, whose values the builder reads.

    Each tensor keeps the sites of the factory calls it was computed from, so an operation
    that fails (`.item()`, `.tolist()`, a comparison in an `if`) names the sites it needed
    values from; sites of parameters and buffers never go to the CPU.
    """

    def __init__(self, on_cpu: frozenset[_Site]) -> None:
        super().__init__()
        self.on_cpu = on_cpu
        self.constructors = _device_constructors()
        self.origins: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.needed_values: set[_Site] = set()
        self.registered: set[_Site] = set()
        self.registered_bytes = 0
        self._counted: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = {} if kwargs is None else kwargs
        origins: frozenset[_Site] | None = None
        if func in self.constructors and kwargs.get("device") is None:
            site = _factory_site()
            origins = frozenset({site})
            if site not in self.on_cpu:
                kwargs["device"] = _META
        try:
            output = func(*args, **kwargs)
        except Exception:
            self.needed_values.update(self._origins_of((args, kwargs)))
            raise
        if origins is None:
            origins = self._origins_of((args, kwargs))
        if origins:
            for tensor in tensors_of(output):
                self.origins[tensor] = origins
        return output

    def _origins_of(self, value: object) -> frozenset[_Site]:
        found: set[_Site] = set()
        for tensor in tensors_of(value):
            found.update(self._origins_of_tensor(tensor))
        return frozenset(found)

    def _origins_of_tensor(self, tensor: torch.Tensor) -> frozenset[_Site]:
        return self.origins.get(tensor, frozenset())  # type: ignore[no-untyped-call,no-any-return]

    def saw_registered(self, tensor: torch.Tensor) -> None:
        """Keep a parameter's or buffer's sites on meta, and count its bytes once."""
        self.registered.update(self._origins_of_tensor(tensor))
        if tensor not in self._counted:
            self._counted[tensor] = True
            self.registered_bytes += tensor.numel() * tensor.element_size()


_META = torch.device("meta")


@contextmanager
def parameters_and_buffers_on_meta(
    on_cpu: frozenset[_Site] = frozenset(),
) -> Iterator[_MetaBuild]:
    """While a builder runs, its factory calls and every parameter and buffer land on meta.

    No parameter memory is allocated at any point: factory calls without a device go to meta
    (as under `torch.device('meta')`) except at the `on_cpu` sites, the builder's own
    arithmetic whose values it reads (`.item()` in torchvision's RegNet), which stay on the
    CPU with real values. A parameter or buffer still made on the CPU (a factory call with
    `device='cpu'`, a site in `on_cpu`) is swapped for a meta one when it is registered: one
    meta tensor per original, so a tensor registered in two places stays tied. Uses torch's
    public registration hooks, removed on exit.
    """
    build = _MetaBuild(on_cpu)
    on_meta: dict[int, torch.Tensor] = {}
    # The originals stay referenced until the end, so their ids cannot be reused meanwhile.
    originals: list[torch.Tensor] = []

    def meta_copy(tensor: torch.Tensor, make: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        found = on_meta.get(id(tensor))
        if found is None:
            found = on_meta[id(tensor)] = make(tensor)
            originals.append(tensor)
        return found

    def meta_parameter(module: nn.Module, name: str, parameter: object) -> nn.Parameter | None:
        if not isinstance(parameter, nn.Parameter):
            return None
        if isinstance(parameter, nn.UninitializedParameter):
            return None  # a lazy module's parameter has no shape to copy yet
        build.saw_registered(parameter)
        if parameter.device.type == "meta":
            return None
        return meta_copy(  # type: ignore[no-any-return]
            parameter,
            lambda tensor: nn.Parameter(
                torch.empty_like(tensor, device="meta"), requires_grad=tensor.requires_grad
            ),
        )

    def meta_buffer(module: nn.Module, name: str, buffer: object) -> torch.Tensor | None:
        if not isinstance(buffer, torch.Tensor) or isinstance(buffer, nn.UninitializedBuffer):
            return None
        build.saw_registered(buffer)
        if buffer.device.type == "meta":
            return None
        return meta_copy(  # type: ignore[no-any-return]
            buffer, lambda tensor: torch.empty_like(tensor, device="meta")
        )

    # torch annotates the hooks as returning None, but documents (and honours) a returned
    # replacement: that is the point of these hooks.
    parameter_handle = torch_module.register_module_parameter_registration_hook(
        meta_parameter  # type: ignore[arg-type]
    )
    try:
        buffer_handle = torch_module.register_module_buffer_registration_hook(
            meta_buffer  # type: ignore[arg-type]
        )
    except BaseException:
        parameter_handle.remove()
        raise
    try:
        with build:
            yield build
    finally:
        parameter_handle.remove()
        buffer_handle.remove()


def _check_builder(builder: Callable[..., object]) -> None:
    """A callable taken for a builder must be callable with no arguments."""
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):  # builtins without a readable signature
        return
    required = [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    if required:
        raise TypeError(
            f"trace_forward expected an nn.Module or a zero-argument function that builds one, "
            f"got {_name(builder)}, which requires {', '.join(map(repr, required))}: to trace "
            "a function, wrap it in an nn.Module; to trace a model, pass the model"
        )


def _name(value: object) -> str:
    return repr(getattr(value, "__qualname__", None) or type(value).__name__)


def _is_module_method(value: object) -> bool:
    return isinstance(getattr(value, "__self__", None), nn.Module)


def _place(value: Any, device: torch.device | str | None) -> Any:
    """Materialize TensorSpecs, and move tensors to `device` when one is given."""
    if isinstance(value, TensorSpec):
        return value.materialize(device)
    if isinstance(value, torch.Tensor):
        return value if device is None else value.to(device)
    if isinstance(value, tuple):
        items = [_place(item, device) for item in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else tuple(items)
    if isinstance(value, list):
        return [_place(item, device) for item in value]
    if isinstance(value, dict):
        return {key: _place(item, device) for key, item in value.items()}
    return value


# Files of torch and of this package, as imported and resolved: frames there are not the user's.
_TORCH_DIRECTORY = str(Path(torch.__file__).resolve().parent) + os.sep
_OUR_DIRECTORY = str(Path(__file__).resolve().parent) + os.sep
_NOT_THE_USERS = (
    _TORCH_DIRECTORY,
    _OUR_DIRECTORY,
    str(Path(torch.__file__).parent) + os.sep,
    str(Path(__file__).parent) + os.sep,
)


def _line_that_needed_values(error: BaseException) -> str | None:
    """`modeling_x.py:88: mask = make_mask(x) (which called .../masking_utils.py:12: ...)`.

    The model's own line: the innermost frame of the error's traceback, outside torch's own
    package and ours, that runs a method of an nn.Module; with the innermost such frame of
    any function it called (a library helper) when that differs. None when every frame is
    torch's.
    """
    frames = [
        (frame, line_number)
        for frame, line_number in traceback.walk_tb(error.__traceback__)
        if frame.f_code.co_filename and not frame.f_code.co_filename.startswith(_NOT_THE_USERS)
    ]
    if not frames:
        return None
    innermost = _frame_line(*frames[-1])
    models = [entry for entry in frames if isinstance(entry[0].f_locals.get("self"), nn.Module)]
    if not models or models[-1] is frames[-1]:
        return innermost
    return f"{_frame_line(*models[-1])} (which called {innermost})"


def _frame_line(frame: FrameType, line_number: int) -> str:
    filename = frame.f_code.co_filename
    text = linecache.getline(filename, line_number).strip()
    return f"{_short_path(filename)}:{line_number}: {text}"


def _short_path(filename: str) -> str:
    """A library file from where its package starts (`.../transformers/masking_utils.py`),
    a file of the user's from the current folder when it is under it."""
    path = Path(filename)
    parts = path.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return ".../" + "/".join(parts[parts.index(marker) + 1 :])
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return filename


@contextmanager
def _meta_failures_explained(device: torch.device | str | None) -> Iterator[list[Trace]]:
    """Turn any failure of a forward on the meta device into a `MetaTraceError`.

    The block appends its trace to the yielded list so the error can say where forward
    stopped. The original error stays as the cause, with its notes.
    """
    traces: list[Trace] = []
    try:
        yield traces
    except Exception as error:
        meta = device is not None and torch.device(device).type == "meta"
        if not meta or isinstance(error, MetaTraceError):
            raise
        calls = traces[0].calls if traces else []
        raise MetaTraceError(_meta_failure_message(error, calls)) from error


def _meta_failure_message(error: Exception, calls: list[Call]) -> str:
    failing = [call for call in calls if call.raised]
    if failing:
        innermost = max(failing, key=lambda call: call.depth)
        where = (
            f"in {innermost.display_path} ({innermost.module_type}, call {innermost.nth} of "
            f"that module, call {innermost.index + 1} of the trace)"
        )
    else:
        where = "before any module call"
    return (
        f"forward raised on the meta device {where}: {type(error).__name__}: "
        f"{_without_period(error)}.{_what_the_line_needs(error)} Meta tensors have shapes but "
        "no data, so .item(), data-dependent control flow and ops whose meta kernel is "
        "stricter than the CPU one fail there. Trace on the CPU instead (leave device unset, "
        "or build a smaller configuration of the model); if the model fails the same way on "
        "the CPU, the error is the model's own."
    )


# torch's grouped matmul (fused mixture-of-experts layers) takes half-precision matrices only.
_HALF_PRECISION_ONLY = re.compile(r"Expected mat_[ab] to be BFloat16 or supported Float16")


# What torch says when a meta tensor is asked for its data (`.item()`, `.tolist()`, `if`).
_VALUES_READ = re.compile(
    r"cannot be called on meta tensors|Cannot copy out of meta tensor|data-dependent|"
    r"no fake impl or Meta kernel|nonzero|Could not guard on data-dependent"
)


def _what_the_line_needs(error: Exception) -> str:
    """A sentence on what the failing line needs (a dtype, real values) and what can help."""
    line = _line_that_needed_values(error)
    if line is None:
        return ""
    if _HALF_PRECISION_ONLY.search(str(error)):
        return (
            f" At {line}, the line needs a dtype: torch's grouped matmul on meta takes bfloat16 "
            "or float16 matrices: trace the model in bfloat16 (build it with "
            "torch_dtype=torch.bfloat16 or call .to(torch.bfloat16), and give "
            "TensorSpec(..., dtype=torch.bfloat16) inputs)."
        )
    mask = (
        " That line reads a mask: if it runs because no attention mask was given, pass one; "
        "if it checks the mask you gave (all ones), leave it out."
        if "mask" in line.rsplit(": ", 1)[-1].lower()
        else ""
    )
    if not _VALUES_READ.search(str(error)):
        return f" The line that failed: {line}."
    return f" The line that needed real values: {line}.{mask}"


def _without_period(error: BaseException) -> str:
    """An error's text without the full stop a sentence around it adds again."""
    return str(error).rstrip().removesuffix(".")


@contextmanager
def _autocast_refused(device: torch.device | str | None) -> Iterator[None]:
    """On meta, refuse a forward that runs under autocast (meta tensors do not follow it).

    Autocast reads as off inside a dispatch mode, and a function mode costs a third of a
    meta trace, so torch's public global forward pre-hook asks before each module call of
    the block, in this thread only: autocast entered around module calls is refused. An
    autocast block around functional code alone, with no module call inside it, is not seen.
    """
    if device is None or torch.device(device).type != "meta":
        yield
        return
    _refuse_autocast_on("the trace")
    thread = threading.get_ident()
    any_enabled = getattr(torch._C, "_is_any_autocast_enabled", None)

    def refuse_under_autocast(module: nn.Module, args: object) -> None:
        if threading.get_ident() == thread and (any_enabled is None or any_enabled()):
            _refuse_autocast_on("forward")

    handle = register_module_forward_pre_hook(refuse_under_autocast)
    try:
        yield
    finally:
        handle.remove()


_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")


def _refuse_autocast_on(what: str) -> None:
    """Raise `MetaTraceError` when autocast is on for a device: `what` ran under it."""
    for device_type in _AUTOCAST_DEVICES:
        try:
            enabled = torch.is_autocast_enabled(device_type)
        except RuntimeError:  # a device type this build of torch does not know
            continue
        if enabled:
            dtype = torch.get_autocast_dtype(device_type)
            raise MetaTraceError(_autocast_message(what, device_type, dtype))


def _autocast_message(what: str, device_type: str, dtype: torch.dtype | None) -> str:
    dtype_name = str(dtype).removeprefix("torch.") if dtype is not None else "lower-precision"
    return (
        f"autocast is not followed on the meta device: {what} ran under "
        f"autocast({device_type!r}), and autocast({device_type!r}) would record {dtype_name} "
        f"outputs on the {device_type.upper()} and float32 ones on meta, a golden that differs "
        "without a word. Trace on that device instead (leave device unset for the CPU), or "
        "leave autocast out of the meta trace."
    )
