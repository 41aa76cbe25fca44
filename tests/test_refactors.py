"""Gating refactors on torchvision ResNet-50: structure, explained diffs, equivalence, checkpoints."""

from __future__ import annotations

import copy
import types
from collections import OrderedDict

import pytest
import torch
import torchvision
from refactors import (
    resnet50,
    with_leaky_relu,
    with_one_input_channel,
    with_se_after_layer2,
    with_split_relu,
)
from torch import nn

from pytest_fwdorder import (
    CheckpointMismatchError,
    NotEquivalentError,
    StructureMismatchError,
    assert_checkpoint_loads,
    assert_equivalent,
    assert_same_structure,
    check_checkpoint,
    copy_weights,
    structure_diff,
    trace_forward,
)

IMAGE = torch.randn(1, 3, 64, 64)


@pytest.fixture(scope="module")
def baseline() -> object:
    return trace_forward(resnet50(), IMAGE)


def test_splitting_the_shared_relu_keeps_the_structure_when_paths_are_ignored(baseline) -> None:
    split = trace_forward(with_split_relu(resnet50()), IMAGE)

    difference = assert_same_structure(baseline, split, ignore=("paths",))

    assert difference.count("renamed") == 48  # per call
    assert difference.explained_counts() == {"split": 16}  # one per Bottleneck
    summary = difference.summary().splitlines()
    assert summary[0] == "same structure (ignoring paths): 16 shared modules split, ignored"
    assert (
        "layer1.0.relu (ReLU) split into layer1.0.relu1, layer1.0.relu2, layer1.0.relu3" in summary
    )
    assert summary[-1] == "(+11 more shared modules split)"


def test_splitting_the_shared_relu_fails_when_paths_count(baseline) -> None:
    split = trace_forward(with_split_relu(resnet50()), IMAGE)

    with pytest.raises(
        StructureMismatchError, match=r"ignoring nothing\):\n.*16 shared modules split"
    ):
        assert_same_structure(baseline, split)


def test_swapping_relu_for_leaky_relu_is_summarised_as_one_type_change(baseline) -> None:
    leaky = trace_forward(with_leaky_relu(resnet50()), IMAGE)

    summary = baseline.diff(leaky).summary()

    assert summary.splitlines()[1] == (
        "type changed at 49 calls: ReLU -> LeakyReLU in relu, layer1.0.relu (3 calls), "
        "layer1.1.relu (3 calls), layer1.2.relu (3 calls), layer2.0.relu (3 calls) (+12 more)"
    )


def test_a_type_mapping_lets_the_leaky_relu_swap_pass(baseline) -> None:
    leaky = trace_forward(with_leaky_relu(resnet50()), IMAGE)

    assert_same_structure(baseline, leaky, ignore=({"LeakyReLU": "ReLU"},))
    with pytest.raises(StructureMismatchError, match="type changed at 49 calls"):
        assert_same_structure(baseline, leaky)


def test_an_inserted_se_block_is_named_with_where_it_went(baseline) -> None:
    with_se = trace_forward(with_se_after_layer2(resnet50()), IMAGE)

    summary = baseline.diff(with_se).summary()

    assert (
        "6 calls inserted: layer2.se (SEBlock, with 5 nested calls) after layer2.3 (Bottleneck)"
        in summary.splitlines()
    )


def test_a_one_channel_first_conv_is_summarised_as_an_input_change() -> None:
    before = trace_forward(resnet50(), torch.randn(1, 3, 224, 224))
    after = trace_forward(with_one_input_channel(resnet50()), torch.randn(1, 1, 224, 224))

    summary = before.diff(after).summary()

    # The model's input reaches conv1 unchanged: one change, said once with where it goes.
    assert (
        "input changed at 1 call: <root> (ResNet) input (1, 3, 224, 224) -> (1, 1, 224, 224), "
        "and so the input of conv1 (Conv2d)"
    ) in summary.splitlines()
    assert summary.splitlines()[0] == (
        "183 calls before, 183 after: 1 call input changed, 1 call settings changed, "
        "1 call parameters changed"
    )
    # The weight's new shape is said with the setting it follows from, in one sentence.
    assert (
        "settings changed at 1 call: conv1 (Conv2d): in_channels 3 -> 1 "
        "(weight f32[64,3,7,7] -> f32[64,1,7,7])"
    ) in summary.splitlines()


