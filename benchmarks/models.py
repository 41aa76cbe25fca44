"""Models the benchmarks measure: a dispatch-bound chain of tiny modules and a Llama-shaped decoder."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


def tiny_modules(pairs: int = 400, width: int = 16) -> nn.Module:
    """`pairs` Linear+ReLU pairs: 2 * pairs + 1 calls of modules that do almost no work."""
    layers: list[nn.Module] = []
    for _ in range(pairs):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, model_size: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(model_size, model_size, bias=False)
        self.k_proj = nn.Linear(model_size, model_size, bias=False)
        self.v_proj = nn.Linear(model_size, model_size, bias=False)
        self.o_proj = nn.Linear(model_size, model_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, size = x.shape
        shape = (batch, length, self.heads, size // self.heads)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        out = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, size))


class MLP(nn.Module):
    def __init__(self, model_size: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(model_size, hidden, bias=False)
        self.up_proj = nn.Linear(model_size, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, model_size, bias=False)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, model_size: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.input_norm = RMSNorm(model_size)
        self.attention = Attention(model_size, heads)
        self.post_attention_norm = RMSNorm(model_size)
        self.mlp = MLP(model_size, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.input_norm(x))
        return x + self.mlp(self.post_attention_norm(x))


class Decoder(nn.Module):
    """Llama-shaped: by default 32 layers, d_model 4096, 32 heads, MLP 11008, vocab 32000 (6.7B)."""

    def __init__(
        self,
        layers: int = 32,
        model_size: int = 4096,
        heads: int = 32,
        hidden: int = 11008,
        vocabulary: int = 32000,
    ) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocabulary, model_size)
        self.layers = nn.ModuleList(DecoderLayer(model_size, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(model_size)
        self.lm_head = nn.Linear(model_size, vocabulary, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))
