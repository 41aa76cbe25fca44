"""A module moved to another parent pairs with itself: the oracle is the module objects.

The model is changed in place, its block moved from the end of `enc` to the start of `dec`,
so which old module became which new one is known without any alignment: the paths
`named_modules` gives each module object before and after. The diff's pairs must agree with
it for every call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pytest_fwdorder import TraceDiff, trace_forward


class EncoderDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        # Every layer 8 wide, so that `enc` and `dec` look alike.
        block = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.LayerNorm(8))
        self.enc = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), block)
        self.dec = nn.Sequential(nn.Linear(8, 8), nn.GELU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


def move_the_block(model: nn.Module) -> None:
    block = model.enc[2]
    del model.enc[2]
    model.dec.insert(0, block)


def swap_the_halves(model: nn.Module) -> None:
    model.enc, model.dec = model.dec, model.enc


def changed(change: Callable[[nn.Module], None]) -> tuple[TraceDiff, dict[str, str]]:
    """The diff of the model before and after `change`, and the oracle: each old module's
    path -> the path the same object has after it."""
    model, inputs = EncoderDecoder().eval(), torch.randn(2, 8)
    paths_before = {id(module): path for path, module in model.named_modules()}
    before = trace_forward(model, inputs)
    change(model)
    after = trace_forward(model, inputs)
    oracle = {paths_before[id(module)]: path for path, module in model.named_modules()}
    return before.diff(after), {old or "<root>": new or "<root>" for old, new in oracle.items()}


def pairs_of(difference: TraceDiff) -> dict[str, str]:
    return {
        difference.old_lines[old].path: difference.new_lines[new].path
        for old, new in difference.pairs
    }


def test_a_block_moved_to_another_parent_pairs_as_its_objects_do() -> None:
    difference, oracle = changed(move_the_block)
    assert pairs_of(difference) == oracle
    assert difference.summary().splitlines() == [
        "11 calls before, 11 after: 1 move to another parent, 2 calls renamed",
        "enc.2 (Sequential, with 3 nested calls) moved to dec.0",
        "2 calls renamed: dec.0 (Linear) -> dec.1, dec.1 (GELU) -> dec.2",
    ]


def test_the_identity_oracle_tells_a_move_from_a_swap() -> None:
    _, moved = changed(move_the_block)
    _, swapped = changed(swap_the_halves)
    assert moved["enc"] == "enc"
    assert moved["enc.2"] == "dec.0"
    assert swapped["enc"] == "dec"  # what the diff said before for the move: a swap
