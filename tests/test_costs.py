"""What each call costs (`costs=True`): FLOPs against torch's FlopCounterMode, bytes, diffs."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision
from flop_oracle import per_module
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from pytest_fwdorder import TensorSpec, assert_same_structure, record, trace_forward
from pytest_fwdorder.checks.cost_budgets import assert_costs
from pytest_fwdorder.facets.cost_counting import runner
from pytest_fwdorder.golden.figures import (
    human_bytes,
    human_count,
)

torch.library.define("fwdorder_costs::scale", "(Tensor x) -> Tensor")


@torch.library.impl("fwdorder_costs::scale", "CompositeExplicitAutograd")
def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.library.register_fake("fwdorder_costs::scale")
def _scale_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Block(nn.Module):
    """Attention then an MLP, as a transformer layer has them."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(width, 2, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x, x, x, need_weights=False)[0]
        return x + self.mlp(x)


class SharedThrice(nn.Module):
    """One Linear called three times."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(self.shared(self.shared(x)))


class TiedEmbedding(nn.Module):
    """A language model's embedding and output layer sharing one weight, and a shared block."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(50, 16)
        self.block = nn.Linear(16, 16)
        self.again = self.block
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.again(self.block(self.embedding(tokens))))


@torch.library.custom_op("fwdorder_costs::shift", mutates_args=())
def _shift(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@_shift.register_fake
def _shift_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class CustomShift(nn.Module):
    """A `torch.library.custom_op` operation, which torch calls through a Python dispatcher."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _shift(x)


class CustomScale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.fwdorder_costs.scale(x)


def _flop_counter(model: nn.Module, *args: torch.Tensor) -> FlopCounterMode:
    with FlopCounterMode(display=False) as counter:
        model(*args)
    return counter


def _resnet18() -> nn.Module:
    return torchvision.models.resnet18(weights=None).eval()


def test_resnet18_flops_equal_flop_counter_modes_in_total_and_per_module() -> None:
    model, image = _resnet18(), torch.randn(1, 3, 64, 64)
    trace = trace_forward(model, image, costs=True)
    counter = _flop_counter(model, image)
    flops_by_module = per_module(trace)
    expected = {
        name: sum(counts.values())
        for name, counts in counter.get_flop_counts().items()
        if name != "Global"
    }
    assert trace.costs is not None
    assert trace.costs.flops == counter.get_total_flops() == 297_115_648
    assert {name: flops_by_module[name] for name in expected} == expected


def test_a_transformer_blocks_flops_equal_flop_counter_modes() -> None:
    # On meta: on the CPU attention runs `_scaled_dot_product_flash_attention_for_cpu`, which
    # FlopCounterMode counts as zero and we count by its formula (tests/test_fused_kernel_flops.py);
    # on meta it runs the matrix products that kernel fuses, each with a torch formula.
    model, tokens = Block(), torch.randn(2, 5, 16)
    trace = trace_forward(model, tokens, costs=True)
    counter = _flop_counter(copy.deepcopy(model).to("meta"), tokens.to("meta"))
    assert trace.costs is not None
    assert trace.costs.flops == counter.get_total_flops() > 0
    flops_by_module = per_module(trace)
    for name, counts in counter.get_flop_counts().items():
        if name != "Global":
            assert flops_by_module[name] == sum(counts.values()), name


class CompiledInside(nn.Module):
    """A compiled submodule and a compiled function, each run once before the trace."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 16)
        self.second = nn.Linear(16, 4)
        self.second.compile(backend="eager")
        self.scale = torch.compile(lambda x: x @ x.mT @ x, backend="eager")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.scale(self.first(x)))


