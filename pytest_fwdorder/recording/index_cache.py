"""A model's index kept across its traces, while nothing the index was made from changed.

One model object is often traced many times in a session (parametrized inputs, a fixture
shared by a module's tests, the benchmarks). Walking it again costs about 4 us per module;
checking that nothing the walk read has changed costs a fraction of that, as flat `map`s in
C. What is checked, module by module (`ModelShape`):

- the tree: each module's children, by name and identity;
- each module's class, its class's `forward` and settings plan, its attributes' names and
  the very values they hold (settings, `training`), its non-persistent buffer names;
- each module's parameters and buffers: names, identity, type, dtype, shape, requires_grad
  and version counter (so a change in place is seen too, though no fact reads values);
- that no plugin adds module facts (they can depend on anything).

Modules and tensors are held by weak references: a kept index never keeps a model alive.
Other attributes are compared by identity: values that can refer to nothing else (numbers,
strings, tuples of them) are held, others by weak reference. A model with TorchScript
modules, lazy or inference tensors, an attribute that is neither (a list, a dict), or a
module whose facts are not remembered (an unhashable setting, an `extra_repr` read every
time) is walked every time. A model is kept from its
second trace on: one traced once pays a weak reference, not the shape.
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from typing import Any, Generic, NamedTuple, TypeVar

import torch
from torch import nn

from pytest_fwdorder.hookspecs import module_facts_hooks_exist
from pytest_fwdorder.recording.attribute_layout import MODULE_INTERNALS
from pytest_fwdorder.recording.bounded_cache import BoundedCache
from pytest_fwdorder.recording.module_facts import is_uninitialized, remembered_facts
from pytest_fwdorder.recording.module_settings import SETTINGS_PLANS, SettingsPlan

__all__ = ["TENSOR_SIGNATURE", "KeptIndexes", "ModelReading", "ModelShape", "model_shape"]

IndexT = TypeVar("IndexT")

_CALL: Callable[[Callable[[], Any]], Any] = operator.call  # a weak reference's target
_FORWARD = operator.attrgetter("forward")
_IS_NOT_NONE = functools.partial(operator.is_not, None)
# A tensor's version, requires_grad, dtype, shape and device, read in C: what the index is
# checked against, and the parameter signature the state capture compares after forward.
TENSOR_SIGNATURE = operator.attrgetter("_version", "requires_grad", "dtype", "shape", "device")
# A module's own dicts and set, read from its __dict__ (as nn.Module's methods read them).
_CHILDREN = operator.itemgetter("_modules")
_PARAMETERS = operator.itemgetter("_parameters")
_BUFFERS = operator.itemgetter("_buffers")
_NON_PERSISTENT = operator.itemgetter("_non_persistent_buffers_set")


@dataclass(slots=True)
class ModelShape:
    """What a model's index was made from: flat lists over its modules, in index order.

    Children and tensors are positions: into the modules and into the tensors, where the
    position one past the last stands for a None child, parameter or buffer.
    """

    modules: list[weakref.ref[nn.Module]]
    types: list[type]
    forwards: list[object]
    plans: list[SettingsPlan | None]
    attribute_counts: list[int]
    attribute_names: list[str]
    own_places: bytes  # the attributes that are not torch's dicts and sets
    own_values: list[object]  # those attributes' values; None where held weakly
    weak_places: list[int]  # among own_values
    weak_values: list[weakref.ref[Any]]
    child_counts: list[int]
    child_names: list[str]
    child_places: Callable[[list[Any]], Sequence[Any]]  # `_places`' getter
    tensors: list[weakref.ref[torch.Tensor]]
    tensor_counts: list[int]  # parameters of each module, then buffers of each module
    parameter_count: int  # the parameters among the tensors (they come first)
    tensor_names: list[str]
    tensor_places: Callable[[list[Any]], Sequence[Any]]
    tensor_types: list[type]
    tensor_states: list[tuple[object, ...]]
    non_persistent: list[set[str]]


class ModelReading(NamedTuple):
    """What checking a kept index read of the model, in index order: the state capture that
    follows it at once, before any user code runs, reads the model from here rather than
    again (model_state.py)."""

    modules: list[nn.Module]
    types: list[type]
    attribute_dicts: list[dict[str, Any]]
    attribute_names: list[str]
    attribute_values: list[Any]  # every module's __dict__ values, flat
    parameter_dicts: list[dict[str, Any]]
    buffer_dicts: list[dict[str, Any]]
    tensors: list[torch.Tensor]  # the parameters (None left out), then the buffers
    parameter_count: int
    tensor_signatures: list[tuple[object, ...]]  # TENSOR_SIGNATURE of each tensor


@dataclass(slots=True)
class _Kept(Generic[IndexT]):
    """A root's entry: a weak reference to it, and once walked twice, its shape and index
    (one tuple, set at once: another thread may read it meanwhile)."""

    root: weakref.ref[nn.Module]
    known: tuple[ModelShape, IndexT] | None = None


class KeptIndexes(Generic[IndexT]):
    """The indexes of the models walked last, by their root, each with its shape."""

    def __init__(self, most: int) -> None:
        # By the root's id (the entry's weak reference tells a new root of a dead one's id).
        self.kept: BoundedCache[int, _Kept[IndexT]] = BoundedCache(most)

    def find(self, root: nn.Module) -> tuple[ModelReading, IndexT] | None:
        """What the check read of the model and the index kept for `root`, if nothing it
        was made from changed since; else None."""
        kept = self.kept.get(id(root))
        if kept is None or kept.root() is not root or kept.known is None:
            return None
        shape, index = kept.known
        try:
            reading = _live_modules(shape, root)
        except (KeyError, RuntimeError):  # a module without its dicts, a tensor's version
            return None
        if reading is None or module_facts_hooks_exist():
            return None
        return reading, index

    def keep(
        self,
        root: nn.Module,
        modules: list[nn.Module],
        facts: Callable[[], list[object]],
        index: IndexT,
    ) -> None:
        """Keep `index` (holding no module) for `root`'s next walks, from its second walk
        on; `facts` gives each module's facts, in the order of `modules`."""
        kept = self.kept.get(id(root))
        if kept is None or kept.root() is not root:
            self.kept.keep(id(root), _Kept(weakref.ref(root)))
            return
        try:
            shape = model_shape(modules, facts())
        except (KeyError, RuntimeError):  # a module without its dicts, a tensor's version
            shape = None
        kept.known = None if shape is None else (shape, index)


