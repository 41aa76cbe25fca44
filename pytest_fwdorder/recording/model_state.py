"""The model's state: capture it before a trace, compare it after, and put it back.

Everything the "no state left in the user's model" guarantee rests on is here: each
module's `__dict__`, parameter and buffer dicts, the plain dicts, lists and sets it holds,
parameter flags, buffer values, grad mode and the random states. What cannot be put back
(a container inside a container, a parameter changed in place) is named in a warning.
"""

from __future__ import annotations

import functools
import operator
import random
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, compress, filterfalse
from typing import Any, NamedTuple, cast

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from pytest_fwdorder.errors import warn_at_caller
from pytest_fwdorder.recording.attribute_layout import (
    CONTAINERS,
    MODULE_INTERNALS,
    KeptLayout,
    attribute_layout,
    other_dicts,
)
from pytest_fwdorder.recording.buffer_values import BufferValues
from pytest_fwdorder.recording.direct_forwards import is_watching_forward
from pytest_fwdorder.recording.index_cache import TENSOR_SIGNATURE, ModelReading
from pytest_fwdorder.recording.model_index import ModelIndex
from pytest_fwdorder.recording.module_facts import buffers_of, is_uninitialized, parameters_of
from pytest_fwdorder.recording.numpy_random import restore_numpy_random, save_numpy_random


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
        # What each __dict__ held, flat, module after module: its length, names and values.
        # Three lists rather than a copy per module: the same comparison, without making
        # (and freeing) a dict for every module of the model.
        self.attribute_lengths: list[int] = []
        self.attribute_names: list[str] = []
        self.attribute_values: list[Any] = []
        # Plain attributes too: a forward that reassigns `self.scale = self.scale.to(device)`
        # would otherwise leave a tensor of the trace's device in the model.
        self.watched: list[dict[str, Any]] = []
        self.copies: list[dict[str, Any]] = []
        # Every dict watched, empty ones too (most: a module's hook dicts), and how many
        # entries the watched ones held: once those are put back, every dict together holds
        # that many again exactly when the empty ones are empty again. No list of the empty
        # ones is made, and one C pass (the sum of lengths) checks them all.
        self.every_dict: list[dict[str, Any]] = []
        self.watched_entries = 0
        # Lists and sets a module holds (`self.seen.append(...)`), with copies, compared the
        # same way; lazy modules with their first-call hooks, which may stay.
        self.watched_lists: list[list[Any]] = []
        self.list_copies: list[list[Any]] = []
        self.empty_lists: list[list[Any]] = []
        self.watched_sets: list[set[Any]] = []
        self.set_copies: list[set[Any]] = []
        self.empty_sets: list[set[Any]] = []
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
        # Copies of buffers' values: BatchNorm updates running statistics in place.
        self.buffer_values = BufferValues()
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
        self.numpy_rng = save_numpy_random()

    def add_modules(
        self,
        modules: Sequence[nn.Module],
        paths: Sequence[str],
        kept_layout: KeptLayout | None = None,
        reading: ModelReading | None = None,
    ) -> None:
        """Capture these modules' own state (not their children's).

        Every step is a `map`, `filter` or `compress` over all the modules at once, so that
        the work per module runs in C: a trace watches every module of the model. The plan
        of their attributes is looked for in `kept_layout` first, and kept there. `reading`
        is what checking the model's kept index read of these very modules just before:
        their dicts, attributes and tensors are taken from it rather than read again.
        """
        self.modules += modules
        self.paths += paths
        attribute_dicts, parameter_dicts, buffer_dicts, names, values, module_types = _read_modules(
            modules, reading
        )
        layout = attribute_layout(len(modules), names, list(map(type, values)), kept_layout)
        self._watch_lists_and_sets(
            list(compress(values, layout.list_places)) if layout.list_places else [],
            list(compress(values, layout.set_places)) if layout.set_places else [],
        )
        lazy_types = {kind for kind in module_types if issubclass(kind, LazyModuleMixin)}
        if lazy_types:
            self.lazy_modules += compress(modules, map(lazy_types.__contains__, map(type, modules)))
        if layout.own_container_places:
            self.unwatched += _unwatched_containers(
                attribute_dicts, paths, names, values, layout.own_container_places
            )
        # Taken as they are at the first call (the model's modules, millions of attributes
        # in a big model), not copied: these lists are only ever replaced, never changed.
        self.attribute_dicts = _joined(self.attribute_dicts, attribute_dicts)
        self.attribute_lengths += map(len, attribute_dicts)
        self.attribute_names = _joined(self.attribute_names, names)
        self.attribute_values = _joined(self.attribute_values, values)
        self.parameter_dicts += parameter_dicts
        self._watch_dicts(
            [
                *parameter_dicts,
                *buffer_dicts,
                *other_dicts(
                    layout,
                    attribute_dicts,
                    values,
                    parameter_dicts,
                    buffer_dicts,
                    by_name=reading is not None,
                ),
            ]
        )
        self._add_tensors(parameter_dicts, buffer_dicts, reading)

    def _add_tensors(
        self,
        parameter_dicts: list[dict[str, Any]],
        buffer_dicts: list[dict[str, Any]],
        reading: ModelReading | None,
    ) -> None:
        """Keep the parameters with their signatures, and copy the buffers' values."""
        if reading is None:
            parameters = list(
                filter(_IS_NOT_NONE, chain.from_iterable(map(dict.values, parameter_dicts)))
            )
            self.parameters += parameters
            self.parameter_signatures += _signatures(parameters)
            self._copy_buffers(chain.from_iterable(map(dict.values, filter(None, buffer_dicts))))
        else:  # the check read every tensor's signature (parameters first) a moment ago
            count = reading.parameter_count
            self.parameters += reading.tensors[:count]
            self.parameter_signatures += reading.tensor_signatures[:count]  # type: ignore[arg-type]
            self._copy_buffers(reading.tensors[count:])

    def _watch_dicts(self, dicts: list[dict[str, Any]]) -> None:
        """Copy the dicts that hold something; of an empty one, its emptiness is the copy."""
        # A dict's truth is whether it holds something: the filter is one pass in C.
        watched = list(filter(None, dicts))
        self.watched += watched
        self.copies += map(dict.copy, watched)
        self.every_dict = _joined(self.every_dict, dicts)
        self.watched_entries += sum(map(len, watched))

    def _watch_lists_and_sets(self, lists: list[list[Any]], sets: list[set[Any]]) -> None:
        """As `_watch_dicts`, for the plain lists and sets the modules hold."""
        watched_lists = list(filter(None, lists))
        self.watched_lists += watched_lists
        self.list_copies += map(list.copy, watched_lists)
        self.empty_lists += filterfalse(None, lists)
        watched_sets = list(filter(None, sets))
        self.watched_sets += watched_sets
        self.set_copies += map(set.copy, watched_sets)
        self.empty_sets += filterfalse(None, sets)

    def _copy_buffers(self, values: Iterable[torch.Tensor | None]) -> None:
        """Copy each buffer's values, once per buffer object (one registered in two modules
        is copied back once); a lazy module's uninitialized buffer has none yet."""
        buffers = cast("list[torch.Tensor]", list(filter(_IS_NOT_NONE, values)))
        if not buffers:
            return
        buffer_ids = set(map(id, buffers))
        if (
            len(buffer_ids) != len(buffers)
            or not self.copied_buffers.isdisjoint(buffer_ids)
            or any(map(_is_uninitialized_type, set(map(type, buffers))))
        ):
            unique = {id(buffer): buffer for buffer in buffers if not is_uninitialized(buffer)}
            buffers = [buffer for key, buffer in unique.items() if key not in self.copied_buffers]
        self.copied_buffers.update(map(id, buffers))
        self.buffer_values.add(buffers)

    def keep_materialized(self, module: nn.Module, args: tuple[Any, ...]) -> None:
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


