"""The facets a trace records besides the calls: set up around a traced run, attached after.

`trace_forward` and `record` both go through `FacetRecording`: operations, costs and backward
each enter their own context manager (which removes its hooks or mode on exit) only when the
options ask for them. The facets behind the protocol (calls/facet_records.py: output values,
the plugins') are not named here: each one's option, device check, run context and observer
are looked up on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from pytest_fwdorder.calls.facet_records import Facet, TraceFacet
from pytest_fwdorder.facets.backward import BackwardRecorder
from pytest_fwdorder.facets.costs import CostCounters, attach_costs, costs_counted
from pytest_fwdorder.facets.operations import OperationMode, attach_operations, operations_recorded
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.hookspecs import plugin_facets, trace_facets
from pytest_fwdorder.options import OPTION_NAMES, TraceOptions
from pytest_fwdorder.trace import Trace


@dataclass
class FacetRecording:
    """What the facets of one trace collect while it runs; `finish` gives it to the trace."""

    options: TraceOptions
    backward: BackwardRecorder | None = None
    operations: list[OperationMode] = field(default_factory=list)
    counters: list[CostCounters] = field(default_factory=list)
    # The facets this trace records (calls/facet_records.py), built-in and the plugins', and
    # what each observed: title -> call index -> value.
    facets: tuple[Facet, ...] = ()
    facet_values: dict[str, dict[int, Any]] = field(default_factory=dict)
    # The facets with one value per trace (calls/facet_records.py: graph breaks) asked for.
    trace_facets: tuple[TraceFacet, ...] = ()

    @classmethod
    def for_options(cls, options: TraceOptions) -> FacetRecording:
        """The facets `options` ask for; raises ValueError for one that cannot record on
        the options' device."""
        facets = recorded_facets(options)
        for facet in facets:
            check_device = getattr(facet, "check_device", None)
            if check_device is not None:
                check_device(options.device)
        return cls(
            options,
            backward=BackwardRecorder(options.backward) if options.backward else None,
            facets=facets,
            trace_facets=measured_facets(options),
        )

    def backward_watched(self) -> AbstractContextManager[Any]:
        """Watch forward for backward's nodes; entered before `recording`, whose hooks run
        after."""
        return nullcontext() if self.backward is None else self.backward.forward_watched()

    @contextmanager
    def recorded(self, recorder: Any, root: nn.Module) -> Iterator[None]:
        """Operations, costs and the facets' values recorded for the length of the block."""
        with ExitStack() as stack:
            if self.options.ops:
                self.operations.append(
                    stack.enter_context(operations_recorded(recorder, root, self.options.ops_skip))
                )
            if self.options.costs:
                self.counters.append(stack.enter_context(costs_counted(recorder, root)))
            if self.backward is not None:
                self.backward.recorder = recorder
            if self.facets:
                for facet in self.facets:
                    running = getattr(facet, "running", None)
                    if running is not None:
                        stack.enter_context(running())
                stack.enter_context(_facets_observed(recorder, self))
            yield

    def finish(self, trace: Trace) -> None:
        """Give the finished trace its operations, backward steps, costs and facets' values."""
        for mode in self.operations:
            attach_operations(trace, mode)
        if self.backward is not None:
            self.backward.finish(trace)
        for counted in self.counters:
            attach_costs(trace, counted)
        if self.facets:
            trace.facets = self.facets
            trace.facet_values = self.facet_values

    def measure(
        self,
        trace: Trace,
        model: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        device: Any,
    ) -> None:
        """Give the trace each facet's value of the whole run, measured after the forward."""
        for facet in self.trace_facets:
            trace.trace_facet_values[facet.title] = facet.measure(model, args, kwargs, device)
        trace.trace_facets = self.trace_facets


def measured_facets(options: TraceOptions) -> tuple[TraceFacet, ...]:
    """The registered facets with one value per trace that `options` switch on."""
    return tuple(
        facet for facet in trace_facets(FACT_TITLES) if _switched_on(facet, facet.option, options)
    )


def _switched_on(facet: object, option: object, options: TraceOptions) -> bool:
    """Whether the trace option a facet names is on; ValueError for one that is no option."""
    if not isinstance(option, str) or option not in OPTION_NAMES:
        raise ValueError(
            f"the facet {facet!r} names the option {option!r}, which is no trace option "
            f"({', '.join(OPTION_NAMES)}): name one of them, or leave `option` out of a "
            "plugin's facet, which every trace then records"
        )
    return bool(getattr(options, option))


def recorded_facets(options: TraceOptions) -> tuple[Facet, ...]:
    """The registered facets a trace with `options` records, in their order: each one an
    option switches on (`option`) only when it is on, every other one always; each as its
    `configured(options)` makes it, where it has one."""
    found = []
    for facet in plugin_facets(FACT_TITLES):
        option = getattr(facet, "option", None)
        if option is not None and not _switched_on(facet, option, options):
            continue
        configured = getattr(facet, "configured", None)
        found.append(facet if configured is None else configured(options))
    return tuple(found)


@contextmanager
def _facets_observed(recorder: Any, recording: FacetRecording) -> Iterator[None]:
    """Give each call's output to every facet as the call ends, keeping what it returns."""
    observers = [
        (facet, recording.facet_values.setdefault(facet.title, {})) for facet in recording.facets
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
