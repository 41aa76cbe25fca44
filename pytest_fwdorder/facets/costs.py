"""What each call costs (`costs=True`): the one owner of the facet, behind the protocol.

One module holds the facet (`WatchedTraceFacet`, calls/facet_records.py): its option, how it
watches a trace (`CostsWatcher`, which counts through cost_counting.py's dispatch mode), the
golden lines it writes (each call's `costs:` fact, the header's totals and the operations
without a FLOP formula) and how they are read back into typed values (`WrittenCosts`,
`WrittenTraceCosts`). It is registered as a built-in plugin (`hookspecs.BUILTIN_PLUGINS`), so
the trace and the golden reach it through the `pytest_fwdorder_facets` hook and never name
it. No torch here: the counting is imported only when a trace asks for costs.

    | costs: 32,768 FLOPs (32.8 k), output 4,096 B (4.00 KiB), parameters and buffers 1,088 B (1.06 KiB)
    # costs: 108,544 FLOPs (109 k), parameters and buffers 43,880 B (42.9 KiB), saved for backward 8,960 B (8.75 KiB)
    # uncounted operations (1):
    #   aten.relu x1

The trace keeps its values where the public API gives them too: `Trace.costs` (the totals)
and `Call.costs` (each call's `CallCosts`), which the budget check and the command line's
cost table read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from pytest_fwdorder.calls.change_kinds import FacetChangeKind
from pytest_fwdorder.calls.facet_records import CallCosts, TraceCosts
from pytest_fwdorder.facets.cost_table import cost_table
from pytest_fwdorder.golden.figures import human_bytes, human_count, listed
from pytest_fwdorder.golden.format import render_section
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.hookspecs import hookimpl

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import nn

    from pytest_fwdorder.calls.facet_records import TraceFacet
    from pytest_fwdorder.calls.records import TraceRecords
    from pytest_fwdorder.facets.cost_counting import CostCounters
    from pytest_fwdorder.options import TraceOptions
    from pytest_fwdorder.recording.recorder import Recorder

TITLE = "costs"
COSTS_PREFIX = f"# {TITLE}: "
_FLOPS = re.compile(r"([0-9,]+) FLOPs")
_OUTPUT = re.compile(r", output ([0-9,]+) B")
_TENSOR_BYTES = re.compile(r", parameters and buffers ([0-9,]+) B")
# The header's section of operations without a FLOP formula, `# uncounted operations (1):`.
UNCOUNTED_SECTION = "uncounted operations"
# An operation without a FLOP formula that one trace runs and the other did not: a refactor
# that brings one in would otherwise read as costing nothing.
UNCOUNTED_ADDED = FacetChangeKind("uncounted operation", "added", "with uncounted operations added")


class WrittenCosts(NamedTuple):
    """A call's costs as a golden gives them: `costs: 1,024 FLOPs (1.02 k), output 64 B` is
    (1024, 64, None); `tensor_bytes` is given at a module's first call only."""

    flops: int
    output_bytes: int
    tensor_bytes: int | None = None


class WrittenTraceCosts(NamedTuple):
    """The header's costs as a golden gives them: the totals line as written, and each
    operation without a FLOP formula -> how many times it ran (None for a header without
    that section)."""

    totals: str
    uncounted: dict[str, int] | None


