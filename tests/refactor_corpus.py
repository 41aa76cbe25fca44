"""Everyday refactors with the summary a reviewer should read, written before running.

Each `Refactor` builds a model before and after, and says what changed: the count of each
kind of change the summary states (no other kind may appear) and sentences it must hold.
Shared by tests/test_refactor_corpus.py; small inputs so the whole corpus traces quickly.
"""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import adapters as adapters_module
import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock


@dataclass(frozen=True)
class Refactor:
    """One refactor: the model before, the model after, the input, and the truth."""

    name: str
    before: Callable[[], nn.Module]
    after: Callable[[], nn.Module]
    example: Callable[[], tuple[torch.Tensor, ...]]
    counts: dict[str, int]
    sentences: tuple[str, ...] = ()
    # What a name-free comparison must say (ignore=("paths",)): substrings of its message,
    # or () when the refactor only renames (the comparison then passes).
    name_free: tuple[str, ...] = ()
    example_after: Callable[[], tuple[torch.Tensor, ...]] | None = None
    keeps_structure: bool = False  # a name-free comparison passes
    # How many changes of each kind a name-free comparison states, where given.
    name_free_counts: dict[str, int] | None = None
    extra: dict[str, object] = field(default_factory=dict)


def image() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 32, 32),)


def small_image() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 16, 16),)


def gray_image() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 1, 32, 32),)


def features() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 8),)


def tokens() -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 32, (1, 6)),)


def resnet18() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval()


def mobilenet() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.mobilenet_v3_small(weights=None).eval()


def with_resnet(change: Callable[[nn.Module], object]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        model = resnet18()
        change(model)
        return model.eval()

    return build


def wrapped_layer2(model: nn.Module) -> None:
    model.layer2 = nn.Sequential(model.layer2, nn.Identity())


def narrowed_middle_of_layer1_0(model: nn.Module) -> None:
    block = model.layer1[0]
    block.conv1 = nn.Conv2d(64, 48, 3, 1, 1, bias=False)
    block.bn1 = nn.BatchNorm2d(48)
    block.conv2 = nn.Conv2d(48, 64, 3, 1, 1, bias=False)


class ReluBeforeNorm(BasicBlock):
    """torchvision's BasicBlock with its first norm and activation in the other order."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.bn1(self.relu(self.conv1(x)))))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def relu_before_norm_in_layer1_0(model: nn.Module) -> None:
    model.layer1[0].__class__ = ReluBeforeNorm


def twice_wrapped_layer2(model: nn.Module) -> None:
    model.layer2 = nn.Sequential(nn.Sequential(model.layer2))


def wrapped_layer2_with_extra(model: nn.Module) -> None:
    model.layer2.add_module("extra", nn.Identity())
    wrapped_layer2(model)


def swapped_blocks(model: nn.Module) -> None:
    """layer1's two blocks called in the other order, each keeping its name."""
    first, second = model.layer1
    model.layer1 = nn.Sequential(OrderedDict([("1", second), ("0", first)]))


def all_relus(replacement: Callable[[], nn.Module]) -> Callable[[nn.Module], None]:
    def change(model: nn.Module) -> None:
        paths = [path for path, module in model.named_modules() if isinstance(module, nn.ReLU)]
        for path in paths:
            parent, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent), name, replacement())

    return change


def low_rank_head(model: nn.Module) -> None:
    model.fc = nn.Sequential(nn.Linear(512, 8), nn.Linear(8, 1000))


def inplace_off(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False


def fused_stem(model: nn.Module) -> None:
    torch.ao.quantization.fuse_modules(model, [["conv1", "bn1", "relu"]], inplace=True)


class Steps(nn.Module):
    """Calls its children by name in the order given: `act` may be called several times."""

    def __init__(self, *steps: str, split: bool = False) -> None:
        super().__init__()
        self.a, self.b, self.c = (nn.Linear(8, 8) for _ in range(3))
        self.act = nn.ReLU()
        if split:
            self.act1, self.act2 = nn.ReLU(), nn.ReLU()
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            x = getattr(self, step)(x)
        return x


def mlp(*layers: nn.Module) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*copy.deepcopy(layers)).eval()

    return build


L8, L16, L16B, L4 = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)
MLP = (L8, nn.ReLU(), L16, nn.ReLU(), L4)
MLP_TANH = (L8, nn.ReLU(), L16, nn.Tanh(), L16B, nn.ReLU(), L4)


class EncoderDecoder(nn.Module):
    def __init__(self, norm_in_decoder: bool, norm_block: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        encoder: list[nn.Module] = [nn.Linear(8, 16), nn.ReLU()]
        decoder: list[nn.Module] = [nn.Linear(16, 16), nn.ReLU()]
        # The module that moves: a norm, or a block of three calls ending in one.
        norm: nn.Module = (
            nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.LayerNorm(16))
            if norm_block
            else nn.LayerNorm(16)
        )
        (decoder if norm_in_decoder else encoder).insert(0 if norm_in_decoder else 2, norm)
        self.enc = nn.Sequential(*encoder)
        self.dec = nn.Sequential(*decoder)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


class LoRA(nn.Module):
    """An adapter around a projection: the projection plus a low-rank update."""

    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.in_features, rank, bias=False)
        self.up = nn.Linear(rank, base.out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.up(self.down(x))


class Attention(nn.Module):
    """Attention with its q, k and v projections apart, or `fused` into one `qkv`."""

    def __init__(self, width: int, fused: bool = False) -> None:
        super().__init__()
        if fused:
            self.qkv = nn.Linear(width, 3 * width)
        else:
            self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.o = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "qkv"):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return self.o(weights @ v)


class Block(nn.Module):
    def __init__(self, width: int, mlp_name: str = "mlp", post_norm: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = Attention(width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp_name = mlp_name
        self.add_module(
            mlp_name,
            nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)),
        )
        self.post_norm = post_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feed_forward = getattr(self, self.mlp_name)
        if self.post_norm:
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + feed_forward(x))
        x = x + self.attn(self.norm1(x))
        return x + feed_forward(self.norm2(x))


class Decoder(nn.Module):
    """A GPT-shaped decoder: embedding, blocks, final norm, head."""

    def __init__(
        self,
        depth: int = 3,
        width: int = 16,
        head_name: str = "head",
        mlp_name: str = "mlp",
        post_norm: bool = False,
        vocabulary: int = 32,
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(32, width)
        self.blocks = nn.ModuleList(
            Block(width, mlp_name=mlp_name, post_norm=post_norm) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(width)
        self.head_name = head_name
        self.add_module(head_name, nn.Linear(width, vocabulary))

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(token_ids)
        for block in self.blocks:
            x = block(x)
        return getattr(self, self.head_name)(self.norm(x))


def with_decoder(change: Callable[[Decoder], object], **options: object) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        model = Decoder(**options)  # type: ignore[arg-type]
        change(model)
        return model.eval()

    return build


def unchanged(model: nn.Module) -> None:
    pass


def adapters(skip: int | None = None) -> Callable[[Decoder], None]:
    def change(model: Decoder) -> None:
        torch.manual_seed(1)
        attention = model.blocks[0].attn
        for index, name in enumerate(("q", "k", "v", "o")):
            if index != skip:
                setattr(attention, name, LoRA(getattr(attention, name)))

    return change


def fused_attention_in_block_1(model: Decoder) -> None:
    model.blocks[1].attn = Attention(16, fused=True)


def freeze_embedding(model: Decoder) -> None:
    model.embed.requires_grad_(False)


def wrap_block(model: Decoder) -> None:
    model.blocks[1] = nn.Sequential(model.blocks[1])


def prefixed_norm(model: Decoder) -> None:
    model.norm = nn.Sequential(nn.Identity(), model.norm)


def delete_block(model: Decoder) -> None:
    del model.blocks[1]


def dropout_in_one_block(model: Decoder) -> None:
    model.blocks[1].mlp.append(nn.Dropout(0.0))


def relu_in_blocks(model: Decoder) -> None:
    for block in model.blocks:
        block.mlp[1] = nn.ReLU()


def wider_feed_forward(model: Decoder) -> None:
    model.blocks[1].mlp = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))


def partly_quantized(model: nn.Module) -> None:
    torch.ao.quantization.quantize_dynamic(
        model, {"2": torch.ao.quantization.default_dynamic_qconfig}, inplace=True
    )


