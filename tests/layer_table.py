"""Every layer class torch.nn exports, each with a few settings and an input it accepts.

A compact table in the spirit of torch's own `module_db` (which needs torch's test-only
dependencies): class name -> samples, each a builder, a function that makes the inputs,
and a bad input (one the plain forward refuses). `NOT_LAYERS` are the classes that hold or
wrap other modules. tests/test_layers.py checks that the table covers every class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn


class Sample(NamedTuple):
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple[Any, ...]]


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def labels(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape)


def signs(*shape: int) -> torch.Tensor:
    return torch.randint(0, 2, shape).float() * 2 - 1


def probabilities(*shape: int) -> torch.Tensor:
    return torch.rand(*shape).clamp(0.05, 0.95)


def one(build: Callable[[], nn.Module], *shape: int) -> Sample:
    """A module of one input of this shape."""
    return Sample(build, lambda: (r(*shape),))


def pooled_with_indices(pool: Callable[[], nn.Module], unpool: nn.Module, *shape: int) -> Sample:
    def inputs() -> tuple[Any, ...]:
        output, indices = pool()(r(*shape))
        return output, indices

    return Sample(lambda: unpool, inputs)


def elementwise(name: str, *settings: dict[str, Any]) -> list[Sample]:
    cls = getattr(nn, name)
    return [one(lambda options=options: cls(**options), 2, 3, 4) for options in settings]


def losses(
    name: str, target: Callable[[], torch.Tensor], shape: tuple[int, ...], **extra: Any
) -> list[Sample]:
    cls = getattr(nn, name)
    return [
        Sample(
            lambda reduction=reduction: cls(reduction=reduction, **extra),
            lambda: (r(*shape), target()),
        )
        for reduction in ("sum", "none")
    ]


def _encoder(**options: Any) -> nn.Module:
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, **options)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def _decoder(**options: Any) -> nn.Module:
    return nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, **options), 2)


def _ctc_inputs() -> tuple[Any, ...]:
    log_probs = r(6, 2, 5).log_softmax(2)
    targets = torch.randint(1, 5, (2, 3))
    return log_probs, targets, torch.tensor([6, 5]), torch.tensor([3, 2])


def _linear_cross_entropy() -> list[Sample]:
    cls = getattr(nn, "LinearCrossEntropyLoss", None)
    if cls is None:
        return []
    return [Sample(lambda: cls(4, 5), lambda: (r(3, 4), labels(5, 3)))]


TABLE: dict[str, list[Sample]] = {
    # Convolutions and their lazy forms.
    "Conv1d": [
        one(lambda: nn.Conv1d(3, 4, 3), 2, 3, 8),
        one(lambda: nn.Conv1d(4, 4, 3, groups=2, padding="same", padding_mode="circular"), 1, 4, 6),
    ],
    "Conv2d": [
        one(lambda: nn.Conv2d(3, 4, 3, stride=2), 1, 3, 8, 8),
        one(
            lambda: nn.Conv2d(
                2, 4, (2, 3), dilation=2, bias=False, padding_mode="reflect", padding=1
            ),
            2,
            7,
            7,
        ),
    ],
    "Conv3d": [one(lambda: nn.Conv3d(2, 3, 2), 1, 2, 4, 4, 4)],
    "ConvTranspose1d": [
        one(lambda: nn.ConvTranspose1d(3, 2, 3, stride=2, output_padding=1), 1, 3, 5)
    ],
    "ConvTranspose2d": [one(lambda: nn.ConvTranspose2d(4, 2, 2, groups=2), 1, 4, 3, 3)],
    "ConvTranspose3d": [one(lambda: nn.ConvTranspose3d(2, 2, 2, bias=False), 1, 2, 2, 2, 2)],
    "LazyConv1d": [one(lambda: nn.LazyConv1d(3, 2), 1, 4, 5)],
    "LazyConv2d": [one(lambda: nn.LazyConv2d(3, 2), 1, 4, 5, 5)],
    "LazyConv3d": [one(lambda: nn.LazyConv3d(2, 2), 1, 3, 3, 3, 3)],
    "LazyConvTranspose1d": [one(lambda: nn.LazyConvTranspose1d(3, 2), 1, 4, 5)],
    "LazyConvTranspose2d": [one(lambda: nn.LazyConvTranspose2d(3, 2), 1, 4, 3, 3)],
    "LazyConvTranspose3d": [one(lambda: nn.LazyConvTranspose3d(2, 2), 1, 3, 2, 2, 2)],
    "Fold": [one(lambda: nn.Fold((4, 4), 2), 1, 12, 9)],
    "Unfold": [one(lambda: nn.Unfold(2, stride=2), 1, 3, 4, 4)],
    # Pooling.
    "AvgPool1d": [
        one(lambda: nn.AvgPool1d(2), 2, 3, 8),
        one(
            lambda: nn.AvgPool1d(3, 2, padding=1, ceil_mode=True, count_include_pad=False), 2, 3, 8
        ),
    ],
    "AvgPool2d": [
        one(lambda: nn.AvgPool2d(2), 1, 3, 6, 6),
        one(lambda: nn.AvgPool2d(3, 1, 1, divisor_override=2), 1, 2, 5, 5),
    ],
    "AvgPool3d": [one(lambda: nn.AvgPool3d(2), 1, 2, 4, 4, 4)],
    "MaxPool1d": [
        one(lambda: nn.MaxPool1d(2), 2, 3, 8),
        one(lambda: nn.MaxPool1d(3, 2, 1, dilation=1, ceil_mode=True), 2, 3, 8),
    ],
    "MaxPool2d": [
        one(lambda: nn.MaxPool2d(2), 1, 3, 6, 6),
        one(lambda: nn.MaxPool2d(3, 2, return_indices=True), 1, 2, 7, 7),
    ],
    "MaxPool3d": [one(lambda: nn.MaxPool3d(2), 1, 2, 4, 4, 4)],
    "AdaptiveAvgPool1d": [one(lambda: nn.AdaptiveAvgPool1d(3), 2, 3, 7)],
    "AdaptiveAvgPool2d": [
        one(lambda: nn.AdaptiveAvgPool2d((2, None)), 1, 3, 5, 6),
        one(lambda: nn.AdaptiveAvgPool2d(1), 1, 3, 5, 6),
    ],
    "AdaptiveAvgPool3d": [one(lambda: nn.AdaptiveAvgPool3d(2), 1, 2, 4, 5, 3)],
    "AdaptiveMaxPool1d": [one(lambda: nn.AdaptiveMaxPool1d(3, return_indices=True), 2, 3, 7)],
    "AdaptiveMaxPool2d": [one(lambda: nn.AdaptiveMaxPool2d(2), 1, 3, 5, 6)],
    "AdaptiveMaxPool3d": [one(lambda: nn.AdaptiveMaxPool3d(2), 1, 2, 4, 5, 3)],
    "FractionalMaxPool2d": [
        one(lambda: nn.FractionalMaxPool2d(2, output_size=3), 1, 2, 7, 7),
        one(lambda: nn.FractionalMaxPool2d(2, output_ratio=0.5, return_indices=True), 1, 2, 8, 8),
    ],
    "FractionalMaxPool3d": [one(lambda: nn.FractionalMaxPool3d(2, output_size=2), 1, 2, 5, 5, 5)],
    "LPPool1d": [one(lambda: nn.LPPool1d(2, 2), 2, 3, 8)],
    "LPPool2d": [one(lambda: nn.LPPool2d(1.5, 2), 1, 3, 6, 6)],
    "LPPool3d": [one(lambda: nn.LPPool3d(2, 2), 1, 2, 4, 4, 4)] if hasattr(nn, "LPPool3d") else [],
    "MaxUnpool1d": [
        pooled_with_indices(
            lambda: nn.MaxPool1d(2, return_indices=True), nn.MaxUnpool1d(2), 1, 2, 8
        )
    ],
    "MaxUnpool2d": [
        pooled_with_indices(
            lambda: nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2), 1, 2, 4, 4
        )
    ],
    "MaxUnpool3d": [
        pooled_with_indices(
            lambda: nn.MaxPool3d(2, return_indices=True), nn.MaxUnpool3d(2), 1, 2, 4, 4, 4
        )
    ],
    # Normalization.
    "BatchNorm1d": [
        one(lambda: nn.BatchNorm1d(3), 4, 3),
        one(lambda: nn.BatchNorm1d(3, affine=False, momentum=None), 4, 3, 5),
    ],
    "BatchNorm2d": [
        one(lambda: nn.BatchNorm2d(3), 2, 3, 4, 4),
        one(lambda: nn.BatchNorm2d(3, track_running_stats=False), 2, 3, 4, 4),
    ],
    "BatchNorm3d": [one(lambda: nn.BatchNorm3d(2), 2, 2, 3, 3, 3)],
    "SyncBatchNorm": [one(lambda: nn.SyncBatchNorm(3), 2, 3, 4)],
    "LazyBatchNorm1d": [one(lambda: nn.LazyBatchNorm1d(), 4, 3)],
    "LazyBatchNorm2d": [one(lambda: nn.LazyBatchNorm2d(), 2, 3, 4, 4)],
    "LazyBatchNorm3d": [one(lambda: nn.LazyBatchNorm3d(), 2, 2, 3, 3, 3)],
    "InstanceNorm1d": [
        one(lambda: nn.InstanceNorm1d(3), 2, 3, 5),
        one(lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True), 2, 3, 5),
    ],
    "InstanceNorm2d": [one(lambda: nn.InstanceNorm2d(3, affine=True), 2, 3, 4, 4)],
    "InstanceNorm3d": [one(lambda: nn.InstanceNorm3d(2, track_running_stats=True), 2, 2, 3, 3, 3)],
    "LazyInstanceNorm1d": [one(lambda: nn.LazyInstanceNorm1d(affine=True), 2, 4, 5)],
    "LazyInstanceNorm2d": [one(lambda: nn.LazyInstanceNorm2d(), 2, 3, 4, 4)],
    "LazyInstanceNorm3d": [
        one(lambda: nn.LazyInstanceNorm3d(track_running_stats=True), 2, 2, 3, 3, 3)
    ],
    "LayerNorm": [
        one(lambda: nn.LayerNorm(4), 2, 3, 4),
        one(lambda: nn.LayerNorm([3, 4], elementwise_affine=False), 2, 3, 4),
        one(lambda: nn.LayerNorm(4, bias=False), 3, 4),
    ],
    "GroupNorm": [
        one(lambda: nn.GroupNorm(2, 4), 2, 4, 3),
        one(lambda: nn.GroupNorm(1, 4, affine=False), 2, 4, 3, 3),
    ],
    "LocalResponseNorm": [one(lambda: nn.LocalResponseNorm(2), 2, 4, 3, 3)],
    "CrossMapLRN2d": [one(lambda: nn.CrossMapLRN2d(3), 1, 4, 3, 3)],
    "RMSNorm": [
        one(lambda: nn.RMSNorm(4), 2, 3, 4),
        one(lambda: nn.RMSNorm([3, 4], eps=1e-3, elementwise_affine=False), 2, 3, 4),
    ],
    # Activations.
    **{
        name: elementwise(name, {})
        for name in (
            "CELU",
            "ELU",
            "GELU",
            "Hardshrink",
            "Hardsigmoid",
            "Hardswish",
            "Hardtanh",
            "LeakyReLU",
            "LogSigmoid",
            "Mish",
            "ReLU",
            "ReLU6",
            "SELU",
            "SiLU",
            "Sigmoid",
            "Softplus",
            "Softshrink",
            "Softsign",
            "Tanh",
            "Tanhshrink",
            "Identity",
        )
    },
    "ELU": elementwise("ELU", {"alpha": 0.5}, {"inplace": True}),
    "GELU": elementwise("GELU", {}, {"approximate": "tanh"}),
    "Threshold": elementwise("Threshold", {"threshold": 0.1, "value": 20.0}),
    "RReLU": elementwise("RReLU", {}, {"lower": 0.1, "upper": 0.3}),
    "PReLU": [one(lambda: nn.PReLU(), 2, 3, 4), one(lambda: nn.PReLU(3), 2, 3, 4)],
    "GLU": elementwise("GLU", {}, {"dim": 0}),
    "Softmax": elementwise("Softmax", {"dim": 1}, {"dim": -1}),
    "Softmin": elementwise("Softmin", {"dim": 1}),
    "LogSoftmax": elementwise("LogSoftmax", {"dim": 2}),
    "Softmax2d": [one(lambda: nn.Softmax2d(), 2, 3, 4, 4)],
    # Dropout.
    "Dropout": elementwise("Dropout", {}, {"p": 0.3, "inplace": True}),
    "Dropout1d": [one(lambda: nn.Dropout1d(), 2, 3, 4)],
    "Dropout2d": [one(lambda: nn.Dropout2d(0.2), 2, 3, 4, 4)],
    "Dropout3d": [one(lambda: nn.Dropout3d(), 1, 2, 3, 3, 3)],
    "AlphaDropout": elementwise("AlphaDropout", {"p": 0.2}),
    "FeatureAlphaDropout": [one(lambda: nn.FeatureAlphaDropout(0.2), 2, 3, 4, 4)],
    # Linear, embeddings, shapes.
    "Linear": [
        one(lambda: nn.Linear(4, 3), 2, 4),
        one(lambda: nn.Linear(4, 3, bias=False), 2, 5, 4),
    ],
    "LazyLinear": [one(lambda: nn.LazyLinear(3), 2, 4)],
    "Bilinear": [Sample(lambda: nn.Bilinear(3, 4, 2), lambda: (r(5, 3), r(5, 4)))],
    "Embedding": [
        Sample(lambda: nn.Embedding(6, 3), lambda: (labels(6, 2, 4),)),
        Sample(lambda: nn.Embedding(6, 3, padding_idx=0, max_norm=1.0), lambda: (labels(6, 5),)),
    ],
    "EmbeddingBag": [
        Sample(lambda: nn.EmbeddingBag(6, 3, mode="sum"), lambda: (labels(6, 2, 4),)),
        Sample(lambda: nn.EmbeddingBag(6, 3), lambda: (labels(6, 7), torch.tensor([0, 3]))),
    ],
    "Flatten": [one(lambda: nn.Flatten(), 2, 3, 4), one(lambda: nn.Flatten(0, -1), 2, 3)],
    "Unflatten": [one(lambda: nn.Unflatten(1, (2, 3)), 2, 6)],
    "PixelShuffle": [one(lambda: nn.PixelShuffle(2), 1, 8, 3, 3)],
    "PixelUnshuffle": [one(lambda: nn.PixelUnshuffle(2), 1, 2, 4, 4)],
    "ChannelShuffle": [one(lambda: nn.ChannelShuffle(2), 1, 4, 3, 3)],
    "Upsample": [
        one(lambda: nn.Upsample(scale_factor=2), 1, 2, 3, 3),
        one(lambda: nn.Upsample(size=5, mode="bilinear", align_corners=True), 1, 2, 3, 3),
    ],
    "UpsamplingNearest2d": [one(lambda: nn.UpsamplingNearest2d(scale_factor=2), 1, 2, 3, 3)],
    "UpsamplingBilinear2d": [one(lambda: nn.UpsamplingBilinear2d(size=4), 1, 2, 3, 3)],
    "CosineSimilarity": [Sample(lambda: nn.CosineSimilarity(), lambda: (r(3, 4), r(3, 4)))],
    "PairwiseDistance": [
        Sample(lambda: nn.PairwiseDistance(p=1.0, keepdim=True), lambda: (r(3, 4), r(3, 4)))
    ],
    # Padding.
    **{
        f"{kind}Pad{dims}d": [
            one(
                lambda kind=kind, dims=dims: getattr(nn, f"{kind}Pad{dims}d")(
                    *((1, 0.5) if kind == "Constant" else (1,))
                ),
                *(1, 2, *(3,) * dims),
            )
        ]
        for kind in ("Circular", "Constant", "Reflection", "Replication", "Zero")
        for dims in (1, 2, 3)
    },
    # Recurrent layers and cells.
    "RNN": [
        one(lambda: nn.RNN(4, 5), 3, 2, 4),
        one(
            lambda: nn.RNN(4, 5, 2, nonlinearity="relu", batch_first=True, bidirectional=True),
            2,
            3,
            4,
        ),
    ],
    "LSTM": [
        one(lambda: nn.LSTM(4, 5), 3, 2, 4),
        one(lambda: nn.LSTM(4, 6, proj_size=3), 3, 2, 4),
        one(lambda: nn.LSTM(4, 5, 2, dropout=0.5, batch_first=True), 2, 3, 4),
    ],
    "GRU": [
        one(lambda: nn.GRU(4, 5), 3, 2, 4),
        one(lambda: nn.GRU(4, 5, bidirectional=True, bias=False), 3, 4),
    ],
    "RNNCell": [one(lambda: nn.RNNCell(4, 5), 2, 4)],
    "LSTMCell": [Sample(lambda: nn.LSTMCell(4, 5), lambda: (r(2, 4), (r(2, 5), r(2, 5))))],
    "GRUCell": [one(lambda: nn.GRUCell(4, 5, bias=False), 2, 4)],
    # Transformers and attention.
    "MultiheadAttention": [
        Sample(lambda: nn.MultiheadAttention(8, 2), lambda: (r(3, 2, 8), r(4, 2, 8), r(4, 2, 8))),
        Sample(
            lambda: nn.MultiheadAttention(8, 2, batch_first=True, kdim=4, vdim=4, add_bias_kv=True),
            lambda: (r(2, 3, 8), r(2, 4, 4), r(2, 4, 4)),
        ),
    ],
    "TransformerEncoderLayer": [
        one(lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16), 3, 2, 8),
        one(
            lambda: nn.TransformerEncoderLayer(
                8, 2, 16, activation="gelu", norm_first=True, batch_first=True
            ),
            2,
            3,
            8,
        ),
    ],
    "TransformerEncoder": [
        one(lambda: _encoder(), 3, 2, 8),
        one(lambda: _encoder(batch_first=True, norm_first=True), 2, 3, 8),
    ],
    "TransformerDecoderLayer": [
        Sample(
            lambda: nn.TransformerDecoderLayer(8, 2, dim_feedforward=16),
            lambda: (r(3, 2, 8), r(4, 2, 8)),
        )
    ],
    "TransformerDecoder": [
        Sample(lambda: _decoder(batch_first=True), lambda: (r(2, 3, 8), r(2, 4, 8)))
    ],
    "Transformer": [
        Sample(lambda: nn.Transformer(8, 2, 1, 1, 16), lambda: (r(4, 2, 8), r(3, 2, 8)))
    ],
    "AdaptiveLogSoftmaxWithLoss": [
        Sample(
            lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8]), lambda: (r(5, 8), labels(10, 5))
        )
    ],
    # Losses.
    "L1Loss": losses("L1Loss", lambda: r(3, 4), (3, 4)),
    "MSELoss": losses("MSELoss", lambda: r(3, 4), (3, 4)),
    "HuberLoss": losses("HuberLoss", lambda: r(3, 4), (3, 4), delta=0.5),
    "SmoothL1Loss": losses("SmoothL1Loss", lambda: r(3, 4), (3, 4)),
    "BCELoss": [Sample(lambda: nn.BCELoss(), lambda: (probabilities(3, 4), probabilities(3, 4)))],
    "BCEWithLogitsLoss": losses("BCEWithLogitsLoss", lambda: probabilities(3, 4), (3, 4)),
    "CrossEntropyLoss": [
        *losses("CrossEntropyLoss", lambda: labels(5, 3), (3, 5)),
        Sample(
            lambda: nn.CrossEntropyLoss(label_smoothing=0.1), lambda: (r(3, 5), probabilities(3, 5))
        ),
    ],
    "NLLLoss": losses("NLLLoss", lambda: labels(5, 3), (3, 5)),
    "NLLLoss2d": [Sample(lambda: nn.NLLLoss2d(), lambda: (r(2, 3, 2, 2), labels(3, 2, 2, 2)))],
    "KLDivLoss": [
        Sample(
            lambda: nn.KLDivLoss(reduction="batchmean"),
            lambda: (r(3, 4).log_softmax(1), r(3, 4).softmax(1)),
        )
    ],
    "PoissonNLLLoss": losses("PoissonNLLLoss", lambda: torch.rand(3, 4), (3, 4)),
    "GaussianNLLLoss": [
        Sample(lambda: nn.GaussianNLLLoss(), lambda: (r(3, 4), r(3, 4), torch.rand(3, 4) + 0.1))
    ],
    "HingeEmbeddingLoss": losses("HingeEmbeddingLoss", lambda: signs(3, 4), (3, 4)),
    "SoftMarginLoss": losses("SoftMarginLoss", lambda: signs(3, 4), (3, 4)),
    "MultiLabelSoftMarginLoss": losses(
        "MultiLabelSoftMarginLoss", lambda: torch.randint(0, 2, (3, 4)).float(), (3, 4)
    ),
    "MultiLabelMarginLoss": losses(
        "MultiLabelMarginLoss", lambda: torch.tensor([[1, 0, -1, 2], [3, -1, 0, 0]]), (2, 4)
    ),
    "MultiMarginLoss": losses("MultiMarginLoss", lambda: labels(4, 3), (3, 4), p=1, margin=0.5),
    "MarginRankingLoss": [
        Sample(lambda: nn.MarginRankingLoss(0.1), lambda: (r(5), r(5), signs(5)))
    ],
    "CosineEmbeddingLoss": [
        Sample(lambda: nn.CosineEmbeddingLoss(), lambda: (r(3, 4), r(3, 4), signs(3)))
    ],
    "TripletMarginLoss": [
        Sample(lambda: nn.TripletMarginLoss(swap=True), lambda: (r(3, 4), r(3, 4), r(3, 4)))
    ],
    "TripletMarginWithDistanceLoss": [
        Sample(lambda: nn.TripletMarginWithDistanceLoss(), lambda: (r(3, 4), r(3, 4), r(3, 4)))
    ],
    "CTCLoss": [
        Sample(lambda: nn.CTCLoss(), _ctc_inputs),
        Sample(lambda: nn.CTCLoss(reduction="sum", zero_infinity=True), _ctc_inputs),
    ],
    "LinearCrossEntropyLoss": _linear_cross_entropy(),
}

# Classes that hold, wrap or are the base of other modules: no layer of their own to run.
NOT_LAYERS = frozenset(
    {
        "Module",
        "Container",
        "Sequential",
        "ModuleList",
        "ModuleDict",
        "ParameterList",
        "ParameterDict",
        "DataParallel",
        "RNNBase",
        "RNNCellBase",
    }
)
