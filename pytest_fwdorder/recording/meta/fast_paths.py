"""Meta traces refused where torch's eval fast path would run on the CPU but cannot on meta.

`nn.TransformerEncoderLayer` and `nn.TransformerEncoder` check a list of conditions at each
call and, when all hold, run one fused kernel instead of their usual code (a layer then calls
none of its submodules; an encoder packs its input into a nested tensor). One condition is
the device: cpu, cuda, xpu or a private backend, never meta. So under `torch.no_grad()` in
eval mode a CPU trace records 1 call where a meta trace records 9, with no error. Following
the fast path on meta would mean running kernels torch declines there; refusing is what stays
true on every torch release: `fast_paths_refused` asks before each call of those classes,
with the fast path's device-free conditions as torch 2.8 to 2.15 check them, and raises a
`MetaTraceError` when all hold. A condition it cannot see (an argument it cannot read) is
taken as holding, so it may refuse a call the CPU would not speed up; never the reverse.

`nn.MultiheadAttention` has a fast path too (`torch._native_multi_head_attention`), but it
calls no submodule on either path and gives outputs of the same shapes, so its golden is the
same on both devices; `costs=True` counts that kernel's FLOPs by formula (cost_counting.py).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.utils._device import DeviceContext

from pytest_fwdorder.errors import MetaTraceError

# An argument the pre-hook cannot read (given by keyword where the frame does not show it).
_UNSEEN: Any = object()


@contextmanager
def fast_paths_refused(device: torch.device | str | None) -> Iterator[None]:
    """On meta, raise `MetaTraceError` at a call the CPU would run on torch's fast path.

    A global forward pre-hook, in this thread only, removed on exit; off the meta device
    nothing is installed.
    """
    if device is None or torch.device(device).type != "meta":
        yield
        return
    thread = threading.get_ident()

    def refuse_fast_path(module: nn.Module, args: tuple[Any, ...]) -> None:
        check = _check_for(type(module))
        if check is None or threading.get_ident() != thread:
            return
        kernel = check(module, args, _keyword_arguments())
        if kernel is not None:
            raise MetaTraceError(fast_path_message(module, kernel))

    handle = register_module_forward_pre_hook(refuse_fast_path)
    try:
        yield
    finally:
        handle.remove()


def fast_path_message(module: nn.Module, kernel: str) -> str:
    """What the refusal says: the class, the fused kernel, and three ways around it."""
    return (
        f"{type(module).__name__} may take torch's eval fast path on the CPU "
        f"({kernel}, one fused kernel{_skipped_submodules(module)}) but never on meta, so a "
        "meta golden would differ from the CPU's without a word. Trace with the fast path "
        "off (torch.backends.mha.set_fastpath_enabled(False) around the trace), in train "
        "mode, or with grad enabled; or trace on the CPU (leave device unset)."
    )


def _skipped_submodules(module: nn.Module) -> str:
    return ", skipping its submodules" if any(True for _ in module.children()) else ""


def _keyword_arguments() -> Mapping[str, Any] | None:
    """The call's keyword arguments, read from `Module._call_impl`'s frame; None if hidden.

    Global forward pre-hooks receive `(module, args)` only; their caller holds `kwargs`.
    """
    frame = sys._getframe(2)  # this function's caller is the hook, whose caller is torch's
    kwargs = frame.f_locals.get("kwargs")
    return kwargs if isinstance(kwargs, dict) else None


def _argument(
    args: tuple[Any, ...], kwargs: Mapping[str, Any] | None, position: int, name: str
) -> Any:
    if len(args) > position:
        return args[position]
    if kwargs is None:
        return _UNSEEN
    return kwargs.get(name)


def _fast_path_allowed() -> bool:
    """The switches every fast path checks first: torch's own, and autocast."""
    enabled = getattr(torch.backends.mha, "get_fastpath_enabled", lambda: True)()
    return bool(enabled) and not torch.is_autocast_enabled()


def _grad_blocks(tensors: tuple[Any, ...]) -> bool:
    """The fast path's last conditions: no torch function (a mode or a subclass), no grad."""
    present = tuple(tensor for tensor in tensors if isinstance(tensor, torch.Tensor))
    if _torch_function_active(present):
        return True
    return torch.is_grad_enabled() and any(tensor.requires_grad for tensor in present)


