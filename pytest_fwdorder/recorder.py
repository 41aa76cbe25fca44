"""Hook a model, record every module call into a `Trace`, and leave the model as it was.

This is the only module that installs hooks. It uses torch's public global module hooks
(`register_module_forward_pre_hook` / `register_module_forward_hook`) for the length of a
`with` block, so it sees modules that are not registered under the root too, and never
leaves anything in the user's modules.
"""

from __future__ import annotations

import operator
import random
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

from pytest_fwdorder.describe import (
    describe_keyword_arguments,
    finish_value,
    raw_value,
    tensors_of,
)
from pytest_fwdorder.distributed import (
    class_swapped_modules,
    swapped_classes_message,
    user_class_name,
)
from pytest_fwdorder.errors import MetaTraceError, UnwrappedModelWarning, warn_at_caller
from pytest_fwdorder.facts import TensorIndex, index_tensors, is_uninitialized, module_facts
from pytest_fwdorder.records import Call, ModuleFacts, ModuleTensors, RenderOptions
from pytest_fwdorder.trace import Trace

# Calls listed in the note added to an exception raised by forward.
_CALLS_IN_FAILURE_NOTE = 12


def resolve_model(model: object, *, entry_point: str) -> nn.Module:
    """Return the module to trace, unwrapping torch.compile and DataParallel wrappers.

    Raises TypeError for anything that is not an `nn.Module` or is a TorchScript module,
    whose calls never reach Python hooks.
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(
            f"{entry_point} cannot trace a TorchScript module ({type(model).__name__}): "
            "scripted code never calls Python forward hooks. Trace the nn.Module you "
            "scripted, before torch.jit.script / torch.jit.trace."
        )
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{entry_point} expected an nn.Module, got {type(model).__name__!r}"
            f"{_not_a_module_hint(model, entry_point)}"
        )
    wrapped = _unwrap(model)
    if wrapped is not model:
        warn_at_caller(
            f"{entry_point} traced the module inside {type(model).__name__} "
            f"({user_class_name(wrapped)}); paths are relative to it and the wrapper's own "
            "machinery (compiled graphs, replicas) is not part of the trace",
            UnwrappedModelWarning,
        )
    if swapped := class_swapped_modules(wrapped):  # FSDP2: FSDPLinear shown as Linear
        message = swapped_classes_message(entry_point, wrapped, swapped)
        warn_at_caller(message, UnwrappedModelWarning)
    return wrapped


def _not_a_module_hint(model: object, entry_point: str) -> str:
    if isinstance(model, torch.Tensor):
        return f": the model comes first, then its inputs: {entry_point}(model, *inputs)"
    if isinstance(model, type) and issubclass(model, nn.Module):
        return f": that is the class; pass an instance ({model.__name__}(...))"
    if isinstance(getattr(model, "__self__", None), nn.Module):
        return ": pass the model, not its forward method"
    if callable(model):
        return (
            ": to trace a model built by a function, pass a zero-argument builder to "
            "trace_forward (or call it yourself); to trace a function, wrap it in an nn.Module"
        )
    return ""


def _unwrap(model: nn.Module) -> nn.Module:
    inner = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
    if isinstance(inner, nn.Module):
        return _unwrap(inner)
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return _unwrap(model.module)
    return model


@dataclass(slots=True)
class ModuleEntry:
    """What the recorder knows of one module, worked out once per trace, before it runs.

    Facts come from the user's module as it was, never from stand-ins swapped in for a
    device: a meta trace and a CPU trace see the same module.
    """

    path: str
    registered: bool
    module_type: str
    scripted: bool
    facts: ModuleFacts
    training: bool


_OPAQUE = ModuleFacts((), ModuleTensors(()), None)  # what Python cannot read in TorchScript


def module_entry(
    module: nn.Module, path: str, *, registered: bool, inside_script: bool = False
) -> ModuleEntry:
    if isinstance(module, torch.jit.ScriptModule):
        original_name = getattr(module, "original_name", None)
        module_type = original_name if isinstance(original_name, str) else type(module).__name__
        return ModuleEntry(path, registered, module_type, True, _OPAQUE, module.training)
    facts = _OPAQUE if inside_script else module_facts(module)
    # Positional: this runs for every module of every trace.
    return ModuleEntry(path, registered, user_class_name(module), False, facts, module.training)


@dataclass
class ModelIndex:
    """One walk over the model: its modules, their entries, other names and callables."""

    modules: list[nn.Module]
    entries: dict[int, ModuleEntry]
    aliases: dict[str, tuple[str, ...]]
    callable_paths: tuple[str, ...]
    # The modules whose state Python owns: not TorchScript ones, nor anything inside them.
    python_modules: list[nn.Module]
    tensors: TensorIndex


def index_model(root: nn.Module) -> ModelIndex:
    modules: list[nn.Module] = []
    entries: dict[int, ModuleEntry] = {}
    other_names: dict[int, list[str]] = {}
    scripted_prefixes: list[str] = []
    callable_paths: list[str] = []
    python_modules: list[nn.Module] = []
    named_modules = list(root.named_modules(remove_duplicate=False))
    for path, module in named_modules:
        module_id = id(module)
        if module_id in entries:
            other_names.setdefault(module_id, []).append(path)
            continue
        inside_script = bool(scripted_prefixes) and path.startswith(tuple(scripted_prefixes))
        entry = module_entry(module, path, registered=True, inside_script=inside_script)
        entries[module_id] = entry
        modules.append(module)
        if inside_script:
            continue  # its calls never reach Python hooks
        if entry.scripted:
            scripted_prefixes.append(f"{path}.")
            callable_paths.append(path)
            continue
        python_modules.append(module)
        if type(module).forward is not nn.Module.forward:
            callable_paths.append(path)
    return ModelIndex(
        modules=modules,
        entries=entries,
        aliases={entries[module_id].path: tuple(names) for module_id, names in other_names.items()},
        callable_paths=tuple(callable_paths),
        python_modules=python_modules,
        tensors=index_tensors(root, named_modules, with_keys=False),
    )


@dataclass
class _ModelState:
    """What a forward can change in a model and around it, captured so it can be put back.

    Modules join as they are met: the registered ones before the forward, unregistered ones
    (kept in a plain list, built in forward) at their first call, before they run.
    """

    modules: list[nn.Module] = field(default_factory=list)
    attributes: list[dict[str, Any]] = field(default_factory=list)
    # Modules with parameters: (module, its parameters dict as it was).
    parameter_dicts: list[tuple[nn.Module, dict[str, Any]]] = field(default_factory=list)
    # Every parameter, flat, with its full name and signature: compared as two lists in one
    # C comparison when the forward is over, parameter by parameter only if they differ.
    parameters: list[torch.Tensor] = field(default_factory=list)
    parameter_names: list[str] = field(default_factory=list)
    parameter_signatures: list[_ParameterSignature] = field(default_factory=list)
    buffers: list[tuple[nn.Module, dict[str, Any], dict[str, torch.Tensor]]] = field(
        default_factory=list
    )
    grad_enabled: bool = True
    cpu_rng: torch.Tensor | None = None
    cuda_rng: list[torch.Tensor] | None = None
    python_rng: object = None
    numpy_rng: object = None

    def add_module(self, module: nn.Module, path: str) -> None:
        """Capture one module's own state (not its children's)."""
        self.modules.append(module)
        # Plain attributes too: a forward that reassigns `self.scale = self.scale.to(device)`
        # would otherwise leave a tensor of the trace's device in the model.
        self.attributes.append(module.__dict__.copy())
        parameters = module._parameters
        if parameters:
            self.parameter_dicts.append((module, parameters.copy()))
            prefix = f"{path}." if path else ""
            own = [value for value in parameters.values() if value is not None]
            self.parameters += own
            self.parameter_names += [
                prefix + name for name, value in parameters.items() if value is not None
            ]
            self.parameter_signatures += _signatures(own)
        if module._buffers:
            with torch.no_grad():  # clones of buffers that require grad must not
                copies = {
                    name: value.clone()
                    for name, value in module._buffers.items()
                    if value is not None and not is_uninitialized(value)
                }
            self.buffers.append((module, module._buffers.copy(), copies))


# A parameter as it was: version counter, requires_grad, dtype, shape, device.
_ParameterSignature = tuple[int, bool, torch.dtype, "torch.Size | None", torch.device]


def _signatures(parameters: Sequence[torch.Tensor]) -> list[_ParameterSignature]:
    try:  # the common case in one comprehension
        return [
            (value._version, value.requires_grad, value.dtype, value.shape, value.device)
            for value in parameters
        ]
    except RuntimeError:  # a lazy parameter (no shape) or an inference tensor (no version)
        return [
            (_version(value), value.requires_grad, value.dtype, _shape(value), value.device)
            for value in parameters
        ]


def _shape(tensor: torch.Tensor) -> torch.Size | None:
    return None if is_uninitialized(tensor) else tensor.shape


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # inference tensors keep no version counter
        return -1


def _capture_state(index: ModelIndex) -> _ModelState:
    numpy = sys.modules.get("numpy")
    state = _ModelState(
        grad_enabled=torch.is_grad_enabled(),
        cpu_rng=torch.random.get_rng_state(),
        # Asking for CUDA's state would initialise CUDA; only save it if it is in use.
        cuda_rng=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,  # type: ignore[no-untyped-call]
        python_rng=random.getstate(),
        # Models draw from numpy's global generator too (Wav2Vec2's SpecAugment masks).
        numpy_rng=numpy.random.get_state() if numpy is not None else None,
    )
    for module in index.python_modules:
        state.add_module(module, index.entries[id(module)].path)
    return state


def _same_entries(current: dict[str, Any], original: dict[str, Any]) -> bool:
    """Whether a dict still holds the very objects it held, under the same names.

    Reassigning a name keeps its place in a dict, so comparing the values in order by
    identity (in C, by `map`) finds any reassignment; the key views catch renames.
    """
    return (
        len(current) == len(original)
        and all(map(operator.is_, current.values(), original.values()))
        and current.keys() == original.keys()
    )


def _restore_attributes(module: nn.Module, original: dict[str, Any]) -> None:
    current = module.__dict__
    if _same_entries(current, original):
        return
    for name in [name for name in current if name not in original]:
        del current[name]
    current.update(original)


def _restore_state(state: _ModelState) -> None:
    torch.set_grad_enabled(state.grad_enabled)
    if state.cpu_rng is not None:
        torch.random.set_rng_state(state.cpu_rng)
    if state.cuda_rng is not None:
        torch.cuda.set_rng_state_all(state.cuda_rng)
    random.setstate(state.python_rng)  # type: ignore[arg-type]
    numpy = sys.modules.get("numpy")
    if numpy is not None and state.numpy_rng is not None:
        numpy.random.set_state(state.numpy_rng)
    with_parameters = {id(module) for module, _ in state.parameter_dicts}
    with_buffers = {id(module) for module, _, _ in state.buffers}
    for module, attributes in zip(state.modules, state.attributes, strict=True):
        _restore_attributes(module, attributes)
        # A module that had none may have registered a parameter or buffer in forward.
        if module._parameters and id(module) not in with_parameters:
            module._parameters.clear()
        if module._buffers and id(module) not in with_buffers:
            module._buffers.clear()
    for module, original in state.parameter_dicts:
        if not _same_entries(module._parameters, original):
            module._parameters.clear()
            module._parameters.update(original)
    changed_in_place: list[str] = []
    now = _signatures(state.parameters)
    if now != state.parameter_signatures:
        for name, parameter, before, after in zip(
            state.parameter_names, state.parameters, state.parameter_signatures, now, strict=True
        ):
            requires_grad = before[1]
            if parameter.requires_grad is not requires_grad:
                parameter.requires_grad_(requires_grad)
            # `.data = ...` swaps the storage without bumping the version counter.
            if before[0] != after[0] or before[2:] != after[2:]:
                changed_in_place.append(name)
    # One no_grad (and, only if needed, inference_mode) for all buffers: entering a context
    # per buffer cost more than the copies themselves.
    inference_buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
    with torch.no_grad():
        for module, original, copies in state.buffers:
            if not _same_entries(module._buffers, original):
                module._buffers.clear()
                module._buffers.update(original)
            # Always copy back: BatchNorm's kernel updates running statistics in place without
            # bumping the version counter, so "unchanged" cannot be told from the version.
            for name, copy in copies.items():
                buffer = original[name]
                if buffer.is_inference():
                    inference_buffers.append((buffer, copy))
                elif (buffer.shape, buffer.dtype, buffer.device) != (
                    copy.shape,
                    copy.dtype,
                    copy.device,
                ):
                    buffer.data = copy  # forward replaced its `.data`: put the original back
                else:
                    buffer.copy_(copy)
    if inference_buffers:
        with torch.inference_mode():
            for buffer, copy in inference_buffers:
                buffer.copy_(copy)
    if changed_in_place:
        warn_at_caller(
            f"forward changed parameters in place ({', '.join(changed_in_place[:5])}); "
            "pytest-fwdorder puts buffers back but does not copy parameters, so these "
            "keep the values forward gave them"
        )


def _check_stand_ins_possible(index: ModelIndex, device: torch.device) -> None:
    """Fail before anything runs if a lazy parameter or buffer cannot get a stand-in."""
    for module in index.python_modules:
        for kind, tensors in (("parameter", module._parameters), ("buffer", module._buffers)):
            for name, value in tensors.items():
                if (
                    value is not None
                    and is_uninitialized(value)
                    and value.device.type != device.type
                ):
                    path = index.entries[id(module)].path
                    full_name = f"{path}.{name}" if path else name
                    message = (
                        f"lazy {kind} {full_name!r} is not initialized yet, so it has no shape "
                        f"to give a stand-in on {device.type!r}: run one forward on the "
                        "model's own device first (that initializes it), or leave device unset"
                    )
                    if device.type == "meta":
                        raise MetaTraceError(message)
                    raise ValueError(message)


class StandIns:
    """Stand-ins on a device for parameters and buffers that live elsewhere, and the way back.

    One stand-in per tensor object, so tied weights stay tied. Meta stand-ins hold no
    memory; on a real device they are copies. `remove` puts back every original swapped so
    far, also after a swap that failed halfway.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.by_tensor: dict[int, torch.Tensor] = {}
        self.swapped: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def install(self, module: nn.Module) -> None:
        """Swap one module's own tensors (not its children's)."""
        tensor_dicts: tuple[dict[str, Any], ...] = (module._parameters, module._buffers)
        for tensors in tensor_dicts:
            elsewhere = [
                name
                for name, value in tensors.items()
                if value is not None and value.device.type != self.device.type
            ]
            if not elsewhere:
                continue
            self.swapped.append((tensors, dict(tensors)))
            for name in elsewhere:
                tensors[name] = self._stand_in_for(tensors[name])

    def remove(self) -> None:
        for tensors, original in reversed(self.swapped):
            tensors.clear()
            tensors.update(original)
        self.swapped.clear()

    def _stand_in_for(self, tensor: torch.Tensor) -> torch.Tensor:
        found = self.by_tensor.get(id(tensor))
        if found is None:
            with torch.no_grad():
                data = (
                    torch.empty_like(tensor, device=self.device)
                    if self.device.type == "meta"
                    else tensor.detach().to(self.device, copy=True)
                )
            if isinstance(tensor, nn.Parameter):
                found = nn.Parameter(data, requires_grad=tensor.requires_grad)
            else:
                found = data
            self.by_tensor[id(tensor)] = found
        return found


