"""A module's settings as the golden shows them: where its class keeps each constructor
argument (planned once per class), read per module, or its extra_repr text."""

from __future__ import annotations

import inspect
import re
import types
from dataclasses import dataclass

import torch
from torch import nn

from pytest_fwdorder.calls.records import Setting
from pytest_fwdorder.recording.bounded_cache import BoundedCache
from pytest_fwdorder.recording.describe import dtype_name

# The setting shown for a user module that overrides `extra_repr`.
EXTRA_REPR_SETTING = "extra_repr"
# Constructor arguments that say where a module was built, not what it computes.
_PLACEMENT_ARGUMENTS = frozenset({"device", "dtype"})
# Constructor arguments torch stores under another name: (setting, attribute) pairs whose
# setting is True when the attribute holds a parameter.
_STORED_ELSEWHERE: dict[type[nn.Module], tuple[tuple[str, str], ...]] = {
    nn.MultiheadAttention: (("bias", "in_proj_bias"), ("add_bias_kv", "bias_k")),
}
# Nesting deeper than this in a setting's value is not plain configuration.
_DEEPEST_SETTING = 4
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
# Quantized modules show the scale and zero point their observers computed from data. Those
# differ in their last digits between machines (CPU kernels, observer arithmetic), so a
# golden says where they come from instead of their value.
_OBSERVED_QUANTIZATION = re.compile(r"\b(scale|zero_point)=(?:tensor\([^()]*\)|[-+0-9.e]+)")
_QUANTIZED_PACKAGES = ("torch.ao.nn.", "torch.nn.quantized.", "torch.nn.intrinsic.")
# An attribute a module does not have (None is a value).
MISSING = object()
_PLAIN_TYPES: frozenset[type] = frozenset({bool, int, float, str, type(None)})


@dataclass(frozen=True, slots=True)
class SettingsPlan:
    """Where a class keeps its settings: (setting, attribute, read as presence) triples."""

    sources: tuple[tuple[str, str, bool], ...]
    uses_extra_repr: bool
    # A quantized module's extra_repr: its observed scale and zero point are not written.
    hides_observed_values: bool = False
    # The attributes read, and those read as presence: what the facts cache key is made of.
    attribute_names: tuple[str, ...] = ()
    presence_names: tuple[str, ...] = ()


# A plain dict: a WeakKeyDictionary lookup makes a weak reference, per module of every trace.
# It keeps classes alive (fx's GraphModule makes one per graph), so it is bounded.
MOST_CACHED_CLASSES = 10_000
SETTINGS_PLANS: BoundedCache[type[nn.Module], SettingsPlan] = BoundedCache(MOST_CACHED_CLASSES)


def module_settings(module: nn.Module) -> tuple[Setting, ...]:
    """The settings that decide what a module computes, as (name, text) in a stable order.

    torch.nn modules: their constructor arguments read back from the attributes that hold
    them (`kernel_size=(3, 3)`, `eps=1e-05`; floats exactly, by repr), `bias=True/False`
    from whether the bias parameter exists, never `device` or `dtype`. Classes whose
    `__init__` takes `*args`/`**kwargs` (LSTM, GRU) add their `__constants__`. Other modules:
    their `extra_repr()` text as one `extra_repr` setting when they have one (hexadecimal
    addresses replaced; a quantized module's observed `scale` and `zero_point` written as
    `<from data>`, since their digits differ between machines), else nothing. Never raises: an unreadable setting reads as a
    placeholder naming the exception type.
    """
    try:
        module_class = type(module)
        plan = SETTINGS_PLANS.get(module_class)
        if plan is None:
            plan = settings_plan(module_class)
        if plan.uses_extra_repr:
            return _extra_repr_setting(module, plan.hides_observed_values)
        return _read_settings(module, plan)
    except Exception as error:  # a hostile __getattr__ or class must not break the user's test
        return (("settings", f"<not readable: {type(error).__name__}>"),)


def settings_plan(module_class: type[nn.Module]) -> SettingsPlan:
    """Where `module_class` keeps its settings, worked out once per class. Can raise."""
    plan = SETTINGS_PLANS.get(module_class)
    if plan is None:
        plan = SETTINGS_PLANS.keep(module_class, _plan_settings(module_class))
    return plan


