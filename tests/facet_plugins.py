"""Offering a toy facet from outside the package, as a third-party plugin would: a plugin
object with the `pytest_fwdorder_facets` hook, registered for the length of one test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest

from pytest_fwdorder import FacetChangeKind
from pytest_fwdorder.calls.call_line_facets import LineUnderCall


class FacetPlugin:
    """A plugin whose facets hook offers one facet."""

    def __init__(self, facet: object) -> None:
        self.facet = facet

    def pytest_fwdorder_facets(self) -> list[object]:
        return [self.facet]


@contextmanager
def offered(config: pytest.Config, facet: object) -> Iterator[object]:
    """`facet` offered by a plugin registered with `config` until the block ends."""
    plugin = FacetPlugin(facet)
    config.pluginmanager.register(plugin)
    try:
        yield facet
    finally:
        config.pluginmanager.unregister(plugin)


class CallNesting:
    """A toy facet with one value per trace that gives each call a fact when the trace ends,
    as costs does: how many module calls were open when the call started, seen by a global
    forward pre-hook of its own (not the recorder's depth).

    It uses the members a watched facet may add: `configured(options)` (with parameters
    hidden it says so in each fact), `call_facts(value, trace)`, and its watcher's
    `recording(recorder, root)` and `trace_ended(trace)`.
    """

    title = "nesting"
    change_words = "nesting changed"
    option = "ops"

    def __init__(self, parameters_hidden: bool = False) -> None:
        self.parameters_hidden = parameters_hidden

    def configured(self, options: object) -> CallNesting:
        return CallNesting("parameters" in getattr(options, "hide", ()))

    def watcher(self, options: object) -> NestingWatcher:
        return NestingWatcher()

    def header_lines(self, value: tuple[int, ...]) -> list[str]:
        return [f"# nesting: {len(value)} calls"]

    def call_facts(self, value: tuple[int, ...], trace: object) -> list[str | None]:
        suffix = " (parameters hidden)" if self.parameters_hidden else ""
        return [f"{nesting}{suffix}" if nesting else None for nesting in value]

    def read_header(self, header: list[str]) -> str | None:
        return next((line for line in header if line.startswith("# nesting: ")), None)

    def describe_changes(self, old: str, new: str) -> list[str]:
        return [] if old == new else [f"{old} -> {new}"]


class NestingWatcher:
    """Counts the open calls at each call's start with global forward hooks, installed only
    inside the recording (`recording`), and matches them to the trace's calls at its end."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.open = 0
        self.recording_entered_with: tuple[object, object] | None = None
        self.nesting: tuple[int, ...] | None = None

    @contextmanager
    def watching(self) -> Iterator[None]:
        yield

    def started(self, recorder: object) -> None:
        pass

    @contextmanager
    def recording(self, recorder: object, root: object) -> Iterator[None]:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        def before(module: object, args: object) -> None:
            self.seen.append(self.open)
            self.open += 1

        def after(module: object, args: object, output: object) -> None:
            self.open -= 1

        self.recording_entered_with = (recorder, root)
        pre = register_module_forward_pre_hook(before)
        post = register_module_forward_hook(after, always_call=True)
        try:
            yield
        finally:
            pre.remove()
            post.remove()

    @contextmanager
    def forward_context(self) -> Iterator[None]:
        yield

    def forward_ran(self, model: object, inputs: object, output: object) -> None:
        pass

    def trace_ended(self, trace: Any) -> None:
        calls = trace.calls
        assert len(calls) == len(self.seen), "one nesting per call, in the order calls started"
        self.nesting = tuple(self.seen)

    def value(self) -> tuple[int, ...] | None:
        return self.nesting


class ComparedCallNesting(CallNesting):
    """`CallNesting` that also reads its per-call facts back and compares them: the diff
    says a changed nesting in the facet's own summary line, the biggest change first."""

    def configured(self, options: object) -> ComparedCallNesting:
        return ComparedCallNesting("parameters" in getattr(options, "hide", ()))

    def read_call_fact(self, text: str) -> int | None:
        number = text.split(" ")[0]
        return int(number) if number.isdigit() else None

    def describe_call_change(self, old: int, new: int) -> str | None:
        return None if old == new else f"{old} -> {new}"

    def summary_line(self, calls: list[tuple[str, int, int, str]]) -> str:
        ordered = sorted(calls, key=lambda call: abs(call[2] - call[1]), reverse=True)
        return f"nesting changed at {len(calls)} calls, most first: " + "; ".join(
            f"{name} {detail}" for name, _, _, detail in ordered
        )


class NestingBars(ComparedCallNesting):
    """`ComparedCallNesting` that the HTML report draws as a bar per call: its nesting's
    share of the outermost calls' (`bar_class`, `bar_measure`, `bar_words`)."""

    bar_class = "fo-nesting"

    def configured(self, options: object) -> NestingBars:
        return NestingBars("parameters" in getattr(options, "hide", ()))

    def bar_measure(self, value: int) -> int:
        return value

    def bar_words(self, measure: int, total: int) -> tuple[str, str]:
        return f"{measure} of {total}", f"nesting {measure}"


class NestingWarnings(CallNesting):
    """`CallNesting` whose header also lists the calls nested deeper than one level, a
    section the HTML report shows as a warning box (`report_warnings`)."""

    report_warnings = (("deep calls", "deep call", "nested more than one level down"),)

    def configured(self, options: object) -> NestingWarnings:
        return NestingWarnings("parameters" in getattr(options, "hide", ()))

    def header_lines(self, value: tuple[int, ...]) -> list[str]:
        deep = [f"call {index}" for index, nesting in enumerate(value) if nesting > 1]
        lines = [f"# deep calls ({len(deep)})" + (":" if deep else "")]
        return [*super().header_lines(value), *lines, *(f"#   {item}" for item in deep)]


class NestingTable(CallNesting):
    """`CallNesting` that `fwdorder show --ops --sort depth` ranks the calls by
    (`table_orders`, `table`): the deepest first, one `depth  call` line each."""

    table_orders: ClassVar[dict[str, str]] = {"depth": "nesting, deepest first"}

    def configured(self, options: object) -> NestingTable:
        return NestingTable("parameters" in getattr(options, "hide", ()))

    def table(self, value: tuple[int, ...], trace: Any, order: str, top: int | None) -> str:
        ranked = sorted(zip(value, trace.calls, strict=True), key=lambda pair: -pair[0])
        shown = ranked if top is None else ranked[:top]
        return "".join(f"{depth}  {call.path or '<root>'}\n" for depth, call in shown)


class NestingLines(CallNesting):
    """`CallNesting` written as a line under each call (`line_mark`, `call_lines`) instead of
    a fact, and read back into an int (`read_call_line`): how a facet writes per-call lines
    the way operations do. Each line goes right after its call started (`after`)."""

    title = "opened"
    line_mark = "% "

    def configured(self, options: object) -> NestingLines:
        return NestingLines()

    def call_facts(self, value: tuple[int, ...], trace: object) -> list[str | None]:
        return [None] * len(value)

    def call_lines(
        self, value: tuple[int, ...], trace: object, text_of: Callable[[object], str]
    ) -> list[LineUnderCall]:
        return [
            LineUnderCall(index, index + 1, f"open {nesting}")
            for index, nesting in enumerate(value)
            if nesting
        ]

    def read_call_line(self, text: str) -> int:
        return int(text.removeprefix("open "))


class ComparedNestingLines(NestingLines):
    """`NestingLines` whose lines a diff compares (`describe_call_line_change`): a nesting that
    differs by one or less is no change, as a tolerance would have it."""

    change_words = "opened changed"

    def configured(self, options: object) -> ComparedNestingLines:
        return ComparedNestingLines()

    def describe_call_line_change(self, old: int | None, new: int | None) -> str | None:
        if old is None or new is None:
            return f"open {old} -> open {new}"
        return None if abs(new - old) <= 1 else f"open {old} -> open {new}"


class KindedNestingLines(NestingLines):
    """`NestingLines` whose changes come in kinds of its own (`change_kinds`): a line whose
    nesting grew is `nesting deepened`, one inserted `nesting opened`, one removed `nesting
    closed`; a nesting that shrank is no change."""

    change_words = "opened changed"
    change_kinds = (
        FacetChangeKind("nesting", "deepened", "with nestings deepened"),
        FacetChangeKind("nesting", "opened", "with nestings opened"),
        FacetChangeKind("nesting", "closed", "with nestings closed"),
    )

    def configured(self, options: object) -> KindedNestingLines:
        return type(self)()

    def line_changes(self, old: list[int], new: list[int]) -> list[tuple[str, str]]:
        paired = min(len(old), len(new))
        found = [
            ("nesting deepened", f"open {before} -> open {after}")
            for before, after in zip(old[:paired], new[:paired], strict=True)
            if after > before
        ]
        found += [("nesting opened", f"open {after}") for after in new[paired:]]
        found += [("nesting closed", f"open {before}") for before in old[paired:]]
        return found


class UndeclaredKindLines(KindedNestingLines):
    """`KindedNestingLines` that gives a kind its `change_kinds` do not declare."""

    def line_changes(self, old: list[int], new: list[int]) -> list[tuple[str, str]]:
        return [("nesting widened", "open 1 -> open 9")] if old != new else []


class ClashingKindLines(KindedNestingLines):
    """`KindedNestingLines` that declares a kind the operations facet has already."""

    change_kinds = (FacetChangeKind("operation", "inserted", "with operations inserted"),)
