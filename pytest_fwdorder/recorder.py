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
from dataclasses import dataclass
from itertools import chain
from types import CodeType, FrameType
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.nn.modules.lazy import LazyModuleMixin
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
    user_class,
    user_class_name,
)
from pytest_fwdorder.errors import MetaTraceError, UnwrappedModelWarning, warn_at_caller
from pytest_fwdorder.facts import (
    MOST_CACHED_CLASSES,
    TensorIndex,
    buffers_of,
    index_tensors,
    is_uninitialized,
    module_facts,
    parameters_of,
    reads_training,
)
from pytest_fwdorder.hooks import module_facts_hooks_exist
from pytest_fwdorder.meta_kernels import meta_kernel_cache
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
    # The module's mode, or None where its class computes the same in both (facts.reads_training).
    training: bool | None


_OPAQUE = ModuleFacts((), ModuleTensors(()), None)  # what Python cannot read in TorchScript


def module_entry(
    module: nn.Module,
    path: str,
    *,
    registered: bool,
    inside_script: bool = False,
    ask_plugins: bool = True,
) -> ModuleEntry:
    module_type, scripted, mode_matters = _class_facts(type(module))
    if scripted:
        original_name = getattr(module, "original_name", None)
        module_type = original_name if isinstance(original_name, str) else module_type
        return ModuleEntry(path, registered, module_type, True, _OPAQUE, module.training)
    facts = _OPAQUE if inside_script else module_facts(module, ask_plugins=ask_plugins)
    training = module.training if mode_matters else None
    # Positional: this runs for every module of every trace.
    return ModuleEntry(path, registered, module_type, False, facts, training)


# Per class: the name the user wrote it under, whether it is TorchScript's, and whether its
# code reads the mode. Asked for every module of every trace; a plain dict, as for facts'
# settings plans (why is there).
_CLASS_FACTS: dict[type, tuple[str, bool, bool]] = {}


def _class_facts(module_class: type) -> tuple[str, bool, bool]:
    found = _CLASS_FACTS.get(module_class)
    if found is None:
        if len(_CLASS_FACTS) >= MOST_CACHED_CLASSES:
            _CLASS_FACTS.clear()
        found = _CLASS_FACTS[module_class] = (
            user_class(module_class).__name__,
            issubclass(module_class, torch.jit.ScriptModule),
            reads_training(module_class),
        )
    return found


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
    ask_plugins = module_facts_hooks_exist()
    for path, module in named_modules:
        module_id = id(module)
        if module_id in entries:
            other_names.setdefault(module_id, []).append(path)
            continue
        inside_script = bool(scripted_prefixes) and path.startswith(tuple(scripted_prefixes))
        entry = module_entry(
            module, path, registered=True, inside_script=inside_script, ask_plugins=ask_plugins
        )
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


