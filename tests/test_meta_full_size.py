"""Meta traces at full size: builders that allocate nothing, autocast, and error hints."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import MetaTraceError, TensorSpec, trace_forward
from pytest_fwdorder.recording.meta.failures import _meta_failure_message


class Experts(nn.Module):
    """A fused mixture-of-experts weight of 30 GB: it fits on meta only."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(256, 7168, 4096))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight[0].T


def test_a_builder_of_a_30_gb_parameter_traces_on_meta() -> None:
    trace = trace_forward(lambda: Experts(), TensorSpec((1, 4096)), device="meta")

    assert trace[0].output_shapes == [(1, 7168)]


class CountsCpuFactories(torch.overrides.TorchFunctionMode):
    """Counts factory calls that make a tensor off meta, from the outside of the build."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu_elements = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        output = func(*args, **(kwargs or {}))
        if func in (torch.empty, torch.ones, torch.zeros) and output.device.type != "meta":
            self.cpu_elements += output.numel()
        return output


def test_a_builder_on_meta_makes_no_parameter_on_the_cpu_at_any_point() -> None:
    def build() -> nn.Module:
        return nn.Sequential(nn.Linear(1000, 1000), nn.BatchNorm1d(1000))

    with CountsCpuFactories() as counter:
        trace_forward(build, TensorSpec((2, 1000)), device="meta")

    assert counter.cpu_elements == 0


def test_a_builder_that_reads_values_of_a_tensor_it_made_still_traces_on_meta() -> None:
    def build() -> nn.Module:
        widths = (torch.arange(3) * 2 + 4).tolist()  # RegNet sizes its stages like this
        return nn.Sequential(*[nn.Linear(width, width) for width in widths[:1]])

    trace = trace_forward(build, TensorSpec((1, 4)), device="meta")

    assert trace[0].output_shapes == [(1, 4)]
    assert trace[0].output_tensors[0].device == "meta"


def test_a_module_that_reads_values_in_its_init_still_traces_on_meta() -> None:
    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            rates = [rate.item() for rate in torch.linspace(0, 0.5, 2)]
            self.layers = nn.ModuleList(nn.Dropout(rate) for rate in rates)
            self.head = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.layers[1](x))

    trace = trace_forward(lambda: Stack(), TensorSpec((1, 3)), device="meta")

    assert [call.module_type for call in trace] == ["Stack", "Dropout", "Linear"]


class Autocast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.amp.autocast("cpu"):
            return self.linear(x)


def test_a_forward_under_autocast_on_meta_raises_instead_of_recording_other_dtypes() -> None:
    with pytest.raises(
        MetaTraceError,
        match=r"autocast is not followed on the meta device: .*autocast\('cpu'\) would record "
        r"bfloat16 outputs on the CPU and float32 ones on meta",
    ):
        trace_forward(Autocast(), TensorSpec((4, 4)), device="meta")


def test_a_forward_under_autocast_traces_on_the_cpu_in_bf16() -> None:
    trace = trace_forward(Autocast(), TensorSpec((4, 4)))

    assert trace[1].output_tensors[0].dtype == "bf16"


def raised(function: object) -> Exception:
    try:
        function()  # type: ignore[operator]
    except Exception as error:
        return error
    raise AssertionError("expected an error")


@pytest.mark.parametrize(
    "wording",
    [
        "Expected mat_a to be BFloat16 or supported Float16 but got float",  # torch 2.14
        "Expected inputs of BF16 type but got mat_a.dtype=torch.float32 and mat_b.dtype=torch"
        ".float32.",  # torch 2.8
    ],
)
def test_each_releases_wording_of_the_grouped_matmul_dtype_error_is_recognised(
    wording: str,
) -> None:
    def grouped() -> None:
        raise RuntimeError(wording)

    message = _meta_failure_message(raised(grouped), [])

    assert "the line needs a dtype: torch's grouped matmul on meta takes bfloat16 or " in message


def test_a_grouped_matmul_in_float32_on_meta_is_told_to_use_bfloat16() -> None:
    try:
        torch._grouped_mm(
            torch.empty(8, 16, device="meta"),
            torch.empty(2, 16, 8, device="meta"),
            offs=torch.empty(2, dtype=torch.int32, device="meta"),
        )
    except RuntimeError:
        pass
    else:
        pytest.skip(f"torch {torch.__version__} runs a float32 grouped matmul on meta")

    def grouped() -> None:
        torch._grouped_mm(
            torch.empty(8, 16, device="meta"),
            torch.empty(2, 16, 8, device="meta"),
            offs=torch.empty(2, dtype=torch.int32, device="meta"),
        )

    message = _meta_failure_message(raised(grouped), [])

    assert "the line needs a dtype: torch's grouped matmul on meta takes bfloat16 or " in message
    assert "leave that input out" not in message


def test_a_tolist_on_meta_says_the_line_needs_real_values_and_not_to_leave_inputs_out() -> None:
    def reads() -> None:
        torch.empty(3, device="meta").tolist()

    message = _meta_failure_message(raised(reads), [])

    assert "The line that needed real values: tests/test_meta_full_size.py:" in message
    assert 'torch.empty(3, device="meta").tolist()' in message
    assert "leave that input out" not in message


def test_a_meta_failure_message_has_no_double_period() -> None:
    def fails() -> None:
        raise RuntimeError("ends with a period.")

    message = _meta_failure_message(raised(fails), [])

    assert "RuntimeError: ends with a period. " in message
    assert ".." not in message


def test_a_meta_failure_names_the_models_line_that_called_a_helper() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return helper_that_reads_values(x)

    message = _meta_failure_message(raised(lambda: Model()(torch.empty(2, device="meta"))), [])

    assert "return helper_that_reads_values(x) (which called " in message


def helper_that_reads_values(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x
    return -x


def test_a_builder_too_big_for_this_machine_is_not_told_to_build_on_the_cpu() -> None:
    def build() -> nn.Module:
        model = Experts()
        raise ValueError("no such configuration")
        return model

    with pytest.raises(MetaTraceError, match=r"building the model for the meta device") as error:
        trace_forward(build, TensorSpec((1, 4096)), device="meta")

    message = str(error.value)
    assert "build it there" not in message
    assert "registered 28.0 GiB of parameters and buffers before it failed, more than" in message


def test_a_line_that_reads_a_mask_on_meta_says_to_pass_or_leave_out_the_mask() -> None:
    def checks_padding() -> None:
        padding_mask = torch.empty(2, 3, dtype=torch.bool, device="meta")
        if padding_mask.all():
            return

    message = _meta_failure_message(raised(checks_padding), [])

    assert (
        message.count(
            "That line reads a mask: if it runs because no attention mask was given, pass one; "
            "if it checks the mask you gave (all ones), leave it out."
        )
        == 1
    )


def test_a_shape_error_on_meta_names_the_line_that_failed_not_a_need_for_values() -> None:
    def mismatched() -> None:
        torch.empty(2, 3, device="meta") @ torch.empty(2, 3, device="meta")

    message = _meta_failure_message(raised(mismatched), [])

    assert "The line that failed: tests/test_meta_full_size.py:" in message
    assert "needed real values" not in message


def test_a_failed_meta_build_has_no_double_period() -> None:
    def build() -> nn.Module:
        raise ValueError("no such configuration.")

    with pytest.raises(
        MetaTraceError,
        match=r"failed in '.*build': ValueError: no such configuration\. If it builds on the CPU",
    ):
        trace_forward(build, TensorSpec((1, 4)), device="meta")


def test_a_meta_trace_started_under_autocast_raises() -> None:
    with (
        torch.amp.autocast("cpu", dtype=torch.float16),
        pytest.raises(
            MetaTraceError,
            match=r"autocast is not followed on the meta device: the trace ran under "
            r"autocast\('cpu'\), and autocast\('cpu'\) would record float16 outputs",
        ),
    ):
        trace_forward(nn.Linear(4, 4), TensorSpec((4, 4)), device="meta")


def test_autocast_works_as_before_after_a_refused_meta_trace() -> None:
    with pytest.raises(MetaTraceError, match=r"autocast is not followed on the meta device"):
        trace_forward(Autocast(), TensorSpec((4, 4)), device="meta")

    with torch.amp.autocast("cpu"):
        output = nn.Linear(4, 4)(torch.randn(4, 4))

    assert output.dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


def test_only_the_factory_calls_whose_values_a_builder_reads_stay_on_the_cpu() -> None:
    calls: list[str] = []

    def build() -> nn.Module:
        width = int(torch.tensor([4.0]).sum().item())
        calls.append(str(torch.tensor([0]).device))
        return nn.Linear(width, 2)

    trace_forward(build, TensorSpec((1, 4)), device="meta")

    assert calls == ["meta"]


def test_a_meta_trace_patches_nothing_of_torchs_autocast() -> None:
    original = torch.amp.autocast_mode.autocast.__enter__
    seen: list[object] = []

    class Looks(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.amp.autocast_mode.autocast.__enter__)
            return x

    trace_forward(Looks(), TensorSpec((2,)), device="meta")

    assert seen == [original]
