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
    from pytest_fwdorder.calls.call_line_facets import CallLineWriter, LineUnderCall
    from pytest_fwdorder.calls.change_kinds import FacetChangeKind
    from pytest_fwdorder.calls.facet_records import (
        Facet,
        ForwardRun,
        MeasuredTraceFacet,
        OddBlock,
        TensorAnnotation,
        TraceFacet,
        WatchedTraceFacet,
    )
    from pytest_fwdorder.calls.records import Call
    from pytest_fwdorder.calls.value_descriptions import TensorDescription
    from pytest_fwdorder.checks.checkpoint import (
        CheckpointReport,
        assert_checkpoint_compatible,
        assert_checkpoint_loads,
        check_checkpoint,
        remap_state_dict,
    )
    from pytest_fwdorder.checks.compile_gates import (
        assert_export_matches_eager,
        assert_no_graph_breaks,
    )
    from pytest_fwdorder.checks.cost_budgets import assert_costs
    from pytest_fwdorder.checks.coverage import assert_coverage
    from pytest_fwdorder.checks.equivalence import (
        EquivalenceReport,
        assert_equivalent,
        copy_weights,
    )
    from pytest_fwdorder.checks.parity import (
        CallError,
        ParityReport,
        ParityTolerance,
        assert_matches_reference,
        compare_with_reference,
    )
    from pytest_fwdorder.checks.parity_pairing import copy_mapped_weights
    from pytest_fwdorder.checks.parity_reference import Reference, load_reference, record_reference
    from pytest_fwdorder.checks.reference_files import reference_snapshot
    from pytest_fwdorder.checks.structure import assert_same_structure, structure_diff
    from pytest_fwdorder.diff.changes import Change, ChangeKind
    from pytest_fwdorder.diff.classification import TraceDiff
    from pytest_fwdorder.diff.diffing import diff_golden, diff_traces
    from pytest_fwdorder.errors import (
        CheckpointMismatchError,
        CoverageError,
        EmptyTraceError,
        FwdOrderWarning,
        MetaTraceError,
        NotEquivalentError,
        ReferenceMismatchError,
        StructureMismatchError,
        UnpicklableFacetWarning,
        UnregisteredModuleError,
        UnwrappedModelWarning,
    )
    from pytest_fwdorder.facets.cost_table import cost_table
    from pytest_fwdorder.golden.render import render_trace
    from pytest_fwdorder.hookspecs import hookimpl, plugin_manager
    from pytest_fwdorder.options import TraceOptions
    from pytest_fwdorder.picture.svg import Picture, diff_picture, golden_picture
    from pytest_fwdorder.report.coverage_table import Coverage, CoverageRow, coverage
    from pytest_fwdorder.snapshot.extension import TraceSnapshotExtension
    from pytest_fwdorder.trace import Trace
    from pytest_fwdorder.tracing.forward import TensorSpec, Tracer, record, trace_forward

    __version__: str

