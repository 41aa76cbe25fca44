"""The built-in describers: each library's values as stable descriptions, not `<TypeName>`."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence

from pytest_fwdorder import trace_forward
from pytest_fwdorder.golden.format import render_value
from pytest_fwdorder.recording.describe import describe_value


def described(value: object) -> str:
    return render_value(describe_value(value))


def test_a_sparse_tensor_shows_its_layout() -> None:
    assert described([torch.eye(3).to_sparse()]) == "[sparse_coo f32[3,3]]"


# torch warns that strided nested tensors are a prototype; this test is about describing one.
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_a_nested_tensor_marks_its_ragged_size() -> None:
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)])

    assert described(nested) == "nested f32[2,*,3]"


def test_a_jagged_nested_tensor_marks_its_ragged_size() -> None:
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)], layout=torch.jagged)

    assert described(nested) == "nested f32[2,*,3]"


def test_a_distribution_shows_its_batch_and_event_shapes() -> None:
    normal = torch.distributions.MultivariateNormal(torch.zeros(2, 3), torch.eye(3))

    assert described(normal) == "MultivariateNormal(batch_shape=[2], event_shape=[3])"


def test_a_numpy_array_shows_dtype_and_shape() -> None:
    assert described(numpy.zeros((2, 3), dtype=numpy.float32)) == "np.f32[2,3]"


def test_a_numpy_scalar_shows_its_dtype() -> None:
    assert described(numpy.int64(3)) == "np.i64[]"


def test_an_image_list_shows_its_tensor_and_image_sizes() -> None:
    from torchvision.models.detection.image_list import ImageList

    images = ImageList(torch.zeros(2, 3, 32, 32), [(30, 32), (32, 28)])

    assert described(images) == (
        "ImageList(tensors=f32[2,3,32,32], image_sizes=[(30, 32), (32, 28)])"
    )


def test_a_packed_sequence_shows_its_fields() -> None:
    packed = pack_sequence([torch.zeros(3, 4), torch.zeros(2, 4)])

    assert described(packed) == (
        "PackedSequence(data=f32[5,4], batch_sizes=i64[3], sorted_indices=None, "
        "unsorted_indices=None)"
    )


def test_a_dataclass_mapping_shows_its_fields_that_are_not_none() -> None:
    from collections import OrderedDict
    from dataclasses import dataclass

    @dataclass
    class Output(OrderedDict):  # type: ignore[type-arg]  # as transformers' ModelOutput
        logits: torch.Tensor | None = None
        hidden: torch.Tensor | None = None

        def __post_init__(self) -> None:
            for name in ("logits", "hidden"):
                if getattr(self, name) is not None:
                    self[name] = getattr(self, name)

    assert described(Output(logits=torch.zeros(1, 4))) == "Output(logits=f32[1,4])"


def test_a_type_no_describer_knows_shows_its_name() -> None:
    class Opaque:
        pass

    assert described(Opaque()) == "<Opaque>"


def test_a_plain_tensor_never_reaches_the_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_fwdorder import hookspecs as hooks

    asked: list[object] = []
    monkeypatch.setattr(hooks, "describe_with_plugins", lambda value, _: asked.append(value))

    described((torch.zeros(2), [torch.zeros(1)], {"a": torch.zeros(3)}))

    assert asked == []


def test_a_sparse_tensor_in_a_model_output_is_described() -> None:
    from pytest_fwdorder import trace_forward

    class Sparsify(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
            return (x.to_sparse(),)

    trace = trace_forward(Sparsify(), torch.eye(2))

    assert trace.render().endswith("<root>: Sparsify (f32[2,2]) -> (sparse_coo f32[2,2],)\n")


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
    """Found reviewing 0.3: a nested tensor passed straight to a module crashed forward."""
    trace = trace_forward(PassesThrough(), _nested())

    assert "inner: Identity (nested f32[2,*,3]) -> nested f32[2,*,3]" in trace.render()


def test_a_sparse_tensor_argument_is_described_as_sparse() -> None:
    """Found reviewing 0.3: a sparse tensor passed straight to a module was written as dense."""
    trace = trace_forward(PassesThrough(), torch.eye(3).to_sparse())

    assert "inner: Identity (sparse_coo f32[3,3]) -> sparse_coo f32[3,3]" in trace.render()


def test_describing_imports_no_library_of_its_own() -> None:
    # `before` is taken after torch's own imports (torch may import numpy itself), so
    # anything new is what describing imported.
    program = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        "from pytest_fwdorder.recording.describe import describe_value\n"
        "class Opaque: pass\n"
        "describe_value(Opaque()); describe_value(torch.eye(2).to_sparse())\n"
        "print(sorted(name for name in ('numpy', 'transformers', 'torchvision') "
        "if name in sys.modules and name not in before))\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "[]"
