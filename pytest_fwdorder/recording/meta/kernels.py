"""Answer repeated meta kernels from a cache while a trace runs on the meta device.

A meta kernel reads no values: what it returns (shapes, strides, dtypes) follows from its
tensors' metadata and its other arguments alone. So an operation repeated on the same
metadata, as in a transformer's identical blocks, needs its kernel once; after that, fresh
meta tensors of the recorded layout are the same answer. Many meta kernels are Python
decompositions (layer norm, addmm), and on ViT-H/14 they are most of a meta forward.

Only functional `aten` operations on plain meta tensors are answered: views, in-place and
`out=` operations, random ones and any whose output aliases an input run their kernel every
time, as do operations on tensor subclasses or tensors off meta, and custom operators.
An operation whose schema does not mark an argument it writes (`native_batch_norm` and its
running statistics) can be answered: on meta a write changes no metadata.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_fwdorder.recording.describe import tensors_of

_META = torch.device("meta")
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
# Arguments compared by value in a cache key (with their type: 1, 1.0 and True differ).
_SCALARS = frozenset(
    {int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout}
    | {torch.memory_format}
)
# Tags of operations whose kernel must run every time: random draws, and outputs whose shape
# depends on values (those fail on meta anyway, with the kernel's own message).
_UNCACHEABLE_TAGS = frozenset(
    {
        torch.Tag.nondeterministic_seeded,
        torch.Tag.dynamic_output_shape,
        torch.Tag.data_dependent_output,
        torch.Tag.inplace_view,
    }
)
# What the cache holds for a key whose kernel must run every time.
_RUN_KERNEL = object()


class _TensorLayout(NamedTuple):
    shape: torch.Size
    stride: tuple[int, ...]
    dtype: torch.dtype


class _Several(NamedTuple):
    kind: type  # tuple or list, as the kernel returned them
    items: tuple[_TensorLayout | None, ...]


def meta_kernel_cache() -> AbstractContextManager[object]:
    """The cache as a context manager, or nothing when a dispatch mode is already active.

    A mode of the caller's (a FLOP counter, FakeTensorMode) must see every operation run its
    kernel, so the cache stays out of its way.
    """
    if torch._C._len_torch_dispatch_stack() > 0:
        return nullcontext()
    return MetaKernelCache()


class MetaKernelCache(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """A dispatch mode that runs each meta kernel once per distinct key (see the module)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.layouts: dict[tuple[object, ...], _TensorLayout | _Several | object] = {}
        self.cacheable: dict[torch._ops.OpOverload, bool] = {}

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        cacheable = self.cacheable.get(func)
        if cacheable is None:
            cacheable = self.cacheable[func] = _cacheable(func)
        key = _key(func, args, kwargs) if cacheable else None
        if key is None:
            return func(*args, **kwargs)
        layout = self.layouts.get(key)
        if layout is None:
            output = func(*args, **kwargs)
            self.layouts[key] = _layout_to_repeat(output, args, kwargs)
            return output
        if layout is _RUN_KERNEL:
            return func(*args, **kwargs)
        # The caller's device context is a function mode: creating tensors must not pass
        # through it (it costs microseconds each and adds nothing here).
        with torch._C.DisableTorchFunction():
            return _make(layout)  # type: ignore[arg-type]


def _cacheable(func: torch._ops.OpOverload) -> bool:
    """Whether `func` is a functional aten operation whose outputs are new tensors."""
    if func.namespace != "aten":
        return False
    if _UNCACHEABLE_TAGS.intersection(func.tags):
        return False
    schema = func._schema
    # An alias annotation marks a view, an in-place or an `out=` argument, or a returned input.
    return all(argument.alias_info is None for argument in schema.arguments) and all(
        returned.alias_info is None for returned in schema.returns
    )


def _key(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[object, ...] | None:
    """What the kernel's outputs depend on, or None when the call must not be answered."""
    # Factory operations without a dtype take the default one.
    parts: list[object] = [func, torch.get_default_dtype()]
    try:
        if not _add_parts(parts, args):
            return None
        for name, value in kwargs.items():
            parts.append(name)
            if not _add_parts(parts, (value,)):
                return None
    except RuntimeError:  # a sparse or nested tensor has no strides
        return None
    return tuple(parts)


def _add_parts(parts: list[object], values: tuple[Any, ...] | list[Any]) -> bool:
    for value in values:
        value_type = type(value)
        if value_type in _PLAIN_TENSORS:
            # Values of a tensor off meta could decide an output's shape; conjugate, negative
            # and zero tensors are plain tensors whose kernels behave differently.
            if (
                not value.is_meta
                or value.layout is not torch.strided
                or value.is_conj()
                or value.is_neg()
                or value._is_zerotensor()
            ):
                return False
            parts.append((value.shape, value.stride(), value.dtype, value.storage_offset()))
        elif value_type in _SCALARS:
            parts.append((value_type, value))
        elif value_type is list or value_type is tuple:
            parts.append((value_type, len(value)))
            if not _add_parts(parts, value):
                return False
        else:  # a SymInt, a subclass, anything whose effect the key cannot show
            return False
    return True


def _layout_to_repeat(
    output: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _TensorLayout | _Several | object:
    """The layout of `output` to make again, or `_RUN_KERNEL` when a copy would differ.

    A copy differs when an output shares storage with an input or with another output, is
    not a plain meta tensor with its own storage from offset 0, or when a tensor made from
    the layout would not match it exactly.
    """
    several = type(output) in (tuple, list)
    outputs = list(output) if several else [output]  # type: ignore[call-overload]
    if not outputs:
        return _RUN_KERNEL
    storages = {tensor.untyped_storage()._cdata for tensor in tensors_of((args, kwargs))}
    layouts: list[_TensorLayout | None] = []
    for tensor in outputs:
        if tensor is None and several:
            layouts.append(None)
            continue
        if type(tensor) is not torch.Tensor or not _plain_meta(tensor):
            return _RUN_KERNEL
        storage = tensor.untyped_storage()
        if storage._cdata in storages:
            return _RUN_KERNEL
        storages.add(storage._cdata)
        layout = _TensorLayout(tensor.shape, tensor.stride(), tensor.dtype)
        with torch._C.DisableTorchFunction():
            copy = _make(layout)
        if copy.untyped_storage().nbytes() != storage.nbytes():
            return _RUN_KERNEL
        layouts.append(layout)
    if several:
        return _Several(type(output), tuple(layouts))
    return layouts[0]


def _plain_meta(tensor: torch.Tensor) -> bool:
    return bool(
        tensor.is_meta
        and tensor.layout is torch.strided
        and tensor.storage_offset() == 0
        and not tensor.requires_grad
        and not (tensor.is_conj() or tensor.is_neg() or tensor._is_zerotensor())
    )


def _make(layout: _TensorLayout | _Several) -> Any:
    if type(layout) is _TensorLayout:
        return torch.empty_strided(layout.shape, layout.stride, dtype=layout.dtype, device=_META)
    several: _Several = layout  # type: ignore[assignment]
    return several.kind(None if item is None else _make(item) for item in several.items)
