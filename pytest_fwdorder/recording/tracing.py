"""The public ways to trace: `trace_forward`, `record`, and the `Tracer` behind the fixture.

This module installs no hook itself. For the length of a trace it enters the context
managers that do, each removing its hooks on exit: `recording` (the recorder's module
hooks), `BackwardRecorder.forward_watched` (backward's), `autocast_refused` (a global
forward pre-hook, on meta) and, for a builder on meta, `build_on_meta` (parameter and
buffer registration hooks).
"""

from __future__ import annotations

import difflib
import gc
import inspect
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from pytest_fwdorder.calls import CompileRecords, RenderOptions
from pytest_fwdorder.errors import EmptyTraceError, UnregisteredModuleError, warn_at_caller
from pytest_fwdorder.facets.backward import BackwardRecorder
from pytest_fwdorder.facets.costs import CostCounters, attach_costs, costs_counted
from pytest_fwdorder.facets.initialization import (
    InitializationMode,
    initialization_recorded,
    initialization_records,
)
from pytest_fwdorder.facets.operations import OperationMode, attach_operations, operations_recorded
from pytest_fwdorder.facets.values import (
    SEED,
    FingerprintCollector,
    attach_fingerprints,
    check_values_device,
    seeded,
)
from pytest_fwdorder.hookspecs import call_view_hooks_exist, call_views_from_plugins
from pytest_fwdorder.options import (
    OPERATION_GROUPS,
    OPTION_NAMES,
    VALUES_ABSOLUTE_TOLERANCE,
    VALUES_RELATIVE_TOLERANCE,
    TraceOptions,
    check_option_values,
)
from pytest_fwdorder.recording.distributed import compiled_code_run_eagerly, process_rank
from pytest_fwdorder.recording.meta.build import build_on_meta
from pytest_fwdorder.recording.meta.build import (
    parameters_and_buffers_on_meta as parameters_and_buffers_on_meta,  # importable as before
)
from pytest_fwdorder.recording.meta.failures import autocast_refused, meta_failures_explained
from pytest_fwdorder.recording.meta.fast_paths import fast_paths_refused
from pytest_fwdorder.recording.recorder import recording
from pytest_fwdorder.recording.resolve import resolve_model
from pytest_fwdorder.recording.torch_release import check_torch_release
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
    costs: bool = False,
    initialization: bool = False,
    values: bool = False,
    graph_breaks: bool = False,
    values_relative_tolerance: float = VALUES_RELATIVE_TOLERANCE,
    values_absolute_tolerance: float = VALUES_ABSOLUTE_TOLERANCE,
    direct_forwards: str = "watch",
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
    `.grad` as it was. `costs` counts what each call costs: FLOPs (torch's formulas,
    children included), output bytes, parameter bytes, with the totals in the header.
    `initialization` (builders only) records how the build initialized each parameter and
    buffer, in order, with the random numbers drawn. `values` writes a fingerprint of each
    call's output (mean, std, largest absolute value), with the forward and a builder's build
    run under seed 0; a golden's fingerprints match within `values_absolute_tolerance` +
    `values_relative_tolerance` x the call's largest absolute value. `graph_breaks` compiles
    the model with dynamo, runs it twice on the same inputs, and writes how many graphs it
    made, each graph break (module call, reason, source line) and what recompiled.
    `direct_forwards` says how forwards run without a module call (`self.mlp.forward(x)`)
    are found: "watch" records them as `[direct]` calls, "profile" also finds
    `super().forward` and unbound runs (slower), "off"; each is listed in the header. The
    trace options are
    keyword-only; a model keyword argument that has an option's name goes in
    `model_kwargs={"device": ...}`.

    The model is left as it was: parameters, buffers, plain attributes, training and
    requires_grad flags, grad mode, the random states; no hook stays registered, also when
    forward raises. On `device='meta'` any failure of forward is a `MetaTraceError` whose
    cause is the original error.
    """
    kwargs = _merge_model_kwargs(kwargs, model_kwargs)
    options = TraceOptions.from_arguments(locals())
    check_torch_release(torch.__version__)
    if options.values:
        check_values_device(device)
    watched: list[InitializationMode] = []
    root = _build(model, device, options, watched)
    placed: dict[int, torch.Tensor] = {}  # one placed tensor per input tensor, and storage
    args = _place(args, device, placed)
    kwargs = _place(kwargs, device, placed)
    backward_recorder = BackwardRecorder(options.backward) if options.backward else None
    operations: list[OperationMode] = []
    counters: list[CostCounters] = []
    fingerprints = FingerprintCollector() if options.values else None
    with (
        _collector_paused(),
        meta_failures_explained(device) as traces,
        compiled_code_run_eagerly(root),
        _backward_watched(backward_recorder),
        recording(
            root,
            _render_options(options),
            device=device,
            direct_forwards=options.direct_forwards,
        ) as recorder,
        _operations_recorded(recorder, root, options, operations),
        _costs_counted(recorder, root, options, counters),
        _fingerprints_taken(recorder, fingerprints),
        autocast_refused(device),
        fast_paths_refused(device),
    ):
        traces.append(recorder.trace)
        if backward_recorder is None:
            root(*args, **kwargs)
        else:
            backward_recorder.recorder = recorder
            with torch.enable_grad():
                output = root(*args, **kwargs)
            backward_recorder.run(root, (args, kwargs), output)
    _finish_facets(recorder.trace, operations, backward_recorder, counters)
    _finish_numbers(recorder.trace, options, fingerprints)
    if watched:
        recorder.trace.initialization = initialization_records(root, watched[-1], SEED)
    if options.graph_breaks:
        recorder.trace.compiled = _compiled_records(root, device, args, kwargs)
    _check_and_choose_views(recorder.trace, options)
    return recorder.trace


def _compiled_records(
    root: nn.Module, device: torch.device | str | None, args: Any, kwargs: dict[str, Any]
) -> CompileRecords:
    """What dynamo makes of the model on the traced inputs (`graph_breaks=True`)."""
    if device is not None and torch.device(device).type == "meta":
        raise ValueError(
            "graph_breaks=True runs the compiled model, which a trace on device='meta' cannot "
            "do: trace on the CPU (device=None or 'cpu') to record graph breaks"
        )
    from pytest_fwdorder.facets.graph_breaks import compiled_records  # imports torch._dynamo

    return compiled_records(root, args, kwargs)


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
    costs: bool = False,
    initialization: bool = False,
    values: bool = False,
    graph_breaks: bool = False,
    values_relative_tolerance: float = VALUES_RELATIVE_TOLERANCE,
    values_absolute_tolerance: float = VALUES_ABSOLUTE_TOLERANCE,
    direct_forwards: str = "watch",
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
    options = TraceOptions.from_arguments(locals())
    check_torch_release(torch.__version__)
    if options.graph_breaks:
        raise ValueError(
            "record(graph_breaks=True) cannot compile a block of code: pass the model and its "
            "inputs to trace_forward(model, x, graph_breaks=True), or use "
            "assert_no_graph_breaks(model, x)"
        )
    if options.initialization:
        raise ValueError(
            "record(initialization=True) cannot watch the build: record takes a model "
            "already built. Pass a function that builds it to trace_forward(build, ..., "
            "initialization=True), or leave initialization off for this recording"
        )
    if options.values:
        check_values_device(device)
    backward_recorder = BackwardRecorder(options.backward) if options.backward else None
    operations: list[OperationMode] = []
    counters: list[CostCounters] = []
    fingerprints = FingerprintCollector() if options.values else None
    with (
        compiled_code_run_eagerly(root),
        _backward_watched(backward_recorder),
        recording(
            root,
            _render_options(options),
            device=device,
            restore_state=restore_state,
            direct_forwards=options.direct_forwards,
        ) as recorder,
        _operations_recorded(recorder, root, options, operations),
        _costs_counted(recorder, root, options, counters),
        _fingerprints_taken(recorder, fingerprints),
        autocast_refused(device),
        fast_paths_refused(device),
    ):
        if backward_recorder is not None:
            backward_recorder.recorder = recorder
        yield recorder.trace
    trace = recorder.trace
    _finish_facets(trace, operations, backward_recorder, counters)
    _finish_numbers(trace, options, fingerprints)
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
            model, *args, **options.as_arguments(), model_kwargs=model_kwargs, **kwargs
        )

    def record(self, model: nn.Module, **options_and_flags: Any) -> AbstractContextManager[Trace]:
        """Like `pytest_fwdorder.record`, with this tracer's default options."""
        options = self._with(options_and_flags)
        return record(model, **options.as_arguments(), **options_and_flags)

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


