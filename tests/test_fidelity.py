"""Golden files see what refactors silently break: settings, parameters, mode, names (issue 9)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from pytest_fwdorder import (
    FwdOrderWarning,
    TensorSpec,
    UnregisteredModuleError,
    assert_same_structure,
    check_checkpoint,
    trace_forward,
)


def golden(model: nn.Module, *inputs: object, **options: object) -> str:
    return trace_forward(model, *inputs, **options).render()  # type: ignore[arg-type]


IMAGE = torch.randn(1, 3, 8, 8)
ROW = torch.randn(2, 16)

# Pairs that gave byte-identical goldens in format 1: (before, after, input, facet).
PAIRS = {
    "conv kernel and bias": (
        lambda: nn.Conv2d(3, 8, 3, padding=1),
        lambda: nn.Conv2d(3, 8, 5, padding=2, bias=False),
        IMAGE,
        ("settings", "parameters"),
    ),
    "dropout p": (lambda: nn.Dropout(0.1), lambda: nn.Dropout(0.5), ROW, ("settings",)),
    "leaky relu slope": (
        lambda: nn.LeakyReLU(0.1),
        lambda: nn.LeakyReLU(0.3),
        ROW,
        ("settings",),
    ),
    "layer norm eps": (
        lambda: nn.LayerNorm(16, eps=1e-5),
        lambda: nn.LayerNorm(16, eps=1e-6),
        ROW,
        ("settings",),
    ),
}


@pytest.mark.parametrize("name", PAIRS)
def test_a_settings_change_changes_the_golden(name: str) -> None:
    before, after, given, _ = PAIRS[name]

    assert golden(nn.Sequential(before()), given) != golden(nn.Sequential(after()), given)


@pytest.mark.parametrize("name", PAIRS)
def test_hiding_the_facet_restores_the_old_equality(name: str) -> None:
    before, after, given, facets = PAIRS[name]

    assert golden(nn.Sequential(before()), given, hide=facets) == golden(
        nn.Sequential(after()), given, hide=facets
    )


def test_settings_show_floats_exactly() -> None:
    text = golden(nn.Sequential(nn.LayerNorm(16, eps=1e-6)), ROW)

    assert "| settings: normalized_shape=(16,), eps=1e-06, elementwise_affine=True" in text


def test_facts_come_once_per_module_at_its_first_call() -> None:
    relu = nn.ReLU(inplace=True)
    text = golden(nn.Sequential(nn.Linear(16, 16), relu, nn.Linear(16, 16), relu), ROW)

    assert text.count("| settings: inplace=True") == 1
    assert text.count("| parameters: weight f32[16,16], bias f32[16]") == 2


def test_a_user_module_shows_its_extra_repr_on_one_line() -> None:
    class Temperature(nn.Module):
        def extra_repr(self) -> str:
            return "temperature=0.5,\n  learned=False"

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / 0.5

    assert "| settings: temperature=0.5, learned=False" in golden(Temperature(), ROW)


# Mode.


def test_the_root_mode_is_in_the_header() -> None:
    model = nn.Sequential(nn.Dropout(0.1))

    assert "# mode: eval" in golden(model.eval(), ROW)
    assert "# mode: train" in golden(model.train(), ROW)


def test_a_batch_norm_left_in_train_mode_inside_an_eval_model_is_marked() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    model[1].train()

    text = golden(model, IMAGE)

    assert "  1: BatchNorm2d [train] (f32[1,4,6,6]) -> f32[1,4,6,6]" in text.splitlines()
    assert "[eval]" not in text


def test_hiding_mode_makes_train_and_eval_goldens_equal() -> None:
    model = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16))
    model.eval()
    in_eval = golden(model, ROW, hide=("mode",))
    model[1].train()

    assert golden(model, ROW, hide=("mode",)) == in_eval


# Parameters and buffers.


def test_one_of_two_parameters_frozen_is_visible() -> None:
    model = nn.Sequential(nn.Linear(16, 4))
    model[0].bias.requires_grad_(False)

    text = golden(model, ROW)

    assert "| parameters: weight f32[4,16], bias f32[4] frozen" in text
    assert "[frozen]" not in text
    assert "# parameters: 68 (trainable 64, frozen 4)" in text


class Projection(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.register_parameter(name, nn.Parameter(torch.randn(16, 16)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ getattr(self, self.name)


def test_a_renamed_parameter_changes_the_golden_and_the_checkpoint_keys() -> None:
    before = trace_forward(nn.Sequential(Projection("w")), ROW)
    after = trace_forward(nn.Sequential(Projection("weight")), ROW)

    assert "| parameters: w f32[16,16]" in before.render()
    assert "| parameters: weight f32[16,16]" in after.render()
    assert before.state_dict_keys() == ["0.w"]
    assert after.state_dict_keys() == ["0.weight"]


class TiedEncoderDecoder(nn.Module):
    """Like T5: one embedding shared by the encoder, with the head's weight tied to it."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Embedding(10, 4)
        self.encoder = nn.ModuleDict({"embed_tokens": self.shared})
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.shared.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.encoder["embed_tokens"](tokens))


