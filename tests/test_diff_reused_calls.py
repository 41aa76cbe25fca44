"""Diffs of models that call one module several times: the call number follows the order."""

from __future__ import annotations

import types

import pytest
import torch
from refactors import resnet50
from torch import nn

from pytest_fwdorder import trace_forward


class Steps(nn.Module):
    """Calls its children by name in the order given: `act` is one ReLU, called each time."""

    def __init__(self, *steps: str) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(4, 4) for _ in range(4))
        self.act = nn.ReLU()
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            x = getattr(self, step)(x)
        return x


THREE_ACTS = ("a", "act", "b", "act", "c", "act")


def summary_of(before: nn.Module, after: nn.Module, example: torch.Tensor) -> list[str]:
    return trace_forward(before, example).diff(trace_forward(after, example)).summary().splitlines()


def test_removing_the_middle_call_of_a_reused_module_blames_that_call() -> None:
    skipped = ("a", "act", "b", "c", "act")

    summary = summary_of(Steps(*THREE_ACTS), Steps(*skipped), torch.randn(1, 4))

    assert summary == [
        "7 calls before, 6 after: 1 call removed, 1 module reuse count changed",
        "1 call removed: act #2 (ReLU) after b (Linear)",
        "reuse count changed: act 3 -> 2",
    ]


def test_pairs_follow_a_reused_call_past_a_removed_one() -> None:
    example = torch.randn(1, 4)
    before = trace_forward(Steps(*THREE_ACTS), example)
    after = trace_forward(Steps("a", "act", "b", "c", "act"), example)

    difference = before.diff(after)

    # Old act #2 (index 4) has no partner; old act #3 (6) is new act #2 (5).
    assert difference.pairs == [(0, 0), (1, 1), (2, 2), (3, 3), (5, 4), (6, 5)]


def test_adding_a_first_call_of_a_reused_module_blames_the_new_first_call() -> None:
    added = ("act", *THREE_ACTS)

    summary = summary_of(Steps(*THREE_ACTS), Steps(*added), torch.randn(1, 4))

    assert summary == [
        "7 calls before, 8 after: 1 call inserted, 1 module reuse count changed",
        "1 call inserted: act #1 (ReLU) at the start of <root> (Steps)",
        "reuse count changed: act 3 -> 4",
    ]


def test_moving_one_call_of_a_reused_module_past_its_neighbour_is_one_swap() -> None:
    before = ("a", "act", "b", "act", "c", "d", "act")
    after = ("a", "act", "b", "c", "act", "d", "act")

    summary = summary_of(Steps(*before), Steps(*after), torch.randn(1, 4))

    assert summary == [
        "8 calls before, 8 after: 1 swap",
        "act #2 (ReLU) and c (Linear) swapped",
    ]


class Block(nn.Module):
    """A pre-norm transformer block that shares one LayerNorm before attention and MLP."""

    def __init__(self, width: int = 8, norm_before_attention: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 16), nn.GELU(), nn.Linear(16, width))
        self.norm_before_attention = norm_before_attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x) if self.norm_before_attention else x
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm(x))


def test_dropping_the_first_call_of_a_shared_norm_blames_the_first_call() -> None:
    tokens = torch.randn(1, 3, 8)
    before = nn.Sequential(Block(), Block())
    after = nn.Sequential(Block(), Block(norm_before_attention=False))

    summary = summary_of(before, after, tokens)

    assert summary == [
        "17 calls before, 16 after: 1 call removed, 1 module reuse count changed",
        "1 call removed: 1.norm #1 (LayerNorm) at the start of 1 (Block)",
        "reuse count changed: 1.norm 2 -> 1",
    ]


def skip_second_relu(block: nn.Module) -> None:
    """Replace a Bottleneck's forward with one that leaves out its second `self.relu` call."""

    def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)

    block.forward = types.MethodType(forward, block)


@pytest.fixture(scope="module")
def image() -> torch.Tensor:
    return torch.randn(1, 3, 64, 64)


def test_removing_a_bottlenecks_second_relu_blames_that_relu(image: torch.Tensor) -> None:
    before = trace_forward(resnet50(), image)
    model = resnet50()
    skip_second_relu(model.layer1[0])
    after = trace_forward(model, image)

    summary = before.diff(after).summary().splitlines()

    assert summary == [
        f"{len(before)} calls before, {len(before) - 1} after: "
        "1 call removed, 1 module reuse count changed",
        "1 call removed: layer1.0.relu #2 (ReLU) after layer1.0.bn2 (BatchNorm2d)",
        "reuse count changed: layer1.0.relu 3 -> 2",
    ]
