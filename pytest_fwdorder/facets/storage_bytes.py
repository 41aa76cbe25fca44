"""The storages a recording's bytes are counted in: the model's tensors and what autograd saves.

Each storage is counted once, however many tensors (views, tied parameters) live in it. The
costs facet's counting (cost_counting.py) reads the model's storages before forward and the
saved ones while it runs.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Sequence
from itertools import chain, repeat
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]


class SavedTensors:
    """The storages autograd saves for backward while a recording runs, each counted once."""

    def __init__(self, model_storages: set[int]) -> None:
        self.thread_id = threading.get_ident()
        # The storages not counted: the model's own, and those left out (`leave_out`).
        self.left_out = model_storages
        self.storages: dict[int, int] = {}
        # Saved and left-out tensors, held for the length of the recording so that their
        # storage keys are not taken by a later tensor (a saved tensor stays alive while the
        # graph does; a left-out one autograd did not keep is freed at once).
        self.keep_alive: list[torch.Tensor] = []
        self.grad_enabled = torch.is_grad_enabled()

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if threading.get_ident() != self.thread_id or tensor.layout is not torch.strided:
            return tensor
        key = storage_key(tensor)
        if key not in self.left_out and key not in self.storages:
            self.storages[key] = tensor.untyped_storage().nbytes()
            self.keep_alive.append(tensor)
        return tensor

    def leave_out(self, tensors: Sequence[torch.Tensor]) -> list[int]:
        """Leave the storages of `tensors` out of the saved bytes; gives their keys."""
        keys = [storage_key(tensor) for tensor in tensors]
        self.left_out.update(keys)
        self.keep_alive.extend(tensors)
        return keys

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @property
    def saved_bytes(self) -> int | None:
        if not self.storages and not self.grad_enabled:
            return None
        return sum(self.storages.values())


def storage_key(tensor: torch.Tensor) -> int:
    """Which storage a tensor's elements live in: the same for views and tied tensors.

    The address of the storage object, not of its data, which is 0 on meta for all of them.
    """
    key: int = tensor.untyped_storage()._cdata
    return key


def model_storages(modules: Sequence[nn.Module]) -> dict[int, int]:
    """Each storage these modules' parameters and buffers live in -> their bytes, once each.

    `modules` is the recorder's index of the model (each module once, in `modules()`'s
    order), so the model is not walked again. A storage's bytes are those of the first
    tensor found in it (elements x element size), module by module, parameters before
    buffers; lazy tensors, which have no elements yet, are left out. Each step is a `map`
    over every tensor at once: this runs at every trace with costs.
    """
    tensors: list[Any] = list(
        filter(
            _IS_NOT_NONE,
            chain.from_iterable(map(_VALUES, chain.from_iterable(map(_TENSOR_DICTS, modules)))),
        )
    )
    if not all(map(operator.is_, map(_LAYOUT, tensors), repeat(torch.strided))) or any(
        issubclass(kind, UninitializedTensorMixin) for kind in set(map(type, tensors))
    ):
        tensors = [
            tensor
            for tensor in tensors
            if not isinstance(tensor, UninitializedTensorMixin) and tensor.layout is torch.strided
        ]
    keys = list(map(_CDATA, map(_STORAGE, tensors)))
    sizes = list(map(_NBYTES, tensors))
    keys.reverse()  # so that the first tensor found in a storage is the last one kept
    sizes.reverse()
    return dict(zip(keys, sizes, strict=True))


_IS_NOT_NONE = functools.partial(operator.is_not, None)
_TENSOR_DICTS = operator.attrgetter("_parameters", "_buffers")
_VALUES = operator.methodcaller("values")  # a TorchScript module's are wrappers, not dicts
_LAYOUT = operator.attrgetter("layout")
_STORAGE = operator.methodcaller("untyped_storage")
_CDATA = operator.attrgetter("_cdata")
_NBYTES = operator.attrgetter("nbytes")
