"""What the costs facet's mode keeps of an operation's decomposition, to count it again
without running it again: an operation without a FLOP formula is counted through the
operations its decomposition runs (as `FlopCounterMode` counts it), and the same arguments
(shapes, strides, dtypes, devices, grad mode, the other values) decompose the same way.

The first run decomposes; a later run with the same key runs the operation's own kernel, as
torch runs it without costs, and adds what the first run counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

import torch


class Decomposition(NamedTuple):
    """What one decomposition counted, in the call it ran in."""

    flops: int
    uncounted: tuple[tuple[str, int], ...]  # operation name -> how many times it ran
    # Its outputs after the first are statistics left out of the saved bytes: what an
    # operation it decomposed into (eval-mode batch norm's) marked, passed on unchanged.
    statistics: bool


# A decomposition that cannot be repeated from its figures (it counted into another call, or
# marked storages other than its own outputs'): it is decomposed at every run.
NOT_REPEATABLE = "not repeatable"
# An operation whose `decompose` gave NotImplemented for these arguments.
NOT_DECOMPOSED = "not decomposed"


_Key = TypeVar("_Key")


def added_up(totals: dict[_Key, int], counts: Iterable[tuple[_Key, int]]) -> None:
    """Add each count to its key's total in `totals`."""
    for key, count in counts:
        totals[key] = totals.get(key, 0) + count


def decomposition_key(
    operation: object, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> tuple[Any, ...] | None:
    """The key a decomposition is kept by, or None for arguments that cannot be keyed
    (symbolic sizes, an unhashable value, a container other than tuple, list and dict)."""
    try:
        key = (
            id(operation),
            torch.is_grad_enabled(),
            tuple(map(argument_key, args)),
            argument_key(kwargs or {}),
        )
        hash(key)
    except (TypeError, RuntimeError, NotImplementedError):
        return None
    return key


def argument_key(value: Any) -> Any:
    """`value` as part of a decomposition key: a tensor by everything a decomposition may
    branch on (its class, shape, strides, dtype, device, layout and whether it requires grad),
    another value by its class and itself."""
    if isinstance(value, torch.Tensor):
        return (
            type(value),
            value.shape,
            value.stride(),
            value.dtype,
            value.device,
            value.layout,
            value.requires_grad,
        )
    kind = type(value)
    if kind is tuple or kind is list:
        return (kind, *map(argument_key, value))
    if kind is dict:
        return (kind, *((name, argument_key(item)) for name, item in value.items()))
    if isinstance(value, (tuple, list, dict)) and kind is not torch.Size:
        raise TypeError(f"not keyed: {kind.__name__}")
    return (kind, value)


def kept_decomposition(
    not_decomposed: bool,
    counted: tuple[dict[int, int], dict[str, int], int],
    marked: set[int],
    statistics: set[int],
) -> Decomposition | str:
    """What to keep of a first decomposition: `counted` is what it counted (FLOPs by call
    number, uncounted operations by name) and the number of the call it ran in; `marked` the
    storages it left out of the saved bytes, `statistics` those of its outputs after the first.
    """
    flops, uncounted, number = counted
    if not_decomposed:
        return NOT_DECOMPOSED
    if not set(flops) <= {number} or (marked and marked != statistics):
        return NOT_REPEATABLE
    return Decomposition(sum(flops.values()), tuple(uncounted.items()), bool(marked))