class _ModelState:
    """What a forward can change in a model and around it, captured so it can be put back.

    Modules join as they are met: the registered ones before the forward, unregistered ones
    (kept in a plain list, built in forward) at their first call, before they run. Each
    module's `__dict__`, `_parameters`, `_buffers` and every plain dict, list or set it
    holds (`_modules`, hook dicts, the user's own) are watched: copied (one level deep), and
    compared with their copies by identity when the forward is over, all of them at once in
    C, and one by one only when something differs.
    """

    def __init__(self) -> None:
        self.modules: list[nn.Module] = []
        self.paths: list[str] = []
        self.parameter_dicts: list[dict[str, Any]] = []
        self.attribute_dicts: list[dict[str, Any]] = []  # each module's __dict__ object
        # Plain attributes too: a forward that reassigns `self.scale = self.scale.to(device)`
        # would otherwise leave a tensor of the trace's device in the model.
        self.watched: list[dict[str, Any]] = []
        self.copies: list[dict[str, Any]] = []
        # Lists and sets a module holds (`self.seen.append(...)`), with copies, compared the
        # same way; lazy modules with their first-call hooks, which may stay.
        self.watched_lists: list[list[Any]] = []
        self.list_copies: list[list[Any]] = []
        self.watched_sets: list[set[Any]] = []
        self.set_copies: list[set[Any]] = []
        # What the copies above do not reach (a list inside a dict attribute, a list
        # subclass), with its length: a change in length is reported, not put back.
        self.unwatched: list[_Unwatched] = []
        self.lazy_modules: list[nn.Module] = []
        # Every parameter, flat, with its signature: compared as two lists in one C
        # comparison when the forward is over, parameter by parameter only if they differ.
        self.parameters: list[torch.Tensor] = []
        self.parameter_signatures: list[_ParameterSignature] = []
        # (buffer, a copy of its values): BatchNorm updates running statistics in place.
        self.buffer_copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.copied_buffers: set[int] = set()
        self.grad_enabled = torch.is_grad_enabled()
        self.cpu_rng = torch.random.get_rng_state()
        # Asking for CUDA's state would initialise CUDA; only save it if it is in use.
        self.cuda_rng: list[torch.Tensor] | None = (
            torch.cuda.get_rng_state_all()
            if torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
            else None
        )
        self.python_rng = random.getstate()
        # Models draw from numpy's global generator too (Wav2Vec2's SpecAugment masks). Saving
        # and setting it costs about 170 us: only if `numpy.random` was imported, since a
        # forward that imports it first gets a generator seeded afresh anyway.
        numpy_random = sys.modules.get("numpy.random")
        self.numpy_rng: object = numpy_random.get_state() if numpy_random is not None else None

    def add_modules(self, modules: Sequence[nn.Module], paths: Sequence[str]) -> None:
        """Capture these modules' own state (not their children's)."""
        self.modules += modules
        self.paths += paths
        attribute_dicts = list(map(vars, modules))
        parameter_dicts = list(map(parameters_of, modules))
        buffer_dicts = list(map(buffers_of, modules))
        containers = list(chain.from_iterable(map(dict.values, attribute_dicts)))
        watched_already = set(map(id, chain(parameter_dicts, buffer_dicts)))
        dicts = [
            value
            for value in containers
            if isinstance(value, dict) and id(value) not in watched_already
        ]
        self.watched_lists += [value for value in containers if type(value) is list]
        self.list_copies += [value.copy() for value in containers if type(value) is list]
        self.watched_sets += [value for value in containers if type(value) is set]
        self.set_copies += [value.copy() for value in containers if type(value) is set]
        self.lazy_modules += [module for module in modules if isinstance(module, LazyModuleMixin)]
        for path, attributes in zip(paths, attribute_dicts, strict=True):
            self.unwatched += _unwatched_containers(path, attributes)
        watched = [*attribute_dicts, *parameter_dicts, *buffer_dicts, *dicts]
        self.attribute_dicts += attribute_dicts
        self.parameter_dicts += parameter_dicts
        self.watched += watched
        self.copies += map(dict.copy, watched)
        parameters = [
            value
            for value in chain.from_iterable(map(dict.values, parameter_dicts))
            if value is not None
        ]
        self.parameters += parameters
        self.parameter_signatures += _signatures(parameters)
        # Once per buffer object: one registered in two modules is copied back once.
        buffers = [
            value
            for value in chain.from_iterable(map(dict.values, filter(None, buffer_dicts)))
            if value is not None
            and not is_uninitialized(value)
            and id(value) not in self.copied_buffers
        ]
        if buffers:
            self.copied_buffers.update(map(id, buffers))
            with torch.no_grad():  # clones of buffers that require grad must not
                self.buffer_copies += [(buffer, buffer.clone()) for buffer in buffers]

    def parameter_names(self) -> list[str]:
        """Each parameter's full name, in the order of `parameters` (built when needed)."""
        return [
            f"{path}.{name}" if path else name
            for path, parameters in zip(self.paths, self.parameter_dicts, strict=True)
            for name, value in parameters.items()
            if value is not None
        ]


# A parameter as it was: version counter, requires_grad, dtype, shape, device.
_ParameterSignature = tuple[int, bool, torch.dtype, "torch.Size | None", torch.device]
_SIGNATURE = operator.attrgetter("_version", "requires_grad", "dtype", "shape", "device")


def _signatures(parameters: Sequence[torch.Tensor]) -> list[_ParameterSignature]:
    try:  # the common case, in C
        return list(map(_SIGNATURE, parameters))
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
    state = _ModelState()
    modules = index.python_modules
    entries = index.entries
    state.add_modules(modules, [entries[id(module)].path for module in modules])
    return state


