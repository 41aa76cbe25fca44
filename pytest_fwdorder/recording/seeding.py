"""The seed a trace's random numbers are drawn under, where a trace fixes it.

A builder's build and a forward with output values (`values=True`) or initialization steps
(`initialization=True`) run under `torch.manual_seed(SEED)`, so that the weights, dropout's
masks and every other random draw repeat from run to run on one machine; the caller's random
states are put back afterwards. torch is imported only when a block is seeded: the values
facet, which pytest's start-up registers, names this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

SEED = 0


@contextmanager
def seeded(seed: int = SEED) -> Iterator[None]:
    """Run the block under `torch.manual_seed(seed)`, with every random state put back after."""
    import torch

    # Only CUDA generators already in use are saved: forking one would initialize CUDA.
    in_use = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []  # type: ignore[no-untyped-call]
    with torch.random.fork_rng(in_use):
        torch.manual_seed(seed)
        yield
