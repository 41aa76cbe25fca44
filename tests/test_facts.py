"""Module facts: settings, own tensors, ties, state_dict keys, totals and forward names."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable

import pytest
import torch
import torchvision
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.calls.records import ForwardParameters, TensorFact
from pytest_fwdorder.recording import module_facts as facts
from pytest_fwdorder.recording import module_settings as settings_module
from pytest_fwdorder.recording.module_facts import (
    forward_parameters,
    index_tensors,
    module_facts,
    module_tensors,
    state_dict_keys,
    tensor_totals,
    tied_tensors,
)
from pytest_fwdorder.recording.module_settings import (
    EXTRA_REPR_SETTING,
    module_settings,
)


class Scale(nn.Module):
    """A user module with one parameter named `w`."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


class RenamedScale(nn.Module):
    """`Scale` after a refactor renamed its parameter to `weight`."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class Described(nn.Module):
    """A user module that describes itself through extra_repr."""

    def __init__(self, temperature: float) -> None:
        super().__init__()
        self.temperature = temperature

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"


class BrokenDescription(nn.Module):
    """A user module whose extra_repr raises."""

    def extra_repr(self) -> str:
        raise ValueError("no description today")


class AddressDescription(nn.Module):
    """A user module whose extra_repr shows an object's default repr, with its address."""

    def extra_repr(self) -> str:
        return f"helper={object()!r}"


class TinyT5(nn.Module):
    """T5's tying: one embedding shared by the encoder and the output head."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Embedding(10, 4)
        self.encoder = nn.ModuleDict({"embed_tokens": self.shared, "layer": nn.Linear(4, 4)})
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.shared.weight


class WithNonPersistentBuffer(nn.Module):
    """A model with a persistent and a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.register_buffer("position_ids", torch.arange(3), persistent=False)
        self.register_buffer("scale", torch.ones(3))


def _settings_text(module: nn.Module) -> str:
    return ", ".join(f"{name}={text}" for name, text in module_settings(module))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (lambda: nn.Conv2d(3, 8, 3, padding=1), lambda: nn.Conv2d(3, 8, 5, padding=2, bias=False)),
        (lambda: nn.Dropout(0.1), lambda: nn.Dropout(0.5)),
        (lambda: nn.LeakyReLU(0.1), lambda: nn.LeakyReLU(0.3)),
        (lambda: nn.LayerNorm(8, eps=1e-5), lambda: nn.LayerNorm(8, eps=1e-6)),
    ],
    ids=["conv", "dropout", "leaky_relu", "layer_norm_eps"],
)
def test_refactored_settings_give_different_settings(
    before: Callable[[], nn.Module], after: Callable[[], nn.Module]
) -> None:
    assert module_settings(before()) != module_settings(after())


def test_settings_show_conv2d_constructor_arguments() -> None:
    assert _settings_text(nn.Conv2d(3, 8, 3, padding=1)) == (
        "in_channels=3, out_channels=8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
        "dilation=(1, 1), groups=1, bias=True, padding_mode='zeros'"
    )


def test_settings_show_floats_exactly() -> None:
    assert ("eps", "1e-06") in module_settings(nn.LayerNorm(8, eps=1e-6))


def test_settings_read_bias_from_the_parameter() -> None:
    assert ("bias", "False") in module_settings(nn.Linear(3, 4, bias=False))


def test_multihead_attention_settings_include_arguments_stored_elsewhere() -> None:
    settings = dict(module_settings(nn.MultiheadAttention(8, 2, bias=False, add_bias_kv=True)))

    assert (settings["bias"], settings["add_bias_kv"], settings["num_heads"]) == (
        "False",
        "True",
        "2",
    )


def test_settings_of_a_class_with_star_arguments_come_from_constants() -> None:
    assert ("hidden_size", "4") in module_settings(nn.LSTM(3, 4))


def test_settings_never_show_device_or_dtype_arguments() -> None:
    names = {name for name, _ in module_settings(nn.Linear(3, 4, dtype=torch.float64))}

    assert names.isdisjoint({"device", "dtype"})


def test_user_module_settings_are_its_extra_repr() -> None:
    assert module_settings(Described(0.5)) == ((EXTRA_REPR_SETTING, "temperature=0.5"),)


def test_user_module_without_extra_repr_has_no_settings() -> None:
    assert module_settings(Scale()) == ()


def test_broken_extra_repr_gives_a_placeholder() -> None:
    assert module_settings(BrokenDescription()) == (
        (EXTRA_REPR_SETTING, "<extra_repr raised ValueError>"),
    )


def test_addresses_in_extra_repr_are_replaced() -> None:
    assert "0x" not in _settings_text(AddressDescription())