@contextmanager
def _costs_counted(
    recorder: Any, root: nn.Module, options: TraceOptions, found: list[CostCounters]
) -> Iterator[None]:
    """With `costs`, the dispatch mode that counts FLOPs and the saved-tensor hooks."""
    if not options.costs:
        yield
        return
    with costs_counted(recorder, root) as counters:
        found.append(counters)
        yield


@contextmanager
def _fingerprints_taken(recorder: Any, fingerprints: FingerprintCollector | None) -> Iterator[None]:
    """With `values`, fingerprint each call's output as it ends, under seed 0 throughout."""
    if fingerprints is None:
        yield
        return
    recorder.output_observers.append(fingerprints.observe)
    try:
        with seeded():
            yield
    finally:
        recorder.output_observers.remove(fingerprints.observe)


def _finish_numbers(
    trace: Trace, options: TraceOptions, fingerprints: FingerprintCollector | None
) -> None:
    """Give the finished trace its fingerprints and the tolerance they are compared with."""
    if fingerprints is None:
        return
    attach_fingerprints(trace, fingerprints)
    trace.values_tolerance = (options.values_relative_tolerance, options.values_absolute_tolerance)


def _finish_facets(
    trace: Trace,
    operations: list[OperationMode],
    backward_recorder: BackwardRecorder | None,
    counters: list[CostCounters],
) -> None:
    """Give the finished trace its operations, backward steps and costs, when recorded."""
    for mode in operations:
        attach_operations(trace, mode)
    if backward_recorder is not None:
        backward_recorder.finish(trace)
    for counted in counters:
        attach_costs(trace, counted)


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
    model: nn.Module | Callable[[], nn.Module],
    device: torch.device | str | None,
    options: TraceOptions,
    watched: list[InitializationMode],
) -> nn.Module:
    """The model to trace: `model` itself, or what the builder `model` returns.

    With `initialization` the build runs under an `InitializationMode` (the last try's is
    appended to `watched`); with `initialization` or `values` it runs under seed 0.
    """
    # A method bound to a module (`model.forward`), a module class, a tensor: mistakes that
    # resolve_model explains. Any other callable, a builder object's method included, builds.
    if (
        isinstance(model, (nn.Module, torch.Tensor, type))
        or not callable(model)
        or _is_module_method(model)
    ):
        if options.initialization:
            raise ValueError(
                f"initialization=True needs the build to run under watch, but trace_forward "
                f"got a model already built ({type(model).__name__}): pass a function that "
                "builds it, trace_forward(lambda: MyModel(), x, initialization=True)"
            )
        return resolve_model(model, entry_point="trace_forward")
    _check_builder(model)
    builder = _watched_builder(model, options, watched)
    if device is not None and torch.device(device).type == "meta":
        built = build_on_meta(builder)
    else:
        with torch.device(device) if device is not None else nullcontext():
            built = builder()
    if not isinstance(built, nn.Module):
        raise TypeError(
            f"trace_forward called {_name(model)} as a zero-argument builder and got "
            f"{type(built).__name__!r}, not an nn.Module: the builder must return the model"
        )
    return resolve_model(built, entry_point="trace_forward")


