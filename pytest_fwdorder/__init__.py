"""pytest-fwdorder: a PyTorch model's execution structure as a tested artifact.

def test_resnet50(forward_trace, snapshot):
    trace = forward_trace(torchvision.models.resnet50().eval(), torch.randn(1, 3, 224, 224))
    assert trace == snapshot

Names are imported on first use: pytest loads this package at start-up for its plugin, and
a suite that never traces must not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_fwdorder.checkpoint import (
        CheckpointReport,
        assert_checkpoint_compatible,
        assert_checkpoint_loads,
        check_checkpoint,
        remap_state_dict,
    )
    from pytest_fwdorder.cost_budgets import assert_costs
    from pytest_fwdorder.coverage import Coverage, CoverageRow, assert_coverage, coverage
    from pytest_fwdorder.diff import Change, ChangeKind, TraceDiff, diff_golden, diff_traces
    from pytest_fwdorder.entry_points import TensorSpec, Tracer, record, trace_forward
    from pytest_fwdorder.equivalence import EquivalenceReport, assert_equivalent, copy_weights
    from pytest_fwdorder.errors import (
        CheckpointMismatchError,
        CoverageError,
        EmptyTraceError,
        FwdOrderWarning,
        MetaTraceError,
        NotEquivalentError,
        StructureMismatchError,
        UnregisteredModuleError,
        UnwrappedModelWarning,
    )
    from pytest_fwdorder.hookspecs import hookimpl, plugin_manager
    from pytest_fwdorder.options import TraceOptions
    from pytest_fwdorder.picture_svg import Picture, diff_picture, golden_picture
    from pytest_fwdorder.record_types import Call, ForwardRun, OddBlock, TensorDescription
    from pytest_fwdorder.render import render_trace
    from pytest_fwdorder.snapshot import TraceSnapshotExtension
    from pytest_fwdorder.structure_comparison import assert_same_structure, structure_diff
    from pytest_fwdorder.trace import Trace

__version__ = "0.6.0"

# Public name -> the module that defines it.
_HOMES = {
    "Call": "record_types",
    "Change": "diff",
    "ChangeKind": "diff",
    "CheckpointMismatchError": "errors",
    "CheckpointReport": "checkpoint",
    "Coverage": "coverage",
    "CoverageError": "errors",
    "CoverageRow": "coverage",
    "ForwardRun": "record_types",
    "OddBlock": "record_types",
    "Picture": "picture_svg",
    "EmptyTraceError": "errors",
    "EquivalenceReport": "equivalence",
    "FwdOrderWarning": "errors",
    "MetaTraceError": "errors",
    "NotEquivalentError": "errors",
    "StructureMismatchError": "errors",
    "TensorDescription": "record_types",
    "TensorSpec": "entry_points",
    "Trace": "trace",
    "TraceDiff": "diff",
    "TraceOptions": "options",
    "TraceSnapshotExtension": "snapshot",
    "UnregisteredModuleError": "errors",
    "UnwrappedModelWarning": "errors",
    "Tracer": "entry_points",
    "assert_checkpoint_compatible": "checkpoint",
    "assert_checkpoint_loads": "checkpoint",
    "assert_costs": "cost_budgets",
    "assert_coverage": "coverage",
    "coverage": "coverage",
    "assert_equivalent": "equivalence",
    "assert_same_structure": "structure_comparison",
    "check_checkpoint": "checkpoint",
    "copy_weights": "equivalence",
    "diff_golden": "diff",
    "diff_picture": "picture_svg",
    "golden_picture": "picture_svg",
    "diff_traces": "diff",
    "hookimpl": "hookspecs",
    "plugin_manager": "hookspecs",
    "record": "entry_points",
    "remap_state_dict": "checkpoint",
    "render_trace": "render",
    "structure_diff": "structure_comparison",
    "trace_forward": "entry_points",
}

__all__ = [
    "Call",
    "Change",
    "ChangeKind",
    "CheckpointMismatchError",
    "CheckpointReport",
    "Coverage",
    "CoverageError",
    "CoverageRow",
    "EmptyTraceError",
    "EquivalenceReport",
    "ForwardRun",
    "FwdOrderWarning",
    "MetaTraceError",
    "NotEquivalentError",
    "OddBlock",
    "Picture",
    "StructureMismatchError",
    "TensorDescription",
    "TensorSpec",
    "Trace",
    "TraceDiff",
    "TraceOptions",
    "TraceSnapshotExtension",
    "Tracer",
    "UnregisteredModuleError",
    "UnwrappedModelWarning",
    "__version__",
    "assert_checkpoint_compatible",
    "assert_checkpoint_loads",
    "assert_costs",
    "assert_coverage",
    "assert_equivalent",
    "assert_same_structure",
    "check_checkpoint",
    "copy_weights",
    "coverage",
    "diff_golden",
    "diff_picture",
    "diff_traces",
    "golden_picture",
    "hookimpl",
    "plugin_manager",
    "record",
    "remap_state_dict",
    "render_trace",
    "structure_diff",
    "trace_forward",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_fwdorder' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_fwdorder.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
