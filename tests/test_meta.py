"""Tracing without compute: meta device, model builders and TensorSpec inputs."""

from __future__ import annotations

import collections
import typing

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
import torchvision
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_fwdorder import MetaTraceError, TensorSpec, trace_forward
from pytest_fwdorder.recording.meta.kernels import MetaKernelCache


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["resnet50", "vit_b_16", "mobilenet_v3_large", "convnext_tiny", "swin_t", "efficientnet_b0"],
)
def test_meta_and_cpu_runs_give_byte_identical_goldens(name: str) -> None:
    def build() -> nn.Module:
        return torchvision.models.get_model(name, weights=None).eval()

    on_cpu = trace_forward(build(), torch.randn(1, 3, 224, 224))
    on_meta = trace_forward(build, TensorSpec((1, 3, 224, 224)), device="meta")

    assert on_meta.render() == on_cpu.render()
    assert on_meta[0].input_tensors[0].device == "meta"


def test_a_builder_on_meta_never_allocates_real_parameters() -> None:
    built: list[nn.Module] = []

    def build() -> nn.Module:
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
        built.append(model)
        return model

    trace_forward(build, TensorSpec((4, 8)), device="meta")

    tensors = [*built[0].parameters(), *built[0].buffers()]
    assert tensors
    assert {tensor.device.type for tensor in tensors} == {"meta"}


def test_an_existing_model_traced_on_meta_is_left_on_its_device_with_its_values() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    before = {name: value.clone() for name, value in model.state_dict().items()}

    trace = trace_forward(model, torch.randn(4, 8), device="meta")

    assert trace[-1].output_shapes == [(4, 2)]
    assert trace[-1].output_tensors[0].device == "meta"
    for name, value in model.state_dict().items():
        assert value.device.type == "cpu"
        assert torch.equal(value, before[name])


def test_tensor_specs_work_on_cpu_too_with_their_dtype() -> None:
    trace = trace_forward(nn.Embedding(10, 3), TensorSpec((2, 5), dtype=torch.int64))

    assert trace[0].input_tensors[0].dtype == "i64"
    assert trace[0].output_shapes == [(2, 5, 3)]


def test_a_tensor_spec_with_a_bad_shape_says_how_to_write_it() -> None:
    with pytest.raises(
        ValueError, match=r"TensorSpec shape must be non-negative ints, got \(1, -3\)"
    ):
        TensorSpec((1, -3))


@pytest.mark.parametrize(
    ("shape", "bad"),
    [
        ({0: 1}, r"got dict \{0: 1\}"),
        ((3, True), r"got True in \(3, True\)"),
        ((2.0,), r"got 2\.0"),
    ],
)
def test_a_tensor_spec_shape_that_is_not_ints_is_a_type_error(shape: object, bad: str) -> None:
    """Issue 8, defect 5: `TensorSpec({0: 1})` and `TensorSpec((3, True))` were accepted."""
    with pytest.raises(TypeError, match=bad):
        TensorSpec(shape)  # type: ignore[arg-type]


def test_tensor_specs_nested_in_containers_and_keywords_are_placed() -> None:
    class TakesPair(nn.Module):
        def forward(
            self, pair: tuple[torch.Tensor, torch.Tensor], *, scale: torch.Tensor
        ) -> torch.Tensor:
            return (pair[0] + pair[1]) * scale

    trace = trace_forward(
        TakesPair(), (TensorSpec((2, 3)), TensorSpec((2, 3))), scale=TensorSpec(()), device="meta"
    )

    assert trace[0].input_shapes == [(2, 3), (2, 3), ()]


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gate(x))


class Gate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # needs real values
            return x
        return -x


def test_a_forward_that_needs_real_values_gets_an_error_naming_where() -> None:
    with pytest.raises(
        MetaTraceError,
        match=r"forward raised on the meta device in gate \(Gate, call 1 of that module, call 2 "
        r"of the trace\): RuntimeError: .*meta.* Trace on the CPU instead",
    ):
        trace_forward(DataDependent(), torch.randn(1, 4), device="meta")


def test_the_same_model_traces_on_cpu() -> None:
    trace = trace_forward(DataDependent(), torch.randn(1, 4))

    assert [call.path for call in trace] == ["", "gate", "head"]