def _torch_function_active(tensors: tuple[torch.Tensor, ...]) -> bool:
    """`torch.overrides.has_torch_function(tensors)` as a CPU trace would see it.

    A meta trace runs inside `torch.device("meta")`, a torch function mode of its own that
    the CPU trace does not have; any other mode, or a tensor subclass that overrides
    `__torch_function__`, makes the CPU decline the fast path.
    """
    modes: list[object] = getattr(torch.overrides, "_get_current_function_mode_stack", lambda: [])()
    if any(not isinstance(mode, DeviceContext) for mode in modes):
        return True
    return any(_overrides_torch_function(type(tensor)) for tensor in tensors)


def _overrides_torch_function(tensor_type: type) -> bool:
    function = getattr(tensor_type, "__torch_function__", None)
    return getattr(function, "__func__", function) not in _PLAIN_TORCH_FUNCTIONS


# torch.Tensor's own __torch_function__ and the one nn.Parameter and buffers disable it with.
_PLAIN_TORCH_FUNCTIONS = (
    torch.Tensor.__torch_function__.__func__,  # type: ignore[attr-defined]
    torch._C._disabled_torch_function_impl,
)


def _is_batched(value: Any) -> bool:
    return value is _UNSEEN or (isinstance(value, torch.Tensor) and value.dim() == 3)


def _encoder_layer_fast_path(
    module: nn.TransformerEncoderLayer, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> str | None:
    """`nn.TransformerEncoderLayer.forward`'s conditions for its fused kernel."""
    source = _argument(args, kwargs, 0, "src")
    attention = module.self_attn
    if not _fast_path_allowed() or not _is_batched(source):
        return None
    if (
        module.training
        or not attention.batch_first
        or attention.in_proj_bias is None
        or not attention._qkv_same_embed_dim
        or not getattr(module, "activation_relu_or_gelu", True)
        or module.norm1.eps != module.norm2.eps
        or attention.num_heads % 2 == 1
    ):
        return None
    if isinstance(source, torch.Tensor) and source.is_nested:
        return None
    if any(
        len(getattr(inner, "_forward_hooks", {})) + len(getattr(inner, "_forward_pre_hooks", {}))
        for inner in module.modules()
    ):
        return None  # hooks on the layer (the user's, or a trace's own) make the CPU decline
    if _grad_blocks((source, *_layer_weights(module))):
        return None
    return "torch._transformer_encoder_layer_fwd"


def _encoder_fast_path(
    module: nn.TransformerEncoder, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> str | None:
    """`nn.TransformerEncoder.forward`'s conditions for packing its input as a nested tensor
    (its layers then get a nested tensor and no padding mask on the CPU)."""
    source = _argument(args, kwargs, 0, "src")
    mask = _argument(args, kwargs, 1, "mask")
    padding_mask = _argument(args, kwargs, 2, "src_key_padding_mask")
    first = module.layers[0] if len(module.layers) else None
    if not isinstance(first, nn.TransformerEncoderLayer):
        return None
    if not _fast_path_allowed() or not getattr(module, "use_nested_tensor", False):
        return None
    if first.training or not _is_batched(source) or padding_mask is None:
        return None
    if (isinstance(source, torch.Tensor) and source.is_nested) or (
        mask is not None and mask is not _UNSEEN
    ):
        return None
    if _grad_blocks((source, *_layer_weights(first))):
        return None
    return "torch._nested_tensor_from_mask"


def _layer_weights(layer: nn.TransformerEncoderLayer) -> tuple[Any, ...]:
    """The weights an encoder layer's fused kernel reads: both fast paths decline when one
    requires grad or overrides `__torch_function__`."""
    attention = layer.self_attn
    return (
        attention.in_proj_weight,
        attention.in_proj_bias,
        attention.out_proj.weight,
        attention.out_proj.bias,
        layer.norm1.weight,
        layer.norm1.bias,
        layer.norm2.weight,
        layer.norm2.bias,
        layer.linear1.weight,
        layer.linear1.bias,
        layer.linear2.weight,
        layer.linear2.bias,
    )


def _check_for(module_type: type) -> Any:
    """`_find_check`, remembered per class: it runs at every module call of a meta trace."""
    if module_type not in _CHECK_BY_CLASS:
        _CHECK_BY_CLASS[module_type] = _find_check(module_type)
    return _CHECK_BY_CLASS[module_type]


_CHECK_BY_CLASS: dict[type, Any] = {}


def _find_check(module_type: type) -> Any:
    """The check of the class whose forward this module runs; None for any other module."""
    for base in module_type.__mro__:
        check = _CHECKS.get(base)
        if check is not None:
            same_forward = getattr(module_type, "forward", None) is getattr(base, "forward", None)
            return check if same_forward else None
    return None


_CHECKS: dict[type, Any] = {
    nn.TransformerEncoderLayer: _encoder_layer_fast_path,
    nn.TransformerEncoder: _encoder_fast_path,
}
