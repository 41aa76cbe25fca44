"""`costs=True` on every model torchvision lists, against torch's own `FlopCounterMode`.

The total FLOPs of each trace equal `FlopCounterMode`'s for the same model and inputs, which
counts with the same formulas but attributes nothing to calls: the oracle for "a module
called three times costs three times, a parent does not count its children twice". Models
whose forward runs on meta are traced there (no weights allocated); the detection models
that need real values on the CPU with seeded weights and inputs. Quantized models have no
FLOP formulas: their kernels must be named as uncounted.

Run with `pytest -m zoo tests/zoo`.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from catalogue import ZOO_MARKS, ZooCase, all_cases
from torch.utils.flop_counter import FlopCounterMode

from pytest_fwdorder import MetaTraceError, TensorSpec, trace_forward
from pytest_fwdorder.recording.meta.build import build_on_meta

pytestmark = ZOO_MARKS

CASES = all_cases()


def on_meta(value: Any) -> Any:
    return (
        torch.empty(value.shape, dtype=value.dtype, device="meta")
        if isinstance(value, TensorSpec)
        else value
    )


def counted_on_meta(zoo_case: ZooCase) -> int:
    """FlopCounterMode's total for the model on meta: built under `torch.device("meta")`
    where torch can, else (RegNet reads values while it builds) by our meta builder, which
    allocates nothing either; the counting, the thing under test, stays torch's."""
    model: Any
    try:
        with torch.device("meta"):
            model = zoo_case.build()
    except NotImplementedError:
        model = build_on_meta(zoo_case.build)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*map(on_meta, zoo_case.inputs))
    return int(counter.get_total_flops())


def counted_on_cpu(zoo_case: ZooCase) -> int:
    model = zoo_case.build()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*zoo_case.real_inputs())
    return int(counter.get_total_flops())


QUANTIZED = [zoo_case for zoo_case in CASES if zoo_case.name.startswith("quantized_")]
FLOATING = [zoo_case for zoo_case in CASES if zoo_case not in QUANTIZED]


@pytest.mark.parametrize("zoo_case", QUANTIZED, ids=[zoo_case.name for zoo_case in QUANTIZED])
def test_a_quantized_models_operations_are_listed_as_uncounted_not_counted_zero(
    zoo_case: ZooCase,
) -> None:
    # torch has no FLOP formulas for quantized kernels (FlopCounterMode counts 0 for these
    # models), so the golden must name them instead of writing 0 as if it were a count.
    with torch.no_grad():
        trace = trace_forward(zoo_case.build(), *zoo_case.real_inputs(), costs=True)

    assert trace.costs is not None
    uncounted = dict(trace.costs.uncounted)
    assert any(name.startswith("quantized.conv2d") for name in uncounted), uncounted
    assert "# uncounted operations" in trace.render()


@pytest.mark.parametrize("zoo_case", FLOATING, ids=[zoo_case.name for zoo_case in FLOATING])
def test_the_traces_flops_equal_flop_counter_modes(zoo_case: ZooCase) -> None:
    try:
        with torch.no_grad():
            trace = trace_forward(zoo_case.build, *zoo_case.inputs, device="meta", costs=True)
        expected = counted_on_meta(zoo_case)
    except MetaTraceError:  # needs real values (test_torchvision_zoo.py lists where and why)
        with torch.no_grad():
            trace = trace_forward(zoo_case.build(), *zoo_case.real_inputs(), costs=True)
        expected = counted_on_cpu(zoo_case)

    assert trace.costs is not None
    assert trace.costs.flops == expected
