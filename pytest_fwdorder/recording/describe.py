"""Turn the values a module receives and returns into stable, torch-free descriptions.

A description never holds a tensor (so a trace keeps no activations alive) and never
depends on memory addresses, ids or values that change from run to run.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from typing import Any

import torch

from pytest_fwdorder.calls.value_descriptions import (
    LiteralDescription,
    MappingDescription,
    ObjectDescription,
    SequenceDescription,
    TensorDescription,
    ValueDescription,
)
from pytest_fwdorder.recording.bounded_cache import BoundedCache
from pytest_fwdorder.recording.distributed import dtensor_layout

# Deeper nesting than this is shown as `...`: a golden line must stay readable, and a
# pathological value (a list nested 500 deep) must not exhaust the stack.
MAXIMUM_DEPTH = 32
_LONGEST_STRING = 40

_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
    torch.complex64: "c64",
    torch.complex128: "c128",
}

_ELLIPSIS = LiteralDescription("...")
_NONE = LiteralDescription("None")
_CYCLE = LiteralDescription("<cycle>")


def dtype_name(dtype: torch.dtype) -> str:
    """Short dtype name for golden text: `f32`, `bf16`, `i64`; unusual dtypes by torch's name."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype).removeprefix("torch.")
        _DTYPE_NAMES[dtype] = name
    return name


_DEVICE_NAMES: dict[torch.device, str] = {}

# What a hook keeps of a plain tensor argument: three immutable objects, no strings yet.
# Hooks run between heavy kernels with cold caches, so they do as little as possible and
# `finish_value` turns this into a TensorDescription once the forward is over.
RawTensor = tuple[torch.Size, torch.dtype, torch.device]
_RAW_TENSOR = operator.attrgetter("shape", "dtype", "device")


def raw_value(value: object) -> object:
    """What a hook keeps of a value: a RawTensor for a plain tensor, else its description."""
    if type(value) is torch.Tensor and value.layout is _STRIDED:
        try:
            return (value.shape, value.dtype, value.device)
        except RuntimeError:  # a nested tensor is strided but has no sizes to read
            pass
    return describe_value(value)


def raw_arguments(args: tuple[Any, ...]) -> list[object]:
    """What a pre-hook keeps of a call's arguments: `raw_value` of each, inlined for tensors."""
    try:
        return [
            _RAW_TENSOR(value)
            if type(value) is torch.Tensor and value.layout is torch.strided
            else raw_value(value)
            for value in args
        ]
    except RuntimeError:  # a nested tensor is strided but has no sizes to read
        return [raw_value(value) for value in args]


def finish_value(raw: object) -> ValueDescription:
    """The description of what `raw_value` kept.

    Equal tensor descriptions are one shared object: a model passes a few shapes around
    many times, and a lookup costs less than building the description again.
    """
    if type(raw) is tuple:
        description = _TENSOR_DESCRIPTIONS.get(raw)
        if description is None:
            shape, dtype, device = raw
            device_name = _DEVICE_NAMES.get(device)
            if device_name is None:
                device_name = _DEVICE_NAMES[device] = str(device)
            description = _TENSOR_DESCRIPTIONS.keep(
                raw, TensorDescription(tuple(shape), dtype_name(dtype), device_name)
            )
        return description
    return raw  # type: ignore[return-value]  # already a description


_MOST_TENSOR_DESCRIPTIONS = 100_000


def finish_arguments(raw_arguments: list[object]) -> tuple[ValueDescription, ...]:
    """The descriptions of what `raw_value` kept of a call's arguments, as a tuple.

    One tensor's arguments are one shared tuple per tensor description: most calls take
    one tensor, and a trace keeps its calls' arguments.
    """
    if len(raw_arguments) == 1 and type(raw_arguments[0]) is tuple:
        description = finish_value(raw_arguments[0])
        arguments = _ONE_TENSOR_ARGUMENTS.get(id(description))
        if arguments is None or arguments[0] is not description:
            arguments = _ONE_TENSOR_ARGUMENTS.keep(id(description), (description,))
        return arguments
    return tuple([finish_value(value) for value in raw_arguments])


