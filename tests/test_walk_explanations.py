"""Explanations a new user's walk found false, each checked against the models themselves:
a summary may leave detail to the line diff, but every change it states is true."""

from __future__ import annotations

import copy
import types
from collections import Counter, OrderedDict
from collections.abc import Callable

import pytest
import torch
import torchvision
from refactor_corpus import (
    LoRA,
    a_stage_flattened_as_a_layer_moves,
    feed_forward_stack,
    without_module,
)
from torch import nn
from torchvision.models.resnet import BasicBlock

from pytest_fwdorder import Trace, TraceDiff, structure_diff, trace_forward


def resnet50(*, inplace: bool) -> nn.Module:
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = inplace
    return model


def relu_modules_and_calls(model: nn.Module, image: torch.Tensor) -> tuple[int, int]:
    """The oracle: ReLU modules counted with `modules()`, their calls with a global hook."""
    calls = []
    hook = nn.modules.module.register_module_forward_hook(
        lambda module, inputs, output: calls.append(module) if type(module) is nn.ReLU else None
    )
    try:
        with torch.no_grad():
            model(image)
    finally:
        hook.remove()
    modules = sum(type(module) is nn.ReLU for module in model.modules())
    return modules, len(calls)


def test_a_setting_changed_on_reused_modules_counts_the_modules_and_their_calls() -> None:
    image = torch.randn(1, 3, 32, 32)
    before, after = resnet50(inplace=True), resnet50(inplace=False)
    modules, calls = relu_modules_and_calls(after, image)

    summary = trace_forward(before, image).diff(trace_forward(after, image)).summary()

    # ResNet-50: the stem's ReLU and one per Bottleneck, called three times (16 blocks).
    assert (modules, calls) == (17, 49)
    assert summary.splitlines()[0].endswith(f": {modules} modules settings changed"), summary
    assert (
        f"settings changed at {modules} modules ({calls} calls): {modules} ReLU modules "
        "(relu, layer1.0.relu, layer1.1.relu, +14 more): inplace True -> False"
    ) in summary


def test_the_module_oracle_tells_modules_from_calls() -> None:
    # Were each ReLU called once, the oracle's two counts would agree and the test above
    # could not tell a count of modules from a count of calls.
    modules, calls = relu_modules_and_calls(resnet50(inplace=True), torch.randn(1, 3, 32, 32))

    assert calls > modules


class TwiceThrough(nn.Module):
    """One projection run twice, with another between."""

    def __init__(self, *, bias: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.shared, self.middle = nn.Linear(8, 8, bias=bias), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(self.middle(self.shared(x)))


def test_a_shared_layers_settings_and_parameters_are_counted_by_module() -> None:
    features = torch.randn(2, 8)
    after = TwiceThrough(bias=False)
    calls = []
    hook = after.shared.register_forward_hook(lambda *_: calls.append(1))
    after(features)
    hook.remove()

    summary = trace_forward(TwiceThrough(bias=True), features).diff(trace_forward(after, features))

    assert len(calls) == 2  # the oracle: the hook saw the module's calls
    assert summary.summary().splitlines() == [
        "4 calls before, 4 after: 1 module settings changed, 1 module parameters changed",
        f"settings changed at 1 module ({len(calls)} calls): shared (Linear): bias True -> "
        "False (removed bias (f32[8]))",
    ]


class NamedActivations(nn.Module):
    """A projection and its activation `x`; `replaced`: `x` a LayerNorm, then a GELU `y`."""

    def __init__(self, *, replaced: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 16)
        self.x: nn.Module = nn.LayerNorm(16) if replaced else nn.ReLU()
        self.y = nn.GELU() if replaced else None

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        hidden = self.x(self.fc(features))
        return hidden if self.y is None else self.y(hidden)


def test_a_named_layer_replaced_beside_a_new_one_keeps_its_name() -> None:
    # A name says which module a call is (numbers say only where): `x` became a LayerNorm
    # and `y` came, though the GELU, like the old ReLU, has no parameters.
    features = torch.randn(2, 8)
    before = trace_forward(NamedActivations(replaced=False), features)

    summary = before.diff(trace_forward(NamedActivations(replaced=True), features)).summary()

    assert "type changed at x: ReLU -> LayerNorm" in summary.splitlines(), summary
    assert "1 call inserted: y (GELU) after x (LayerNorm)" in summary.splitlines(), summary


class Thrice(nn.Module):
    """One Linear run three times: its parameters are one module's, under its first call."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.fc(self.fc(x)))


def linear_calls(model: nn.Module, inputs: torch.Tensor) -> int:
    """The oracle: the Linear calls a global forward hook sees."""
    calls = []
    hook = nn.modules.module.register_module_forward_hook(
        lambda module, args, output: calls.append(module) if type(module) is nn.Linear else None
    )
    try:
        model(inputs)
    finally:
        hook.remove()
    return len(calls)


def test_a_cast_of_a_module_run_three_times_counts_one_module_and_its_calls() -> None:
    inputs = torch.randn(2, 8)
    calls = linear_calls(Thrice(), inputs)
    modules = sum(type(module) is nn.Linear for module in Thrice().modules())
    old, new = trace_forward(Thrice(), inputs), trace_forward(Thrice().double(), inputs.double())

    summary = old.diff(new).summary()

    assert (modules, calls) == (1, 3)
    assert "1 module parameters changed" in summary.splitlines()[0], summary
    assert f"the parameters of {modules} module ({calls} calls)" in summary, summary


class Head(nn.Module):
    """`inp`, `act`, then a head `fc`: a Linear(8, 3) unless another is given."""

    def __init__(self, fc: nn.Module | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.act = nn.Linear(4, 8), nn.ReLU()
        self.fc = fc if fc is not None else nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.act(self.inp(x)))


def test_a_head_wrapped_as_it_loses_its_bias_with_a_layer_after_it_is_one_wrap() -> None:
    """fc.0 takes the old fc's input and keeps its shapes (only its bias went); fc.1 takes
    fc.0's output, so of the two Linears only fc.0 can be the old fc."""
    wrapped = Head(nn.Sequential(nn.Linear(8, 3, bias=False), nn.Linear(3, 3)))
    old_fc, new_first = Head().fc, wrapped.fc[0]
    assert (new_first.in_features, new_first.out_features) == (
        old_fc.in_features,
        old_fc.out_features,
    )
    assert wrapped.fc[1].in_features != old_fc.in_features  # the other cannot take its input
    inputs = torch.ones(2, 4)

    summary = trace_forward(Head(), inputs).diff(trace_forward(wrapped, inputs)).summary()

    assert "fc (Sequential) wraps the old fc, now fc.0" in summary, summary
    assert "1 call inserted: fc.1 (Linear) after fc.0 (Linear)" in summary, summary
    assert "fc.0 (Linear): bias True -> False" in summary, summary
    assert "type changed" not in summary, summary


def test_a_head_wrapped_and_run_twice_under_two_names_is_one_wrap() -> None:
    """`Sequential(fc, fc)`: the old fc is fc.0 (and fc.1, the same module: `tied to`)."""
    shared = nn.Linear(8, 8)  # square, so that it can run twice in a row
    old, new = Head(shared), Head(nn.Sequential(shared, shared))
    assert new.fc[0] is new.fc[1] is old.fc
    inputs = torch.ones(2, 4)

    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert "fc (Sequential) wraps the old fc, now fc.0" in summary, summary
    assert "type changed" not in summary, summary


class SharedActivation(nn.Module):
    """Two blocks that share one ReLU (`act`), or each its own, in place (`split`)."""

    def __init__(self, *, split: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        shared = nn.ReLU()
        self.act = None if split else shared
        self.a = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True) if split else shared)
        self.b = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True) if split else shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_a_shared_module_split_with_a_setting_changed_says_it_of_each_new_module() -> None:
    """The split's second module pairs with the shared one's second call, which shows no
    facts; its setting changed all the same, as `modules()` says of both new ReLUs."""
    old, new = SharedActivation(split=False), SharedActivation(split=True)
    changed = [
        name
        for name, module in new.named_modules()
        if isinstance(module, nn.ReLU) and module.inplace != old.act.inplace
    ]
    assert changed == ["a.1", "b.1"]
    inputs = torch.ones(2, 4)

    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert "act (ReLU) split into a.1, b.1" in summary, summary
    assert (
        f"settings changed at {len(changed)} calls: {len(changed)} ReLU calls (a.1, b.1): "
        "inplace False -> True"
    ) in summary, summary


def test_a_split_with_a_setting_changed_compared_without_names_counts_each_new_module() -> None:
    """Without names the split itself does not show, but the settings of both calls that
    now run their own module changed: the old second call is the shared module's, whose
    facts its first call holds."""
    old, new = SharedActivation(split=False), SharedActivation(split=True)
    inputs = torch.ones(2, 4)
    # The oracle: what each call's module is set to, by a global hook on each side.
    settings = []
    for model in (old, new):
        seen: list[bool] = []
        hook = nn.modules.module.register_module_forward_hook(
            lambda module, args, output, seen=seen: (
                seen.append(module.inplace) if isinstance(module, nn.ReLU) else None
            )
        )
        try:
            model(inputs)
        finally:
            hook.remove()
        settings.append(seen)
    assert settings == [[False, False], [True, True]]

    difference = structure_diff(
        trace_forward(old, inputs), trace_forward(new, inputs), ignore=("paths",)
    )

    assert difference.count("settings changed") == 2
    assert "settings changed at 2 calls: 2 ReLU calls (a.1, b.1): inplace False -> True" in (
        difference.summary()
    )


def test_modules_merged_into_one_with_its_setting_changed_say_it_once() -> None:
    """The mirror image: one module now, whose setting changed once (at its first call)."""
    inputs = torch.ones(2, 4)
    split = trace_forward(SharedActivation(split=True), inputs)
    shared = trace_forward(SharedActivation(split=False), inputs)

    summary = split.diff(shared).summary()

    assert "a.1, b.1 (ReLU) merged into act" in summary, summary
    assert "settings changed at 1 module (2 calls): act (ReLU): inplace True -> False" in summary


def _kept_by_identity(old: nn.Module, new: nn.Module) -> dict[str, str | None]:
    """The oracle: each old child's name -> the name its very object has in the new model
    (None where it is gone)."""
    new_names = {id(module): name for name, module in new.named_children()}
    return {name: new_names.get(id(module)) for name, module in old.named_children()}


def test_deleting_a_block_of_mixed_widths_removes_that_block_and_swaps_none() -> None:
    old = feed_forward_stack([32, 64, 32, 64])
    new = without_module(old, "1")
    truth = _kept_by_identity(old, new)
    assert truth == {"0": "0", "1": None, "2": "1", "3": "2"}
    inputs = torch.ones(2, 16)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.count("swapped") == 0, summary
        assert difference.count("removed") == 4, summary
        removed = {change.old.path for change in difference.of_kind("removed") if change.old}
        gone = [name for name, now in truth.items() if now is None]
        assert removed == {f"{name}{inside}" for name in gone for inside in ("", ".0", ".1", ".2")}


def test_narrowing_blocks_so_one_looks_like_another_says_each_at_its_name() -> None:
    """Block 2 narrowed from 64 to 32 looks like the old blocks 0, 1 and 3: no swap, no
    move; each block's settings change at its own name, as `named_modules` gives them."""
    old, new = feed_forward_stack([32, 32, 64, 32]), feed_forward_stack([16, 16, 32, 16])
    changed = {
        name
        for (name, before), (_, after) in zip(old.named_modules(), new.named_modules(), strict=True)
        if isinstance(before, nn.Linear)
        and (before.in_features, before.out_features) != (after.in_features, after.out_features)
    }
    assert len(changed) == 8
    inputs = torch.ones(2, 16)

    difference = trace_forward(old, inputs).diff(trace_forward(new, inputs))

    assert {kind for kind, count in difference.explained_counts().items() if count} == {
        "output changed",
        "settings changed",
        "parameters changed",
    }
    assert {change.new.path for change in difference.of_kind("settings changed") if change.new} == (
        changed
    )


def test_one_activation_replaced_in_a_long_stack_is_one_type_change_without_names() -> None:
    """Past the short stretches that pair by the cheapest edit, look-alike calls still pair
    in place around the one that changed: no call inserted, removed or moved."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(500):
        layers += [nn.Linear(4, 4), nn.ReLU()]
    old = nn.Sequential(*layers)
    layers[501] = nn.GELU()
    new = nn.Sequential(*layers)
    changed = [
        name
        for (name, before), (_, after) in zip(
            old.named_children(), new.named_children(), strict=True
        )
        if type(before) is not type(after)
    ]
    assert changed == ["501"]
    inputs = torch.ones(1, 4)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        assert difference.explained_counts() == {"type changed": 1}, difference.summary()
        where = [change.new.path for change in difference.of_kind("type changed") if change.new]
        assert where == changed, difference.summary()


class CachedBlock(nn.Module):
    """A decoder block that reads the keys of the blocks before it from a cache with a slot
    per block (a Hugging Face `DynamicCache`), and fills the first empty one."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor | None]) -> torch.Tensor:
        filled = [keys for keys in cache if keys is not None]
        out = self.proj(x + sum(filled, torch.zeros_like(x)))
        cache[len(filled)] = out
        return out


class CachedDecoder(nn.Module):
    def __init__(self, blocks: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(CachedBlock() for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cache: list[torch.Tensor | None] = [None] * len(self.blocks)
        for block in self.blocks:
            x = block(x, cache)
        return x


def test_a_block_deleted_from_blocks_told_apart_only_by_their_cache_is_one_of_them() -> None:
    """Each block is given the keys of the blocks before it, so no two are given the same;
    with block 3 of 6 deleted, which one went cannot be read from the calls, and the
    summary says one of them, not that the last one went (a Hugging Face decoder's cache)."""
    old = CachedDecoder(6)
    new = CachedDecoder(6)
    del new.blocks[3]
    features = torch.randn(1, 8)
    given = []
    hook = nn.modules.module.register_module_forward_pre_hook(
        lambda module, inputs: (
            given.append(sum(keys is not None for keys in inputs[1]))
            if type(module) is CachedBlock
            else None
        )
    )
    try:
        new(features)
    finally:
        hook.remove()
    assert given == [0, 1, 2, 3, 4]  # the oracle: each block given a cache of its own size
    before, after = trace_forward(old, features), trace_forward(new, features)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"removed": 2, "input changed": 5}, summary
        assert "removed: one of blocks.0, blocks.1, blocks.2, blocks.3, blocks.4, blocks.5 " in (
            summary
        )


class TwoHeads(nn.Module):
    """Two heads whose outputs are returned in a dict, in the given order of their names."""

    def __init__(self, order: str, *, flag: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 1)
        self.order, self.flag = order, flag

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        outputs: dict[str, object] = {name: getattr(self, name)(x) for name in self.order}
        if self.flag:
            outputs["flag"] = True
        return outputs


def test_a_dicts_keys_in_another_order_read_as_reordered_not_added_and_dropped() -> None:
    features = torch.randn(1, 4)
    old, new, flagged = TwoHeads("ab"), TwoHeads("ba"), TwoHeads("ba", flag=True)
    old_out, new_out = old(features), new(features)
    # The oracle: the same keys with the same shapes, in another order.
    assert list(old_out) == ["a", "b"]
    assert list(new_out) == ["b", "a"]
    assert {key: value.shape for key, value in old_out.items()} == {
        key: value.shape for key, value in new_out.items()
    }
    before = trace_forward(old, features)

    for after, tail in ((new, ""), (flagged, " and added 'flag': True")):
        traced = trace_forward(after, features)
        for difference in (before.diff(traced), structure_diff(before, traced, ignore=("paths",))):
            summary = difference.summary()
            assert (
                "output changed at 1 call: <root> (TwoHeads) output keys reordered: 'a', 'b' -> "
                f"'b', 'a'{tail}\n"
            ) in summary + "\n", summary
            assert "dropped" not in summary, summary


def test_a_dicts_keys_reordered_and_one_widened_read_by_key() -> None:
    features = torch.randn(1, 4)
    old, new = TwoHeads("ab"), TwoHeads("ba")
    new.a = nn.Linear(4, 5)
    assert new(features)["a"].shape == (1, 5)  # the oracle: the widened head's key
    before, after = trace_forward(old, features), trace_forward(new, features)

    summary = before.diff(after).summary()

    assert (
        "<root> (TwoHeads) output keys reordered: 'a', 'b' -> 'b', 'a' and 'a': f32[1,3] -> "
        "f32[1,5];"
    ) in summary, summary
    assert "dropped" not in summary, summary


class Recurrent(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.gru = nn.Linear(4, 8), nn.GRU(8, 8, layers)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        output: tuple[torch.Tensor, torch.Tensor] = self.gru(self.embed(x))
        return output


def test_a_tuples_shapes_that_trade_places_are_shapes_changed_not_a_reorder() -> None:
    """A GRU's (sequence, last state) over 3 steps of 1 layer, then 1 step of 3 layers: each
    output changed shape in its place; a tuple has no keys to say it was reordered."""
    old, new = Recurrent(1), Recurrent(3)
    steps, step = torch.randn(3, 1, 4), torch.randn(1, 1, 4)
    assert [tuple(value.shape) for value in old(steps)] == [(3, 1, 8), (1, 1, 8)]
    assert [tuple(value.shape) for value in new(step)] == [(1, 1, 8), (3, 1, 8)]

    summary = trace_forward(old, steps).diff(trace_forward(new, step)).summary()

    assert "gru (GRU) output (3, 1, 8), (1, 1, 8) -> (1, 1, 8), (3, 1, 8)" in summary, summary
    assert "reordered" not in summary, summary


class TinyLanguageModel(nn.Module):
    """An embedding, a body and a head, the head's weight the embedding's where `tied`."""

    def __init__(self, *, tied: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.body = nn.Embedding(50, 16), nn.Linear(16, 16)
        self.head = nn.Linear(16, 50, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(tokens)))


def test_tying_weights_is_a_change_without_names_too() -> None:
    """Which tensor a weight is tied to is a name; that it is tied is structure: a name-free
    comparison said `no differences` for a model that now has 800 parameters fewer."""
    untied, tied = TinyLanguageModel(tied=False), TinyLanguageModel(tied=True)
    # The oracle: the tied model holds one weight fewer, shared by two modules.
    assert tied.head.weight is tied.embed.weight
    assert (
        sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters())
        == 50 * 16
    )
    tokens = torch.randint(0, 50, (1, 5))
    before, after = trace_forward(untied, tokens), trace_forward(tied, tokens)

    named = before.diff(after).summary()
    name_free = structure_diff(before, after, ignore=("paths",))

    assert (
        "embed (Embedding): embed.weight now tied to head.weight; head (Linear): head.weight now "
        "tied to embed.weight"
    ) in named
    assert name_free.explained_counts() == {"parameters changed": 2}, name_free.summary()
    assert (
        "embed (Embedding): weight now tied to another tensor; head (Linear): weight now tied to "
        "another tensor"
    ) in name_free.summary()


class PooledLevels(nn.Module):
    """Look-alike heads, each pooling the stem's map at its own size (a feature pyramid)."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.sizes = sizes
        self.stem = nn.Conv2d(3, 8, 1)
        self.heads = nn.ModuleList(nn.AdaptiveAvgPool2d(1) for _ in sizes)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        features = self.stem(x)
        return [
            head(nn.functional.adaptive_avg_pool2d(features, size))
            for head, size in zip(self.heads, self.sizes, strict=True)
        ]


def test_a_head_told_apart_by_what_it_is_given_is_named_not_hedged() -> None:
    """The heads are alike, but each is given its own level and the others' levels did not
    change: the one given the 16-pixel level went, and the summary names it (not `one of`
    the heads, beside a rename that says the last one stayed)."""
    image = torch.randn(1, 3, 32, 32)
    new = PooledLevels([32, 8])
    given = []
    hook = nn.modules.module.register_module_forward_pre_hook(
        lambda module, inputs: (
            given.append(inputs[0].shape[-1]) if type(module) is nn.AdaptiveAvgPool2d else None
        )
    )
    try:
        new(image)
    finally:
        hook.remove()
    assert given == [32, 8]  # the oracle: the 16-pixel level is the one not given
    before, after = trace_forward(PooledLevels([32, 16, 8]), image), trace_forward(new, image)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert "1 call removed: heads.1 (AdaptiveAvgPool2d) after heads.0" in summary, summary
        assert "one of" not in summary, summary


class Holder(nn.Module):
    """A model held as `model` (a PEFT model's own wrapper)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.model(tokens)
        return output


def test_a_tied_model_wrapped_whole_keeps_its_ties() -> None:
    """Wrapped, the tied weights are still tied to each other, now under `model.`: no tie is
    said to change (it read `now tied to model.head.weight; no longer tied to head.weight`)."""
    tied = TinyLanguageModel(tied=True)
    held = Holder(tied)
    assert held.model.head.weight is held.model.embed.weight  # the oracle: still one tensor
    tokens = torch.randint(0, 50, (1, 5))

    difference = trace_forward(tied, tokens).diff(trace_forward(held, tokens))

    assert difference.explained_counts() == {"wrapped": 1}, difference.summary()


class KeywordBlock(nn.Module):
    """A Linear that takes (and ignores) keyword arguments, as a Hugging Face layer does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, **options: object) -> torch.Tensor:
        output: torch.Tensor = self.proj(x)
        return output


class KeywordStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head = nn.Linear(8, 8), nn.Linear(8, 2)
        self.blocks = nn.ModuleList(KeywordBlock() for _ in range(3))

    def forward(self, x: torch.Tensor, **options: object) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x, **options)
        output: torch.Tensor = self.head(x)
        return output


class PassingOptions(nn.Module):
    """A wrapper that passes an option down, as a PEFT model passes `output_attentions`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.model(x, output_attentions=None)
        return output


def test_a_model_wrapped_whole_that_passes_an_option_down_is_a_wrap_not_blocks_replaced() -> None:
    """The blocks are the same modules, now given an option: the wrap and the option, not
    every block removed and inserted again (a PEFT model around a decoder read so)."""
    stack = KeywordStack()
    wrapped = PassingOptions(stack)
    given: list[dict[str, object]] = []
    hooks = [
        block.register_forward_pre_hook(
            lambda module, inputs, keywords: given.append(dict(keywords)), with_kwargs=True
        )
        for block in stack.blocks
    ]
    try:
        wrapped(torch.randn(1, 8))
    finally:
        for hook in hooks:
            hook.remove()
    assert given == [{"output_attentions": None}] * 3  # the oracle: each block given it
    features = torch.randn(1, 8)

    difference = trace_forward(stack, features).diff(trace_forward(wrapped, features))

    summary = difference.summary()
    assert difference.explained_counts() == {"wrapped": 1, "input changed": 4}, summary
    assert "<root> (PassingOptions) wraps the old model (9 calls renamed under it)" in summary


def _summaries(old: nn.Module, new: nn.Module) -> tuple[list[str], list[str]]:
    """The lines of the summary of the diff from `old` to `new`, named and name-free."""
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    name_free = structure_diff(before, after, ignore=("paths",))
    return before.diff(after).summary().splitlines(), name_free.summary().splitlines()


def _stem_and_head() -> nn.Sequential:
    """A stem stage of three layers, then three layers of the model's own."""
    torch.manual_seed(0)
    stem = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
    return nn.Sequential(stem, nn.SiLU(), nn.SELU(), nn.Linear(8, 8))


def test_a_model_wrapped_whole_as_its_stem_is_flattened_is_a_wrap_and_an_unwrap() -> None:
    """The model put in a new Sequential as its stem's layers are put in its own: the two
    models paired, the stem read as the old model's, and the layers after it said moved
    into it (`1 (SiLU) moved to 0.3`, one move per layer). The new model's only call is the
    old model (`stage_readings.model_readings`), and the stem, which runs inside the old
    model, never pairs with the new model, which holds it (`call_tree.inverts_nesting`)."""
    old = _stem_and_head()
    model = copy.deepcopy(old)
    new = nn.Sequential(nn.Sequential(*model[0], *list(model)[1:]))
    named, name_free = _summaries(old, new)

    assert named == [
        "8 calls before, 8 after: 1 wrap, 1 unwrap",
        "<root> (Sequential) wraps the old model, now 0 (4 calls renamed under it)",
        "0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2",
    ], named
    assert name_free[1:] == [
        "<root> (Sequential) wraps the old model, now 0",
        "0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2",
    ], name_free


def test_a_model_unwrapped_whole_as_its_first_layers_are_wrapped_is_an_unwrap_and_a_wrap() -> None:
    """The mirror image: the model's only stage taken out as its first three layers are put
    in a stage, not three layers moved out of it."""
    body = _stem_and_head()
    old = nn.Sequential(nn.Sequential(*body[0], *list(body)[1:]))
    model = copy.deepcopy(old)[0]
    new = nn.Sequential(nn.Sequential(*list(model)[:3]), *list(model)[3:])
    named, name_free = _summaries(old, new)

    assert named == [
        "8 calls before, 8 after: 1 wrap, 1 unwrap",
        "0 (Sequential) wraps the old 0.0, 0.1, 0.2",
        "<root> (Sequential) unwrapped: the old 0 is now <root> (4 calls renamed under it)",
    ], named
    assert name_free[1:] == [
        "0 (Sequential) wraps the old 0.0, 0.1, 0.2",
        "<root> (Sequential) unwrapped: the old 0 is now <root>",
    ], name_free


def test_a_block_moved_out_of_a_stage_it_was_most_of_is_one_move_without_names() -> None:
    """`dec.1`, six of the seven calls in `dec`, moved into `enc`: the reading from the calls'
    places pairs `dec` with `dec`, but `dec` then holds one of its seven nested calls, and
    a reading was confirmed only where half of them pair within the partner. Without names
    the diff read the model wrapped whole, both stages unwrapped and a Linear moved; `dec`
    keeps one of its two children, each child counted with what it holds."""
    torch.manual_seed(0)
    old = nn.Sequential()
    old.add_module("enc", nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Tanh(), nn.Linear(8, 8))))
    block = nn.Sequential(
        nn.GELU(), nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 8), nn.Softsign(), nn.Linear(8, 8)
    )
    old.add_module("dec", nn.Sequential(nn.Linear(8, 8), block))
    new = copy.deepcopy(old)
    moved = new.dec[1]
    del new.dec[1]
    new.enc.insert(1, moved)
    named, name_free = _summaries(old, new)

    moved_line = "dec.1 (Sequential, with 6 nested calls) moved to enc.1"
    assert named == [
        "15 calls before, 15 after: 1 move to another parent, 1 subtree renamed",
        moved_line,
        "enc.1 (Sequential) -> enc.2 (3 calls renamed with it)",
    ], named
    assert name_free == ["15 calls before, 15 after: 1 move to another parent", moved_line], (
        name_free
    )


