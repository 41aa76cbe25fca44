"""The facets a trace records besides the calls: set up around a traced run, attached after.

`trace_forward` and `record` both go through `FacetRecording`. The facets behind the protocol
(calls/facet_records.py: output values, backward, costs, graph breaks, initialization, the
plugins') are not named here: each one's option, device check, run
context, observer and watcher (of the trace, or of a builder's build) are looked up on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from torch import nn

from pytest_fwdorder.calls.facet_records import (
    Facet,
    MeasuredTraceFacet,
    TensorAnnotation,
    TraceFacet,
    TraceWatcher,
    is_measured,
    is_watched,
    watches_build,
)
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.hookspecs import plugin_facets, tensor_annotations, trace_facets
from pytest_fwdorder.options import OPTION_NAMES, TraceOptions
from pytest_fwdorder.trace import Trace


@dataclass
class FacetRecording:
    """What the facets of one trace collect while it runs; `finish` gives it to the trace."""

    options: TraceOptions
    # The facets this trace records (calls/facet_records.py), built-in and the plugins', and
    # what each observed: title -> call index -> value.
    facets: tuple[Facet, ...] = ()
    facet_values: dict[str, dict[int, Any]] = field(default_factory=dict)
    # The facets with one value per trace (calls/facet_records.py) asked for, in their order,
    # and a watcher for each one that watches the trace as it runs (by title).
    trace_facets: tuple[TraceFacet, ...] = ()
    watchers: dict[str, TraceWatcher] = field(default_factory=dict)

    @classmethod
    def for_options(cls, options: TraceOptions) -> FacetRecording:
        """The facets `options` ask for; raises ValueError for one that cannot record on
        the options' device."""
        facets = recorded_facets(options)
        for facet in facets:
            check_device = getattr(facet, "check_device", None)
            if check_device is not None:
                check_device(options.device)
        switched_on = switched_on_trace_facets(options)
        watchers = {
            facet.title: facet.watcher(options) for facet in switched_on if is_watched(facet)
        }
        return cls(options, facets=facets, trace_facets=switched_on, watchers=watchers)

    @contextmanager
    def watched(self) -> Iterator[None]:
        """The watchers' hooks, for the length of the block: entered before `recording`,
        whose hooks run after theirs."""
        with ExitStack() as stack:
            for watcher in self.watchers.values():
                stack.enter_context(watcher.watching())
            yield

    @contextmanager
    def recorded(self, recorder: Any, root: nn.Module) -> Iterator[None]:
        """The watchers' records and the facets' values recorded for the length of the block."""
        with ExitStack() as stack:
            for watcher in self.watchers.values():
                watcher.started(recorder)
                recording = getattr(watcher, "recording", None)
                if recording is not None:
                    stack.enter_context(recording(recorder, root))
            if self.facets:
                for facet in self.facets:
                    running = getattr(facet, "running", None)
                    if running is not None:
                        stack.enter_context(running())
                stack.enter_context(_facets_observed(recorder, self))
            yield

    @property
    def watches_build(self) -> bool:
        """Whether a facet watches a builder's build (`BuildWatchingFacet`)."""
        return any(map(watches_build, self.trace_facets))

    @contextmanager
    def building(self) -> Iterator[None]:
        """Each watcher that watches a build (`building()`), around one try of it."""
        with ExitStack() as stack:
            for watcher in self.watchers.values():
                building = getattr(watcher, "building", None)
                if building is not None:
                    stack.enter_context(building())
            yield

    def refuse_built_model(self, model_type: str) -> None:
        """Raise ValueError, saying what to do, when a facet that watches the build is on
        and the model came built (a `model_type` instance, not a builder)."""
        for facet in self.trace_facets:
            if watches_build(facet):
                raise ValueError(facet.built_model_refusal(model_type))

    def run_forward(self, root: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Call the model once under the watchers' forward contexts, then hand each the
        output (`trace_forward`'s forward; a `record` block runs the user's code instead)."""
        # Both are optional: most watchers need neither (backward needs both).
        with ExitStack() as stack:
            for watcher in self.watchers.values():
                context = getattr(watcher, "forward_context", None)
                if context is not None:
                    stack.enter_context(context())
            output = root(*args, **kwargs)
        for watcher in self.watchers.values():
            ran = getattr(watcher, "forward_ran", None)
            if ran is not None:
                ran(root, (args, kwargs), output)

    def finish(self, trace: Trace) -> None:
        """Give the finished trace its facets' values and the values of the facets that
        watched it."""
        if self.facets:
            trace.facets = self.facets
            trace.facet_values = self.facet_values
        for title, watcher in self.watchers.items():
            trace_ended = getattr(watcher, "trace_ended", None)
            if trace_ended is not None:
                trace_ended(trace)
            value = watcher.value()
            if value is not None:  # a watcher that saw nothing to give (no build it watched)
                trace.trace_facet_values[title] = value
        self._give_trace_facets(trace)

    def measure(
        self,
        trace: Trace,
        model: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        device: Any,
    ) -> None:
        """Give the trace each facet's value of the whole run, measured after the forward."""
        for facet in measured_facets(self.trace_facets):
            value = facet.measure(model, args, kwargs, device)
            trace.trace_facet_values[facet.title] = value
        self._give_trace_facets(trace)

    def _give_trace_facets(self, trace: Trace) -> None:
        """The trace's facets with one value per trace: those that have given it theirs."""
        trace.trace_facets = tuple(
            facet for facet in self.trace_facets if facet.title in trace.trace_facet_values
        )


def switched_on_trace_facets(options: TraceOptions) -> tuple[TraceFacet, ...]:
    """The registered facets with one value per trace that `options` switch on, each as its
    `configured(options)` makes it, where it has one."""
    found: list[TraceFacet] = []
    for facet in trace_facets(FACT_TITLES):
        if _switched_on(facet, facet.option, options):
            configured = getattr(facet, "configured", None)
            found.append(facet if configured is None else configured(options))
    return tuple(found)


def measured_facets(facets: tuple[TraceFacet, ...]) -> tuple[MeasuredTraceFacet, ...]:
    """Those of `facets` that take their value after the forward (`measure`), which a
    `record` block refuses (`record_refusal`)."""
    return tuple(facet for facet in facets if is_measured(facet))


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
    return _configured(plugin_facets(FACT_TITLES), options)


def shown_annotations(options: TraceOptions) -> tuple[TensorAnnotation, ...]:
    """The registered annotations of each tensor's text (devices, local shapes, the
    plugins') that a trace with `options` shows, chosen and configured as `recorded_facets`."""
    return _configured(tensor_annotations(FACT_TITLES), options)


_Offered = TypeVar("_Offered", Facet, TensorAnnotation)


def _configured(offered: tuple[_Offered, ...], options: TraceOptions) -> tuple[_Offered, ...]:
    """Those of `offered` that `options` switch on (or that name no option), each as its
    `configured(options)` makes it, where it has one."""
    found = []
    for facet in offered:
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
