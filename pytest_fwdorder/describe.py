"""Turn the values a module receives and returns into stable, torch-free descriptions.

A description never holds a tensor (so a trace keeps no activations alive) and never
depends on memory addresses, ids or values that change from run to run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from pytest_fwdorder.records import (
    LiteralDescription,
    MappingDescription,
    ObjectDescription,
    SequenceDescription,
    TensorDescription,
    ValueDescription,
)

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


def raw_value(value: object) -> object:
    """What a hook keeps of a value: a RawTensor for a plain tensor, else its description."""
    if type(value) is torch.Tensor:
        return (value.shape, value.dtype, value.device)
    return describe_value(value)


def raw_arguments(args: tuple[object, ...]) -> list[object]:
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
            if len(_TENSOR_DESCRIPTIONS) >= _MOST_TENSOR_DESCRIPTIONS:
                _TENSOR_DESCRIPTIONS.clear()
            description = TensorDescription(tuple(shape), dtype_name(dtype), device_name)
            _TENSOR_DESCRIPTIONS[raw] = description
        return description
    return raw  # type: ignore[return-value]  # already a description


_TENSOR_DESCRIPTIONS: dict[object, TensorDescription] = {}
_MOST_TENSOR_DESCRIPTIONS = 100_000


def describe_tensor(tensor: torch.Tensor) -> TensorDescription:
    """Shape, dtype and device of a tensor."""
    description = finish_value((tensor.shape, tensor.dtype, tensor.device))
    assert isinstance(description, TensorDescription)  # a raw tensor always finishes as one
    return description


def describe_value(value: object) -> ValueDescription:
    """Describe any value a module can receive or return; never raises."""
    if type(value) is torch.Tensor:  # the common case first: no isinstance chain
        return describe_tensor(value)
    try:
        return _describe(value, 0, set())
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
        return describe_tensor(value)
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
    return LiteralDescription(f"<{type(value).__name__}>")


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
