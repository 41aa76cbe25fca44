"""Regression tests for defects found by running 0.1.0 on outside model corpora (issue 8).

Each test names the defect it pins; each failed on 0.1.0.
"""

from __future__ import annotations

import gc
import random
import subprocess
import sys
import warnings

import numpy
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from pytest_fwdorder import (
    FwdOrderWarning,
    MetaTraceError,
    TensorSpec,
    record,
    trace_forward,
)
from pytest_fwdorder import recorder as recorder_module
from pytest_fwdorder.facts import module_facts


def scripted(module: nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        result: torch.jit.ScriptModule = torch.jit.script(module)
    return result


# 1. A TorchScript submodule inside a normal model.


def test_a_scripted_submodule_is_one_call_marked_scripted() -> None:
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
    model = nn.Sequential(nn.Linear(4, 4), scripted(nn.Linear(4, 2)))

    with record(model) as trace:
        model(torch.randn(1, 4))

    assert [call.path for call in trace] == ["", "0", "1"]


def test_a_fully_scripted_model_keeps_its_clear_type_error() -> None:
    with pytest.raises(TypeError, match="cannot trace a TorchScript module"):
        trace_forward(scripted(nn.Linear(4, 2)), torch.randn(1, 4))


# 2. Module facts come from the user's module, not from meta stand-ins.


def test_a_module_registered_twice_is_not_frozen_on_meta() -> None:
    linear = nn.Linear(10, 10)
    model = nn.Sequential(linear, nn.ReLU(), linear)

    on_cpu = trace_forward(model, torch.randn(1, 10))
    on_meta = trace_forward(model, TensorSpec((1, 10)), device="meta")

    assert on_meta.render() == on_cpu.render()
    assert not any(call.frozen for call in on_meta)


# 3. Tensors kept in plain attributes are put back.


class ReassignsItsScale(nn.Module):
    """Like torchvision's AnchorGenerator: forward moves a plain tensor attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.ones(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale = self.scale.to(x.device)
        return x * self.scale


def test_a_meta_trace_leaves_a_reassigned_tensor_attribute_on_the_cpu() -> None:
    model = ReassignsItsScale()
    original = model.scale

    trace_forward(model, TensorSpec((2, 4)), device="meta")

    assert model.scale is original
    assert model(torch.ones(2, 4)).sum().item() == 8.0


def test_an_attribute_added_in_forward_is_removed_after_the_trace() -> None:
    class Caches(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.cache = x
            return x

    model = Caches()

    trace_forward(model, torch.ones(1))

    assert not hasattr(model, "cache")


# 4. Lazy parameters on meta.


def test_an_uninitialized_lazy_parameter_on_meta_is_a_meta_trace_error_naming_it() -> None:
    model = nn.Sequential(nn.LazyLinear(3))

    with pytest.raises(
        MetaTraceError, match=r"lazy parameter '0\.weight' is not initialized"
    ) as raised:
        trace_forward(model, TensorSpec((1, 4)), device="meta")

    assert not any("forward raised" in note for note in getattr(raised.value, "__notes__", []))
    assert isinstance(model[0].weight, nn.UninitializedParameter)


# 5. TensorSpec takes a tuple of ints only.


@pytest.mark.parametrize(
    ("shape", "bad"),
    [
        ({0: 1}, r"got dict \{0: 1\}"),
        ((3, True), r"got True in \(3, True\)"),
        ((2.0,), r"got 2\.0"),
    ],
)
def test_a_tensor_spec_shape_that_is_not_ints_is_a_type_error(shape: object, bad: str) -> None:
    with pytest.raises(TypeError, match=bad):
        TensorSpec(shape)  # type: ignore[arg-type]


# 6. Keyword arguments are described before forward runs.


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
    # Not the usual `module(...)` frames: the reader falls back to `_call_impl`'s own frame.
    trace = trace_forward(CallsThroughCallImpl(), torch.ones(2), torch.ones(1, 4))

    assert "inner: SqueezesItsKeyword (f32[2], y=f32[1,4], items=[]) -> f32[2]" in trace.render()


def test_this_torch_lays_out_call_impl_as_the_keyword_reader_expects() -> None:
    # If this fails, a torch release changed Module._call_impl: the recorder falls back to
    # per-module pre-hooks (correct, slower). Update _keyword_frame_code for the new layout.
    assert recorder_module.KEYWORD_FRAME_CODE is not None
    # The cheaper read, from `module(...)`'s own frame: without it keywords cost about 1 us
    # more per call, read from the frame above.
    assert recorder_module.WRAPPED_CALL_FRAME_CODE is nn.Module.__call__.__code__


def test_the_fallback_without_the_frame_layout_also_describes_keywords_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recorder_module, "KEYWORD_FRAME_CODE", None)
    model = CallsWithKeywords()

    trace = trace_forward(model, torch.ones(2), torch.ones(1, 4))

    assert "inner: SqueezesItsKeyword (f32[2], y=f32[1,4], items=[]) -> f32[2]" in trace.render()
    assert not model.inner._forward_pre_hooks  # the fallback's hooks are gone


# 7. Python's and numpy's random states are put back.


class DrawsFromEveryGenerator(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        numpy.random.random()
        random.random()
        return x


def test_numpy_and_python_random_states_are_put_back() -> None:
    numpy.random.seed(0)
    random.seed(0)
    expected = (numpy.random.random(), random.random())
    numpy.random.seed(0)
    random.seed(0)

    trace_forward(DrawsFromEveryGenerator(), torch.ones(1))

    assert (numpy.random.random(), random.random()) == expected


def test_a_trace_does_not_import_numpys_random_module() -> None:
    # Saving numpy's generator costs about 170 us a trace: not where nothing could draw.
    program = (
        "import sys, numpy, torch\n"
        "from pytest_fwdorder import trace_forward\n"
        "trace_forward(torch.nn.Linear(2, 2), torch.ones(1, 2))\n"
        "print('numpy.random' in sys.modules)\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "False"


# 8. Any failure on the meta device is a MetaTraceError with the original as its cause.


class StricterOnMeta(nn.Module):
    """Raises what torch's meta kernels raise where the CPU kernel is lenient (Mixtral)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "meta":
            raise RuntimeError("Expected mat_a to be BFloat16")
        return x


def test_a_failure_only_on_meta_is_a_meta_trace_error_with_the_original_as_cause() -> None:
    with pytest.raises(MetaTraceError, match="raised on the meta device") as raised:
        trace_forward(nn.Sequential(StricterOnMeta()), TensorSpec((1, 2)), device="meta")

    assert isinstance(raised.value.__cause__, RuntimeError)
    assert "trace on the CPU" in str(raised.value).replace("Trace", "trace")
    assert "0 (StricterOnMeta" in str(raised.value)


# 9. A module without parameters is never frozen.


def test_batch_norm_without_affine_parameters_is_not_frozen() -> None:
    trace = trace_forward(
        nn.Sequential(nn.BatchNorm2d(8, affine=False)).eval(), torch.randn(1, 8, 2, 2)
    )

    assert not trace[1].frozen
    assert "[frozen]" not in trace.render()


# 12. A function or a class where the model belongs.


def test_a_function_that_needs_arguments_is_not_taken_for_a_builder() -> None:
    with pytest.raises(
        TypeError,
        match=r"zero-argument function that builds one, got 'relu', which requires 'input'",
    ):
        trace_forward(F.relu, torch.randn(2))


def test_a_module_class_is_named_as_a_class() -> None:
    with pytest.raises(
        TypeError, match=r"got 'type': that is the class; pass an instance \(Linear\(\.\.\.\)\)"
    ):
        trace_forward(nn.Linear, torch.randn(2))


def test_a_tensor_where_the_model_belongs_hints_at_the_argument_order() -> None:
    with pytest.raises(TypeError, match=r"the model comes first, then its inputs"):
        trace_forward(torch.randn(2), nn.Linear(2, 2))  # type: ignore[arg-type]


# 18. Words and warnings.


class Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom")


def test_the_failure_note_counts_one_call_in_the_singular() -> None:
    with pytest.raises(ValueError, match="boom") as raised:
        trace_forward(Raises(), torch.ones(1))

    assert "forward raised after 1 recorded call." in raised.value.__notes__[0]


class ScalesItsWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.encoder[0].weight.mul_(2)
        return self.encoder(x)


def test_the_in_place_parameter_warning_names_the_parameter_path_at_the_users_line() -> None:
    with pytest.warns(FwdOrderWarning, match=r"encoder\.0\.weight") as caught:
        trace_forward(ScalesItsWeight(), torch.ones(1, 2))

    assert caught[0].filename == __file__


def test_a_warning_at_the_end_of_a_record_block_points_at_the_users_line() -> None:
    model = ScalesItsWeight()

    with pytest.warns(FwdOrderWarning, match=r"encoder\.0\.weight") as caught, record(model):
        model(torch.ones(1, 2))

    assert caught[0].filename == __file__


# Found by reviewing 0.2.0 before release; each failed before its fix.


class QuantizedBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # quantized tensors are deprecated
            codes = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
        self.register_buffer("codes", codes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_a_stand_in_that_cannot_be_made_leaves_every_weight_where_it_was() -> None:
    model = QuantizedBuffer()

    with pytest.raises(MetaTraceError, match="cannot make stand-ins on 'meta'"):
        trace_forward(model, TensorSpec((1, 2)), device="meta")

    assert model.linear.weight.device.type == "cpu"
    assert model(torch.ones(1, 2)).shape == (1, 2)


class ReplacesData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.register_buffer("cache", torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache.data = torch.ones(3)
        self.linear.weight.data = self.linear.weight.data.double()
        return x


def test_data_replaced_in_forward_is_put_back_or_named() -> None:
    model = ReplacesData()

    with pytest.warns(FwdOrderWarning, match=r"linear\.weight"):
        trace_forward(model, torch.ones(1, 2))

    assert model.cache.shape == (2,)
    assert torch.equal(model.cache, torch.zeros(2))


class PlainListNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norms = [nn.BatchNorm1d(2)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norms[0](x)


def test_an_unregistered_module_is_put_back_too() -> None:
    model = PlainListNorm().train()
    before = model.norms[0].running_mean.clone()

    with pytest.warns(FwdOrderWarning, match="not registered"):
        trace_forward(model, torch.randn(4, 2))

    assert torch.equal(model.norms[0].running_mean, before)
    assert model.norms[0].num_batches_tracked.item() == 0


def test_an_unregistered_module_gets_stand_ins_on_meta() -> None:
    model = PlainListNorm().eval()

    with pytest.warns(FwdOrderWarning, match="not registered"):
        trace = trace_forward(model, TensorSpec((4, 2)), device="meta")

    assert trace[1].output_tensors[0].device == "meta"
    assert model.norms[0].weight.device.type == "cpu"


def test_a_builder_that_shares_a_parameter_keeps_it_tied_on_meta() -> None:
    def build() -> nn.Module:
        model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
        model[1].weight = model[0].weight
        return model

    on_meta = trace_forward(build, TensorSpec((1, 2)), device="meta")

    assert on_meta.render() == trace_forward(build(), torch.randn(1, 2)).render()
    assert on_meta.tied == (("0.weight", ("1.weight",)),)


def test_a_module_that_gains_its_first_parameter_is_a_change() -> None:
    class Block(nn.Module):
        def __init__(self, scaled: bool) -> None:
            super().__init__()
            if scaled:
                self.scale = nn.Parameter(torch.ones(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    before = trace_forward(nn.Sequential(Block(False)), torch.ones(1, 2))
    after = trace_forward(nn.Sequential(Block(True)), torch.ones(1, 2))

    assert "added 0.scale (f32[2])" in before.diff(after).summary()


def test_untying_a_weight_is_named_without_phantom_tensors() -> None:
    tied = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 5, bias=False))
    tied[1].weight = tied[0].weight
    untied = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 5, bias=False))

    summary = (
        trace_forward(tied, torch.zeros(1, 3, dtype=torch.long))
        .diff(trace_forward(untied, torch.zeros(1, 3, dtype=torch.long)))
        .summary()
    )

    assert "no longer tied to 1.weight: 0.weight" in summary
    assert "added" not in summary


def test_hide_given_as_a_string_names_facets_everywhere() -> None:
    text = trace_forward(nn.Linear(2, 2), torch.ones(1, 2), hide="settings mode").render()

    assert "# hidden: mode, settings" in text


def test_show_devices_that_is_not_a_bool_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="show_devices must be True or False, got 'no'"):
        trace_forward(nn.Linear(2, 2), torch.ones(1, 2), show_devices="no")  # type: ignore[arg-type]


class KeywordOnly(nn.Module):
    def forward(self, x: torch.Tensor, *, a: int = 0, b: int = 0) -> torch.Tensor:
        return x


def test_keyword_only_arguments_follow_the_signature_not_the_call() -> None:
    class Calls(nn.Module):
        def __init__(self, swapped: bool) -> None:
            super().__init__()
            self.inner = KeywordOnly()
            self.swapped = swapped

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x, b=3, a=4) if self.swapped else self.inner(x, a=4, b=3)

    assert trace_forward(Calls(False), torch.ones(1)).render() == (
        trace_forward(Calls(True), torch.ones(1)).render()
    )