def _dicts_unchanged(current: list[dict[str, Any]], originals: list[dict[str, Any]]) -> bool:
    """Whether every dict still holds the very objects its copy holds, under the same names.

    Reassigning a name keeps its place in a dict, so comparing the values in order by
    identity finds any reassignment, and the keys catch additions, removals and renames.
    All of it runs in C: this is one pass over every module of the model.
    """
    return (
        list(map(len, current)) == list(map(len, originals))
        and list(chain.from_iterable(current)) == list(chain.from_iterable(originals))
        and all(
            map(
                operator.is_,
                chain.from_iterable(map(dict.values, current)),
                chain.from_iterable(map(dict.values, originals)),
            )
        )
    )


def _restore_state(state: _ModelState) -> None:
    torch.set_grad_enabled(state.grad_enabled)
    torch.random.set_rng_state(state.cpu_rng)
    if state.cuda_rng is not None:
        torch.cuda.set_rng_state_all(state.cuda_rng)
    random.setstate(state.python_rng)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None and state.numpy_rng is not None:
        numpy_random.set_state(state.numpy_rng)
    if not all(map(operator.is_, map(vars, state.modules), state.attribute_dicts)):
        # `self.__dict__ = {...}` in forward: the module gets its own dict object back.
        for module, attributes in zip(state.modules, state.attribute_dicts, strict=True):
            if vars(module) is not attributes:
                object.__setattr__(module, "__dict__", attributes)
    # A lazy module's first call removes its initialising hooks: that may stay (README).
    initialized_lazy = [
        module for module in state.lazy_modules if "_initialize_hook" not in vars(module)
    ]
    if not _dicts_unchanged(state.watched, state.copies):
        for current, original in zip(state.watched, state.copies, strict=True):
            if not _dicts_unchanged([current], [original]):
                current.clear()
                current.update(original)
    _restore_lists_and_sets(state)
    _warn_about_unwatched(state)
    for module in initialized_lazy:
        for name in ("_initialize_hook", "_load_hook"):
            handle = vars(module).pop(name, None)
            if handle is not None:
                handle.remove()
    changed_in_place: list[str] = []
    now = _signatures(state.parameters)
    if now != state.parameter_signatures:
        for name, parameter, before, after in zip(
            state.parameter_names(),
            state.parameters,
            state.parameter_signatures,
            now,
            strict=True,
        ):
            requires_grad = before[1]
            if parameter.requires_grad is not requires_grad:
                parameter.requires_grad_(requires_grad)
            # `.data = ...` swaps the storage without bumping the version counter.
            if before[0] != after[0] or before[2:] != after[2:]:
                changed_in_place.append(name)
    _restore_buffers(state.buffer_copies)
    if changed_in_place:
        warn_at_caller(
            f"forward changed parameters in place ({', '.join(changed_in_place[:5])}); "
            "pytest-fwdorder puts buffers back but does not copy parameters, so these "
            "keep the values forward gave them"
        )


class _Unwatched(NamedTuple):
    """A container a trace does not copy: where it is, what it is, and its length before."""

    where: str
    what: str
    container: Any
    length: int


_CONTAINERS = (list, dict, set)


def _unwatched_containers(path: str, attributes: dict[str, Any]) -> list[_Unwatched]:
    """Containers below a module's attributes that the watch does not copy: subclasses of
    list and set among the attributes (dicts of any class are copied), and containers inside
    the ones it copies."""
    prefix = f"{path}." if path else ""
    found: list[_Unwatched] = []
    for name, value in attributes.items():
        if not isinstance(value, _CONTAINERS) or name in _MODULE_INTERNALS:
            continue
        if not isinstance(value, dict) and type(value) not in _CONTAINERS:
            found.append(
                _Unwatched(prefix + name, f"a {type(value).__name__} attribute", value, len(value))
            )
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value)
        kind = type(value).__name__
        for key, item in items:
            if isinstance(item, _CONTAINERS):
                where = f"{prefix}{name}[{key!r}]"
                what = f"a {type(item).__name__} inside a {kind} attribute"
                found.append(_Unwatched(where, what, item, len(item)))
    return found


# torch's own bookkeeping in a module's __dict__: parameters, buffers, children and hooks.
_MODULE_INTERNALS = frozenset(vars(nn.Module()))


def _warn_about_unwatched(state: _ModelState) -> None:
    """Name what forward changed where the trace cannot put it back."""
    changed = [entry for entry in state.unwatched if len(entry.container) != entry.length]
    if changed:
        warn_at_caller(
            "forward changed what a trace cannot put back: "
            + ", ".join(f"{entry.where} ({entry.what})" for entry in changed[:5])
            + ("" if len(changed) <= 5 else f" (+{len(changed) - 5} more)")
            + "; a trace copies a module's own dicts, lists and sets one level deep, so "
            "these keep what forward put in them"
        )


