"""The public ways to trace: `trace_forward`, `record`, and the `Tracer` behind the fixture."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pytest_fwdorder.errors import EmptyTraceError, MetaTraceError
from pytest_fwdorder.recorder import recording, resolve_model
from pytest_fwdorder.trace import Call, RenderOptions, Trace


@dataclass(frozen=True)
class TensorSpec:
    """A tensor given by shape and dtype only: made as an empty meta tensor on `device='meta'`.

    On a real device it becomes `torch.randn` (floating dtypes) or zeros (other dtypes),
    so the same spec serves meta and real runs.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        if not all(isinstance(size, int) and size >= 0 for size in self.shape):
            raise ValueError(
                f"TensorSpec shape must be non-negative ints, got {self.shape!r}: "
                "write TensorSpec((1, 3, 224, 224))"
            )
        object.__setattr__(self, "shape", tuple(self.shape))

    def materialize(self, device: torch.device | str | None = None) -> torch.Tensor:
        """A tensor of this shape and dtype on `device` (CPU when None)."""
        target = torch.device(device if device is not None else "cpu")
        if target.type == "meta":
            return torch.empty(self.shape, dtype=self.dtype, device=target)
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return torch.randn(self.shape, dtype=self.dtype, device=target)
        return torch.zeros(self.shape, dtype=self.dtype, device=target)


def trace_forward(
    model: nn.Module | Callable[[], nn.Module],
    *args: Any,
    device: torch.device | str | None = None,
    show_devices: bool = False,
    **kwargs: Any,
) -> Trace:
    """Run `model(*args, **kwargs)` once and return the record of every module call.

    `model` may also be a zero-argument function that builds the model: with
    `device='meta'` it is built under `torch.device('meta')`, so no weights are allocated.
    With `device`, inputs (tensors or `TensorSpec`) are placed on it and an existing model
    runs with stand-in parameters there, untouched. `device` and `show_devices` are
    reserved: to pass model keyword arguments of those names, use `record`.

    The model is left as it was: parameters, buffers, training and requires_grad flags,
    grad mode, the random state; no hook stays registered, also when forward raises.
    """
    options = RenderOptions(devices=show_devices)
    root = _build(model, device)
    args = _place(args, device)
    kwargs = _place(kwargs, device)
    with recording(root, options) as recorder:
        try:
            with _running_on(root, device) as run:
                run(*args, **kwargs)
        except Exception as error:
            if device is not None and _is_meta_failure(error, device):
                raise MetaTraceError(_meta_failure_message(error, recorder.calls)) from error
            raise
    return recorder.trace


@contextmanager
def record(
    model: nn.Module,
    *,
    restore_state: bool = True,
    allow_empty: bool = False,
    show_devices: bool = False,
) -> Iterator[Trace]:
    """Record every call of `model`'s modules made in this thread inside the block.

    Yields a `Trace` that holds the calls once the block ends (several forwards, a generate
    loop): hooks keep raw records while the block runs, and the calls are built at its end.
    Nothing after the block is recorded. With `restore_state` (the default) the model's
    parameters, buffers and flags are put back at the end, as `trace_forward` does. A block
    that never calls the model raises `EmptyTraceError` unless `allow_empty`.
    """
    root = resolve_model(model, entry_point="record")
    options = RenderOptions(devices=show_devices)
    with recording(root, options, restore_state=restore_state) as recorder:
        yield recorder.trace
    trace = recorder.trace
    if not trace.calls and not allow_empty:
        raise EmptyTraceError(
            f"record({trace.root_type}) saw no call of the model or its modules inside the "
            "block: call the model itself inside the `with` block (not a copy of it), or "
            "pass allow_empty=True if an empty trace is what you mean to test"
        )


