"""Buffers' values: copied before a trace, put back after it, in as few torch calls as can be.

BatchNorm's kernel updates its running statistics in place without bumping the version
counter, so whether a buffer changed cannot be told from its version: every buffer's values
are copied. A model holds many small buffers (ResNet-50: 159, 53 BatchNorm layers' running
statistics and counters), and a copy per buffer costs more in calls than in bytes. So the
plain 0-d and 1-d buffers of one dtype and device are copied as one flat tensor (one
`torch.cat` or `torch.stack`), compared with the same flat read of them after forward, bit
for bit, and only if any bit differs are the buffers that differ copied back (one
multi-tensor copy). Buffers of other shapes or kinds (subclasses such as DTensor, sparse
tensors, uncommon dtypes) are cloned one by one, and each is copied back only if it differs.

A buffer forward did not change is never written: autograd checks the version of every
tensor it saved for backward, so a mask rewritten with its own values would fail a
`backward()` the user started before the trace.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from itertools import compress, repeat
from typing import NamedTuple

import torch

__all__ = ["BufferValues", "copy_all"]

# The dtypes `torch.cat` joins and a uint8 view compares bit for bit on every device.
_GROUPED_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)
_TENSOR_METADATA = operator.attrgetter("shape", "dtype", "device")
_GROUP_KEY = operator.attrgetter("dtype", "device", "ndim", "layout")
_SHAPE = operator.attrgetter("shape")
_STRIDED = torch.strided
_IS_INFERENCE = operator.methodcaller("is_inference")
# `buffer.clone()`, as a subclass that overrides clone has it.
_CLONE = operator.methodcaller("clone")
# torch.optim's multi-tensor copy; a loop of copy_ where a torch release lacks it.
_FOREACH_COPY: Callable[[list[torch.Tensor], list[torch.Tensor]], object] | None = getattr(
    torch, "_foreach_copy_", None
)


class _Group(NamedTuple):
    """Buffers of one dtype, device and dimension count (0 or 1), with one flat copy."""

    buffers: list[torch.Tensor]
    metadata: list[tuple[torch.Size, torch.dtype, torch.device]]
    flat: torch.Tensor


class BufferValues:
    """Copies of buffers' values, taken as buffers are added, put back by `put_back`."""

    def __init__(self) -> None:
        self.groups: list[_Group] = []
        # (buffer, its clone): the buffers not grouped, and a lazy module's initialized ones.
        self.singles: list[tuple[torch.Tensor, torch.Tensor]] = []

    def add(self, buffers: list[torch.Tensor]) -> None:
        """Copy these buffers' values (each buffer once: the caller removes repeats)."""
        if not buffers:
            return
        singles: list[torch.Tensor] = buffers
        with torch.no_grad():  # copies of buffers that require grad must not
            if all(map(operator.is_, map(type, buffers), repeat(torch.Tensor))):
                keys = list(map(_GROUP_KEY, buffers))
                singles = []
                # One pass in C per kind of buffer: a model holds a kind or two.
                for key in dict.fromkeys(keys):
                    kind = list(compress(buffers, map(key.__eq__, keys)))
                    if key[2] > 1 or key[0] not in _GROUPED_DTYPES or key[3] is not _STRIDED:
                        singles += kind
                        continue
                    metadata = list(zip(map(_SHAPE, kind), repeat(key[0]), repeat(key[1])))
                    self.groups.append(_Group(kind, metadata, _flat_values(kind)))
            self.singles += zip(singles, map(_CLONE, singles), strict=True)

    def add_copies(self, copies: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Take these (buffer, copy) pairs as buffers' values to put back."""
        self.singles += copies

    def put_back(self) -> None:
        """Give every buffer its values back: in place, or its `.data` where forward
        replaced that (a new shape, dtype or device)."""
        with torch.no_grad():
            for group in self.groups:
                if list(map(_TENSOR_METADATA, group.buffers)) != group.metadata:
                    self._put_back_one_by_one(group)
                elif _differs(_flat_values(group.buffers), group.flat):
                    changed = [
                        (buffer, piece)
                        for buffer, piece in zip(group.buffers, _pieces(group), strict=True)
                        if not _same_bits(buffer, piece)
                    ]
                    targets = [buffer for buffer, _ in changed]
                    with _inference_mode_if_needed(targets):
                        _write_back(targets, [piece for _, piece in changed])
            _put_back_singles(self.singles)

    @staticmethod
    def _put_back_one_by_one(group: _Group) -> None:
        """A group where forward replaced some buffer's `.data`: that buffer gets a copy of
        its original as its `.data`, the others their values in place."""
        targets: list[torch.Tensor] = []
        sources: list[torch.Tensor] = []
        for buffer, metadata, piece in zip(
            group.buffers, group.metadata, _pieces(group), strict=True
        ):
            if _TENSOR_METADATA(buffer) != metadata:
                buffer.data = piece.clone()
            elif not _same_bits(buffer, piece):
                targets.append(buffer)
                sources.append(piece)
        with _inference_mode_if_needed(targets):
            _write_back(targets, sources)


def _inference_mode_if_needed(buffers: list[torch.Tensor]) -> AbstractContextManager[object]:
    """Inference mode where a buffer is an inference tensor (made under it), which takes
    in-place writes only there; normal tensors take them in it too."""
    if any(map(_IS_INFERENCE, buffers)):
        return torch.inference_mode()
    return nullcontext()


def _flat_values(buffers: list[torch.Tensor]) -> torch.Tensor:
    """The values of buffers of one dtype, device and dimension count, in one new tensor."""
    if buffers[0].ndim == 0:
        return torch.stack(buffers)
    return torch.cat(buffers)


def _pieces(group: _Group) -> Sequence[torch.Tensor]:
    """Views of a group's flat copy, one per buffer, each of its buffer's shape."""
    if group.buffers[0].ndim == 0:
        return torch.unbind(group.flat)
    return torch.split(group.flat, [metadata[0][0] for metadata in group.metadata])


def _differs(now: torch.Tensor, before: torch.Tensor) -> bool:
    """Whether two flat tensors differ in any bit (0.0 and -0.0 do; a NaN equals itself)."""
    if now.device.type == "meta":  # no values to compare: put back as if changed
        return True
    return not torch.equal(_bits(now), _bits(before))


def _bits(flat: torch.Tensor) -> torch.Tensor:
    """A flat tensor's bytes as integers, as wide as its size allows: `torch.equal` takes
    about as long per element whatever their width."""
    size = flat.numel() * flat.element_size()
    as_bytes = flat.view(torch.uint8)
    for dtype, width in _WIDE_INTEGERS:
        if size % width == 0:
            return as_bytes.view(dtype)
    return as_bytes


_WIDE_INTEGERS = ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2))


