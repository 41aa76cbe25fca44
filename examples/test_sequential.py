"""A small model built with nn.Sequential: keyword arguments, a reused block, a dict output."""

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(32, 5)

    def forward(self, images: torch.Tensor, *, temperature: float = 1.0) -> dict[str, torch.Tensor]:
        logits = self.head(self.features(images)) / temperature
        return {"logits": logits, "probabilities": logits.softmax(dim=-1)}


def test_sequential_classifier(forward_trace, snapshot):
    model = Classifier().eval()

    trace = forward_trace(model, torch.randn(4, 3, 32, 32), temperature=2.0)

    assert trace == snapshot


def test_sequential_classifier_in_train_mode_leaves_batchnorm_untouched(forward_trace):
    model = Classifier().train()
    running_mean = model.features[1].running_mean.clone()

    forward_trace(model, torch.randn(4, 3, 32, 32))

    assert torch.equal(model.features[1].running_mean, running_mean)