def test_settings_plan_is_built_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    module_settings(nn.Hardtanh(-2.0, 2.0))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("signature inspected again")

    monkeypatch.setattr(inspect, "signature", refuse)

    assert ("min_val", "-1.0") in module_settings(nn.Hardtanh(-1.0, 2.0))


def test_equal_looking_settings_of_other_types_do_not_share_text() -> None:
    """Found reviewing 0.2.0: nested setting types were missing from the shared facts' key."""
    # (True, True) == (1, 1) and both hash alike: shared facts must still tell them apart.
    module_facts(nn.MaxPool2d(3))  # facts are shared only once the class has been seen
    first = module_facts(nn.MaxPool2d(2, padding=(True, True)))  # type: ignore[arg-type]
    second = module_facts(nn.MaxPool2d(2, padding=(1, 1)))

    assert ("padding", "(True, True)") in first.settings
    assert ("padding", "(1, 1)") in second.settings


def test_a_negative_zero_setting_does_not_share_text_with_zero() -> None:
    """Fixed in 0.3.1: `LeakyReLU(-0.0)` and `LeakyReLU(0.0)` shared cached facts."""
    # -0.0 == 0.0 and both hash alike, but the golden writes them differently.
    module_facts(nn.LeakyReLU(0.5))  # facts are shared only once the class has been seen
    first = module_facts(nn.LeakyReLU(0.0))
    second = module_facts(nn.LeakyReLU(-0.0))

    assert ("negative_slope", "0.0") in first.settings
    assert ("negative_slope", "-0.0") in second.settings


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v3_small", "vit_b_16", "convnext_tiny"])
def test_every_torchvision_module_class_gives_stable_settings(name: str) -> None:
    model = torchvision.models.get_model(name, weights=None)
    first_of_class = {type(module): module for module in reversed(list(model.modules()))}

    texts = {cls.__name__: _settings_text(module) for cls, module in first_of_class.items()}

    assert [
        (class_name, text)
        for class_name, text in texts.items()
        if any(word in text for word in ("0x", "device", "cpu", "not readable"))
    ] == []


def test_settings_of_a_torchvision_conv_are_read() -> None:
    model = torchvision.models.resnet50(weights=None)

    assert ("kernel_size", "(7, 7)") in module_settings(model.conv1)


def test_meta_modules_have_the_facts_of_cpu_modules() -> None:
    on_cpu = torchvision.models.resnet18(weights=None)
    with torch.device("meta"):
        on_meta = torchvision.models.resnet18(weights=None)

    assert [module_facts(module) for module in on_meta.modules()] == [
        module_facts(module) for module in on_cpu.modules()
    ]


@pytest.mark.parametrize(
    "build",
    [
        lambda: nn.MultiheadAttention(8, 2, kdim=4, vdim=4),
        lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16),
        lambda: nn.LSTM(3, 4, num_layers=2),
        lambda: nn.Embedding(10, 4, padding_idx=0),
        lambda: nn.LazyLinear(4),
        WithNonPersistentBuffer,
    ],
    ids=["attention", "encoder_layer", "lstm", "embedding", "lazy", "non_persistent_buffer"],
)
def test_meta_modules_have_the_facts_of_cpu_modules_beyond_resnet(
    build: Callable[[], nn.Module],
) -> None:
    on_cpu = build()
    with torch.device("meta"):
        on_meta = build()

    assert [module_facts(module) for module in on_meta.modules()] == [
        module_facts(module) for module in on_cpu.modules()
    ]


def test_tensors_list_own_parameters_then_buffers() -> None:
    tensors = module_tensors(nn.BatchNorm1d(4))

    assert [(fact.name, fact.kind, fact.dtype, fact.shape) for fact in tensors.tensors] == [
        ("weight", "parameter", "f32", (4,)),
        ("bias", "parameter", "f32", (4,)),
        ("running_mean", "buffer", "f32", (4,)),
        ("running_var", "buffer", "f32", (4,)),
        ("num_batches_tracked", "buffer", "i64", ()),
    ]


def test_tensors_are_the_module_own_not_its_children() -> None:
    assert module_tensors(nn.Sequential(nn.Linear(2, 2))).tensors == ()


def test_renamed_parameter_gives_different_tensors() -> None:
    assert module_tensors(Scale()) != module_tensors(RenamedScale())


def test_non_persistent_buffer_is_marked() -> None:
    persistent = {
        fact.name: fact.persistent for fact in module_tensors(WithNonPersistentBuffer()).buffers
    }

    assert persistent == {"position_ids": False, "scale": True}


