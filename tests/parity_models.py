"""A LLaMA written from scratch, as a port would be: fused qkv, other names, its own rotary
embedding; with switches for the two bugs a port test must find."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

# The path map from transformers' LlamaForCausalLM to `ScratchLlama`.
LLAMA_PATH_MAP: dict[str | tuple[str, ...], str] = {
    "model.embed_tokens": "tok_embeddings",
    "model.layers.{i}.input_layernorm": "layers.{i}.attn_norm",
    (
        "model.layers.{i}.self_attn.q_proj",
        "model.layers.{i}.self_attn.k_proj",
        "model.layers.{i}.self_attn.v_proj",
    ): "layers.{i}.attn.qkv",
    "model.layers.{i}.self_attn.o_proj": "layers.{i}.attn.out",
    "model.layers.{i}.self_attn": "layers.{i}.attn",
    "model.layers.{i}.post_attention_layernorm": "layers.{i}.ffn_norm",
    "model.layers.{i}.mlp": "layers.{i}.ffn",
    "model.layers.{i}": "layers.{i}",
    "model.norm": "norm",
    "lm_head": "output",
}

TINY_LLAMA = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.2,
}


def tiny_llama_reference(dtype: torch.dtype = torch.float32) -> nn.Module:
    """transformers' LlamaForCausalLM of TINY_LLAMA, built in code (nothing downloaded)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**TINY_LLAMA, use_cache=False, attn_implementation="eager")
    return transformers.LlamaForCausalLM(config).to(dtype).eval()


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In float32 at least, as the reference does: a norm in bf16 loses too much.
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class Rotary(nn.Module):
    """cos and sin of each position, for a rotation of the two halves of each head."""

    def __init__(self, head_size: int, base: float = 10000.0) -> None:
        super().__init__()
        steps = torch.arange(0, head_size, 2, dtype=torch.float64) / head_size
        self.register_buffer("inverse_frequency", 1.0 / base**steps, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        angles = positions[:, None].double() * self.inverse_frequency[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool
) -> torch.Tensor:
    if interleaved:  # the bug: GPT-J's pairs (0, 1), (2, 3) ... where LLaMA rotates halves
        first, second = x[..., 0::2], x[..., 1::2]
        turned = torch.stack((-second, first), dim=-1).flatten(-2)
    else:
        half = x.shape[-1] // 2
        turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, interleaved: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_size = heads, kv_heads, hidden // heads
        self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * self.head_size, bias=False)
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.interleaved = interleaved

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q_size, kv_size = self.heads * self.head_size, self.kv_heads * self.head_size
        q, k, v = self.qkv(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(batch, length, self.heads, self.head_size).transpose(1, 2)
        k = k.view(batch, length, self.kv_heads, self.head_size).transpose(1, 2)
        v = v.view(batch, length, self.kv_heads, self.head_size).transpose(1, 2)
        q = rotate(q, cos, sin, interleaved=self.interleaved)
        k = rotate(k, cos, sin, interleaved=self.interleaved)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_size)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        weights = scores.float().softmax(-1).to(q.dtype)
        mixed = (weights @ v).transpose(1, 2).reshape(batch, length, -1)
        return self.out(mixed)


class FeedForward(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, settings: dict[str, Any], interleaved: bool, residual: bool) -> None:
        super().__init__()
        hidden = settings["hidden_size"]
        self.attn_norm = RMSNorm(hidden, settings["rms_norm_eps"])
        self.attn = Attention(
            hidden, settings["num_attention_heads"], settings["num_key_value_heads"], interleaved
        )
        self.ffn_norm = RMSNorm(hidden, settings["rms_norm_eps"])
        self.ffn = FeedForward(hidden, settings["intermediate_size"])
        self.residual = residual

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        out = self.ffn(self.ffn_norm(x))
        return x + out if self.residual else out  # the bug: the residual forgotten


class ScratchLlama(nn.Module):
    """LLaMA from scratch. `interleaved_rotary_in` and `no_residual_in` name the layers
    that get the bugs."""

    def __init__(
        self,
        settings: dict[str, Any] = TINY_LLAMA,
        *,
        interleaved_rotary_in: tuple[int, ...] = (),
        no_residual_in: tuple[int, ...] = (),
    ) -> None:
        super().__init__()
        hidden = settings["hidden_size"]
        self.tok_embeddings = nn.Embedding(settings["vocab_size"], hidden)
        self.rotary = Rotary(hidden // settings["num_attention_heads"])
        self.layers = nn.ModuleList(
            Block(settings, number in interleaved_rotary_in, number not in no_residual_in)
            for number in range(settings["num_hidden_layers"])
        )
        self.norm = RMSNorm(hidden, settings["rms_norm_eps"])
        self.output = nn.Linear(hidden, settings["vocab_size"], bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(ids)
        cos, sin = self.rotary(torch.arange(ids.shape[1], device=ids.device), x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))
