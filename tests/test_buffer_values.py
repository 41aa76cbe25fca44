"""Buffers' values are put back bit for bit, whether copied as one flat group or one by one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.recording.buffer_values import BufferValues


class NegatesItsZeros(nn.Module):
    """Turns its zero statistics into -0.0 in place, as a kernel may without a version bump."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("statistics", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.statistics.mul_(-1)
        return x


def test_zeros_forward_turned_into_minus_zeros_come_back_as_plus_zeros() -> None:
    model = NegatesItsZeros()
    minus_zeros = torch.zeros(4).mul_(-1)
    # The oracle: values compare equal, only the sign bit tells them apart.
    assert torch.equal(minus_zeros, torch.zeros(4))
    assert torch.signbit(minus_zeros).all()

    trace_forward(model, torch.ones(1))

    assert not torch.signbit(model.statistics).any()


class ChangesEveryKind(nn.Module):
    """Buffers of several dtypes and dimension counts, each changed in place by forward."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("counter", torch.tensor(3))
        self.register_buffer("halves", torch.arange(4, dtype=torch.float16))
        self.register_buffer("flags", torch.tensor([True, False]))
        self.register_buffer("matrix", torch.arange(6.0).reshape(2, 3).t())  # not contiguous
        self.register_buffer("unknown", torch.tensor([float("nan"), 1.0]))
        self.register_buffer("steady", torch.tensor([float("nan"), 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.counter.add_(1)
        self.halves.mul_(2)
        self.flags.logical_not_()
        self.matrix.add_(1)
        self.unknown.fill_(0)
        return x


def test_buffers_of_every_dtype_and_shape_forward_changed_are_put_back() -> None:
    model = ChangesEveryKind()
    before = {name: buffer.clone() for name, buffer in model.named_buffers()}
    strides = model.matrix.stride()
    # The oracle can fail: a forward outside a trace changes every buffer but the steady one.
    changed = ChangesEveryKind()
    changed(torch.ones(1))
    assert [
        name
        for name, buffer in changed.named_buffers()
        if not torch.equal(buffer.nan_to_num(), before[name].nan_to_num())
    ] == ["counter", "halves", "flags", "matrix", "unknown"]

    trace_forward(model, torch.ones(1))

    for name, buffer in model.named_buffers():
        assert buffer.dtype == before[name].dtype, name
        assert torch.equal(buffer.nan_to_num(), before[name].nan_to_num()), name
    assert model.matrix.stride() == strides
    assert model.unknown.isnan().tolist() == [True, False]


def test_buffers_forward_leaves_alone_keep_their_version() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    versions = [buffer._version for buffer in model.buffers()]

    trace_forward(model, torch.randn(1, 3, 8, 8))

    assert [buffer._version for buffer in model.buffers()] == versions


def test_a_train_mode_batchnorm_is_put_back_bit_for_bit_in_one_group_per_dtype() -> None:
    model = nn.Sequential(nn.BatchNorm1d(3), nn.BatchNorm1d(3)).train()
    values = BufferValues()
    buffers = list(model.buffers())
    before = [buffer.clone() for buffer in buffers]
    values.add(buffers)
    # Two groups: the four f32 statistics, the two i64 counters; nothing cloned alone.
    assert [len(group.buffers) for group in values.groups] == [4, 2]
    assert values.singles == []

    model(torch.randn(5, 3))
    assert not all(map(torch.equal, buffers, before))  # the oracle can fail
    values.put_back()

    assert all(map(torch.equal, model.buffers(), before))
    assert all(buffer is now for buffer, now in zip(buffers, model.buffers(), strict=True))


def test_buffers_on_meta_are_put_back_without_comparing_values() -> None:
    buffers = [torch.zeros(3, device="meta"), torch.zeros((), device="meta")]
    values = BufferValues()
    values.add(buffers)

    values.put_back()  # meta tensors hold no values to compare: this must not raise

    assert [tuple(buffer.shape) for buffer in buffers] == [(3,), ()]


def test_a_sparse_buffer_is_copied_on_its_own_and_put_back() -> None:
    sparse = torch.tensor([0.0, 2.0, 0.0]).to_sparse()
    dense = torch.tensor([1.0, 2.0])
    values = BufferValues()
    values.add([sparse, dense])
    assert [buffer is sparse for buffer, _ in values.singles] == [True]

    sparse.mul_(3)
    dense.mul_(3)
    values.put_back()

    assert sparse.to_dense().tolist() == [0.0, 2.0, 0.0]
    assert dense.tolist() == [1.0, 2.0]


class Masked(nn.Module):
    """A weight times a fixed mask buffer: autograd saves the mask for backward."""

    def __init__(self, mask_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, 3))
        self.register_buffer("mask", torch.tril(torch.ones(3, 3)).reshape(mask_shape))
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x @ (self.weight * self.mask.reshape(3, 3)))


def gradient_without_a_trace(mask_shape: tuple[int, ...], train: bool) -> torch.Tensor:
    """The oracle: the weight's gradient of the same forward and backward, no trace between."""
    torch.manual_seed(0)
    model = Masked(mask_shape).train(train)
    model(torch.ones(2, 3) + torch.arange(3.0)).sum().backward()
    assert model.weight.grad is not None
    return model.weight.grad


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("mask_shape", [(3, 3), (9,)], ids=["2-d mask", "1-d mask"])
def test_a_trace_between_the_users_forward_and_backward_leaves_the_saved_buffers_alone(
    mask_shape: tuple[int, ...], train: bool
) -> None:
    # Issue 37's put-back must not write a buffer forward did not change: autograd checks the
    # version of every tensor it saved, and a rewritten mask fails the user's own backward.
    torch.manual_seed(0)
    model = Masked(mask_shape).train(train)
    inputs = torch.ones(2, 3) + torch.arange(3.0)
    loss = model(inputs).sum()
    version = model.mask._version

    trace_forward(model, inputs)

    assert model.mask._version == version
    loss.backward()
    assert model.weight.grad is not None
    assert torch.equal(model.weight.grad, gradient_without_a_trace(mask_shape, train))


class OddViews(nn.Module):
    """A conjugate view forward doubles, and an expanded buffer (stride 0) it only reads."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("conjugate", (torch.arange(3.0) * 1j + 1).conj())
        self.register_buffer("row", torch.zeros(1).expand(4), persistent=False)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.conjugate.mul_(2)
        return self.norm(x + self.row)


def test_conjugate_and_expanded_buffers_are_put_back_in_train_mode() -> None:
    model = OddViews().train()
    before = model.conjugate.resolve_conj().clone()
    statistics = model.norm.running_mean.clone()

    trace_forward(model, torch.randn(3, 4))

    assert model.conjugate.is_conj()
    assert torch.equal(model.conjugate.resolve_conj(), before)
    assert model.row.stride() == (0,)
    assert torch.equal(model.norm.running_mean, statistics)
