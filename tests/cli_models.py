"""Small models the command-line tests name as a TARGET: `cli_models:tiny`."""

from __future__ import annotations

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def tiny() -> nn.Module:
    return Tiny()


def tiny_with_dropout() -> nn.Module:
    """Tiny with one call inserted: a Dropout at the end of `body`."""
    model = Tiny()
    model.body.append(nn.Dropout(0.1))
    return model


class NeedsWidth(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(4, width)


class Unregistered(nn.Module):
    """Keeps a Linear in a plain list: it runs, but is neither trained nor saved."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = [nn.Linear(4, 4)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hidden[0](x)


def broken() -> nn.Module:
    raise RuntimeError("the checkpoint is missing")


def not_a_model() -> int:
    return 42


def embedding() -> nn.Module:
    return nn.Embedding(10, 3)


NUMBER = 3


def exits_quietly() -> nn.Module:
    """A builder that ends the process instead of returning a model."""
    raise SystemExit(0)


def exits_with_a_reason() -> nn.Module:
    """A builder that refuses to build, the way scripts say so: sys.exit("...")."""
    raise SystemExit("needs a GPU")


class Accented(nn.Module):
    """Calls its one child, registered under a name that cp1252 cannot write."""

    def __init__(self) -> None:
        super().__init__()
        self.couche_層 = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.couche_層(x)


class Blocks(nn.Module):
    """The reference of `fwdorder parity`: two blocks and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 4)) for _ in range(2)
        )
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


class Port(nn.Module):
    """Blocks under other names; `broken` drops the residual around the second layer, so
    the first output to differ is the head's."""

    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 4)) for _ in range(2)
        )
        self.out = nn.Linear(4, 2)
        self.broken = broken

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for number, layer in enumerate(self.layers):
            x = layer(x) if self.broken and number == 1 else x + layer(x)
        return self.out(x)


def broken_port() -> nn.Module:
    return Port(broken=True)


PORT_PATH_MAP = {"blocks.{i}": "layers.{i}", "head": "out"}