def test_a_stage_unwrapped_as_a_layer_in_it_is_wrapped_reads_so_without_names() -> None:
    """ResNet-18 whose `layer4` held its two blocks in a Sequential of their own, unwrapped,
    as the first block's downsampling conv is put in a Sequential. The reading from the
    calls' places (each block's calls paired with those at its place) states fewer changes
    than the first reading, and was kept at once, before the reading of the stage as
    flattened (two changes) was tried: each round of readings now keeps its best."""
    torch.manual_seed(0)
    old = torchvision.models.resnet18(weights=None).eval()
    old.layer4 = nn.Sequential(old.layer4)
    new = copy.deepcopy(old)
    new.layer4 = new.layer4[0]
    new.layer4[0].downsample[0] = nn.Sequential(new.layer4[0].downsample[0])
    inputs = torch.randn(1, 3, 32, 32)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    summary = structure_diff(before, after, ignore=("paths",)).summary().splitlines()

    assert summary == [
        "77 calls before, 77 after: 1 wrap, 1 unwrap",
        "layer4.0.downsample.0 (Sequential) wraps the old layer4.0.0.downsample.0, now "
        "layer4.0.downsample.0.0",
        "layer4.0 (Sequential) unwrapped: the old layer4.0.0, layer4.0.1 are now layer4.0, "
        "layer4.1",
    ], summary


def test_a_block_wrapped_with_one_layer_is_a_wrap_not_the_block_made_a_sequential() -> None:
    """A ViT's MLP blocks given LoRA adapters on all projections but one, and the MLP of
    layer 10 wrapped as `Sequential(mlp, Dropout)`. The wrapper holds two children, and one
    of them (the new Dropout) paired with the old MLP's last Dropout: half of its children,
    which once confirmed the wrapper as the old MLP (`type changed: MLPBlock -> Sequential`).
    A child counts toward that half only where the others were moved, not put in."""
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    old = VisionTransformer(
        image_size=32, patch_size=16, num_layers=12, num_heads=2, hidden_dim=16, mlp_dim=32
    ).eval()
    new = copy.deepcopy(old)
    for name, layer in new.encoder.layers.named_children():
        for index in (0, 3):
            if (name, index) != ("encoder_layer_8", 0):
                layer.mlp[index] = LoRA(layer.mlp[index], rank=4)
    block = new.encoder.layers.encoder_layer_10
    block.mlp = nn.Sequential(block.mlp, nn.Dropout(0.0))
    inputs = torch.randn(1, 3, 32, 32)
    # new.eval(): the adapters and the wrapper are made in training mode, the model is not
    before, after = trace_forward(old, inputs), trace_forward(new.eval(), inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert summary.startswith("140 calls before, 211 after: 24 wraps, 47 calls inserted\n"), (
            summary
        )
        assert difference.explained_counts() == {"wrapped": 24, "inserted": 47}, summary


def test_a_sequential_put_inside_a_block_is_a_wrap_not_the_block_made_a_sequential() -> None:
    """MobileNetV3's `features.3.block` put in a Sequential: the new Sequential holds every
    call the old block (an InvertedResidual) held, one fewer than the block around it, so
    it paired with the old block by its Dice as a block made a subclass (`type changed at
    features.3.block: InvertedResidual -> Sequential`), and the block read as a new wrapper.
    A call of the old call's class and path around it that holds only it is the block.
    Without names no trace tells this from a stage made a subclass inside a new wrapper
    (`test_a_stage_made_a_subclass_inside_a_new_wrapper_leaves_its_parent_in_place`), and
    the name-free diff reads it as before."""
    torch.manual_seed(0)
    old = torchvision.models.mobilenet_v3_small(weights=None).eval()
    new = copy.deepcopy(old)
    new.features[3].block = nn.Sequential(new.features[3].block)
    inputs = torch.randn(1, 3, 32, 32)
    before, after = trace_forward(old, inputs), trace_forward(new.eval(), inputs)

    difference = before.diff(after)

    summary = difference.summary()
    assert "features.3.block (Sequential) wraps the old features.3.block, now " in summary, summary
    counts = difference.explained_counts()
    assert counts["wrapped"] == 1, summary
    assert "type changed" not in counts, summary


def test_a_sequential_taken_from_around_a_block_is_an_unwrap_not_the_block_made_a_subclass() -> (
    None
):
    """The mirror image: MobileNetV3's `features.3.block` held in a Sequential, taken out.
    The old Sequential around it holds every call the new InvertedResidual holds, so it
    paired with it by its Dice as a Sequential made an InvertedResidual (`type changed at
    features.3`), and the block read as unwrapped. A call of another class that has the
    class and path of the call around the old one is that call's."""
    torch.manual_seed(0)
    old = torchvision.models.mobilenet_v3_small(weights=None).eval()
    old.features[3].block = nn.Sequential(old.features[3].block)
    new = copy.deepcopy(old)
    new.features[3].block = new.features[3].block[0]
    inputs = torch.randn(1, 3, 32, 32)
    before, after = trace_forward(old.eval(), inputs), trace_forward(new.eval(), inputs)

    difference = before.diff(after)

    summary = difference.summary()
    assert (
        "features.3.block (Sequential) unwrapped: the old features.3.block.0 is now "
        "features.3.block"
    ) in summary, summary
    counts = difference.explained_counts()
    assert counts["unwrapped"] == 1, summary
    assert "type changed" not in counts, summary


class NestedHeads(nn.Module):
    """Heads returned in a dict that nests: `{'a': {'x': ..., 'y': ...}, 'b': ...}`, the
    outer and inner keys in the given orders."""

    def __init__(self, outer: str, inner: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(4, 4)
        self.outer, self.inner = outer, inner

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        features = self.proj(x)
        values = {"x": features, "y": features[:, :2]}
        nested = {key: values[key] for key in self.inner}
        return {key: nested if key == "a" else features for key in self.outer}


def test_a_nested_dicts_keys_reordered_are_no_key_added_or_dropped() -> None:
    features = torch.randn(2, 4)
    old, new = NestedHeads("ab", "xy"), NestedHeads("ba", "yx")
    assert list(new(features)) == ["b", "a"]  # the oracle: the same keys, in another order
    assert list(new(features)["a"]) == ["y", "x"]

    summary = trace_forward(old, features).diff(trace_forward(new, features)).summary()

    assert "output reordered: " in summary, summary
    assert "added" not in summary, summary
    assert "dropped" not in summary, summary


class ThreeTied(nn.Module):
    """An embedding and a head that share a weight, and where `extra`, a third user of it."""

    def __init__(self, *, extra: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.extra = nn.Linear(4, 10, bias=False) if extra else None
        if self.extra is not None:
            self.extra.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens)
        output: torch.Tensor = self.head(hidden)
        return output if self.extra is None else output + self.extra(hidden)


def test_a_third_tensor_tied_leaves_the_first_tie_standing() -> None:
    """A tie read by its names: `embed.weight now tied to extra.weight`, never `no longer
    tied to head.weight`, which still shares it."""
    new = ThreeTied(extra=True)
    assert new.head.weight is new.embed.weight  # the oracle: the first tie stands
    tokens = torch.randint(0, 10, (1, 3))

    summary = trace_forward(ThreeTied(extra=False), tokens).diff(trace_forward(new, tokens))

    text = summary.summary()
    assert "embed.weight now tied to extra.weight" in text, text
    assert "no longer" not in text, text


def _paths_by_identity(old: nn.Module, new: nn.Module) -> dict[str, str | None]:
    """The oracle: each old module's path -> the path its very object has in the new model
    (None where it is gone)."""
    new_paths = {id(module): path for path, module in new.named_modules()}
    return {path: new_paths.get(id(module)) for path, module in old.named_modules()}


def _hold_in_place(container: nn.Module, children: list[nn.Module]) -> None:
    """Make `container` hold `children`, numbered from 0: the very container, so each
    module keeps itself and the identity oracles can follow it."""
    for name in list(container._modules):
        del container._modules[name]
    for index, child in enumerate(children):
        container.add_module(str(index), child)


def _object_paths(model: nn.Module) -> dict[int, str]:
    """Each module's object (by id) -> its path in `model` (`<root>` for the model)."""
    return {id(module): path or "<root>" for path, module in model.named_modules()}


def _was(model: nn.Module, paths_before: dict[int, str]) -> dict[str, str | None]:
    """The oracle: each path in `model` now -> the path its very module had before
    (`_object_paths` then), None for a module made since."""
    return {
        path or "<root>": paths_before.get(id(module)) for path, module in model.named_modules()
    }


def _explained_but_renames(difference: TraceDiff) -> dict[str, int]:
    """`explained_counts` without renames: what a named and a name-free diff both state."""
    counts = difference.explained_counts()
    counts.pop("renamed", None)
    return counts


class Stage(nn.Sequential):
    """A stage's own class: a Sequential that holds the same blocks."""


def widening_block(width: int) -> nn.Sequential:
    """A feed-forward block of 8 features through `width`: blocks of other widths differ."""
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 8))


def test_a_stage_made_a_subclass_as_its_last_block_moves_on_is_no_unwrap() -> None:
    """Stage `0` became a `Stage` of its first two blocks; its last block is now the first of
    stage `1`, whose blocks are renumbered. Nothing was wrapped or unwrapped (it read `0
    (Stage) wraps the old 0.0, 0.1` and `<root> (Sequential) unwrapped: the old 0 is now
    <root>`, the model's own call paired with a stage)."""
    torch.manual_seed(0)
    first = [widening_block(width) for width in (16, 32, 64)]
    second = [widening_block(width) for width in (128, 256)]
    old = nn.Sequential(nn.Sequential(*first), nn.Sequential(*second))
    new = nn.Sequential(Stage(*first[:2]), nn.Sequential(first[2], *second))
    now = _paths_by_identity(old, new)
    blocks = ("0.0", "0.1", "0.2", "1.0", "1.1")
    assert [now[path] for path in blocks] == ["0.0", "0.1", "1.0", "1.1", "1.2"]
    assert (type(old[0]), type(new[0])) == (nn.Sequential, Stage)
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named = before.diff(after)
    name_free = structure_diff(before, after, ignore=("paths",))

    summary = named.summary()
    assert named.explained_counts() == {"moved": 1, "renamed": 2, "type changed": 1}, summary
    assert "0.2 (Sequential, with 3 nested calls) moved to 1.0" in summary.splitlines()
    assert "1.0 ... 1.1 -> 1.1 ... 1.2, renumbered (2 subtrees, 8 calls renamed with them)" in (
        summary.splitlines()
    )
    assert "type changed at 0: Sequential -> Stage" in summary.splitlines(), summary
    assert name_free.explained_counts() == {"moved": 1, "type changed": 1}, name_free.summary()


def test_a_stage_flattened_beside_a_block_unwraps_that_stage_not_the_model() -> None:
    """`Sequential(Sequential(a, b), c)` flattened: the stage is unwrapped and `c` renamed (it
    read `<root> (Sequential) unwrapped: the old 0 is now <root>`)."""
    torch.manual_seed(0)
    a, b, c = (widening_block(width) for width in (16, 32, 64))
    old, new = nn.Sequential(nn.Sequential(a, b), c), nn.Sequential(a, b, c)
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0", "0.0", "0.1", "1")] == [None, "0", "1", "2"]
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named = before.diff(after)
    name_free = structure_diff(before, after, ignore=("paths",))

    assert named.explained_counts() == {"unwrapped": 1, "renamed": 1}, named.summary()
    assert named.summary().splitlines()[1:] == [
        "0 (Sequential) unwrapped: the old 0.0, 0.1 are now 0, 1 (8 calls renamed under it)",
        "1 (Sequential) -> 2 (4 calls renamed with it)",
    ]
    assert name_free.explained_counts() == {"unwrapped": 1}, name_free.summary()
    assert "0 (Sequential) unwrapped: the old 0.0, 0.1 are now 0, 1" in name_free.summary()


class EncoderDecoderModel(nn.Module):
    """An `encoder` and a `decoder` that take keyword options, as a Hugging Face model does."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder, self.decoder = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, **options: object) -> torch.Tensor:
        output: torch.Tensor = self.decoder(self.encoder(x))
        return output


class EncodingWrapper(nn.Module):
    """A wrapper with an `encoder` of its own, without a bias, run before the `model` it
    holds, to which it passes an option down."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.encoder = nn.Linear(8, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.model(self.encoder(x), output_attentions=None)
        return output


def test_an_unwrapped_model_keeps_its_encoder_beside_the_wrappers_own() -> None:
    """The model is the same object, and its `encoder` is the new `encoder`; the wrapper's
    own `encoder` went with the wrapper. It read `model.encoder` removed and a bias added to
    `encoder`: the wrapper's encoder paired by its name before the model's children did."""
    model = EncoderDecoderModel()
    wrapper = EncodingWrapper(model)
    now = _paths_by_identity(wrapper, model)
    assert (now["model"], now["model.encoder"], now["encoder"]) == ("", "encoder", None)
    assert model.encoder.bias is not None  # the oracle: no bias was added to it
    calls: list[str] = []
    hook = nn.modules.module.register_module_forward_hook(
        lambda module, args, output: calls.append(type(module).__name__)
    )
    try:
        model(torch.randn(1, 8))
    finally:
        hook.remove()
    assert calls == ["Linear", "Linear", "EncoderDecoderModel"]  # three calls stay
    inputs = torch.randn(2, 8)
    before, after = trace_forward(wrapper, inputs), trace_forward(model, inputs)

    difference = before.diff(after)

    summary = difference.summary()
    assert difference.explained_counts() == {
        "unwrapped": 1,
        "removed": 1,
        "input changed": 1,
    }, summary
    assert "<root> (EncodingWrapper) unwrapped: the old model is now <root> (3 calls renamed " in (
        summary
    )
    assert "1 call removed: encoder (Linear) at the start of <root> (EncodingWrapper)" in summary
    assert "bias" not in summary, summary


def test_layers_grouped_as_one_is_removed_and_one_appended_is_a_wrap() -> None:
    """`[a, b, c, Tanh, Sigmoid]` -> `[a, Sequential(b, c), Sigmoid, GELU]`: b and c wrapped,
    the Tanh removed, the GELU appended. The new Sequential holds b, so it is no Tanh whose
    type changed (it read `type changed at 1: Tanh -> Sequential`, b and c moved)."""
    torch.manual_seed(0)
    a, b, c, sigmoid = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8), nn.Sigmoid()
    old = nn.Sequential(a, b, c, nn.Tanh(), sigmoid)
    new = nn.Sequential(a, nn.Sequential(b, c), sigmoid, nn.GELU())
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0", "1", "2", "3", "4")] == ["0", "1.0", "1.1", None, "2"]
    assert type(new[3]) is nn.GELU
    assert not any(type(module) is nn.GELU for module in old.modules())
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named = before.diff(after)

    assert named.explained_counts() == {
        "wrapped": 1,
        "removed": 1,
        "inserted": 1,
        "renamed": 1,
    }, named.summary()
    assert named.summary().splitlines()[1:] == [
        "1 (Sequential) wraps the old 1, 2, now 1.0, 1.1 (2 calls renamed under it)",
        "1 call inserted: 3 (GELU) after 2 (Sigmoid)",
        "1 call removed: 3 (Tanh) after 2 (Linear)",
        "1 call renamed: 4 (Sigmoid) -> 2",
    ]
    name_free = structure_diff(before, after, ignore=("paths",))
    assert name_free.explained_counts() == {"wrapped": 1, "removed": 1, "inserted": 1}


@pytest.mark.parametrize(
    ("left_out", "now", "expected"),
    [
        # The middle block left out: the named reading paired it by its number with the new
        # `1`, its first block's ReLU (`type changed at 1: Sequential -> ReLU`).
        (
            1,
            ["0", "1", None, None, None, "2", "3"],
            [
                "0 (Sequential) unwrapped: the old 0.0, 0.1 are now 0, 1",
                "2 (Sequential) unwrapped: the old 2.0, 2.1 are now 2, 3",
                "3 calls removed: 1 (Sequential, with 2 nested calls) after 0",
            ],
        ),
        # The first left out: the Linear now `0` is block 1's (the Tanh after it says so).
        # Paired by their numbers, the old `0.0` was taken for the new `0` and `1.1` for `1`.
        (
            0,
            [None, None, None, "0", "1", "2", "3"],
            [
                "1 (Sequential) unwrapped: the old 1.0, 1.1 are now 0, 1",
                "2 (Sequential) unwrapped: the old 2.0, 2.1 are now 2, 3",
                "3 calls removed: 0 (Sequential, with 2 nested calls) at the start of ",
            ],
        ),
    ],
)
def test_blocks_flattened_as_one_goes_and_a_layer_comes_say_each_once(
    left_out: int, now: list[str | None], expected: list[str]
) -> None:
    """Three Linear-activation blocks flattened, one left out and a Sigmoid put last: the
    blocks kept unwrapped, the one left out removed whole, the Sigmoid inserted."""
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.Linear(16, 16), activation()) for activation in (nn.ReLU, nn.Tanh, nn.GELU)
    ]
    old = nn.Sequential(*blocks)
    kept = [block for position, block in enumerate(blocks) if position != left_out]
    new = nn.Sequential(*kept[0], *kept[1], nn.Sigmoid())
    paths = (
        ("0.0", "0.1", "1", "1.0", "1.1", "2.0", "2.1")
        if left_out == 1
        else ("0", "0.0", "0.1", "1.0", "1.1", "2.0", "2.1")
    )
    assert [_paths_by_identity(old, new)[path] for path in paths] == now
    inputs = torch.randn(2, 16)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"unwrapped": 2, "removed": 3, "inserted": 1}
        for line in [*expected, "1 call inserted: 4 (Sigmoid) after 3"]:
            assert line in summary, summary