def _keyword_frame_code() -> CodeType | None:
    """The code of `Module._call_impl`'s inner function, whose frame holds a call's kwargs.

    torch's global forward pre-hooks receive `(module, args)` only, but they are called from
    this function, whose `kwargs` is the dict forward will get. Reading it there describes
    keyword arguments before forward can change them, at no registration cost. None when a
    torch release lays `_call_impl` out otherwise: the recorder then falls back to per-module
    pre-hooks with `with_kwargs=True` (correct, slower).
    """
    for constant in nn.Module._call_impl.__code__.co_consts:
        if (
            isinstance(constant, CodeType)
            and constant.co_name == "inner"
            and "kwargs" in constant.co_freevars
        ):
            return constant
    return None


KEYWORD_FRAME_CODE = _keyword_frame_code()


class CallRecord:
    """What the hooks keep of one call until `Recorder.finish` builds its `Call`."""

    __slots__ = (
        "args",
        "depth",
        "entry",
        "kwargs",
        "module",
        "nth",
        "number",
        "output",
        "parent",
        "raised",
    )

    def __init__(
        self,
        module: nn.Module,
        entry: ModuleEntry,
        nth: int,
        depth: int,
        parent: int,
        args: list[object],
        kwargs: tuple[tuple[str, Any], ...] | None,
        number: int,
    ) -> None:
        self.module = module
        self.entry = entry
        self.nth = nth
        self.depth = depth
        self.parent = parent  # the parent's record number, -1 for an outermost call
        self.args = args
        self.kwargs = kwargs  # None until described
        self.output: object = _NOT_FINISHED
        self.raised = False
        self.number = number


