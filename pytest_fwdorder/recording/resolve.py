"""The model an entry point was given: check it is a module, unwrap compile and DataParallel.

What `trace_forward`, `record` and the equivalence checks do with their model argument
before anything is hooked (tracing/forward.py, the entry points' module, asks).
"""

from __future__ import annotations

import torch
from torch import nn

from pytest_fwdorder.errors import UnwrappedModelWarning, warn_at_caller
from pytest_fwdorder.recording.distributed import (
    class_swapped_modules,
    swapped_classes_message,
    user_class_name,
)


def resolve_model(model: object, *, entry_point: str) -> nn.Module:
    """Return the module to trace, unwrapping torch.compile and DataParallel wrappers.

    Raises TypeError for anything that is not an `nn.Module` or is a TorchScript module,
    whose calls never reach Python hooks.
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(
            f"{entry_point} cannot trace a TorchScript module ({type(model).__name__}): "
            "scripted code never calls Python forward hooks. Trace the nn.Module you "
            "scripted, before torch.jit.script / torch.jit.trace."
        )
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{entry_point} expected an nn.Module, got {type(model).__name__!r}"
            f"{_not_a_module_hint(model, entry_point)}"
        )
    wrapped = _unwrap(model)
    if wrapped is not model:
        warn_at_caller(
            f"{entry_point} traced the module inside {type(model).__name__} "
            f"({user_class_name(wrapped)}); paths are relative to it and the wrapper's own "
            "machinery (compiled graphs, replicas) is not part of the trace",
            UnwrappedModelWarning,
        )
    if swapped := class_swapped_modules(wrapped):  # FSDP2: FSDPLinear shown as Linear
        message = swapped_classes_message(entry_point, wrapped, swapped)
        warn_at_caller(message, UnwrappedModelWarning)
    return wrapped


def _not_a_module_hint(model: object, entry_point: str) -> str:
    if isinstance(model, torch.Tensor):
        return f": the model comes first, then its inputs: {entry_point}(model, *inputs)"
    if isinstance(model, type) and issubclass(model, nn.Module):
        return f": that is the class; pass an instance ({model.__name__}(...))"
    if isinstance(getattr(model, "__self__", None), nn.Module):
        return ": pass the model, not its forward method"
    if callable(model):
        return (
            ": to trace a model built by a function, pass a zero-argument builder to "
            "trace_forward (or call it yourself); to trace a function, wrap it in an nn.Module"
        )
    return ""


def _unwrap(model: nn.Module) -> nn.Module:
    inner = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
    if isinstance(inner, nn.Module):
        return _unwrap(inner)
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return _unwrap(model.module)
    return model
