"""FLOP formulas for the fused CPU kernels torch has none for, equal to their decompositions'.

On the CPU torch runs an LSTM, GRU or RNN layer as one `aten.mkldnn_rnn_layer`, attention
as `aten._scaled_dot_product_flash_attention_for_cpu`, and an eval-mode attention or encoder
layer under `torch.no_grad()` as `aten._native_multi_head_attention` or
`aten._transformer_encoder_layer_fwd`. On meta the same modules run the operations these
kernels fuse (matrix products, each with a torch formula). Each formula here counts what the
kernel computes as torch's formulas count its decomposition (2 FLOPs a multiply-accumulate,
matrix products only, biases and element-wise work not counted), so a CPU trace and a meta
trace give the same FLOPs. torch's own formula wins where a release has one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


def _rnn_layer_flops(
    input: torch.Tensor, weight0: torch.Tensor, weight1: torch.Tensor, *args: Any, **kwargs: Any
) -> int:
    """One layer and direction: each step's input and hidden projections of every gate."""
    steps_times_batch = input.numel() // input.shape[-1]
    return 2 * steps_times_batch * (weight0.numel() + weight1.numel())


def _attention_flops(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any
) -> int:
    """Scores (query x key) and their product with value, for every head; grouped key and
    value heads are broadcast to the query's, as the kernel does."""
    *batch, query_length, width = query.shape
    key_length, value_width = key.shape[-2], value.shape[-1]
    return 2 * math.prod(batch) * query_length * key_length * (width + value_width)


def _multi_head_attention_flops(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    embed_dim: int,
    num_head: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    *args: Any,
    **kwargs: Any,
) -> int:
    """The input projection, the attention of every head, and the output projection."""
    tokens = query.numel() // embed_dim
    batch, query_length = query.shape[0], query.shape[1]
    key_length = key.shape[1]
    projections = 2 * tokens * (qkv_weight.numel() + proj_weight.numel())
    return projections + 2 * batch * query_length * key_length * 2 * embed_dim


def _encoder_layer_flops(
    source: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor,
    norm_weight_2: torch.Tensor,
    norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor,
    ffn_bias_1: torch.Tensor,
    ffn_weight_2: torch.Tensor,
    *args: Any,
    **kwargs: Any,
) -> int:
    """Self-attention as `_multi_head_attention_flops`, then the two feed-forward layers."""
    attention = _multi_head_attention_flops(
        source, source, source, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight
    )
    tokens = source.numel() // embed_dim
    return attention + 2 * tokens * (ffn_weight_1.numel() + ffn_weight_2.numel())


def fused_kernel_formulas() -> dict[Any, Callable[..., int]]:
    """Overload packet -> formula, for the kernels this torch release has."""
    formulas: dict[str, Callable[..., int]] = {
        "mkldnn_rnn_layer": _rnn_layer_flops,
        "_scaled_dot_product_flash_attention_for_cpu": _attention_flops,
        "_native_multi_head_attention": _multi_head_attention_flops,
        "_transformer_encoder_layer_fwd": _encoder_layer_flops,
    }
    return {
        getattr(torch.ops.aten, name): formula
        for name, formula in formulas.items()
        if hasattr(torch.ops.aten, name)
    }