def _watched_builder(
    model: Callable[[], nn.Module], options: TraceOptions, watched: list[InitializationMode]
) -> Callable[[], nn.Module]:
    """The builder as `_build` calls it: seeded and watched as the options ask."""
    if not (options.initialization or options.values):
        return model

    def build() -> nn.Module:
        with seeded():
            if not options.initialization:
                return model()
            with initialization_recorded() as mode:
                built = model()
            watched.append(mode)
            return built

    build.__qualname__ = getattr(model, "__qualname__", "build")  # as failures name it
    return build


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


def _place(value: Any, device: torch.device | str | None, placed: dict[int, torch.Tensor]) -> Any:
    """Materialize TensorSpecs, and move tensors to `device` when one is given.

    `placed` maps what was placed already (by `id` of tensor and of storage), so an input
    given twice stays one tensor and inputs sharing a storage share one there too.
    """
    if isinstance(value, TensorSpec):
        return value.materialize(device)
    if isinstance(value, torch.Tensor):
        if device is None:
            return value
        if id(value) not in placed:
            placed[id(value)] = _placed_tensor(value, torch.device(device), placed)
        return placed[id(value)]
    if isinstance(value, tuple):
        items = [_place(item, device, placed) for item in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else tuple(items)
    if isinstance(value, list):
        return [_place(item, device, placed) for item in value]
    if isinstance(value, dict):
        return {key: _place(item, device, placed) for key, item in value.items()}
    return value


def _placed_tensor(
    tensor: torch.Tensor, device: torch.device, placed: dict[int, torch.Tensor]
) -> torch.Tensor:
    """`tensor` on `device`; on meta with its sizes, strides, storage offset and storage.

    `.to("meta")` makes a dense copy: an expanded input (stride 0) would then cost, and
    save for backward, as many bytes as it has elements. Meta holds no data, so a view of a
    meta storage as large as the input's keeps the layout for free.
    """
    if device.type != "meta" or tensor.device.type == "meta" or not _plain_strided(tensor):
        return tensor.to(device)
    storage = tensor.untyped_storage()
    key = -storage._cdata  # negative: never an id() of a tensor in the same dict
    base = placed.get(key)
    if base is None or base.dtype != tensor.dtype:
        elements = storage.nbytes() // tensor.element_size()
        base = placed[key] = torch.empty(elements, dtype=tensor.dtype, device=device)
    with torch.no_grad():
        view = base.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
    return view.requires_grad_(tensor.requires_grad) if tensor.requires_grad else view


def _plain_strided(tensor: torch.Tensor) -> bool:
    """A plain tensor of a strided layout (not a subclass, nested, sparse or quantized)."""
    return (
        type(tensor) in (torch.Tensor, nn.Parameter)
        and tensor.layout is torch.strided
        and not tensor.is_nested
        and not tensor.is_quantized
    )
