"""Trace DDP, FSDP2 and tensor-parallel models on a two-process gloo group on the CPU.

Run as `python tests/distributed_worker.py OUTPUT_DIRECTORY`: spawns two ranks that meet on
127.0.0.1 at a free port, and each rank writes, per scenario, its golden text
(`<scenario>.rank<N>.txt`) and the warnings tracing emitted (`<scenario>.rank<N>.json`).
`tests/test_distributed.py` runs it with a timeout and reads what it wrote; the builders
here are imported there too, to trace the same models unwrapped in the test's own process.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn

from pytest_fwdorder import trace_forward

WORLD_SIZE = 2
BATCH = 2
# Each rank's collectives, and the whole run, give up after this long instead of hanging.
TIMEOUT_SECONDS = 60
# The warnings torch.distributed emits on a CPU-only box are about its set-up, not ours.
_IGNORED_WARNING_MODULES = ("torch",)


def build_mlp() -> nn.Sequential:
    """The model of the issue: `Sequential(Linear(8, 16), ReLU(), Linear(16, 4))`, seeded."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def mlp_inputs() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, 8, generator=generator)


def _trace_ddp(mesh: object) -> str:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(build_mlp())
    return trace_forward(model, mlp_inputs()).render()


def _trace_fsdp(mesh: object) -> str:
    from torch.distributed.fsdp import fully_shard

    model = build_mlp()
    fully_shard(model[0], mesh=mesh)  # type: ignore[arg-type]
    fully_shard(model[2], mesh=mesh)  # type: ignore[arg-type]
    fully_shard(model, mesh=mesh)  # type: ignore[arg-type]
    first = trace_forward(model, mlp_inputs()).render()
    # The model must still train after a trace: FSDP2's state and the parameters agree.
    model(mlp_inputs()).sum().backward()
    second = trace_forward(model, mlp_inputs()).render()
    if first != second:
        raise AssertionError(f"FSDP2 golden changed after a training step:\n{second}")
    return first


def _trace_tensor_parallel(mesh: object, **options: object) -> str:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    model = parallelize_module(
        build_mlp(),
        mesh,  # type: ignore[arg-type]
        {"0": ColwiseParallel(), "2": RowwiseParallel()},
    )
    return trace_forward(model, mlp_inputs(), **options).render()  # type: ignore[arg-type]


def _trace_tensor_parallel_local_shapes(mesh: object) -> str:
    return _trace_tensor_parallel(mesh, show_local_shapes=True)


class CountsSteps(nn.Module):
    """A module whose forward updates a buffer in place, as BatchNorm's counter does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        return x + 1


def _trace_dtensor_buffer(mesh: object) -> str:
    from torch.distributed.tensor import distribute_module

    model = distribute_module(CountsSteps(), mesh)  # type: ignore[arg-type]  # buffers replicated
    golden = trace_forward(model, mlp_inputs()).render()
    steps = model.steps.full_tensor().item()  # type: ignore[operator]
    if steps != 0:
        raise AssertionError(f"a DTensor buffer was not put back: steps is {steps}, not 0")
    return golden


SCENARIOS: dict[str, Callable[[object], str]] = {
    "ddp": _trace_ddp,
    "fsdp": _trace_fsdp,
    "tensor_parallel": _trace_tensor_parallel,
    "tensor_parallel_local_shapes": _trace_tensor_parallel_local_shapes,
    "dtensor_buffer": _trace_dtensor_buffer,
}


def run_rank(rank: int, port: int, output: str) -> None:
    import torch.distributed as distributed
    from torch.distributed.device_mesh import init_device_mesh

    distributed.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=TIMEOUT_SECONDS),
    )
    try:
        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        for name, scenario in SCENARIOS.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                golden = scenario(mesh)
            ours = [
                {"category": warning.category.__name__, "message": str(warning.message)}
                for warning in caught
                if not warning.category.__module__.startswith(_IGNORED_WARNING_MODULES)
                and "torch" not in Path(warning.filename).parts
            ]
            directory = Path(output)
            (directory / f"{name}.rank{rank}.txt").write_text(golden)
            (directory / f"{name}.rank{rank}.json").write_text(json.dumps(ours, indent=1))
            distributed.barrier()
    finally:
        distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> None:
    output = sys.argv[1]
    # Gloo picks its network interface from the host name; keep it on the loopback device.
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    ranks = torch.multiprocessing.spawn(
        run_rank, args=(free_port(), output), nprocs=WORLD_SIZE, join=False
    )
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while not ranks.join(timeout=1):  # raises if a rank failed
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            raise SystemExit(f"the {WORLD_SIZE} ranks did not finish in {TIMEOUT_SECONDS} s")


if __name__ == "__main__":
    main()
