"""Operations as opt-in records (`ops=True`): capture, golden lines, parameters, diffs, options."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional

from pytest_fwdorder import trace_forward
from pytest_fwdorder.checks.structure import assert_same_structure
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.errors import StructureMismatchError
from pytest_fwdorder.golden.parse import parse_golden


class Block(nn.Module):
    """A residual block whose activation is functional: the change ops=True exists to see."""

    def __init__(self, activation: str = "relu", extra: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.activation = activation
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y = functional.relu(y) if self.activation == "relu" else functional.gelu(y)
        if self.extra:
            y = y.softmax(-1)
            y = y * 2
        return x + y


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.scale = nn.Parameter(torch.ones(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(2, 8).reshape(2, 8)  # views: left out by default
        x = self.block(x)
        _ = x.shape, x.size(0), x.dim(), x.is_contiguous()  # queries: never records
        return torch.cat([x @ self.scale, x.float()], dim=1)


def trace_of(model: nn.Module, **options: object) -> str:
    torch.manual_seed(0)
    return trace_forward(model, torch.randn(2, 8), **options).render()  # type: ignore[arg-type]


def operation_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("~ ")]


def test_operations_are_listed_under_the_call_that_made_them_in_order() -> None:
    lines = trace_of(Outer(), ops=True).splitlines()
    body = lines[lines.index("<root>: Outer (f32[2,8]) -> f32[2,16]") :]
    assert body[1:] == [
        "  | parameters: scale f32[8,8]",
        "  block: Block (f32[2,8]) -> f32[2,8]",
        "    block.fc: Linear (f32[2,8]) -> f32[2,8]",
        "      | settings: in_features=8, out_features=8, bias=True",
        "      | parameters: weight f32[8,8], bias f32[8]",
        "    ~ relu(f32[2,8]) -> f32[2,8]",
        "    ~ add(f32[2,8], f32[2,8]) -> f32[2,8]",
        "  ~ matmul(f32[2,8], scale) -> f32[2,8]",
        "  ~ cat([f32[2,8], f32[2,8]], dim=1) -> f32[2,16]",
    ]


def test_operations_are_on_their_calls() -> None:
    trace = trace_forward(Outer(), torch.randn(2, 8), ops=True)
    assert [operation.name for operation in trace.find("block")[0].operations] == ["relu", "add"]
    assert trace.find("block.fc")[0].operations == ()


def test_the_header_says_operations_were_recorded_and_what_was_left_out() -> None:
    text = trace_of(Outer(), ops=True)
    assert "# operations: 4 recorded (left out: conversions, torch_modules, views)" in text


def test_without_ops_the_golden_has_no_operation_lines_or_header() -> None:
    text = trace_of(Outer())
    assert operation_lines(text) == []
    assert "# operations" not in text
    assert "# used through its parameters" not in text


def test_metadata_queries_are_never_recorded() -> None:
    text = trace_of(Outer(), ops=True, ops_skip=())
    names = [line.split("~ ")[1].split("(")[0] for line in operation_lines(text)]
    assert not {"size", "dim", "is_contiguous", "get"} & set(names)


def test_ops_skip_empty_records_views_conversions_and_torch_modules_operations() -> None:
    names = [
        line.split("~ ")[1].split("(")[0]
        for line in operation_lines(trace_of(Outer(), ops=True, ops_skip=()))
    ]
    assert names == ["view", "reshape", "linear", "relu", "add", "matmul", "float", "cat"]


def test_ops_skip_none_records_everything_as_on_the_command_line() -> None:
    # `--ops-skip none` and the ini's `fwdorder_ops_skip = none` mean "skip nothing": the
    # same spelling means the same in Python, not "skip an operation called none".
    assert trace_of(Outer(), ops=True, ops_skip="none") == trace_of(Outer(), ops=True, ops_skip=())


def test_ops_skip_takes_single_operation_names() -> None:
    text = trace_of(Outer(), ops=True, ops_skip=("views", "conversions", "torch_modules", "cat"))
    assert "~ cat(" not in text
    assert "~ matmul(" in text


def test_a_parameter_given_to_an_operation_is_named_by_its_path() -> None:
    text = trace_of(Outer(), ops=True, ops_skip=("views", "conversions"))
    assert "      ~ linear(f32[2,8], block.fc.weight, block.fc.bias) -> f32[2,8]" in text


def test_a_left_out_view_of_a_parameter_keeps_its_name() -> None:
    class Transposed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(8, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight.t()

    assert "  ~ matmul(f32[2,8], weight.t()) -> f32[2,8]" in trace_of(Transposed(), ops=True)


def test_a_recorded_view_of_a_parameter_keeps_its_name_too() -> None:
    # Recording more operations (ops_skip=()) must not show less about which tensor is used.
    class Transposed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(8, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight.t()

    text = trace_of(Transposed(), ops=True, ops_skip=())

    assert "  ~ t(weight) -> f32[8,8]" in text
    assert "  ~ matmul(f32[2,8], weight.t()) -> f32[2,8]" in text


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x)[0]


def test_a_module_used_through_its_parameters_is_not_reported_as_never_called() -> None:
    torch.manual_seed(0)
    text = trace_forward(Attention().eval(), torch.randn(1, 3, 8), ops=True).render()
    assert "# registered but never called (0)" in text
    assert (
        "# used through its parameters (1):\n#   attention.out_proj: "
        "NonDynamicallyQuantizableLinear | weight, bias used by multi_head_attention_forward "
        "in attention"
    ) in text


def test_without_ops_the_same_module_is_known_to_be_used_through_its_parameters() -> None:
    torch.manual_seed(0)
    text = trace_forward(Attention().eval(), torch.randn(1, 3, 8)).render()
    assert "# registered but never called (0)\n# used through its parameters (1):\n" in text
    assert "#   attention.out_proj: NonDynamicallyQuantizableLinear | weight f32[8,8]" in text


def test_used_through_parameters_query() -> None:
    trace = trace_forward(Attention().eval(), torch.randn(1, 3, 8), ops=True)
    uses = trace.used_through_parameters()
    assert list(uses) == ["attention.out_proj"]
    assert [use.tensor for use in uses["attention.out_proj"]] == [
        "attention.out_proj.weight",
        "attention.out_proj.bias",
    ]


def test_a_golden_with_operations_is_byte_identical_across_runs() -> None:
    assert trace_of(Outer(), ops=True) == trace_of(Outer(), ops=True)


def test_no_function_mode_is_left_on_the_stack() -> None:
    trace_forward(Outer(), torch.randn(2, 8), ops=True)
    assert torch._C._len_torch_function_stack() == 0


def test_parse_golden_attaches_operation_lines_to_their_call() -> None:
    _, lines = parse_golden(trace_of(Outer(), ops=True))
    assert [line.path for line in lines] == ["<root>", "block", "block.fc"]
    assert lines[0].values_under("operations") == (
        "matmul(f32[2,8], scale) -> f32[2,8]",
        "cat([f32[2,8], f32[2,8]], dim=1) -> f32[2,16]",
    )
    assert lines[1].values_under("operations") == (
        "relu(f32[2,8]) -> f32[2,8]",
        "add(f32[2,8], f32[2,8]) -> f32[2,8]",
    )


def test_a_changed_operation_is_explained() -> None:
    diff = diff_golden(trace_of(Block(), ops=True), trace_of(Block("gelu"), ops=True))
    assert diff.summary().splitlines() == [
        "2 calls before, 2 after: 1 operation changed",
        "operation changed in <root> (op 1 of 2): relu -> gelu",
    ]


def test_inserted_operations_are_explained_by_call() -> None:
    diff = trace_forward(Block(), torch.randn(2, 8), ops=True).diff(
        trace_forward(Block(extra=True), torch.randn(2, 8), ops=True)
    )
    assert diff.count("operation inserted") == 2
    assert (
        "2 operations inserted in <root>: softmax (op 2 of 4), mul (op 3 of 4)"
        in diff.summary().splitlines()
    )


def test_removed_operations_are_counted() -> None:
    diff = diff_golden(trace_of(Block(extra=True), ops=True), trace_of(Block(), ops=True))
    assert diff.count("operation removed") == 2


def test_the_diff_shows_the_changed_operation_lines() -> None:
    diff = diff_golden(trace_of(Block(), ops=True), trace_of(Block("gelu"), ops=True))
    assert "-   ~ relu(f32[2,8]) -> f32[2,8]" in diff.render().splitlines()
    assert "+   ~ gelu(f32[2,8]) -> f32[2,8]" in diff.render().splitlines()


def test_assert_same_structure_can_ignore_operations() -> None:
    old = trace_forward(Block(), torch.randn(2, 8), ops=True)
    new = trace_forward(Block("gelu"), torch.randn(2, 8), ops=True)
    assert_same_structure(old, new, ignore=("operations",))


def test_assert_same_structure_compares_operations_unless_ignored() -> None:
    old = trace_forward(Block(), torch.randn(2, 8), ops=True)
    new = trace_forward(Block("gelu"), torch.randn(2, 8), ops=True)
    with pytest.raises(StructureMismatchError, match="relu -> gelu"):
        assert_same_structure(old, new)


def test_ops_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="ops must be True or False, got 'yes'"):
        trace_forward(Block(), torch.randn(2, 8), ops="yes")  # type: ignore[arg-type]


def test_ops_skip_must_name_groups_or_operations() -> None:
    with pytest.raises(TypeError, match=r"ops_skip must name operation groups .* got 3"):
        trace_forward(Block(), torch.randn(2, 8), ops=True, ops_skip=3)  # type: ignore[arg-type]


def test_a_model_keyword_named_ops_goes_in_model_kwargs() -> None:
    class TakesOps(nn.Module):
        def forward(self, x: torch.Tensor, ops: int = 0) -> torch.Tensor:
            return x * ops

    trace = trace_forward(TakesOps(), torch.randn(2), model_kwargs={"ops": 3})
    assert trace[0].kwargs[0][0] == "ops"
    assert trace.operations_skipped is None


def test_an_operation_that_raises_is_marked_raised() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x.new_zeros(3, 3)])

    with pytest.raises(RuntimeError, match="Sizes of tensors must match") as raised:
        trace_forward(Fails(), torch.randn(2, 2), ops=True)
    assert "Raised in: <root> (Fails)" in "\n".join(raised.value.__notes__)


def test_the_marker_and_ini_turn_operations_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_ops_skip = views torch_modules\n")
    pytester.makepyfile(
        """
        import pytest
        import torch


        class Doubles(torch.nn.Module):
            def forward(self, x):
                return x.float() * 2


        @pytest.mark.fwdorder(ops=True)
        def test_marked(forward_trace):
            text = forward_trace(Doubles(), torch.randn(2)).render()
            assert "~ float(f32[2]) -> f32[2]" in text
            assert "(left out: torch_modules, views)" in text


        def test_unmarked(forward_trace):
            assert "~ " not in forward_trace(Doubles(), torch.randn(2)).render()
        """
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_the_ini_option_ops_turns_operations_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_ops = true\n")
    pytester.makepyfile(
        """
        import torch


        class Doubles(torch.nn.Module):
            def forward(self, x):
                return x * 2


        def test_ini(forward_trace):
            assert "  ~ mul(f32[2], 2) -> f32[2]" in forward_trace(Doubles(), torch.randn(2)).render()
        """
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_command_line_records_operations(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_fwdorder.cli.main import main

    status = main(["show", "cli_models:tiny", "--input", "2x4", "--ops", "--ops-skip", "none"])
    output = capsys.readouterr().out
    assert status == 0
    assert "~ linear(f32[2,4], body.0.weight, body.0.bias) -> f32[2,8]" in output
    assert "(left out: nothing)" in output
