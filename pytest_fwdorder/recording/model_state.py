"""The model's state: capture it before a trace, compare it after, and put it back.

Everything the "no state left in the user's model" guarantee rests on is here: each
module's `__dict__`, parameter and buffer dicts, the plain dicts, lists and sets it holds,
parameter flags, buffer values, grad mode and the random states. What cannot be put back
(a container inside a container, a parameter changed in place) is named in a warning.
"""

from __future__ import annotations

import operator
import random
import sys
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from pytest_fwdorder.errors import warn_at_caller
from pytest_fwdorder.facets.module_facts import buffers_of, is_uninitialized, parameters_of
from pytest_fwdorder.recording.direct_forwards import is_watching_forward
from pytest_fwdorder.recording.model_index import ModelIndex


class ModelState:
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
        # What a lazy module's first call initialized (taken right after torch's initializing
        # hook ran): it stays, while what forward did after it is put back.
        self.initialized_lazy: list[_Initialized] = []
        # Every parameter, flat, with its signature: compared as two lists in one C
        # comparison when the forward is over, parameter by parameter only if they differ.
        self.parameters: list[torch.Tensor] = []
        self.parameter_signatures: list[_RawSignature] = []
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

    def keep_initialization(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """A forward pre-hook that runs after a lazy module's initializing one: what the
        initialization set (attributes such as `in_channels`, the materialized buffers'
        values) is taken as the state to put back, as a plain first forward leaves it."""
        if "_initialize_hook" in vars(module) or any(
            kept.module is module for kept in self.initialized_lazy
        ):
            return
        attributes = _own_attributes(module)
        materialized = [
            value
            for value in buffers_of(module).values()
            if value is not None and id(value) not in self.copied_buffers
        ]
        self.copied_buffers.update(map(id, materialized))
        with torch.no_grad():
            buffers = [(buffer, buffer.clone()) for buffer in materialized]
        self.initialized_lazy.append(_Initialized(module, attributes, buffers))

    def parameter_names(self) -> list[str]:
        """Each parameter's full name, in the order of `parameters` (built when needed)."""
        return [
            f"{path}.{name}" if path else name
            for path, parameters in zip(self.paths, self.parameter_dicts, strict=True)
            for name, value in parameters.items()
            if value is not None
        ]


class ParameterSignature(NamedTuple):
    """A parameter as it was: what forward can change in it while it stays the same object."""

    version: int  # -1 for an inference tensor, which keeps no version counter
    requires_grad: bool
    dtype: torch.dtype
    shape: torch.Size | None  # None for a lazy parameter, which has no shape yet
    device: torch.device

    def layout(self) -> tuple[torch.dtype, torch.Size | None, torch.device]:
        return (self.dtype, self.shape, self.device)


# ParameterSignature's fields, read in C: captured as plain tuples, named when one differs.
_RawSignature = tuple[int, bool, torch.dtype, "torch.Size | None", torch.device]
_SIGNATURE = operator.attrgetter("_version", "requires_grad", "dtype", "shape", "device")


def _signatures(parameters: Sequence[torch.Tensor]) -> list[_RawSignature]:
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


def capture_state(index: ModelIndex) -> ModelState:
    """Capture the state of the model's Python modules and of the process around it."""
    state = ModelState()
    modules = index.python_modules
    entries = index.entries
    state.add_modules(modules, [entries[id(module)].path for module in modules])
    return state


def dicts_unchanged(current: list[dict[str, Any]], originals: list[dict[str, Any]]) -> bool:
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


def restore_state(state: ModelState) -> None:
    """Put back everything `state` captured; warn about what cannot be put back."""
    _restore_process_state(state)
    if not all(map(operator.is_, map(vars, state.modules), state.attribute_dicts)):
        # `self.__dict__ = {...}` in forward: the module gets its own dict object back.
        for module, attributes in zip(state.modules, state.attribute_dicts, strict=True):
            if vars(module) is not attributes:
                object.__setattr__(module, "__dict__", attributes)
    # A lazy module's first call removes its initialising hooks: that may stay (README).
    initialized_lazy = [
        module for module in state.lazy_modules if "_initialize_hook" not in vars(module)
    ]
    # A lazy module met only at its first call (unregistered) got no pre-hook to see its
    # initialization: its attributes as forward left them stay, as after a plain forward.
    kept = {id(initialized.module) for initialized in state.initialized_lazy}
    late = [
        _Initialized(module, _own_attributes(module), [])
        for module in initialized_lazy
        if id(module) not in kept
    ]
    if not dicts_unchanged(state.watched, state.copies):
        for current, original in zip(state.watched, state.copies, strict=True):
            if not dicts_unchanged([current], [original]):
                current.clear()
                current.update(original)
    _restore_lists_and_sets(state)
    for initialized in (*state.initialized_lazy, *late):
        vars(initialized.module).update(initialized.attributes)
    _warn_about_unwatched(state)
    for module in initialized_lazy:
        for name in ("_initialize_hook", "_load_hook"):
            handle = vars(module).pop(name, None)
            if handle is not None:
                handle.remove()
    changed_in_place = _restore_parameter_flags(state)
    _restore_buffers(
        [
            *state.buffer_copies,
            *chain.from_iterable(kept.buffers for kept in state.initialized_lazy),
        ]
    )
    if changed_in_place:
        warn_at_caller(
            f"forward changed parameters in place ({', '.join(changed_in_place[:5])}); "
            "pytest-fwdorder puts buffers back but does not copy parameters, so these "
            "keep the values forward gave them"
        )


def _restore_process_state(state: ModelState) -> None:
    """Put grad mode and the random states (torch, CUDA, Python, numpy) back."""
    torch.set_grad_enabled(state.grad_enabled)
    torch.random.set_rng_state(state.cpu_rng)
    if state.cuda_rng is not None:
        torch.cuda.set_rng_state_all(state.cuda_rng)
    random.setstate(state.python_rng)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None and state.numpy_rng is not None:
        numpy_random.set_state(state.numpy_rng)


def _restore_parameter_flags(state: ModelState) -> list[str]:
    """Put back each parameter's requires_grad; name the parameters changed in place."""
    changed_in_place: list[str] = []
    now = _signatures(state.parameters)
    if now == state.parameter_signatures:
        return changed_in_place
    for name, parameter, raw_before, raw_after in zip(
        state.parameter_names(), state.parameters, state.parameter_signatures, now, strict=True
    ):
        before, after = ParameterSignature(*raw_before), ParameterSignature(*raw_after)
        if parameter.requires_grad is not before.requires_grad:
            parameter.requires_grad_(before.requires_grad)
        # `.data = ...` swaps the storage without bumping the version counter.
        if before.version != after.version or before.layout() != after.layout():
            changed_in_place.append(name)
    return changed_in_place


def _own_attributes(module: nn.Module) -> dict[str, Any]:
    """A module's attributes that are not torch's bookkeeping (in_channels, eps, ...).

    Nor the `forward` the trace's watch installed (direct_forwards.py): it is the trace's,
    and must not be put back once the watch has taken it away.
    """
    return {
        name: value
        for name, value in vars(module).items()
        if name not in _MODULE_INTERNALS and not is_watching_forward(value)
    }


class _Initialized(NamedTuple):
    """A lazy module right after its initialization: its own attributes and new buffers."""

    module: nn.Module
    attributes: dict[str, Any]
    buffers: list[tuple[torch.Tensor, torch.Tensor]]


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


def _warn_about_unwatched(state: ModelState) -> None:
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


def _restore_lists_and_sets(state: ModelState) -> None:
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