def test_compiled_code_inside_a_model_counts_as_its_eager_forward() -> None:
    # The mode's frames are not kept from dynamo (CostMode._should_skip_dynamo): a trace runs
    # compiled code eagerly, so the figures are those of the eager model, per module too.
    model, x = CompiledInside().eval(), torch.randn(3, 8)
    with torch.no_grad():
        model(x)  # compiled before the trace
    trace = trace_forward(model, x, costs=True)
    counter = _flop_counter(model, x)  # FlopCounterMode on the same model, compiled code in it
    assert trace.costs is not None
    assert trace.costs.flops == counter.get_total_flops() == 2 * 3 * (8 * 16 + 2 * 16 * 3 + 16 * 4)
    flops_by_module = per_module(trace)
    for name, counts in counter.get_flop_counts().items():
        if name != "Global":
            assert flops_by_module[name] == sum(counts.values()), name


def test_a_module_called_three_times_costs_three_times() -> None:
    model, x = SharedThrice(), torch.randn(4, 8)
    trace = trace_forward(model, x, costs=True)
    once = [call.costs.flops for call in trace.find("shared") if call.costs is not None]
    assert once == [2 * 4 * 8 * 8] * 3
    assert trace.costs is not None
    assert trace.costs.flops == 3 * once[0] == _flop_counter(model, x).get_total_flops()


def test_a_parents_flops_count_its_childrens_once() -> None:
    trace = trace_forward(Block(), torch.randn(2, 5, 16), costs=True)
    for call in trace.calls:
        assert call.costs is not None
        children = sum(child.costs.flops for child in call.children if child.costs is not None)
        assert call.costs.flops == call.costs.own_flops + children


def test_tied_and_shared_parameters_are_counted_once() -> None:
    model = TiedEmbedding()
    trace = trace_forward(model, torch.randint(0, 50, (2, 3)), costs=True)
    storages: dict[int, int] = {}
    for tensor in model.state_dict().values():
        storages.setdefault(
            tensor.untyped_storage().data_ptr(), tensor.numel() * tensor.element_size()
        )
    assert trace.costs is not None
    assert trace.costs.tensor_bytes == sum(storages.values()) == (50 * 16 + 16 * 16 + 16) * 4


def test_output_bytes_are_the_outputs_elements_times_their_size() -> None:
    trace = trace_forward(
        nn.Linear(8, 3).to(torch.float16), torch.randn(5, 8, dtype=torch.float16), costs=True
    )
    costs = trace.calls[0].costs
    assert costs is not None
    assert (costs.output_bytes, costs.tensor_bytes) == (5 * 3 * 2, (8 * 3 + 3) * 2)


def test_the_golden_writes_each_calls_costs_and_the_totals() -> None:
    text = trace_forward(nn.Linear(8, 4), torch.randn(2, 8), costs=True).render()
    assert "  | costs: 128 FLOPs, output 32 B, parameters and buffers 144 B\n" in text
    assert "# costs: 128 FLOPs, parameters and buffers 144 B, saved for backward 64 B\n" in text
    assert "# uncounted operations (0)\n" in text


def test_saved_activations_are_none_with_grad_disabled() -> None:
    with torch.no_grad():
        text = trace_forward(nn.Linear(8, 4), torch.randn(2, 8), costs=True).render()
    assert "saved for backward: none (grad disabled)" in text


def test_an_operation_without_a_flop_formula_is_listed_by_name_and_count() -> None:
    model = nn.Sequential(CustomScale(), nn.ReLU(), CustomScale())
    text = trace_forward(model, torch.randn(2, 3), costs=True).render()
    assert "# uncounted operations (2):\n#   fwdorder_costs.scale x2\n#   aten.relu x1\n" in text


