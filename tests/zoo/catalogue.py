"""Every torchvision model builder, with random weights and the smallest input it accepts.

Nothing is downloaded: `weights=None`, and `weights_backbone=None` for the detection and
segmentation builders (whose default would fetch ImageNet backbone weights). Input sizes
were found by probing each model with growing inputs (benchmarks/probe_zoo.py); a model is
listed in `UNSUPPORTED` with the reason when it cannot run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torchvision
from torch import nn

from pytest_fwdorder import TensorSpec

# Every zoo test module's marks: the zoo marker, and the warnings of torchvision's quantized
# builders, which still call torch.ao.quantization (deprecated in torch) and, with
# weights=None, quantize without calibration data, so their observers never ran.
ZOO_MARKS = [
    pytest.mark.zoo,
    pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(
        "ignore:torch.quantize_per_tensor, torch.quantize_per_channel:UserWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:must run observer before calling calculate_qparams:UserWarning"
    ),
]


def family_of(name: str) -> str:
    """classification, segmentation, detection, video, quantization or optical_flow."""
    module = torchvision.models.get_model_builder(name).__module__.split(".")
    return module[2] if len(module) > 3 else "classification"


# Smallest square image side (classification, segmentation, quantization), or
# (frames, side) for video, found by benchmarks/probe_zoo.py. Unlisted: 32.
INPUT_SIDES: dict[str, Any] = {
    "alexnet": 64,
    "fasterrcnn_mobilenet_v3_large_320_fpn": 64,
    "fasterrcnn_mobilenet_v3_large_fpn": 64,
    "fasterrcnn_resnet50_fpn": 64,
    "fasterrcnn_resnet50_fpn_v2": 64,
    "fcos_resnet50_fpn": 64,
    "inception_v3": 96,
    "keypointrcnn_resnet50_fpn": 64,
    "maskrcnn_resnet50_fpn": 64,
    "maskrcnn_resnet50_fpn_v2": 64,
    "maxvit_t": 224,
    "mc3_18": (4, 32),
    "mvit_v1_b": (16, 224),
    "mvit_v2_s": (16, 224),
    "quantized_inception_v3": 96,
    "quantized_shufflenet_v2_x0_5": 64,
    "quantized_shufflenet_v2_x1_0": 64,
    "quantized_shufflenet_v2_x1_5": 64,
    "quantized_shufflenet_v2_x2_0": 64,
    "r2plus1d_18": (4, 32),
    "r3d_18": (4, 32),
    "raft_large": 128,
    "raft_small": 128,
    "retinanet_resnet50_fpn": 64,
    "retinanet_resnet50_fpn_v2": 64,
    "s3d": (16, 224),
    "ssd300_vgg16": 64,
    "ssdlite320_mobilenet_v3_large": 64,
    "swin3d_b": (4, 32),
    "swin3d_s": (4, 32),
    "swin3d_t": (4, 32),
    "vit_b_16": 224,
    "vit_b_32": 224,
    "vit_h_14": 224,
    "vit_l_16": 224,
    "vit_l_32": 224,
}

# Builder arguments beyond weights=None.
_DETECTION_SMALL = {"weights_backbone": None, "min_size": 64, "max_size": 64}
_BUILDER_ARGUMENTS: dict[str, dict[str, Any]] = {
    "segmentation": {"weights_backbone": None},
    "detection": _DETECTION_SMALL,
    "quantization": {"quantize": True},
}
# Without init_weights these builders warn that their default will change; True is today's.
_NAMED_ARGUMENTS: dict[str, dict[str, Any]] = {
    name: {"init_weights": True}
    for name in ("googlenet", "inception_v3", "quantized_googlenet", "quantized_inception_v3")
}
_FIXED_SIZE_DETECTORS = {
    "ssd300_vgg16": {"weights_backbone": None},
    "ssdlite320_mobilenet_v3_large": {"weights_backbone": None},
}

# Models that cannot run here, with the reason (empty: every model runs).
UNSUPPORTED: dict[str, str] = {}


@dataclass(frozen=True)
class ZooCase:
    """One model builder: how to build it, and the specs of its inputs."""

    name: str
    family: str
    builder_arguments: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[Any, ...] = ()

    def build(self) -> nn.Module:
        torch.manual_seed(0)
        return torchvision.models.get_model(
            self.name, weights=None, **self.builder_arguments
        ).eval()

    def real_inputs(self) -> tuple[Any, ...]:
        """The inputs as seeded random tensors on the CPU."""
        generator = torch.Generator().manual_seed(0)
        return tuple(_materialize(value, generator) for value in self.inputs)


def _materialize(value: Any, generator: torch.Generator) -> Any:
    if isinstance(value, TensorSpec):
        return torch.randn(value.shape, generator=generator, dtype=value.dtype)
    if isinstance(value, list):
        return [_materialize(item, generator) for item in value]
    return value


def case(name: str, side: Any = None) -> ZooCase:
    """The zoo case for a builder name; `side` overrides the probed input size."""
    family = family_of(name)
    side = side if side is not None else INPUT_SIDES.get(name, 32)
    arguments = dict(_BUILDER_ARGUMENTS.get(family, {}))
    if name in _FIXED_SIZE_DETECTORS:
        arguments = dict(_FIXED_SIZE_DETECTORS[name])
    arguments.update(_NAMED_ARGUMENTS.get(name, {}))
    inputs: tuple[Any, ...]
    if family == "detection":
        inputs = ([TensorSpec((3, side, side))],)
    elif family == "video":
        frames, video_side = side if isinstance(side, tuple) else (4, side)
        inputs = (TensorSpec((1, 3, frames, video_side, video_side)),)
    elif family == "optical_flow":
        inputs = (TensorSpec((1, 3, side, side)), TensorSpec((1, 3, side, side)))
    else:
        inputs = (TensorSpec((1, 3, side, side)),)
    return ZooCase(name, family, arguments, inputs)


def all_cases() -> list[ZooCase]:
    return [case(name) for name in torchvision.models.list_models() if name not in UNSUPPORTED]