def test_ignoring_the_batch_dimension_accepts_another_batch_size(baseline) -> None:
    bigger = trace_forward(resnet50(), torch.randn(3, 3, 64, 64))

    assert_same_structure(baseline, bigger, ignore=("batch",))
    # The batch of the model's input changed, and every call's with it.
    with pytest.raises(
        StructureMismatchError,
        match=r"<root> \(ResNet\) input 1 -> 3, and so the input of conv1 \(Conv2d\)",
    ):
        assert_same_structure(baseline, bigger, ignore=("dim:1",))


def test_ignoring_dtypes_accepts_a_half_precision_copy() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    single = trace_forward(model, torch.randn(2, 4))
    double = trace_forward(copy.deepcopy(model).double(), torch.randn(2, 4, dtype=torch.float64))

    assert_same_structure(single, double, ignore=("dtypes",))


def test_an_unknown_thing_to_ignore_is_rejected_with_the_valid_names(baseline) -> None:
    with pytest.raises(ValueError, match=r"cannot ignore 'names': name one of 'paths', 'dtypes'"):
        assert_same_structure(baseline, baseline, ignore=("names",))


def test_a_model_and_its_renamed_copy_are_equivalent() -> None:
    model = resnet50()
    renamed = with_split_relu(copy.deepcopy(model))

    report = assert_equivalent(model, renamed, IMAGE)

    assert len(report.comparisons) == 183
    assert str(report).startswith("equivalent: 183 paired calls")


def test_a_perturbed_layer_is_reported_as_the_first_divergence() -> None:
    model = resnet50()
    perturbed = copy.deepcopy(model)
    with torch.no_grad():
        perturbed.layer3[2].bn2.weight.mul_(1.5)

    with pytest.raises(
        NotEquivalentError,
        match=r"^first divergence at layer3\.2\.bn2 \(call 113 of 183\): max abs diff .* > atol 1e-05",
    ):
        assert_equivalent(model, perturbed, IMAGE)


def test_copy_weights_pairs_renamed_modules_by_call_not_by_key() -> None:
    source = resnet50()
    target = resnet50()
    target.head = target.fc  # the refactor renamed fc to head
    del target.fc
    target.forward = _forward_with_head.__get__(target)

    copied = copy_weights(source, target, IMAGE)

    assert ("fc", "head") in copied
    assert torch.equal(target.head.weight, source.fc.weight)
    assert_equivalent(source, target, IMAGE)