def test_equal_looking_settings_of_other_types_do_not_share_text() -> None:
    # (True, True) == (1, 1) and both hash alike: shared facts must still tell them apart.
    module_facts(nn.MaxPool2d(3))  # facts are shared only once the class has been seen
    first = module_facts(nn.MaxPool2d(2, padding=(True, True)))  # type: ignore[arg-type]
    second = module_facts(nn.MaxPool2d(2, padding=(1, 1)))

    assert ("padding", "(True, True)") in first.settings
    assert ("padding", "(1, 1)") in second.settings


def test_a_negative_zero_setting_does_not_share_text_with_zero() -> None:
    # -0.0 == 0.0 and both hash alike, but the golden writes them differently.
    module_facts(nn.LeakyReLU(0.5))  # facts are shared only once the class has been seen
    first = module_facts(nn.LeakyReLU(0.0))
    second = module_facts(nn.LeakyReLU(-0.0))

    assert ("negative_slope", "0.0") in first.settings
    assert ("negative_slope", "-0.0") in second.settings


def test_a_record_block_leaves_the_garbage_collector_on() -> None:
    model = nn.Linear(2, 2)
    with record(model):
        collecting = gc.isenabled()
        model(torch.ones(1, 2))

    assert collecting


def test_a_lazy_module_is_initialized_by_a_cpu_trace_and_named_in_the_warning() -> None:
    # README: a CPU trace initializes a lazy module, as any first forward does.
    model = nn.Sequential(nn.LazyLinear(3))

    with pytest.warns(FwdOrderWarning, match=r"0\.weight, 0\.bias"):
        trace = trace_forward(model, torch.ones(1, 4))

    # The golden shows the module as it was before the forward that initialized it.
    assert "| parameters: weight f32 uninitialized, bias f32 uninitialized" in trace.render()
    assert model[0].weight.shape == (3, 4)


