"""Recording rules, each on a small purpose-built model."""

from __future__ import annotations

import copy
import dataclasses
import gc
import inspect
import threading
import typing
import warnings

import pytest
import torch
from torch import nn

from pytest_fwdorder import (
    Call,
    EmptyTraceError,
    FwdOrderWarning,
    Trace,
    record,
    trace_forward,
)
from pytest_fwdorder.calls.records import RenderOptions
from pytest_fwdorder.recording import model_index as model_index_module
from pytest_fwdorder.recording import recorder as recorder_module
from pytest_fwdorder.recording import torch_call_frames


class SharedActivation(nn.Module):
    """conv -> relu -> linear -> relu: one ReLU instance, called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.conv(x)).mean(dim=(2, 3))
        return self.relu(self.head(x))


def test_calls_come_in_execution_order_with_parents_first() -> None:
    trace = trace_forward(SharedActivation(), torch.randn(1, 3, 8, 8))

    assert [(call.path, call.module_type, call.depth) for call in trace] == [
        ("", "SharedActivation", 0),
        ("conv", "Conv2d", 1),
        ("relu", "ReLU", 1),
        ("head", "Linear", 1),
        ("relu", "ReLU", 1),
    ]
    assert all(call.parent is trace[0] for call in trace[1:])
    assert trace[0].parent is None


def test_reused_module_gets_one_record_per_call_numbered_from_one() -> None:
    trace = trace_forward(SharedActivation(), torch.randn(1, 3, 8, 8))

    relu_calls = trace.find("relu")
    assert [call.nth for call in relu_calls] == [1, 2]
    assert trace.counts() == {"": 1, "conv": 1, "relu": 2, "head": 1}


def test_shapes_and_dtypes_of_inputs_and_outputs_are_recorded() -> None:
    trace = trace_forward(SharedActivation(), torch.randn(2, 3, 8, 8))

    conv = trace.find("conv")[0]
    assert conv.input_shapes == [(2, 3, 8, 8)]
    assert conv.output_shapes == [(2, 4, 8, 8)]
    assert conv.output_tensors[0].dtype == "f32"


def test_leaves_are_calls_without_module_calls_of_their_own() -> None:
    trace = trace_forward(SharedActivation(), torch.randn(1, 3, 8, 8))

    assert [call.path for call in trace.leaves()] == ["conv", "relu", "head", "relu"]


class Recursive(nn.Module):
    """Calls itself `depth` times before applying its linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        if depth > 0:
            x = self(x, depth=depth - 1)
        return self.linear(x)


def test_reentrant_calls_are_each_recorded_and_nested() -> None:
    trace = trace_forward(Recursive(), torch.randn(1, 2))

    assert [(call.path, call.nth, call.depth) for call in trace] == [
        ("", 1, 0),
        ("", 2, 1),
        ("", 3, 2),
        ("linear", 1, 3),
        ("linear", 2, 2),
        ("linear", 3, 1),
    ]
    assert trace[1].kwargs[0][0] == "depth"