def _restore_lists_and_sets(state: _ModelState) -> None:
    """Give every watched list and set its own contents back, in place."""
    lists, list_copies = state.watched_lists, state.list_copies
    if list(map(len, lists)) != list(map(len, list_copies)) or not all(
        map(operator.is_, chain.from_iterable(lists), chain.from_iterable(list_copies))
    ):
        for current, original in zip(lists, list_copies, strict=True):
            current[:] = original
    if state.watched_sets != state.set_copies:
        for current_set, original_set in zip(state.watched_sets, state.set_copies, strict=True):
            if current_set != original_set:
                current_set.clear()
                current_set.update(original_set)


def _restore_buffers(buffer_copies: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Copy every buffer's values back.

    Always: BatchNorm's kernel updates running statistics in place without bumping the
    version counter, so "unchanged" cannot be told from the version. One no_grad (and, only
    if needed, inference_mode) for all buffers, and one copy for all of them where torch has
    it: a context or a copy per buffer cost more than the copying itself.
    """
    if not buffer_copies:
        return
    targets: list[torch.Tensor] = []
    sources: list[torch.Tensor] = []
    inference_buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
    with torch.no_grad():
        for buffer, copy in buffer_copies:
            if buffer.is_inference():
                inference_buffers.append((buffer, copy))
            elif _TENSOR_METADATA(buffer) != _TENSOR_METADATA(copy):
                buffer.data = copy  # forward replaced its `.data`: put the original back
            elif type(buffer) is torch.Tensor:
                targets.append(buffer)
                sources.append(copy)
            else:  # a subclass (DTensor) may have no rule for the multi-tensor copy
                buffer.copy_(copy)
        _copy_all(targets, sources)
    if inference_buffers:
        with torch.inference_mode():
            _copy_all(*map(list, zip(*inference_buffers, strict=True)))


_TENSOR_METADATA = operator.attrgetter("shape", "dtype", "device")
# torch.optim's multi-tensor copy; a loop of copy_ where a torch release lacks it.
_FOREACH_COPY: Callable[[list[torch.Tensor], list[torch.Tensor]], object] | None = getattr(
    torch, "_foreach_copy_", None
)


def _copy_all(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    if not targets:
        return
    if _FOREACH_COPY is not None:
        _FOREACH_COPY(targets, sources)
        return
    for target, source in zip(targets, sources, strict=True):
        target.copy_(source)


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
# In `module(...)`, `inner`'s caller is `_call_impl`, called by `_wrapped_call_impl(self,
# *args, **kwargs)`: a frame of three locals, whose dict Python builds faster than `inner`'s.
CALL_FRAME_CODE: CodeType = nn.Module._call_impl.__code__
WRAPPED_CALL_FRAME_CODE: CodeType | None = getattr(
    getattr(nn.Module, "_wrapped_call_impl", None), "__code__", None
)


class CallRecord(NamedTuple):
    """What the pre-hook keeps of one call until `Recorder.finish` builds its `Call`.

    A tuple, made in C at every call; what is known only when the call ends (its output,
    whether it raised) goes in the recorder's `outputs`, at the record's number.
    """

    module: nn.Module
    entry: ModuleEntry
    nth: int
    depth: int
    parent: int  # the parent's record number, -1 for an outermost call
    args: list[object]
    kwargs: tuple[tuple[str, Any], ...] | None  # None when the frame did not show them
    number: int


# What `outputs` holds for a call that has not ended, and for one whose forward raised.
_NOT_FINISHED = object()
_RAISED = object()


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
        # Per record number: the raw output once the call ended, _RAISED, or _NOT_FINISHED.
        self.outputs: list[object] = []
        # Keyword arguments the pre-hook could not read from the frame, by record number.
        self.late_kwargs: dict[int, tuple[tuple[str, Any], ...]] = {}
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
        # The ids of the modules this recording claimed from other threads' traces.
        self.claimed: list[int] = []

    @property
    def calls(self) -> list[Call]:
        self.finish()
        return self.trace.calls

    @property
    def captured(self) -> list[tuple[Call, list[torch.Tensor]]]:
        """Each finished call with copies of its output tensors (with `capture_outputs`)."""
        calls = self.calls
        return [(calls[number], copies) for number, copies in self.captured_records]

    def forget_calls_after(self, kept: int, call_counts: dict[int, int]) -> None:
        """Drop the records after the first `kept` and go back to these call counts.

        For calls that are not part of the forward: backward's recomputation.
        """
        del self.records[kept:]
        del self.outputs[kept:]
        for number in [number for number in self.late_kwargs if number >= kept]:
            del self.late_kwargs[number]
        self.open_calls.clear()
        self.call_counts.clear()
        self.call_counts.update(call_counts)

    def hooks(self) -> tuple[Callable[..., None], Callable[..., None]]:
        """The global pre-hook and post-hook: closures over what they touch.

        They run once per module call, so everything they use is a local of this function
        rather than an attribute looked up on `self` at every call.
        """
        thread_id = self.thread_id
        get_ident = threading.get_ident
        get_frame = sys._getframe
        keyword_frame_code = self.keyword_frame_code
        call_frame_code = CALL_FRAME_CODE
        wrapped_call_frame_code = WRAPPED_CALL_FRAME_CODE
        entries = self.entries
        get_entry = entries.get
        call_counts = self.call_counts
        count_of = call_counts.get
        open_calls = self.open_calls
        records = self.records
        append_record = records.append
        outputs = self.outputs
        append_output = outputs.append
        late_kwargs = self.late_kwargs
        open_call = open_calls.append
        close_call = open_calls.pop
        new_record = tuple.__new__
        record_class = CallRecord
        not_finished = _NOT_FINISHED
        raised = _RAISED
        tensor_type = torch.Tensor
        strided = torch.strided
        tensor_metadata = _TENSOR_METADATA
        enter_unregistered = self._enter_unregistered
        capture_outputs = self.capture_outputs
        captured_records = self.captured_records

        def before_forward(module: nn.Module, args: tuple[Any, ...]) -> None:
            if get_ident() != thread_id:
                return
            module_id = id(module)
            entry = get_entry(module_id)
            if entry is None:
                if not open_calls:
                    return  # a module outside the model, called outside the model
                entry = enter_unregistered(module)
            nth = count_of(module_id, 0) + 1
            call_counts[module_id] = nth
            kwargs = None
            frame: FrameType = get_frame(1)
            if frame.f_code is keyword_frame_code:
                caller = frame.f_back
                outer = caller.f_back if caller is not None else None
                if (
                    outer is not None
                    and outer.f_code is wrapped_call_frame_code
                    and caller.f_code is call_frame_code  # type: ignore[union-attr]
                ):
                    keyword_arguments = outer.f_locals["kwargs"]
                else:  # `module._call_impl(...)` called directly
                    keyword_arguments = frame.f_locals.get("kwargs")
                kwargs = describe_keyword_arguments(keyword_arguments) if keyword_arguments else ()
            try:  # raw_value, inlined for the common case: a plain strided tensor
                raw_args = [
                    tensor_metadata(value)
                    if type(value) is tensor_type and value.layout is strided
                    else raw_value(value)
                    for value in args
                ]
            except RuntimeError:  # a nested tensor is strided but has no sizes to read
                raw_args = [raw_value(value) for value in args]
            depth = len(open_calls)
            # CallRecord(...) without its Python __new__: the values in its fields' order.
            record = new_record(
                record_class,
                (
                    module,
                    entry,
                    nth,
                    depth,
                    open_calls[-1].number if depth else -1,
                    raw_args,
                    kwargs,
                    len(records),
                ),
            )
            append_record(record)
            append_output(not_finished)
            open_call(record)

        def after_forward(module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
            # torch calls this with (kwargs, output) normally, and with (output,) alone when
            # forward raised (the always_call path ignores with_kwargs).
            if get_ident() != thread_id:
                return
            if not open_calls or open_calls[-1].module is not module:
                return
            record = close_call()
            number = record.number
            if len(rest) != 2:
                outputs[number] = raised
                return
            if record.kwargs is None and number not in late_kwargs:
                # neither the frame nor a per-module hook saw them
                late_kwargs[number] = describe_keyword_arguments(rest[0]) if rest[0] else ()
            output = rest[1]
            try:  # raw_value, inlined for the common case
                outputs[number] = (
                    tensor_metadata(output)
                    if type(output) is tensor_type and output.layout is strided
                    else raw_value(output)
                )
            except RuntimeError:  # a nested tensor is strided but has no sizes to read
                outputs[number] = raw_value(output)
            if capture_outputs:
                copies = [tensor.detach().clone() for tensor in tensors_of(output)]
                captured_records.append((number, copies))

        return before_forward, after_forward

    def before_forward_with_keywords(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """The fallback's per-module pre-hook: runs right after the global pre-hook."""
        open_calls = self.open_calls
        if open_calls and open_calls[-1].module is module and open_calls[-1].kwargs is None:
            number = open_calls[-1].number
            if number not in self.late_kwargs:
                self.late_kwargs[number] = describe_keyword_arguments(kwargs) if kwargs else ()

    def finish(self) -> None:
        """Turn the raw records made so far into the trace's `Call`s (once each)."""
        calls = self.trace.calls
        outputs = self.outputs
        late_kwargs = self.late_kwargs
        new_call = object.__new__
        for record in self.records[len(calls) :]:
            entry = record.entry
            parent = calls[record.parent] if record.parent >= 0 else None
            output = outputs[record.number]
            kwargs = record.kwargs
            if kwargs is None:
                kwargs = late_kwargs.get(record.number, ())
            # What Call(...) does, without parsing fifteen keyword arguments per call.
            call = new_call(Call)
            call.path = entry.path
            call.module_type = entry.module_type
            call.nth = record.nth
            call.depth = record.depth
            call.parent = parent
            call.registered = entry.registered
            call.index = len(calls)
            call.args = tuple([finish_value(value) for value in record.args])
            call.kwargs = kwargs
            call.output = (
                None if output is _NOT_FINISHED or output is _RAISED else finish_value(output)
            )
            call.raised = output is _RAISED
            call.frozen = entry.facts.tensors.frozen
            call.scripted = entry.scripted
            call.facts = entry.facts
            call.training = entry.training
            call.children = []
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
        if entry.scripted:
            return entry  # TorchScript owns its state, as for a registered scripted module
        if self.state is not None:
            self.state.add_modules([module], [path])
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
    buffers, submodules, plain attributes and the dicts, lists and sets modules hold (their
    hooks too), training and requires_grad flags, grad mode and the random states (torch,
    Python, numpy) are put back, also when the block raises. An exception from the block
    gets a note naming the calls recorded. Raises `RuntimeError` if another thread is
    tracing a module of this model right now.
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
        mode="train" if root.training else "eval",
        modules={entry.path: (entry.module_type, entry.facts) for entry in index.entries.values()},
        tied=tensors.tied,
        totals=tensors.totals,
    )
    claimed = _claim_modules(index)
    try:
        state = _capture_state(index) if restore_state else None
        stand_ins = StandIns(target) if target is not None else None
        recorder = Recorder(
            index, trace, capture_outputs=capture_outputs, state=state, stand_ins=stand_ins
        )
        recorder.claimed = claimed
    except BaseException:
        _release_modules(claimed)
        raise
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
            if target is not None and target.type == "meta":
                stack.enter_context(meta_kernel_cache())
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
        _release_modules(recorder.claimed)
        recorder.finish()


