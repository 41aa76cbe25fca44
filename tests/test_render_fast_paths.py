"""The render's shortcuts (issue 37) give what the plain rules give: blocks called out of
number order, modules alike counted by identity, a golden checked for escapes as one text.

The oracles are the models themselves: which block or module was given other dtypes, and
the names they were built with.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.golden.format import (
    ODD_BLOCKS_SECTION,
    ODD_CLASS_MEMBERS_SECTION,
    header_sections,
)
from pytest_fwdorder.golden.parse import parse_golden


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.to(self.proj.weight.dtype)).float()


class Blocks(nn.Module):
    """Five blocks, one of them (`odd`) in float64, called in the order given."""

    def __init__(self, odd: int | None, order: list[int]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(5))
        if odd is not None:
            self.blocks[odd].double()
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index in self.order:
            x = self.blocks[index](x)
        return x


def double_blocks(model: Blocks) -> list[str]:
    """The oracle: the paths of the blocks' linears that hold float64 weights."""
    return [
        f"blocks.{index}.proj"
        for index, block in enumerate(model.blocks)
        if block.proj.weight.dtype == torch.float64
    ]


def sections(model: Blocks) -> dict[str, list[str]]:
    header, _ = parse_golden(trace_forward(model, torch.randn(1, 4)).render())
    return header_sections(header)


def test_the_oracle_tells_a_float64_block_from_none() -> None:
    assert double_blocks(Blocks(2, [0, 1, 2, 3, 4])) == ["blocks.2.proj"]
    assert double_blocks(Blocks(None, [0, 1, 2, 3, 4])) == []


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [3, 0, 4, 2, 1]])
def test_the_odd_block_is_named_whatever_order_the_blocks_are_called_in(
    order: list[int],
) -> None:
    model = Blocks(2, order)

    found = sections(model)

    assert [item.split(":")[0] for item in found[ODD_BLOCKS_SECTION]] == double_blocks(model)
    assert [item.split(":")[0] for item in found[ODD_CLASS_MEMBERS_SECTION]] == double_blocks(model)


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]])
def test_blocks_alike_report_nothing_whatever_their_order(order: list[int]) -> None:
    found = sections(Blocks(None, order))

    assert ODD_BLOCKS_SECTION not in found
    assert ODD_CLASS_MEMBERS_SECTION not in found


class Named(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        # The spare one is never called: the header lists it, escaped with the whole text.
        self.routes = nn.ModuleDict({name: nn.ReLU(), f"spare{name}": nn.ReLU()})
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.routes[self.name](x)


@pytest.mark.parametrize("name", ["é\nb", "é\tb", "a\tb"])
def test_a_name_with_a_control_character_is_escaped_in_a_golden_with_or_without_other_scripts(
    name: str,
) -> None:
    text = trace_forward(Named(name), torch.randn(1, 4)).render()

    escaped = "".join(
        character if character.isprintable() else character.encode("unicode_escape").decode()
        for character in name
    )
    assert f"  routes.{escaped}: ReLU (f32[1,4]) -> f32[1,4]" in text.splitlines()
    assert f"#   routes.spare{escaped}: ReLU" in text.splitlines()
    assert all(line.isprintable() for line in text.splitlines())