# Review of 0.3: tensors whose layout is not strided, passed straight to a module.


class PassesThrough(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _nested() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are in prototype stage"
        return torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])


def test_a_nested_tensor_argument_is_described_and_does_not_break_forward() -> None:
    trace = trace_forward(PassesThrough(), _nested())

    assert "inner: Identity (nested f32[2,*,3]) -> nested f32[2,*,3]" in trace.render()


def test_a_sparse_tensor_argument_is_described_as_sparse() -> None:
    trace = trace_forward(PassesThrough(), torch.eye(3).to_sparse())

    assert "inner: Identity (sparse_coo f32[3,3]) -> sparse_coo f32[3,3]" in trace.render()


# Review of 0.3.1: an unregistered TorchScript module called in forward.


class KeepsAScriptedModuleInAList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = [scripted(nn.Linear(2, 2))]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.blocks[0](x)
        return result


def test_an_unregistered_scripted_module_is_one_call_and_its_state_is_left_alone() -> None:
    model = KeepsAScriptedModuleInAList()
    weight = model.blocks[0].weight.clone()

    trace = trace_forward(model, torch.randn(1, 2))

    assert "  blocks[0]: Linear [unregistered] [scripted] (f32[1,2]) -> f32[1,2]" in (
        trace.render()
    )
    assert torch.equal(model.blocks[0].weight, weight)