_TENSOR_DESCRIPTIONS: BoundedCache[object, TensorDescription] = BoundedCache(
    _MOST_TENSOR_DESCRIPTIONS
)
# Keyed by id: the tuple kept holds its description alive, so the id is not reused.
_ONE_TENSOR_ARGUMENTS: BoundedCache[int, tuple[ValueDescription]] = BoundedCache(
    _MOST_TENSOR_DESCRIPTIONS
)


def describe_tensor(tensor: torch.Tensor) -> TensorDescription:
    """Shape, dtype and device of a tensor; a DTensor's global shape and placements too."""
    if type(tensor) is not torch.Tensor:  # a subclass: Parameter, DTensor ...
        layout = dtensor_layout(tensor)
        if layout is not None:
            placements, local_shape = layout
            plain = finish_value((tensor.shape, tensor.dtype, tensor.device))
            assert isinstance(plain, TensorDescription)
            return dataclasses.replace(plain, placements=placements, local_shape=local_shape)
    description = finish_value((tensor.shape, tensor.dtype, tensor.device))
    assert isinstance(description, TensorDescription)  # a raw tensor always finishes as one
    return description


def describe_value(value: object) -> ValueDescription:
    """Describe any value a module can receive or return; never raises."""
    # The common case first: a plain strided tensor, no isinstance chain. Sparse tensors
    # are plain tensors too, and a strided nested tensor has no sizes to read.
    if type(value) is torch.Tensor and value.layout is _STRIDED:
        try:
            return describe_tensor(value)
        except RuntimeError:
            pass
    try:
        return _describe(value, 0, set())
    except _DescriberPluginError as failed:  # a plugin's bug is the plugin author's to see
        raise failed.error from failed.error.__cause__
    except Exception as error:  # a broken __repr__ or property must not break the user's test
        return LiteralDescription(
            f"<{type(value).__name__}: not describable ({type(error).__name__})>"
        )


def describe_keyword_arguments(
    kwargs: Mapping[str, object],
) -> tuple[tuple[str, ValueDescription], ...]:
    """Describe keyword arguments in the order they were passed."""
    if not kwargs:
        return ()
    return tuple([(name, describe_value(value)) for name, value in kwargs.items()])


def _describe(value: object, depth: int, open_containers: set[int]) -> ValueDescription:
    if isinstance(value, torch.Tensor):
        if value.layout is _STRIDED and not value.is_nested:
            return describe_tensor(value)
        return _describe_by_plugins(value, depth, open_containers)  # sparse, nested
    if value is None:
        return _NONE
    if isinstance(value, (bool, int)):
        return LiteralDescription(repr(value))
    if isinstance(value, float):
        # Float arguments are often computed from data; the value would make goldens flaky.
        return LiteralDescription("float")
    if isinstance(value, str):
        text = value if len(value) <= _LONGEST_STRING else value[:_LONGEST_STRING] + "..."
        return LiteralDescription(repr(text))
    if isinstance(value, (torch.dtype, torch.Size)):
        return LiteralDescription(str(value))
    if depth >= MAXIMUM_DEPTH:
        return _ELLIPSIS
    if id(value) in open_containers:
        return _CYCLE
    open_containers.add(id(value))
    try:
        return _describe_container(value, depth + 1, open_containers)
    finally:
        open_containers.discard(id(value))