class CostsFacet:
    """Costs as a facet with one value per trace: the `TraceCosts` totals, counted while the
    trace runs, with each call's `CallCosts` given to it when the trace ends; written as the
    header's lines and a fact under every call, read back as `WrittenTraceCosts` and
    `WrittenCosts`.

    `parameters`: whether the lines give the parameter and buffer bytes (not when the trace
    hides parameters: `configured`).
    """

    title = TITLE
    change_words = "FLOPs changed"
    change_kinds = (UNCOUNTED_ADDED,)
    option = "costs"
    # Left out of a structure comparison unless `compare` names it; what it measures.
    compared_on_request = "what each call costs"
    # `fwdorder show --costs --sort ORDER`: what the table of the calls ranks them by.
    table_orders: Mapping[str, str] = MappingProxyType(
        {"flops": "FLOPs with children", "own-flops": "FLOPs outside its children"}
    )

    def __init__(self, parameters: bool = True) -> None:
        self.parameters = parameters

    def __repr__(self) -> str:
        return f"CostsFacet(parameters={self.parameters})"

    def configured(self, options: TraceOptions) -> CostsFacet:
        """The facet as a trace with `options` writes it: without parameter bytes when the
        options hide parameters."""
        parameters = "parameters" not in options.hide
        return self if parameters == self.parameters else CostsFacet(parameters)

    def watcher(self, options: TraceOptions) -> CostsWatcher:
        return CostsWatcher()

    def table(self, value: TraceCosts, trace: TraceRecords, order: str, top: int | None) -> str:
        """The calls that spend the most FLOPs, most first (`cost_table`)."""
        return cost_table(trace, "own-flops" if order == "own-flops" else "flops", top)

    def header_lines(self, value: TraceCosts) -> list[str]:
        return []  # its lines are among what the trace recorded: `summary_lines`

    def summary_lines(self, value: TraceCosts) -> list[str]:
        """The totals line, then the section of operations without a FLOP formula."""
        return render_trace_costs(value, self.parameters)

    def call_facts(self, value: TraceCosts, trace: TraceRecords) -> list[str | None]:
        """Each call's costs, as its fact's text after the title; None for a call without."""
        parameters = self.parameters
        return [
            None if call.costs is None else call_costs_text(call.costs, parameters)
            for call in trace.calls
        ]

    def read_call_fact(self, text: str) -> WrittenCosts | None:
        """A call's costs fact (after its title) read back; None for one without FLOPs."""
        return read_call_costs(text)

    def describe_call_change(self, old: WrittenCosts, new: WrittenCosts) -> str | None:
        """`1.85 G -> 2.61 G (+41%)` where the FLOPs changed; None where they did not (the
        bytes change with the output or the parameters, which say so themselves)."""
        if old.flops == new.flops:
            return None
        return describe_flops_change(old.flops, new.flops)

    def summary_line(self, calls: Sequence[tuple[str, WrittenCosts, WrittenCosts, str]]) -> str:
        """`FLOPs changed at 2 calls: <root> (Sequential) 109 k -> 371 k (+242%), ...`: the
        calls by how many FLOPs they add or take away, the biggest first (stable)."""
        ordered = sorted(calls, key=lambda call: abs(call[2].flops - call[1].flops), reverse=True)
        shown = listed([f"{name} {detail}" for name, _, _, detail in ordered])
        count = f"{len(calls)} call{'s' if len(calls) != 1 else ''}"
        return f"{self.change_words} at {count}: {shown}"

    # The HTML report's bar per call: its share of the whole forward's FLOPs.
    bar_class = "fo-cost"

    def bar_measure(self, value: WrittenCosts) -> int:
        return value.flops

    def bar_words(self, measure: int, total: int) -> tuple[str, str]:
        """The bar's title, `4,096 of the forward's 8,192 FLOPs`, and the figures after it,
        `4.10 k FLOPs, 50.0%`."""
        share = measure / total if total else 0.0
        return (
            f"{measure:,} of the forward's {total:,} FLOPs",
            f"{human_count(measure)} FLOPs, {100 * share:.1f}%",
        )

    def read_header(self, header: Sequence[str]) -> WrittenTraceCosts | None:
        """The header's totals and uncounted operations; None for a golden without costs."""
        return read_trace_costs(header)

    def describe_changes(
        self, old: WrittenTraceCosts, new: WrittenTraceCosts
    ) -> list[tuple[str, str]]:
        """Each operation without a FLOP formula that the new trace runs and the old did not,
        `aten.relu x2`; the totals are compared as header lines."""
        if old.uncounted is None or new.uncounted is None:
            return []  # a header without the section: nothing to compare
        return [
            (UNCOUNTED_ADDED.name, f"{name} x{count}")
            for name, count in new.uncounted.items()
            if name not in old.uncounted
        ]

    def describe_kind_changes(self, kind: str, changes: Sequence[tuple[str, str]]) -> str:
        """`operations without a FLOP formula, counted as 0: aten.relu x2, ...`."""
        return "operations without a FLOP formula, counted as 0: " + listed(
            [detail for _, detail in changes]
        )


COSTS = CostsFacet()


@hookimpl
def pytest_fwdorder_facets() -> list[TraceFacet]:
    """The costs facet."""
    return [COSTS]


