"""Small models whose graph breaks are known from their source: each break's line is found
by searching this file's text for the statement that breaks, not by asking dynamo."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

SOURCE = Path(__file__)


def line_of(statement: str) -> str:
    """`compile_models.py:N` for the one line of this file that holds `statement`."""
    lines = SOURCE.read_text().splitlines()
    found = [number for number, line in enumerate(lines, start=1) if statement in line]
    assert len(found) == 1, f"{statement!r} is on lines {found}"
    return f"{SOURCE.name}:{found[0]}"


class Branching(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        if x.sum() > 0:  # breaks: data-dependent branch
            return x * 2
        return x - 1


class Straight(nn.Module):
    """Branching without the branch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * 2


class Printing(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.relu()
        print("printing in forward")  # breaks: print
        return x + 1


class Reading(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.sum().item()  # breaks: item


class Net(nn.Module):
    """A Linear, then the block under test, then a ReLU."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(4, 4), block)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.blocks(x))


class Counting(nn.Module):
    """Counts its calls in a plain int: dynamo guards on it, so a second call recompiles."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return self.fc(x) * self.steps


class ExportSkips(nn.Module):
    """Calls its ReLU three times in eager and twice under export."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc(x))
        if not torch.compiler.is_exporting():
            x = self.relu(x - 1)
        return self.relu(x + 1)


def inputs() -> torch.Tensor:
    """Inputs that make Branching take its branch (the sum is positive)."""
    return torch.ones(2, 4)