class SharedUnderTwoNames(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder_embedding = nn.Embedding(10, 4)
        self.decoder_embedding = self.encoder_embedding

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.encoder_embedding(tokens) + self.decoder_embedding(tokens)


def test_module_shared_under_two_names_uses_its_first_name_and_keeps_the_other_as_alias() -> None:
    trace = trace_forward(SharedUnderTwoNames(), torch.tensor([[1, 2]]))

    assert [(call.path, call.nth) for call in trace[1:]] == [
        ("encoder_embedding", 1),
        ("encoder_embedding", 2),
    ]
    assert trace.aliases == {"encoder_embedding": ("decoder_embedding",)}
    assert "#   encoder_embedding = decoder_embedding" in trace.render()


class PlainListBlocks(nn.Module):
    """The classic trap: blocks kept in a Python list are not registered."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = [nn.Linear(2, 2), nn.Linear(2, 2)]
        self.heads = {"main": nn.Linear(2, 1)}
        self.out = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.out(self.heads["main"](x))


def test_modules_in_a_plain_list_are_recorded_as_unregistered_under_their_attribute() -> None:
    with pytest.warns(FwdOrderWarning, match="own parameters but are not registered"):
        trace = trace_forward(PlainListBlocks(), torch.randn(1, 2))

    assert [(call.path, call.registered) for call in trace] == [
        ("", True),
        ("blocks[0]", False),
        ("blocks[1]", False),
        ("heads['main']", False),
        ("out", True),
    ]
    assert [call.path for call in trace.unregistered()] == [
        "blocks[0]",
        "blocks[1]",
        "heads['main']",
    ]
    assert "blocks[0]: Linear [unregistered] (f32[1,2]) -> f32[1,2]" in trace.render()


class BuildsModuleInForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.Tanh()(x)
        return nn.Tanh()(x)


def test_modules_created_inside_forward_get_distinct_stable_names() -> None:
    trace = trace_forward(BuildsModuleInForward(), torch.randn(1, 2))

    assert [call.path for call in trace[1:]] == ["<Tanh>", "<Tanh>2"]
    assert not any(call.registered for call in trace[1:])


class Unused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(2, 2)
        self.spare = nn.Linear(2, 2)
        self.container = nn.ModuleList([nn.ReLU()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.container[0](self.used(x))


def test_unused_lists_registered_modules_never_called_but_not_uncallable_containers() -> None:
    trace = trace_forward(Unused(), torch.randn(1, 2))

    assert trace.unused() == ["spare"]
    assert (
        "# registered but never called (1):\n#   spare: Linear | weight f32[2,2], bias f32[2]\n"
        in (trace.render())
    )


def scripted(module: nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        result: torch.jit.ScriptModule = torch.jit.script(module)
    return result


def test_a_scripted_submodule_is_one_call_marked_scripted() -> None:
    """Issue 8, defect 1: a TorchScript submodule inside a normal model crashed the recorder."""
    model = nn.Sequential(nn.Linear(4, 4), scripted(nn.Sequential(nn.Linear(4, 2), nn.ReLU())))

    trace = trace_forward(model, torch.randn(1, 4))

    assert [(call.path, call.module_type, call.scripted) for call in trace] == [
        ("", "Sequential", False),
        ("0", "Linear", False),
        ("1", "Sequential", True),
    ]
    assert "  1: Sequential [scripted] (f32[1,4]) -> f32[1,2]" in trace.render().splitlines()
    assert trace.unused() == []  # the scripted module's insides are not "never called"


def test_record_handles_a_scripted_submodule() -> None:
    """Issue 8, defect 1, in a `record` block."""
    model = nn.Sequential(nn.Linear(4, 4), scripted(nn.Linear(4, 2)))

    with record(model) as trace:
        model(torch.randn(1, 4))

    assert [call.path for call in trace] == ["", "0", "1"]


class KeepsAScriptedModuleInAList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = [scripted(nn.Linear(2, 2))]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.blocks[0](x)
        return result


def test_an_unregistered_scripted_module_is_one_call_and_its_state_is_left_alone() -> None:
    """Found reviewing 0.3.1: an unregistered TorchScript module failed the state capture."""
    model = KeepsAScriptedModuleInAList()
    weight = model.blocks[0].weight.clone()

    trace = trace_forward(model, torch.randn(1, 2))

    assert "  blocks[0]: Linear [unregistered] [scripted] (f32[1,2]) -> f32[1,2]" in (
        trace.render()
    )
    assert torch.equal(model.blocks[0].weight, weight)


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.squeeze = SqueezeInPlace()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.squeeze(x))


class SqueezeInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze_(0)


def test_inputs_are_described_before_the_module_changes_them_in_place() -> None:
    trace = trace_forward(InPlace(), torch.randn(1, 3))

    squeeze = trace.find("squeeze")[0]
    assert squeeze.input_shapes == [(1, 3)]
    assert squeeze.output_shapes == [(3,)]


class KeywordsAndNested(nn.Module):
    class Result(typing.NamedTuple):
        logits: torch.Tensor
        extra: None

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> object:
        features = self.inner(x, mask=mask, scale=0.5, mode="fast")
        return {"out": self.Result(features["a"], None), 3: (features["b"], [None])}


class Inner(nn.Module):
    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor, scale: float, mode: str
    ) -> dict[str, torch.Tensor]:
        return {"a": x * scale, "b": mask.long()}


def test_keyword_inputs_and_nested_outputs_are_described() -> None:
    trace = trace_forward(
        KeywordsAndNested(), torch.randn(2, 3), mask=torch.ones(2, 3, dtype=torch.bool)
    )

    lines = trace.render().splitlines()
    assert (
        "<root>: KeywordsAndNested (f32[2,3], mask=bool[2,3]) -> {'out': Result(logits=f32[2,3], extra=None), 3: (i64[2,3], [None])}"
        in lines
    )
    assert (
        "  inner: Inner (f32[2,3], mask=bool[2,3], scale=float, mode='fast') -> {'a': f32[2,3], 'b': i64[2,3]}"
        in lines
    )
    assert trace[0].input_shapes == [(2, 3), (2, 3)]
    assert trace[0].output_shapes == [(2, 3), (2, 3)]


class SqueezesItsKeyword(nn.Module):
    def forward(self, a: torch.Tensor, y: torch.Tensor, items: list[int]) -> torch.Tensor:
        y.squeeze_(0)
        items.append(1)
        return a


class CallsWithKeywords(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = SqueezesItsKeyword()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.inner(a, y=b, items=[])


def test_keyword_arguments_are_described_before_the_module_runs() -> None:
    """Issue 8, defect 6: keyword arguments were described after the module ran."""
    trace = trace_forward(CallsWithKeywords(), torch.ones(2), torch.ones(1, 4))

    assert "inner: SqueezesItsKeyword (f32[2], y=f32[1,4], items=[]) -> f32[2]" in trace.render()


class CallsThroughCallImpl(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = SqueezesItsKeyword()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.inner._call_impl(a, y=b, items=[])
        return result


def test_keywords_of_a_module_called_through_call_impl_are_described_before_it_runs() -> None:
    """Issue 8, defect 6, for keywords read from `_call_impl`'s own frame."""
    # Not the usual `module(...)` frames: the reader falls back to `_call_impl`'s own frame.
    trace = trace_forward(CallsThroughCallImpl(), torch.ones(2), torch.ones(1, 4))

    assert "inner: SqueezesItsKeyword (f32[2], y=f32[1,4], items=[]) -> f32[2]" in trace.render()


def test_this_torch_lays_out_call_impl_as_the_keyword_reader_expects() -> None:
    """Issue 8, defect 6: the frame layout the fix for it reads keywords from."""
    # If this fails, a torch release changed Module._call_impl: the recorder falls back to
    # per-module pre-hooks (correct, slower). Update torch_call_frames._keyword_frame_code
    # for the new layout.
    assert torch_call_frames.KEYWORD_FRAME_CODE is not None
    # The cheaper read, from `module(...)`'s own frame: without it keywords cost about 1 us
    # more per call, read from the frame above.
    assert torch_call_frames.WRAPPED_CALL_FRAME_CODE is nn.Module.__call__.__code__


def test_the_fallback_without_the_frame_layout_also_describes_keywords_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 8, defect 6, in the fallback for a torch without that frame layout."""
    monkeypatch.setattr(recorder_module, "KEYWORD_FRAME_CODE", None)
    model = CallsWithKeywords()

    trace = trace_forward(model, torch.ones(2), torch.ones(1, 4))

    assert "inner: SqueezesItsKeyword (f32[2], y=f32[1,4], items=[]) -> f32[2]" in trace.render()
    assert not model.inner._forward_pre_hooks  # the fallback's hooks are gone


@dataclasses.dataclass
class Output:
    hidden: torch.Tensor
    attention: tuple[torch.Tensor, ...]


class ReturnsUnusualValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gen = ReturnsGenerator()
        self.cycle = ReturnsCycle()
        self.deep = ReturnsDeep()
        self.data = ReturnsDataclass()
        self.opaque = ReturnsObject()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        list(self.gen(x))
        self.cycle(x)
        self.deep(x)
        self.data(x)
        self.opaque(x)
        return x


class ReturnsGenerator(nn.Module):
    def forward(self, x: torch.Tensor) -> typing.Iterator[torch.Tensor]:
        return (x for _ in range(2))


class ReturnsCycle(nn.Module):
    def forward(self, x: torch.Tensor) -> list[object]:
        loop: list[object] = [x]
        loop.append(loop)
        return loop


class ReturnsDeep(nn.Module):
    def forward(self, x: torch.Tensor) -> list[object]:
        value: list[object] = [x]
        for _ in range(500):
            value = [value]
        return value


class ReturnsDataclass(nn.Module):
    def forward(self, x: torch.Tensor) -> Output:
        return Output(x, (x, x))


class ReturnsObject(nn.Module):
    def forward(self, x: torch.Tensor) -> object:
        return threading.Lock()


def test_unsupported_and_hostile_outputs_are_described_by_type_never_crash() -> None:
    trace = trace_forward(ReturnsUnusualValues(), torch.randn(2))

    outputs = {
        call.path: line.split(" -> ", 1)[1]
        for call, line in zip(trace, trace.render().splitlines()[-6:], strict=True)
    }
    assert outputs["gen"] == "<generator>"
    assert outputs["cycle"] == "[f32[2], <cycle>]"
    assert outputs["deep"].startswith("[[[[")
    assert "..." in outputs["deep"]
    assert outputs["data"] == "Output(hidden=f32[2], attention=(f32[2], f32[2]))"
    assert outputs["opaque"] == "<lock>"


def test_the_model_is_left_bitwise_unchanged_after_a_train_mode_forward() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Dropout(0.5)).train()
    model[0].weight.requires_grad_(False)
    before = copy.deepcopy(model.state_dict())
    model[1].eval()  # a mixed-mode model: one submodule in eval

    trace_forward(model, torch.randn(8, 3) * 5 + 3)

    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert model.training
    assert not model[1].training
    assert model[2].training
    assert not model[0].weight.requires_grad
    assert model[0].bias.requires_grad


def test_the_random_state_is_put_back_so_dropout_does_not_shift_later_draws() -> None:
    model = nn.Sequential(nn.Dropout(0.5)).train()
    inputs = torch.randn(100)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)

    trace_forward(model, inputs)

    assert torch.equal(torch.rand(3), expected)


class SwitchesModes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.eval()
        torch.set_grad_enabled(False)
        self.linear.weight.requires_grad_(False)
        self.register_buffer("cache", torch.ones(1))
        return self.linear(x)


def test_flags_grad_mode_and_buffers_changed_by_forward_are_put_back() -> None:
    model = SwitchesModes().train()

    with torch.enable_grad():
        trace_forward(model, torch.randn(1, 2))
        assert torch.is_grad_enabled()

    assert model.training
    assert model.linear.weight.requires_grad
    assert "cache" not in dict(model.named_buffers())


class RewritesItself(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.register_buffer("counts", torch.zeros(2))
        self.note = "before"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.note = "after"
        self.extra = 1
        self.linear.weight = nn.Parameter(torch.zeros(2, 2))
        self.linear.bias = None
        self.counts = torch.ones(2)
        self.register_parameter("late", nn.Parameter(torch.ones(1)))
        return self.linear(x)


def _own_state(model: nn.Module) -> list[tuple[str, list[tuple[str, int]]]]:
    return [
        (kind, [(name, id(value)) for name, value in getattr(module, kind).items()])
        for module in model.modules()
        for kind in ("__dict__", "_parameters", "_buffers")
    ]


def test_attributes_parameters_and_buffers_forward_reassigns_or_adds_are_put_back() -> None:
    model = RewritesItself()
    before = _own_state(model)

    trace_forward(model, torch.randn(1, 2))

    assert _own_state(model) == before
    assert model.note == "before"
    assert torch.equal(model.counts, torch.zeros(2))


class RebindsItsDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.__dict__ = {**self.__dict__, "scale": 2.0, "cache": x}
        return x * self.scale


def test_a_module_dict_forward_replaces_is_put_back() -> None:
    model = RebindsItsDict()
    attributes = vars(model)

    trace_forward(model, torch.ones(2))

    assert vars(model) is attributes
    assert model.scale == 1.0
    assert "cache" not in vars(model)


def test_user_hooks_stay_and_none_of_ours_remain() -> None:
    model = SharedActivation()
    seen: list[str] = []
    handle = model.conv.register_forward_hook(lambda module, args, output: seen.append("hook"))
    global_hooks_before = _global_hook_count()

    trace_forward(model, torch.randn(1, 3, 8, 8))
    model(torch.randn(1, 3, 8, 8))

    assert seen == ["hook", "hook"]
    assert len(model.conv._forward_hooks) == 1
    assert _global_hook_count() == global_hooks_before
    handle.remove()


def _global_hook_count() -> int:
    from torch.nn.modules import module

    return len(module._global_forward_hooks) + len(module._global_forward_pre_hooks)


class FailsOnSecondCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 2:
            raise ValueError("second call is not allowed")
        return x


class CallsTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(2, 2)
        self.fragile = FailsOnSecondCall()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fragile(self.fragile(self.first(x)))


def test_an_exception_from_forward_propagates_unchanged_with_a_note_of_the_calls() -> None:
    model = CallsTwice()
    original = ValueError("placeholder")
    with pytest.raises(ValueError, match="second call is not allowed") as raised:
        trace_forward(model, torch.randn(1, 2))

    assert type(raised.value) is type(original)
    note = "\n".join(raised.value.__notes__)
    assert "forward raised after 4 recorded calls" in note
    assert "Raised in: fragile (FailsOnSecondCall) < <root> (CallsTwice)" in note
    assert "fragile FailsOnSecondCall #2  <- raised" in note
    assert _global_hook_count() == 0


class Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom")


def test_the_failure_note_counts_one_call_in_the_singular() -> None:
    """Issue 8, defect 18: the note read "after 1 recorded calls"."""
    with pytest.raises(ValueError, match="boom") as raised:
        trace_forward(Raises(), torch.ones(1))

    assert "forward raised after 1 recorded call." in raised.value.__notes__[0]


def test_calls_from_another_thread_are_never_recorded() -> None:
    model = SharedActivation()
    other_thread_ran = threading.Event()
    release = threading.Event()

    def other() -> None:
        release.wait(5)
        model(torch.randn(1, 3, 8, 8))
        other_thread_ran.set()

    worker = threading.Thread(target=other)
    worker.start()
    with record(model) as trace:
        release.set()
        assert other_thread_ran.wait(5)
        model.head(torch.randn(1, 4))
    worker.join()

    assert [call.path for call in trace] == ["head"]


def test_record_collects_every_forward_inside_the_block_and_nothing_after() -> None:
    model = SharedActivation()
    with record(model) as trace:
        for _ in range(3):
            model(torch.randn(1, 3, 8, 8))
    model(torch.randn(1, 3, 8, 8))

    assert trace.counts()[""] == 3
    assert len(trace) == 15
    assert [call.nth for call in trace.find("relu")] == [1, 2, 3, 4, 5, 6]


def test_record_ignores_modules_outside_the_model_called_outside_it() -> None:
    model = nn.Linear(2, 2)
    stranger = nn.ReLU()
    with record(model) as trace:
        stranger(model(torch.randn(1, 2)))

    assert [call.path for call in trace] == [""]


def test_record_without_calling_the_model_raises_a_clear_error() -> None:
    model = nn.Linear(2, 2)
    copy_of_model = copy.deepcopy(model)

    with (
        pytest.raises(
            EmptyTraceError, match=r"record\(Linear\) saw no call .* \(not a copy of it\)"
        ),
        record(model),
    ):
        copy_of_model(torch.randn(1, 2))


def test_record_accepts_an_empty_block_when_asked() -> None:
    with record(nn.Linear(2, 2), allow_empty=True) as trace:
        pass

    assert len(trace) == 0


def test_a_record_block_leaves_the_garbage_collector_on() -> None:
    """Found reviewing 0.2.0: the collector is paused for `trace_forward` only."""
    model = nn.Linear(2, 2)
    with record(model):
        collecting = gc.isenabled()
        model(torch.ones(1, 2))

    assert collecting


def test_traces_compare_equal_when_their_golden_text_is_equal() -> None:
    first = trace_forward(SharedActivation(), torch.randn(1, 3, 8, 8))
    second = trace_forward(SharedActivation(), torch.randn(1, 3, 8, 8))
    other_shape = trace_forward(SharedActivation(), torch.randn(2, 3, 8, 8))

    assert first == second
    assert first != other_shape
    assert isinstance(first, Trace)
    assert first != "not a trace"


def test_no_warning_is_emitted_by_a_plain_trace() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace_forward(SharedActivation(), torch.randn(1, 3, 8, 8))


class ChangesItsWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.linear.weight.mul_(2)
        return self.linear(x)


def test_a_forward_that_changes_a_parameter_in_place_is_named_in_a_warning() -> None:
    with pytest.warns(
        FwdOrderWarning, match=r"forward changed parameters in place \(linear\.weight\)"
    ):
        trace_forward(ChangesItsWeight(), torch.randn(1, 2))


def test_running_statistics_of_batchnorm_in_train_mode_are_put_back() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    norm = model[1]
    before = [buffer.clone() for buffer in norm.buffers()]

    trace_forward(model, torch.randn(2, 3, 8, 8))

    assert [buffer.dtype for buffer in norm.buffers()] == [torch.float32] * 2 + [torch.int64]
    assert all(map(torch.equal, norm.buffers(), before))


def test_buffers_made_under_inference_mode_are_put_back() -> None:
    with torch.inference_mode():
        model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).train()
        before = [buffer.clone() for buffer in model[1].buffers()]

        trace_forward(model, torch.randn(5, 3))

        assert all(map(torch.equal, model[1].buffers(), before))
        assert model[1].num_batches_tracked.item() == 0


def test_calls_the_recorder_builds_have_every_field_the_constructor_sets() -> None:
    # The recorder fills Call's slots directly; a field added to Call.__init__ must be too.
    built = trace_forward(nn.Linear(2, 2), torch.randn(1, 2)).calls[0]
    constructed = Call(
        path="",
        module_type="Linear",
        nth=1,
        depth=0,
        parent=None,
        registered=True,
        index=0,
        args=(),
    )

    def fields(call: Call) -> set[str]:
        return {name for name in Call.__slots__ if hasattr(call, name)}

    assert fields(built) == fields(constructed)


def _cyclic_garbage_types(make_garbage: typing.Callable[[], object]) -> set[str]:
    """The class names of what the cyclic collector alone can free after `make_garbage()`."""
    gc.collect()
    gc.disable()
    try:
        make_garbage()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return {type(found).__name__ for found in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_a_trace_leaves_its_recorder_to_reference_counting_not_to_the_cyclic_collector() -> None:
    # A recorder in a reference cycle makes its records, the model's entries and the state
    # copies garbage that only a pass of the cyclic collector over every object frees.
    model, inputs = nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(1, 4)
    trace_forward(model, inputs)

    left = _cyclic_garbage_types(lambda: trace_forward(model, inputs))

    assert not left & {"Recorder", "ModuleEntry", "CallRecord", "ModelState"}


def test_the_raw_records_are_let_go_when_the_recording_ends_and_every_call_stays() -> None:
    # Freed before trace_forward turns the collector back on, so its pass skips them.
    model, inputs = SharedActivation(), torch.randn(1, 3, 8, 8)
    seen: list[tuple[str, int]] = []
    names = {id(module): name for name, module in model.named_modules()}
    handles = [
        module.register_forward_pre_hook(
            lambda module, args: seen.append(
                (names[id(module)], sum(path == names[id(module)] for path, _ in seen) + 1)
            )
        )
        for module in model.modules()
    ]
    try:
        with recorder_module.recording(model, RenderOptions()) as recorder:
            model(inputs)
            records_inside = len(recorder.records)
    finally:
        for handle in handles:
            handle.remove()

    assert records_inside == len(seen) == 5  # the oracle: a plain counting hook
    assert (recorder.records, recorder.outputs) == ([], [])
    assert [(call.path, call.nth) for call in recorder.calls] == seen
    assert [call.index for call in recorder.calls] == list(range(5))  # finished once


def test_the_cyclic_garbage_oracle_sees_a_recorder_that_holds_its_own_hooks() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def cyclic_recorder() -> None:
        index = model_index_module.index_model(model)
        recorder = recorder_module.Recorder(index, Trace(root_type="Sequential", callable_paths=()))
        recorder.hook_pair = recorder.make_hooks()

    assert {"Recorder", "ModuleEntry"} <= _cyclic_garbage_types(cyclic_recorder)


signatures_seen: list[inspect.Signature] = []  # outside the model: a trace puts it back


class TakesNamesOfTheWatch(nn.Module):
    """Runs its child's forward directly with keywords named as the watch's own arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.child = KeywordsNamedLikeTheWatch()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        signatures_seen.append(inspect.signature(self.child.forward))
        return self.child.forward(x, module=1, forward=2, watch=3, thread_id=4)


class KeywordsNamedLikeTheWatch(nn.Module):
    def forward(
        self, x: torch.Tensor, *, module: int, forward: int, watch: int, thread_id: int
    ) -> torch.Tensor:
        return x * (module + forward + watch + thread_id)


def test_a_watched_forward_keeps_its_signature_and_takes_any_keyword_name() -> None:
    model = TakesNamesOfTheWatch()
    x = torch.ones(2)
    expected = inspect.signature(model.child.forward)
    assert str(expected) != "(*args, **kwargs)"  # the oracle tells the two apart
    signatures_seen.clear()
    trace = trace_forward(model, x, direct_forwards="watch")
    assert signatures_seen == [expected]
    assert [call.path for call in trace.calls] == ["", "child"]
    assert [name for name, _ in trace.calls[1].kwargs] == [
        "module",
        "forward",
        "watch",
        "thread_id",
    ]
    assert "forward" not in vars(model.child)