class CostsWatcher:
    """Counts each call's FLOPs, and the bytes saved for backward, while a trace runs; gives
    the calls their costs and the trace its totals when it ends (a `TraceWatcher`,
    calls/facet_records.py)."""

    def __init__(self) -> None:
        self.counters: CostCounters | None = None
        self.totals: TraceCosts | None = None

    def watching(self) -> nullcontext[None]:
        return nullcontext()

    def started(self, recorder: Recorder) -> None:
        pass  # the counting starts inside the recording (`recording`)

    @contextmanager
    def recording(self, recorder: Recorder, root: nn.Module) -> Iterator[None]:
        """Count for the length of the block: inside the recording, so that the model's
        tensors are those forward sees (stand-ins). torch only now."""
        from pytest_fwdorder.facets.cost_counting import costs_counted

        with costs_counted(recorder) as counters:
            self.counters = counters
            yield

    def trace_ended(self, trace: TraceRecords) -> None:
        """Give each finished call its costs, and keep the trace's totals."""
        from pytest_fwdorder.facets.cost_counting import attach_costs

        if self.counters is not None:
            attach_costs(trace, self.counters)
            self.totals = trace.costs

    def value(self) -> TraceCosts | None:
        """The trace's totals; None when nothing was counted."""
        return self.totals


def _amount(count: int, unit: str, human: str) -> str:
    """`802,816 B (784 KiB)`: the exact figure, and the human form where it differs."""
    exact = f"{count:,} {unit}"
    return exact if human in (f"{count} {unit}", str(count)) else f"{exact} ({human})"


def describe_flops_change(old: int, new: int) -> str:
    """`1.85 G -> 2.61 G (+41%)`: the FLOPs before and after, and by how much they changed."""
    change = f" ({(new - old) / old:+.0%})" if old else ""
    return f"{human_count(old)} -> {human_count(new)}{change}"


def call_costs_text(costs: CallCosts, parameters: bool = True) -> str:
    """A call's costs fact after its title: `1,024 FLOPs (1.02 k), output 64 B`, then its
    module's own parameter and buffer bytes at its first call (unless parameters are hidden)."""
    text = (
        f"{_amount(costs.flops, 'FLOPs', human_count(costs.flops))}, "
        f"output {_amount(costs.output_bytes, 'B', human_bytes(costs.output_bytes))}"
    )
    if parameters and costs.tensor_bytes:
        text += (
            ", parameters and buffers "
            f"{_amount(costs.tensor_bytes, 'B', human_bytes(costs.tensor_bytes))}"
        )
    return text


def render_trace_costs(costs: TraceCosts, parameters: bool = True) -> list[str]:
    """The header's costs: the totals line, then the operations without a FLOP formula."""
    parts = [_amount(costs.flops, "FLOPs", human_count(costs.flops))]
    if parameters:
        parts.append(
            f"parameters and buffers {_amount(costs.tensor_bytes, 'B', human_bytes(costs.tensor_bytes))}"
        )
    if costs.saved_bytes is None:
        parts.append("saved for backward: none (grad disabled)")
    else:
        parts.append(
            f"saved for backward {_amount(costs.saved_bytes, 'B', human_bytes(costs.saved_bytes))}"
        )
    return [
        COSTS_PREFIX + ", ".join(parts),
        *render_section(UNCOUNTED_SECTION, [f"{name} x{count}" for name, count in costs.uncounted]),
    ]


def read_call_costs(text: str) -> WrittenCosts | None:
    """A costs fact's text after its title, read back; None for text that gives no FLOPs."""
    flops = _FLOPS.search(text)
    if flops is None:
        return None
    output = _OUTPUT.search(text)
    tensors = _TENSOR_BYTES.search(text)
    return WrittenCosts(
        _figure(flops.group(1)),
        _figure(output.group(1)) if output else 0,
        _figure(tensors.group(1)) if tensors else None,
    )


def _figure(text: str) -> int:
    return int(text.replace(",", ""))


def read_trace_costs(header: Sequence[str]) -> WrittenTraceCosts | None:
    """The header's costs totals and uncounted operations; None for a golden without costs."""
    totals = next((line for line in header if line.startswith(COSTS_PREFIX)), None)
    if totals is None:
        return None
    written = totals.removeprefix(COSTS_PREFIX)
    items = GoldenHeader.sections_of(header).get(UNCOUNTED_SECTION)
    if items is None:
        return WrittenTraceCosts(written, None)
    found: dict[str, int] = {}
    for item in items:
        name, _, count = item.rpartition(" x")
        if name and count.isdigit():
            found[name] = int(count)
    return WrittenTraceCosts(written, found)