def model_shape(modules: list[nn.Module], facts: list[object]) -> ModelShape | None:
    """What an index of these modules (with these facts) was made from, or None where a
    model cannot be checked this way."""
    if not all(map(operator.is_, map(remembered_facts, modules), facts)):
        return None  # facts read every time: they may depend on what is not compared
    dicts: list[dict[str, Any]] = list(map(vars, modules))
    types = list(map(type, modules))
    plans = list(map(SETTINGS_PLANS.get, types))
    attributes = _own_attributes(dicts)
    parameter_dicts = list(map(_PARAMETERS, dicts))
    tensor_dicts = [*parameter_dicts, *map(_BUFFERS, dicts)]
    tensors = list(filter(_IS_NOT_NONE, chain.from_iterable(map(dict.values, tensor_dicts))))
    if (
        attributes is None
        or any(map(operator.is_, plans, repeat(None)))
        or any(map(is_uninitialized, tensors))
        or any(map(torch.Tensor.is_inference, tensors))
    ):
        return None  # a lazy tensor has no shape yet; an inference one no version
    children = list(map(_CHILDREN, dicts))
    return ModelShape(
        modules=list(map(weakref.ref, modules)),
        types=types,
        forwards=list(map(_FORWARD, types)),
        plans=plans,
        attribute_counts=list(map(len, dicts)),
        attribute_names=list(chain.from_iterable(dicts)),
        own_places=attributes[0],
        own_values=attributes[1],
        weak_places=attributes[2],
        weak_values=attributes[3],
        child_counts=list(map(len, children)),
        child_names=list(chain.from_iterable(children)),
        child_places=_places(chain.from_iterable(map(dict.values, children)), modules),
        tensors=list(map(weakref.ref, tensors)),
        tensor_counts=list(map(len, tensor_dicts)),
        parameter_count=sum(
            map(_IS_NOT_NONE, chain.from_iterable(map(dict.values, parameter_dicts)))
        ),
        tensor_names=list(chain.from_iterable(tensor_dicts)),
        tensor_places=_places(chain.from_iterable(map(dict.values, tensor_dicts)), tensors),
        tensor_types=list(map(type, tensors)),
        tensor_states=list(map(TENSOR_SIGNATURE, tensors)),
        non_persistent=[set(names) for names in map(_NON_PERSISTENT, dicts)],
    )


def _places(
    found: Iterable[object], objects: Sequence[object]
) -> Callable[[list[Any]], Sequence[Any]]:
    """A getter of the found objects, in order, from `objects` with None added last: where
    each found object is among them (one past the last for None), taken in one C call."""
    where = {id(value): place for place, value in enumerate(objects)}
    places = [len(objects) if value is None else where[id(value)] for value in found]
    if len(places) >= 2:
        return operator.itemgetter(*places)  # a tuple of the objects at these places
    return functools.partial(_at_places, places)  # itemgetter gives one object, not a tuple


def _at_places(places: list[int], objects: list[Any]) -> list[Any]:
    return [objects[place] for place in places]