def _describe_container(value: object, depth: int, open_containers: set[int]) -> ValueDescription:
    field_names: tuple[str, ...] | None = getattr(type(value), "_fields", None)
    if isinstance(value, tuple) and field_names is not None:  # a namedtuple
        return ObjectDescription(
            type(value).__name__,
            tuple(
                (name, _describe(item, depth, open_containers))
                for name, item in zip(field_names, value, strict=False)
            ),
        )
    if isinstance(value, (tuple, list)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return SequenceDescription(
            kind, tuple(_describe(item, depth, open_containers) for item in value)
        )
    if isinstance(value, Mapping):
        if type(value) is not dict and dataclasses.is_dataclass(value):
            # A dataclass that is also a mapping (transformers' ModelOutput): its items are
            # the fields that are not None, shown as a dataclass's fields are.
            return ObjectDescription(
                type(value).__name__,
                tuple(
                    (str(key), _describe(item, depth, open_containers))
                    for key, item in value.items()
                    if item is not None
                ),
            )
        return MappingDescription(
            type(value).__name__,
            tuple(
                (_describe_key(key), _describe(item, depth, open_containers))
                for key, item in value.items()
            ),
        )
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ObjectDescription(
            type(value).__name__,
            tuple(
                (item.name, _describe(getattr(value, item.name), depth, open_containers))
                for item in dataclasses.fields(value)
            ),
        )
    return _describe_by_plugins(value, depth, open_containers)


class _DescriberPluginError(Exception):
    """Carries a describer plugin's error past the catch-all that keeps tracing alive."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _describe_by_plugins(value: object, depth: int, open_containers: set[int]) -> ValueDescription:
    """A value no built-in rule knows: the plugins' description, else `<TypeName>`."""
    from pytest_fwdorder.hookspecs import describe_with_plugins

    try:
        described = describe_with_plugins(value, Describer(depth, open_containers))
    except _DescriberPluginError:
        raise
    except Exception as error:
        error.add_note(
            f"pytest-fwdorder: a pytest_fwdorder_describe_value hook raised while describing "
            f"a {type(value).__name__}: fix the hook, or return None for values it does not "
            "describe"
        )
        raise _DescriberPluginError(error) from None
    if described is None:
        return LiteralDescription(f"<{type(value).__name__}>")
    if isinstance(described, str):
        return LiteralDescription(described)
    if not isinstance(described, _DESCRIPTION_TYPES):
        return LiteralDescription(
            f"<{type(value).__name__}: a describer returned {type(described).__name__}>"
        )
    return described


class Describer:
    """What a `pytest_fwdorder_describe_value` hook gets to describe a value's parts.

    `describe(item)` describes any value as the golden shows it (`f32[1,8]`, `(i64[], 3)`);
    `describe.fields("Name", {"a": ...})` gives `Name(a=..., ...)`; `describe.literal(text)`
    shows fixed text. Parts are described one level deeper, so a value that holds itself
    shows `<cycle>` instead of recursing.
    """

    __slots__ = ("_depth", "_open_containers")

    def __init__(self, depth: int, open_containers: set[int]) -> None:
        self._depth = depth
        self._open_containers = open_containers

    def __call__(self, value: object) -> ValueDescription:
        if isinstance(value, _DESCRIPTION_TYPES):
            return value  # already described: hooks may mix descriptions and values
        return _describe(value, self._depth, self._open_containers)

    def fields(self, type_name: str, fields: Mapping[str, object]) -> ObjectDescription:
        """`TypeName(name=description, ...)`, fields in the mapping's order."""
        return ObjectDescription(
            type_name, tuple((str(name), self(item)) for name, item in fields.items())
        )

    def literal(self, text: str) -> LiteralDescription:
        """Fixed text, shown as it is."""
        return LiteralDescription(text)


_DESCRIPTION_TYPES = (
    TensorDescription,
    LiteralDescription,
    SequenceDescription,
    MappingDescription,
    ObjectDescription,
)
_STRIDED = torch.strided


def _describe_key(key: Any) -> str:
    if isinstance(key, (str, int, bool)) or key is None:
        return repr(key)
    return f"<{type(key).__name__}>"


def tensors_of(value: object) -> list[torch.Tensor]:
    """Every tensor inside a value (tuples, lists, dicts, namedtuples, dataclasses), in order."""
    found: list[torch.Tensor] = []
    pending: list[tuple[object, int]] = [(value, 0)]
    seen: set[int] = set()
    while pending:
        current, depth = pending.pop()
        if isinstance(current, torch.Tensor):
            found.append(current)
            continue
        if depth >= MAXIMUM_DEPTH or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, Mapping):
            items: list[object] = list(current.values())
        elif isinstance(current, (tuple, list)):
            items = list(current)
        elif dataclasses.is_dataclass(current) and not isinstance(current, type):
            items = [getattr(current, item.name) for item in dataclasses.fields(current)]
        else:
            continue
        pending.extend((item, depth + 1) for item in reversed(items))
    return found