def _joined(held: list[Any], more: list[Any]) -> list[Any]:
    """`held` followed by `more`: `more` itself when nothing is held yet (no copy made).

    For lists a capture only replaces, never changes in place, as `more` may be shared
    (a kept layout holds the attribute names it was planned from).
    """
    return more if not held else held + more


class _ModulesRead(NamedTuple):
    """What a capture reads of its modules: their dicts, and their attributes flat."""

    attribute_dicts: list[dict[str, Any]]
    parameter_dicts: list[dict[str, Any]]
    buffer_dicts: list[dict[str, Any]]
    names: list[str]
    values: list[Any]
    module_types: set[type]


def _read_modules(modules: Sequence[nn.Module], reading: ModelReading | None) -> _ModulesRead:
    """Read the modules' dicts and attributes, or take them from `reading` (the same)."""
    if reading is not None:
        return _ModulesRead(
            reading.attribute_dicts,
            reading.parameter_dicts,
            reading.buffer_dicts,
            reading.attribute_names,
            reading.attribute_values,
            set(reading.types),
        )
    attribute_dicts = list(map(vars, modules))
    return _ModulesRead(
        attribute_dicts,
        list(map(parameters_of, modules)),
        list(map(buffers_of, modules)),
        list(chain.from_iterable(attribute_dicts)),
        list(chain.from_iterable(map(dict.values, attribute_dicts))),
        set(map(type, modules)),
    )


class ParameterSignature(NamedTuple):
    """A parameter as it was: what forward can change in it while it stays the same object."""

    version: int  # -1 for an inference tensor, which keeps no version counter
    requires_grad: bool
    dtype: torch.dtype
    shape: torch.Size | None  # None for a lazy parameter, which has no shape yet
    device: torch.device

    def layout(self) -> tuple[torch.dtype, torch.Size | None, torch.device]:
        return (self.dtype, self.shape, self.device)


_IS_NOT_NONE = functools.partial(operator.is_not, None)
# ParameterSignature's fields, read in C: captured as plain tuples, named when one differs.
_RawSignature = tuple[int, bool, torch.dtype, "torch.Size | None", torch.device]
_SIGNATURE = TENSOR_SIGNATURE