def test_lazy_parameters_are_uninitialized() -> None:
    weight = module_tensors(nn.LazyLinear(4)).parameters[0]

    assert (weight.name, weight.initialized, weight.dtype) == ("weight", False, "f32")


def test_module_with_all_parameters_frozen_is_frozen() -> None:
    linear = nn.Linear(2, 2).requires_grad_(False)

    assert module_tensors(linear).frozen


def test_batch_norm_without_affine_is_never_frozen() -> None:
    batch_norm = nn.BatchNorm2d(8, affine=False).requires_grad_(False)

    assert not module_tensors(batch_norm).frozen


def test_batch_norm_without_affine_parameters_is_not_frozen() -> None:
    """Issue 8, defect 9: `BatchNorm2d(affine=False)` was marked [frozen] in the golden."""
    trace = trace_forward(
        nn.Sequential(nn.BatchNorm2d(8, affine=False)).eval(), torch.randn(1, 8, 2, 2)
    )

    assert not trace[1].frozen
    assert "[frozen]" not in trace.render()


def test_one_frozen_parameter_of_two_is_partial_freezing() -> None:
    linear = nn.Linear(2, 2)
    linear.bias.requires_grad_(False)

    tensors = module_tensors(linear)

    assert (tensors.frozen, tensors.partially_frozen) == (False, True)


def test_one_frozen_parameter_changes_the_tensor_facts() -> None:
    linear = nn.Linear(2, 2)
    before = module_tensors(linear)
    linear.bias.requires_grad_(False)

    assert module_tensors(linear) != before


def test_tied_weights_are_found_under_every_name() -> None:
    assert tied_tensors(TinyT5()) == {
        "shared.weight": ("encoder.embed_tokens.weight", "lm_head.weight")
    }


def test_untied_weights_are_not_reported() -> None:
    model = TinyT5()
    model.lm_head.weight = nn.Parameter(model.shared.weight.detach().clone())

    assert tied_tensors(model) == {"shared.weight": ("encoder.embed_tokens.weight",)}


@pytest.mark.parametrize(
    "build",
    [lambda: torchvision.models.resnet18(weights=None), WithNonPersistentBuffer, TinyT5],
    ids=["resnet18", "non_persistent_buffer", "tied"],
)
def test_state_dict_keys_match_torch(build: Callable[[], nn.Module]) -> None:
    model = build()

    assert list(state_dict_keys(model)) == list(model.state_dict().keys())


def test_state_dict_keys_include_extra_state() -> None:
    class WithExtraState(nn.Linear):
        def get_extra_state(self) -> dict[str, int]:
            return {"version": 2}

    model = nn.Sequential(WithExtraState(2, 2))

    assert list(state_dict_keys(model)) == list(model.state_dict().keys())


def test_totals_count_tied_tensors_once() -> None:
    model = TinyT5()
    model.encoder["layer"].requires_grad_(False)

    totals = tensor_totals(model)

    assert (totals.parameter_count, totals.trainable_parameter_count) == (
        sum(parameter.numel() for parameter in model.parameters()),
        sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad),
    )


def test_totals_count_buffer_elements() -> None:
    model = torchvision.models.resnet18(weights=None)

    assert index_tensors(model).totals.buffer_count == sum(
        buffer.numel() for buffer in model.buffers()
    )


def test_totals_count_lazy_tensors_apart() -> None:
    totals = tensor_totals(nn.Sequential(nn.LazyLinear(4), nn.Linear(4, 2)))

    assert (totals.parameter_count, totals.uninitialized_count) == (10, 2)


def test_forward_parameters_name_the_positional_parameters() -> None:
    found = forward_parameters(nn.MultiheadAttention(8, 2))

    assert found is not None
    assert found.positional_names[:4] == ("query", "key", "value", "key_padding_mask")


def test_forward_with_star_args_has_no_forward_parameters() -> None:
    class TakesAnything(nn.Module):
        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return inputs[0]

    assert forward_parameters(TakesAnything()) is None


def test_forward_replaced_on_the_instance_has_no_forward_parameters() -> None:
    linear = nn.Linear(2, 2)
    linear.forward = lambda *inputs: inputs[0]  # type: ignore[method-assign]

    assert forward_parameters(linear) is None


def test_forward_patched_on_the_class_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    class Block(nn.Module):
        def forward(self, x: torch.Tensor, mask: object = None) -> torch.Tensor:
            return x

    def other(self: nn.Module, x: torch.Tensor, scale: object = None) -> torch.Tensor:
        return x

    assert forward_parameters(Block()).positional_names == ("x", "mask")  # type: ignore[union-attr]
    monkeypatch.setattr(Block, "forward", other)

    assert forward_parameters(Block()).positional_names == ("x", "scale")  # type: ignore[union-attr]


