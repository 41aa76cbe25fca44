"""The public ways to trace: `trace_forward`, `record`, and the `Tracer` behind the fixture."""

from __future__ import annotations

import difflib
import gc
import inspect
import operator
import os
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from pytest_fwdorder.backward import BackwardRecorder
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
    `device='meta'` every parameter and buffer it registers lands on meta (no weights are
    allocated or initialised), while its own arithmetic keeps real CPU values.
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
        _hide(hide),
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


def _hide(hide: Iterable[str]) -> tuple[str, ...]:
    """`hide` as a tuple of facet names: `"settings mode"` is two names, as in the ini file."""
    return tuple(hide.replace(",", " ").split()) if isinstance(hide, str) else tuple(hide)


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
    meta = device is not None and torch.device(device).type == "meta"
    try:
        if meta:
            with parameters_and_buffers_on_meta():
                built = model()
        else:
            with torch.device(device) if device is not None else nullcontext():
                built = model()
    except Exception as error:
        if meta:
            name = getattr(model, "__qualname__", repr(model))
            raise MetaTraceError(
                f"building the model for the meta device failed in {name!r}: "
                f"{type(error).__name__}: {error}. If it builds on the CPU, build it there and "
                "pass the model with device='meta': its weights are replaced by meta stand-ins "
                "for the trace."
            ) from error
        raise
    if not isinstance(built, nn.Module):
        raise TypeError(
            f"trace_forward called {_name(model)} as a zero-argument builder and got "
            f"{type(built).__name__!r}, not an nn.Module: the builder must return the model"
        )
    return resolve_model(built, entry_point="trace_forward")


@contextmanager
def parameters_and_buffers_on_meta() -> Iterator[None]:
    """While a builder runs, every parameter and buffer a module registers lands on meta.

    Everything else the builder computes stays on the CPU with real values, so a builder that
    sizes its layers with `.item()` (torchvision's RegNet) works, and initialisers run on the
    meta stand-ins for free. One meta tensor per original, so a tensor registered in two
    places stays tied. Uses torch's public registration hooks, removed on exit.
    """
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
        if not isinstance(parameter, nn.Parameter) or parameter.device.type == "meta":
            return None
        if isinstance(parameter, nn.UninitializedParameter):
            return None  # a lazy module's parameter has no shape to copy yet
        return meta_copy(  # type: ignore[no-any-return]
            parameter,
            lambda tensor: nn.Parameter(
                torch.empty_like(tensor, device="meta"), requires_grad=tensor.requires_grad
            ),
        )

    def meta_buffer(module: nn.Module, name: str, buffer: object) -> torch.Tensor | None:
        if not isinstance(buffer, torch.Tensor) or buffer.device.type == "meta":
            return None
        if isinstance(buffer, nn.UninitializedBuffer):
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
        yield
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


_TORCH_DIRECTORY = str(Path(torch.__file__).resolve().parent) + os.sep
_OUR_DIRECTORY = str(Path(__file__).resolve().parent) + os.sep


def _line_that_needed_values(error: BaseException) -> str | None:
    """`.../transformers/masking_utils.py:123: if padding_mask.all():`: where it failed.

    The innermost frame of the error's traceback outside torch's own package and ours:
    the user's or a library's line that asked a meta tensor for a value. None when every
    frame is torch's.
    """
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        filename = str(Path(frame.filename).resolve()) if frame.filename else ""
        if filename.startswith((_TORCH_DIRECTORY, _OUR_DIRECTORY)) or not filename:
            continue
        found = frame
    if found is None:
        return None
    return f"{_short_path(found.filename)}:{found.lineno}: {(found.line or '').strip()}"


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
    line = _line_that_needed_values(error)
    at_line = (
        f" The line that needed real values: {line} (if it checks an optional input, such "
        "as an attention mask of all ones, leave that input out)."
        if line
        else ""
    )
    return (
        f"forward raised on the meta device {where}: {type(error).__name__}: {error}.{at_line} "
        "Meta tensors have shapes but no data, so .item(), data-dependent control flow and "
        "ops whose meta kernel is stricter than the CPU one fail there. Trace on the CPU "
        "instead (leave device unset, or build a smaller configuration of the model); if the "
        "model fails the same way on the CPU, the error is the model's own."
    )