def _conv_stage(kernel_size: int = 3) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(16, 16, kernel_size, padding=kernel_size // 2), nn.BatchNorm2d(16), nn.ReLU()
    )


class Features(nn.Module):
    def __init__(self, features: nn.Module) -> None:
        super().__init__()
        self.features = features
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


def _stem() -> list[nn.Module]:
    return [nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()]


def test_a_stage_made_a_subclass_beside_one_flattened_leaves_the_stem_alone() -> None:
    """After an untouched stem, stage `features.3` becomes a `Stage` and stage `features.4` is
    flattened. The stem read as moved into the stage and back (the flattened stages' calls,
    read in order, took the stem's look-alikes)."""
    torch.manual_seed(0)
    stem, first, second = _stem(), _conv_stage(), _conv_stage(kernel_size=1)
    old = Features(nn.Sequential(*stem, first, second)).eval()
    new = Features(nn.Sequential(*stem, Stage(*first), *second)).eval()
    now = _paths_by_identity(old, new)
    assert [now[f"features.{n}"] for n in ("1", "2", "3", "3.0", "4", "4.0", "4.2")] == [
        "features.1", "features.2", None, "features.3.0", None, "features.4", "features.6",
    ]  # fmt: skip
    image = torch.randn(1, 3, 8, 8)
    before, after = trace_forward(old, image), trace_forward(new, image)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"unwrapped": 1, "type changed": 1}, summary
        assert "type changed at features.3: Sequential -> Stage" in summary, summary
        assert "features.4 (Sequential) unwrapped: the old features.4.0, features.4.1, " in summary


def test_a_stage_removed_beside_one_flattened_is_removed_whole() -> None:
    """After an untouched stem, stage `features.3` is left out and stage `features.4` (a 1x1
    conv first) flattened. The stem's norm and activation read as removed, and the flattened
    stage as unwrapped into the stem's places."""
    torch.manual_seed(0)
    stem, first, second = _stem(), _conv_stage(), _conv_stage(kernel_size=1)
    old = Features(nn.Sequential(*stem, first, second)).eval()
    new = Features(nn.Sequential(*stem, *second)).eval()
    now = _paths_by_identity(old, new)
    assert [now[f"features.{n}"] for n in ("1", "2", "3", "3.0", "4.0", "4.2")] == [
        "features.1", "features.2", None, None, "features.3", "features.5",
    ]  # fmt: skip
    image = torch.randn(1, 3, 8, 8)
    before, after = trace_forward(old, image), trace_forward(new, image)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"unwrapped": 1, "removed": 4}, summary
        assert "features.4 (Sequential) unwrapped: the old features.4.0, features.4.1, " in summary
        assert "4 calls removed: features.3 (Sequential, with 3 nested calls) " in summary


def test_a_block_removed_beside_one_flattened_after_a_layer_that_stays() -> None:
    """`0.0` stays, block `0.1` goes whole, block `0.2` is flattened: the layer that stayed
    read as removed, or the removed block as changed into a GELU."""
    torch.manual_seed(0)
    kept, tanh_block, gelu_block = (
        nn.Linear(8, 8),
        nn.Sequential(nn.Tanh(), nn.Linear(8, 8)),
        nn.Sequential(nn.GELU(), nn.Linear(8, 8)),
    )
    old = nn.Sequential(nn.Sequential(kept, tanh_block, gelu_block))
    new = nn.Sequential(nn.Sequential(kept, *gelu_block))
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0.0", "0.1", "0.2.0", "0.2.1")] == [
        "0.0", None, "0.1", "0.2",
    ]  # fmt: skip
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"unwrapped": 1, "removed": 3}, summary
        assert "0.2 (Sequential) unwrapped: the old 0.2.0, 0.2.1 are now 0.1, 0.2" in summary
        assert "3 calls removed: 0.1 (Sequential, with 2 nested calls)" in summary, summary


def test_a_stage_removed_beside_one_flattened_is_not_unwrapped_around_a_layer_that_stays() -> None:
    """Block `0.1` is flattened and stage `0.3` goes whole. The stage starts with a Linear
    like the one that stays before it: that Linear read as removed and the stage as
    unwrapped around its own Linear, three changes where two were made. Put back, the
    mirror image: the Linear read as inserted and the stage as wrapped around it."""
    torch.manual_seed(0)
    softplus, linear = nn.Softplus(), nn.Linear(8, 8)
    block = nn.Sequential(nn.Linear(8, 8), nn.LogSigmoid())
    stage = nn.Sequential(nn.Linear(8, 8), nn.Tanhshrink(), nn.Softsign())
    old = nn.Sequential(nn.Sequential(softplus, block, linear, stage))
    new = nn.Sequential(nn.Sequential(softplus, *block, linear))
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0.1.0", "0.1.1", "0.2", "0.3", "0.3.0")] == [
        "0.1", "0.2", "0.3", None, None,
    ]  # fmt: skip
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for removed in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = removed.summary()
        counts = removed.explained_counts()
        assert (counts["unwrapped"], counts["removed"]) == (1, 4), summary
        assert set(counts) <= {"unwrapped", "removed", "renamed"}, summary
        assert "0.1 (Sequential) unwrapped: the old 0.1.0, 0.1.1 are now 0.1, 0.2" in summary
        assert "4 calls removed: 0.3 (Sequential, with 3 nested calls)" in summary, summary
    for inserted in (after.diff(before), structure_diff(after, before, ignore=("paths",))):
        summary = inserted.summary()
        counts = inserted.explained_counts()
        assert (counts["wrapped"], counts["inserted"]) == (1, 4), summary
        assert set(counts) <= {"wrapped", "inserted", "renamed"}, summary
        assert "0.1 (Sequential) wraps the old 0.1, 0.2, now 0.1.0, 0.1.1" in summary
        assert "4 calls inserted: 0.3 (Sequential, with 3 nested calls)" in summary, summary


def test_a_stage_made_a_subclass_beside_one_flattened_is_one_type_change() -> None:
    """Block `1` is flattened and stage `2`, now `4`, becomes a `Stage` of the same layers.
    The block ends with a SiLU like the one the stage starts with: read as both unwrapped,
    the stage's layers moved into a new `Stage` and the old one removed, five changes where
    two were made (the flattened block's siblings were paired by class alone, and no other
    pass pairs a stage whose class and number changed). Put back, the mirror image."""
    torch.manual_seed(0)
    relu, last = nn.ReLU(), nn.Tanhshrink()
    block = nn.Sequential(nn.Tanhshrink(), nn.LogSigmoid(), nn.SiLU())
    stage = nn.Sequential(nn.SiLU(), nn.SELU())
    old = nn.Sequential(relu, block, stage, last)
    new = nn.Sequential(relu, *block, Stage(*stage), last)
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("1.0", "1.1", "1.2", "2.0", "2.1", "3")] == [
        "1", "2", "3", "4.0", "4.1", "5",
    ]  # fmt: skip
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for flattened in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = flattened.summary()
        counts = flattened.explained_counts()
        assert (counts["unwrapped"], counts["type changed"]) == (1, 1), summary
        assert set(counts) <= {"unwrapped", "type changed", "renamed"}, summary
        assert "1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3" in summary
        assert "type changed at 4: Sequential -> Stage" in summary, summary
    for wrapped in (after.diff(before), structure_diff(after, before, ignore=("paths",))):
        summary = wrapped.summary()
        counts = wrapped.explained_counts()
        assert (counts["wrapped"], counts["type changed"]) == (1, 1), summary
        assert set(counts) <= {"wrapped", "type changed", "renamed"}, summary
        assert "1 (Sequential) wraps the old 1, 2, 3, now 1.0, 1.1, 1.2" in summary, summary
        assert "type changed at 2: Stage -> Sequential" in summary, summary


def test_a_stage_copied_beside_one_flattened_is_the_copy_inserted() -> None:
    """Block `1` is flattened and a copy of stage `0` is put before it, the stage now `1`.
    The block, its Linears paired where they run now, was paired with the stage at its old
    path by path and class (the pass across parents): read as its first Linear removed and
    the stage's other layers and the block's Linears inserted. One unwrap and one of the
    look-alike stages inserted. Put back, the mirror image. (Name-free, the block pairs
    with the stage by its place and states fewer calls inserted: a count no reading here
    changes.)"""
    torch.manual_seed(0)
    stage = nn.Sequential(nn.LogSigmoid(), nn.Sigmoid(), nn.Linear(8, 8))
    block, last = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), nn.Hardsigmoid()
    old = nn.Sequential(stage, block, last)
    new = nn.Sequential(copy.deepcopy(stage), stage, *block, last)
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0", "1", "1.0", "1.1", "2")] == ["1", None, "2", "3", "4"]
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    flattened = before.diff(after)
    summary, counts = flattened.summary(), flattened.explained_counts()
    assert (counts["unwrapped"], counts["inserted"]) == (1, 4), summary
    assert set(counts) <= {"unwrapped", "inserted", "renamed"}, summary
    assert "1 (Sequential) unwrapped: the old 1.0, 1.1 are now 2, 3" in summary, summary
    assert "4 calls inserted: one of 0, 1 (Sequential look-alikes, with 3 nested" in summary
    for wrapped in (after.diff(before), structure_diff(after, before, ignore=("paths",))):
        summary = wrapped.summary()
        counts = wrapped.explained_counts()
        assert (counts["wrapped"], counts["removed"]) == (1, 4), summary
        assert set(counts) <= {"wrapped", "removed", "renamed"}, summary
        assert "1 (Sequential) wraps the old 2, 3, now 1.0, 1.1" in summary, summary
        assert "4 calls removed: one of 0, 1 (Sequential look-alikes, with 3 nested" in summary


def test_a_stage_flattened_as_a_layer_moves_into_its_biggest_block_is_that_unwrap() -> None:
    """Stage `0` is flattened and its GELU moved into a block of its biggest stage, `0.1`.
    The biggest stage, holding most calls, took the flattened stage's place: read as `0.1`
    unwrapped, the small stage and the GELU moved out of `0`. And read as the unwrap of `0`,
    the GELU's move was counted among the calls renamed under it (`17 calls before, 16
    after: 1 unwrap`), a change the summary did not say."""
    torch.manual_seed(0)
    small = nn.Sequential(nn.Tanh(), nn.Linear(8, 8))
    inner = nn.Sequential(nn.CELU(), nn.LogSigmoid())
    big = nn.Sequential(
        nn.ReLU6(), inner, nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(), nn.Linear(8, 8)),
        nn.Softsign(),
    )  # fmt: skip
    gelu, last = nn.GELU(), nn.SiLU()
    old = nn.Sequential(nn.Sequential(small, big, gelu), last)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    new = nn.Sequential(small, big, last)
    inner.insert(1, gelu)
    after = trace_forward(new, inputs)
    paths = {id(module): path for path, module in new.named_modules()}
    assert [paths[id(module)] for module in (small, big, gelu, last)] == ["0", "1", "1.1.1", "2"]

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        counts = difference.explained_counts()
        assert (counts["unwrapped"], counts["moved"]) == (1, 1), summary
        assert set(counts) <= {"unwrapped", "moved", "renamed"}, summary
        assert "0 (Sequential) unwrapped: the old 0.0, 0.1 are now 0, 1" in summary, summary
        assert "0.2 (GELU) moved to 1.1.1" in summary, summary


def _block(width_in: int, width_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width_in, width_out), nn.ReLU())


def test_stages_flattened_into_their_parent_beside_a_head_are_three_unwraps() -> None:
    """`S(S(S(b0, b1), S(b2, b3), S(b4, b5)), head)` -> `S(S(b0 .. b5), head)`: the middle
    container took the new model's call and lost it to the model, and was never paired
    again: `0 unwrapped: the old 0.2 is now 0`, the other stages removed (or, without the
    head, the model and its container swapped)."""
    torch.manual_seed(0)
    widths = [16, 16, 24, 24, 32, 32, 40]
    blocks = [_block(widths[n], widths[n + 1]) for n in range(6)]
    stages = [nn.Sequential(*blocks[n : n + 2]) for n in (0, 2, 4)]
    for head in (nn.Linear(40, 4), None):
        tail = [head] if head is not None else []
        old = nn.Sequential(nn.Sequential(*stages), *tail)
        new = nn.Sequential(nn.Sequential(*blocks), *tail)
        now = _paths_by_identity(old, new)
        assert [now[path] for path in ("0", "0.0", "0.0.0", "0.1.0", "0.2.1")] == [
            None, None, "0.0", "0.2", "0.5",
        ]  # fmt: skip
        inputs = torch.randn(2, 16)
        before, after = trace_forward(old, inputs), trace_forward(new, inputs)

        for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
            summary = difference.summary()
            assert difference.explained_counts() == {"unwrapped": 3}, summary
            assert "0.1 (Sequential) unwrapped: the old 0.1.0, 0.1.1 are now 0.2, 0.3" in summary


def test_a_stage_flattened_into_the_model_is_not_the_model_unwrapped() -> None:
    """`[Linear, S(Linear, S(Linear, Sigmoid, Linear), Hardtanh)]`, stage 1 flattened: it
    read as the model unwrapped (`the old 1 is now <root>`), the first Linear silently moved
    into it. Paired by the share of their calls alone, the stage fit the new model better."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 8), nn.Sigmoid(), nn.Linear(8, 8))
    stage = nn.Sequential(nn.Linear(8, 8), inner, nn.Hardtanh())
    old = nn.Sequential(nn.Linear(8, 8), stage)
    new = nn.Sequential(old[0], *stage)
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("", "0", "1", "1.0", "1.1", "1.2")] == [
        None, "0", None, "1", "2", "3",
    ]  # fmt: skip
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"unwrapped": 1}, summary
        assert "1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3" in summary
        assert "<root>" not in summary, summary


def test_a_model_wrapped_whole_with_a_stage_made_a_subclass_says_both() -> None:
    """The model wrapped in a Sequential and its inner stage made a `Stage`: it read as three
    containers moved, the Stage and a Linear inserted and a Softsign removed. A call of
    another class now pairs with a stage where it holds exactly that stage's calls."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Softsign(), _block(8, 8), nn.Linear(8, 8))
    old = nn.Sequential(nn.Linear(8, 8), nn.Sequential(inner, nn.Linear(8, 8)), nn.ReLU6())
    new = nn.Sequential(nn.Sequential(old[0], nn.Sequential(Stage(*inner), old[1][1]), old[2]))
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("", "1", "1.0", "1.0.0", "1.0.1")] == [
        None, None, None, "0.1.0.0", "0.1.0.1",
    ]  # fmt: skip
    inputs = torch.randn(2, 8)
    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert summary.splitlines()[0].endswith(": 1 wrap, 1 call type changed"), summary
    assert "<root> (Sequential) wraps the old model, now 0 (" in summary, summary
    assert "type changed at 0.1.0: Sequential -> Stage" in summary, summary


def test_stages_flattened_with_a_look_alike_left_out_name_free_change_no_type() -> None:
    """Two stages of three blocks flattened into the model and stage 2's last block left out:
    name-free, stage 1 read as changed into the new last block (`type changed at 5:
    Sequential -> Blk`), its blocks moved out of it. A container whose nested calls are all
    paired elsewhere is no longer paired in place with a call of another class."""
    torch.manual_seed(0)
    first = nn.Sequential(_block(8, 16), _block(16, 16), _block(16, 16))
    second = nn.Sequential(_block(16, 32), _block(32, 32), _block(32, 32))
    old = nn.Sequential(nn.Linear(8, 8), first, second)
    new = nn.Sequential(old[0], *first, second[0], second[1])
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("1", "1.0", "2", "2.0", "2.1", "2.2")] == [
        None, "1", None, "4", "5", None,
    ]  # fmt: skip
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    named = before.diff(after)
    name_free = structure_diff(before, after, ignore=("paths",))

    for difference in (named, name_free):
        summary = difference.summary()
        # Blocks 2.1 and 2.2 look alike: the one left out may read as either, with the
        # other as the new 5 (named, by number: removed and inserted).
        counts = difference.explained_counts()
        assert counts["unwrapped"] == 2, summary
        assert not {"type changed", "moved"} & set(counts), summary
        assert "1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3" in summary


def test_a_stage_wrapped_beside_layers_is_one_wrap_not_its_parent_wrapped() -> None:
    """The layers of stage `1.2` wrapped in a Sequential of their own: the stage's parent
    `1` read as wrapped (`1 wraps the old 1, now 1.2`) and its other children as moved into
    it. The parent that kept most of its children under its own name is kept, even where
    it holds the wrapper."""
    torch.manual_seed(0)
    stage = nn.Sequential(nn.Hardswish(), nn.SELU(), nn.Linear(8, 8))
    parent = nn.Sequential(nn.ReLU(), nn.Hardswish(), stage, nn.Tanh())
    old = nn.Sequential(nn.Linear(8, 8), parent)
    new = copy.deepcopy(old)
    new[1][2] = nn.Sequential(nn.Sequential(*new[1][2]))
    inputs = torch.randn(2, 8)

    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    # A stage around its layers' wrapper, or a wrapper around the stage: the calls cannot
    # tell which object is the old stage, and both read as one wrap at `1.2`.
    assert summary.splitlines()[0].endswith(": 1 wrap"), summary
    assert "1.2 (Sequential) wraps the old 1.2, now 1.2.0 (4 calls renamed under it)" in summary


def test_look_alike_layers_renumbered_by_a_block_inserted_before_them_are_no_swap() -> None:
    """A block moved in before two `Linear(8, 8)` layers renumbers them (`0, 1` -> `1, 2`):
    paired by name, the second kept `1` and the first took `2`, read as `0 and 1 (Linear)
    swapped`. Nothing in a trace tells the two apart: they pair in their order."""
    torch.manual_seed(0)
    moved = nn.Sequential(nn.Tanh(), nn.Linear(8, 8))
    old = nn.Sequential(moved, nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.ReLU()))
    new = nn.Sequential(nn.Sequential(moved, *old[1]))
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0", "1", "1.0", "1.1", "1.2")] == [
        "0.0", None, "0.1", "0.2", "0.3",
    ]  # fmt: skip
    inputs = torch.randn(2, 8)

    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert "swapped" not in summary, summary
    assert "0 (Sequential, with 2 nested calls) moved to 0.0" in summary, summary
    assert "1.0 (Linear) -> 0.1, 1.1 (Linear) -> 0.2" in summary, summary


def test_a_leaf_moved_into_the_next_stage_is_one_move_and_renames() -> None:
    """`S(S(a), relu, S(b, c), d)` -> `S(S(a), S(relu, b, c), d)`: the stage's two look-alike
    Linears read as swapped (`2.0 and 2.1 (Linear) swapped, now 1.2 and 1.1`)."""
    torch.manual_seed(0)
    a, b, c, d = (nn.Linear(8, 8) for _ in range(4))
    relu = nn.ReLU()
    old = nn.Sequential(nn.Sequential(a), relu, nn.Sequential(b, c), d)
    new = nn.Sequential(nn.Sequential(a), nn.Sequential(relu, b, c), d)
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("1", "2.0", "2.1", "3")] == ["1.0", "1.1", "1.2", "2"]
    inputs = torch.randn(2, 8)

    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert "swapped" not in summary, summary
    assert "1 (ReLU) moved to 1.0" in summary, summary
    assert "2.0 (Linear) -> 1.1, 2.1 (Linear) -> 1.2, 3 (Linear) -> 2" in summary, summary