class StricterOnMeta(nn.Module):
    """Raises what torch's meta kernels raise where the CPU kernel is lenient (Mixtral)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "meta":
            raise RuntimeError("Expected mat_a to be BFloat16")
        return x


def test_a_failure_only_on_meta_is_a_meta_trace_error_with_the_original_as_cause() -> None:
    """Issue 8, defect 8: a failure only on meta was not a MetaTraceError with its cause."""
    with pytest.raises(MetaTraceError, match="raised on the meta device") as raised:
        trace_forward(nn.Sequential(StricterOnMeta()), TensorSpec((1, 2)), device="meta")

    assert isinstance(raised.value.__cause__, RuntimeError)
    assert "trace on the CPU" in str(raised.value).replace("Trace", "trace")
    assert "0 (StricterOnMeta" in str(raised.value)


def test_a_builder_that_returns_something_else_is_named_in_the_error() -> None:
    def build() -> object:
        return "not a model"

    with pytest.raises(
        TypeError,
        match=r"called '.*build' as a zero-argument builder and got 'str', not an nn.Module",
    ):
        trace_forward(build, torch.randn(1), device="meta")  # type: ignore[arg-type]


def test_a_function_that_needs_arguments_is_not_taken_for_a_builder() -> None:
    """Issue 8, defect 12: a function that needs arguments was taken for a builder."""
    with pytest.raises(
        TypeError,
        match=r"zero-argument function that builds one, got 'relu', which requires 'input'",
    ):
        trace_forward(F.relu, torch.randn(2))


def test_a_bound_method_of_a_builder_object_is_a_builder() -> None:
    class Factory:
        def build(self) -> nn.Module:
            return nn.Linear(3, 1)

    trace = trace_forward(Factory().build, TensorSpec((2, 3)), device="meta")

    assert trace[0].module_type == "Linear"


def test_a_builder_that_computes_with_real_values_traces_on_meta() -> None:
    def build() -> nn.Module:
        width = int(torch.tensor([4.0]).sum().item())  # a size computed from a tensor
        return nn.Sequential(nn.Linear(width, 2), nn.BatchNorm1d(2))

    on_meta = trace_forward(build, TensorSpec((3, 4)), device="meta")

    assert on_meta.render() == trace_forward(build(), torch.randn(3, 4)).render()


def test_a_builder_that_shares_a_parameter_keeps_it_tied_on_meta() -> None:
    """Found reviewing 0.2.0: a builder's shared parameter must stay tied on meta."""

    def build() -> nn.Module:
        model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
        model[1].weight = model[0].weight
        return model

    on_meta = trace_forward(build, TensorSpec((1, 2)), device="meta")

    assert on_meta.render() == trace_forward(build(), torch.randn(1, 2)).render()
    assert on_meta.tied == (("0.weight", ("1.weight",)),)


@pytest.mark.slow
def test_regnet_which_sizes_its_stages_with_item_traces_on_meta_like_on_the_cpu() -> None:
    def build() -> nn.Module:
        return torchvision.models.regnet_y_400mf(weights=None).eval()

    on_meta = trace_forward(build, TensorSpec((1, 3, 224, 224)), device="meta")

    assert on_meta.render() == trace_forward(build(), torch.randn(1, 3, 224, 224)).render()


def test_a_builder_that_fails_on_meta_says_to_build_on_the_cpu_instead() -> None:
    def build() -> nn.Module:
        raise ValueError("no such configuration")

    with pytest.raises(
        MetaTraceError,
        match=r"building the model for the meta device failed .* pass the model with device='meta'",
    ) as raised:
        trace_forward(build, TensorSpec((1, 4)), device="meta")

    assert isinstance(raised.value.__cause__, ValueError)


def test_the_meta_registration_hooks_are_gone_after_a_build() -> None:
    from torch.nn.modules import module as torch_module

    before = (
        len(torch_module._global_parameter_registration_hooks),
        len(torch_module._global_buffer_registration_hooks),
    )

    trace_forward(lambda: nn.Linear(2, 2), TensorSpec((1, 2)), device="meta")

    assert nn.Linear(2, 2).weight.device.type == "cpu"
    assert (
        len(torch_module._global_parameter_registration_hooks),
        len(torch_module._global_buffer_registration_hooks),
    ) == before


def test_the_same_model_built_on_cpu_traces_on_meta() -> None:
    trace = trace_forward(nn.Linear(4, 2), TensorSpec((1, 4)), device="meta")

    assert trace[0].output_tensors[0].device == "meta"


def test_tensor_specs_inside_a_namedtuple_are_placed() -> None:
    class Pair(typing.NamedTuple):
        left: torch.Tensor
        right: torch.Tensor

    class AddsPair(nn.Module):
        def forward(self, pair: Pair) -> torch.Tensor:
            return pair.left + pair.right

    trace = trace_forward(AddsPair(), Pair(TensorSpec((2,)), TensorSpec((2,))), device="meta")

    assert trace[0].output_shapes == [(2,)]


# --- repeated meta kernels answered from a cache ---


