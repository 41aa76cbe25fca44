"""Everyday ResNet-50 refactors, shared by the tests and the refactor-gate example."""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torchvision.models import resnet


def resnet50() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet50(weights=None).eval()


def with_leaky_relu(model: nn.Module) -> nn.Module:
    """Batch-replace a type: collect the paths, then setattr on each parent."""
    paths = [path for path, module in model.named_modules() if isinstance(module, nn.ReLU)]
    for path in paths:
        parent_path, _, name = path.rpartition(".")
        setattr(model.get_submodule(parent_path), name, nn.LeakyReLU(0.1))
    return keep_mode(model)


def keep_mode(model: nn.Module) -> nn.Module:
    """New modules start in train mode: put them in the model's mode, as surgery should."""
    return model.train(model.training)


class SEBlock(nn.Module):
    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.squeeze = nn.Conv2d(channels, channels // reduction, 1)
        self.act = nn.ReLU()
        self.excite = nn.Conv2d(channels // reduction, channels, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.excite(self.act(self.squeeze(self.pool(x)))))


def with_se_after_layer2(model: nn.Module) -> nn.Module:
    model.layer2.add_module("se", SEBlock(512))
    return keep_mode(model)


# The squeeze-and-excite block README.md and docs/getting-started.md add to ResNet-50's
# layer2, as a user's own file defines it: for the tests that write out a user's project.
SQUEEZE_EXCITE_SOURCE = """
class SqueezeExcite(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Conv2d(channels, channels, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        return x * self.gate(self.fc(self.pool(x)))
"""


def with_one_input_channel(model: nn.Module) -> nn.Module:
    """A 1-channel first conv started from the average of the RGB filters."""
    rgb = model.conv1
    gray = nn.Conv2d(1, rgb.out_channels, 7, stride=2, padding=3, bias=False)
    with torch.no_grad():
        gray.weight.copy_(rgb.weight.mean(dim=1, keepdim=True))
    model.conv1 = gray
    return keep_mode(model)


class Bottleneck(resnet.Bottleneck):
    """The same block with its shared ReLU split into three: new paths, same computation."""

    def __init__(self, original: resnet.Bottleneck) -> None:
        nn.Module.__init__(self)
        for name in ("conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "downsample"):
            setattr(self, name, getattr(original, name))
        self.stride = original.stride
        self.relu1, self.relu2, self.relu3 = nn.ReLU(True), nn.ReLU(True), nn.ReLU(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu3(out + identity)


def with_split_relu(model: nn.Module) -> nn.Module:
    for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
        for index, block in enumerate(stage):
            stage[index] = Bottleneck(block)
    return keep_mode(model)
