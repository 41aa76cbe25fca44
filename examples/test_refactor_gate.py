"""Gating a refactor: ResNet-18's shared ReLU split into relu1 and relu2.

Three checks a reviewer wants before merging such a change, each one line:
the execution structure is the same apart from names, the outputs are the same call by call,
and old checkpoints still load.
"""

import copy

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models import resnet

from pytest_fwdorder import (
    StructureMismatchError,
    assert_checkpoint_loads,
    assert_equivalent,
    assert_same_structure,
)


class BasicBlock(resnet.BasicBlock):
    """The refactored block: one ReLU module per use instead of one shared ReLU."""

    def __init__(self, original: resnet.BasicBlock) -> None:
        nn.Module.__init__(self)
        for name in ("conv1", "bn1", "conv2", "bn2", "downsample"):
            setattr(self, name, getattr(original, name))
        self.stride = original.stride
        self.relu1 = nn.ReLU(inplace=True)
        self.relu2 = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu2(out + identity)


def refactor(model: nn.Module) -> nn.Module:
    refactored = copy.deepcopy(model)
    for stage in (refactored.layer1, refactored.layer2, refactored.layer3, refactored.layer4):
        for index, block in enumerate(stage):
            stage[index] = BasicBlock(block)
    # New modules start in train mode; the golden marks any module whose mode differs from
    # the model's, so put the new blocks in the model's mode as the surgery should.
    return refactored.train(model.training)


@pytest.fixture
def models():
    torch.manual_seed(0)
    original = torchvision.models.resnet18(weights=None).eval()
    return original, refactor(original)


IMAGES = torch.randn(2, 3, 64, 64)


def test_same_execution_structure_apart_from_names(forward_trace, models):
    original, refactored = models

    difference = assert_same_structure(
        forward_trace(original, IMAGES), forward_trace(refactored, IMAGES), ignore=("paths",)
    )

    assert difference.summary().splitlines()[0] == (
        "same structure (ignoring paths): 8 shared modules split, ignored"
    )


def test_names_do_change(forward_trace, models):
    original, refactored = models

    with pytest.raises(StructureMismatchError, match="8 shared modules split"):
        assert_same_structure(forward_trace(original, IMAGES), forward_trace(refactored, IMAGES))


def test_outputs_match_call_by_call(models):
    original, refactored = models

    assert_equivalent(original, refactored, IMAGES, atol=1e-6)


def test_old_checkpoints_still_load(models):
    original, refactored = models

    assert_checkpoint_loads(refactored, original.state_dict())
