"""Capture the stable facts of a module: its settings, its own tensors, ties and forward names.

The one owner of how these facts are captured; rendering them is the golden format's job.
Pure reads, no hooks: results are plain strings, ints and tuples, so a trace that keeps them
keeps no tensor, and nothing in them varies between runs or devices (no ids, addresses,
devices or values). Work that depends only on a module's class (signature inspection,
which attributes hold its settings) is done once per class and cached.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import types
import weakref
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, replace
from itertools import chain, repeat

import torch
from torch import nn

from pytest_fwdorder.calls.records import (
    ForwardParameters,
    ModuleFacts,
    ModuleTensors,
    TensorFact,
    TensorKind,
    TensorTotals,
)
from pytest_fwdorder.hookspecs import module_facts_from_plugins
from pytest_fwdorder.recording.bounded_cache import BoundedCache
from pytest_fwdorder.recording.describe import dtype_name
from pytest_fwdorder.recording.module_settings import (
    MISSING,
    SETTINGS_PLANS,
    SettingsPlan,
    module_settings,
    settings_plan,
)

# Lazy modules' tensors. Checked with issubclass(type(...)): isinstance goes through
# Parameter's metaclass hook, which costs a Python call per tensor.
_UNINITIALIZED = (nn.UninitializedParameter, nn.UninitializedBuffer)


@dataclass(frozen=True, slots=True)
class TensorIndex:
    """What one walk over a model's tensors finds: ties, state_dict keys and totals.

    `tied` pairs each tensor's first full name with its other names, for tensors reached
    under more than one name (shared weights, or a module registered in two places).
    """

    tied: tuple[tuple[str, tuple[str, ...]], ...]
    state_dict_keys: tuple[str, ...]
    totals: TensorTotals


# Equal facts are built once (a frozen dataclass costs more to build than to look up).
_MOST_TENSOR_FACTS = 100_000
_TENSOR_FACTS: BoundedCache[tuple[object, ...], TensorFact] = BoundedCache(_MOST_TENSOR_FACTS)
_MODULE_TENSORS: BoundedCache[tuple[TensorFact, ...], ModuleTensors] = BoundedCache(
    _MOST_TENSOR_FACTS
)
_MODULE_FACTS: BoundedCache[Hashable, ModuleFacts] = BoundedCache(_MOST_TENSOR_FACTS)
# Keyed by the class's forward function, not the class: patching `Block.forward` (as
# mocker.patch.object does) must change the names, whatever ran first.
_FORWARD_PARAMETERS: weakref.WeakKeyDictionary[object, ForwardParameters | None] = (
    weakref.WeakKeyDictionary()
)


def module_facts(module: nn.Module, *, ask_plugins: bool = True) -> ModuleFacts:
    """Settings, own tensors and forward's parameters of a module, and plugins' facts.

    Plugins' facts (`pytest_fwdorder_module_facts`) are asked for every time: they can
    depend on anything in the module, so they are never part of the shared facts. A caller
    that found no plugin implementing the hook passes `ask_plugins=False`.
    """
    facts = _shared_module_facts(module)
    if not ask_plugins:
        return facts
    extra = module_facts_from_plugins(module)
    return replace(facts, extra=extra) if extra else facts


def _shared_module_facts(module: nn.Module) -> ModuleFacts:
    """Settings, own tensors and forward's parameters of a module, in one call.

    A module's facts are remembered, and given again while nothing they are made from has
    changed (`_Remembered.hold_for`). Equal facts are one shared object, found from what
    the module holds (its setting values, its tensors' names, dtypes, shapes and flags)
    before any text is made: a model repeats a few kinds of module many times, and the
    recorder reads the facts of every module in every trace.
    """
    remembered = _REMEMBERED.get(id(module))
    if remembered is not None and remembered.hold_for(module):
        return remembered.facts
    key = _raw_facts(module)
    try:
        facts = _MODULE_FACTS.get(key) if key is not None else None
    except TypeError:  # a list or other unhashable setting
        key = None
    if key is None:
        return ModuleFacts(
            module_settings(module), module_tensors(module), forward_parameters(module)
        )
    if facts is None:
        facts = _MODULE_FACTS.keep(
            key,
            ModuleFacts(
                module_settings(module), module_tensors(module), forward_parameters(module)
            ),
        )
    _remember(module, facts)
    return facts


def _remember(module: nn.Module, facts: ModuleFacts) -> None:
    """Keep `facts` as `module`'s until something they are made from changes.

    What equal modules share (class, forward, plan, tensors) is one object, and so are
    their setting values where they are the very same objects: a model repeats a few
    kinds of module many times, and this is kept for every module of every model traced.
    """
    module_class = type(module)
    plan = SETTINGS_PLANS.get(module_class)
    if plan is None:  # the plans were cleared at their bound meanwhile: next time
        return
    attributes = module.__dict__
    non_persistent = attributes.get("_non_persistent_buffers_set")
    kind = (
        module_class,
        module_class.forward,
        plan,
        frozenset(non_persistent) if non_persistent else _NO_NAMES,
        _tensor_states(module),
    )
    shared_kind = _MODULE_KINDS.get(kind)
    if shared_kind is None or shared_kind[2] is not plan:  # a plan made again: not equal
        shared_kind = _MODULE_KINDS.keep(kind, kind)
    values = tuple([attributes.get(attribute, MISSING) for attribute in plan.attribute_names])
    try:
        shared_values = _SETTING_VALUES.get(values)
    except TypeError:  # a list or other unhashable setting: kept as it is
        shared_values = values
    if shared_values is None:
        shared_values = _SETTING_VALUES.keep(values, values)
    elif not all(map(operator.is_, shared_values, values)):  # equal, not the same objects
        shared_values = values
    # Equal modules share one _Remembered too (it is frozen), keyed by its facts' id: the
    # entry holds those facts alive, so while it is kept the id names them and no other.
    remembered = _SHARED_REMEMBERED.get(id(facts))
    if remembered is None or not (
        remembered.kind is shared_kind and remembered.values is shared_values
    ):
        remembered = _SHARED_REMEMBERED.keep(
            id(facts), _Remembered(shared_kind, shared_values, facts)
        )
    _REMEMBERED.keep(id(module), remembered)


def remembered_facts(module: nn.Module) -> ModuleFacts | None:
    """The facts kept as `module`'s while nothing they are made from changes, if any."""
    remembered = _REMEMBERED.get(id(module))
    return None if remembered is None else remembered.facts


def remember_modules(count: int) -> None:
    """Make room to remember the facts of `count` modules: a model about to be traced.

    The bound grows with the largest model traced, so a model of more modules than the
    default bound is served from what its last trace remembered rather than forgotten
    during every trace.
    """
    _REMEMBERED.hold_at_least(count)


@dataclass(frozen=True, slots=True)
class _Remembered:
    """A module's facts, with what they were made from: its class, settings and tensors.

    Setting values are compared by identity, which costs less than the types and hashes of
    the shared facts' key and never takes a changed value for the old one (`stride = (2, 2)`
    is a new tuple; `True` and `1` are other objects). Tensors are read again each time,
    since `.half()` and `requires_grad_` change a parameter without replacing it. Keyed by
    the module's id, with no reference to it nor to its tensors: another module later given
    the same id is served only if all of this holds for it too, and then its facts are these.
    """

    # (class, its forward, its settings plan, non-persistent buffer names, _tensor_states):
    # one shared tuple for equal modules. Names are compared whole, not only for the
    # buffers present.
    kind: tuple[type[nn.Module], object, SettingsPlan, frozenset[str], tuple[object, ...]]
    values: tuple[object, ...]
    facts: ModuleFacts

    def hold_for(self, module: nn.Module) -> bool:
        """Whether these facts are still `module`'s: nothing they are made from changed."""
        module_class, forward, plan, non_persistent, tensors = self.kind
        attributes = module.__dict__
        if (
            type(module) is not module_class
            or module_class.forward is not forward
            or SETTINGS_PLANS.get(module_class) is not plan
            or "forward" in attributes
            or not all(
                map(
                    operator.is_,
                    map(attributes.get, plan.attribute_names, repeat(MISSING)),
                    self.values,
                )
            )
            or attributes.get("_non_persistent_buffers_set", _NO_NAMES) != non_persistent
        ):
            return False
        try:
            return _tensor_states(module) == tensors
        except (AttributeError, RuntimeError):  # not a tensor now, or a lazy one (no shape)
            return False


def _tensor_states(module: nn.Module) -> tuple[object, ...]:
    """A module's own tensors as its facts see them, flat, read in C: how many parameters,
    the parameters' and buffers' names and types, and each tensor's dtype, shape and flag."""
    parameters = module._parameters
    buffers = module._buffers
    if not buffers:
        if not parameters:
            return ()  # an activation, a container
        return (
            -1,  # no buffers
            *parameters,
            *map(type, parameters.values()),
            *map(_TENSOR_KEY, filter(_IS_NOT_NONE, parameters.values())),
        )
    values = [*parameters.values(), *buffers.values()]
    return (
        len(parameters),
        *parameters,
        *buffers,
        *map(type, values),
        *map(_TENSOR_KEY, filter(_IS_NOT_NONE, values)),
    )


_NO_NAMES: frozenset[str] = frozenset()
# Each module's facts while they hold, by the module's id (see _Remembered).
_REMEMBERED: BoundedCache[int, _Remembered] = BoundedCache(_MOST_TENSOR_FACTS)
# Equal modules repeat a few kinds: a small bound keeps them and caps a model of all-different
# modules at a few hundred kilobytes.
_SHARED_REMEMBERED: BoundedCache[int, _Remembered] = BoundedCache(1024)
# What equal remembered modules share, one object each (see _remember).
_MODULE_KINDS: BoundedCache[
    tuple[type[nn.Module], object, SettingsPlan, frozenset[str], tuple[object, ...]],
    tuple[type[nn.Module], object, SettingsPlan, frozenset[str], tuple[object, ...]],
] = BoundedCache(_MOST_TENSOR_FACTS)
_SETTING_VALUES: BoundedCache[tuple[object, ...], tuple[object, ...]] = BoundedCache(
    _MOST_TENSOR_FACTS
)


def _raw_facts(module: nn.Module) -> Hashable | None:
    """What the facts of a module are made from, as a cache key; None when it cannot be one.

    Only builtins and torch's own hashable values (dtypes, sizes) go in, so hashing is done
    in C, and the tensors' parts are read by `map` in C. Types are part of it: `True == 1`
    and `0.0 == 0` must not share a text, and a None parameter must not look like another.
    """
    module_class = type(module)
    plan = SETTINGS_PLANS.get(module_class)
    if plan is None:  # the class's first module: plan it now, so its facts are remembered
        try:
            plan = settings_plan(module_class)
        except Exception:  # module_settings says why, as a setting
            return None
    attributes = module.__dict__
    if plan.uses_extra_repr or "forward" in attributes:
        return None  # extra_repr() text can depend on anything: read it every time
    get_attribute = attributes.get
    values = tuple([get_attribute(attribute, MISSING) for attribute in plan.attribute_names])
    value_types: tuple[object, ...] = tuple(map(type, values))
    if tuple in value_types:
        value_types = tuple([_value_types(value) for value in values])
    if float in value_types:  # -0.0 == 0.0, but their texts differ
        value_types += tuple(
            [math.copysign(1.0, value) for value in values if type(value) is float]
        )
    parameters = module._parameters
    buffers = module._buffers
    try:
        tensors: tuple[object, ...] = (
            tuple(parameters),
            tuple(map(type, parameters.values())),
            tuple(map(_TENSOR_KEY, filter(_IS_NOT_NONE, parameters.values()))),
        )
        if buffers:
            non_persistent = module._non_persistent_buffers_set
            tensors += (
                tuple(buffers),
                tuple(map(type, buffers.values())),
                tuple(map(_TENSOR_KEY, filter(_IS_NOT_NONE, buffers.values()))),
                tuple([name in non_persistent for name in buffers]),
            )
    except RuntimeError:  # a lazy module's uninitialized tensor has no shape to read
        return None
    return (module_class, module_class.forward, values, value_types, tensors)


_TENSOR_KEY = operator.attrgetter("dtype", "shape", "requires_grad")
_IS_NOT_NONE = functools.partial(operator.is_not, None)


def _value_types(value: object) -> object:
    """The types in a setting value, tuples item by item: `(1, 1)` and `(True, True)` differ."""
    if type(value) is tuple:
        item_types = tuple(map(type, value))  # in C for the usual flat tuple: (3, 3)
        if tuple in item_types:
            return (tuple, *[_value_types(item) for item in value])
        return (tuple, *item_types)
    return type(value)


def is_uninitialized(tensor: torch.Tensor) -> bool:
    """Whether a tensor is a lazy module's parameter or buffer that has no shape yet."""
    return issubclass(type(tensor), _UNINITIALIZED)


def module_tensors(module: nn.Module) -> ModuleTensors:
    """A module's own parameters and buffers (not its children's), without reading values.

    Lazy tensors are recorded as uninitialized (shape None) without touching their shape.
    """
    facts: list[TensorFact] = []
    for name, parameter in module._parameters.items():
        if parameter is not None:
            facts.append(_tensor_fact(name, "parameter", parameter, parameter.requires_grad, True))
    if module._buffers:
        non_persistent = module._non_persistent_buffers_set
        for name, buffer in module._buffers.items():
            if buffer is not None:
                facts.append(
                    _tensor_fact(name, "buffer", buffer, False, name not in non_persistent)
                )
    key = tuple(facts)
    tensors = _MODULE_TENSORS.get(key)
    if tensors is None:
        tensors = _MODULE_TENSORS.keep(key, ModuleTensors(key))
    return tensors


def _tensor_fact(
    name: str, kind: TensorKind, tensor: torch.Tensor, requires_grad: bool, persistent: bool
) -> TensorFact:
    """The fact for one tensor, shared between equal facts: most models repeat a few."""
    if issubclass(type(tensor), _UNINITIALIZED):
        return TensorFact(name, kind, dtype_name(tensor.dtype), None, requires_grad, persistent)
    # torch.Size hashes and compares as the tuple of its sizes.
    key = (name, kind, tensor.dtype, tensor.shape, requires_grad, persistent)
    fact = _TENSOR_FACTS.get(key)
    if fact is None:
        fact = _TENSOR_FACTS.keep(
            key,
            TensorFact(
                name, kind, dtype_name(tensor.dtype), tuple(tensor.shape), requires_grad, persistent
            ),
        )
    return fact


def index_tensors(
    root: nn.Module,
    named_modules: Iterable[tuple[str, nn.Module]] | None = None,
    *,
    with_keys: bool = True,
) -> TensorIndex:
    """Walk every module path once: tied tensors, state_dict keys and element totals.

    The keys follow `root.state_dict()`: parameters, then persistent buffers, then
    `_extra_state` where the class defines `get_extra_state`, module by module, shared
    modules and tied tensors under each of their names. Keys that state_dict hooks add or
    remove are not seen. `named_modules` is `root.named_modules(remove_duplicate=False)`
    when the caller walked it already; without `with_keys` the keys are left empty (the
    recorder needs only ties and totals, and names are what cost).
    """
    if named_modules is None:
        named_modules = root.named_modules(remove_duplicate=False)
    if not with_keys:
        named_modules = list(named_modules)
        totals = _totals_without_ties(named_modules)
        if totals is not None:
            return TensorIndex(tied=(), state_dict_keys=(), totals=totals)
    # Full names are built only for keys and for tensors met a second time: a tie is rare.
    first_seen: dict[int, tuple[str, str]] = {}
    other_names: dict[int, list[str]] = {}
    keys: list[str] = []
    parameter_count = trainable_parameter_count = buffer_count = uninitialized_count = 0
    for path, module in named_modules:
        parameters = module._parameters
        buffers = module._buffers
        if parameters:
            for name, parameter in parameters.items():
                if parameter is None:
                    continue
                if with_keys:
                    keys.append(f"{path}.{name}" if path else name)
                tensor_id = id(parameter)
                if tensor_id in first_seen:
                    other_names.setdefault(tensor_id, []).append(f"{path}.{name}" if path else name)
                    continue
                first_seen[tensor_id] = (path, name)
                if issubclass(type(parameter), _UNINITIALIZED):
                    uninitialized_count += 1
                    continue
                count = parameter.numel()
                parameter_count += count
                if parameter.requires_grad:
                    trainable_parameter_count += count
        if buffers:
            non_persistent = module._non_persistent_buffers_set
            for name, buffer in buffers.items():
                if buffer is None:
                    continue
                if with_keys and name not in non_persistent:
                    keys.append(f"{path}.{name}" if path else name)
                tensor_id = id(buffer)
                if tensor_id in first_seen:
                    other_names.setdefault(tensor_id, []).append(f"{path}.{name}" if path else name)
                    continue
                first_seen[tensor_id] = (path, name)
                if issubclass(type(buffer), _UNINITIALIZED):
                    uninitialized_count += 1
                else:
                    buffer_count += buffer.numel()
        if with_keys and type(module).get_extra_state is not nn.Module.get_extra_state:
            keys.append(f"{path}._extra_state" if path else "_extra_state")
    tied = []
    for tensor_id, (path, name) in first_seen.items() if other_names else ():
        names = other_names.get(tensor_id)
        if names is not None:  # in the order tensors were first met, as state_dict has them
            tied.append((f"{path}.{name}" if path else name, tuple(names)))
    return TensorIndex(
        tied=tuple(tied),
        state_dict_keys=tuple(keys),
        totals=TensorTotals(
            parameter_count, trainable_parameter_count, buffer_count, uninitialized_count
        ),
    )


def _totals_without_ties(named_modules: list[tuple[str, nn.Module]]) -> TensorTotals | None:
    """The totals, counted in C, when no tensor is reached twice and none is lazy; else None.

    The usual model: then no name needs building, and the general walk is not needed.
    """
    modules = [module for _, module in named_modules]
    parameters = list(
        filter(_IS_NOT_NONE, chain.from_iterable(map(_VALUES, map(parameters_of, modules))))
    )
    buffers = list(
        filter(_IS_NOT_NONE, chain.from_iterable(map(_VALUES, map(buffers_of, modules))))
    )
    tensors = parameters + buffers
    if len(set(map(id, tensors))) != len(tensors):
        return None  # a tie, or a module registered twice: names are needed
    if any(issubclass(tensor_type, _UNINITIALIZED) for tensor_type in set(map(type, tensors))):
        return None
    return TensorTotals(
        sum(map(_NUMEL, parameters)),
        sum(map(_NUMEL, filter(_REQUIRES_GRAD, parameters))),
        sum(map(_NUMEL, buffers)),
        0,
    )


# A module's own parameter and buffer dicts, read by `map` in C (the recorder's too).
parameters_of = operator.attrgetter("_parameters")
buffers_of = operator.attrgetter("_buffers")
# Not dict.values: a TorchScript module keeps its tensors in a wrapper that is not a dict.
_VALUES = operator.methodcaller("values")
_REQUIRES_GRAD = operator.attrgetter("requires_grad")
_NUMEL = torch.Tensor.numel


def tied_tensors(root: nn.Module) -> dict[str, tuple[str, ...]]:
    """Each tensor reached under several names: first full name -> its other names."""
    return dict(index_tensors(root).tied)


def state_dict_keys(root: nn.Module) -> tuple[str, ...]:
    """The keys `root.state_dict()` would have, in its order, without building it."""
    return index_tensors(root).state_dict_keys


def tensor_totals(root: nn.Module) -> TensorTotals:
    """Parameter, trainable parameter and buffer element counts, tied tensors once."""
    return index_tensors(root).totals


def forward_parameters(module: nn.Module) -> ForwardParameters | None:
    """The parameters of `type(module).forward`, or None when they cannot name arguments.

    None when the signature cannot be read, takes `*args`, is a staticmethod, or the
    instance replaced its own `forward` (the class's signature is then not what is called).
    """
    if "forward" in vars(module):
        return None
    module_class = type(module)
    forward = module_class.forward
    try:
        found = _FORWARD_PARAMETERS.get(forward, MISSING)
    except TypeError:  # not weak-referenceable (a builtin): read it every time
        return _read_forward_parameters(module_class)
    if found is MISSING:
        found = _FORWARD_PARAMETERS[forward] = _read_forward_parameters(module_class)
    return found if isinstance(found, ForwardParameters) else None


def _read_forward_parameters(module_class: type[nn.Module]) -> ForwardParameters | None:
    try:
        if isinstance(inspect.getattr_static(module_class, "forward"), staticmethod):
            return None
        parameters = list(inspect.signature(module_class.forward).parameters.values())
    except (AttributeError, TypeError, ValueError):
        return None
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return None  # no `self` to drop: not a plain method
    parameters = parameters[1:]
    if any(parameter.kind is inspect.Parameter.VAR_POSITIONAL for parameter in parameters):
        return None
    return ForwardParameters(
        positional_names=tuple(
            parameter.name
            for parameter in parameters
            if parameter.kind
            in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ),
        none_defaults=frozenset(
            parameter.name
            for parameter in parameters
            if parameter.default is None and parameter.kind is not inspect.Parameter.VAR_KEYWORD
        ),
        keyword_names=tuple(
            parameter.name
            for parameter in parameters
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        ),
    )


def reads_training(module_class: type[nn.Module]) -> bool:
    """Whether a module's own code can compute differently in train and eval mode.

    Reads the class's code (callers cache the answer per class). True when a method the class (or a base below `nn.Module`) defines mentions `training`
    (`self.training`, `F.dropout(x, p, self.training)`), for TorchScript modules, and for
    classes whose code cannot be read. Activations and containers whose forward only calls
    children (`nn.ReLU`, `nn.Sequential`, torchvision's `Bottleneck`) read False: their mode
    changes nothing they compute, so golden files give them no mode mark.
    """
    if issubclass(module_class, torch.jit.ScriptModule):
        return True
    for base in module_class.__mro__:
        if base is nn.Module or not issubclass(base, nn.Module):
            break
        for attribute in vars(base).values():
            code = _code_of(attribute)
            if code is _UNREADABLE or (
                isinstance(code, types.CodeType) and _mentions_training(code)
            ):
                return True
    return False


_UNREADABLE = types.SimpleNamespace()


def _code_of(attribute: object) -> types.CodeType | object | None:
    """The code of a method, property getter or static/class method; None for data."""
    if isinstance(attribute, (staticmethod, classmethod)):
        attribute = attribute.__func__
    elif isinstance(attribute, property):
        attribute = attribute.fget
    if isinstance(attribute, types.FunctionType):
        return attribute.__code__
    # Written in C: assume it may read the mode.
    builtin = isinstance(attribute, (types.BuiltinFunctionType, types.MethodDescriptorType))
    return _UNREADABLE if builtin else None


def _mentions_training(code: types.CodeType) -> bool:
    return "training" in code.co_names or any(
        isinstance(constant, types.CodeType) and _mentions_training(constant)
        for constant in code.co_consts
    )
