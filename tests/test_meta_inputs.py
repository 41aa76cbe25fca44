"""Inputs placed on meta keep their layout and their aliasing (issue 33, defect 4).

The oracle is the CPU trace of the same inputs: `.to("meta")` made expanded views dense,
so the saved-for-backward bytes on meta were those of a copy.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pytest_fwdorder import trace_forward


class Seen(nn.Module):
    """Keeps the layout and identity of what its forward gets."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, ...]] = []

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        self.seen.append(
            tuple(
                (x.shape, x.stride(), x.storage_offset(), x.untyped_storage().nbytes(), id(x))
                for x in inputs
            )
        )
        return inputs[0] * 1


def layouts(inputs: tuple[torch.Tensor, ...], device: str | None) -> list[Any]:
    model = Seen()
    seen: list[tuple[Any, ...]] = []
    model.register_forward_hook(lambda module, args, output: seen.append(module.seen[-1]))
    trace_forward(model, *inputs, device=device)
    first = seen[0]
    ids = [entry[4] for entry in first]
    return [(*entry[:4], ids.index(entry[4])) for entry in first]


def test_the_issue_reproduction_expanded_ids_save_as_many_bytes_on_meta() -> None:
    embedding, ids = nn.Embedding(4, 3), torch.randint(0, 4, (1, 512)).expand(7, 512)
    on_cpu = trace_forward(embedding, ids, costs=True).render()
    on_meta = trace_forward(embedding, ids, costs=True, device="meta").render()

    assert "saved for backward 4,096 B" in on_cpu
    assert on_meta == on_cpu


def test_sizes_strides_offsets_and_storage_sizes_are_kept_on_meta() -> None:
    base = torch.randn(6, 8)
    inputs = (base.t(), base[2:, 1::2], torch.randn(5).expand(3, 5), torch.randn(2, 3)[:, :2])

    assert layouts(inputs, "meta") == layouts(inputs, None)


def test_the_same_input_twice_is_one_tensor_on_meta() -> None:
    x = torch.randn(2, 3)

    assert layouts((x, x, torch.randn(2, 3)), "meta") == layouts((x, x, torch.randn(2, 3)), None)


def test_inputs_sharing_a_storage_share_one_on_meta() -> None:
    base = torch.randn(4, 4)
    first, second = base[:2], base[2:]
    model = Seen()
    storages: list[int] = []

    def keep(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        storages.extend(x.untyped_storage()._cdata for x in args)

    model.register_forward_pre_hook(keep)
    trace_forward(model, first, second, device="meta")

    assert storages[0] == storages[1]


def test_the_layout_oracle_can_fail() -> None:
    # What `.to("meta")` gave before: a dense copy, whose strides the oracle tells apart.
    expanded = torch.randn(5).expand(3, 5)

    assert layouts((expanded.to("meta"),), "meta") != layouts((expanded,), None)


def test_an_input_that_requires_grad_still_does_on_meta() -> None:
    x = torch.randn(2, 3, requires_grad=True).expand(4, 2, 3)
    trace = trace_forward(nn.Linear(3, 2), x, backward=True, device="meta")

    assert trace.render() == trace_forward(nn.Linear(3, 2), x, backward=True).render()