_NOT_FINISHED = object()


class Recorder:
    """The hook pair and the bookkeeping of one recording; `trace` holds its calls.

    The hooks only keep raw records (immutable shape, dtype and device objects, the
    module's entry); `finish` turns them into `Call`s once the forward is over.
    """

    def __init__(
        self,
        index: ModelIndex,
        trace: Trace,
        *,
        capture_outputs: bool = False,
        state: _ModelState | None = None,
        stand_ins: StandIns | None = None,
    ) -> None:
        self.trace = trace
        # Unregistered modules join these at their first call, before they run.
        self.state = state
        self.stand_ins = stand_ins
        self.records: list[CallRecord] = []
        # With capture_outputs: (record number, detached copies of its output tensors), in
        # the order calls finished. Off by default: a trace holds no tensor.
        self.capture_outputs = capture_outputs
        self.captured_records: list[tuple[int, list[torch.Tensor]]] = []
        self.thread_id = threading.get_ident()
        self.index = index
        # Unregistered modules get entries as they are met, and are kept alive in
        # `keep_alive` so that their ids cannot be reused by another module mid-trace.
        self.entries: dict[int, ModuleEntry] = dict(index.entries)
        self.keep_alive: list[nn.Module] = []
        self.taken_paths = {entry.path for entry in self.entries.values()}
        self.call_counts: dict[int, int] = {}
        self.open_calls: list[CallRecord] = []
        self.keyword_frame_code = KEYWORD_FRAME_CODE

    @property
    def calls(self) -> list[Call]:
        self.finish()
        return self.trace.calls

    @property
    def captured(self) -> list[tuple[Call, list[torch.Tensor]]]:
        """Each finished call with copies of its output tensors (with `capture_outputs`)."""
        calls = self.calls
        return [(calls[number], copies) for number, copies in self.captured_records]

    def hooks(self) -> tuple[Callable[..., None], Callable[..., None]]:
        """The global pre-hook and post-hook: closures over what they touch.

        They run once per module call, so everything they use is a local of this function
        rather than an attribute looked up on `self` at every call.
        """
        thread_id = self.thread_id
        get_ident = threading.get_ident
        get_frame = sys._getframe
        keyword_frame_code = self.keyword_frame_code
        entries = self.entries
        call_counts = self.call_counts
        open_calls = self.open_calls
        records = self.records
        append_record = records.append
        open_call = open_calls.append
        close_call = open_calls.pop
        tensor_type = torch.Tensor
        strided = torch.strided
        enter_unregistered = self._enter_unregistered
        capture_outputs = self.capture_outputs
        captured_records = self.captured_records

        def before_forward(module: nn.Module, args: tuple[Any, ...]) -> None:
            if get_ident() != thread_id:
                return
            module_id = id(module)
            entry = entries.get(module_id)
            if entry is None:
                if not open_calls:
                    return  # a module outside the model, called outside the model
                entry = enter_unregistered(module)
            nth = call_counts.get(module_id, 0) + 1
            call_counts[module_id] = nth
            kwargs = None
            frame: FrameType = get_frame(1)
            if frame.f_code is keyword_frame_code:
                keyword_arguments = frame.f_locals.get("kwargs")
                kwargs = describe_keyword_arguments(keyword_arguments) if keyword_arguments else ()
            try:  # raw_value, inlined for the common case: a plain strided tensor
                raw_args = [
                    (value.shape, value.dtype, value.device)
                    if type(value) is tensor_type and value.layout is strided
                    else raw_value(value)
                    for value in args
                ]
            except RuntimeError:  # a nested tensor is strided but has no sizes to read
                raw_args = [raw_value(value) for value in args]
            record = CallRecord(
                module,
                entry,
                nth,
                len(open_calls),
                open_calls[-1].number if open_calls else -1,
                raw_args,
                kwargs,
                len(records),
            )
            append_record(record)
            open_call(record)

        def after_forward(module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
            # torch calls this with (kwargs, output) normally, and with (output,) alone when
            # forward raised (the always_call path ignores with_kwargs).
            if get_ident() != thread_id:
                return
            if not open_calls or open_calls[-1].module is not module:
                return
            record = close_call()
            if len(rest) == 2:
                if record.kwargs is None:  # neither the frame nor a per-module hook saw them
                    record.kwargs = describe_keyword_arguments(rest[0]) if rest[0] else ()
                output = rest[1]
                # raw_value, inlined for the common case; raw_value handles nested tensors
                record.output = (
                    (output.shape, output.dtype, output.device)
                    if type(output) is tensor_type
                    and output.layout is strided
                    and not output.is_nested
                    else raw_value(output)
                )
                if capture_outputs:
                    copies = [tensor.detach().clone() for tensor in tensors_of(output)]
                    captured_records.append((record.number, copies))
            else:
                record.raised = True

        return before_forward, after_forward

    def before_forward_with_keywords(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """The fallback's per-module pre-hook: runs right after the global pre-hook."""
        open_calls = self.open_calls
        if open_calls and open_calls[-1].module is module and open_calls[-1].kwargs is None:
            open_calls[-1].kwargs = describe_keyword_arguments(kwargs) if kwargs else ()

    def finish(self) -> None:
        """Turn the raw records made so far into the trace's `Call`s (once each)."""
        calls = self.trace.calls
        for record in self.records[len(calls) :]:
            entry = record.entry
            parent = calls[record.parent] if record.parent >= 0 else None
            output = record.output
            call = Call(
                path=entry.path,
                module_type=entry.module_type,
                nth=record.nth,
                depth=record.depth,
                parent=parent,
                registered=entry.registered,
                index=len(calls),
                args=tuple([finish_value(value) for value in record.args]),
                kwargs=record.kwargs or (),
                output=None if output is _NOT_FINISHED else finish_value(output),
                raised=record.raised,
                frozen=entry.facts.tensors.frozen,
                scripted=entry.scripted,
                facts=entry.facts,
                training=entry.training,
            )
            calls.append(call)
            if parent is not None:
                parent.children.append(call)

    def _enter_unregistered(self, module: nn.Module) -> ModuleEntry:
        parent_record = self.open_calls[-1]
        parent_module = parent_record.module
        parent_entry = parent_record.entry
        prefix = f"{parent_entry.path}." if parent_entry.path else ""
        registered = False
        path = None
        for name, child in parent_module._modules.items():
            if child is module:  # registered during this forward
                path, registered = f"{prefix}{name}", parent_entry.registered
                break
        if path is None:
            path = _attribute_path(parent_module, module, prefix)
        if path is None or path in self.taken_paths:
            base = f"{prefix}<{type(module).__name__}>"
            path, number = base, 1
            while path in self.taken_paths:
                number += 1
                path = f"{base}{number}"
        self.taken_paths.add(path)
        entry = module_entry(module, path, registered=registered)
        self.entries[id(module)] = entry
        self.keep_alive.append(module)
        if self.state is not None:
            self.state.add_module(module, path)
        if self.stand_ins is not None:
            self.stand_ins.install(module)
        return entry

    @contextmanager
    def hooks_installed(self) -> Iterator[None]:
        with ExitStack() as stack:
            before_forward, after_forward = self.hooks()
            pre_handle = register_module_forward_pre_hook(before_forward)
            stack.callback(pre_handle.remove)
            post_handle = register_module_forward_hook(
                after_forward, with_kwargs=True, always_call=True
            )
            stack.callback(_forget_keyword_flag, post_handle.id)
            stack.callback(post_handle.remove)
            if self.keyword_frame_code is None:
                for module in self.index.python_modules:
                    handle = module.register_forward_pre_hook(
                        self.before_forward_with_keywords, with_kwargs=True
                    )
                    stack.callback(handle.remove)
            try:
                yield
            finally:
                self.keep_alive.clear()
                self.open_calls.clear()

    def failure_note(self) -> str:
        """Where forward failed and what ran before it, for the note on the user's error."""
        calls = self.calls
        if not calls:
            return "pytest-fwdorder: forward raised before any module call was recorded"
        failing = [call for call in calls if call.raised]
        count = f"{len(calls)} recorded call{'s' if len(calls) != 1 else ''}"
        lines = [f"pytest-fwdorder: forward raised after {count}."]
        if failing:
            innermost = max(failing, key=lambda call: call.depth)
            chain = []
            current: Call | None = innermost
            while current is not None:
                chain.append(f"{current.display_path} ({current.module_type})")
                current = current.parent
            lines.append(f"Raised in: {' < '.join(chain)}")
        shown = calls[-_CALLS_IN_FAILURE_NOTE:]
        lines.append(f"Calls recorded up to the failure (last {len(shown)}):")
        lines.extend(
            f"  {'  ' * call.depth}{call.display_path} {call.module_type} #{call.nth}"
            f"{'  <- raised' if call.raised else ''}"
            for call in shown
        )
        return "\n".join(lines)


def _forget_keyword_flag(handle_id: int) -> None:
    """Undo what `RemovableHandle.remove()` leaves behind for a `with_kwargs=True` global hook.

    torch records the hook's id in `_global_forward_hooks_with_kwargs` but the handle does
    not remove it, so every trace would leave an entry there and `_has_any_global_hook()`
    would stay true for the rest of the process. Harmless once torch removes it itself.
    """
    flags = getattr(torch_module, "_global_forward_hooks_with_kwargs", None)
    if isinstance(flags, dict):
        flags.pop(handle_id, None)


def _attribute_path(owner: nn.Module, module: nn.Module, prefix: str) -> str | None:
    """Name an unregistered module by where its owner keeps it: `blocks[0]`, `heads['a']`."""
    for name, value in vars(owner).items():
        if value is module:
            return f"{prefix}{name}"
        if isinstance(value, (list, tuple)):
            for position, item in enumerate(value):
                if item is module:
                    return f"{prefix}{name}[{position}]"
        elif isinstance(value, dict):
            for key, item in value.items():
                if item is module:
                    return f"{prefix}{name}[{key!r}]"
    return None


@contextmanager
def recording(
    root: nn.Module,
    options: RenderOptions,
    *,
    device: torch.device | str | None = None,
    restore_state: bool = True,
    capture_outputs: bool = False,
) -> Iterator[Recorder]:
    """Record every call made in this thread inside the block into `recorder.trace`.

    With `device`, parameters and buffers that live elsewhere are swapped for stand-ins on
    it (meta stand-ins hold no memory) and factory calls inside the block land on it; the
    originals are always put back. Hooks are removed and (with `restore_state`) parameters,
    buffers, plain attributes, training and requires_grad flags, grad mode and the random
    states (torch, Python, numpy) are put back, also when the block raises. An exception
    from the block gets a note naming the calls recorded.
    """
    index = index_model(root)
    target = torch.device(device) if device is not None else None
    if target is not None:
        _check_stand_ins_possible(index, target)
    root_entry = index.entries[id(root)]
    tensors = index.tensors
    trace = Trace(
        root_type=root_entry.module_type,
        callable_paths=index.callable_paths,
        aliases=index.aliases,
        options=options,
        mode="train" if root_entry.training else "eval",
        modules={entry.path: (entry.module_type, entry.facts) for entry in index.entries.values()},
        tied=tensors.tied,
        totals=tensors.totals,
    )
    state = _capture_state(index) if restore_state else None
    stand_ins = StandIns(target) if target is not None else None
    recorder = Recorder(
        index, trace, capture_outputs=capture_outputs, state=state, stand_ins=stand_ins
    )
    if stand_ins is not None:
        try:
            for module in index.python_modules:
                stand_ins.install(module)
        except Exception as error:
            _put_back(recorder, stand_ins, state, None)
            message = (
                f"cannot make stand-ins on {stand_ins.device.type!r} for the model's weights: "
                f"{type(error).__name__}: {error}. Trace where the model is (leave device "
                "unset), or build the model on that device"
            )
            if stand_ins.device.type == "meta":
                raise MetaTraceError(message) from error
            raise ValueError(message) from error
    in_flight: BaseException | None = None
    try:
        with ExitStack() as stack:
            if target is not None:
                stack.enter_context(target)
            stack.enter_context(recorder.hooks_installed())
            yield recorder
    except BaseException as error:
        in_flight = error
        error.add_note(recorder.failure_note())
        raise
    finally:
        _put_back(recorder, stand_ins, state, in_flight)


def _put_back(
    recorder: Recorder,
    stand_ins: StandIns | None,
    state: _ModelState | None,
    in_flight: BaseException | None,
) -> None:
    """Put the originals and the model's state back; never hide an exception in flight.

    A failure here while the user's exception propagates becomes a note on that exception.
    """
    try:
        if stand_ins is not None:
            stand_ins.remove()
        if state is not None:
            _restore_state(state)
    except Exception as error:
        if in_flight is None:
            raise
        in_flight.add_note(
            f"pytest-fwdorder: putting the model back failed too: {type(error).__name__}: {error}"
        )
    finally:
        recorder.finish()