def test_a_custom_op_runs_through_its_own_call_and_is_counted_by_name() -> None:
    # The mode calls an aten overload's C++ entry (`_op`) past its Python `__call__`; a
    # custom_op's overload with a dispatcher of its own (`_pyobj_dispatcher`, newer torch)
    # is called whole; where it has none (torch 2.8), its `_op` runs it as well.
    operation, addmm = torch.ops.fwdorder_costs.shift.default, torch.ops.aten.addmm.default
    assert runner(addmm) is addmm._op
    own_dispatcher = getattr(operation, "_pyobj_dispatcher", None) is not None
    assert (runner(operation) is operation) is own_dispatcher
    model, x = nn.Sequential(nn.Linear(3, 3), CustomShift()), torch.randn(2, 3)
    with record(model, costs=True) as trace:
        output = model(x)
    torch.testing.assert_close(output, model[0](x) + 1)
    assert trace.costs is not None
    assert trace.costs.uncounted == (("fwdorder_costs.shift", 1),)
    assert trace.costs.flops == _flop_counter(model, x).get_total_flops() == 2 * 2 * 3 * 3


def test_costs_on_meta_are_those_on_the_cpu() -> None:
    on_cpu = trace_forward(_resnet18(), torch.randn(1, 3, 64, 64), costs=True).render()
    on_meta = trace_forward(_resnet18, TensorSpec((1, 3, 64, 64)), device="meta", costs=True)
    assert on_meta.render() == on_cpu


def test_without_costs_the_golden_has_no_costs() -> None:
    text = trace_forward(nn.Linear(8, 4), torch.randn(2, 8)).render()
    assert "costs" not in text
    assert "uncounted" not in text


def test_the_human_forms_keep_three_significant_digits() -> None:
    assert [human_count(value) for value in (512, 1_850_000_000, 231_211_008, 999_700)] == [
        "512",
        "1.85 G",
        "231 M",
        "1.00 M",
    ]
    assert [human_bytes(value) for value in (12, 802_816, 46_796_608)] == [
        "12 B",
        "784 KiB",
        "44.6 MiB",
    ]


