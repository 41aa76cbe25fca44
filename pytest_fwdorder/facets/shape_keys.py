"""Shapes for the costs facet's FLOP formulas, and the keys under which their figures are kept.

torch's formulas that see shapes alone are called with each tensor replaced by its shape
(`shapes_of`, as torch's `shape_wrapper` does); the same shapes and other arguments give the
same figure, kept under a key built from them. An operation's schema says what kind of value
each positional argument is, so `key_for_schema` builds its key with one conversion per
position, worked out once per operation: a few microseconds at every counted operation less
than looking at each value (ResNet-50's convolutions take nine arguments).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

import torch
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import get_shape

# The values `shape_key` looks into; any other is its own key.
_CONTAINERS = (tuple, list, dict)
_SHAPE = attrgetter("shape")


def shapes_of(value: Any) -> Any:
    """`value` with each tensor replaced by its shape, as torch's `shape_wrapper` gives it.

    Containers without tensors are passed on as they are (formulas only read them); other
    tuple, list and dict types (named tuples) go through torch's own `tree_map`.
    """
    if isinstance(value, torch.Tensor):
        return value.shape
    kind = type(value)
    if kind is tuple or kind is list:
        if any(isinstance(item, (torch.Tensor, tuple, list, dict)) for item in value):
            return kind(shapes_of(item) for item in value)
        return value
    if kind is dict:
        return {key: shapes_of(item) for key, item in value.items()}
    if isinstance(value, (tuple, list, dict)):
        return tree_map(get_shape, value)
    return value


def shape_key(value: Any) -> Any:
    """`value` as part of a dictionary key for `shapes_of(value)`: tensors by their shapes.

    Lists become tuples to be hashable; within one operation overload each position holds
    one kind of value, so a tensor's shape and a tuple of integers never meet.
    """
    if isinstance(value, torch.Tensor):
        return value.shape
    kind = type(value)
    if kind is tuple or kind is list:
        return tuple(map(shape_key, value))
    if kind is dict:
        return tuple((key, shape_key(item)) for key, item in value.items())
    if isinstance(value, (tuple, list, dict)) and kind is not torch.Size:
        # A named tuple or other container would be keyed by its tensors' ids, which a later
        # tensor of another shape may reuse: such an operation is not cached.
        raise TypeError(f"not cached: {kind.__name__}")
    return value


def _optional_shape(value: torch.Tensor | None) -> torch.Size | None:
    return None if value is None else value.shape


# How a positional argument of each schema type becomes part of a key: None keeps the value
# itself (a hashable scalar); a type not listed goes through `shape_key`, which looks.
_CONVERSIONS: dict[str, Callable[[Any], Any] | None] = {
    "Tensor": _SHAPE,
    "Optional[Tensor]": _optional_shape,
    "List[int]": tuple,
    "List[bool]": tuple,
    "List[float]": tuple,
    "int": None,
    "bool": None,
    "float": None,
    "str": None,
    "Optional[int]": None,
    "Optional[bool]": None,
    "Optional[float]": None,
    "Optional[str]": None,
}


def key_by_looking(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """`shape_key` of each positional argument, whatever it is."""
    return tuple(map(shape_key, args))


def _tensor_shapes(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(map(_SHAPE, args))


def key_for_schema(
    operation: torch._ops.OpOverload,
) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The function that gives `shape_key` of an operation's positional arguments, made for
    its schema: one conversion per position, without looking at the values.

    The dispatcher gives each position what its schema says (a tensor for `Tensor`, a list
    of integers for `int[]`). A value that cannot be keyed (a symbolic size) fails as it
    fails `shape_key`, with TypeError or AttributeError.
    """
    conversions = tuple(
        _CONVERSIONS.get(str(argument.type), shape_key)
        for argument in operation._schema.arguments
        if not argument.kwarg_only
    )
    if all(conversion is _SHAPE for conversion in conversions):
        return _tensor_shapes
    most = len(conversions)

    def key(args: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(args) > most:  # more than the schema has: key every value by looking at it
            return key_by_looking(args)
        # Fewer values than the schema has positions where trailing defaults are left out.
        return tuple(
            [
                value if conversion is None else conversion(value)
                for conversion, value in zip(conversions, args, strict=False)
            ]
        )

    return key
