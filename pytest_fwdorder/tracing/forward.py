"""The public ways to trace: `trace_forward`, `record`, and the `Tracer` behind the fixture.

Each takes its options into one `TraceOptions` (`TraceOptions.updated`, the one place
they are checked) and runs `trace_model` or `record_calls`, which the command line calls
too. This module installs no hook itself. For the length of a trace it enters the context
managers that do, each removing its hooks on exit: `recording` (the recorder's module
hooks), the facets' (`FacetRecording`), `autocast_refused` (a global forward pre-hook, on
meta) and, for a builder on meta, `build_on_meta` (parameter and buffer registration
hooks).
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from pytest_fwdorder.calls.facet_records import watches_build
from pytest_fwdorder.calls.records import RenderOptions
from pytest_fwdorder.errors import EmptyTraceError, did_you_mean
from pytest_fwdorder.golden.garbage_collection import paused_garbage_collection
from pytest_fwdorder.options import OPTION_NAMES, TraceOptions, take_options
from pytest_fwdorder.recording.distributed import compiled_code_run_eagerly
from pytest_fwdorder.recording.meta.failures import autocast_refused, meta_failures_explained
from pytest_fwdorder.recording.meta.fast_paths import fast_paths_refused
from pytest_fwdorder.recording.recorder import Recorder, recording
from pytest_fwdorder.recording.resolve import resolve_model
from pytest_fwdorder.recording.torch_release import check_torch_release
from pytest_fwdorder.trace import Trace
from pytest_fwdorder.tracing.building import model_to_trace
from pytest_fwdorder.tracing.facet_setup import (
    FacetRecording,
    measured_facets,
    shown_annotations,
    switched_on_trace_facets,
)
from pytest_fwdorder.tracing.trace_checks import check_finished_trace


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
    trace options are keyword-only (`TraceOptions` declares them): every other keyword
    argument goes to the model, and one whose name is close to an option's but that the
    model's forward does not take is a TypeError that names the option. A model keyword
    argument that has an option's name goes in `model_kwargs={"device": ...}`.

    The model is left as it was: parameters, buffers, plain attributes, training and
    requires_grad flags, grad mode, the random states; no hook stays registered, also when
    forward raises. On `device='meta'` any failure of forward is a `MetaTraceError` whose
    cause is the original error.
    """
    options = TraceOptions().updated(take_options(kwargs), source="trace_forward")
    return trace_model(model, args, _merge_model_kwargs(kwargs, model_kwargs), options)


def record(
    model: nn.Module, *, restore_state: bool = True, allow_empty: bool = False, **options: Any
) -> AbstractContextManager[Trace]:
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
    chosen = TraceOptions().updated(options, source="record")
    return record_calls(model, chosen, restore_state=restore_state, allow_empty=allow_empty)


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
        options = self.options.updated(take_options(kwargs), source="forward_trace")
        return trace_model(model, args, _merge_model_kwargs(kwargs, model_kwargs), options)

    def record(
        self,
        model: nn.Module,
        *,
        restore_state: bool = True,
        allow_empty: bool = False,
        **options: Any,
    ) -> AbstractContextManager[Trace]:
        """Like `pytest_fwdorder.record`, with this tracer's default options."""
        chosen = self.options.updated(options, source="forward_trace.record")
        return record_calls(model, chosen, restore_state=restore_state, allow_empty=allow_empty)


def trace_model(
    model: nn.Module | Callable[[], nn.Module],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: TraceOptions,
) -> Trace:
    """`trace_forward` with its options given as one value: what every entry point runs."""
    check_torch_release(torch.__version__)
    device = options.device
    facets = FacetRecording.for_options(options)  # refuses a facet the device cannot record
    root = model_to_trace(model, options, facets)
    _check_model_keywords(root, kwargs)
    placed: dict[int, torch.Tensor] = {}  # one placed tensor per input tensor, and storage
    args = _place(args, device, placed)
    kwargs = _place(kwargs, device, placed)
    # A trace makes many small objects that live until it is rendered; with the collector on,
    # each adds to the count that starts a full collection over every object of the process
    # (torch's included): about a third of a trace of small modules. Only `trace_forward`
    # pauses it, for one forward; a `record` block runs the user's own code and leaves it on.
    with (
        paused_garbage_collection(),
        meta_failures_explained(device) as traces,
        _traced(root, options, facets, restore_state=True) as recorder,
    ):
        traces.append(recorder.trace)
        facets.run_forward(root, args, kwargs)
    trace = cast(Trace, recorder.trace)  # _traced asks the recorder for a Trace
    facets.finish(trace)
    facets.measure(trace, root, args, kwargs, device)
    check_finished_trace(trace, options)
    return trace


@contextmanager
def record_calls(
    model: nn.Module, options: TraceOptions, *, restore_state: bool, allow_empty: bool
) -> Iterator[Trace]:
    """`record` with its options given as one value."""
    root = resolve_model(model, entry_point="record")
    check_torch_release(torch.__version__)
    _check_recordable(options)
    facets = FacetRecording.for_options(options)
    with _traced(root, options, facets, restore_state=restore_state) as recorder:
        yield cast(Trace, recorder.trace)
    trace = cast(Trace, recorder.trace)  # _traced asks the recorder for a Trace
    facets.finish(trace)
    if not trace.calls and not allow_empty:
        raise EmptyTraceError(
            f"record({trace.root_type}) saw no call of the model or its modules inside the "
            "block: call the model itself inside the `with` block (not a copy of it), or "
            "pass allow_empty=True if an empty trace is what you mean to test"
        )
    check_finished_trace(trace, options)


@contextmanager
def _traced(
    root: nn.Module, options: TraceOptions, facets: FacetRecording, *, restore_state: bool
) -> Iterator[Recorder]:
    """The hooks, modes and refusals of one trace, around a forward or a `record` block."""
    device = options.device
    with (
        compiled_code_run_eagerly(root),
        facets.watched(),
        recording(
            root,
            _render_options(options),
            device=device,
            restore_state=restore_state,
            direct_forwards=options.direct_forwards,
            trace_type=Trace,
        ) as recorder,
        facets.recorded(recorder, root),
        autocast_refused(device),
        fast_paths_refused(device),
    ):
        yield recorder


def _check_recordable(options: TraceOptions) -> None:
    """Refuse the options a `record` block cannot honour."""
    switched_on = switched_on_trace_facets(options)
    for facet in measured_facets(switched_on):
        raise ValueError(facet.record_refusal)
    for watched in switched_on:
        if watches_build(watched):  # a block takes a model already built
            raise ValueError(watched.record_refusal)


def _check_model_keywords(root: nn.Module, kwargs: dict[str, Any]) -> None:
    """A keyword argument close to an option's name that forward cannot take is a misspelt
    option: say so before forward fails on it (or the golden silently lacks the option)."""
    if not kwargs:
        return
    try:
        parameters = inspect.signature(root.forward).parameters
    except (TypeError, ValueError):  # a forward without a readable signature
        return
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values()):
        return
    for name in kwargs:
        hint = did_you_mean(name, OPTION_NAMES) if name not in parameters else ""
        if hint:
            raise TypeError(
                f"trace_forward got the keyword argument {name!r}, which is no trace option "
                f"and which {type(root).__name__}.forward does not take{hint} "
                f"The options are {', '.join(OPTION_NAMES)}"
            )


def _render_options(options: TraceOptions) -> RenderOptions:
    return RenderOptions(
        hidden=frozenset(options.hide),
        annotations=shown_annotations(options),
        fold=options.fold,
    )


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
