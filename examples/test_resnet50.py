"""torchvision's ResNet-50: one ReLU per Bottleneck, called three times.

`print(model)` and `named_modules()` show `layer1.0.relu` once; the golden file shows its
three calls, marked #1, #2, #3, with the shapes each one saw.
"""

import torch
import torchvision


def test_resnet50_execution_structure(forward_trace, snapshot):
    model = torchvision.models.resnet50(weights=None).eval()

    trace = forward_trace(model, torch.randn(1, 3, 224, 224))

    assert trace.counts()["layer1.0.relu"] == 3
    assert trace == snapshot