@dataclass(frozen=True)
class Tracer:
    """`trace_forward` and `record` with defaults: what the `forward_trace` fixture is.

    Defaults come from the `fwdorder` marker and the `fwdorder_*` ini options; keyword
    arguments given to a call win over them.
    """

    device: str | None = None
    show_devices: bool = False

    def __call__(
        self, model: nn.Module | Callable[[], nn.Module], *args: Any, **kwargs: Any
    ) -> Trace:
        kwargs.setdefault("device", self.device)
        kwargs.setdefault("show_devices", self.show_devices)
        return trace_forward(model, *args, **kwargs)

    def record(
        self,
        model: nn.Module,
        *,
        restore_state: bool = True,
        allow_empty: bool = False,
    ) -> AbstractContextManager[Trace]:
        """Like `pytest_fwdorder.record`, with this tracer's defaults."""
        return record(
            model,
            restore_state=restore_state,
            allow_empty=allow_empty,
            show_devices=self.show_devices,
        )


def _build(
    model: nn.Module | Callable[[], nn.Module], device: torch.device | str | None
) -> nn.Module:
    # A method bound to a module (`model.forward`) is a mistake resolve_model explains; any
    # other callable, a bound method of a builder object included, builds the model.
    if isinstance(model, nn.Module) or not callable(model) or _is_module_method(model):
        return resolve_model(model, entry_point="trace_forward")
    try:
        with torch.device(device) if device is not None else nullcontext():
            built = model()
    except Exception as error:
        if device is not None and _is_meta_failure(error, device):
            name = getattr(model, "__qualname__", repr(model))
            raise MetaTraceError(
                f"building the model on the meta device failed in {name!r}: "
                f"{type(error).__name__}: {error}. The builder itself needs real values (it "
                "computes sizes with .item(), say). Build the model on the CPU and pass it with "
                "device='meta' instead: its weights are replaced by meta stand-ins for the trace."
            ) from error
        raise
    if not isinstance(built, nn.Module):
        raise TypeError(
            f"trace_forward called the builder {getattr(model, '__name__', model)!r} and got "
            f"{type(built).__name__!r}, not an nn.Module: the builder must return the model"
        )
    return resolve_model(built, entry_point="trace_forward")


def _is_module_method(value: object) -> bool:
    return isinstance(getattr(value, "__self__", None), nn.Module)


def _place(value: Any, device: torch.device | str | None) -> Any:
    """Materialize TensorSpecs, and move tensors to `device` when one is given."""
    if isinstance(value, TensorSpec):
        return value.materialize(device)
    if isinstance(value, torch.Tensor):
        return value if device is None else value.to(device)
    if isinstance(value, tuple):
        items = [_place(item, device) for item in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else tuple(items)
    if isinstance(value, list):
        return [_place(item, device) for item in value]
    if isinstance(value, dict):
        return {key: _place(item, device) for key, item in value.items()}
    return value


@contextmanager
def _running_on(
    root: nn.Module, device: torch.device | str | None
) -> Iterator[Callable[..., object]]:
    """A function that calls `root` on `device`, with stand-in weights if they live elsewhere."""
    if device is None:
        yield root
        return
    target = torch.device(device)
    tensors = {**dict(root.named_parameters()), **dict(root.named_buffers())}
    elsewhere = {name for name, tensor in tensors.items() if tensor.device.type != target.type}
    with target:
        if not elsewhere:
            yield root
            return
        if target.type == "meta":
            stand_ins = {name: torch.empty_like(tensors[name], device=target) for name in elsewhere}
        else:
            stand_ins = {name: tensors[name].to(target) for name in elsewhere}

        def run(*args: Any, **kwargs: Any) -> object:
            return torch.func.functional_call(root, stand_ins, args, kwargs)

        yield run


def _is_meta_failure(error: Exception, device: torch.device | str) -> bool:
    if torch.device(device).type != "meta":
        return False
    return isinstance(error, NotImplementedError) or "meta" in str(error).lower()


def _meta_failure_message(error: Exception, calls: list[Call]) -> str:
    failing = [call for call in calls if call.raised]
    if failing:
        innermost = max(failing, key=lambda call: call.depth)
        where = (
            f"in {innermost.display_path} ({innermost.module_type}, call {innermost.nth} of "
            f"that module, call {innermost.index + 1} of the trace)"
        )
    else:
        where = "before any module call"
    return (
        f"forward needs real tensor values {where}: {type(error).__name__}: {error}. "
        "Meta tensors have shapes but no data, so .item(), data-dependent control flow and "
        "ops without a meta kernel cannot run on them. Trace on a real device instead "
        "(device='cpu', or leave device unset)."
    )
