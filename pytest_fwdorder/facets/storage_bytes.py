"""The storages a recording's bytes are counted in: the model's tensors and what autograd saves.

Each storage is counted once, however many tensors (views, tied parameters) live in it. The
costs facet's counting (cost_counting.py) reads the model's storages before forward and the
saved ones while it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

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


def model_storages(root: nn.Module) -> dict[int, int]:
    """Each storage the model's parameters and buffers live in -> their bytes, once each.

    A storage's bytes are those of the first tensor found in it (elements x element size);
    lazy tensors, which have no elements yet, are left out.
    """
    storages: dict[int, int] = {}
    keep_first, strided = storages.setdefault, torch.strided
    for module in modules_in_order(root):
        for tensors in (module._parameters, module._buffers):
            if not tensors:
                continue
            for tensor in tensors.values():
                # `is_lazy` and `storage_key` written out: this runs for every tensor.
                if (
                    tensor is None
                    or isinstance(tensor, UninitializedTensorMixin)
                    or tensor.layout is not strided
                ):
                    continue
                keep_first(tensor.untyped_storage()._cdata, tensor.nbytes)
    return storages


def modules_in_order(root: nn.Module) -> list[nn.Module]:
    """`root.modules()`, each once and in its order, without a generator per module.

    `named_modules` recurses through one generator per level and builds every path; for a
    model of many small modules that walk was most of what counting its storages took.
    """
    found: list[nn.Module] = []
    seen: set[int] = set()
    pending: list[nn.Module | None] = [root]
    next_pending, add_pending = pending.pop, pending.extend
    add_found, add_seen = found.append, seen.add
    while pending:
        module = next_pending()
        if module is None or id(module) in seen:  # an empty slot, or a module met before
            continue
        add_seen(id(module))
        add_found(module)
        add_pending(reversed(module._modules.values()))
    return found