def test_tied_weights_are_shown_with_their_other_names() -> None:
    text = golden(TiedEncoderDecoder(), torch.zeros(1, 3, dtype=torch.long))

    assert (
        "# tied tensors (1):\n#   shared.weight = encoder.embed_tokens.weight, lm_head.weight"
    ) in text
    assert "| parameters: weight f32[10,4] tied to encoder.embed_tokens.weight, lm_head.weight" in (
        text
    )
    assert "# parameters: 40 (trainable 40, frozen 0)" in text  # counted once


def test_the_golden_holds_every_checkpoint_key_of_resnet18() -> None:
    model = torchvision.models.resnet18(weights=None).eval()

    trace = trace_forward(model, torch.randn(1, 3, 32, 32))

    assert sorted(trace.state_dict_keys()) == sorted(model.state_dict())


def test_the_golden_holds_every_checkpoint_key_of_tied_weights() -> None:
    model = TiedEncoderDecoder()

    trace = trace_forward(model, torch.zeros(1, 3, dtype=torch.long))

    assert sorted(trace.state_dict_keys()) == sorted(model.state_dict())


class CallsFirstOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(2, 2)
        self.spare = nn.MultiheadAttention(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def test_a_never_called_module_keeps_its_tensors_and_keys_in_the_golden() -> None:
    model = CallsFirstOnly()

    trace = trace_forward(model, torch.randn(1, 2))

    assert "#   spare: MultiheadAttention | in_proj_weight f32[6,2], in_proj_bias f32[6]" in (
        trace.render()
    )
    assert sorted(trace.state_dict_keys()) == sorted(model.state_dict())


def test_a_buffer_left_out_of_the_state_dict_is_marked() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.ones(16), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.scale

    assert "| buffers: scale f32[16] not saved" in golden(Scaled(), ROW)


# Unregistered modules that own parameters.


class PlainList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = [nn.Linear(16, 16)]
        self.activations = [nn.ReLU()]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activations[0](self.blocks[0](x))


def test_an_unregistered_module_with_parameters_is_a_warning_naming_it() -> None:
    with pytest.warns(FwdOrderWarning, match=r"blocks\[0\] \(Linear: weight, bias\)") as caught:
        trace_forward(PlainList(), ROW)

    assert len(caught) == 1  # the parameterless ReLU stays a quiet mark
    assert caught[0].filename == __file__


def test_unregistered_error_makes_it_an_error() -> None:
    with pytest.raises(UnregisteredModuleError, match=r"neither|never trains them"):
        trace_forward(PlainList(), ROW, unregistered="error")


def test_a_parameterless_unregistered_module_is_only_marked() -> None:
    class SharedOutside(nn.Module):
        activation = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.activation(x)

    # The suite runs with warnings as errors: a warning here would fail the test.
    text = golden(SharedOutside(), ROW)

    assert ": ReLU [unregistered] (f32[2,16]) -> f32[2,16]" in text


# Arguments by name.


class Attention(nn.Module):
    def forward(
        self, hidden: torch.Tensor, mask: torch.Tensor | None = None, scale: float = 1.0
    ) -> torch.Tensor:
        return hidden


class CallsAttention(nn.Module):
    def __init__(self, style: str) -> None:
        super().__init__()
        self.attention = Attention()
        self.style = style

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.style == "positional":
            return self.attention(x, None, 2)
        if self.style == "keyword":
            return self.attention(hidden=x, scale=2, mask=None)
        return self.attention(x, scale=2)


@pytest.mark.parametrize("style", ["positional", "keyword", "default"])
def test_arguments_are_named_whatever_way_they_were_passed(style: str) -> None:
    text = golden(CallsAttention(style), ROW)

    assert "  attention: Attention (f32[2,16], scale=2) -> f32[2,16]" in text.splitlines()


def test_hiding_argument_names_shows_them_as_passed() -> None:
    text = golden(CallsAttention("positional"), ROW, hide=("argument_names",))

    assert "  attention: Attention (f32[2,16], None, 2) -> f32[2,16]" in text.splitlines()


# Every facet on meta comes from the user's module.


def test_meta_and_cpu_goldens_agree_with_every_facet() -> None:
    model = torchvision.models.mobilenet_v3_small(weights=None).eval()
    model.features[0].requires_grad_(False)
    model.features[1].train()

    on_cpu = golden(model, torch.randn(1, 3, 64, 64))

    assert golden(model, TensorSpec((1, 3, 64, 64)), device="meta") == on_cpu


def test_the_golden_declares_format_2_and_what_it_hides() -> None:
    text = golden(nn.Sequential(nn.ReLU()), ROW, hide=("settings", "mode"))

    assert text.startswith("# pytest-fwdorder trace (format 2)\n")
    assert "# hidden: mode, settings" in text


def test_an_unknown_facet_to_hide_is_a_value_error_naming_the_facets() -> None:
    with pytest.raises(ValueError, match=r"cannot hide 'setings': the facets are settings"):
        trace_forward(nn.ReLU(), ROW, hide=("setings",))


# Diffs explain the new facts.


def summary(before: nn.Module, after: nn.Module, given: torch.Tensor) -> str:
    return trace_forward(before, given).diff(trace_forward(after, given)).summary()


def test_a_settings_change_is_named_in_the_summary() -> None:
    text = summary(
        nn.Sequential(nn.Conv2d(3, 8, 3, padding=1)),
        nn.Sequential(nn.Conv2d(3, 8, 5, padding=2, bias=False)),
        IMAGE,
    )

    assert (
        "settings changed at 1 call: 0 (Conv2d): kernel_size (3, 3) -> (5, 5), "
        "padding (1, 1) -> (2, 2), bias True -> False "
        "(removed bias (f32[8]); weight f32[8,3,3,3] -> f32[8,3,5,5])"
    ) in text.splitlines()


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (nn.Dropout(0.1), nn.Dropout(0.5), "p 0.1 -> 0.5"),
        (nn.LeakyReLU(0.1), nn.LeakyReLU(0.3), "negative_slope 0.1 -> 0.3"),
        (nn.LayerNorm(16, eps=1e-5), nn.LayerNorm(16, eps=1e-6), "eps 1e-05 -> 1e-06"),
    ],
)
def test_each_changed_setting_is_named_with_both_values(
    before: nn.Module, after: nn.Module, expected: str
) -> None:
    assert expected in summary(nn.Sequential(before), nn.Sequential(after), ROW)