def test_a_stage_flattened_into_the_model_that_shares_little_with_it_is_unwrapped() -> None:
    """The model's last stage, which holds most of its calls, flattened into it: the model
    shared too small a part with itself to take its own call back from the stage, and read
    as unwrapped (`the old 2 is now <root>`)."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Softsign(), nn.Linear(8, 8))
    stage = nn.Sequential(inner, nn.Linear(8, 8), nn.SELU(), nn.Linear(8, 8))
    old = nn.Sequential(nn.Linear(8, 8), nn.Hardtanh(), stage)
    new = nn.Sequential(old[0], old[1], *stage)
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("", "2", "2.0", "2.3")] == [None, None, "2", "5"]
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"unwrapped": 1}, summary
        assert "2 (Sequential) unwrapped: the old 2.0, 2.1, 2.2, 2.3 are now 2, 3, 4, 5" in summary


def test_a_backbone_grouped_into_a_stem_and_a_body_is_two_wraps() -> None:
    """ResNet-18's layers as one Sequential, regrouped as `Sequential(stem, body)`: it read as
    the model wrapped (`<root> wraps the old model, now 1`), the stem's four layers moved out
    of it and a Sequential inserted. The model's call stays the model's where the new model
    holds more than one call."""
    torch.manual_seed(0)
    layers = list(torchvision.models.resnet18(weights=None).eval().children())[:-2]
    old = nn.Sequential(*layers)
    new = nn.Sequential(nn.Sequential(*layers[:4]), nn.Sequential(*layers[4:]))
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0", "3", "4", "7.1")] == ["0.0", "0.3", "1.0", "1.3.1"]
    image = torch.randn(1, 3, 32, 32)
    before, after = trace_forward(old, image), trace_forward(new, image)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 2}, summary
        assert "0 (Sequential) wraps the old 0, 1, 2, 3, now 0.0, 0.1, 0.2, 0.3" in summary
        assert "1 (Sequential) wraps the old 4, 5, 6, 7, now 1.0, 1.1, 1.2, 1.3" in summary


def test_a_named_backbone_wrapped_whole_with_a_head_and_a_layer_changed_is_one_wrap() -> None:
    """ResNet-18 as a Sequential of its named stages, one activation made a SiLU, wrapped as
    `Sequential(backbone=..., head=Linear)`. Found by review of a rule that kept the model's
    call the model's: it read as `backbone` wrapping every old stage, and name-free as `fc`
    inserted and changed into the head. A backbone holding all the model's children is the
    model."""
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(weights=None).eval()
    names = ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool"]
    old = nn.Sequential(
        OrderedDict([*((name, getattr(resnet, name)) for name in names), ("flatten", nn.Flatten()),
                     ("fc", resnet.fc)])
    )  # fmt: skip
    backbone = copy.deepcopy(old)
    backbone.layer2[0].relu = nn.SiLU()
    new = nn.Sequential(OrderedDict(backbone=backbone, head=nn.Linear(1000, 10)))
    image = torch.randn(1, 3, 32, 32)
    before, after = trace_forward(old, image), trace_forward(new, image)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {
            "wrapped": 1, "type changed": 2, "inserted": 1,
        }, summary  # fmt: skip
        assert "<root> (Sequential) wraps the old model, now backbone" in summary, summary
        assert "1 call inserted: head (Linear) after backbone" in summary, summary


class _ThreeLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def test_a_stage_made_a_subclass_inside_a_new_wrapper_leaves_its_parent_in_place() -> None:
    """`proj.ffn` made a `Stage` inside a new `proj.body`, beside `proj.enc`. Found by review
    of the rule that pairs a subclass as a type change: `proj wraps the old proj, now
    proj.body` and `proj.enc moved into proj`. A parent named by a word that keeps as many
    children under its name as the wrapper holds stays the parent."""
    torch.manual_seed(0)
    ffn = nn.Sequential(_ThreeLayers(), nn.Sigmoid(), _ThreeLayers(), nn.Tanh())
    old = nn.Sequential(
        OrderedDict(head=_ThreeLayers(), proj=nn.Sequential(OrderedDict(ffn=ffn, enc=nn.ReLU())))
    )
    body = nn.Sequential(Stage(*ffn))
    new = nn.Sequential(
        OrderedDict(head=old.head, proj=nn.Sequential(OrderedDict(body=body, enc=old.proj.enc)))
    )
    now = _paths_by_identity(old, new)
    # `proj.enc` keeps its path: it was moved nowhere.
    assert [now[path] for path in ("proj.enc", "proj.ffn", "proj.ffn.0")] == [
        "proj.enc", None, "proj.body.0.0",
    ]  # fmt: skip
    inputs = torch.randn(2, 8)

    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert summary.splitlines()[0].endswith(": 1 wrap, 1 call type changed"), summary
    assert "proj.body (Sequential) wraps the old proj.ffn, now proj.body.0 (" in summary
    assert "type changed at proj.body.0: Sequential -> Stage" in summary, summary


def test_a_stage_flattened_into_a_stage_that_holds_layers_of_its_own_is_that_stage_unwrapped() -> (
    None
):
    """`S(Tanh, GELU, S(Linear, S(Hardtanh, Linear)), Linear)` inside the model, its third
    child flattened into it: the outer stage read as unwrapped (`the old 1.2 is now 1`), its
    Tanh, GELU and last Linear silently moved into the inner one. The inner stage's nested
    calls pair before the outer's own layers do, so the outer shared too small a part to
    take its own call back; it does where the new call holds the rest of its calls too."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Hardtanh(), nn.Linear(8, 8)))
    stage = nn.Sequential(nn.Tanh(), nn.GELU(), inner, nn.Linear(8, 8))
    old = nn.Sequential(nn.LogSigmoid(), stage, nn.Sigmoid())
    new = nn.Sequential(old[0], nn.Sequential(stage[0], stage[1], *inner, stage[3]), old[2])
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("1", "1.2", "1.2.0", "1.2.1", "1.3")] == [
        None, None, "1.2", "1.3", "1.4",
    ]  # fmt: skip
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.explained_counts() == {"unwrapped": 1, "renamed": 1}, named.summary()
    assert "1 call renamed: 1.3 (Linear) -> 1.4" in named.summary()
    assert name_free.explained_counts() == {"unwrapped": 1}, name_free.summary()
    for difference in (named, name_free):
        summary = difference.summary()
        assert "1.2 (Sequential) unwrapped: the old 1.2.0, 1.2.1 are now 1.2, 1.3" in summary
        assert "is now 1 " not in summary, summary


def test_a_layer_moved_out_before_its_stage_is_one_move_not_look_alikes_swapped() -> None:
    """`S(Linear, ReLU6, S(Linear, LeakyReLU, Linear, Linear))`, the stage's first Linear
    moved out before it: the stage's children, renumbered, paired by number first (the old
    `2.2`, a Linear, with the new `3.2`, another), and the rest read as the Linear and the
    LeakyReLU swapped and the last Linear moved out. Their looks pair all three in order."""
    torch.manual_seed(0)
    stage = nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(), nn.Linear(8, 8), nn.Linear(8, 8))
    old = nn.Sequential(nn.Linear(8, 8), nn.ReLU6(), stage)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    moved = stage[0]
    del stage[0]  # the very stage, its first Linear now before it
    after = trace_forward(nn.Sequential(old[0], old[1], moved, stage), inputs)
    difference = before.diff(after)
    summary = difference.summary()

    assert difference.explained_counts() == {"moved": 1, "renamed": 4}, summary
    assert "2.0 (Linear) moved to 2\n" in summary, summary
    assert "4 calls renamed: 2 (Sequential) -> 3, 2.1 (LeakyReLU) -> 3.0," in summary, summary
    assert "swapped" not in summary, summary


def test_a_stage_flattened_into_the_model_as_a_layer_moves_between_its_stages() -> None:
    """A stage of three stages flattened into the model as a LeakyReLU moves from its second
    stage into its first. Only the third stage, unchanged, paired whole; the model's new
    stage 1 (the old first stage) then paired with the old stage 1 by its number, and the
    rest read as 3 moves, 2 type changes, 5 calls inserted and 5 removed. Read again with
    stage 1's calls paired in order with the model's (diff/stage_readings.py), it is one
    unwrap and one move."""
    old, new = a_stage_flattened_as_a_layer_moves()
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.summary().splitlines()[1:] == [
        "1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3 (15 calls renamed "
        "under it)",
        "1.1.1.1 (LeakyReLU) moved to 1.0.1",
    ], named.summary()
    assert name_free.summary().splitlines()[1:] == [
        "1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3",
        "1.1.1.1 (LeakyReLU) moved to 1.0.1",
    ], name_free.summary()
    for difference in (named, name_free):
        assert difference.explained_counts() == {"unwrapped": 1, "moved": 1}


def test_a_stage_flattened_as_the_layer_after_it_is_wrapped_is_an_unwrap_and_a_wrap() -> None:
    """`S(S(GELU, LeakyReLU, Linear), Softplus, SELU)`: the inner stage flattened and the
    Softplus wrapped in a Sequential of its own. The two Sequentials paired by their looks
    alone, and the rest read as two layers moved, a type change and a GELU inserted, until
    the diff was read again with the inner stage's calls paired in order in its parent."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.GELU(), nn.LeakyReLU(), nn.Linear(8, 8))
    stage = nn.Sequential(inner, nn.Softplus(), nn.SELU())
    old = nn.Sequential(nn.ReLU6(), stage)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    wrapper = nn.Sequential(stage[1])
    selu = stage[2]
    _hold_in_place(stage, [*inner, wrapper, selu])  # the very stage, holding its old layers
    after = trace_forward(old, inputs)
    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.summary().splitlines()[1:] == [
        "1.3 (Sequential) wraps the old 1.1, now 1.3.0 (1 call renamed under it)",
        "1.0 (Sequential) unwrapped: the old 1.0.0, 1.0.1, 1.0.2 are now 1.0, 1.1, 1.2 (3 calls "
        "renamed under it)",
        "1 call renamed: 1.2 (SELU) -> 1.4",
    ], named.summary()
    assert name_free.explained_counts() == {"wrapped": 1, "unwrapped": 1}, name_free.summary()


def test_a_stage_flattened_with_a_layer_copied_in_it_leaves_the_stages_after_it_in_order() -> None:
    """`S(S(ReLU, Linear, ReLU, Linear), S(Linear, Hardsigmoid), Linear, S(SiLU, Hardswish))`,
    the first stage flattened with a copy of its last Linear after it. The Linear after the
    second stage paired with the copy, before that stage, and read as the two swapped,
    until the siblings after a flattened stage were paired in order by class."""
    torch.manual_seed(0)
    stage = nn.Sequential(nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    old = nn.Sequential(
        stage,
        nn.Sequential(nn.Linear(8, 8), nn.Hardsigmoid()),
        nn.Linear(8, 8),
        nn.Sequential(nn.SiLU(), nn.Hardswish()),
    )
    inputs = torch.randn(2, 8)
    new = nn.Sequential(*stage, copy.deepcopy(stage[3]), old[1], old[2], old[3])
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    summary = before.diff(after).summary()

    assert summary.splitlines()[1:] == [
        "0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2, 0.3 are now 0, 1, 2, 3 (4 calls "
        "renamed under it)",
        "1 (Sequential) -> 5 (3 calls renamed with it)",
        "3 (Sequential) -> 7 (3 calls renamed with it)",
        "1 call inserted: 4 (Linear) after 3 (Linear)",
        "1 call renamed: 2 (Linear) -> 6",
    ], summary


def _flatten_the_encoder_and_drop_the_heads_activation() -> tuple[Trace, Trace]:
    """An encoder stage (an MLP block, a LayerNorm, a Dropout) flattened into the model as
    the head stage loses its leading ReLU: the very modules, traced before and after."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
    encoder = nn.Sequential(block, nn.LayerNorm(8), nn.Dropout(0.1))
    head = nn.Sequential(nn.ReLU(), nn.Linear(8, 8))
    old = nn.Sequential(encoder, head, nn.Sigmoid()).eval()
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    del head[0]
    return before, trace_forward(nn.Sequential(*encoder, head, old[2]).eval(), inputs)


def test_a_stage_flattened_as_its_sibling_loses_a_layer_leaves_that_sibling_paired() -> None:
    """Review: a rule that read a stage as flattened once one of its calls was paired in its
    parent kept it among the calls to pair, where, a Sequential of the same look, it kept
    the head from pairing with its old self: name-free, the head's Linear read as moved and
    the head as inserted and removed. The rule was taken back; this guards the reading."""
    before, after = _flatten_the_encoder_and_drop_the_heads_activation()
    name_free = structure_diff(before, after, ignore=("paths",))

    assert name_free.summary().splitlines()[1:] == [
        "0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2 are now 0, 1, 2",
        "1 call removed: 1.0 (ReLU) at the start of 1",
    ], name_free.summary()


def test_a_stage_flattened_as_its_sibling_loses_a_layer_named() -> None:
    """The same, named: the truth, as the name-free comparison reads it, with names."""
    before, after = _flatten_the_encoder_and_drop_the_heads_activation()
    named = before.diff(after)

    assert named.summary().splitlines()[1:] == [
        "0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2 are now 0, 1, 2 (6 calls renamed "
        "under it)",
        "1 call removed: 1.0 (ReLU) at the start of 1 (Sequential)",
        "3 calls renamed: 1 (Sequential) -> 3, 1.1 (Linear) -> 3.0, 2 (Sigmoid) -> 4",
    ], named.summary()


def test_layers_moved_out_of_a_stage_that_keeps_its_block_are_moves_not_an_unwrap() -> None:
    """`S(block, LeakyReLU, Linear, S(Linear, ReLU))`, all but the block moved out after it.
    Read as the stage flattened (diff/stage_readings.py), the kept block became a new stage
    around the block's calls, `1.0 wraps the old 1.0.0, 1.0.1` and `1 unwrapped`: two
    changes against three moves, and false. A stage whose partner holds one of its
    children, identical, is not read as flattened."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    stage = nn.Sequential(
        block, nn.LeakyReLU(), nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    )
    old = nn.Sequential(nn.Linear(8, 8), stage, nn.Sigmoid())
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    moved = list(stage)[1:]
    for name in ["1", "2", "3"]:
        del stage._modules[name]  # the very stage, holding its block alone
    after = trace_forward(nn.Sequential(old[0], stage, *moved, old[2]), inputs)
    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    moves = [
        "1.1 (LeakyReLU) moved to 2",
        "1.2 (Linear) moved to 3",
        "1.3 (Sequential, with 2 nested calls) moved to 4",
    ]
    assert named.summary().splitlines()[1:] == [*moves, "1 call renamed: 2 (Sigmoid) -> 5"]
    assert name_free.summary().splitlines()[1:] == moves


def test_a_stages_layers_wrapped_as_a_layer_moves_into_them_is_a_wrap_and_a_move() -> None:
    """`1 = S(Linear, S(SiLU, Linear, Tanh))`, its two layers wrapped in a new Sequential as
    the Hardtanh at the start of `0` moves to the end of the inner stage. Name-free, the new
    stage paired with the old inner stage, which half its calls pair within, so it was not
    read as a wrap: `1.0.1 wraps the old 1.1.0, 1.1.2` and the Linear moved into it. A stage
    is read again as a wrap unless its partner holds more than half its calls."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.SiLU(), nn.Linear(8, 8), nn.Tanh())
    stage = nn.Sequential(nn.Linear(8, 8), inner)
    head = nn.Sequential(nn.Hardtanh(), nn.ReLU(), nn.Linear(8, 8))
    old = nn.Sequential(head, stage)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    moved = head[0]
    del head[0]
    inner.append(moved)
    wrapper = nn.Sequential(stage[0], stage[1])
    del stage[1]
    del stage[0]
    stage.append(wrapper)  # the very stage, holding the new one
    after = trace_forward(old, inputs)
    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    truth = [
        "1.0 (Sequential) wraps the old 1.0, 1.1, now 1.0.0, 1.0.1",
        "0.0 (Hardtanh) moved to 1.0.1.3",
    ]
    assert named.summary().splitlines()[1:] == [
        f"{truth[0]} (5 calls renamed under it)",
        truth[1],
        "2 calls renamed: 0.1 (ReLU) -> 0.0, 0.2 (Linear) -> 0.1",
    ], named.summary()
    assert name_free.summary().splitlines()[1:] == truth, name_free.summary()


def test_a_stage_split_in_two_among_look_alikes_changes_no_layers_class() -> None:
    """Review: a stage of six layers split into two stages, among look-alike Linears and
    ReLUs. Name-free, the stage read as wrapping two Linears before it, two layers swapped,
    and `type changed at 3.4.2: Linear -> ReLU` with its weight removed, fewer changes by
    count than nine calls inserted and removed, and false: where a layer of another class
    is, another layer ran. A reading that pairs layers of different classes the first did
    not is not kept."""
    torch.manual_seed(0)
    stage = [nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8), nn.ReLU(), nn.ReLU()]
    stage.append(nn.Linear(8, 8))
    before_stage = [nn.Linear(8, 8), nn.Linear(8, 8)]
    before_stage.append(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)))
    last = nn.Linear(8, 8)
    old = nn.Sequential(nn.ReLU(), nn.Sequential(*before_stage, nn.Sequential(*stage), last))
    new = nn.Sequential(
        old[0],
        nn.Sequential(*before_stage, nn.Sequential(*stage[:2]), nn.Sequential(*stage[2:]), last),
    )
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert "type changed" not in summary, summary
        assert "parameters changed" not in summary, summary
        assert difference.explained_counts()["inserted"] == 5, summary


def test_a_stage_merged_into_the_one_before_it_is_not_read_from_layers_before_both() -> None:
    """Review: `2 = S(Linear x3, S(Linear x3), S(Linear x3))`, the last stage merged into
    the one before it. Name-free, the last stage read as flattened into the parent's three
    Linears before both stages, which ran before the stage it was merged into, and one of
    them as moved into that stage: call order rules that out. A stage's calls are looked
    for between the partners of the calls around it."""
    torch.manual_seed(0)
    first = nn.Sequential(*(nn.Linear(8, 8) for _ in range(4)))
    layers = [nn.Linear(8, 8) for _ in range(3)]
    merged_into = [nn.Linear(8, 8) for _ in range(3)]
    merged = [nn.Linear(8, 8) for _ in range(3)]
    old = nn.Sequential(
        first,
        nn.ReLU(),
        nn.Sequential(*layers, nn.Sequential(*merged_into), nn.Sequential(*merged)),
    )
    new = nn.Sequential(first, old[1], nn.Sequential(*layers, nn.Sequential(*merged_into, *merged)))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    name_free = structure_diff(before, after, ignore=("paths",))

    assert set(name_free.explained_counts()) == {"inserted", "removed"}, name_free.summary()


def test_a_stem_flattened_as_two_stages_swap_is_an_unwrap_and_a_swap() -> None:
    """Review: `S(stem=S(a, b, c), act, x=S(ReLU, ReLU), y=S(ReLU, Linear))`, the stem
    flattened and `x` and `y` swapped. Read as the stem flattened, the stages after it
    paired in order by class, `x` with `y`, undoing the first reading's pairs of identical
    stages: `x -> y`, `y -> x` and two layers' classes changed. A reading keeps the pairs
    of identical calls it starts from."""
    torch.manual_seed(0)
    stem = nn.Sequential(OrderedDict(a=nn.Linear(8, 8), b=nn.Linear(8, 8), c=nn.Linear(8, 8)))
    x = nn.Sequential(nn.ReLU(), nn.ReLU())
    y = nn.Sequential(nn.ReLU(), nn.Linear(8, 8))
    old = nn.Sequential(OrderedDict(stem=stem, act=nn.Tanh(), x=x, y=y))
    new = nn.Sequential(OrderedDict(**dict(stem.named_children()), act=old.act, y=y, x=x))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.summary().splitlines()[1:] == [
        "stem (Sequential) unwrapped: the old stem.a, stem.b, stem.c are now a, b, c (3 calls "
        "renamed under it)",
        "x and y (Sequential) swapped",
    ], named.summary()
    assert name_free.explained_counts() == {"unwrapped": 1, "swapped": 1}, name_free.summary()


def test_a_wrap_reading_never_parts_a_named_layer_from_its_twin() -> None:
    """Review: named Linears, `linear2, linear3` wrapped in `pair`, `linear6, linear7` in
    `tail`, and `linear4` moved after the ReLU. The wrap reading of `tail` paired its calls
    with the run `linear4, linear7` and `linear6` with `linear4` by class, though `linear4`
    still runs under its own name with the same calls: `tail wraps the old linear4,
    linear7` and `linear6 -> linear4`. A call whose path and calls are unchanged (and whose
    last name is not a number) is that call in every reading."""
    torch.manual_seed(0)
    block = nn.Sequential(*(nn.Linear(8, 8) for _ in range(6)))
    linear2, linear3, linear4, linear6, linear7 = (nn.Linear(8, 8) for _ in range(5))
    relu = nn.ReLU()
    old = nn.Sequential(
        OrderedDict(
            [
                ("block", block),
                ("linear2", linear2),
                ("linear3", linear3),
                ("linear4", linear4),
                ("relu", relu),
                ("linear6", linear6),
                ("linear7", linear7),
            ]
        )
    )
    new = nn.Sequential(
        OrderedDict(
            [
                ("block", block),
                ("pair", nn.Sequential(linear2, linear3)),
                ("relu", relu),
                ("linear4", linear4),
                ("tail", nn.Sequential(OrderedDict(linear6=linear6, linear7=linear7))),
            ]
        )
    )
    inputs = torch.randn(2, 8)

    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert summary.splitlines()[1:] == [
        "pair (Sequential) wraps the old linear2, linear3, now pair.0, pair.1 (2 calls "
        "renamed under it)",
        "tail (Sequential) wraps the old linear6, linear7, now tail.linear6, tail.linear7 "
        "(2 calls renamed under it)",
        "linear4 (Linear) and relu (ReLU) swapped",
    ], summary


def test_a_stem_split_off_a_body_that_stays_is_two_moves_not_the_body_unwrapped() -> None:
    """Review: `body = S(S(Linear, LayerNorm), GELU, Linear, GELU, Dropout)`, its first block
    and GELU moved out before it. A rule since taken back read the body as flattened once
    its block was paired beside it, and took its last GELU for the one moved out (`1.3
    (GELU) moved to 2`, `1.1 and 1.2 swapped`). This guards the reading."""
    torch.manual_seed(0)
    body = nn.Sequential(
        nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)),
        nn.GELU(),
        nn.Linear(8, 8),
        nn.GELU(),
        nn.Dropout(0.1),
    )
    old = nn.Sequential(nn.Linear(8, 8), body, nn.Linear(8, 8)).eval()
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    block, activation = body[0], body[1]
    del body[0]
    del body[0]
    after = trace_forward(nn.Sequential(old[0], block, activation, body, old[2]).eval(), inputs)
    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.summary().splitlines()[1:4] == [
        "1.0 (Sequential, with 2 nested calls) moved to 1",
        "1.1 (GELU) moved to 2",
        "5 calls renamed: 1 (Sequential) -> 3, 1.2 (Linear) -> 3.0, 1.3 (GELU) -> 3.1, "
        "1.4 (Dropout) -> 3.2, 2 (Linear) -> 4",
    ], named.summary()
    assert name_free.explained_counts() == {"moved": 2}, name_free.summary()
    assert "1.1 (GELU) moved to 2" in name_free.summary()


