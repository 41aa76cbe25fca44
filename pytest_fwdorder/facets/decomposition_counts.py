"""What an operation's decomposition counted, kept per argument layout for the costs facet.

FlopCounterMode counts an operation without a FLOP formula through its decomposition (batch
norm through `_native_batch_norm_legit_no_training`), which runs as Python at every call:
on ResNet-50 a twentieth of a trace. The operations a decomposition runs, and so what it
counts, follow from its arguments' layouts (shapes, strides, dtypes, devices), its other
arguments, grad mode, the decomposition and the formulas, for formulas that read shapes
alone. `CostMode` decomposes an operation at the first call of each layout and keeps what it
counted here, for the process: a later call of that layout, in this trace or another, runs
the operation's own kernel, as the bare forward does, and adds the same. Counts made with
other formulas (`register_flop_formula` since) are forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from pytest_fwdorder.facets.storage_bytes import storage_key
from pytest_fwdorder.recording.bounded_cache import BoundedCache

# Tensor types whose layout says all a decomposition reads of them: not subclasses, whose
# own dispatch may decompose otherwise.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_SCALARS = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format)


class DecompositionCounts(NamedTuple):
    """What one decomposition added to its call's figures."""

    flops: int
    uncounted: tuple[tuple[str, int], ...]  # operation name -> times counted under "uncounted"
    ignored_outputs: tuple[int, ...]  # positions of outputs whose storages were left out


class KeptCounts(NamedTuple):
    """The counts kept in this process, and the formulas they were counted with."""

    formulas: dict[Any, Any]
    counts: BoundedCache[Any, DecompositionCounts]


# Layouts of a few hundred operations cover a model zoo; each entry is a few hundred bytes.
_KEPT = KeptCounts({}, BoundedCache(4096))
_DECOMPOSITION = torch._C.DispatchKey.CompositeImplicitAutograd


def kept_counts(formulas: Mapping[Any, Any]) -> BoundedCache[Any, DecompositionCounts]:
    """The counts kept for decompositions counted with `formulas`, emptied if they changed."""
    if _KEPT.formulas != formulas:
        _KEPT.counts.clear()
        _KEPT.formulas.clear()
        _KEPT.formulas.update(formulas)
    return _KEPT.counts


def layout_key(
    operation: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> Any:
    """The key under which a decomposition's counts are kept, or None where none is kept.

    None for a tensor subclass, a meta tensor (meta kernels may lack what the decomposition
    gives; meta runs no arithmetic to save) and a value that is not a plain scalar, tensor,
    or list or tuple of them. The decomposition written in Python is part of the key (held,
    so its id is not reused): one registered since is not taken for the old one.
    """
    try:
        key: tuple[Any, ...] = (
            id(operation),
            operation.py_kernels.get(_DECOMPOSITION),
            torch.is_grad_enabled(),
            _layouts(args),
        )
        if kwargs:
            key += tuple((name, _layout(value)) for name, value in kwargs.items())
    except _UnknownLayoutError:
        return None
    return key


class _UnknownLayoutError(Exception):
    """A value whose layout is not known to decide the decomposition alone."""


def _layouts(values: tuple[Any, ...] | list[Any]) -> tuple[Any, ...]:
    return tuple([_layout(value) for value in values])


def _layout(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN_TENSORS:
        if value.is_meta:
            raise _UnknownLayoutError
        return (value.shape, value.stride(), value.dtype, value.device)
    if kind in _SCALARS:
        return value
    if kind is tuple or kind is list:
        return (kind, _layouts(value))
    raise _UnknownLayoutError


def counts_between(
    flops_before: int,
    flops_after: int,
    uncounted_before: Mapping[str, int],
    uncounted_after: Mapping[str, int],
    ignored_storages: list[int],
    output: Any,
) -> DecompositionCounts:
    """What a decomposition added, from the figures before and after it ran.

    `ignored_storages` are the storages it left out; they are kept as positions in its
    `output`, where the operation's own kernel puts its tensors too.
    """
    ignored = set(ignored_storages)
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    return DecompositionCounts(
        flops=flops_after - flops_before,
        uncounted=tuple(
            (name, count - uncounted_before.get(name, 0))
            for name, count in uncounted_after.items()
            if count != uncounted_before.get(name, 0)
        ),
        ignored_outputs=tuple(
            position
            for position, value in enumerate(outputs)
            if isinstance(value, torch.Tensor) and storage_key(value) in ignored
        ),
    )