# Each module under a trace in progress, by id, and the thread tracing it.
_TRACING_THREADS: dict[int, int] = {}
_TRACING_LOCK = threading.Lock()


def _claim_modules(index: ModelIndex) -> list[int]:
    """Mark the model's modules as traced by this thread; refuse a model another one traces.

    A trace puts buffers and the process-wide random state back when it ends, so two at
    once would undo each other's changes. Returns the ids this trace claimed (a nested
    trace in the same thread claims none of its outer trace's).
    """
    thread_id = threading.get_ident()
    module_ids = list(map(id, index.python_modules))
    with _TRACING_LOCK:
        for module in index.python_modules:
            owner = _TRACING_THREADS.get(id(module), thread_id)
            if owner != thread_id:
                path = index.entries[id(module)].path or "the root"
                raise RuntimeError(
                    f"cannot trace {index.entries[id(index.modules[0])].module_type!r}: its "
                    f"module {path!r} is being traced by another thread (thread {owner}) "
                    "right now, and each trace puts the model and the random state back when "
                    "it ends, undoing the other's changes: trace a model from one thread at a "
                    "time, or give each thread its own copy (copy.deepcopy(model))"
                )
        claimed = [module_id for module_id in module_ids if module_id not in _TRACING_THREADS]
        _TRACING_THREADS.update(dict.fromkeys(claimed, thread_id))
    return claimed


def _release_modules(claimed: list[int]) -> None:
    with _TRACING_LOCK:
        for module_id in claimed:
            _TRACING_THREADS.pop(module_id, None)