def _one_by_one(kernel: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.Sequential(nn.Conv2d(8, 8, kernel, padding=kernel // 2), nn.ReLU()),
    )


def test_the_diff_names_a_flops_change_biggest_first() -> None:
    image = torch.randn(1, 3, 8, 8)
    old = trace_forward(_one_by_one(1), image, costs=True)
    new = trace_forward(_one_by_one(3), image, costs=True)
    summary = old.diff(new).summary()
    assert (
        # 2*8*8 outputs*8 channels*8 inputs: x1 for a 1x1 kernel, x9 for a 3x3; the first
        # convolution (27,648 FLOPs) is the same in both.
        "FLOPs changed at 3 calls: <root> (Sequential) 35.8 k -> 101 k (+183%), "
        "1 (Sequential) 8.19 k -> 73.7 k (+800%), 1.0 (Conv2d) 8.19 k -> 73.7 k (+800%)"
    ) in summary


def test_a_new_uncounted_operation_is_its_own_change() -> None:
    image = torch.randn(2, 3)
    old = trace_forward(nn.Sequential(nn.Linear(3, 3)), image, costs=True)
    new = trace_forward(nn.Sequential(nn.Linear(3, 3), CustomScale()), image, costs=True)
    difference = old.diff(new)
    assert [change.detail for change in difference.of_kind("uncounted operation added")] == [
        "fwdorder_costs.scale x1"
    ]


def test_assert_costs_fails_over_budget_naming_the_calls_that_spend_most() -> None:
    trace = trace_forward(SharedThrice(), torch.randn(4, 8), costs=True)
    with pytest.raises(
        AssertionError,
        match=r"(?s)over budget: FLOPs 1,536 \(1.54 k\) > 1,000.*"
        r"shared #1 \(Linear\): 512 \(33%\)",
    ):
        assert_costs(trace, flops_at_most=1_000)


def test_assert_costs_passes_within_budget() -> None:
    trace = trace_forward(SharedThrice(), torch.randn(4, 8), costs=True)
    assert_costs(trace, flops_at_most=1_536, parameter_bytes_at_most=288)


def test_assert_costs_refuses_a_trace_without_costs() -> None:
    trace = trace_forward(SharedThrice(), torch.randn(4, 8))
    with pytest.raises(ValueError, match="taken without costs: take it with"):
        assert_costs(trace, flops_at_most=1)


def test_the_marker_and_the_ini_turn_costs_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_costs = true\n")
    pytester.makepyfile(
        """
        import pytest
        import torch
        from torch import nn

        def test_from_the_ini(forward_trace):
            assert forward_trace(nn.Linear(2, 2), torch.randn(1, 2)).costs.flops == 8

        @pytest.mark.fwdorder(costs=False)
        def test_the_marker_wins(forward_trace):
            assert forward_trace(nn.Linear(2, 2), torch.randn(1, 2)).costs is None
        """
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=2)


def test_a_structure_comparison_leaves_costs_out() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())

    with_costs = trace_forward(model, torch.randn(2, 4), costs=True)
    without_costs = trace_forward(model, torch.randn(2, 4))

    assert_same_structure(with_costs, without_costs)


def test_the_models_bytes_count_each_storage_of_its_modules_once_in_torchs_order() -> None:
    # The storages are read from the recorder's index of the model, not from a walk of their
    # own. The oracle is `nn.Module.modules()` with each module's parameters, then buffers,
    # the first tensor found in a storage giving its bytes.
    shared, tied = nn.Linear(4, 4), nn.Linear(4, 4)
    tied.weight = shared.weight
    model = nn.Sequential(nn.Sequential(shared, nn.ReLU()), shared, tied)
    model[0][1].register_module("never_run", nn.LazyLinear(3))  # stays uninitialized
    model[0][1].register_buffer("whole", torch.zeros(10))
    model[0][1].register_parameter("first_half", nn.Parameter(model[0][1].whole[:5]))
    model[0][1].register_parameter("none", None)
    model[0][1].register_buffer("sparse", torch.eye(3).to_sparse())
    tensors = [
        tensor
        for module in model.modules()
        for tensor in (*module._parameters.values(), *module._buffers.values())
        if tensor is not None
        and tensor.layout is torch.strided
        and not isinstance(tensor, nn.parameter.UninitializedTensorMixin)
    ]
    storages: dict[int, int] = {}
    for tensor in tensors:
        storages.setdefault(tensor.untyped_storage()._cdata, tensor.nbytes)
    # The shared weight once, two biases, the buffer's storage as its view's bytes.
    expected = (16 + 4 + 4 + 5) * 4
    assert sum(storages.values()) == expected
    # The oracle can fail: each tensor counted, the tied weight and the buffer again.
    assert sum(tensor.nbytes for tensor in tensors) == expected + 16 * 4 + 10 * 4

    trace = trace_forward(model, torch.randn(2, 4), costs=True)

    assert trace.costs is not None
    assert trace.costs.tensor_bytes == expected


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_a_torchscript_stage_counts_its_parameters_too() -> None:
    # A scripted module keeps its tensors in wrappers, not dicts. The oracle is torch's own
    # `parameters()`, which reaches into the scripted stage as well.
    model = nn.Sequential(
        nn.Linear(4, 4), torch.jit.script(nn.Sequential(nn.Linear(4, 3), nn.ReLU()))
    )
    expected = sum(parameter.nbytes for parameter in model.parameters())
    assert expected == (4 * 4 + 4 + 4 * 3 + 3) * 4

    trace = trace_forward(model, torch.randn(2, 4), costs=True)

    assert trace.costs is not None
    assert trace.costs.tensor_bytes == expected


def test_reading_the_values_adds_no_operation_to_the_costs() -> None:
    # The values facet reads each output (aminmax, std_mean) inside the recording: those are
    # the recorder's operations, not the model's. The oracle is the trace without values.
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    inputs = torch.randn(2, 8)
    with_values = trace_forward(model, inputs, costs=True, values=True).costs
    without_values = trace_forward(model, inputs, costs=True).costs
    assert with_values is not None
    assert without_values is not None
    assert with_values.uncounted == without_values.uncounted == (("aten.relu", 1),)
    assert (
        with_values.flops == without_values.flops == _flop_counter(model, inputs).get_total_flops()
    )