def _forward_with_head(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
    x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
    return self.head(torch.flatten(self.avgpool(x), 1))


def test_a_renamed_layer_breaks_old_checkpoints_with_the_nearest_key_named() -> None:
    checkpoint = resnet50().state_dict()
    renamed = resnet50()
    renamed.head = renamed.fc
    del renamed.fc

    report = check_checkpoint(renamed, checkpoint)

    assert not report.loads
    assert [str(problem) for problem in report.missing] == [
        "head.weight (1000, 2048) (nearest: fc.weight (1000, 2048))",
        "head.bias (1000,) (nearest: fc.bias (1000,))",
    ]
    assert [problem.key for problem in report.unexpected] == ["fc.weight", "fc.bias"]
    with pytest.raises(CheckpointMismatchError, match=r"missing from the checkpoint \(2\)"):
        assert_checkpoint_loads(renamed, checkpoint)


def test_a_shape_mismatch_in_a_checkpoint_is_listed() -> None:
    report = check_checkpoint(with_one_input_channel(resnet50()), resnet50())

    assert [str(problem) for problem in report.mismatched] == [
        "conv1.weight (64, 1, 7, 7) (nearest: conv1.weight (64, 3, 7, 7))"
    ]


def test_an_unchanged_checkpoint_loads() -> None:
    assert check_checkpoint(resnet50(), resnet50().state_dict()).loads


def test_things_to_ignore_can_be_given_as_a_generator() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    small = trace_forward(model, torch.randn(2, 4))
    large = trace_forward(model, torch.randn(3, 4))

    assert_same_structure(small, large, ignore=(item for item in ["batch"]))


def test_copy_weights_follows_a_module_whose_call_moved() -> None:
    source = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    # The same two layers, registered and called in the other order: `1` runs first.
    reordered = nn.Sequential(OrderedDict([("1", nn.Linear(4, 4)), ("0", nn.Linear(4, 4))]))

    copied = copy_weights(source, reordered, torch.randn(1, 4))

    assert sorted(copied) == [("0", "0"), ("1", "1")]
    assert torch.equal(reordered.get_submodule("1").weight, source[1].weight)


def _children_in_call_order(parent: nn.Module, *inputs: torch.Tensor) -> list[str]:
    """The oracle: the names of `parent`'s children in the order a forward calls them, from
    plain forward hooks on the children (removed after)."""
    order: list[str] = []
    handles = [
        child.register_forward_pre_hook(lambda *_, name=name: order.append(name))
        for name, child in parent.named_children()
    ]
    try:
        with torch.no_grad():
            parent(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return order


def test_two_swapped_blocks_read_as_one_swap(baseline) -> None:
    swapped = resnet50()
    stage = swapped.layer3
    swapped.layer3 = nn.Sequential(
        OrderedDict((name, stage.get_submodule(name)) for name in ["0", "2", "1", "3", "4", "5"])
    )
    stage_input = torch.randn(1, 512, 8, 8)
    before = _children_in_call_order(resnet50().layer3, stage_input)
    after = _children_in_call_order(swapped.layer3, stage_input)
    exchanged = [old for old, new in zip(before, after, strict=True) if old != new]
    assert before == sorted(before)  # the oracle sees an unchanged stage as unchanged
    assert len(exchanged) == 2
    assert after.index(exchanged[0]) == before.index(exchanged[1])

    difference = baseline.diff(trace_forward(swapped, IMAGE))

    first, second = (f"layer3.{name}" for name in exchanged)
    assert f"{first} and {second} (Bottleneck) swapped" in difference.summary().splitlines()
    assert difference.explained_counts() == {"swapped": 1}


def _without_second_relu(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A Bottleneck's forward with its second ReLU call left out: one call fewer."""
    out = self.relu(self.bn1(self.conv1(x)))
    out = self.bn3(self.conv3(self.bn2(self.conv2(out))))
    return self.relu(out + x)


def test_a_name_free_comparison_says_where_a_call_went_in_words(baseline) -> None:
    model = resnet50()
    model.layer3[2].forward = types.MethodType(_without_second_relu, model.layer3[2])
    # The oracle is the module tree: the removed call's module and the one called before it
    # share the parent `layer3.2`, and that is where a reader looks.
    parent = model.get_submodule("layer3.2")
    assert isinstance(parent.get_submodule("bn2"), nn.BatchNorm2d)
    assert isinstance(parent.get_submodule("relu"), nn.ReLU)

    with pytest.raises(StructureMismatchError, match="execution structure differs") as raised:
        assert_same_structure(baseline, trace_forward(model, IMAGE), ignore=("paths",))

    summary = str(raised.value).split("\n\n")[0].splitlines()
    assert "1 call removed: layer3.2.relu #2 (ReLU) in layer3.2 after bn2" in summary, summary
    # No later ReLU call renumbered into a move, no reuse count of blank names.
    assert summary[1] == "183 calls before, 182 after: 1 call removed", summary


def test_a_new_head_says_the_models_output_changed_with_it_once(baseline) -> None:
    model = resnet50()
    model.fc = nn.Linear(2048, 10)
    model.eval()
    # The oracle: a plain forward of each model, and of the old and new head alone.
    with torch.no_grad():
        old_output = tuple(resnet50()(IMAGE).shape)
        new_output = tuple(model(IMAGE).shape)
        new_head_output = tuple(model.fc(torch.randn(1, 2048)).shape)
    assert old_output != new_output == new_head_output

    difference = baseline.diff(trace_forward(model, IMAGE))

    summary = difference.summary().splitlines()
    assert (
        f"output changed at 1 call: fc (Linear) output {old_output} -> {new_output}, "
        "and so the output of the model"
    ) in summary
    assert difference.explained_counts()["output changed"] == 1
    assert difference.count("output changed") == 2  # per call: the head and the model


def test_a_name_free_wrapper_is_not_taken_for_the_next_layers_type_change() -> None:
    # Blank paths pair leftover children in order; the new Sequential holds the old middle
    # Linear, so it must read as a wrapper, and the ReLU after it as replaced by the GELU.
    torch.manual_seed(0)
    layers = [nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)]
    after = nn.Sequential(layers[0], layers[1], nn.Sequential(layers[2]), nn.GELU(), layers[4])
    before_trace = trace_forward(nn.Sequential(*layers), torch.randn(2, 8))
    after_trace = trace_forward(after, torch.randn(2, 8))

    with pytest.raises(StructureMismatchError, match="execution structure differs") as raised:
        assert_same_structure(before_trace, after_trace, ignore=("paths",))

    summary = str(raised.value).partition("\n\n")[0]
    assert summary.splitlines()[1:] == [
        "6 calls before, 7 after: 1 wrap, 1 call type changed",
        "2 (Sequential) wraps the old 2, now 2.0",
        "type changed at 3: ReLU -> GELU",
    ], summary


def test_a_layer_inserted_before_look_alike_blocks_one_of_them_changed_reads_as_no_swap() -> None:
    """Look-alike blocks renumbered by an insertion, one of them changed inside (the second
    reader's case): with the changed one, as many blocks of their class and shapes are on
    each side, so they pair in order: a renumbering, never a swap, and no block moved, by
    name or name-free (where it read as two calls moved into another block)."""
    from refactor_corpus import _blocks_model

    inputs = torch.randn(2, 8)
    before = trace_forward(_blocks_model(), inputs)
    after = trace_forward(_blocks_model(inserted_at=1, gelu_in=3), inputs)

    summary = before.diff(after).summary()

    assert "swapped" not in summary
    assert summary.splitlines()[1:4] == [
        "blocks.1 ... blocks.3 -> blocks.2 ... blocks.4, renumbered (3 subtrees, 9 calls "
        "renamed with them)",
        "type changed at blocks.3.1: ReLU -> GELU",
        "1 call inserted: blocks.1 (Identity) after blocks.0 (Sequential)",
    ], summary
    with pytest.raises(StructureMismatchError, match="execution structure differs") as raised:
        assert_same_structure(before, after, ignore=("paths",))
    assert str(raised.value).partition("\n\n")[0].splitlines()[1:] == [
        "14 calls before, 15 after: 1 call type changed, 1 call inserted",
        "type changed at blocks.3.1: ReLU -> GELU",
        "1 call inserted: blocks.1 (Identity) in blocks after blocks.0",
    ]


class _Parallel(nn.Module):
    """Two branches, each on its own input: `b` does not take `a`'s output."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(y)


def test_a_change_is_passed_on_only_along_a_flow_that_explains_it() -> None:
    """`b`'s input widened with the model's second input, not with `a`'s output, and its
    output because of its own settings: neither is `a`'s consequence."""
    before = trace_forward(_Parallel(8), torch.randn(2, 8), torch.randn(2, 8))
    after = trace_forward(_Parallel(16), torch.randn(2, 8), torch.randn(2, 16))

    summary = before.diff(after).summary()

    assert "and so the input of b" not in summary
    assert "b (Linear) output (2, 8) -> (2, 16)" in summary


def test_a_wrapper_pairs_the_old_call_with_its_exact_look_alike_not_the_first_of_its_class() -> (
    None
):
    """conv1 wrapped after two new layers, the first a Conv2d on the same input: the old
    conv1 is the wrapper's last call (same settings, shapes), and nothing's settings changed."""
    before_model = torchvision.models.resnet18(weights=None).eval()
    after_model = copy.deepcopy(before_model)
    after_model.conv1 = nn.Sequential(
        nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3), nn.Conv2d(3, 64, 7, 2, 3, bias=False)
    )
    inputs = torch.randn(1, 3, 32, 32)

    summary = trace_forward(before_model, inputs).diff(trace_forward(after_model.eval(), inputs))

    assert "conv1 (Sequential) wraps the old conv1, now conv1.2" in summary.summary()
    assert "settings changed" not in summary.summary()


def test_real_peft_lora_reads_as_the_model_and_four_projections_wrapped() -> None:
    # peft's own LoRA layer is a class named `Linear` around the `Linear` it adapts, and it
    # freezes that layer: the diff must still see the wrap (the oracle: peft's own list of
    # the layers it replaced), not inserted calls with the old weight removed.
    peft = pytest.importorskip("peft")
    from adapters import Decoder

    def base() -> nn.Module:
        torch.manual_seed(0)
        return Decoder(layers=2).eval()

    tokens = torch.randint(0, 32, (1, 6))
    config = peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
    adapted = peft.get_peft_model(base(), config).eval()
    replaced = [
        path
        for path, module in adapted.named_modules()
        if isinstance(module, peft.tuners.lora.LoraLayer)
    ]
    assert len(replaced) == 4

    after = trace_forward(adapted, tokens)
    difference = trace_forward(base(), tokens).diff(after)

    summary = difference.summary()
    counts = difference.explained_counts()
    assert counts["wrapped"] == 5, summary  # the model, and each replaced layer
    assert counts["inserted"] == 12, summary  # dropout, A and B in each
    for path in replaced:
        old = path.removeprefix("base_model.model.")
        assert f"{path} (Linear) wraps the old {old}, now {path}.base_layer" in summary, summary
    assert "removed weight" not in summary, summary
    # Name-free too: the frozen layers beside the wrapped ones pair with theirs.
    with pytest.raises(StructureMismatchError, match="execution structure differs") as raised:
        assert_same_structure(trace_forward(base(), tokens), after, ignore=("paths",))
    assert str(raised.value).splitlines()[1] == (
        "28 calls before, 45 after: 5 wraps, 12 calls inserted, 19 calls frozen state changed"
    )


class _Projections(nn.Module):
    """Four look-alike projections, as an attention block has."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v, self.o = (nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o(self.q(x) + self.k(x) + self.v(x))


class _NamedLinear(nn.Module):
    """A wrapper whose class is named as the layer it wraps is (peft's `lora.Linear`)."""

    def __init__(self, base_layer: nn.Module) -> None:
        super().__init__()
        self.base_layer, self.scale = base_layer, nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(self.base_layer(x))


_NamedLinear.__name__ = _NamedLinear.__qualname__ = "Linear"


def test_a_namesake_wrap_beside_a_frozen_sibling_reads_the_same_name_free() -> None:
    """The second reader's case: name-free, the frozen `k` kept the wrapped `q` from pairing
    with its look-alike, and the diff read a move into `q` with `k`'s change lost."""
    inputs = torch.randn(2, 8)
    before = trace_forward(_Projections(), inputs)
    model = _Projections()
    model.q = _NamedLinear(model.q)
    model.k.weight.requires_grad_(False)
    after = trace_forward(model, inputs)

    named = before.diff(after).summary().splitlines()
    with pytest.raises(StructureMismatchError, match="execution structure differs") as raised:
        assert_same_structure(before, after, ignore=("paths",))
    name_free = str(raised.value).partition("\n\n")[0].splitlines()[1:]

    assert named[:4] == [
        "5 calls before, 7 after: 1 wrap, 1 call inserted, 1 call parameters changed, 1 block "
        "differing from the peers now",
        "q (Linear) wraps the old q, now q.base_layer (1 call renamed under it)",
        "1 call inserted: q.scale (Identity) after q.base_layer (Linear)",
        "parameters changed at 1 call: k (Linear): now frozen: k.weight",
    ]
    assert name_free == [
        "5 calls before, 7 after: 1 wrap, 1 call inserted, 1 call parameters changed",
        "q (Linear) wraps the old q, now q.base_layer",
        "1 call inserted: q.scale (Identity) in q after base_layer",
        "parameters changed at 1 call: k (Linear): now frozen: weight",
    ]


class _Reused(nn.Module):
    """`fc` called twice, with a ReLU between."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.act, self.out = nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.fc(self.act(self.fc(x))))


def test_a_namesake_wrap_of_a_module_called_twice_is_one_wrap_of_both_calls() -> None:
    """The second reader's case: a module's later calls show no facts, so its second call
    looked the same as the wrapper's, and only the first read as a wrap. One module was
    wrapped, so it is one wrap, said once with its calls counted (it read as two)."""
    inputs = torch.randn(2, 8)
    before = trace_forward(_Reused(), inputs)
    model = _Reused()
    model.fc = _NamedLinear(model.fc)
    after = trace_forward(model, inputs)

    summary = before.diff(after).summary().splitlines()

    assert summary == [
        "5 calls before, 9 after: 1 wrap, 2 calls inserted",
        "fc (Linear, 2 calls) wraps the old fc, now fc.base_layer (2 calls renamed under it)",
        "2 calls inserted: fc.scale #1 (Identity) after fc.base_layer #1 (Linear); fc.scale #2 "
        "(Identity) after fc.base_layer #2 (Linear)",
    ]


def test_a_module_called_twice_wrapped_and_unwrapped_is_one_wrap_and_one_unwrap() -> None:
    inputs = torch.randn(2, 8)
    before = trace_forward(_Reused(), inputs)
    model = _Reused()
    model.fc = nn.Sequential(model.fc, nn.Identity())
    after = trace_forward(model, inputs)
    # The oracle: torch's own count of the wrapper's calls, by a forward hook.
    calls = []
    handle = model.fc.register_forward_hook(lambda *_: calls.append(1))
    try:
        model(inputs)
    finally:
        handle.remove()
    assert len(calls) == 2

    wrapped = before.diff(after).summary().splitlines()
    unwrapped = after.diff(before).summary().splitlines()
    name_free = structure_diff(after, before, ignore=("paths",)).summary().splitlines()

    assert wrapped[:2] == [
        "5 calls before, 9 after: 1 wrap, 2 calls inserted",
        "fc (Sequential, 2 calls) wraps the old fc, now fc.0 (2 calls renamed under it)",
    ]
    assert unwrapped[:2] == [
        "9 calls before, 5 after: 1 unwrap, 2 calls removed",
        "fc (Sequential, 2 calls) unwrapped: the old fc.0 is now fc (2 calls renamed under it)",
    ]
    assert name_free[:2] == [
        "9 calls before, 5 after: 1 unwrap, 2 calls removed",
        "fc (Sequential, 2 calls) unwrapped: the old fc.0 is now fc",
    ]


class _OneLinear(nn.Module):
    """`fc` called once, between nothing else of its class but the head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.act, self.out = nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(x)))


