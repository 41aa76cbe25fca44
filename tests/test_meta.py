"""Tracing without compute: meta device, model builders and TensorSpec inputs."""

from __future__ import annotations

import typing

import pytest
import torch
import torchvision
from torch import nn

from pytest_fwdorder import MetaTraceError, TensorSpec, trace_forward


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


def test_a_builder_that_returns_something_else_is_named_in_the_error() -> None:
    def build() -> object:
        return "not a model"

    with pytest.raises(
        TypeError,
        match=r"called '.*build' as a zero-argument builder and got 'str', not an nn.Module",
    ):
        trace_forward(build, torch.randn(1), device="meta")  # type: ignore[arg-type]


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