def test_a_mode_change_of_the_model_is_named_once() -> None:
    text = summary(nn.Sequential(nn.Dropout()).eval(), nn.Sequential(nn.Dropout()).train(), ROW)

    assert "mode changed at 1 place: the model: eval -> train" in text


def test_a_batch_norm_left_in_train_mode_is_named_in_the_summary() -> None:
    after = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16)).eval()
    after[1].train()

    text = summary(nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16)).eval(), after, ROW)

    assert "mode changed at 1 place: 1 (BatchNorm1d): eval -> train" in text


def test_a_renamed_parameter_is_named_in_the_summary() -> None:
    text = summary(nn.Sequential(Projection("w")), nn.Sequential(Projection("weight")), ROW)

    assert "renamed 0.w -> 0.weight (f32[16,16])" in text


def test_a_newly_frozen_parameter_is_named_in_the_summary() -> None:
    after = nn.Sequential(nn.Linear(16, 4))
    after[0].weight.requires_grad_(False)

    text = summary(nn.Sequential(nn.Linear(16, 4)), after, ROW)

    assert "now frozen: 0.weight" in text


def test_assert_same_structure_can_ignore_each_facet() -> None:
    before = trace_forward(nn.Sequential(nn.Dropout(0.1)).eval(), ROW)
    after = trace_forward(nn.Sequential(nn.Dropout(0.5)).train(), ROW)

    with pytest.raises(AssertionError, match="settings changed"):
        assert_same_structure(before, after, ignore=("mode",))
    with pytest.raises(AssertionError, match="mode changed"):
        assert_same_structure(before, after, ignore=("settings",))
    assert_same_structure(before, after, ignore=("settings", "mode"))


def test_check_checkpoint_agrees_with_the_golden_after_a_parameter_rename() -> None:
    old_model = nn.Sequential(Projection("w"))
    new_model = nn.Sequential(Projection("weight"))

    report = check_checkpoint(new_model, old_model.state_dict())
    new_keys = trace_forward(new_model, ROW).state_dict_keys()
    old_keys = trace_forward(old_model, ROW).state_dict_keys()

    assert [problem.key for problem in report.missing] == [
        key for key in new_keys if key not in old_keys
    ]
    assert [problem.key for problem in report.unexpected] == [
        key for key in old_keys if key not in new_keys
    ]


def test_facts_follow_a_module_changed_between_two_traces() -> None:
    # Facts are shared between equal modules; a changed module must not reuse stale ones.
    model = nn.Sequential(nn.Dropout(0.1), nn.Linear(16, 4))
    first = golden(model, ROW)
    model[0].p = 0.5
    model[1].weight.requires_grad_(False)
    model[1].bias = None

    second = golden(model, ROW)

    assert "| settings: p=0.1" in first
    assert "| settings: p=0.5, inplace=False" in second
    assert "| settings: in_features=16, out_features=4, bias=False" in second
    assert "| parameters: weight f32[4,16] frozen" in second


def test_modules_whose_computation_ignores_the_mode_get_no_mode_mark() -> None:
    # Every ReLU replaced by a fresh LeakyReLU, built in train mode inside an eval model.
    model = torchvision.models.resnet18(weights=None).eval()
    for path, module in list(model.named_modules()):
        if isinstance(module, nn.ReLU):
            parent, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent), name, nn.LeakyReLU(0.1))
    model.layer1[0].bn1.train()

    marked = [
        line
        for line in trace_forward(model, torch.randn(1, 3, 64, 64)).render().splitlines()
        if "[train]" in line
    ]

    assert [line.split(":")[0].strip() for line in marked] == ["layer1.0.bn1"]