def test_a_layer_wrapped_in_a_wrapper_inside_a_wrapper_is_one_wrap() -> None:
    """A Linear in two Sequentials read as a type change (Linear -> Sequential), two calls
    inserted and its weight removed; a block in two read as one wrap already."""
    inputs = torch.randn(2, 8)
    before = trace_forward(_OneLinear(), inputs)
    model = _OneLinear()
    linear = model.fc
    model.fc = nn.Sequential(nn.Sequential(linear))
    after = trace_forward(model, inputs)
    # The oracle: torch's own lookup finds the very Linear two wrappers deep, its weight kept.
    assert model.get_submodule("fc.0.0") is linear
    assert not isinstance(model.get_submodule("fc"), nn.Linear)  # the oracle can fail

    wrapped = before.diff(after).summary().splitlines()
    unwrapped = after.diff(before).summary().splitlines()
    name_free = structure_diff(before, after, ignore=("paths",)).summary().splitlines()

    assert wrapped == [
        "4 calls before, 6 after: 1 wrap",
        "fc (Sequential) and fc.0 (Sequential) wrap the old fc, now fc.0.0 (1 call renamed "
        "under it)",
    ]
    assert unwrapped == [
        "6 calls before, 4 after: 1 unwrap",
        "fc (Sequential) and fc.0 (Sequential) unwrapped: the old fc.0.0 is now fc (1 call "
        "renamed under it)",
    ]
    assert name_free == [
        "4 calls before, 6 after: 1 wrap",
        "fc (Sequential) and fc.0 (Sequential) wrap the old fc, now fc.0.0",
    ]