def _signatures(parameters: Sequence[torch.Tensor]) -> list[_RawSignature]:
    try:  # the common case, in C
        return list(map(_SIGNATURE, parameters))
    except RuntimeError:  # a lazy parameter (no shape) or an inference tensor (no version)
        return [
            (_version(value), value.requires_grad, value.dtype, _shape(value), value.device)
            for value in parameters
        ]


def _is_uninitialized_type(tensor_type: type) -> bool:
    """`is_uninitialized` asked once per type: a model's buffers are of a type or two."""
    return issubclass(tensor_type, (nn.UninitializedParameter, nn.UninitializedBuffer))


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
    reading, index.reading = index.reading, None  # read right before: taken once
    state.add_modules(index.python_modules, index.python_paths, index.kept_layout, reading)
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
    _restore_attributes(state)
    if not dicts_unchanged(state.watched, state.copies):
        for current, original in zip(state.watched, state.copies, strict=True):
            if not dicts_unchanged([current], [original]):
                current.clear()
                current.update(original)
    if sum(map(len, state.every_dict)) != state.watched_entries:  # an empty one is not
        held = set(map(id, state.watched))
        _empty_again([found for found in state.every_dict if id(found) not in held])
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
    for kept_lazy in state.initialized_lazy:
        state.buffer_values.add_copies(kept_lazy.buffers)
    state.buffer_values.put_back()
    if changed_in_place:
        warn_at_caller(
            f"forward changed parameters in place ({', '.join(changed_in_place[:5])}); "
            "pytest-fwdorder puts buffers back but does not copy parameters, so these "
            "keep the values forward gave them"
        )


def _restore_attributes(state: ModelState) -> None:
    """Give every module's `__dict__` its names and values back, in place, as captured."""
    attribute_dicts, lengths = state.attribute_dicts, state.attribute_lengths
    names, values = state.attribute_names, state.attribute_values
    if (
        list(map(len, attribute_dicts)) == lengths
        and list(chain.from_iterable(attribute_dicts)) == names
        and all(map(operator.is_, chain.from_iterable(map(dict.values, attribute_dicts)), values))
    ):
        return
    start = 0
    for attributes, length in zip(attribute_dicts, lengths, strict=True):
        end = start + length
        if (
            len(attributes) != length
            or list(attributes) != names[start:end]
            or not all(map(operator.is_, attributes.values(), values[start:end]))
        ):
            attributes.clear()
            attributes.update(zip(names[start:end], values[start:end], strict=True))
        start = end


def _restore_process_state(state: ModelState) -> None:
    """Put grad mode and the random states (torch, CUDA, Python, numpy) back."""
    torch.set_grad_enabled(state.grad_enabled)
    torch.random.set_rng_state(state.cpu_rng)
    if state.cuda_rng is not None:
        torch.cuda.set_rng_state_all(state.cuda_rng)
    random.setstate(state.python_rng)
    restore_numpy_random(state.numpy_rng)


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
        if name not in MODULE_INTERNALS and not is_watching_forward(value)
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


def _unwatched_containers(
    attribute_dicts: list[dict[str, Any]],
    paths: Sequence[str],
    names: list[str],
    values: list[Any],
    places: list[int],
) -> list[_Unwatched]:
    """Containers below the modules' attributes that the watch does not copy: subclasses of
    list and set among the attributes (dicts of any class are copied), and containers inside
    the ones it copies. Attributes are given flat, module after module, with their names;
    `places` are those of the containers under the user's own names (not torch's hook dicts
    or `_modules`, which are not looked into)."""
    ends = list(accumulate(map(len, attribute_dicts)))
    found: list[_Unwatched] = []
    for position in places:
        path = paths[bisect_right(ends, position)]
        found += _unwatched_in(f"{path}." if path else "", names[position], values[position])
    return found


def _unwatched_in(prefix: str, name: str, value: Any) -> list[_Unwatched]:
    """What the watch does not copy of one container attribute (see above)."""
    if not isinstance(value, dict) and type(value) not in CONTAINERS:
        return [_Unwatched(prefix + name, f"a {type(value).__name__} attribute", value, len(value))]
    items = value.items() if isinstance(value, dict) else enumerate(value)
    kind = type(value).__name__
    return [
        _Unwatched(
            f"{prefix}{name}[{key!r}]",
            f"a {type(item).__name__} inside a {kind} attribute",
            item,
            len(item),
        )
        for key, item in items
        if isinstance(item, CONTAINERS)
    ]


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


def _empty_again(containers: Sequence[dict[Any, Any] | list[Any] | set[Any]]) -> None:
    """Empty each container that was empty when the state was captured."""
    if any(containers):  # a container's truth is whether it holds something
        for container in containers:
            if container:
                container.clear()


def _restore_lists_and_sets(state: ModelState) -> None:
    """Give every watched list and set its own contents back, in place."""
    _empty_again(state.empty_lists)
    _empty_again(state.empty_sets)
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
