"""Independent checks: torch.fx's leaf call order and shapes, and byte-identical goldens."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torchvision
from fx_oracle import fx_leaf_calls, our_leaf_calls
from torch import nn

from pytest_fwdorder import trace_forward


@pytest.mark.parametrize(
    "builder",
    [
        torchvision.models.resnet18,
        torchvision.models.mobilenet_v3_small,
        torchvision.models.squeezenet1_1,
    ],
    ids=lambda builder: builder.__name__,
)
def test_leaf_calls_and_shapes_match_torch_fx(builder: object) -> None:
    torch.manual_seed(0)
    model = builder(weights=None).eval()  # type: ignore[operator]
    inputs = torch.randn(1, 3, 96, 96)

    trace = trace_forward(model, inputs)

    assert our_leaf_calls(model, trace) == fx_leaf_calls(model, inputs)


def test_the_oracle_notices_a_missing_call() -> None:
    # The comparison above must be able to fail: drop one call and it does.
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    inputs = torch.randn(1, 2)
    trace = trace_forward(model, inputs)
    del trace.calls[2]

    assert our_leaf_calls(model, trace) != fx_leaf_calls(model, inputs)


_RENDER_IN_A_FRESH_PROCESS = textwrap.dedent(
    """
    import sys, torch, torchvision
    from pytest_fwdorder import trace_forward
    model = torchvision.models.squeezenet1_1(weights=None).eval()
    sys.stdout.write(trace_forward(model, torch.randn(1, 3, 64, 64)).render())
    """
)


def test_golden_text_is_byte_identical_across_processes_and_hash_seeds() -> None:
    outputs = []
    for seed in ("1", "2"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        finished = subprocess.run(
            [sys.executable, "-c", _RENDER_IN_A_FRESH_PROCESS],
            capture_output=True,
            text=True,
            env=environment,
            check=True,
        )
        outputs.append(finished.stdout)
    here = trace_forward(
        torchvision.models.squeezenet1_1(weights=None).eval(), torch.randn(1, 3, 64, 64)
    ).render()

    assert outputs[0] == outputs[1] == here
    assert outputs[0].count("\n") > 20