def test_a_stage_flattened_before_numbered_layers_renames_them_in_order() -> None:
    """Review: stage 1 flattened into the model beside stage 0, in which a Linear is wrapped.
    At db7e33f the model's `2, 3, 4` (Linear, ReLU, Linear) paired by number and the ReLU
    read as moved (`3 (ReLU) -> 5`); under a rule since taken back, stage 0 read as 10 calls
    moved. Their looks pair all three in order."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    first = nn.Sequential(nn.SiLU(), nn.Linear(8, 8), nn.Hardswish(), inner, nn.Sigmoid())
    second = nn.Sequential(nn.Sequential(nn.SiLU(), nn.GELU()), nn.LeakyReLU(), nn.SiLU())
    old = nn.Sequential(first, second, nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)).eval()
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    inner[0] = nn.Sequential(inner[0])
    after = trace_forward(nn.Sequential(first, *second, *old[2:]).eval(), inputs)
    summary = before.diff(after).summary()

    assert summary.splitlines()[1:] == [
        "0.3.0 (Sequential) wraps the old 0.3.0, now 0.3.0.0 (1 call renamed under it)",
        "1 (Sequential) unwrapped: the old 1.0, 1.1, 1.2 are now 1, 2, 3 (5 calls renamed "
        "under it)",
        "3 calls renamed: 2 (Linear) -> 4, 3 (ReLU) -> 5, 4 (Linear) -> 6",
    ], summary


def test_a_layer_moved_between_the_stages_of_an_unwrapped_stage_is_said_moved() -> None:
    """A stage of four flattened into the model as a LeakyReLU moves from its second stage
    into its first: the unwrap counted the LeakyReLU among the 21 calls renamed under it and
    the summary never said it moved (`25 calls before, 24 after: 1 unwrap`). A call whose
    new parent is not its old parent's partner did not come with the unwrapped stages."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
    first = nn.Sequential(block, nn.LogSigmoid(), nn.Softplus())
    deep = nn.Sequential(nn.CELU(), nn.LeakyReLU(0.2), nn.Linear(8, 8), nn.Tanhshrink())
    last = nn.Sequential(nn.ELU(), nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.SiLU()))
    stage = nn.Sequential(first, nn.Sequential(nn.Hardswish(), deep), nn.Linear(8, 8), last)
    old = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), stage)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    moved = deep[1]
    del deep[1]
    block.insert(1, moved)  # the very modules: the stage's four children now 2, 3, 4, 5
    after = trace_forward(nn.Sequential(old[0], old[1], *stage), inputs)
    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.summary().splitlines()[1:] == [
        "2 (Sequential) unwrapped: the old 2.0, 2.1, 2.2, 2.3 are now 2, 3, 4, 5 (20 calls "
        "renamed under it)",
        "2.1.1.1 (LeakyReLU) moved to 2.0.1",
    ], named.summary()
    assert name_free.summary().splitlines()[1:] == [
        "2 (Sequential) unwrapped: the old 2.0, 2.1, 2.2, 2.3 are now 2, 3, 4, 5",
        "2.1.1.1 (LeakyReLU) moved to 2.0.1",
    ], name_free.summary()


def test_layers_registered_in_another_order_as_one_goes_are_swapped_not_renamed() -> None:
    """Review: `Linear, ReLU, Linear, Tanh, Linear` registered by name as `2, 1, 0, 4`, the
    Tanh left out. Their numbers cross (each Linear kept its name and runs elsewhere), and
    pairing by looks, which pairs more, read the two Linears as renamed into each other
    (`0 (Linear) -> 2, 2 (Linear) -> 0`). Numbers that cross count for the numbers."""
    torch.manual_seed(0)
    layers = [nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)]
    old = nn.Sequential(*layers)
    new = nn.Sequential(
        OrderedDict([("2", layers[2]), ("1", layers[1]), ("0", layers[0]), ("4", layers[4])])
    )
    inputs = torch.randn(2, 8)
    summary = trace_forward(old, inputs).diff(trace_forward(new, inputs)).summary()

    assert "0 and 2 (Linear) swapped" in summary, summary
    assert "1 call removed: 3 (Tanh) after 2 (Linear)" in summary, summary
    assert "renamed" not in summary, summary


def test_a_stage_made_a_subclass_as_a_layer_moves_out_of_it_is_a_type_change_and_a_move() -> None:
    """Fuzz seed 4: stage `2` made a `Stage` as the first Linear of its inner stage moves to
    `0.1`. No pass paired the old `2` with the new one (their subtrees differ, and the inner
    stage shares more calls with the old inner stage than `2` does), and it read as `2
    (Stage) wraps the old 2, now 2.1`, an unwrap, two moves, an insert and a removal. Read
    again from the calls that kept their paths (without names, their places), it is one
    type change and one move: the fewer changes (diff/readings.py)."""
    torch.manual_seed(0)
    moved = nn.Linear(8, 8)
    inner = [nn.Tanhshrink(), nn.Linear(8, 8)]
    head = [nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU()), nn.Hardtanh(), nn.Linear(8, 8)]
    old = nn.Sequential(
        nn.Sequential(*head), nn.Mish(), nn.Sequential(nn.Mish(), nn.Sequential(moved, *inner))
    )
    new = nn.Sequential(
        nn.Sequential(head[0], moved, *head[1:]),
        old[1],
        Stage(old[2][0], nn.Sequential(*inner)),
    )
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("2.1.0", "2.0", "2.1.1", "0.1")] == [
        "0.1",
        "2.0",
        "2.1.0",
        "0.2",
    ]
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named = before.diff(after)
    name_free = structure_diff(before, after, ignore=("paths",))

    summary = named.summary()
    assert named.explained_counts() == {"moved": 1, "type changed": 1, "renamed": 4}, summary
    assert "2.1.0 (Linear) moved to 0.1" in summary.splitlines(), summary
    assert "type changed at 2: Sequential -> Stage" in summary.splitlines(), summary
    assert [
        (named.old_lines[i].path, named.new_lines[j].path)
        for i, j in named.pairs
        if named.old_lines[i].path in ("2", "2.1", "2.1.0")
    ] == [("2", "2"), ("2.1", "2.1"), ("2.1.0", "0.1")]
    # Without names, read again from the calls that kept their places.
    assert name_free.explained_counts() == {"moved": 1, "type changed": 1}, name_free.summary()
    assert name_free.summary().splitlines()[1:] == [
        "2.1.0 (Linear) moved to 0.1",
        "type changed at 2: Sequential -> Stage",
    ]


def test_blocks_moved_out_of_a_stage_before_it_are_moved_though_one_takes_its_path() -> None:
    """Review fuzz case 1508: the first two blocks of stage `0.0` moved out to before it, so
    the first block is now at the stage's old path `0.0`. A second reading from the calls
    that kept their paths paired the old stage with that block and said `0.0.0 (Sequential)
    unwrapped`; the block's calls are identical to the old `0.0.0`'s, and that pair stands."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    second = nn.Sequential(nn.SiLU(), nn.Tanh(), nn.Hardswish(), nn.Linear(8, 8))
    norm = nn.LayerNorm(8)
    linears = [nn.Linear(8, 8) for _ in range(3)]
    old = nn.Sequential(
        nn.Sequential(nn.Sequential(first, second, norm), *linears), nn.LayerNorm(8)
    )
    new = nn.Sequential(nn.Sequential(first, second, nn.Sequential(norm), *linears), old[1])
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0.0.0", "0.0.1", "0.0.2")] == ["0.0", "0.1", "0.2.0"]
    inputs = torch.randn(2, 8)

    named = trace_forward(old, inputs).diff(trace_forward(new, inputs))

    summary = named.summary()
    assert "0.0.0 (Sequential, with 2 nested calls) moved to 0.0" in summary.splitlines()
    assert "0.0.1 (Sequential, with 4 nested calls) moved to 0.1" in summary.splitlines()
    assert "unwrapped" not in summary, summary
    paired = {named.old_lines[i].path: named.new_lines[j].path for i, j in named.pairs}
    assert paired["0.0.0"] == "0.0", summary
    assert paired.get("0.0") != "0.0", summary


def test_a_new_stage_at_the_path_of_one_moved_and_made_a_subclass_is_inserted() -> None:
    """Review: stage `0` made a `Stage` and moved to `2.0.2`, a new stage put at `0`. A
    second reading from the calls that kept their paths (or places) paired the old `0` with
    the new one and said `0.1 wraps the old 0.1`, the old stage inserted at `2.0.2`; what
    the old stage holds is all at `2.0.2`, and none of it at `0`."""
    torch.manual_seed(0)
    encoder = nn.Sequential(
        nn.Sequential(nn.GELU(), nn.Linear(8, 8)), nn.Linear(8, 8), nn.Linear(8, 8)
    )
    decoder = nn.Sequential(nn.Sequential(nn.GELU(), nn.LayerNorm(8)), nn.LeakyReLU())
    old = nn.Sequential(encoder, nn.LeakyReLU(), decoder, nn.Linear(8, 8))
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    fresh = nn.Sequential(
        nn.Sequential(nn.LeakyReLU(), nn.LayerNorm(8), nn.LayerNorm(8)),
        nn.Sequential(nn.Sigmoid(), nn.Linear(8, 8)),
        nn.Linear(8, 8),
    )
    decoder[0].append(Stage(*encoder))
    new = nn.Sequential(fresh, old[1], decoder, old[3])
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0", "0.0", "0.1", "0.2")] == [
        None,
        "2.0.2.0",
        "2.0.2.1",
        "2.0.2.2",
    ]
    after = trace_forward(new, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    for difference in (named, name_free):
        lines = difference.summary().splitlines()
        assert "0 (Sequential, with 5 nested calls) moved to 2.0.2" in lines, lines
        assert "type changed at 2.0.2: Sequential -> Stage" in lines, lines
        assert "wrap" not in lines[0], lines


def test_a_new_stage_put_first_without_names_is_not_the_old_first_stage() -> None:
    """Review: a new stage put first as the old first stage loses its first block. Read
    again from the calls that kept their places, the old stage paired with the new one at
    its place; without names, nothing tells them apart but what they hold, and that is
    all new: the new stage is inserted and the old one's first block removed."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    body = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 8))
    stage = nn.Sequential(first, body)
    old = nn.Sequential(stage, nn.Tanh())
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    fresh = nn.Sequential(
        nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)),
        nn.Sequential(nn.LayerNorm(8), nn.Tanh()),
        nn.LeakyReLU(),
        nn.LayerNorm(8),
    )
    del stage[0]
    new = nn.Sequential(fresh, stage, old[1])
    after = trace_forward(new, inputs)

    name_free = structure_diff(before, after, ignore=("paths",))

    assert name_free.summary().splitlines()[1:] == [
        "10 calls inserted: 0 (Sequential, with 9 nested calls) at the start of the model",
        "3 calls removed: 0.0 (Sequential, with 2 nested calls) at the start of 0",
    ], name_free.summary()


def test_a_block_swapped_with_a_layer_that_changes_its_shapes_is_one_swap() -> None:
    """Review: MobileNetV3's squeeze-excitation run before the strided depthwise conv, not
    after, read as the block removed, another inserted and its layers moved into it. It
    kept its layers; only its input and output shapes changed, as the swap made them."""
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(weights=None).eval()
    image = torch.randn(1, 3, 32, 32)
    before = trace_forward(model, image)
    was = dict(model.named_modules())
    block = model.features[1].block
    block[0], block[1] = block[1], block[0]
    now = {id(module): path for path, module in model.named_modules()}
    assert [now[id(was[f"features.1.block.{index}"])] for index in (0, 1)] == [
        "features.1.block.1",
        "features.1.block.0",
    ]
    after = trace_forward(model, image)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    for difference in (named, name_free):
        lines = difference.summary().splitlines()
        assert lines[0] == (
            "209 calls before, 209 after: 1 swap, 1 call input changed, 1 call output changed"
        ), lines
        assert lines[1].startswith(
            "features.1.block.0 (Conv2dNormActivation) and features.1.block.1 "
            "(SqueezeExcitation) swapped, now features.1.block.1 and features.1.block.0"
        ), lines
        assert lines[2].startswith(
            "input changed at 1 call: features.1.block.0 (SqueezeExcitation) input "
            "(1, 16, 8, 8) -> (1, 16, 16, 16)"
        ), lines


def test_two_layers_that_exchanged_names_are_one_swap() -> None:
    """Review: ResNet-18's stem with `relu` and `maxpool` exchanged (the pool now runs
    first) read as the ReLU removed, a ReLU inserted and the pool renamed. The ReLU is the
    same module under the name the pool left: the two names exchanged, one swap."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    image = torch.randn(1, 3, 32, 32)
    before = trace_forward(model, image)
    relu, pool = model.relu, model.maxpool
    model.relu, model.maxpool = pool, relu
    now = {id(module): path for path, module in model.named_modules()}
    assert [now[id(relu)], now[id(pool)]] == ["maxpool", "relu"]
    after = trace_forward(model, image)

    summary = before.diff(after).summary()

    assert summary.splitlines() == [
        "76 calls before, 76 after: 1 swap, 1 call input changed",
        "relu (ReLU) and maxpool (MaxPool2d) swapped, now maxpool and relu",
        "input changed at 1 call: maxpool (ReLU) input (1, 64, 16, 16) -> (1, 64, 8, 8), "
        "and so the output of maxpool (ReLU)",
    ], summary


def test_a_layer_under_a_name_no_call_left_is_no_swap() -> None:
    """The mirror the rule must leave alone: the pool renamed `relu` and a new ReLU, `act`,
    after it. No name was exchanged (`maxpool` is gone), so no swap is said."""
    torch.manual_seed(0)
    conv, relu, pool = nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2)
    image = torch.randn(1, 3, 10, 10)
    before = trace_forward(nn.Sequential(OrderedDict(conv=conv, relu=relu, maxpool=pool)), image)
    after = trace_forward(nn.Sequential(OrderedDict(conv=conv, relu=pool, act=nn.ReLU())), image)

    summary = before.diff(after).summary()

    assert summary.splitlines() == [
        "4 calls before, 4 after: 1 call inserted, 1 call removed, 1 call renamed",
        "1 call inserted: act (ReLU) after relu (MaxPool2d)",
        "1 call removed: relu (ReLU) after conv (Conv2d)",
        "1 call renamed: maxpool (MaxPool2d) -> relu",
    ], summary


def test_a_stage_whose_layer_was_wrapped_is_not_paired_with_the_wrapper() -> None:
    """The bound of pairing a block by its layout (diff/kept_layouts.py): the old stage `1`
    (a Linear and a SELU), now `0.2` with its SELU wrapped, shares its one paired layer
    with the new wrapper `0.2.1`. Paired by that share alone, the stage read as the wrapper;
    their layers' classes differ, so it is not."""
    torch.manual_seed(0)
    old = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.SELU()))
    new = nn.Sequential(
        Stage(
            nn.Linear(8, 8),
            nn.Linear(8, 8),
            nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.SELU())),
        )
    )
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    for difference in (named, name_free):
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        assert pairs.get("1") != "0.2.1", difference.summary()
        assert pairs["1.1"] == "0.2.1.0", difference.summary()


def test_two_layers_that_exchanged_names_in_a_model_wrapped_whole_are_a_wrap_and_a_swap() -> None:
    """Review: with the model wrapped whole too, the exchange read as a ReLU removed and
    another inserted (the names compared whole: `0.maxpool` is no old `maxpool`), then,
    compared by last name, the swap was counted among the calls renamed under the wrap
    and never said. Calls run out of order in their parent are a change of their own."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    image = torch.randn(1, 3, 32, 32)
    before = trace_forward(model, image)
    model.relu, model.maxpool = model.maxpool, model.relu
    after = trace_forward(nn.Sequential(model).eval(), image)

    summary = before.diff(after).summary()

    assert summary.splitlines() == [
        "76 calls before, 77 after: 1 wrap, 1 swap, 1 call input changed",
        "<root> (Sequential) wraps the old model, now 0 (74 calls renamed under it)",
        "relu (ReLU) and maxpool (MaxPool2d) swapped, now 0.maxpool and 0.relu",
        "input changed at 1 call: 0.maxpool (ReLU) input (1, 64, 16, 16) -> (1, 64, 8, 8), "
        "and so the output of 0.maxpool (ReLU)",
    ], summary


def test_two_activations_swapped_as_the_model_is_wrapped_whole_are_said() -> None:
    """Review: the swap was counted among the calls renamed under the wrap, and the
    summary read `1 wrap` alone, as if the layers ran as before."""
    torch.manual_seed(0)
    layers = [nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)]
    inputs = torch.randn(2, 8)
    before = trace_forward(nn.Sequential(*layers), inputs)
    first, tanh, middle, relu, last = layers
    after = trace_forward(nn.Sequential(nn.Sequential(first, relu, middle, tanh, last)), inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.summary().splitlines() == [
        "6 calls before, 7 after: 1 wrap, 1 swap",
        "<root> (Sequential) wraps the old model, now 0 (4 calls renamed under it)",
        "1 (Tanh) and 3 (ReLU) swapped, now 0.3 and 0.1",
    ], named.summary()
    # Without names the same layers may read as changed in place; either way they are said.
    assert "Tanh" in name_free.summary(), name_free.summary()


def _encoder_without_its_norm(encoder: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """torchvision's ViT encoder's forward without its last LayerNorm."""
    return encoder.layers(encoder.dropout(inputs + encoder.pos_embedding))


def test_a_norm_moved_to_the_head_where_it_takes_other_shapes_is_one_move() -> None:
    """Review: a ViT's final LayerNorm moved from the encoder to the front of the head read
    as one LayerNorm removed and another inserted: it now normalises the class token alone,
    so its shapes changed, and only look-alikes of the same shapes paired across parents.
    The one layer of its name and facts that went, and the one that came, is it moved."""
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    ).eval()
    inputs = torch.randn(1, 3, 32, 32)
    before = trace_forward(model, inputs)
    norm = model.encoder.ln
    del model.encoder.ln
    model.encoder.forward = types.MethodType(_encoder_without_its_norm, model.encoder)
    model.heads = nn.Sequential(OrderedDict(ln=norm, head=model.heads.head))
    modules = dict(model.named_modules())
    assert modules["heads.ln"] is norm
    assert "encoder.ln" not in modules
    after = trace_forward(model, inputs)

    summary = before.diff(after).summary()

    assert summary.splitlines() == [
        "30 calls before, 30 after: 1 move to another parent, 1 call input changed",
        "encoder.ln (LayerNorm) moved to heads.ln",
        "input changed at 1 call: heads.ln (LayerNorm) input (1, 5, 16) -> (1, 16), and so "
        "the output of heads.ln (LayerNorm)",
    ], summary


def test_a_layer_named_by_its_number_moved_to_a_stage_that_stays_is_one_move() -> None:
    """The issue's own case (`enc.2 (LayerNorm)` now `dec.0`) where the layer takes other
    shapes in its new stage: it read as one LayerNorm removed and another inserted, as a
    number says where a layer is, not which. Where it is the one layer of its class and
    facts that went and the one that came, and the stage it now runs in stays, it is moved
    (the fuzz on real models: a GELU moved from one decoder block's MLP to another's)."""
    torch.manual_seed(0)
    norm = nn.LayerNorm(8)
    inputs = torch.randn(2, 8)
    old = nn.Sequential(nn.Sequential(nn.Unflatten(1, (1, 8)), norm), nn.Sequential(nn.Flatten()))
    new = nn.Sequential(nn.Sequential(old[0][0]), nn.Sequential(old[1][0], norm))
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    assert _paths_by_identity(old, new)["0.1"] == "1.1"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert summary.splitlines()[1:] == [
            "0.1 (LayerNorm) moved to 1.1",
            "input changed at 1 call: 1.1 (LayerNorm) input (2, 1, 8) -> (2, 8), and so the "
            "output of 1.1 (LayerNorm)",
        ], summary


def test_of_two_look_alike_layers_gone_and_one_come_elsewhere_none_is_moved() -> None:
    """The bound of the rule above: of two LayerNorms gone from one stage and one come to
    another with other shapes, no trace tells which one moved, if either did."""
    torch.manual_seed(0)
    inputs = torch.randn(2, 8)
    old = nn.Sequential(
        nn.Sequential(nn.Unflatten(1, (1, 8)), nn.LayerNorm(8), nn.LayerNorm(8)),
        nn.Sequential(nn.Flatten()),
    )
    new = nn.Sequential(nn.Sequential(old[0][0]), nn.Sequential(old[1][0], old[0][2]))
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"inserted": 1, "removed": 2}, summary
        assert " moved to " not in summary, summary


def test_a_block_removed_from_one_stage_and_one_copied_in_another_moves_no_layer() -> None:
    """Fuzz on real models: ResNet-18 loses `layer1.1` and `layer4.1` is copied after itself.
    Each block's ReLU is the one layer of its last name and settings that went and came,
    so it read as moved from the removed block into the copy (`layer1.1.relu #1 (ReLU)
    moved to layer4.2.relu #1`, its input changed). A layer is not taken out of a block
    removed whole into a block inserted whole: the blocks around it paired with nothing."""
    torch.manual_seed(0)
    old = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    new = copy.copy(old)  # the same modules, in a dict of its own
    new._modules = dict(old._modules)
    new.layer1 = nn.Sequential(old.layer1[0])
    new.layer4 = nn.Sequential(*old.layer4, copy.deepcopy(old.layer4[1]))
    now = _paths_by_identity(old, new)
    assert (now["layer1.1"], now["layer1.1.relu"], now["layer4.1.relu"]) == (
        None, None, "layer4.1.relu",
    )  # fmt: skip
    image = torch.randn(1, 3, 32, 32)
    before, after = trace_forward(old, image), trace_forward(new, image)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"inserted": 7, "removed": 7}, summary
        assert " moved to " not in summary, summary


def test_a_stage_wrapped_as_the_model_is_frozen_is_the_same_wrap() -> None:
    """Review: ResNet-18's `layer2` wrapped with an Identity after it, and every parameter
    frozen for fine-tuning, read as a new `layer2.0` wrapping the old blocks: freezing
    changed every call's facts, so no block paired as it was before the pairs by path. The
    frozen state is its own change; the blocks are the same."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    image = torch.randn(1, 3, 32, 32)
    before = trace_forward(model, image)
    stage = model.layer2
    model.layer2 = nn.Sequential(stage, nn.Identity())
    model.requires_grad_(False)
    assert dict(model.named_modules())["layer2.0"] is stage
    after = trace_forward(model, image)

    summary = before.diff(after).summary()

    assert summary.splitlines()[:3] == [
        "76 calls before, 78 after: 1 wrap, 1 call inserted, 41 calls frozen state changed",
        "layer2 (Sequential) wraps the old layer2, now layer2.0 (18 calls renamed under it)",
        "1 call inserted: layer2.1 (Identity) after layer2.0 (Sequential)",
    ], summary