def test_forward_parameters_list_none_defaults() -> None:
    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, mask: object = None, *, scale: object = None) -> None:
            return None

    assert forward_parameters(Masked()) == ForwardParameters(
        ("x", "mask"), frozenset({"mask", "scale"}), ("scale",)
    )


def test_facts_hold_no_tensor() -> None:
    found = module_facts(nn.Linear(2, 2))

    assert all(
        type(fact) is TensorFact and type(fact.shape) is tuple for fact in found.tensors.tensors
    )


def test_hostile_module_settings_do_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(module_class: type) -> None:
        raise RuntimeError("cannot plan")

    monkeypatch.setattr(settings_module, "_plan_settings", refuse)

    class Fresh(nn.Module):
        pass

    assert module_settings(Fresh()) == (("settings", "<not readable: RuntimeError>"),)


def _scripted(module: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        result: nn.Module = torch.jit.script(module)
    return result


class TiedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embedding.weight
        self.frozen = nn.Linear(4, 4).requires_grad_(False)


class SharedModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.BatchNorm1d(4)
        self.second = self.first


@pytest.mark.parametrize(
    "build",
    [
        lambda: torchvision.models.resnet18(weights=None),
        TiedHead,
        SharedModule,
        lambda: nn.Sequential(nn.Linear(4, 4).requires_grad_(False), nn.BatchNorm1d(4)),
        lambda: nn.Sequential(nn.LazyLinear(3), nn.Linear(3, 3)),
        lambda: nn.Sequential(_scripted(nn.Linear(2, 2)), nn.Linear(2, 2)),
    ],
    ids=["resnet18", "tied", "shared-module", "partly-frozen", "lazy", "scripted-child"],
)
def test_the_recorders_index_counts_and_ties_as_the_full_walk_does(
    build: Callable[[], nn.Module],
) -> None:
    # The recorder's index counts in C when nothing is reached twice; the full walk names.
    model = build()

    quick, full = index_tensors(model, with_keys=False), index_tensors(model)

    assert (quick.totals, quick.tied) == (full.totals, full.tied)
    assert quick.state_dict_keys == ()


class ScaledDescription(nn.Module):
    """A user module whose extra_repr holds a scale it was given, not one computed from data."""

    def extra_repr(self) -> str:
        return "scale=0.011193495243787766, zero_point=76"


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor, torch.quantize_per_channel")
def test_quantized_modules_write_observed_scale_and_zero_point_without_their_values() -> None:
    # Observers compute these from data; their last digits differ between machines
    # (0.011193495243787766 here, 0.011193493381142616 on another CPU type).
    convolution = torch.ao.nn.quantized.Conv2d(3, 4, 3)
    convolution.scale, convolution.zero_point = 0.011193495243787766, 76
    quantize = torch.ao.nn.quantized.Quantize(scale=0.0079, zero_point=3, dtype=torch.quint8)

    assert module_settings(convolution) == (
        (
            EXTRA_REPR_SETTING,
            "3, 4, kernel_size=(3, 3), stride=(1, 1), scale=<from data>, zero_point=<from data>",
        ),
    )
    assert module_settings(quantize) == (
        (EXTRA_REPR_SETTING, "scale=<from data>, zero_point=<from data>, dtype=torch.quint8"),
    )


def test_a_user_modules_own_scale_in_extra_repr_is_written_as_it_is() -> None:
    assert module_settings(ScaledDescription()) == (
        (EXTRA_REPR_SETTING, "scale=0.011193495243787766, zero_point=76"),
    )


class ReadsModeInAHelper(nn.Module):
    """Reads `self.training` in a helper its forward calls, not in forward itself."""

    def _scale(self) -> float:
        return 2.0 if self.training else 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self._scale()


class CallsChildren(nn.Module):
    """A container whose forward only calls its children."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x)


@pytest.mark.parametrize(
    ("module_class", "expected"),
    [
        (nn.ReLU, False),
        (nn.LeakyReLU, False),
        (nn.Sequential, False),
        (nn.Linear, False),
        (CallsChildren, False),
        (torchvision.models.resnet.Bottleneck, False),
        (nn.Dropout, True),
        (nn.BatchNorm2d, True),
        (nn.MultiheadAttention, True),
        (nn.TransformerEncoderLayer, True),
        (ReadsModeInAHelper, True),
    ],
)
def test_reads_training_tells_which_modules_compute_differently_in_train_mode(
    module_class: type[nn.Module], expected: bool
) -> None:
    assert facts.reads_training(module_class) is expected
