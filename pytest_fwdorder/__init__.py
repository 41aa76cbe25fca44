"""pytest-fwdorder: a PyTorch model's execution structure as a tested artifact.

def test_resnet50(forward_trace, snapshot):
    trace = forward_trace(torchvision.models.resnet50().eval(), torch.randn(1, 3, 224, 224))
    assert trace == snapshot
"""

from __future__ import annotations

from pytest_fwdorder.diff import Change, TraceDiff, diff_golden, diff_traces
from pytest_fwdorder.errors import EmptyTraceError, FwdOrderWarning, MetaTraceError
from pytest_fwdorder.render import render_trace
from pytest_fwdorder.snapshot import TraceSnapshotExtension
from pytest_fwdorder.trace import Call, TensorDescription, Trace
from pytest_fwdorder.tracing import TensorSpec, Tracer, record, trace_forward

__version__ = "0.1.0"

__all__ = [
    "Call",
    "Change",
    "EmptyTraceError",
    "FwdOrderWarning",
    "MetaTraceError",
    "TensorDescription",
    "TensorSpec",
    "Trace",
    "TraceDiff",
    "TraceSnapshotExtension",
    "Tracer",
    "__version__",
    "diff_golden",
    "diff_traces",
    "record",
    "render_trace",
    "trace_forward",
]
