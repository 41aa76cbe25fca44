"""pytest-fwdorder: a PyTorch model's execution structure as a tested artifact.

def test_resnet50(forward_trace, snapshot):
    trace = forward_trace(torchvision.models.resnet50().eval(), torch.randn(1, 3, 224, 224))
    assert trace == snapshot
"""

from __future__ import annotations

from pytest_fwdorder.checkpoint import (
    CheckpointReport,
    assert_checkpoint_loads,
    check_checkpoint,
)
from pytest_fwdorder.compare import assert_same_structure, structure_diff
from pytest_fwdorder.diff import Change, TraceDiff, diff_golden, diff_traces
from pytest_fwdorder.equivalence import EquivalenceReport, assert_equivalent, copy_weights
from pytest_fwdorder.errors import (
    CheckpointMismatchError,
    EmptyTraceError,
    FwdOrderWarning,
    MetaTraceError,
    NotEquivalentError,
    StructureMismatchError,
)
from pytest_fwdorder.render import render_trace
from pytest_fwdorder.snapshot import TraceSnapshotExtension
from pytest_fwdorder.trace import Call, TensorDescription, Trace
from pytest_fwdorder.tracing import TensorSpec, Tracer, record, trace_forward

__version__ = "0.1.0"

__all__ = [
    "Call",
    "Change",
    "CheckpointMismatchError",
    "CheckpointReport",
    "EmptyTraceError",
    "EquivalenceReport",
    "FwdOrderWarning",
    "MetaTraceError",
    "NotEquivalentError",
    "StructureMismatchError",
    "TensorDescription",
    "TensorSpec",
    "Trace",
    "TraceDiff",
    "TraceSnapshotExtension",
    "Tracer",
    "__version__",
    "assert_checkpoint_loads",
    "assert_equivalent",
    "assert_same_structure",
    "check_checkpoint",
    "copy_weights",
    "diff_golden",
    "diff_traces",
    "record",
    "render_trace",
    "structure_diff",
    "trace_forward",
]