# Public name -> the module that defines it.
_HOMES = {
    "Call": "calls.records",
    "Change": "diff.changes",
    "ChangeKind": "diff.changes",
    "CallError": "checks.parity",
    "ParityReport": "checks.parity",
    "Reference": "checks.parity_reference",
    "ReferenceMismatchError": "errors",
    "ParityTolerance": "checks.parity",
    "assert_matches_reference": "checks.parity",
    "compare_with_reference": "checks.parity",
    "copy_mapped_weights": "checks.parity_pairing",
    "load_reference": "checks.parity_reference",
    "record_reference": "checks.parity_reference",
    "reference_snapshot": "checks.reference_files",
    "CheckpointMismatchError": "errors",
    "CheckpointReport": "checks.checkpoint",
    "Coverage": "report.coverage_table",
    "CoverageError": "errors",
    "CoverageRow": "report.coverage_table",
    "ForwardRun": "calls.facet_records",
    "OddBlock": "calls.facet_records",
    "Picture": "picture.svg",
    "EmptyTraceError": "errors",
    "Facet": "calls.facet_records",
    "CallLineWriter": "calls.call_line_facets",
    "LineUnderCall": "calls.call_line_facets",
    "FacetChangeKind": "calls.change_kinds",
    "MeasuredTraceFacet": "calls.facet_records",
    "TensorAnnotation": "calls.facet_records",
    "TraceFacet": "calls.facet_records",
    "WatchedTraceFacet": "calls.facet_records",
    "EquivalenceReport": "checks.equivalence",
    "FwdOrderWarning": "errors",
    "MetaTraceError": "errors",
    "NotEquivalentError": "errors",
    "StructureMismatchError": "errors",
    "TensorDescription": "calls.value_descriptions",
    "TensorSpec": "tracing.forward",
    "Trace": "trace",
    "TraceDiff": "diff.classification",
    "TraceOptions": "options",
    "TraceSnapshotExtension": "snapshot.extension",
    "UnpicklableFacetWarning": "errors",
    "UnregisteredModuleError": "errors",
    "UnwrappedModelWarning": "errors",
    "Tracer": "tracing.forward",
    "assert_checkpoint_compatible": "checks.checkpoint",
    "assert_checkpoint_loads": "checks.checkpoint",
    "assert_costs": "checks.cost_budgets",
    "cost_table": "facets.cost_table",
    "assert_equivalent": "checks.equivalence",
    "assert_same_structure": "checks.structure",
    "check_checkpoint": "checks.checkpoint",
    "copy_weights": "checks.equivalence",
    "diff_golden": "diff.diffing",
    "diff_picture": "picture.svg",
    "golden_picture": "picture.svg",
    "diff_traces": "diff.diffing",
    "assert_export_matches_eager": "checks.compile_gates",
    "assert_no_graph_breaks": "checks.compile_gates",
    "assert_coverage": "checks.coverage",
    "coverage": "report.coverage_table",
    "hookimpl": "hookspecs",
    "plugin_manager": "hookspecs",
    "record": "tracing.forward",
    "remap_state_dict": "checks.checkpoint",
    "render_trace": "golden.render",
    "structure_diff": "checks.structure",
    "trace_forward": "tracing.forward",
}

__all__ = [
    "Call",
    "CallError",
    "CallLineWriter",
    "Change",
    "ChangeKind",
    "CheckpointMismatchError",
    "CheckpointReport",
    "Coverage",
    "CoverageError",
    "CoverageRow",
    "EmptyTraceError",
    "EquivalenceReport",
    "Facet",
    "FacetChangeKind",
    "ForwardRun",
    "FwdOrderWarning",
    "LineUnderCall",
    "MeasuredTraceFacet",
    "MetaTraceError",
    "NotEquivalentError",
    "OddBlock",
    "ParityReport",
    "ParityTolerance",
    "Picture",
    "Reference",
    "ReferenceMismatchError",
    "StructureMismatchError",
    "TensorAnnotation",
    "TensorDescription",
    "TensorSpec",
    "Trace",
    "TraceDiff",
    "TraceFacet",
    "TraceOptions",
    "TraceSnapshotExtension",
    "Tracer",
    "UnpicklableFacetWarning",
    "UnregisteredModuleError",
    "UnwrappedModelWarning",
    "WatchedTraceFacet",
    "__version__",
    "assert_checkpoint_compatible",
    "assert_checkpoint_loads",
    "assert_costs",
    "assert_coverage",
    "assert_equivalent",
    "assert_export_matches_eager",
    "assert_matches_reference",
    "assert_no_graph_breaks",
    "assert_same_structure",
    "check_checkpoint",
    "compare_with_reference",
    "copy_mapped_weights",
    "copy_weights",
    "cost_table",
    "coverage",
    "diff_golden",
    "diff_picture",
    "diff_traces",
    "golden_picture",
    "hookimpl",
    "load_reference",
    "plugin_manager",
    "record",
    "record_reference",
    "reference_snapshot",
    "remap_state_dict",
    "render_trace",
    "structure_diff",
    "trace_forward",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _installed_version()
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_fwdorder' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_fwdorder.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return __all__


def _installed_version() -> str:
    """The version recorded when this package was installed, `0+unknown` if it never was.

    setuptools-scm takes it from the git tag at build time: there is no second copy to update.
    Read on first use of `__version__`, so start-up does not search the installed metadata.
    """
    from importlib import metadata

    try:
        return metadata.version("pytest-fwdorder")
    except metadata.PackageNotFoundError:
        return "0+unknown"