class KernelCounter(TorchDispatchMode):
    """Counts the kernels that run: pushed before the cache, it sees only what the cache
    lets through; pushed after it (the caller's mode), it sees every operation first."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(
        self,
        func: typing.Any,
        types: object,
        args: tuple[typing.Any, ...] = (),
        kwargs: dict[str, typing.Any] | None = None,
    ) -> typing.Any:
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))


def repeated_blocks() -> nn.Module:
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU()) for _ in range(4)]
    )


def test_a_meta_kernel_repeated_on_the_same_shapes_runs_once() -> None:
    with torch.device("meta"):
        model = repeated_blocks()
        inputs = torch.empty(3, 16)
    with KernelCounter() as without_cache:
        model(inputs)

    with KernelCounter() as under_cache, MetaKernelCache():
        output = model(inputs)

    assert without_cache.counts["aten.native_layer_norm.default"] == 4
    assert under_cache.counts["aten.native_layer_norm.default"] == 1
    assert under_cache.counts["aten.addmm.default"] == 1
    assert (output.shape, output.stride(), output.dtype, output.device.type) == (
        (3, 16),
        (16, 1),
        torch.float32,
        "meta",
    )


def test_views_and_in_place_operations_run_their_kernel_every_time() -> None:
    def views_and_in_place(tensor: torch.Tensor) -> None:
        for _ in range(3):
            tensor.view(2, 8).t().add_(1)

    tensor = torch.empty(16, device="meta")
    with KernelCounter() as counter, MetaKernelCache():
        views_and_in_place(tensor)

    assert counter.counts["aten.add_.Tensor"] == 3
    assert counter.counts["aten.view.default"] == 3
    assert tensor._version == 3


def test_an_operation_that_writes_into_an_argument_runs_its_kernel_every_time() -> None:
    # It returns new tensors and writes the running statistics it is given.
    batch_norm = torch.ops.aten._native_batch_norm_legit.default
    inputs, weight, bias, running_mean, running_var = (
        torch.empty(shape, device="meta") for shape in ((2, 4), 4, 4, 4, 4)
    )
    with KernelCounter() as counter, MetaKernelCache():
        for _ in range(2):
            batch_norm(inputs, weight, bias, running_mean, running_var, True, 0.1, 1e-5)

    assert counter.counts["aten._native_batch_norm_legit.default"] == 2


def test_a_random_operation_runs_its_kernel_every_time() -> None:
    tensor = torch.empty(8, device="meta")
    with KernelCounter() as counter, MetaKernelCache():
        for _ in range(2):
            torch.ops.aten.native_dropout.default(tensor, 0.5, True)

    assert counter.counts["aten.native_dropout.default"] == 2


def test_an_output_that_shares_its_input_storage_keeps_sharing_it() -> None:
    # _unsafe_view returns an alias of its input although its schema says nothing of it.
    tensor = torch.empty(2, 3, device="meta")
    with MetaKernelCache():
        first = torch.ops.aten._unsafe_view(tensor, (6,))
        second = torch.ops.aten._unsafe_view(tensor, (6,))

    storage = tensor.untyped_storage()._cdata
    assert first.untyped_storage()._cdata == storage
    assert second.untyped_storage()._cdata == storage


def test_an_integer_and_a_float_scalar_are_different_keys() -> None:
    integers = torch.empty(3, dtype=torch.int64, device="meta")
    with MetaKernelCache():
        times_int = torch.ops.aten.mul.Scalar(integers, 2)
        times_float = torch.ops.aten.mul.Scalar(integers, 2.0)

    assert (times_int.dtype, times_float.dtype) == (torch.int64, torch.float32)


def test_a_factory_follows_a_change_of_the_default_dtype() -> None:
    previous = torch.get_default_dtype()
    try:
        with MetaKernelCache():
            first = torch.ops.aten.arange.start(0.0, 3.0, device="meta")
            torch.set_default_dtype(torch.float64)
            second = torch.ops.aten.arange.start(0.0, 3.0, device="meta")
    finally:
        torch.set_default_dtype(previous)

    assert (first.dtype, second.dtype) == (torch.float32, torch.float64)


def test_operations_on_cpu_tensors_keep_computing_real_values() -> None:
    with MetaKernelCache():
        sums = [(torch.ones(2) + 1).tolist() for _ in range(2)]

    assert sums == [[2.0, 2.0], [2.0, 2.0]]


def test_a_meta_trace_with_backward_and_ops_equals_the_cpu_trace() -> None:
    torch.manual_seed(0)
    on_cpu = trace_forward(repeated_blocks(), torch.randn(3, 16), backward=True, ops=True)

    on_meta = trace_forward(
        repeated_blocks, TensorSpec((3, 16)), device="meta", backward=True, ops=True
    )

    assert on_meta.render() == on_cpu.render()


def test_a_callers_dispatch_mode_sees_every_kernel_of_a_meta_trace() -> None:
    with KernelCounter() as counter:
        trace_forward(repeated_blocks, TensorSpec((3, 16)), device="meta")

    assert counter.counts["aten.native_layer_norm.default"] == 4
