"""Fine-tuning surgery on ResNet-18: 1 input channel, 10 classes, a Dropout head, two frozen stages.

The golden file shows each change where it happens: conv1 takes (N, 1, H, W), the head is
Dropout then a 10-way Linear, and every conv and BatchNorm of layer1 and layer2 is marked
[frozen]. Unfreezing a stage by mistake, or forgetting the channel change, fails the test.
"""

import torch
import torchvision
from torch import nn


def adapt_resnet18() -> nn.Module:
    model = torchvision.models.resnet18(weights=None)
    rgb_conv = model.conv1
    gray_conv = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    with torch.no_grad():
        # Start the 1-channel conv from the average of the RGB filters.
        gray_conv.weight.copy_(rgb_conv.weight.mean(dim=1, keepdim=True))
    model.conv1 = gray_conv
    model.fc = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.fc.in_features, 10))
    for stage in (model.layer1, model.layer2):
        stage.requires_grad_(False)
    return model


def test_adapted_resnet18(forward_trace, snapshot):
    model = adapt_resnet18().eval()

    trace = forward_trace(model, torch.randn(2, 1, 64, 64))

    assert trace.find("conv1")[0].input_shapes == [(2, 1, 64, 64)]
    assert trace.find("fc.1")[0].output_shapes == [(2, 10)]
    assert trace == snapshot


def test_frozen_stages_are_marked_in_the_trace(forward_trace):
    trace = forward_trace(adapt_resnet18().eval(), torch.randn(2, 1, 64, 64))

    frozen_stages = {call.path.split(".")[0] for call in trace if call.frozen}
    assert frozen_stages == {"layer1", "layer2"}


def test_batchnorm_statistics_in_frozen_stages_survive_a_train_mode_trace(forward_trace):
    # Freezing stops gradients, not BatchNorm's running statistics: a train-mode forward
    # updates them. The trace must not: it leaves the model bitwise as it found it.
    model = adapt_resnet18().train()
    before = {name: value.clone() for name, value in model.state_dict().items()}

    forward_trace(model, torch.randn(2, 1, 64, 64))

    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