def _plan_settings(module_class: type[nn.Module]) -> SettingsPlan:
    if not _defined_in_torch_nn(module_class):
        return SettingsPlan(
            (),
            module_class.extra_repr is not nn.Module.extra_repr,
            hides_observed_values=(module_class.__module__ or "").startswith(_QUANTIZED_PACKAGES),
        )
    names: list[str] = []
    takes_anything = False
    try:
        signature = inspect.signature(module_class.__init__)
    except (TypeError, ValueError):
        takes_anything = True
    else:
        for parameter in list(signature.parameters.values())[1:]:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                takes_anything = True
            else:
                names.append(parameter.name)
    if takes_anything:
        names.extend(getattr(module_class, "__constants__", ()))
    elsewhere: dict[str, str] = {}
    for base in reversed(module_class.__mro__):
        elsewhere.update(_STORED_ELSEWHERE.get(base, ()))
    sources: list[tuple[str, str, bool]] = []
    for name in dict.fromkeys(names):  # in order, once each
        if name.startswith("_") or name in _PLACEMENT_ARGUMENTS:
            continue
        attribute = elsewhere.get(name)
        sources.append((name, name, False) if attribute is None else (name, attribute, True))
    return SettingsPlan(
        tuple(sources),
        uses_extra_repr=False,
        attribute_names=tuple(attribute for _, attribute, _ in sources),
        presence_names=tuple(attribute for _, attribute, as_presence in sources if as_presence),
    )


def _defined_in_torch_nn(module_class: type) -> bool:
    module_name = module_class.__module__ or ""
    return module_name == "torch.nn" or module_name.startswith("torch.nn.")


def _read_settings(module: nn.Module, plan: SettingsPlan) -> tuple[Setting, ...]:
    attributes = vars(module)  # plain attributes only: never a method or property
    parameters = module._parameters
    settings: list[Setting] = []
    for setting_name, attribute, as_presence in plan.sources:
        value = attributes.get(attribute, MISSING)
        if as_presence:
            if value is MISSING:
                value = parameters.get(attribute)
            settings.append((setting_name, repr(value is not None)))
        elif value is not MISSING:
            value_type = type(value)
            if value_type in _PLAIN_TYPES or (
                value_type is tuple and _PLAIN_TYPES.issuperset(map(type, value))
            ):
                text: str | None = repr(value)  # kernel_size=(3, 3): repr writes it as wanted
            else:
                text = _config_text(value, 0)
            if text is not None:
                settings.append((setting_name, text))
        elif attribute in parameters:  # a bool argument kept as a parameter or None: bias
            settings.append((setting_name, repr(parameters[attribute] is not None)))
    return tuple(settings)


def _config_text(value: object, depth: int) -> str | None:
    """Text for a plain configuration value, or None for anything else (tensors, modules)."""
    value_type = type(value)
    if value_type in _PLAIN_TYPES:
        return repr(value)
    if (value_type is tuple or value_type is list) and _PLAIN_TYPES.issuperset(map(type, value)):  # type: ignore[call-overload]
        return repr(value)
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, (tuple, list)) and depth < _DEEPEST_SETTING:
        parts = [_config_text(item, depth + 1) for item in value]
        if any(part is None for part in parts):
            return None
        text = ", ".join(part for part in parts if part is not None)
        if isinstance(value, list):
            return f"[{text}]"
        return f"({text},)" if len(parts) == 1 else f"({text})"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return f"<function {value.__qualname__}>"  # TransformerEncoderLayer's activation
    return None


def _extra_repr_setting(module: nn.Module, hides_observed_values: bool) -> tuple[Setting, ...]:
    try:
        text = module.extra_repr()
    except Exception as error:
        return ((EXTRA_REPR_SETTING, f"<extra_repr raised {type(error).__name__}>"),)
    if not isinstance(text, str):
        return ((EXTRA_REPR_SETTING, f"<extra_repr returned {type(text).__name__}>"),)
    if not text:
        return ()
    text = _ADDRESS.sub("<address>", text)
    if hides_observed_values:
        text = _OBSERVED_QUANTIZATION.sub(r"\1=<from data>", text)
    return ((EXTRA_REPR_SETTING, text),)
