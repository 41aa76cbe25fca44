"""Models the benchmarks measure: a dispatch-bound chain of tiny modules, a Llama-shaped decoder,
and builders that deep-copy their model."""

from __future__ import annotations

import copy

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


class GPT2Attention(nn.Module):
    """GPT-2's attention: one fused qkv projection (`c_attn`), causal SDPA, `c_proj`."""

    def __init__(self, model_size: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(model_size, 3 * model_size)
        self.c_proj = nn.Linear(model_size, model_size)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, size = x.shape
        q, k, v = self.c_attn(x).split(size, dim=2)
        shape = (batch, length, self.heads, size // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        out = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = self.attn_dropout(out)
        return self.resid_dropout(self.c_proj(out.transpose(1, 2).reshape(batch, length, size)))


class GPT2Block(nn.Module):
    def __init__(self, model_size: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(model_size)
        self.attn = GPT2Attention(model_size, heads)
        self.ln_2 = nn.LayerNorm(model_size)
        self.mlp = nn.Sequential(
            nn.Linear(model_size, 4 * model_size),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * model_size, model_size),
            nn.Dropout(0.1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT2(nn.Module):
    """A 2-layer GPT-2-shaped decoder as the tiny configs of Hugging Face tests build it
    (d_model 32, 4 heads, vocabulary 1000, 64 positions), with the LM head tied to the
    token embedding: a model whose calls do little work each."""

    def __init__(
        self, layers: int = 2, model_size: int = 32, heads: int = 4, vocabulary: int = 1000
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocabulary, model_size)
        self.wpe = nn.Embedding(64, model_size)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(GPT2Block(model_size, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(model_size)
        self.lm_head = nn.Linear(model_size, vocabulary, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def deep_copied_batch_norms(layers: int) -> nn.Module:
    """Issue 39's builder: `layers` BatchNorm1d(4) in a Sequential, returned as a deep copy.

    Each buffer's copy is a torch call handed deepcopy's memo, which holds every tensor
    copied before it.
    """
    return copy.deepcopy(nn.Sequential(*[nn.BatchNorm1d(4) for _ in range(layers)])).eval()


def rebuilt_after_deep_copy(model: nn.Module) -> nn.Module:
    """The pattern of timm's `*_pruned` builders (`adapt_model_from_string`) on any model:
    deep-copy it, then make each Conv2d, BatchNorm2d and Linear of the copy again (timm
    makes them with the pruned widths; here they keep their widths)."""
    copied = copy.deepcopy(model)
    for name, module in list(copied.named_modules()):
        made: nn.Module
        if isinstance(module, nn.Conv2d):
            made = nn.Conv2d(
                module.in_channels,
                module.out_channels,
                module.kernel_size,
                stride=module.stride,
                padding=module.padding,
                dilation=module.dilation,
                groups=module.groups,
                bias=module.bias is not None,
            )
        elif isinstance(module, nn.BatchNorm2d):
            made = nn.BatchNorm2d(module.num_features, eps=module.eps, momentum=module.momentum)
        elif isinstance(module, nn.Linear):
            made = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None)
        else:
            continue
        parent, _, attribute = name.rpartition(".")
        setattr(copied.get_submodule(parent), attribute, made)
    return copied.eval()
