"""The facets a trace records besides the calls: set up around a traced run, attached after.

`trace_forward` and `record` both go through `FacetRecording`: operations, costs, output
fingerprints and backward each enter their own context manager (which removes its hooks
or mode on exit) only when the options ask for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from pytest_fwdorder.calls.facet_records import Facet
from pytest_fwdorder.facets.backward import BackwardRecorder
from pytest_fwdorder.facets.costs import CostCounters, attach_costs, costs_counted
from pytest_fwdorder.facets.operations import OperationMode, attach_operations, operations_recorded
from pytest_fwdorder.facets.values import FingerprintCollector, attach_fingerprints, seeded
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.hookspecs import plugin_facets
from pytest_fwdorder.options import TraceOptions
from pytest_fwdorder.trace import Trace


@dataclass
class FacetRecording:
    """What the facets of one trace collect while it runs; `finish` gives it to the trace."""

    options: TraceOptions
    backward: BackwardRecorder | None = None
    fingerprints: FingerprintCollector | None = None
    operations: list[OperationMode] = field(default_factory=list)
    counters: list[CostCounters] = field(default_factory=list)
    # The plugins' facets (calls/facet_records.py) and what each observed: title -> call -> value.
    plugin_facets: tuple[Facet, ...] = ()
    plugin_values: dict[str, dict[int, Any]] = field(default_factory=dict)

    @classmethod
    def for_options(cls, options: TraceOptions) -> FacetRecording:
        return cls(
            options,
            backward=BackwardRecorder(options.backward) if options.backward else None,
            fingerprints=FingerprintCollector() if options.values else None,
            plugin_facets=plugin_facets(FACT_TITLES),
        )

    def backward_watched(self) -> AbstractContextManager[Any]:
        """Watch forward for backward's nodes; entered before `recording`, whose hooks run
        after."""
        return nullcontext() if self.backward is None else self.backward.forward_watched()

    @contextmanager
    def recorded(self, recorder: Any, root: nn.Module) -> Iterator[None]:
        """Operations, costs and fingerprints recorded for the length of the block, as asked."""
        with ExitStack() as stack:
            if self.options.ops:
                self.operations.append(
                    stack.enter_context(operations_recorded(recorder, root, self.options.ops_skip))
                )
            if self.options.costs:
                self.counters.append(stack.enter_context(costs_counted(recorder, root)))
            if self.fingerprints is not None:
                stack.enter_context(_fingerprints_taken(recorder, self.fingerprints))
            if self.backward is not None:
                self.backward.recorder = recorder
            if self.plugin_facets:
                stack.enter_context(_plugin_facets_observed(recorder, self))
            yield

    def finish(self, trace: Trace) -> None:
        """Give the finished trace its operations, backward steps, costs and fingerprints."""
        for mode in self.operations:
            attach_operations(trace, mode)
        if self.backward is not None:
            self.backward.finish(trace)
        for counted in self.counters:
            attach_costs(trace, counted)
        if self.plugin_facets:
            trace.facets = self.plugin_facets
            trace.facet_values = self.plugin_values
        if self.fingerprints is not None:
            attach_fingerprints(trace, self.fingerprints)
            trace.values_tolerance = (
                self.options.values_relative_tolerance,
                self.options.values_absolute_tolerance,
            )


@contextmanager
def _fingerprints_taken(recorder: Any, fingerprints: FingerprintCollector) -> Iterator[None]:
    """Fingerprint each call's output as it ends, under seed 0 throughout."""
    recorder.output_observers.append(fingerprints.observe)
    try:
        with seeded():
            yield
    finally:
        recorder.output_observers.remove(fingerprints.observe)


@contextmanager
def _plugin_facets_observed(recorder: Any, recording: FacetRecording) -> Iterator[None]:
    """Give each call's output to every plugin facet as the call ends, keeping what it returns."""
    observers = [
        (facet, recording.plugin_values.setdefault(facet.title, {}))
        for facet in recording.plugin_facets
    ]

    def observe(number: int, output: object) -> None:
        for facet, values in observers:
            try:
                value = facet.observe(output)
            except Exception as error:
                error.add_note(
                    f"pytest-fwdorder: raised by the facet {facet.title!r} ({facet!r}) as it "
                    f"observed the output of call {number}: fix its observe, or return None "
                    "for outputs it does not handle"
                )
                raise
            if value is not None:
                values[number] = value

    recorder.output_observers.append(observe)
    try:
        yield
    finally:
        recorder.output_observers.remove(observe)