class SplitActivation(BasicBlock):
    """torchvision's BasicBlock with a ReLU of its own for its second activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu2(out + identity)


def _calls_by_module(model: nn.Module, image: torch.Tensor) -> Counter[str]:
    """The oracle: each module's calls, counted by a global forward hook."""
    paths = {module: path for path, module in model.named_modules()}
    calls: Counter[str] = Counter()
    hook = nn.modules.module.register_module_forward_hook(
        lambda module, inputs, output: calls.update([paths.get(module, "?")])
    )
    try:
        with torch.no_grad():
            model(image)
    finally:
        hook.remove()
    return calls


def test_a_shared_activation_split_in_two_keeping_its_name_is_one_split_each_way() -> None:
    """Review: ResNet-18's blocks given a second ReLU of their own (`relu2`), the first
    call keeping `relu`, read as `2 calls renamed` and `reuse count changed: layer1.0.relu
    2 -> 1`, two lines about one change; undone, the same. A module's calls now made by it
    and new modules in turn are a split (or, undone, a merge), its reuse count said by it."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    image = torch.randn(1, 3, 32, 32)
    before = trace_forward(model, image)
    was = _calls_by_module(model, image)
    for block in (model.layer1[0], model.layer2[1]):
        block.relu2 = nn.ReLU(inplace=True)
        block.__class__ = SplitActivation
    now = _calls_by_module(model, image)
    assert [was["layer1.0.relu"], now["layer1.0.relu"], now["layer1.0.relu2"]] == [2, 1, 1]
    after = trace_forward(model, image)

    split, merged = before.diff(after).summary(), after.diff(before).summary()

    assert split.splitlines() == [
        "76 calls before, 76 after: 2 shared modules split, 2 calls type changed",
        "layer1.0.relu (ReLU) split into layer1.0.relu, layer1.0.relu2",
        "layer2.1.relu (ReLU) split into layer2.1.relu, layer2.1.relu2",
        "type changed at 2 calls: BasicBlock -> SplitActivation in layer1.0, layer2.1",
    ], split
    assert merged.splitlines() == [
        "76 calls before, 76 after: 2 merges into shared modules, 2 calls type changed",
        "layer1.0.relu, layer1.0.relu2 (ReLU) merged into layer1.0.relu",
        "layer2.1.relu, layer2.1.relu2 (ReLU) merged into layer2.1.relu",
        "type changed at 2 calls: SplitActivation -> BasicBlock in layer1.0, layer2.1",
    ], merged


def test_a_second_call_given_to_another_existing_module_is_no_split() -> None:
    """The bound: a module whose second call now goes to a module the old model had too
    was not split into it (the other module is no new one): no split is said."""
    torch.manual_seed(0)
    first, second = nn.ReLU(), nn.ReLU()
    linear = nn.Linear(8, 8)

    class TwoActivations(nn.Module):
        def __init__(self, *, shared: bool) -> None:
            super().__init__()
            self.linear, self.first, self.second, self.shared = linear, first, second, shared

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.second(self.first(self.linear(x)))
            return self.first(x) if self.shared else self.second(x)

    inputs = torch.randn(2, 8)
    before = trace_forward(TwoActivations(shared=True), inputs)
    after = trace_forward(TwoActivations(shared=False), inputs)

    summary = before.diff(after).summary()

    assert "split" not in summary, summary
    assert "reuse count changed: first 2 -> 1, second 1 -> 2" in summary, summary


def _six_stages_and_flattened(
    stage: Callable[[], nn.Module], flattened: tuple[int, ...]
) -> tuple[nn.Sequential, list[nn.Module]]:
    """Six look-alike stages (seeded), and a copy of them with those at `flattened` flattened
    where they ran: the children of the model after."""
    torch.manual_seed(0)
    model = nn.Sequential(*(stage() for _ in range(6)))
    children: list[nn.Module] = []
    for at, copied in enumerate(copy.deepcopy(model)):
        children += list(copied) if at in flattened else [copied]
    return model, children


def _three_wrapped_linears() -> nn.Module:
    return nn.Sequential(*(nn.Sequential(nn.Linear(8, 8)) for _ in range(3)))


def _two_blocks() -> nn.Module:
    return nn.Sequential(_Block(), _Block())


def test_a_model_wrapped_whole_as_one_of_its_look_alike_stages_is_flattened() -> None:
    """Six look-alike stages; the model wrapped whole while its fourth stage is flattened.
    The new `0` is the wrapper, so the old `0`'s children are not the new `0`'s: the named
    reading finds stage 3 as the name-free one does, and each renamed call is counted under
    the innermost change that holds it (the unwrap), not under the wrap too."""
    old, stages = _six_stages_and_flattened(_three_wrapped_linears, (3,))
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    after = trace_forward(nn.Sequential(nn.Sequential(*stages)), inputs)

    named, free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    flattened = "3 (Sequential) unwrapped: the old 3.0, 3.1, 3.2 are now 0.3, 0.4, 0.5"
    assert named.explained_counts() == {"wrapped": 1, "unwrapped": 1}, named.summary()
    assert free.explained_counts() == {"wrapped": 1, "unwrapped": 1}, free.summary()
    assert f"{flattened} (6 calls renamed under it)" in named.summary(), named.summary()
    assert flattened in free.summary(), free.summary()
    # Every old call but the flattened stage's is renamed (`0` before its path; the model
    # is `0`): the stage and its 6 are counted under the unwrap, not under the wrap too.
    renamed = sum(1 for line in before.calls if not line.path.startswith("3"))
    assert renamed == 43 - 7
    wrap = f"<root> (Sequential) wraps the old model, now 0 ({renamed} calls renamed under it)"
    assert wrap in named.summary(), named.summary()


def test_a_model_taken_out_of_its_wrapper_as_three_look_alike_layers_are_grouped() -> None:
    """The mirror image: the model unwrapped whole while three of its look-alike layers are
    grouped into a stage among five others. Before, the named reading said stage 0 was the
    new one, with a stage inserted and another removed."""
    new, layers = _six_stages_and_flattened(_three_wrapped_linears, (3,))
    inputs = torch.randn(2, 8)
    before = trace_forward(nn.Sequential(nn.Sequential(*layers)), inputs)
    after = trace_forward(new, inputs)

    named, free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    grouped = "3 (Sequential) wraps the old 0.3, 0.4, 0.5, now 3.0, 3.1, 3.2"
    assert named.explained_counts() == {"wrapped": 1, "unwrapped": 1}, named.summary()
    assert free.explained_counts() == {"wrapped": 1, "unwrapped": 1}, free.summary()
    assert f"{grouped} (6 calls renamed under it)" in named.summary(), named.summary()
    assert grouped in free.summary(), free.summary()
    # The calls in the wrapper but the grouped layers' 6 are renamed (`0.` taken off their
    # path); the wrapper itself is unwrapped.
    grouped_paths = ("0.3", "0.4", "0.5")
    renamed = sum(1 for line in before.calls if line.path and line.path[:3] not in grouped_paths)
    assert renamed == 43 - 6 - 1
    unwrap = f"<root> (Sequential) unwrapped: the old 0 is now <root> ({renamed} calls renamed"
    assert unwrap in named.summary(), named.summary()


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(8, 8), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


@pytest.mark.parametrize("flattened", [(1, 4), (0, 5), (2, 3), (0, 1)])
def test_a_model_wrapped_whole_as_two_of_its_look_alike_stages_are_flattened(
    flattened: tuple[int, int],
) -> None:
    """Six look-alike stages of two blocks; the model wrapped whole while two stages are
    flattened. Both stages that were flattened are named, by the places their blocks run at
    (before, the named reading said `0 (Sequential) unwrapped` with calls inserted and
    removed, or named stage 1 for stage 5)."""
    old, stages = _six_stages_and_flattened(_two_blocks, flattened)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    after = trace_forward(nn.Sequential(nn.Sequential(*stages)), inputs)

    named, free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    for difference in (named, free):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "unwrapped": 2}, summary
        for stage in flattened:
            assert f"\n{stage} (Sequential) unwrapped: the old {stage}.0, {stage}.1" in summary


@pytest.mark.parametrize("flattened", [(1, 4), (0, 5), (2, 3), (0, 1), (4, 5)])
def test_two_look_alike_stages_flattened_name_both_and_renumber_those_between(
    flattened: tuple[int, int],
) -> None:
    """Six look-alike stages of two blocks, two flattened where they ran. The stages between
    and after them are renumbered, so pairing by name left out the wrong stages: stages 1
    and 4 read as `2 unwraps, 1 move to another parent, 1 subtree renamed, 3 calls inserted,
    3 calls removed`, and stages 0 and 5 as stages 0 and 1 unwrapped."""
    old, stages = _six_stages_and_flattened(_two_blocks, flattened)
    # Each stage flattened before another moves its two blocks one place further down.
    first = {stage: stage + sum(other < stage for other in flattened) for stage in flattened}
    new_paths = {stage: f"{at}, {at + 1}" for stage, at in first.items()}
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    after = trace_forward(nn.Sequential(*stages), inputs)

    named, free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert free.explained_counts() == {"unwrapped": 2}, free.summary()
    counts = named.explained_counts()
    assert counts.pop("unwrapped") == 2, named.summary()
    # The stages between and after the flattened ones are renumbered: renames, nothing else.
    assert set(counts) <= {"renamed"}, named.summary()
    for stage in flattened:
        unwrap = f"\n{stage} (Sequential) unwrapped: the old {stage}.0, {stage}.1"
        assert f"{unwrap} are now {new_paths[stage]}" in named.summary(), named.summary()
        assert f"{unwrap} are now {new_paths[stage]}" in free.summary(), free.summary()


def test_a_model_wrapped_whole_as_its_last_stage_is_flattened_reads_as_both() -> None:
    """The model wrapped whole while a stage inside it is flattened. Before, the named
    reading paired the old model's stage with the new model and said `2 moves to another
    parent, 1 subtree renamed, 4 calls renamed`: as many changes stated as the wrap and the
    unwrap (renames are said beside other changes, not counted), and the first reading kept.
    Of readings that state as many, the one with fewest renames that no wrap or unwrap
    explains is kept: each rename here is under the wrap or the unwrap."""

    def model(*, refactored: bool) -> nn.Sequential:
        torch.manual_seed(0)
        act, first = nn.Hardswish(), nn.Sequential(nn.Linear(8, 8), nn.Mish(), nn.Linear(8, 8))
        rest = [nn.Hardswish(), nn.Mish(), nn.Softsign(), nn.ELU()]
        if refactored:
            return nn.Sequential(nn.Sequential(act, nn.Sequential(first, *rest)))
        return nn.Sequential(act, nn.Sequential(first, nn.Sequential(*rest)))

    inputs = torch.randn(2, 8)
    before = trace_forward(model(refactored=False), inputs)
    after = trace_forward(model(refactored=True), inputs)

    named = before.diff(after)

    assert named.explained_counts() == {"wrapped": 1, "unwrapped": 1}, named.summary()
    assert "<root> (Sequential) wraps the old model, now 0 (" in named.summary()
    unwrap = "1.1 (Sequential) unwrapped: the old 1.1.0, 1.1.1, 1.1.2, 1.1.3 are now 0.1.1, "
    assert unwrap in named.summary(), named.summary()


def _stage_of_a_block_and_a_layer(*, refactored: bool) -> nn.Sequential:
    """Two layers, then a stage of a block and a layer; refactored, the block is wrapped
    (`stage[0] = nn.Sequential(block)`) and the model wrapped whole."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(), nn.Linear(8, 8))
    stage = nn.Sequential(nn.Sequential(block) if refactored else block, nn.Linear(8, 8))
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), stage)
    return nn.Sequential(model) if refactored else model


@pytest.mark.parametrize("undone", [False, True], ids=["wrapped", "unwrapped"])
def test_a_block_wrapped_in_its_stage_as_the_model_is_wrapped_whole_is_two_wraps(
    undone: bool,
) -> None:
    """Before, the stage was read as wrapped (`0.2 (Sequential) wraps the old 2`) and its
    other layer as moved into the wrapper (`2.1 (Linear) moved to 0.2.1`): three changes
    where two were made. The stage and its layer are the same modules, at 0.2 and 0.2.1 now;
    the block's wrapper is the new call (`undone`: the mirror image, both taken out)."""
    old = _stage_of_a_block_and_a_layer(refactored=undone)
    new = _stage_of_a_block_and_a_layer(refactored=not undone)
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    kind = "unwrapped" if undone else "wrapped"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {kind: 2}, summary
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        # The oracle: the modules themselves, the stage and its layer at the same places.
        expected = {"2": "0.2", "2.1": "0.2.1", "2.0.0": "0.2.0.0.0"}
        if undone:
            expected = {new: old for old, new in expected.items()}
        assert {name: pairs.get(name) for name in expected} == expected, summary
        assert "moved" not in summary


@pytest.mark.parametrize("undone", [False, True], ids=["removed", "inserted"])
def test_a_stage_removed_as_the_next_loses_a_layer_is_no_type_change(undone: bool) -> None:
    """The first of two stages removed, and the first layer of the second: the stage left
    (its Tanh, the same module) was paired by its place with the one removed, and the
    diff said `type changed at 0.0: Linear -> Tanh` and the other stage removed, two
    changes nobody made beside the removal. The mirror image inserts both."""
    torch.manual_seed(0)
    tanh = nn.Tanh()
    both = nn.Sequential(nn.Sequential(nn.Linear(8, 8)), nn.Sequential(nn.Linear(8, 8), tanh))
    left = nn.Sequential(nn.Sequential(tanh))
    old, new = (left, both) if undone else (both, left)
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    kind = "inserted" if undone else "removed"

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.explained_counts() == {kind: 3, "renamed": 2}, named.summary()
    assert name_free.explained_counts() == {kind: 3}, name_free.summary()
    for difference in (named, name_free):
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        # The oracle: the modules themselves, the second stage and its Tanh kept.
        expected = {"1": "0", "1.1": "0.0"}
        if undone:
            expected = {new: old for old, new in expected.items()}
        assert {name: pairs.get(name) for name in expected} == expected, difference.summary()


def test_a_strided_conv_removed_from_a_mobilenet_block_is_one_removal() -> None:
    """`del model.features[4].block[1][0]`, the stride-2 depthwise convolution of one
    MobileNetV3 block: every shape after it doubles. Before, the batch norm and ReLU it
    fed were read as `type changed: Conv2d -> BatchNorm2d, BatchNorm2d -> ReLU` and a ReLU
    removed (paired by their numbers), and the squeeze-excitations of blocks 12 and 13 as
    swapped between them, named and name-free: block 13's now has the shapes block 12's had,
    and paired by those alone, across blocks whose every other call kept its name (place)."""
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_large(weights=None).eval()
    image = torch.randn(1, 3, 64, 64)
    before = trace_forward(model, image)
    kept = {
        "features.4.block.1.1": model.features[4].block[1][1],  # the batch norm
        "features.12.block.2": model.features[12].block[2],
        "features.13.block.2": model.features[13].block[2],
    }
    del model.features[4].block[1][0]
    after = trace_forward(model, image)
    # The oracle: where each module kept is called now, by the modules themselves.
    now = {
        old: next(name for name, module in model.named_modules() if module is kept_module)
        for old, kept_module in kept.items()
    }
    assert now == {
        "features.4.block.1.1": "features.4.block.1.0",
        "features.12.block.2": "features.12.block.2",
        "features.13.block.2": "features.13.block.2",
    }

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    removal = "1 call removed: features.4.block.1.0 (Conv2d) at the start of features.4.block.1"
    for difference in (named, name_free):
        counts = difference.explained_counts()
        assert counts["removed"] == 1, difference.summary()
        assert not {"type changed", "moved", "swapped"} & set(counts), difference.summary()
        assert removal in difference.summary()
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        assert {old: pairs.get(old) for old in now} == now, difference.summary()


def test_a_layer_removed_before_layers_whose_shapes_it_changed_renames_them() -> None:
    """A strided convolution removed from the start of a Sequential: the batch norm and
    the activation after it take other shapes and other numbers. Paired by their numbers,
    they read as `type changed: Conv2d -> BatchNorm2d, BatchNorm2d -> ReLU` and the ReLU
    removed; by their classes in order, as the convolution removed and both renamed."""
    torch.manual_seed(0)
    norm, activation = nn.BatchNorm2d(4), nn.ReLU()
    old = nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1), norm, activation).eval()
    new = nn.Sequential(norm, activation).eval()
    image = torch.randn(1, 4, 8, 8)
    before, after = trace_forward(old, image), trace_forward(new, image)

    named = before.diff(after)

    summary = named.summary()
    # The input change follows from the removal; the rest follows from it, said with it.
    assert named.explained_counts() == {"removed": 1, "renamed": 2, "input changed": 1}, summary
    assert "1 call removed: 0 (Conv2d) at the start of <root> (Sequential)" in summary
    assert "2 calls renamed: 1 (BatchNorm2d) -> 0, 2 (ReLU) -> 1" in summary


def test_a_stage_removed_before_look_alike_calls_does_not_keep_their_places() -> None:
    """The first stage removed and the first layer of the last: the calls after them take
    other places. Name-free, a call's place counts as kept only where the calls around it
    are as many as they were (diff/namesakes.py): taken as kept, the places paired the
    stage left first with the one removed (`type changed at 0.0: Linear -> LeakyReLU`)."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    middle = nn.Sequential(nn.LeakyReLU(), nn.Softsign(), nn.Linear(8, 8), nn.Tanh())
    last_tanh = nn.Tanh()
    old = nn.Sequential(first, middle, nn.Sequential(nn.Linear(8, 8), last_tanh))
    new = nn.Sequential(middle, nn.Sequential(last_tanh))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    name_free = structure_diff(before, after, ignore=("paths",))

    assert name_free.explained_counts() == {"removed": 4}, name_free.summary()
    old_names, new_names = name_free.old_names, name_free.new_names
    pairs = {old_names[i].name: new_names[j].name for i, j in name_free.pairs}
    # The oracle: the modules themselves, the middle stage and the last Tanh kept.
    expected = {"1": "0", "1.0": "0.0", "1.3": "0.3", "2": "1", "2.1": "1.0"}
    assert {name: pairs.get(name) for name in expected} == expected, name_free.summary()


def test_a_model_wrapped_whole_beside_a_copy_of_itself_is_one_wrap() -> None:
    """`nn.Sequential(model, nn.Tanh(), copy.deepcopy(model))`: before, each of the model's
    layers read as wrapped with a copy of the others (`0 wraps the old 0`, `2 wraps the old
    2`) and its ReLU as a Tanh, since the model's only call was looked for alone. One of the
    new model's calls holding all the old model held is read as the model, wrapped."""
    torch.manual_seed(0)
    old = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    new = nn.Sequential(old, nn.Tanh(), copy.deepcopy(old))
    assert new[0] is old  # the oracle: the old model is the new one's first call
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "inserted": 5}, summary
        assert "<root> (Sequential) wraps the old model, now 0" in summary
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        assert pairs == {"<root>": "0", "0": "0.0", "1": "0.1", "2": "0.2"}, summary


def test_a_model_wrapped_whole_after_a_copy_of_itself_is_one_wrap() -> None:
    """`nn.Sequential(copy.deepcopy(model), model)`: before, `2 wraps, 2 calls inserted`
    (`0 wraps the old 0`, `1 wraps the old 1`). The copy and the model look alike, so the
    summary may name either as the model wrapped; here the first."""
    torch.manual_seed(0)
    old = nn.Sequential(nn.SELU(), nn.Linear(8, 8))
    new = nn.Sequential(copy.deepcopy(old), old)
    inputs = torch.randn(2, 8)
    # The oracle for "either": the model the summary names traces to the same golden.
    named_one = trace_forward(nn.Sequential(old, copy.deepcopy(old)), inputs)
    assert named_one.render() == trace_forward(new, inputs).render()
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "inserted": 3}, summary
        assert "<root> (Sequential) wraps the old model, now 0" in summary


def test_a_stage_moved_as_the_model_is_wrapped_whole_is_one_move() -> None:
    """A stage moved from the second stage's first block to the start of the first stage,
    and the model wrapped whole. Before, named, `1 wrap, 2 moves to another parent, 1 call
    inserted, 1 call removed`: every path changed with the wrap, so no reading from the
    calls that kept their paths was tried; it is tried within the model wrapped."""
    torch.manual_seed(0)
    moved = nn.Sequential(nn.SELU())
    first = nn.Sequential(nn.Hardswish(), nn.Linear(8, 8))
    second = nn.Sequential(nn.Sequential(moved, nn.Hardswish()), nn.Sequential(nn.Linear(8, 8)))
    old = nn.Sequential(first, second)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    del second[0][0]
    first.insert(0, moved)
    new = nn.Sequential(old)
    after = trace_forward(new, inputs)
    # The oracle: the module moved, by the modules themselves.
    assert next(name for name, module in new.named_modules() if module is moved) == "0.0.0"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "moved": 1}, summary
        assert "1.0.0 (Sequential, with 1 nested call) moved to 0.0.0" in summary


def test_a_stage_stacked_twice_by_wrapping_it_with_a_copy_is_one_wrap() -> None:
    """`model.encoder = nn.Sequential(model.encoder, copy.deepcopy(model.encoder))`: before,
    `2 wraps, 4 calls inserted, 1 call removed` (`encoder.0 (Sequential) wraps the old
    encoder.0`, `encoder.2 (Linear)` removed): each of the stage's layers read as wrapped
    with a copy of the others, as the model wrapped beside a copy of itself was. One of the
    new stage's calls holding all the old stage held is read as the stage, wrapped."""
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
    model = nn.Sequential(OrderedDict(stem=nn.Linear(8, 8), encoder=encoder, head=nn.Linear(8, 4)))
    inputs = torch.randn(2, 8)
    before = trace_forward(model, inputs)
    model.encoder = nn.Sequential(encoder, copy.deepcopy(encoder))
    after = trace_forward(model, inputs)
    # The oracle: the old stage is the new stage's first call.
    assert next(name for name, module in model.named_modules() if module is encoder) == "encoder.0"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "inserted": 4}, summary
        assert "encoder (Sequential) wraps the old encoder, now encoder.0" in summary
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        assert pairs["encoder.2"] == "encoder.0.2", summary
    for difference in (after.diff(before), structure_diff(after, before, ignore=("paths",))):
        assert difference.explained_counts() == {"unwrapped": 1, "removed": 4}, difference.summary()


def test_a_layer_copied_beside_itself_before_a_block_is_one_insertion_not_a_swap() -> None:
    """`model.insert(1, copy.deepcopy(model[0]))` before a block: before, named, `1 swap, 1
    call inserted` (`1 (Sequential) and 2 (Linear) swapped`): the block paired whole first,
    and the Linear after it then paired with the first Linear left, before the block. The
    children paired already hold the others in order, named too, where children came or
    went: the block and the Linear after it were renamed, one Linear inserted."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Sequential(nn.ELU(), nn.CELU()), nn.Linear(8, 8))
    last = nn.Linear(8, 8)
    model = nn.Sequential(nn.Linear(8, 8), block, last)
    inputs = torch.randn(2, 8)
    before = trace_forward(model, inputs)
    model.insert(1, copy.deepcopy(model[0]))
    after = trace_forward(model, inputs)
    # The oracle: where the block and the last Linear are now, by the modules themselves.
    names = {module: name for name, module in model.named_modules()}
    assert (names[block], names[last]) == ("2", "3")

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        counts = difference.explained_counts()
        assert counts["inserted"] == 1, summary
        assert not {"swapped", "moved"} & set(counts), summary
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        assert (pairs["1"], pairs["2"]) == ("2", "3"), summary


def test_a_model_unwrapped_whole_as_a_stage_is_flattened_and_one_wrapped_says_the_three() -> None:
    """The model taken out of its wrapper, its second stage flattened into it and its last
    wrapped in a new stage: `1 wrap, 2 unwraps`. The flattened stage is no look-alike of
    the new wrapper swapped past a stage that stayed: its calls are elsewhere."""
    torch.manual_seed(0)
    flattened = nn.Sequential(nn.ELU(), nn.Hardtanh(), nn.Linear(8, 8))
    wrapped = nn.Sequential(nn.Linear(8, 8), nn.Hardsigmoid())
    first = nn.Sequential(nn.ELU(), nn.Mish(), nn.Tanh(), nn.Hardsigmoid())
    third = nn.Sequential(nn.Softplus(), nn.Linear(8, 8))
    inner = nn.Sequential(first, flattened, third, wrapped)
    inputs = torch.randn(2, 8)
    before = trace_forward(nn.Sequential(inner), inputs)
    new = nn.Sequential(first, *flattened, third, nn.Sequential(wrapped))
    after = trace_forward(new, inputs)
    assert new[5][0] is wrapped  # the oracle: the stage wrapped, by the modules themselves

    difference = before.diff(after)
    summary = difference.summary()
    assert difference.explained_counts() == {"wrapped": 1, "unwrapped": 2}, summary
    assert "5 (Sequential) wraps the old 0.3, now 5.0" in summary


def test_a_stage_wrapped_inside_a_model_wrapped_whole_is_two_wraps_not_a_move() -> None:
    """Two layers of the last stage wrapped in a new stage, and the model wrapped whole. Two
    readings state two changes each: `2 wraps`, or the stage read as the new inner one with
    its first layer moved out to a wrapper (`1 wrap, 1 move`). Of readings that state as
    many, the one that moves fewer calls is kept: the stage is `0.3`."""
    torch.manual_seed(0)
    stage = nn.Sequential(
        nn.Linear(8, 8),
        nn.Sequential(nn.Sequential(nn.Linear(8, 8), nn.Softsign()), nn.Sequential(nn.ReLU())),
        nn.Linear(8, 8),
    )
    old = nn.Sequential(
        nn.Hardswish(), nn.Sequential(nn.CELU(), nn.Linear(8, 8)), nn.Softplus(), stage
    )
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    stage[1] = nn.Sequential(stage[1], stage[2])
    del stage[2]
    new = nn.Sequential(old)
    after = trace_forward(new, inputs)
    assert next(name for name, module in new.named_modules() if module is stage) == "0.3"

    difference = before.diff(after)
    summary = difference.summary()
    assert difference.explained_counts() == {"wrapped": 2}, summary
    assert "0.3.1 (Sequential) wraps the old 3.1, 3.2, now 0.3.1.0, 0.3.1.1" in summary
    pairs = {
        difference.old_lines[i].name: difference.new_lines[j].name for i, j in difference.pairs
    }
    assert pairs["3"] == "0.3", summary


def test_a_model_wrapped_whole_as_its_first_stage_is_flattened_moves_nothing() -> None:
    """The first stage flattened into the model and the model wrapped whole: before, `2
    moves to another parent` (the calls after the stage read as moved into it), named and
    name-free, which states as many changes as `1 wrap, 1 unwrap`. Of readings that state
    as many changes, the one that moves fewer calls is kept: a wrap or an unwrap keeps
    every call in its order under its parent."""
    torch.manual_seed(0)
    stem = nn.Sequential(nn.Softsign(), nn.ReLU(), nn.SiLU(), nn.SELU())
    model = nn.Sequential(
        stem, nn.CELU(), nn.Sequential(nn.Linear(8, 8), nn.ReLU6(), nn.Tanh(), nn.SiLU())
    )
    inputs = torch.randn(2, 8)
    before = trace_forward(model, inputs)
    del model[0]
    for layer in reversed(stem):
        model.insert(0, layer)
    new = nn.Sequential(model)
    after = trace_forward(new, inputs)
    # The oracle: the layer after the stage is where the stage's layers now run.
    assert next(name for name, module in new.named_modules() if module is stem[0]) == "0.0"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "unwrapped": 1}, summary
        assert "<root> (Sequential) wraps the old model, now 0" in summary


def test_a_model_wrapped_twice_as_a_layer_is_removed_is_one_wrap_and_a_removal() -> None:
    """The model put in a Sequential in a Sequential as its first stage loses its last
    Linear. Before, the reading of the model wrapped paired it with the outer wrapper's only
    call, the inner wrapper, and said the first stage wrapped twice, the second moved into
    it, two Linears inserted and three removed; each call of the chain of one call each is
    now read as the old model (`stage_readings.model_readings`)."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Hardsigmoid(), nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
    old = nn.Sequential(first, nn.Sequential(nn.Linear(8, 8), nn.CELU(), nn.Linear(8, 8)))
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    removed = first[3]
    del first[3]
    new = nn.Sequential(nn.Sequential(old))
    after = trace_forward(new, inputs)
    # The oracle: where the modules themselves are now.
    paths = _paths_by_identity(old, new)
    assert paths[""] == "0.0", paths
    assert all(module is not removed for module in new.modules())

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "removed": 1}, summary
        assert "<root> (Sequential) and 0 (Sequential) wrap the old model, now 0.0" in summary
        assert "1 call removed: 0.3 (Linear)" in summary, summary


def test_a_model_wrapped_whole_as_a_stage_is_flattened_and_a_layer_moves_reads_all_three() -> None:
    """The model wrapped whole, its first stage flattened into it and the second stage's
    first layer moved after the flattened layers. Before, named, `4 moves to another parent,
    1 call inserted, 1 call removed`: read alone, the model wrapped stated more than the
    first reading (the flattened stage paired with a call it never was), so what it leaves
    to read (the stage flattened) was never read. A reading of the model wrapped is now read
    on from, and kept where the best it leads to states fewer changes."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.ReLU6(), nn.ReLU())
    second = nn.Sequential(nn.SELU(), nn.GELU(), nn.Linear(8, 8), nn.SiLU())
    old = nn.Sequential(first, second)
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    moved = second[0]
    del second[0]
    del old[0]
    for place, layer in enumerate([*first, moved]):
        old.insert(place, layer)
    new = nn.Sequential(old)
    after = trace_forward(new, inputs)
    # The oracle: where the modules themselves are now.
    paths = {id(module): path for path, module in new.named_modules()}
    assert id(first) not in paths
    assert (paths[id(old)], paths[id(first[0])], paths[id(moved)], paths[id(second)]) == (
        "0",
        "0.0",
        "0.4",
        "0.5",
    )

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        counts = difference.explained_counts()
        assert counts == {"wrapped": 1, "unwrapped": 1, "moved": 1}, summary
        assert "<root> (Sequential) wraps the old model, now 0" in summary
        assert "\n0 (Sequential) unwrapped: the old 0.0, 0.1, 0.2, 0.3" in summary, summary
        assert "\n1.0 (SELU) moved to 0.4" in summary, summary


def test_a_stage_wrapped_alone_as_a_layer_in_it_is_copied_is_one_wrap_and_an_insert() -> None:
    """A stage put in a Sequential of its own (`model[1] = nn.Sequential(model[1])`) as a
    copy of one of its layers is put after it. No pass pairs the stage with itself (its
    calls changed) and the wrapper took its path: the first reading paired the stage with
    the wrapper and said `1 wrap, 4 calls inserted, 3 calls removed`. The stage paired with
    the wrapper's only call is now read too (`level_readings.level_readings`)."""
    torch.manual_seed(0)
    stage = nn.Sequential(nn.Mish(), nn.Linear(8, 8), nn.CELU(), nn.Linear(8, 8))
    old = nn.Sequential(
        nn.Sequential(nn.ReLU6(), nn.Hardswish()),
        stage,
        nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)),
        nn.Sequential(nn.Hardsigmoid(), nn.GELU()),
    )
    inputs = torch.randn(2, 8)
    before = trace_forward(old, inputs)
    stage.insert(3, copy.deepcopy(stage[2]))
    old[1] = nn.Sequential(stage)
    after = trace_forward(old, inputs)
    # The oracle: the stage itself is now the wrapper's only module.
    assert next(path for path, module in old.named_modules() if module is stage) == "1.0"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "inserted": 1}, summary
        assert summary.splitlines()[1].startswith("1 (Sequential) wraps the old 1, now 1.0")
        assert "1 call inserted: 1.0.3 (CELU)" in summary, summary


def _names_by_identity(model: nn.Module) -> dict[int, str]:
    """Each module's object -> its name in `model` (`<root>` for the model)."""
    return {id(module): name or "<root>" for name, module in model.named_modules()}


def _paired_names(difference: TraceDiff) -> dict[str, str]:
    """A diff's pairs, old call's name -> new call's name (its paths, or without names the
    lines it names calls by)."""
    old_names = difference.old_names or difference.old_lines
    new_names = difference.new_names or difference.new_lines
    return {old_names[i].name: new_names[j].name for i, j in difference.pairs}


def test_a_layer_moved_into_the_next_stage_beside_a_layer_wrapped_there_is_a_move_and_a_wrap() -> (
    None
):
    """The Mish moved from stage 0 to the start of stage 1, whose Linear was wrapped. Before,
    `1 call type changed, 2 calls inserted, 1 call removed, ..., 1 call parameters changed`:
    the Linear paired with the Mish at its place (`Linear -> Mish at 1.0`), the wrapper
    inserted and the Mish removed. Read again with each paired with the call of its class
    that no call of that class paired with, the diff says one move and one wrap."""
    torch.manual_seed(0)
    mish, linear, softsign, hardtanh = nn.Mish(), nn.Linear(8, 8), nn.Softsign(), nn.Hardtanh()
    first, second = nn.Sequential(mish, softsign), nn.Sequential(linear, hardtanh)
    model = nn.Sequential(first, second)
    inputs = torch.randn(2, 8)
    before, old_names = trace_forward(model, inputs), _names_by_identity(model)
    del first[0]
    second[0] = nn.Sequential(linear)
    second.insert(0, mish)
    after, new_names = trace_forward(model, inputs), _names_by_identity(model)
    # The oracle: where each old module is now, by the modules themselves.
    truth = {old_names[key]: new_names[key] for key in old_names}
    assert (truth["0.0"], truth["1.0"], truth["1.1"]) == ("1.0", "1.1.0", "1.2")

    named = before.diff(after)
    assert named.explained_counts() == {"wrapped": 1, "moved": 1, "renamed": 2}, named.summary()
    assert "0.0 (Mish) moved to 1.0" in named.summary()
    assert "1.1 (Sequential) wraps the old 1.0, now 1.1.0" in named.summary()
    assert _paired_names(named) == truth
    free = structure_diff(before, after, ignore=("paths",))
    assert free.explained_counts() == {"wrapped": 1, "moved": 1}, free.summary()
    assert _paired_names(free) == truth


def test_a_stage_copied_before_the_next_which_became_a_subclass_is_one_insert_and_a_type_change() -> (
    None
):
    """Stage 0 copied as stage 1, and the old stage 1 now a subclass at 2. Before, `2 calls
    type changed, 4 calls inserted, 1 call removed, 1 call renamed, 1 call parameters
    changed`: the old stage 1 paired with the copy by its path, its Mish and Linear read as
    changed into the copy's ELU and SELU. Read again with the Mish paired with the Mish, the
    diff says a copy inserted and the stage's class changed."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.ELU(), nn.SELU())
    second = nn.Sequential(nn.Mish(), nn.Linear(8, 8), nn.Tanh())
    old = nn.Sequential(first, second, nn.ReLU6())
    new = nn.Sequential(first, copy.deepcopy(first), Stage(*second), old[2])
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    # The oracle: the old stage 1's layers and the ReLU6, by the modules themselves.
    old_names, new_names = _names_by_identity(old), _names_by_identity(new)
    truth = {old_names[id(layer)]: new_names[id(layer)] for layer in (*second, old[2])}
    assert truth == {"1.0": "2.0", "1.1": "2.1", "1.2": "2.2", "2": "3"}

    named = before.diff(after)
    counts = {"type changed": 1, "inserted": 3}
    assert named.explained_counts() == {**counts, "renamed": 2}, named.summary()
    assert "type changed at 2: Sequential -> Stage" in named.summary()
    free = structure_diff(before, after, ignore=("paths",))
    assert free.explained_counts() == counts, free.summary()
    for difference in (named, free):
        pairs = _paired_names(difference)
        assert {old: pairs.get(old) for old in truth} == truth, difference.summary()
        assert pairs.get("1") == "2", difference.summary()


def test_a_stage_made_a_subclass_beside_a_look_alike_that_lost_a_layer_is_no_swap() -> None:
    """Stage 0 made a subclass, and stage 2, like it but for a last layer, lost that layer.
    Before, `1 move to another parent, 1 swap, 2 calls inserted, 3 calls removed`: the old
    stage 0 paired with the new stage 2, which holds the same calls, and so read as swapped
    with the LogSigmoid. Read again with it paired with the subclass beside its partner,
    which holds what it holds, the diff says one type change and one removal."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    third = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Softsign())
    old = nn.Sequential(first, nn.LogSigmoid(), third)
    new = nn.Sequential(Stage(*first), old[1], nn.Sequential(third[0], third[1]))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    # The oracle: every layer kept, by the modules themselves.
    old_names, new_names = _names_by_identity(old), _names_by_identity(new)
    layers = (*first, old[1], third[0], third[1])
    truth = {old_names[id(layer)]: new_names[id(layer)] for layer in layers}
    assert truth == {"0.0": "0.0", "0.1": "0.1", "1": "1", "2.0": "2.0", "2.1": "2.1"}

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"type changed": 1, "removed": 1}, summary
        assert "type changed at 0: Sequential -> Stage" in summary
        assert [change.old.path for change in difference.of_kind("removed") if change.old] == [
            "2.2"
        ]
        pairs = _paired_names(difference)
        assert {old: pairs.get(old) for old in truth} == truth, summary


def test_a_depthwise_block_removed_from_mobilenet_leaves_the_projection_unchanged() -> None:
    """MobileNetV3's block 2 without its depthwise convolution block: the projection after it
    is now `features.2.block.1`, the depthwise block's path. Before, `4 calls removed, ...,
    2 calls settings changed, 2 calls parameters changed`: the depthwise block paired with
    the projection by its path, its convolution read as changed into the projection's, and
    the projection removed. Read again with the projection paired with the unpaired block
    of its classes and settings, the diff says the block removed, and no setting changed."""
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small().eval()
    image = torch.randn(1, 3, 32, 32)
    before, old_names = trace_forward(model, image), _names_by_identity(model)
    projection = model.features[2].block[2]
    del model.features[2].block[1]
    after, new_names = trace_forward(model, image), _names_by_identity(model)
    # The oracle: the projection, by the module itself.
    assert (old_names[id(projection)], new_names[id(projection)]) == (
        "features.2.block.2",
        "features.2.block.1",
    )

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        counts = difference.explained_counts()
        assert counts["removed"] == 4, summary
        for kind in ("settings changed", "parameters changed", "type changed", "swapped"):
            assert kind not in counts, summary
        removed = {change.old.path for change in difference.of_kind("removed") if change.old}
        assert removed == {f"features.2.block.1{inside}" for inside in ("", ".0", ".1", ".2")}
        pairs = _paired_names(difference)
        assert pairs["features.2.block.2"] == "features.2.block.1", summary
        assert pairs["features.2.block.2.0"] == "features.2.block.1.0", summary


def test_a_layer_moved_into_the_first_stage_as_the_model_is_wrapped_whole_is_one_move() -> None:
    """The last layer moved into the first stage, and the model wrapped whole: `1 wrap, 1
    move`. Without names, the model wrapped twice with its first stage flattened (`<root>
    and 0 wrap the old model`, `0 unwrapped`) states as many changes and moves none, but
    hides the layer run before the stage's last block: a stage wrapped alone as its calls
    changed is read as the wrapper's only call, the model's wraps are the model readings'."""
    torch.manual_seed(0)
    moved = nn.Hardtanh()
    first = nn.Sequential(
        nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)),
        nn.Linear(8, 8),
        nn.Sequential(nn.ReLU6(), nn.ReLU(), nn.ELU()),
    )
    model = nn.Sequential(first, moved)
    inputs = torch.randn(2, 8)
    before = trace_forward(model, inputs)
    del model[1]
    first.insert(2, moved)
    new = nn.Sequential(model)
    after = trace_forward(new, inputs)
    assert next(name for name, module in new.named_modules() if module is moved) == "0.0.2"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1, "moved": 1}, summary
        assert "<root> (Sequential) wraps the old model, now 0" in summary
        assert "1 (Hardtanh) moved to 0.0.2" in summary


def test_a_layer_without_settings_moved_to_another_stage_is_one_move() -> None:
    """Fuzz, stated changes against the refactor's own (the identity's) reading: a Sigmoid
    taken out of one stage and put at the end of another read as `1 call inserted, 1 call
    removed`, two changes where one was made. Only a layer with settings or tensors was
    moved across parents; a layer without them, the one of its class and shapes that went
    and came, is moved too, where the stage it now runs in is paired (a layer of a block
    removed whole and of one inserted whole is not)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Sequential(nn.Linear(8, 8), nn.Sigmoid(), nn.Tanh()),
        nn.Sequential(nn.Linear(8, 8), nn.ReLU()),
    )
    inputs = torch.randn(2, 8)
    before = trace_forward(model, inputs)
    moved = model[0][1]
    del model[0][1]
    model[1].append(moved)
    after = trace_forward(model, inputs)
    assert next(name for name, module in model.named_modules() if module is moved) == "1.2"

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.explained_counts() == {"moved": 1, "renamed": 1}, named.summary()
    assert name_free.explained_counts() == {"moved": 1}, name_free.summary()  # names ignored
    for difference in (named, name_free):
        assert "0.1 (Sigmoid) moved to 1.2" in difference.summary(), difference.summary()


def test_a_layer_removed_beside_its_neighbour_wrapped_alone_is_one_wrap_and_one_removal() -> None:
    """Fuzz, stated changes against the refactor's own reading (seeds 525 and 912): a
    LogSigmoid removed and the Softsign after it wrapped in a Sequential of its own read as
    `2 calls inserted, 2 calls removed`: the wrapper held no call paired yet, so nothing
    placed it. The calls of a wrapper that holds none paired are paired with the one run of
    calls of their classes left unpaired where the wrapper stands."""
    torch.manual_seed(0)
    old = nn.Sequential(
        nn.Linear(8, 8), nn.Sequential(nn.LogSigmoid(), nn.Softsign(), nn.Hardtanh())
    )
    new = nn.Sequential(old[0], nn.Sequential(nn.Sequential(old[1][1]), old[1][2]))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    assert _paths_by_identity(old, new)["1.1"] == "1.0.0"

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.explained_counts() == {"wrapped": 1, "removed": 1, "renamed": 1}, named.summary()
    assert name_free.explained_counts() == {"wrapped": 1, "removed": 1}, name_free.summary()
    for difference in (named, name_free):
        summary = difference.summary()
        assert "1.0 (Sequential) wraps the old 1.1, now 1.0.0" in summary, summary
        assert "1 call removed: 1.0 (LogSigmoid)" in summary, summary


def test_a_layer_moved_out_of_a_stage_then_removed_is_one_move_without_names_too() -> None:
    """Fuzz, stated changes (seed 411): a Sigmoid moved out of a stage into the next, and
    the stage it left removed. Named, its path pairs it; name-free it read as a Sigmoid
    inserted and the stage removed with both its calls, one change more: a layer without
    settings was moved only between stages that both stay. The stage it goes to staying is
    enough: the one it left may be gone."""
    torch.manual_seed(0)
    old = nn.Sequential(nn.Sequential(nn.Tanh(), nn.Sigmoid()), nn.Sequential(nn.Linear(8, 8)))
    new = nn.Sequential(nn.Sequential(old[1][0], old[0][1]))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    assert _paths_by_identity(old, new)["0.1"] == "0.1"

    name_free = structure_diff(before, after, ignore=("paths",))

    assert name_free.explained_counts() == {"moved": 1, "removed": 2}, name_free.summary()
    assert "0.1 (Sigmoid) moved into 0" in name_free.summary(), name_free.summary()
    assert before.diff(after).explained_counts() == {"moved": 1, "renamed": 1, "removed": 2}


def test_a_stage_moved_to_the_end_of_its_sibling_made_a_subclass_is_a_move_not_a_wrap() -> None:
    """Fuzz, stated changes against the refactor's own reading (seed 549): stage A moved to
    the end of its sibling B, and the stage that held both made a `Stage` of B alone, read
    `1 (Stage) wraps the old 1, now 1.0` and `1.1 (Sequential) unwrapped: the old 1.1.0,
    1.1.1 are now 1.0.0, 1.0.1`, which hides that ReLU6 and Tanh now run before A: a wrap
    or an unwrap keeps the order of the calls it holds. A call run out of the order it had
    (its parent in order) is held by neither, and is said moved."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Hardsigmoid(), nn.Hardswish())
    second = nn.Sequential(nn.ReLU6(), nn.Tanh())
    old = nn.Sequential(nn.Linear(8, 8), nn.Sequential(first, second))
    new = nn.Sequential(old[0], Stage(nn.Sequential(*second, first)))
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("1.0", "1.1", "1.1.0", "1.1.1")] == [
        "1.0.2",
        None,
        "1.0.0",
        "1.0.1",
    ]
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    counts = {"moved": 1, "type changed": 1}
    assert named.explained_counts() == {**counts, "renamed": 1}, named.summary()
    assert name_free.explained_counts() == counts, name_free.summary()
    for difference in (named, name_free):
        summary = difference.summary()
        assert "1.0 (Sequential, with 2 nested calls) moved to 1.0.2" in summary, summary
        assert "type changed at 1: Sequential -> Stage" in summary, summary
        assert "wraps" not in summary, summary
        assert "unwrapped" not in summary, summary


def test_a_layer_moved_to_another_stage_beside_its_look_alike_is_read_as_the_one_moved() -> None:
    """Fuzz, stated changes against the refactor's own reading (seed 348): of two look-alike
    Linears apart, the first moved to the end of the next stage and the ReLU between them
    wrapped, the named reading said `0.2 (Linear) moved to 1.2` and the first renamed to
    0.1. Read again with the moved Linear's sibling just like it, which stayed, taken as the
    one moved, the diff says the first moved, as the name-free one did."""
    torch.manual_seed(0)
    old = nn.Sequential(
        nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)),
        nn.Sequential(nn.Tanh(), nn.Linear(8, 8)),
    )
    moved, relu, kept = old[0]
    new = nn.Sequential(nn.Sequential(nn.Sequential(relu), kept), nn.Sequential(*old[1], moved))
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0.0", "0.1", "0.2")] == ["1.2", "0.0.0", "0.1"]
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.explained_counts() == {"wrapped": 1, "moved": 1, "renamed": 1}, named.summary()
    assert name_free.explained_counts() == {"wrapped": 1, "moved": 1}, name_free.summary()
    for difference in (named, name_free):
        summary = difference.summary()
        assert "0.0 (Linear) moved to 1.2" in summary, summary
        assert "0.0 (Sequential) wraps the old 0.1, now 0.0.0" in summary, summary
    assert "1 call renamed: 0.2 (Linear) -> 0.1" in named.summary(), named.summary()


def test_two_layers_that_took_each_others_places_in_blocks_apart_are_two_moves() -> None:
    """Real-model fuzz, stated changes and pairs against the identity (decoder seed 14): the
    GELU of block 0's MLP and the Linear of block 2's mixing took each other's places. Named,
    it read as the mixing Linear changed into a GELU, a Linear inserted and a GELU removed
    (and the Linear's parameters removed); name-free the same. The calls of the other class
    are looked for near the type change only, two levels up: in another block there was none.
    The one call of its class and facts that the reading leaves unpaired anywhere is its
    counterpart too."""
    torch.manual_seed(0)

    def block() -> nn.Sequential:
        mix = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        return nn.Sequential(mix, nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)))

    old = nn.Sequential(block(), block(), block())
    (first_mix, (widen, gelu, narrow)), (mixing, tanh) = old[0], old[2][0]
    new = nn.Sequential(
        nn.Sequential(first_mix, nn.Sequential(widen, narrow, mixing)),
        old[1],
        nn.Sequential(nn.Sequential(gelu, tanh), old[2][1]),
    )
    now = _paths_by_identity(old, new)
    assert [now[path] for path in ("0.1.1", "0.1.2", "2.0.0")] == ["2.0.0", "0.1.1", "0.1.2"]
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    # The GELU takes the mixing's 8 features where it took the MLP's 16: a true change.
    moved = {"moved": 2, "input changed": 1}
    assert named.explained_counts() == {**moved, "renamed": 1}, named.summary()
    assert name_free.explained_counts() == moved, name_free.summary()  # names ignored
    for difference in (named, name_free):
        summary = difference.summary()
        assert "0.1.1 (GELU) moved to 2.0.0" in summary, summary
        assert "2.0.0 (Linear) moved to 0.1.2" in summary, summary


def test_a_stage_moved_into_another_as_one_of_its_layers_is_removed_is_a_move_and_a_removal() -> (
    None
):
    """Fuzz, stated changes against the refactor's own reading (seed 803): stage 1 moved to
    the start of stage 0 and its Linear removed read as `2 calls inserted` (the stage with
    its Tanhshrink) and `3 calls removed` (the stage with both). A stage removed whole and
    one of its class inserted whole elsewhere, holding what it held but one call, is that
    stage moved, where it is the one such pair."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Sequential(nn.Hardtanh(), nn.Linear(8, 8)),
        nn.Sequential(nn.Tanhshrink(), nn.Linear(8, 8)),
        nn.Softsign(),
    )
    paths_before = {id(module): path for path, module in model.named_modules()}
    inputs = torch.randn(2, 8)
    before = trace_forward(model, inputs)
    stage = model[1]
    del stage[1]
    del model[1]
    model[0].insert(0, stage)
    now = {paths_before[id(module)]: path for path, module in model.named_modules()}
    assert (now["1"], now["1.0"], now["0.0"]) == ("0.0", "0.0.0", "0.1")
    after = trace_forward(model, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    assert named.explained_counts() == {"moved": 1, "removed": 1, "renamed": 3}, named.summary()
    assert name_free.explained_counts() == {"moved": 1, "removed": 1}, name_free.summary()
    for difference in (named, name_free):
        summary = difference.summary()
        assert "1 (Sequential, with 2 nested calls) moved to 0.0" in summary, summary
        assert "1 call removed: 1.1 (Linear)" in summary, summary


def test_a_stage_flattened_beside_a_copy_of_the_stage_that_held_it_is_not_moved_into_it() -> None:
    """Fuzz, pairs against the identity (seed 674): a stage that held a stage and a SELU had
    its inner stage flattened and was then copied after itself. The inner stage, gone, holds
    what the copy holds but the SELU; its calls are paired where they run now, in the stage
    flattened, so it did not move into the copy: one unwrap and the copy inserted."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Softsign(), nn.Linear(8, 8), nn.LeakyReLU())
    old = nn.Sequential(nn.Linear(8, 8), nn.Sequential(inner, nn.SELU()))
    flattened = nn.Sequential(*inner, old[1][1])
    new = nn.Sequential(old[0], flattened, copy.deepcopy(flattened))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))

    for difference in (named, name_free):
        summary = difference.summary()
        old_names = difference.old_names or difference.old_lines
        new_names = difference.new_names or difference.new_lines
        pairs = {old_names[i].name: new_names[j].name for i, j in difference.pairs}
        assert pairs.get("1.0") is None, summary  # the inner stage went: it is in no copy
        assert "moved" not in summary, summary
        assert difference.explained_counts()["unwrapped"] == 1, summary


def test_a_block_copied_before_itself_after_a_layer_in_it_was_wrapped_is_one_wrap_and_a_copy() -> (
    None
):
    """Of four look-alike blocks, block 2's first Linear wrapped in a Sequential, then block
    2 copied before itself. Name-free, the three blocks left as they were are identical
    subtrees, three of four on one side: none paired there (which went cannot be told from
    their count alone), and the blocks then paired by place, so block 3 paired with the
    second changed block and read `2 wraps, 5 calls inserted` (the wrap in both changed
    blocks, block 3 inserted). The block left out (block 2) is what puts every later block
    one place on, so the identical blocks pair across it (`pairs_by_gaps`), as the named
    comparison pairs them by name: one wrap, and the copy inserted."""
    torch.manual_seed(0)

    def block() -> nn.Sequential:
        return nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))

    model = nn.Sequential(*(block() for _ in range(4)))
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before = trace_forward(model, inputs)
        old_blocks = list(model)
        old_blocks[2][1] = nn.Sequential(old_blocks[2][1])
        model = nn.Sequential(*old_blocks[:2], copy.deepcopy(old_blocks[2]), *old_blocks[2:])
        after = trace_forward(model, inputs)
    # The oracle: the last block is the old block 3, one place on.
    assert next(name for name, module in model.named_children() if module is old_blocks[3]) == "4"

    named, name_free = before.diff(after), structure_diff(before, after, ignore=("paths",))
    # Named, block 3 renamed to 4 is one more line; name-free, a new name is no change.
    assert named.explained_counts() == {"wrapped": 1, "renamed": 1, "inserted": 6}
    assert name_free.explained_counts() == {"wrapped": 1, "inserted": 6}, name_free.summary()
    for difference in (named, name_free):
        summary = difference.summary()
        assert _paired_names(difference)["3"] == "4", summary
        assert "2.1 (Sequential) wraps the old 2.1, now 2.1.0" in summary, summary
        assert "6 calls inserted: one of 2, 3 (Sequential look-alikes, with 5 nested" in summary


def test_a_layer_moved_into_a_stage_renumbered_by_a_flatten_does_not_wrap_the_next_layer() -> None:
    """A Hardsigmoid moved from stage `0.0` in between the two Linears of stage `0.2`, then
    `0.0` flattened: every later sibling moves one place on, so stage `0.2` is now `0.3`,
    the path of the Linear after it. The Linear `0.3` read as wrapped into the stage that
    took its path (`0.3 (Linear) moved to 0.3.0`), a Linear inserted at `0.4` and one of the
    stage's removed: 5 changes where the refactor made 2. A call is not read as wrapped in a
    new call that an old sibling of that call's class, whose calls it all holds, can be
    (`held_by_a_renumbered_sibling`)."""
    torch.manual_seed(0)
    first = nn.Sequential(nn.Sigmoid(), nn.Hardsigmoid(), nn.Linear(8, 8))
    stage = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    model = nn.Sequential(nn.Sequential(first, nn.Softsign(), stage, nn.Linear(8, 8)), nn.SiLU())
    paths_before = _object_paths(model)
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before = trace_forward(model, inputs)
        hardsigmoid = first[1]
        del first[1]
        stage.insert(1, hardsigmoid)
        _hold_in_place(model[0], [*first, *list(model[0])[1:]])  # `first` flattened
        after = trace_forward(model, inputs)
    # The oracle: each new path -> the old path of its very module.
    was = _was(model, paths_before)
    assert (was["0.3"], was["0.4"], was["0.3.1"]) == ("0.2", "0.3", "0.0.1")

    difference = before.diff(after)
    summary = difference.summary()
    assert difference.explained_counts() == {"unwrapped": 1, "moved": 1, "renamed": 4}, summary
    assert "0.0.1 (Hardsigmoid) moved to 0.3.1" in summary, summary
    paired = _paired_names(difference)
    assert {new: old for old, new in paired.items() if was[new] != old} == {}, summary


def test_a_stage_made_a_subclass_as_a_stage_before_it_is_flattened_is_a_type_change() -> None:
    """Stage `1.1` (two Linears and a SELU) made a `Stage`, then stage `1.0` before it
    flattened, which renumbers it `1.3`. Its Linears look like the Linears around it, so
    nothing paired inside it, and no pass paired a stage of another class whose calls were
    not paired: it read as `1.1 (Sequential, with 2 nested calls)` removed, `1.3 (Stage,
    with 2 nested calls)` inserted and its SELU moved between them: 8 calls changed,
    where the refactor's own reading changes 2. Two calls of other classes that hold the same calls, none paired yet,
    the one such pair, pair (`container_pairs._pair_made_subclasses`)."""
    torch.manual_seed(0)
    flattened = nn.Sequential(
        nn.Softsign(),
        nn.Sequential(nn.Mish(), nn.ELU(), nn.Linear(8, 8)),
        nn.Sequential(nn.CELU(), nn.LogSigmoid()),
    )
    stage = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.SELU())
    body = nn.Sequential(flattened, stage, nn.Linear(8, 8), nn.GELU())
    model = nn.Sequential(nn.Tanhshrink(), body)
    paths_before = _object_paths(model)
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before = trace_forward(model, inputs)
        _hold_in_place(body, [*flattened, Stage(*stage), *list(body)[2:]])
        after = trace_forward(model, inputs)
    # The oracle: each new path -> the old path of its very module (None: the new Stage).
    was = _was(model, paths_before)
    assert (was["1.3"], was["1.3.0"], was["1.3.2"], was["1.4"]) == (None, "1.1.0", "1.1.2", "1.2")

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert _explained_but_renames(difference) == {"unwrapped": 1, "type changed": 1}, summary
        assert "type changed at 1.3: Sequential -> Stage" in summary, summary
        paired = _paired_names(difference)
        wrong = {new: old for old, new in paired.items() if was[new] not in (old, None)}
        assert (wrong, paired["1.1"]) == ({}, "1.3"), summary


def test_the_calls_of_a_stage_wrapped_inside_it_are_a_wrap_not_its_class_changed() -> None:
    """A `Stage`'s two calls put in a Sequential inside it. The new Sequential holds the
    same calls as the old Stage, none paired yet, and is of another class; it is still the
    wrapper, alone in the stage, not the stage with its class changed: the bound of
    `container_pairs._pair_made_subclasses`."""
    torch.manual_seed(0)
    stage = Stage(nn.Linear(8, 8), nn.ReLU())
    model = nn.Sequential(nn.Linear(8, 8), stage, nn.Linear(8, 8))
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before = trace_forward(model, inputs)
        _hold_in_place(stage, [nn.Sequential(*stage)])
        after = trace_forward(model, inputs)
    # The oracle: the stage is itself still, at its path, and holds the new Sequential.
    assert model[1] is stage
    assert type(stage[0]) is nn.Sequential

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert difference.explained_counts() == {"wrapped": 1}, summary
        assert summary.splitlines()[1].startswith("1.0 (Sequential) wraps the old 1.0, 1.1")
        assert _paired_names(difference)["1"] == "1", summary


def test_a_layer_moved_as_a_stage_holding_its_look_alike_is_removed_is_a_move_and_a_removal() -> (
    None
):
    """Stage 0's Linear moved to the start of stage 1, and stage 2, which holds a Linear
    just like it, removed. Two Linears went and one came, so which moved looked untold:
    it read as the Linear removed, one inserted and the stage removed. The one that went
    from a stage that stays is the one that moved (the other went with its stage, removed
    whole), the smaller reading: a move and the stage removed."""
    torch.manual_seed(0)
    linear = nn.Linear(8, 8)
    first, second = nn.Sequential(linear, nn.LeakyReLU()), nn.Sequential(nn.ReLU(), nn.Tanh())
    model = nn.Sequential(first, second, nn.Sequential(nn.Linear(8, 8), nn.Softsign()))
    paths_before = _object_paths(model)
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before = trace_forward(model, inputs)
        del first[0]
        second.insert(0, linear)
        del model[2]
        after = trace_forward(model, inputs)
    # The oracle: each new path -> the old path of its very module.
    was = _was(model, paths_before)
    assert was["1.0"] == "0.0"

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert _explained_but_renames(difference) == {"moved": 1, "removed": 3}, summary
        assert "0.0 (Linear) moved to 1.0" in summary, summary
        assert "3 calls removed: 2 (Sequential, with 2 nested calls)" in summary, summary
        paired = _paired_names(difference)
        assert {new: old for old, new in paired.items() if was[new] != old} == {}, summary


def test_a_stage_whose_block_was_made_a_subclass_stays_itself_name_free_beside_a_flatten() -> None:
    """Stage `2`'s first block made a `Stage` as stage `1` before it was flattened. Name-free,
    the block paired with its `Stage` only after the stages around them had paired by the
    calls they share, and stage `2` shared too few then (its SELU and other block): it read
    as stage `2` removed, a stage inserted and its three calls moved into it. The blocks of
    other classes that hold the same calls pair first, so the stage holds enough of its
    calls' partners to pair: the unwrap and the type change."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8), nn.Hardswish())
    tail = nn.Sequential(nn.Tanh(), nn.ReLU6(), nn.Softplus(), nn.Softplus())
    stage = nn.Sequential(block, nn.SELU(), tail)
    flattened = nn.Sequential(nn.Sequential(nn.Softsign(), nn.Linear(8, 8)), nn.Linear(8, 8))
    model = nn.Sequential(nn.Sequential(nn.CELU(), nn.Linear(8, 8)), flattened, stage)
    paths_before = _object_paths(model)
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before = trace_forward(model, inputs)
        stage[0] = Stage(*block)
        _hold_in_place(model, [model[0], *flattened, stage])
        after = trace_forward(model, inputs)
    # The oracle: each new path -> the old path of its very module (None: the new Stage).
    was = _was(model, paths_before)
    assert (was["3"], was["3.0"], was["3.0.0"]) == ("2", None, "2.0.0")

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert _explained_but_renames(difference) == {"unwrapped": 1, "type changed": 1}, summary
        paired = _paired_names(difference)
        wrong = {new: old for old, new in paired.items() if was[new] not in (old, None)}
        assert (wrong, paired["2"], paired["2.0"]) == ({}, "3", "3.0"), summary


def test_a_stage_copied_before_itself_with_the_copys_calls_wrapped_is_one_insertion_name_free() -> (
    None
):
    """Stage `0` copied before itself and the copy's calls put in a Sequential inside it.
    Without names, the stage had two identical subtrees to pair with, itself (now `1`) and
    the copy's wrapped calls (`0.0`), under parents not yet paired, so neither paired then:
    it read as the stage wrapped in the copy and itself inserted (`1 wrap, 9 calls
    inserted`). Of one identical subtree and several, the one as deep as it was pairs: the
    copy inserted, one change, as the named comparison reads it."""
    torch.manual_seed(0)
    stage = nn.Sequential(
        nn.Linear(8, 8),
        nn.Sequential(nn.SELU(), nn.Softsign()),
        nn.LogSigmoid(),
        nn.Sequential(nn.Tanhshrink(), nn.CELU()),
    )
    model = nn.Sequential(stage, nn.Linear(8, 8))
    paths_before = _object_paths(model)
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before = trace_forward(model, inputs)
        twin = copy.deepcopy(stage)
        _hold_in_place(twin, [nn.Sequential(*twin)])
        _hold_in_place(model, [twin, stage, model[1]])
        after = trace_forward(model, inputs)
    # The oracle: each new path -> the old path of its very module (None: the copy's).
    was = _was(model, paths_before)
    assert (was["0"], was["0.0.0"], was["1"], was["1.0"]) == (None, None, "0", "0.0")

    for difference in (before.diff(after), structure_diff(before, after, ignore=("paths",))):
        summary = difference.summary()
        assert _explained_but_renames(difference) == {"inserted": 10}, summary
        assert "10 calls inserted: 0 (Sequential, with 9 nested calls)" in summary, summary
        paired = _paired_names(difference)
        assert {new: old for old, new in paired.items() if was[new] != old} == {}, summary