def _own_attributes(
    dicts: list[dict[str, Any]],
) -> tuple[bytes, list[object], list[int], list[weakref.ref[Any]]] | None:
    """The attributes compared by identity (`_is_own`): their places among all, their
    values (None where held weakly), and where and what the weak references are; None if
    one can be held neither way."""
    names = list(chain.from_iterable(dicts))
    values = list(chain.from_iterable(map(dict.values, dicts)))
    own_places = bytes(map(_is_own, names, values))
    own_values = list(compress(values, own_places))
    weak_places: list[int] = []
    weak_values: list[weakref.ref[Any]] = []
    for place, value in enumerate(own_values):
        if not _is_atomic(value):
            try:
                weak_values.append(weakref.ref(value))
            except TypeError:  # a list, a dict: a copy would be needed, and is not kept
                return None
            weak_places.append(place)
            own_values[place] = None
    return own_places, own_values, weak_places, weak_values


def _is_own(name: str, value: object) -> bool:
    """Whether an attribute is compared by identity: all but torch's own dicts and sets
    (children, tensors and non-persistent names are compared by content; hooks not at all:
    no fact reads them)."""
    return not (name in MODULE_INTERNALS and isinstance(value, (dict, set)))


# Values that refer to nothing else, held as they are (settings mostly).
_ATOMIC_TYPES = frozenset(
    {int, float, bool, str, bytes, complex, type(None), torch.dtype, torch.device, torch.Size}
)


def _is_atomic(value: object) -> bool:
    """Whether a value can be held without holding anything of the model."""
    if type(value) in _ATOMIC_TYPES:
        return True
    return type(value) in (tuple, frozenset) and all(map(_is_atomic, value))  # type: ignore[call-overload]


def _live_modules(shape: ModelShape, root: nn.Module) -> ModelReading | None:
    """What the model is made of, read afresh, if nothing in `shape` changed; else None.
    Each step is a `map` in C over every module, attribute or tensor; the cheapest first."""
    modules: list[Any] = list(map(_CALL, shape.modules))
    types = list(map(type, modules))
    if (
        modules[0] is not root
        or any(map(operator.is_, modules, repeat(None)))
        or types != shape.types
    ):
        return None
    dicts: list[dict[str, Any]] = list(map(vars, modules))
    if not (
        all(map(operator.is_, map(_FORWARD, shape.types), shape.forwards))
        and all(map(operator.is_, map(SETTINGS_PLANS.get, shape.types), shape.plans))
        and list(map(len, dicts)) == shape.attribute_counts
    ):
        return None
    names = list(chain.from_iterable(dicts))
    if names != shape.attribute_names:
        return None
    values = list(chain.from_iterable(map(dict.values, dicts)))
    if not (
        _same_own_values(shape, values)
        and _same_contents(
            list(map(_CHILDREN, dicts)),
            shape.child_counts,
            shape.child_names,
            modules,
            shape.child_places,
        )
    ):
        return None
    tensors = _live_tensors(shape, dicts)
    if tensors is None:
        return None
    return ModelReading(modules, types, dicts, names, values, *tensors)


def _live_tensors(
    shape: ModelShape, dicts: list[dict[str, Any]]
) -> tuple[list[Any], list[Any], list[Any], int, list[tuple[object, ...]]] | None:
    """The modules' parameter and buffer dicts, their tensors, how many are parameters and
    each one's signature, if none changed since `shape`; else None."""
    tensors: list[Any] = list(map(_CALL, shape.tensors))
    if any(map(operator.is_, tensors, repeat(None))):
        return None
    parameter_dicts = list(map(_PARAMETERS, dicts))
    buffer_dicts = list(map(_BUFFERS, dicts))
    if not (
        _same_contents(
            [*parameter_dicts, *buffer_dicts],
            shape.tensor_counts,
            shape.tensor_names,
            tensors,
            shape.tensor_places,
        )
        and list(map(type, tensors)) == shape.tensor_types
    ):
        return None
    signatures = list(map(TENSOR_SIGNATURE, tensors))
    if not (
        signatures == shape.tensor_states
        and list(map(_NON_PERSISTENT, dicts)) == shape.non_persistent
    ):
        return None
    return parameter_dicts, buffer_dicts, tensors, shape.parameter_count, signatures


def _same_own_values(shape: ModelShape, values: list[Any]) -> bool:
    """Whether the attributes compared by identity hold the very values they held."""
    expected = shape.own_values.copy()
    for place, value in zip(shape.weak_places, shape.weak_values, strict=True):
        expected[place] = value()
    return all(map(operator.is_, compress(values, shape.own_places), expected))


def _same_contents(
    dicts: list[dict[str, Any]],
    counts: list[int],
    names: list[str],
    objects: list[Any],
    places: Callable[[list[Any]], Sequence[Any]],
) -> bool:
    """Whether the dicts hold these names, in order, and the objects `places` takes from
    `objects` (with None added last)."""
    if list(map(len, dicts)) != counts:
        return False
    # Only the dicts that hold something are read on: most are empty (a leaf's children, a
    # module's buffers), and reading one costs an iterator.
    held = list(compress(dicts, counts))
    return list(chain.from_iterable(held)) == names and all(
        map(operator.is_, chain.from_iterable(map(dict.values, held)), places([*objects, None]))
    )