def train_mode(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def trained() -> nn.Module:
        return build().train()

    return trained


def frozen_first_layer(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def frozen() -> nn.Module:
        model = build()
        model[0].requires_grad_(False)
        return model

    return frozen


def wrapped(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def wrap() -> nn.Module:
        return nn.Sequential(build()).eval()

    return wrap


def dropout_at(index: int) -> Callable[[], nn.Module]:
    """A numbered MLP whose Dropout is at `index` among its other layers."""

    def build() -> nn.Module:
        torch.manual_seed(0)
        layers: list[nn.Module] = [nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16)]
        layers.append(nn.Linear(16, 2))
        layers.insert(index, nn.Dropout(0.1))
        return nn.Sequential(*layers).eval()

    return build


def steps(*names: str, split: bool = False) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return Steps(*names, split=split).eval()

    return build


def _cases() -> list[Refactor]:
    removed_block = {"removed": 7}
    return [
        # ResNet-18
        Refactor(
            "wrap a stage",
            resnet18,
            with_resnet(wrapped_layer2),
            image,
            {"wrapped": 1, "inserted": 1},
            (
                "layer2 (Sequential) wraps the old layer2, now layer2.0 (18 calls renamed under it)",
                "1 call inserted: layer2.1 (Identity) after layer2.0 (Sequential)",
            ),
            ("layer2 (Sequential) wraps the old layer2",),
        ),
        Refactor(
            "wrap a stage and insert a call inside it",
            resnet18,
            with_resnet(wrapped_layer2_with_extra),
            image,
            {"wrapped": 1, "inserted": 2},
            (
                "layer2 (Sequential) wraps the old layer2, now layer2.0 (18 calls renamed under it)",
                "2 calls inserted: layer2.0.extra (Identity) after layer2.0.1 (BasicBlock); "
                "layer2.1 (Identity) after layer2.0 (Sequential)",
            ),
            (
                "layer2 (Sequential) wraps the old layer2",
                "2 calls inserted: layer2.0.extra (Identity) in layer2.0 after layer2.0.1; "
                "layer2.1 (Identity) in layer2 after layer2.0",
            ),
        ),
        Refactor(
            "unwrap a stage",
            with_resnet(wrapped_layer2),
            resnet18,
            image,
            {"unwrapped": 1, "removed": 1},
            (
                "layer2 (Sequential) unwrapped: the old layer2.0 is now layer2 (18 calls renamed under it)",
            ),
            ("layer2 (Sequential) unwrapped",),
        ),
        Refactor(
            "narrow one block's middle: its first conv, norm, and the second conv's input",
            resnet18,
            with_resnet(narrowed_middle_of_layer1_0),
            image,
            # Three layers of one block changed width in place. Name-free, the block's
            # look-alike conv, norm and ReLU calls pair in place too (they read as a swap,
            # three calls inserted and three removed, and two of the changes were lost).
            {"output changed": 2, "settings changed": 3, "parameters changed": 3},
            (
                "settings changed at 3 calls: layer1.0.conv1 (Conv2d): out_channels 64 -> 48",
                "layer1.0.bn1 (BatchNorm2d): num_features 64 -> 48",
                "layer1.0.conv2 (Conv2d): in_channels 64 -> 48",
            ),
            (
                "settings changed at 3 calls: layer1.0.conv1 (Conv2d): out_channels 64 -> 48",
                "layer1.0.bn1 (BatchNorm2d): num_features 64 -> 48",
                "layer1.0.conv2 (Conv2d): in_channels 64 -> 48",
            ),
        ),
        Refactor(
            "one block runs its first activation before its norm",
            resnet18,
            with_resnet(relu_before_norm_in_layer1_0),
            image,
            # Name-free too (it read as a ReLU moved from the untouched layer1.1 and the
            # whole block removed and inserted).
            {"swapped": 1, "type changed": 1},
            (
                "layer1.0.bn1 (BatchNorm2d) and layer1.0.relu #1 (ReLU) swapped",
                "type changed at layer1.0: BasicBlock -> ReluBeforeNorm",
            ),
            (
                "layer1.0.bn1 (BatchNorm2d) and layer1.0.relu #1 (ReLU) swapped",
                "type changed at layer1.0: BasicBlock -> ReluBeforeNorm",
            ),
        ),
        Refactor(
            "wrap a stage in two wrappers, one inside the other",
            resnet18,
            with_resnet(twice_wrapped_layer2),
            image,
            # One wrapping, two levels deep: the old stage neither moved nor had a wrapper
            # inserted beside it (it read as `layer2 moved to layer2.0.0` and `layer2
            # (Sequential, with 1 nested call)` inserted).
            {"wrapped": 1},
            (
                "layer2 (Sequential) and layer2.0 (Sequential) wrap the old layer2, now "
                "layer2.0.0 (18 calls renamed under it)",
            ),
            ("layer2 (Sequential) and layer2.0 (Sequential) wrap the old layer2, now layer2.0.0",),
        ),
        Refactor(
            "unwrap a stage from two wrappers, one inside the other",
            with_resnet(twice_wrapped_layer2),
            resnet18,
            image,
            {"unwrapped": 1},
            (
                "layer2 (Sequential) and layer2.0 (Sequential) unwrapped: the old layer2.0.0 "
                "is now layer2 (18 calls renamed under it)",
            ),
            (
                "layer2 (Sequential) and layer2.0 (Sequential) unwrapped: the old layer2.0.0 "
                "is now layer2",
            ),
        ),
        Refactor(
            "wrap a stage with nothing else",
            resnet18,
            with_resnet(lambda model: setattr(model, "layer1", nn.Sequential(model.layer1))),
            image,
            {"wrapped": 1},
            ("layer1 (Sequential) wraps the old layer1, now layer1.0 (15 calls renamed under it)",),
            ("layer1 (Sequential) wraps the old layer1",),
        ),
        Refactor(
            "insert a module at the end of a stage",
            resnet18,
            with_resnet(lambda model: model.layer3.add_module("extra", nn.Identity())),
            image,
            {"inserted": 1},
            ("1 call inserted: layer3.extra (Identity) after layer3.1 (BasicBlock)",),
            ("1 call inserted: layer3.extra (Identity) in layer3 after layer3.1",),
        ),
        Refactor(
            "remove the last block of a stage",
            resnet18,
            with_resnet(lambda model: setattr(model, "layer4", nn.Sequential(model.layer4[0]))),
            image,
            removed_block,
            (
                "7 calls removed: layer4.1 (BasicBlock, with 6 nested calls) after layer4.0 (BasicBlock)",
            ),
            (
                "7 calls removed: layer4.1 (BasicBlock, with 6 nested calls) in layer4 after layer4.0",
            ),
        ),
        Refactor(
            "replace the stem's activation",
            resnet18,
            with_resnet(lambda model: setattr(model, "relu", nn.SiLU())),
            image,
            {"type changed": 1},
            ("type changed at relu: ReLU -> SiLU",),
            ("type changed at relu: ReLU -> SiLU",),
        ),
        Refactor(
            "replace every ReLU",
            resnet18,
            with_resnet(all_relus(lambda: nn.LeakyReLU(0.1))),
            image,
            {"type changed": 17},
            (
                "type changed at 17 calls: ReLU -> LeakyReLU in relu, layer1.0.relu (2 calls), "
                "layer1.1.relu (2 calls), layer2.0.relu (2 calls), layer2.1.relu (2 calls) "
                "(+4 more)",
            ),
            ("type changed at 17 calls: ReLU -> LeakyReLU",),
        ),
        Refactor(
            "replace one block's shared ReLU, called twice",
            resnet18,
            with_resnet(lambda model: setattr(model.layer3[1], "relu", nn.SiLU())),
            image,
            {"type changed": 2},
            ("type changed at layer3.1.relu (2 calls): ReLU -> SiLU",),
            ("type changed at layer3.1.relu (2 calls): ReLU -> SiLU",),
        ),
        Refactor(
            "set inplace off on every ReLU, each block's called twice",
            resnet18,
            with_resnet(inplace_off),
            image,
            # Settings are a module's, written under its first call: 9 ReLU modules changed,
            # and they run 17 times (the oracle: `named_modules` and a counting hook, in
            # tests/test_walk_explanations.py). It read `settings changed at 17 calls` for
            # ResNet-50's 17 modules and 49 calls, and `9 calls` here.
            {"settings changed": 9},
            (
                "settings changed at 9 modules (17 calls): 9 ReLU modules (relu, "
                "layer1.0.relu, layer1.1.relu, +6 more): inplace True -> False",
            ),
            ("settings changed at 9 modules (17 calls): 9 ReLU modules",),
        ),
        Refactor(
            "change one norm's eps",
            resnet18,
            with_resnet(
                lambda model: setattr(model.layer3[1], "bn2", nn.BatchNorm2d(256, eps=1e-3))
            ),
            image,
            {"settings changed": 1},
            ("settings changed at 1 call: layer3.1.bn2 (BatchNorm2d): eps 1e-05 -> 0.001",),
            ("layer3.1.bn2 (BatchNorm2d): eps 1e-05 -> 0.001",),
        ),
        Refactor(
            "a new head",
            resnet18,
            with_resnet(lambda model: setattr(model, "fc", nn.Linear(512, 10))),
            image,
            {"settings changed": 1, "parameters changed": 1, "output changed": 1},
            (
                "settings changed at 1 call: fc (Linear): out_features 1000 -> 10",
                "output changed at 1 call: fc (Linear) output (1, 1000) -> (1, 10), "
                "and so the output of the model",
            ),
            ("fc (Linear): out_features 1000 -> 10",),
        ),
        Refactor(
            "a new head in a Sequential",
            resnet18,
            with_resnet(lambda model: setattr(model, "fc", nn.Sequential(nn.Linear(512, 10)))),
            image,
            {"wrapped": 1, "settings changed": 1, "parameters changed": 1, "output changed": 1},
            (
                "fc (Sequential) wraps the old fc, now fc.0 (1 call renamed under it)",
                "settings changed at 1 call: fc.0 (Linear): out_features 1000 -> 10",
                "output changed at 1 call: fc.0 (Linear) output (1, 1000) -> (1, 10), "
                "and so the output of the model",
            ),
            ("fc.0 (Linear): out_features 1000 -> 10",),
        ),
        Refactor(
            "a low-rank head: two Linears through a narrow middle in place of fc",
            resnet18,
            with_resnet(low_rank_head),
            image,
            # Two new layers of other shapes, neither the old fc (it read as `fc (Sequential)
            # wraps the old fc, now fc.0` and fc.0's out_features 1000 -> 8): which of them
            # would be it cannot be told, so the smaller account, the head's class changed
            # and its two layers came.
            {"type changed": 1, "inserted": 2, "parameters changed": 1},
            (
                "type changed at fc: Linear -> Sequential",
                "2 calls inserted: fc.0 (Linear) at the start of fc (Sequential); fc.1 "
                "(Linear) after fc.0 (Linear)",
            ),
            # Without names, calls pair in order, but never a call with nested calls with one
            # without (a stage unwrapped is no type change of the call after it): the old
            # Linear went and the new head came, whole.
            (
                "3 calls inserted: fc (Sequential, with 2 nested calls) after avgpool",
                "1 call removed: fc (Linear) after avgpool",
            ),
        ),
        Refactor(
            "a one-channel stem in a Sequential",
            resnet18,
            with_resnet(
                lambda model: setattr(
                    model, "conv1", nn.Sequential(nn.Conv2d(1, 64, 7, 2, 3, bias=False))
                )
            ),
            image,
            {"wrapped": 1, "settings changed": 1, "parameters changed": 1, "input changed": 1},
            (
                "conv1 (Sequential) wraps the old conv1, now conv1.0 (1 call renamed under it)",
                "settings changed at 1 call: conv1.0 (Conv2d): in_channels 3 -> 1",
                "input changed at 1 call: <root> (ResNet) input (1, 3, 32, 32) -> (1, 1, 32, 32), "
                "and so the input of conv1.0 (Conv2d)",
            ),
            ("conv1.0 (Conv2d): in_channels 3 -> 1",),
            example_after=gray_image,
        ),
        Refactor(
            "run a stage in half precision inside a wrapper",
            resnet18,
            with_resnet(lambda model: setattr(model, "layer4", HalfPrecision(model.layer4))),
            image,
            # Every call under the wrapper takes and gives f16. An input change is passed on
            # where nothing else can explain it (a first child's, the next call's when its
            # parent's input is not the same tensor); an output is not passed on from a call
            # whose own parameters changed dtype too (their dtype alone may explain it).
            {"wrapped": 1, "input changed": 7, "output changed": 10, "parameters changed": 10},
            # Said by place, once: the stage's cast, not three lines of kinds of fact.
            (
                "layer4 (HalfPrecision) wraps the old layer4, now layer4.stage (18 calls renamed "
                "under it)",
                "dtype f32 -> f16 within layer4.stage (Sequential): the parameters and buffers "
                "of 10 calls, 7 inputs and 10 outputs (and 19 more inputs and outputs they "
                "passed on)",
            ),
            (
                "layer4 (HalfPrecision) wraps the old layer4",
                "dtype f32 -> f16 within the Sequential at the start of layer4: the parameters "
                "and buffers of 10 calls",
            ),
        ),
        Refactor(
            "run two stages in half precision, one between them not",
            resnet18,
            with_resnet(two_stages_in_half_precision),
            image,
            {"wrapped": 2, "input changed": 14, "output changed": 20, "parameters changed": 20},
            # Two places, each said where it is: not one cast "in the model".
            (
                "dtype f32 -> f16 within layer2.stage (Sequential): the parameters and buffers "
                "of 10 calls, 7 inputs and 10 outputs (and 19 more inputs and outputs they "
                "passed on)",
                "dtype f32 -> f16 within layer4.stage (Sequential): the parameters and buffers "
                "of 10 calls, 7 inputs and 10 outputs (and 19 more inputs and outputs they "
                "passed on)",
            ),
            (
                "dtype f32 -> f16 within the Sequential at the start of layer2",
                "dtype f32 -> f16 within the Sequential at the start of layer4",
            ),
        ),
        Refactor(
            "split one block's fused qkv projection into q, k and v",
            with_decoder(fused_attention_in_block_1),
            with_decoder(unchanged),
            tokens,
            {"inserted": 3, "removed": 1},
            # The names say which are new: q, k and v (o kept its name), not "one of v, o".
            (
                "3 calls inserted: blocks.1.attn.q (Linear) at the start of blocks.1.attn "
                "(Attention); blocks.1.attn.k (Linear) after blocks.1.attn.q (Linear); "
                "blocks.1.attn.v (Linear) after blocks.1.attn.k (Linear)",
                "1 call removed: blocks.1.attn.qkv (Linear) at the start of blocks.1.attn "
                "(Attention)",
            ),
            # Without names, the smaller account: the first projection narrowed and two
            # inserted, which two of the four look-alikes cannot be told (said as such, not
            # as `o` inserted), in the block's attention, not at its start, where only q is.
            (
                "2 calls inserted: 2 of blocks.1.attn.q, blocks.1.attn.k, blocks.1.attn.v, "
                "blocks.1.attn.o (Linear look-alikes) in blocks.1.attn",
                "settings changed at 1 call: blocks.1.attn.q (Linear): out_features 48 -> 16",
            ),
        ),
        Refactor(
            "fuse one block's q, k and v projections into one qkv",
            with_decoder(unchanged),
            with_decoder(fused_attention_in_block_1),
            tokens,
            {"inserted": 1, "removed": 3},
            (
                "1 call inserted: blocks.1.attn.qkv (Linear) at the start of blocks.1.attn "
                "(Attention)",
                "3 calls removed: blocks.1.attn.q (Linear) at the start of blocks.1.attn "
                "(Attention); blocks.1.attn.k (Linear) after blocks.1.attn.q (Linear); "
                "blocks.1.attn.v (Linear) after blocks.1.attn.k (Linear)",
            ),
            (
                "2 calls removed: 2 of blocks.1.attn.q, blocks.1.attn.k, blocks.1.attn.v, "
                "blocks.1.attn.o (Linear look-alikes) in blocks.1.attn",
                "settings changed at 1 call: blocks.1.attn.qkv (Linear): out_features 16 -> 48",
            ),
        ),
        Refactor(
            "move a dropout to the end of a numbered MLP, past layers that change its input",
            dropout_at(1),
            dropout_at(4),
            features,
            # The layers after it are renumbered; it now takes the head's output, so its
            # input (and output) changed. No layer was inserted, removed, resized or changed
            # type (it read as `type changed at 4: Linear -> Dropout`, a Linear inserted,
            # `out_features 16 -> 2` and a weight removed).
            {"moved": 1, "renamed": 3, "input changed": 1},
            (
                "1 call moved: 1 (Dropout) -> 4",
                "3 calls renamed: 2 (ReLU) -> 1, 3 (Linear) -> 2, 4 (Linear) -> 3",
            ),
            ("1 call moved: 1 (Dropout) now after 3",),
        ),
        Refactor(
            "feed another input resolution",
            resnet18,
            resnet18,
            image,
            # Each stage's sizes shrink by their own factor (8x8 -> 4x4 after the stem, 2x2
            # -> 1x1 in layer3, and layer4 is 1x1 in both), so no one change is made alike;
            # nothing but the input changed, so every shape follows from it. The oracle, the
            # recorded calls compared one by one: 61 inputs and 55 outputs differ, the
            # 1 + 24 + 6 + 85 below.
            {"input changed": 25, "output changed": 6},
            (
                "the model's input (1, 3, 32, 32) -> (1, 3, 16, 16), and so 24 more inputs and "
                "6 outputs changed shape (and 85 more inputs and outputs they passed on)",
            ),
            ("the model's input (1, 3, 32, 32) -> (1, 3, 16, 16), and so 24 more inputs",),
            example_after=small_image,
        ),
        Refactor(
            "a whole MLP in double precision, fed doubles",
            mlp(*MLP),
            double_precision(mlp(*MLP)),
            features,
            {"input changed": 1, "output changed": 3, "parameters changed": 3},
            (
                "dtype f32 -> f64 in the model: the parameters of 3 calls, 1 input and 3 "
                "outputs (and 8 more inputs and outputs they passed on)",
            ),
            ("dtype f32 -> f64 in the model: the parameters of 3 calls",),
            example_after=double_features,
        ),
        Refactor(
            "every BatchNorm's eps raised, and the head's bias dropped",
            resnet18,
            with_resnet(eps_raised_and_head_bias_dropped),
            image,
            {"settings changed": 21, "parameters changed": 1},
            # The one head change must not hide behind twenty alike: each change said once.
            (
                "settings changed at 21 calls: 20 BatchNorm2d calls (bn1, layer1.0.bn1, "
                "layer1.0.bn2, +17 more): eps 1e-05 -> 0.001; fc (Linear): bias True -> False "
                "(removed bias (f32[1000]))",
            ),
            (
                "20 BatchNorm2d calls (bn1, layer1.0.bn1, layer1.0.bn2, +17 more): eps 1e-05 -> "
                "0.001",
                "fc (Linear): bias True -> False",
            ),
        ),
        Refactor(
            "a one-channel stem",
            resnet18,
            with_resnet(
                lambda model: setattr(model, "conv1", nn.Conv2d(1, 64, 7, 2, 3, bias=False))
            ),
            image,
            {"settings changed": 1, "parameters changed": 1, "input changed": 1},
            (
                "settings changed at 1 call: conv1 (Conv2d): in_channels 3 -> 1",
                "input changed at 1 call: <root> (ResNet) input (1, 3, 32, 32) -> (1, 1, 32, 32), "
                "and so the input of conv1 (Conv2d)",
            ),
            ("conv1 (Conv2d): in_channels 3 -> 1",),
            example_after=gray_image,
        ),
        Refactor(
            "freeze a stage",
            resnet18,
            with_resnet(lambda model: model.layer1.requires_grad_(False)),
            image,
            {"frozen state changed": 8},
            (),
            ("frozen state changed at 8 calls",),
        ),
        Refactor(
            "train mode",
            resnet18,
            train_mode(resnet18),
            lambda: (torch.randn(2, 3, 32, 32),),  # batch norm trains on more than one image
            {"mode changed": 1},
            (),
            ("mode changed",),
        ),
        Refactor("no-op rebuild", resnet18, resnet18, image, {}, (), keeps_structure=True),
        Refactor(
            "fuse the stem",
            resnet18,
            with_resnet(fused_stem),
            image,
            # The fused conv (with the norm folded in: a bias now) inside a ConvReLU2d at
            # conv1, after it the old ReLU (`fuse_modules` puts the very module there); the
            # old norm is an Identity now, and an Identity takes the ReLU's place.
            {
                "wrapped": 1,
                "inserted": 1,
                "type changed": 1,
                "settings changed": 1,
                "parameters changed": 2,
            },
            (
                "conv1 (ConvReLU2d) wraps the old conv1, relu, now conv1.0, conv1.1 (2 calls "
                "renamed under it)",
                "type changed at bn1: BatchNorm2d -> Identity",
                "1 call inserted: relu (Identity) after bn1 (Identity)",
            ),
            ("conv1 (ConvReLU2d) wraps the old conv1",),
        ),
        Refactor(
            "insert a layer into MobileNetV3's features, renumbering the blocks after it",
            mobilenet,
            lambda: _with_inserted_layer(mobilenet(), 3, nn.Identity()),
            image,
            # Blocks 5 and 6 (and 10 and 11) are alike: each pair keeps its order, renumbered
            # with the rest, and never reads as swapped.
            {"inserted": 1, "renamed": 10},
            (
                "features.3 ... features.12 -> features.4 ... features.13, renumbered "
                "(10 subtrees, 169 calls renamed with them)",
                "1 call inserted: features.3 (Identity) after features.2 (InvertedResidual)",
            ),
            ("1 call inserted",),
        ),
        Refactor(
            "group MobileNetV3's later blocks into a Sequential",
            mobilenet,
            lambda: _grouped_from(mobilenet(), 3),
            image,
            # One wrapper around ten old blocks, look-alikes among them (5 and 6, 10 and 11).
            {"wrapped": 1},
            (
                "features.3 (Sequential) wraps the old features.3, features.4, features.5, features.6, features.7, "
                "features.8, features.9, features.10, features.11, features.12, now "
                "features.3.0, features.3.1, features.3.2, features.3.3, feat"
                "ures.3.4, features.3.5, features.3.6, features.3.7, features.3.8, features.3.9 (169 calls renamed under it)",
            ),
            ("features.3 (Sequential) wraps the old features.3, features.4, features.5",),
        ),
        Refactor(
            "an MLP's layers put in a Sequential, its activation changed on the way",
            FlatMlp,
            GroupedMlp,
            features,
            {"wrapped": 1, "type changed": 2},
            (
                "net (Sequential) wraps the old fc1, act, fc2, now net.0, net.1, net.2 (3 calls "
                "renamed under it)",
                "type changed at 2 calls: FlatMlp -> GroupedMlp in <root>, GELU -> ReLU in net.1",
            ),
            ("net (Sequential) wraps the old fc1, act, fc2, now net.0, net.1, net.2",),
        ),
        Refactor(
            "a layer inserted at the start of a top-level Sequential",
            lambda: _top_level_blocks(prepend=False),
            lambda: _top_level_blocks(prepend=True),
            features,
            {"inserted": 1, "renamed": 4},
            (
                "0 ... 3 -> 1 ... 4, renumbered (4 subtrees, 12 calls renamed with them)",
                "1 call inserted: 0 (Identity) at the start of <root> (Sequential)",
            ),
            ("1 call inserted",),
        ),
        Refactor(
            "delete the last of a top-level Sequential's look-alike blocks",
            lambda: _top_level_blocks(prepend=False),
            lambda: _top_level_blocks(prepend=False, count=3),
            features,
            # Which of the four went cannot be told, so all four are named; the place is
            # theirs, in the model (it read `at the start of <root>`, where only the first is).
            {"removed": 3},
            (
                "3 calls removed: one of 0, 1, 2, 3 (Sequential look-alikes, with 2 nested "
                "calls) in <root> (Sequential)",
            ),
            (
                "3 calls removed: one of 0, 1, 2, 3 (Sequential look-alikes, with 2 nested "
                "calls) in the model",
            ),
        ),
        Refactor(
            "delete a MobileNetV3 block",
            mobilenet,
            lambda: _without_block(mobilenet(), 10),
            image,
            {"removed": 19, "renamed": 1},
            # Blocks 10 and 11 are alike in the trace (class, shapes, settings, parameter
            # shapes): which one went cannot be told, so the summary says both.
            (
                "features.12 (Conv2dNormActivation) -> features.11 (4 calls renamed with it)",
                "19 calls removed: one of features.10, features.11 (InvertedResidual look-alikes, "
                "with 18 nested calls) after features.9 (InvertedResidual)",
            ),
            (
                "19 calls removed: one of features.10, features.11 (InvertedResidual look-alikes, "
                "with 18 nested calls) in features after features.9",
            ),
        ),
        # Small MLPs
        Refactor(
            "insert a layer into a Sequential",
            mlp(*MLP),
            mlp(*MLP[:2], nn.Dropout(0.0), *MLP[2:]),
            features,
            {"inserted": 1, "renamed": 3},
            (
                "1 call inserted: 2 (Dropout) after 1 (ReLU)",
                "3 calls renamed: 2 (Linear) -> 3, 3 (ReLU) -> 4, 4 (Linear) -> 5",
            ),
            ("1 call inserted: 2 (Dropout) after 1\n",),
        ),
        Refactor(
            "remove a layer from a Sequential",
            mlp(*MLP),
            mlp(*MLP[:3], *MLP[4:]),
            features,
            {"removed": 1, "renamed": 1},
            ("1 call removed: 3 (ReLU) after 2 (Linear)", "1 call renamed: 4 (Linear) -> 3"),
            ("1 call removed: 3 (ReLU) after 2\n",),
        ),
        Refactor(
            "swap two activations",
            mlp(*MLP_TANH),
            mlp(*MLP_TANH[:3], MLP_TANH[5], MLP_TANH[4], MLP_TANH[3], MLP_TANH[6]),
            features,
            {"swapped": 1},
            ("3 (Tanh) and 5 (ReLU) swapped, now 5 and 3",),
            ("moved",),
        ),
        Refactor(
            "swap two blocks",
            resnet18,
            with_resnet(swapped_blocks),
            image,
            {"swapped": 1},
            ("layer1.0 and layer1.1 (BasicBlock) swapped",),
            keeps_structure=True,  # without names the two blocks are the same
        ),
        Refactor(
            "wrap the whole model",
            mlp(*MLP),
            wrapped(mlp(*MLP)),
            features,
            {"wrapped": 1},
            ("<root> (Sequential) wraps the old model, now 0 (6 calls renamed under it)",),
            ("<root> (Sequential) wraps the old model",),
        ),
        Refactor(
            "unwrap the whole model",
            wrapped(mlp(*MLP)),
            mlp(*MLP),
            features,
            {"unwrapped": 1},
            ("<root> (Sequential) unwrapped: the old 0 is now <root> (6 calls renamed under it)",),
            ("<root> (Sequential) unwrapped",),
        ),
        Refactor(
            "group two layers into a block",
            mlp(*MLP),
            mlp(*MLP[:2], nn.Sequential(*MLP[2:4]), MLP[4]),
            features,
            {"wrapped": 1, "renamed": 1},
            (
                "2 (Sequential) wraps the old 2, 3, now 2.0, 2.1 (2 calls renamed under it)",
                "1 call renamed: 4 (Linear) -> 3",
            ),
            ("2 (Sequential) wraps the old 2, 3",),
        ),
        Refactor(
            "replace one activation",
            mlp(*MLP),
            mlp(MLP[0], nn.GELU(), *MLP[2:]),
            features,
            {"type changed": 1},
            ("type changed at 1: ReLU -> GELU",),
            ("type changed at 1: ReLU -> GELU",),
        ),
        Refactor(
            "insert a LayerNorm where a ReLU is replaced by a GELU",
            mlp(*MLP),
            mlp(L8, nn.LayerNorm(16), nn.GELU(), L16, nn.ReLU(), L4),
            features,
            # The norm came and the activation after it took the ReLU's place (it read as
            # `type changed at 1: ReLU -> LayerNorm`, a GELU inserted and the norm's
            # parameters added). The layers after them are renumbered, the ReLU with them.
            {"type changed": 1, "inserted": 1, "renamed": 4},
            (
                "type changed at 2: ReLU -> GELU",
                "1 call inserted: 1 (LayerNorm) after 0 (Linear)",
                "4 calls renamed: 1 (ReLU) -> 2, 2 (Linear) -> 3, 3 (ReLU) -> 4, 4 (Linear) -> 5",
            ),
            ("type changed at 2: ReLU -> GELU", "1 call inserted: 1 (LayerNorm) after 0\n"),
        ),
        Refactor(
            "drop a bias",
            mlp(*MLP),
            mlp(*MLP[:2], nn.Linear(16, 16, bias=False), *MLP[3:]),
            features,
            {"settings changed": 1, "parameters changed": 1},
            ("settings changed at 1 call: 2 (Linear): bias True -> False",),
            ("2 (Linear): bias True -> False",),
        ),
        Refactor(
            "freeze the first layer",
            mlp(*MLP),
            frozen_first_layer(mlp(*MLP)),
            features,
            {"frozen state changed": 1},
            ("frozen state changed at 1 call: 0 (Linear) now frozen",),
            ("0 (Linear) now frozen",),
        ),
        Refactor(
            "MLP in train mode", mlp(*MLP), train_mode(mlp(*MLP)), features, {"mode changed": 1}
        ),
        Refactor("MLP rebuilt", mlp(*MLP), mlp(*MLP), features, {}, keeps_structure=True),
        Refactor(
            "quantize one layer",
            mlp(*MLP),
            lambda: _quantized(mlp(*MLP)()),
            features,
            # The dynamic quantized class is also called Linear: its settings and
            # parameters tell (corrected after the first run: the class name was my guess).
            {"settings changed": 1, "parameters changed": 1},
            (
                "settings changed at 1 call: 2 (Linear): added dtype=torch.qint8, "
                "added qscheme=torch.per_tensor_affine, dropped bias=True",
            ),
            ("2 (Linear): added dtype=torch.qint8",),
        ),
        Refactor(
            "call a shared module once less",
            steps("a", "act", "b", "act", "c", "act"),
            steps("a", "act", "b", "c", "act"),
            features,
            {"removed": 1, "reuse count changed": 1},
            ("1 call removed: act #2 (ReLU) after b (Linear)", "reuse count changed: act 3 -> 2"),
            ("1 call removed: act #2 (ReLU) after b\n",),
        ),
        Refactor(
            "split a shared module",
            steps("a", "act", "b", "act", "c"),
            steps("a", "act1", "b", "act2", "c", split=True),
            features,
            {"split": 1},
            ("act (ReLU) split into act1, act2",),
            keeps_structure=True,
        ),
        Refactor(
            "merge modules into a shared one",
            steps("a", "act1", "b", "act2", "c", split=True),
            steps("a", "act", "b", "act", "c"),
            features,
            {"merged": 1},
            ("act1, act2 (ReLU) merged into act",),
            keeps_structure=True,
        ),
        Refactor(
            "move a norm to another parent",
            lambda: EncoderDecoder(norm_in_decoder=False).eval(),
            lambda: EncoderDecoder(norm_in_decoder=True).eval(),
            features,
            {"moved": 1, "renamed": 2},
            ("enc.2 (LayerNorm) moved to dec.0",),
            keeps_structure=False,
        ),
        Refactor(
            # Before, the block's new parent drew the old one to it: `enc and dec
            # (Sequential) swapped`, a change nobody made.
            "move a block to another parent",
            lambda: EncoderDecoder(norm_in_decoder=False, norm_block=True).eval(),
            lambda: EncoderDecoder(norm_in_decoder=True, norm_block=True).eval(),
            features,
            {"moved": 1, "renamed": 2},
            ("enc.2 (Sequential, with 3 nested calls) moved to dec.0",),
            keeps_structure=False,
        ),
        # A GPT-shaped decoder
        Refactor(
            "wrap one decoder block",
            with_decoder(unchanged),
            with_decoder(wrap_block),
            tokens,
            {"wrapped": 1},
            (
                "blocks.1 (Sequential) wraps the old blocks.1, now blocks.1.0 (12 calls renamed under it)",
            ),
            ("blocks.1 (Sequential) wraps the old blocks.1",),
        ),
        Refactor(
            "unwrap one decoder block",
            with_decoder(wrap_block),
            with_decoder(unchanged),
            tokens,
            {"unwrapped": 1},
            (
                "blocks.1 (Sequential) unwrapped: the old blocks.1.0 is now blocks.1 "
                "(12 calls renamed under it)",
            ),
            ("blocks.1 (Sequential) unwrapped",),
        ),
        Refactor(
            "a step before the final norm",
            with_decoder(unchanged),
            with_decoder(prefixed_norm),
            tokens,
            {"wrapped": 1, "inserted": 1},
            (
                "norm (Sequential) wraps the old norm, now norm.1 (1 call renamed under it)",
                "1 call inserted: norm.0 (Identity) at the start of norm (Sequential)",
            ),
            ("norm (Sequential) wraps the old norm",),
        ),
        Refactor(
            "delete a decoder block",
            with_decoder(unchanged),
            with_decoder(delete_block),
            tokens,
            {"removed": 12},
            # blocks.1 was deleted, but the three blocks are alike in the trace.
            (
                "12 calls removed: one of blocks.0, blocks.1, blocks.2 (Block look-alikes, "
                "with 11 nested calls) after embed (Embedding)",
            ),
            (
                "12 calls removed: one of blocks.0, blocks.1, blocks.2 (Block look-alikes, "
                "with 11 nested calls) after embed\n",
            ),
        ),
        Refactor(
            "insert inside one of three blocks",
            with_decoder(unchanged),
            with_decoder(dropout_in_one_block),
            tokens,
            {"inserted": 1},
            ("1 call inserted: blocks.1.mlp.3 (Dropout) after blocks.1.mlp.2 (Linear)",),
            ("1 call inserted: blocks.1.mlp.3 (Dropout) in blocks.1.mlp after blocks.1.mlp.2",),
        ),
        Refactor(
            "rename the head",
            with_decoder(unchanged),
            with_decoder(unchanged, head_name="lm_head"),
            tokens,
            {"renamed": 1},
            ("1 call renamed: head (Linear) -> lm_head",),
            keeps_structure=True,
        ),
        Refactor(
            "rename every block's MLP",
            with_decoder(unchanged),
            with_decoder(unchanged, mlp_name="ffn"),
            tokens,
            {"renamed": 3},
            ("blocks.0.mlp (Sequential) -> blocks.0.ffn (4 calls renamed with it)",),
            keeps_structure=True,
        ),
        Refactor(
            "pre-norm to post-norm",
            with_decoder(unchanged),
            with_decoder(unchanged, post_norm=True),
            tokens,
            {"swapped": 6},
            (
                "blocks.0.norm1 (LayerNorm) and blocks.0.attn (Attention) swapped",
                "blocks.1.norm2 (LayerNorm) and blocks.1.mlp (Sequential) swapped",
            ),
            ("blocks.0.norm1 (LayerNorm) and blocks.0.attn (Attention) swapped",),
        ),
        Refactor(
            "widen one block's feed-forward",
            with_decoder(unchanged),
            with_decoder(wider_feed_forward),
            tokens,
            # The hidden activations follow from the first projection's output: its GELU
            # takes and gives the wider tensor, and the second projection takes it.
            {"settings changed": 2, "parameters changed": 2, "output changed": 1},
            (
                "settings changed at 2 calls: blocks.1.mlp.0 (Linear): out_features 32 -> 64",
                "output changed at 1 call: blocks.1.mlp.0 (Linear) output (1, 6, 32) -> "
                "(1, 6, 64), and so the input of blocks.1.mlp.1 (GELU), its output and the "
                "input of blocks.1.mlp.2 (Linear)",
            ),
            ("blocks.1.mlp.0 (Linear): out_features 32 -> 64",),
        ),
        Refactor(
            "replace the activation in every block",
            with_decoder(unchanged),
            with_decoder(relu_in_blocks),
            tokens,
            {"type changed": 3},
            (
                "type changed at 3 calls: GELU -> ReLU in blocks.0.mlp.1, blocks.1.mlp.1, blocks.2.mlp.1",
            ),
            ("type changed at 3 calls: GELU -> ReLU",),
        ),
        Refactor(
            "adapters on every projection",
            with_decoder(unchanged),
            with_decoder(adapters()),
            tokens,
            {"wrapped": 4, "inserted": 8},
            (
                "blocks.0.attn.q (LoRA) wraps the old blocks.0.attn.q, now blocks.0.attn.q.base (1 call renamed under it)",
            ),
            ("blocks.0.attn.q (LoRA) wraps the old blocks.0.attn.q",),
        ),
        Refactor(
            "adapters on all projections but one",
            with_decoder(unchanged),
            with_decoder(adapters(skip=2)),
            tokens,
            {"wrapped": 3, "inserted": 6},
            (
                "blocks.0.attn.o (LoRA) wraps the old blocks.0.attn.o, now blocks.0.attn.o.base (1 call renamed under it)",
            ),
            ("blocks.0.attn.o (LoRA) wraps the old blocks.0.attn.o",),
        ),
        Refactor(
            "PEFT-shaped adapters, their class also named Linear, on q_proj and v_proj",
            llama_shaped(),
            llama_shaped(r"layers\.\d+\.self_attn\.[qv]_proj"),
            tokens,
            {"wrapped": 4, "inserted": 12},
            (
                "layers.0.self_attn.q_proj (Linear) wraps the old layers.0.self_attn.q_proj, now "
                "layers.0.self_attn.q_proj.base_layer (1 call renamed under it)",
            ),
            (
                "4 wraps, 12 calls inserted",
                "layers.0.self_attn.q_proj (Linear) wraps the old layers.0.self_attn.q_proj",
            ),
        ),
        Refactor(
            "PEFT-shaped adapters merged away (merge_and_unload)",
            llama_shaped(r"layers\.\d+\.self_attn\.[qv]_proj"),
            llama_shaped(),
            tokens,
            {"unwrapped": 4, "removed": 12},
            (
                "layers.1.self_attn.v_proj (Linear) unwrapped: the old "
                "layers.1.self_attn.v_proj.base_layer is now layers.1.self_attn.v_proj (1 call "
                "renamed under it)",
            ),
            (
                "4 unwraps, 12 calls removed",
                "layers.1.self_attn.v_proj (Linear) unwrapped: the old "
                "layers.1.self_attn.v_proj.base_layer is now layers.1.self_attn.v_proj",
            ),
        ),
        Refactor(
            "freeze the embedding",
            with_decoder(unchanged),
            with_decoder(freeze_embedding),
            tokens,
            {"frozen state changed": 1},
            ("frozen state changed at 1 call: embed (Embedding) now frozen",),
            ("embed (Embedding) now frozen",),
        ),
        Refactor(
            "a bigger vocabulary",
            with_decoder(unchanged),
            with_decoder(unchanged, vocabulary=48),
            tokens,
            {"settings changed": 1, "parameters changed": 1, "output changed": 1},
            (
                "settings changed at 1 call: head (Linear): out_features 32 -> 48",
                "output changed at 1 call: head (Linear) output (1, 6, 32) -> (1, 6, 48), "
                "and so the output of the model",
            ),
            ("head (Linear): out_features 32 -> 48",),
        ),
        Refactor(
            "decoder rebuilt",
            with_decoder(unchanged),
            with_decoder(unchanged),
            tokens,
            {},
            keeps_structure=True,
        ),
        Refactor(
            "decoder in train mode",
            with_decoder(unchanged),
            train_mode(with_decoder(unchanged)),
            tokens,
            {"mode changed": 1},
        ),
        # Feed-forward stacks of mixed widths (a walk found each summary false before)
        Refactor(
            "narrow every block of a stack of mixed widths",
            lambda: feed_forward_stack([32, 32, 64, 32]),
            lambda: feed_forward_stack([16, 16, 32, 16]),
            features16,
            # Each block keeps its name; the narrowed 64 now looks like the old 32s, which is
            # no swap and no move.
            {"output changed": 4, "settings changed": 8, "parameters changed": 8},
            ("2.0 (Linear): out_features 64 -> 32",),
            ("2.0 (Linear): out_features 64 -> 32",),
        ),
        Refactor(
            "delete a middle block of a stack of mixed widths",
            lambda: feed_forward_stack([32, 64, 32, 64]),
            lambda: without_module(feed_forward_stack([32, 64, 32, 64]), "1"),
            features16,
            {"removed": 4, "renamed": 2},
            (
                "4 calls removed: 1 (Sequential, with 3 nested calls) after 0 (Sequential)",
                "2 ... 3 -> 1 ... 2, renumbered (2 subtrees, 8 calls renamed with them)",
            ),
            ("4 calls removed: 1 (Sequential, with 3 nested calls) after 0",),
        ),
        Refactor(
            "halve the channels of every block of a plain conv stack",
            lambda: conv_blocks([16, 32, 64]),
            lambda: conv_blocks([8, 16, 32]),
            small_image,
            # The new block 2 is set up as the old block 1 was: it stays block 2.
            {"output changed": 6, "settings changed": 6, "parameters changed": 6},
            ("2.0 (Conv2d): in_channels 32 -> 16, out_channels 64 -> 32",),
            ("2.0 (Conv2d): in_channels 32 -> 16, out_channels 64 -> 32",),
        ),
        Refactor(
            "a ModuleList's layers registered in another order, run as before",
            lambda: RegisteredInOrder("abc"),
            lambda: RegisteredInOrder("bac"),
            features16,
            {"renamed": 2},
            ("2 calls renamed: layers.0 (Linear) -> layers.1, layers.1 (Linear) -> layers.0",),
            keeps_structure=True,
        ),
        Refactor(
            "swap two blocks and insert one at the start",
            lambda: feed_forward_stack([32, 64, 128]),
            swapped_after_a_new_block,
            features16,
            {"swapped": 1, "renamed": 1, "inserted": 4},
            (
                "0 and 1 (Sequential) swapped, now 2 and 1 (3 calls renamed under them)",
                "4 calls inserted: 0 (Sequential, with 3 nested calls) at the start of <root> "
                "(Sequential)",
            ),
            (
                "0 and 1 (Sequential) swapped, now 2 and 1",
                "4 calls inserted: 0 (Sequential, with 3 nested calls) at the start of the model",
            ),
        ),
        Refactor(
            # Block 1 keeps its place between them: a swap, not a swap and block 1 moved.
            "swap the first and last of three blocks",
            lambda: feed_forward_stack([32, 64, 128]),
            lambda: reordered(feed_forward_stack([32, 64, 128]), [2, 1, 0]),
            features16,
            {"swapped": 1},
            ("0 and 2 (Sequential) swapped, now 2 and 0 (6 calls renamed under them)",),
            ("0 and 2 (Sequential) swapped, now 2 and 0",),
        ),
        Refactor(
            "swap the first and last of four blocks",
            lambda: feed_forward_stack([32, 64, 128, 256]),
            lambda: reordered(feed_forward_stack([32, 64, 128, 256]), [3, 1, 2, 0]),
            features16,
            {"swapped": 1},
            ("0 and 3 (Sequential) swapped, now 3 and 0 (6 calls renamed under them)",),
            ("0 and 3 (Sequential) swapped, now 3 and 0",),
        ),
        Refactor(
            "group layers into blocks of two",
            lambda: paired_layers(grouped=False),
            lambda: paired_layers(grouped=True),
            features16,
            {"wrapped": 3},
            (
                "0 (Sequential) wraps the old 0, 1, now 0.0, 0.1 (2 calls renamed under it)",
                "1 (Sequential) wraps the old 2, 3, now 1.0, 1.1 (2 calls renamed under it)",
                "2 (Sequential) wraps the old 4, 5, now 2.0, 2.1 (2 calls renamed under it)",
            ),
            ("1 (Sequential) wraps the old 2, 3, now 1.0, 1.1\n",),
            name_free_counts={"wrapped": 3},
        ),
        Refactor(
            "group layers into blocks of two, one activation replaced",
            lambda: paired_layers(grouped=False),
            lambda: paired_layers(grouped=True, middle=nn.GELU),
            features16,
            {"wrapped": 3, "type changed": 1},
            (
                "1 (Sequential) wraps the old 2, 3, now 1.0, 1.1 (2 calls renamed under it)",
                "type changed at 1.1: ReLU -> GELU",
            ),
            ("type changed at 1.1: ReLU -> GELU",),
            name_free_counts={"wrapped": 3, "type changed": 1},
        ),
        Refactor(
            "flatten a nested Sequential and drop a bias in the block after it",
            lambda: block_after_a_stage(flat=False),
            lambda: block_after_a_stage(flat=True, bias=False),
            features16,
            {"unwrapped": 1, "renamed": 1, "settings changed": 1, "parameters changed": 1},
            (
                "1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3 (3 calls "
                "renamed under it)",
                "settings changed at 1 call: 4.0 (Linear): bias True -> False (removed bias "
                "(f32[16]))",
            ),
            ("1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3",),
            name_free_counts={"unwrapped": 1, "settings changed": 1, "parameters changed": 1},
        ),
        Refactor(
            "flatten a Sequential two levels deep at once",
            lambda: two_levels(flat=False),
            lambda: two_levels(flat=True),
            features16,
            {"unwrapped": 1},
            (
                "1 (Sequential) and 1.1 (Sequential) unwrapped: the old 1.0, 1.1.0, 1.1.1, 1.2 "
                "are now 1, 2, 3, 4 (4 calls renamed under it)",
            ),
            ("1 (Sequential) and 1.1 (Sequential) unwrapped",),
            name_free_counts={"unwrapped": 1},
        ),
        Refactor(
            "group layers two levels deep at once",
            lambda: two_levels(flat=True),
            lambda: two_levels(flat=False),
            features16,
            {"wrapped": 1},
            (
                "1 (Sequential) and 1.1 (Sequential) wrap the old 1, 2, 3, 4, now 1.0, 1.1.0, "
                "1.1.1, 1.2 (4 calls renamed under it)",
            ),
            ("1 (Sequential) and 1.1 (Sequential) wrap",),
            name_free_counts={"wrapped": 1},
        ),
        Refactor(
            "a ModuleList's layers registered in another order, and the head's bias dropped",
            lambda: RegisteredInOrder("abc", head_bias=True),
            lambda: RegisteredInOrder("bac", head_bias=False),
            features16,
            {"renamed": 2, "settings changed": 1, "parameters changed": 1},
            (
                "2 calls renamed: layers.0 (Linear) -> layers.1, layers.1 (Linear) -> layers.0",
                "settings changed at 1 call: head (Linear): bias True -> False (removed bias "
                "(f32[4]))",
            ),
            ("settings changed at 1 call: head (Linear): bias True -> False",),
            name_free_counts={"settings changed": 1, "parameters changed": 1},
        ),
        Refactor(
            # The blocks leave layer1 (now an Identity) for the start of layer2, which runs
            # where it ran: without names, layer2 is no moved call.
            "move layer1's blocks to the start of layer2",
            resnet18,
            with_resnet(merged_layer1_into_layer2),
            image,
            {"moved": 2, "renamed": 2, "type changed": 1},
            (
                "layer1.0 (BasicBlock, with 6 nested calls) moved to layer2.0",
                "layer1.1 (BasicBlock, with 6 nested calls) moved to layer2.1",
                "layer2.0 ... layer2.1 -> layer2.2 ... layer2.3, renumbered (2 subtrees, 17 "
                "calls renamed with them)",
                "type changed at layer1: Sequential -> Identity",
            ),
            ("layer1.0 (BasicBlock, with 6 nested calls) moved to layer2.0",),
            name_free_counts={"moved": 2, "inserted": 1, "removed": 1},
        ),
        Refactor(
            # The first block is wrapped, so the block that went is one of the other three,
            # after the first: not one of all four, after the stem.
            "wrap the first of four look-alike blocks in a residual and delete the last",
            lambda: look_alike_stack(),
            lambda: look_alike_stack(residual=(1,), deleted=4),
            lambda: (torch.randn(1, 8),),
            {"wrapped": 1, "removed": 3},
            # Block 2 wrapped and block 1 deleted give the same golden: either may be it.
            (
                "1 (Residual) wraps one of the old 1, 2 (Sequential look-alikes), now 1.inner "
                "(3 calls renamed under it)",
                "3 calls removed: one of 1, 2, 3, 4 (Sequential look-alikes, with 2 nested calls) "
                "after 0 (Linear)",
            ),
            (
                "1 (Residual) wraps one of the old 1, 2 (Sequential look-alikes), now 1.inner\n",
                "3 calls removed: one of 1, 2, 3, 4 (Sequential look-alikes, with 2 nested calls) "
                "after 0",
            ),
            name_free_counts={"wrapped": 1, "removed": 3},
        ),
        Refactor(
            "wrap the second of four look-alike blocks in a residual and delete the third",
            lambda: look_alike_stack(),
            lambda: look_alike_stack(residual=(2,), deleted=3),
            lambda: (torch.randn(1, 8),),
            {"wrapped": 1, "removed": 3},
            # Block 3 wrapped and block 2 deleted give the same golden: either may be it.
            (
                "2 (Residual) wraps one of the old 2, 3 (Sequential look-alikes), now 2.inner "
                "(3 calls renamed under it)",
                "3 calls removed: one of 1, 2, 3, 4 (Sequential look-alikes, with 2 nested calls) "
                "after 0 (Linear)",
            ),
            (
                "2 (Residual) wraps one of the old 2, 3 (Sequential look-alikes), now 2.inner\n",
                "3 calls removed: one of 1, 2, 3, 4 (Sequential look-alikes, with 2 nested calls) "
                "after 0",
            ),
            name_free_counts={"wrapped": 1, "removed": 3},
        ),
        Refactor(
            # Pairing the flattened layers at their places would read the Linear after the
            # removed LayerNorm as a LayerNorm changed into a Linear, and so on to the end.
            "flatten a pair of layers, remove a LayerNorm after them and append a Dropout",
            lambda: flatten_beside(flat=False),
            lambda: flatten_beside(flat=True),
            features16,
            {"unwrapped": 1, "inserted": 1, "removed": 1, "renamed": 2},
            (
                "0 (Sequential) unwrapped: the old 0.0, 0.1 are now 0, 1 (2 calls renamed "
                "under it)",
                "1 call inserted: 5 (Dropout) after 4 (Linear)",
                "1 call removed: 3 (LayerNorm) after 2 (ReLU)",
            ),
            ("1 call inserted: 5 (Dropout) after 4\n", "1 call removed: 3 (LayerNorm) after 2"),
            name_free_counts={"unwrapped": 1, "inserted": 1, "removed": 1},
        ),
        Refactor(
            "unwrap MobileNetV3's stem, drop its norm and add a ReLU after it",
            mobilenet,
            lambda: _with_stem_unwrapped(mobilenet()),
            image,
            {"unwrapped": 1, "renamed": 12, "inserted": 1, "removed": 1},
            (
                "features.0 (Conv2dNormActivation) unwrapped: the old features.0.0, "
                "features.0.2 are now features.0, features.1 (2 calls renamed under it)",
                "1 call inserted: features.2 (ReLU) after features.1 (Hardswish)",
                "1 call removed: features.0.1 (BatchNorm2d) after features.0.0 (Conv2d)",
            ),
            (
                "1 call inserted: features.2 (ReLU) in features after features.1",
                "1 call removed: features.0.1 (BatchNorm2d) in features.0 after features.0.0",
            ),
            name_free_counts={"unwrapped": 1, "inserted": 1, "removed": 1},
        ),
        Refactor(
            "swap two blocks of other widths and drop a bias in one",
            lambda: feed_forward_stack([32, 64, 128]),
            swapped_with_a_bias_dropped,
            features16,
            {"swapped": 1, "settings changed": 1, "parameters changed": 1},
            (
                "0 and 1 (Sequential) swapped, now 1 and 0 (6 calls renamed under them)",
                "settings changed at 1 call: 1.2 (Linear): bias True -> False (removed bias "
                "(f32[16]))",
            ),
            ("0 and 1 (Sequential) swapped, now 1 and 0",),
        ),
        Refactor(
            "flatten blocks of look-alike layers into their parent",
            lambda: look_alike_blocks(flat=False),
            lambda: look_alike_blocks(flat=True),
            features16,
            {"unwrapped": 3},
            ("1 (Sequential) unwrapped: the old 1.0, 1.1 are now 2, 3 (2 calls renamed under it)",),
            ("1 (Sequential) unwrapped: the old 1.0, 1.1 are now 2, 3",),
        ),
        Refactor(
            "flatten a nested Sequential into its parent",
            lambda: conv_stack(flat=False),
            lambda: conv_stack(flat=True),
            small_image,
            {"unwrapped": 1, "renamed": 3},
            (
                "0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2, 0.3, 0.4, 0.5 are now 0, 1, "
                "2, 3, 4, 5 (6 calls renamed under it)",
            ),
            (
                "0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2, 0.3, 0.4, 0.5 are now 0, 1, "
                "2, 3, 4, 5",
            ),
        ),
    ]


def _with_inserted_layer(model: nn.Module, index: int, layer: nn.Module) -> nn.Module:
    layers = list(model.features)
    layers.insert(index, layer)
    model.features = nn.Sequential(*layers)
    return model


def eps_raised_and_head_bias_dropped(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.eps = 1e-3
    model.fc.bias = None


def llama_shaped(adapted: str = "") -> Callable[[], nn.Module]:
    """A two-layer Llama-shaped decoder, with PEFT-shaped LoRA `Linear`s on the projections
    whose paths match `adapted`."""

    def build() -> nn.Module:
        torch.manual_seed(0)
        model = adapters_module.Decoder(layers=2).eval()
        return adapters_module.add_adapters(model, adapted) if adapted else model

    return build


def two_stages_in_half_precision(model: nn.Module) -> None:
    model.layer2 = HalfPrecision(model.layer2)
    model.layer4 = HalfPrecision(model.layer4)


def double_precision(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: build().double()


def double_features() -> tuple[torch.Tensor, ...]:
    return tuple(tensor.double() for tensor in features())


class HalfPrecision(nn.Module):
    """Runs a stage in f16, converting at its edges."""

    def __init__(self, stage: nn.Module) -> None:
        super().__init__()
        self.stage = stage.half()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage(x.half()).float()


class FlatMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class GroupedMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _Blocks(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def _blocks_model(inserted_at: int | None = None, gelu_in: int | None = None) -> nn.Module:
    torch.manual_seed(0)
    blocks: list[nn.Module] = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(4)]
    if inserted_at is not None:
        blocks.insert(inserted_at, nn.Identity())
    if gelu_in is not None:
        blocks[gelu_in][1] = nn.GELU()  # type: ignore[index]
    return _Blocks(blocks)


def _top_level_blocks(*, prepend: bool, count: int = 4) -> nn.Module:
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(count)]
    return nn.Sequential(*([nn.Identity()] if prepend else []), *blocks)


def _grouped_from(model: nn.Module, index: int) -> nn.Module:
    layers = list(model.features)
    model.features = nn.Sequential(*layers[:index], nn.Sequential(*layers[index:]))
    return model


def _without_block(model: nn.Module, index: int) -> nn.Module:
    del model.features[index]
    return model


def _quantized(model: nn.Module) -> nn.Module:
    with warnings.catch_warnings():  # torch deprecates quantized tensors; the module works
        warnings.simplefilter("ignore")  # UserWarning, and DeprecationWarning of torch.ao
        partly_quantized(model)
    return model.eval()


def feed_forward_stack(widths: list[int]) -> nn.Sequential:
    """Feed-forward blocks of 16 features, one hidden width each."""
    torch.manual_seed(0)
    return nn.Sequential(
        *(nn.Sequential(nn.Linear(16, width), nn.GELU(), nn.Linear(width, 16)) for width in widths)
    )


def without_module(model: nn.Sequential, name: str) -> nn.Module:
    """The model's own modules, but the one at `name`: the rest are the same objects."""
    return nn.Sequential(*(module for key, module in model.named_children() if key != name))


def a_stage_flattened_as_a_layer_moves() -> tuple[nn.Sequential, nn.Sequential]:
    """`S(Linear, S(first, second, third))`, the inner stage flattened into the model as a
    LeakyReLU moves from `second` into `first`: the model before, and a copy of it after."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
    first = nn.Sequential(inner, nn.LogSigmoid(), nn.Softplus())
    deep = nn.Sequential(nn.CELU(), nn.LeakyReLU(0.2), nn.Tanhshrink())
    second = nn.Sequential(nn.Hardswish(), deep)
    third = nn.Sequential(nn.ELU(), nn.Linear(8, 8))
    old = nn.Sequential(nn.Linear(8, 8), nn.Sequential(first, second, third))
    new = copy.deepcopy(old)
    first, second, third = new[1]
    moved = second[1][1]
    del second[1][1]
    first[0].insert(1, moved)
    return old, nn.Sequential(new[0], first, second, third)


def conv_stack(*, flat: bool) -> nn.Module:
    """Two conv-BN-ReLU layers and a head, the layers in a Sequential of their own or not."""
    torch.manual_seed(0)
    layers = [
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    ]  # fmt: skip
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3)]
    body = layers if flat else [nn.Sequential(*layers)]
    return nn.Sequential(*body, *head).eval()


def conv_blocks(widths: list[int]) -> nn.Module:
    """Conv-BN-ReLU blocks, each as wide as given, the first taking an image."""
    torch.manual_seed(0)
    blocks, channels = [], 3
    for width in widths:
        conv = nn.Conv2d(channels, width, 3, padding=1)
        blocks.append(nn.Sequential(conv, nn.BatchNorm2d(width), nn.ReLU()))
        channels = width
    return nn.Sequential(*blocks).eval()


class RegisteredInOrder(nn.Module):
    """Two Linears and a LayerNorm in a ModuleList in the given order of `a`, `b`, `c`,
    always run as `a`, `b`, `c`."""

    def __init__(self, order: str, *, head_bias: bool | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        made = {"a": nn.Linear(16, 16), "b": nn.Linear(16, 16, bias=False), "c": nn.LayerNorm(16)}
        self.layers = nn.ModuleList([made[name] for name in order])
        self.at = {name: index for index, name in enumerate(order)}
        # A head only where asked, so the models without one keep their calls.
        self.head = None if head_bias is None else nn.Linear(16, 4, bias=head_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in "abc":
            x = self.layers[self.at[name]](x)
        return x if self.head is None else self.head(x)


def paired_layers(*, grouped: bool, middle: Callable[[], nn.Module] = nn.ReLU) -> nn.Module:
    """Three Linear-activation pairs of 16 features, in Sequentials of two or not; the
    middle pair's activation made by `middle`."""
    torch.manual_seed(0)
    pairs = [[nn.Linear(16, 16), activation()] for activation in (nn.ReLU, middle, nn.ReLU)]
    if grouped:
        return nn.Sequential(*(nn.Sequential(*pair) for pair in pairs))
    return nn.Sequential(*(layer for pair in pairs for layer in pair))


def block_after_a_stage(*, flat: bool, bias: bool = True) -> nn.Module:
    """A Linear, a stage of three layers in a Sequential of its own or not, and a block."""
    torch.manual_seed(0)
    stage = [nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)]
    block = nn.Sequential(nn.Linear(16, 16, bias=bias), nn.Tanh())
    if flat:
        return nn.Sequential(nn.Linear(16, 16), *stage, block)
    return nn.Sequential(nn.Linear(16, 16), nn.Sequential(*stage), block)


def two_levels(*, flat: bool) -> nn.Module:
    """A Linear and a stage whose middle is a Sequential of its own, or the same layers
    flat."""
    torch.manual_seed(0)
    layers = [nn.Linear(16, 16), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32)]
    last = nn.Linear(32, 16)
    if flat:
        return nn.Sequential(*layers, last)
    inner = nn.Sequential(layers[2], layers[3])
    return nn.Sequential(layers[0], nn.Sequential(layers[1], inner, last))


def merged_layer1_into_layer2(model: nn.Module) -> None:
    """layer1's blocks run first in layer2, layer1 left an Identity."""
    model.layer2 = nn.Sequential(*model.layer1, *model.layer2)
    model.layer1 = nn.Identity()


class Residual(nn.Module):
    """`x + inner(x)`."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.inner(x)


def look_alike_stack(residual: tuple[int, ...] = (), deleted: int | None = None) -> nn.Module:
    """A Linear and four look-alike Linear+ReLU blocks (`1` to `4`); the blocks at
    `residual` wrapped in a `Residual`, the one at `deleted` left out."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(4)]
    layers: list[nn.Module] = [nn.Linear(8, 8)]
    for number, block in enumerate(blocks, start=1):
        if number != deleted:
            layers.append(Residual(block) if number in residual else block)
    return nn.Sequential(*layers)


def flatten_beside(*, flat: bool) -> nn.Module:
    """Linear+ReLU in a Sequential of their own, Linear, ReLU, LayerNorm, Linear; or the
    pair flat, the LayerNorm gone and a Dropout at the end."""
    torch.manual_seed(0)
    first, act, second, act2, last = (
        nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16)
    )  # fmt: skip
    if flat:
        return nn.Sequential(first, act, second, act2, last, nn.Dropout(0.1))
    return nn.Sequential(nn.Sequential(first, act), second, act2, nn.LayerNorm(16), last)


