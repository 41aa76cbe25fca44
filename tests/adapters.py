"""A PEFT-style LoRA adapter and a small Llama-shaped decoder to put it on, for the tests of
odd blocks and coverage (issue 36). No peft needed: `Linear` below is shaped as
`peft.tuners.lora.layer.Linear` is (same class name, `base_layer`, `lora_A` / `lora_B` /
`lora_dropout` as ModuleDicts keyed by adapter name), so the golden sees what PEFT gives.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch
from torch import nn


class Linear(nn.Module):
    """A LoRA wrapper around a base `nn.Linear`, named as PEFT's `lora.Linear` is."""

    def __init__(self, base_layer: nn.Linear, rank: int = 4, adapter_name: str = "default") -> None:
        super().__init__()
        self.base_layer = base_layer
        self.lora_dropout = nn.ModuleDict({adapter_name: nn.Dropout(0.0)})
        self.lora_A = nn.ModuleDict(
            {adapter_name: nn.Linear(base_layer.in_features, rank, bias=False)}
        )
        self.lora_B = nn.ModuleDict(
            {adapter_name: nn.Linear(rank, base_layer.out_features, bias=False)}
        )
        self.scaling = {adapter_name: 2.0}
        self.active_adapter = adapter_name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = self.active_adapter
        update = self.lora_B[name](self.lora_A[name](self.lora_dropout[name](x)))
        return self.base_layer(x) + update * self.scaling[name]


class Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return self.o_proj(weights @ v)


class DecoderLayer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(width)
        self.self_attn = Attention(width)
        self.post_attention_layernorm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.SiLU(), nn.Linear(2 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """A Llama-shaped decoder: embedding, `layers.N.self_attn.{q,k,v,o}_proj`, a head."""

    def __init__(self, layers: int = 32, width: int = 16, vocabulary: int = 32) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocabulary, width)
        self.layers = nn.ModuleList(DecoderLayer(width) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocabulary, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def add_adapters(model: nn.Module, pattern: str, skip: Iterable[int] = ()) -> nn.Module:
    """Wrap every `nn.Linear` whose path fully matches the regular expression `pattern` in a
    LoRA `Linear`, except in the layers numbered in `skip` (the first number in the path),
    as PEFT's target_modules and layers_to_transform do."""
    skipped = set(skip)
    targets = [
        path
        for path, module in model.named_modules()
        if isinstance(module, nn.Linear)
        and re.fullmatch(pattern, path)
        and next((int(name) for name in path.split(".") if name.isdigit()), None) not in skipped
    ]
    for path in targets:
        parent_path, _, name = path.rpartition(".")
        parent = model.get_submodule(parent_path)
        setattr(parent, name, Linear(getattr(parent, name)))
    return model
