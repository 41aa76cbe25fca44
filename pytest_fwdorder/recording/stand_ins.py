"""Stand-ins on the trace's device for parameters and buffers that live elsewhere (`device=`).

A meta trace of a CPU model swaps each tensor for a meta one of the same shape for the
length of the trace, and puts every original back at its end.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pytest_fwdorder.errors import MetaTraceError
from pytest_fwdorder.recording.model_index import ModelIndex
from pytest_fwdorder.recording.module_facts import is_uninitialized


def check_stand_ins_possible(index: ModelIndex, device: torch.device) -> None:
    """Fail before anything runs if a lazy parameter or buffer cannot get a stand-in."""
    for module in index.python_modules:
        for kind, tensors in (("parameter", module._parameters), ("buffer", module._buffers)):
            for name, value in tensors.items():
                if (
                    value is not None
                    and is_uninitialized(value)
                    and value.device.type != device.type
                ):
                    path = index.entries[id(module)].path
                    full_name = f"{path}.{name}" if path else name
                    message = (
                        f"lazy {kind} {full_name!r} is not initialized yet, so it has no shape "
                        f"to give a stand-in on {device.type!r}: run one forward on the "
                        "model's own device first (that initializes it), or leave device unset"
                    )
                    if device.type == "meta":
                        raise MetaTraceError(message)
                    raise ValueError(message)


class StandIns:
    """Stand-ins on a device for parameters and buffers that live elsewhere, and the way back.

    One stand-in per tensor object, so tied weights stay tied. Meta stand-ins hold no
    memory; on a real device they are copies. `remove` puts back every original swapped so
    far, also after a swap that failed halfway.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.by_tensor: dict[int, torch.Tensor] = {}
        self.swapped: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def install(self, module: nn.Module) -> None:
        """Swap one module's own tensors (not its children's)."""
        tensor_dicts: tuple[dict[str, Any], ...] = (module._parameters, module._buffers)
        for tensors in tensor_dicts:
            elsewhere = [
                name
                for name, value in tensors.items()
                if value is not None and value.device.type != self.device.type
            ]
            if not elsewhere:
                continue
            self.swapped.append((tensors, dict(tensors)))
            for name in elsewhere:
                tensors[name] = self._stand_in_for(tensors[name])

    def remove(self) -> None:
        for tensors, original in reversed(self.swapped):
            tensors.clear()
            tensors.update(original)
        self.swapped.clear()

    def _stand_in_for(self, tensor: torch.Tensor) -> torch.Tensor:
        found = self.by_tensor.get(id(tensor))
        if found is None:
            with torch.no_grad():
                data = (
                    torch.empty_like(tensor, device=self.device)
                    if self.device.type == "meta"
                    else tensor.detach().to(self.device, copy=True)
                )
            if isinstance(tensor, nn.Parameter):
                found = nn.Parameter(data, requires_grad=tensor.requires_grad)
            else:
                found = data
            self.by_tensor[id(tensor)] = found
        return found