def _with_stem_unwrapped(model: nn.Module) -> nn.Module:
    """MobileNetV3 with its stem's conv and activation in `features` itself, its norm left
    out and a ReLU after them."""
    stem = model.features[0]
    model.features = nn.Sequential(stem[0], stem[2], nn.ReLU(), *model.features[1:])
    return model.eval()


def reordered(blocks: nn.Sequential, order: list[int]) -> nn.Module:
    """The same block objects, run (and named) in `order`."""
    return nn.Sequential(*(blocks[index] for index in order))


def swapped_after_a_new_block() -> nn.Module:
    """The first two blocks of `feed_forward_stack([32, 64, 128])` swapped, after a new one."""
    blocks = feed_forward_stack([32, 64, 128])
    return nn.Sequential(feed_forward_stack([16])[0], blocks[1], blocks[0], blocks[2])


def swapped_with_a_bias_dropped() -> nn.Module:
    """The first two blocks of `feed_forward_stack([32, 64, 128])` swapped, the moved first
    block's last Linear without its bias."""
    blocks = feed_forward_stack([32, 64, 128])
    blocks[0][2] = nn.Linear(32, 16, bias=False)
    return nn.Sequential(blocks[1], blocks[0], blocks[2])


def look_alike_blocks(*, flat: bool) -> nn.Module:
    """Three Linear-ReLU blocks of one width, in Sequentials of their own or not."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(3)]
    if flat:
        return nn.Sequential(*(layer for block in blocks for layer in block))
    return nn.Sequential(*blocks)


def features16() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 16),)


REFACTORS = _cases()