def _same_bits(buffer: torch.Tensor, copy: torch.Tensor) -> bool:
    """Whether a buffer holds its copy's values bit for bit; False where that is not read
    (meta, sparse, quantized, subclass and uncommon dtypes: a byte view of a quantized tensor
    crashes torch): those are copied back."""
    if (
        type(buffer) is not torch.Tensor
        or buffer.layout is not _STRIDED
        or buffer.dtype not in _GROUPED_DTYPES
        or buffer.device.type == "meta"
    ):
        return False
    try:
        return torch.equal(_bytes(buffer), _bytes(copy))
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def _put_back_singles(copies: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Copy back buffers copied one by one: inference ones under inference mode."""
    if not copies:
        return
    targets: list[torch.Tensor] = []
    sources: list[torch.Tensor] = []
    inference_buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
    for buffer, copy in copies:
        if _TENSOR_METADATA(buffer) != _TENSOR_METADATA(copy):
            buffer.data = copy  # forward replaced its `.data`: put the original back
        elif _same_bits(buffer, copy):
            continue
        elif buffer.is_inference():
            inference_buffers.append((buffer, copy))
        elif type(buffer) is torch.Tensor:
            targets.append(buffer)
            sources.append(copy)
        else:  # a subclass (DTensor) may have no rule for the multi-tensor copy
            buffer.copy_(copy)
    _write_back(targets, sources)
    if inference_buffers:
        with torch.inference_mode():
            _write_back(*map(list, zip(*inference_buffers, strict=True)))


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's values as one row of bytes (a copy where it is not contiguous)."""
    return tensor.contiguous().view(-1).view(torch.uint8)


def _write_back(targets: list[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """`copy_all` into each strided buffer's `.data`: its values go back without bumping its
    version. BatchNorm's kernel changed them without a bump; a bump here would fail a
    backward the user started before the trace, whose saved tensors autograd checks by
    version, though the values it saved are the ones put back. (A sparse tensor's `.data` is
    another tensor: it is written itself.)
    """
    copy_all([target.data if target.layout is _STRIDED else target for target in targets], sources)


def copy_all(targets: list[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """`target.copy_(source)` for each pair, in one multi-tensor copy where torch has it."""
    if not targets:
        return
    # The multi-tensor copy takes no conjugate or negative view (a complex buffer's `.conj()`).
    if _FOREACH_COPY is not None and not any(
        target.is_conj() or target.is_neg() for target in targets
    ):
        _FOREACH_COPY(targets, list(sources))
        return
    for target, source in zip(targets, sources, strict=True):
        target.copy_(source)
