"""Trace calls -> call lines: one `GoldenLine` per call with its inputs, output and module
facts, the loop every render, diff and comparison of a trace runs once per call. No torch.

`golden.format` spells the line (`call_marks`, `call_text`); this module reads each call's
parts once and renders each shared description, argument list and fact list once per golden.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pytest_fwdorder.calls.records import Call, ForwardParameters, ModuleFacts, TraceRecords
from pytest_fwdorder.calls.value_descriptions import LiteralDescription, ValueDescription
from pytest_fwdorder.golden.format import (
    RAISED,
    GoldenLine,
    call_marks,
    call_text,
    render_facts,
    render_value,
)

__all__ = ["TextMemo", "call_lines", "render_inputs", "render_outputs", "tied_names"]


def call_lines(
    trace: TraceRecords,
    counts: dict[str, int],
    under_calls: Mapping[int, tuple[str, ...]] | None = None,
    memo: TextMemo | None = None,
) -> list[GoldenLine]:
    """One line per call, in order, each module's facts under its first call.

    `counts` is the trace's calls per path; `under_calls` the facets' lines under each call
    by call index, marks included (`GoldenLine.under`), None where no facet writes any;
    `memo` the golden's texts of descriptions, where its facets' lines already used it. The loop
    binds what it reads for every call and makes each line positionally: at 100,001 calls
    each attribute or keyword counts.
    """
    shared = _SharedTexts(trace, memo if memo is not None else TextMemo(trace))
    text_of, inputs_of, facts_of = shared.text_of, shared.inputs_of, shared.facts_of
    # The memos read in the loop itself: a method call per lookup would cost more.
    texts, single_inputs, module_facts = shared.texts, shared.inputs, shared.facts
    show_frozen = "parameters" not in shared.hidden
    modes = _mode_marks(trace)
    steps = _step_numbers(trace)
    direct_calls = trace.direct_calls
    lines: list[GoldenLine] = []
    append = lines.append
    for call in trace.calls:
        path, nth, depth, module_type = call.path, call.nth, call.depth, call.module_type
        reused = counts[path] > 1
        frozen = call.frozen and show_frozen
        mode = modes[call.training]
        registered, scripted = call.registered, call.scripted
        direct = call.index in direct_calls if direct_calls else False
        step = steps.get(id(call), 0) if steps else 0
        marks = (
            call_marks(nth, reused, frozen, mode, registered, scripted, direct, step)
            if reused or frozen or mode or not registered or scripted or direct or step
            else ""
        )
        args, facts, output = call.args, call.facts, call.output
        inputs = (
            single_inputs.get((id(facts), id(args[0])))
            if len(args) == 1 and not call.kwargs
            else None
        ) or inputs_of(call)
        outputs = RAISED if call.raised else texts.get(id(output)) or text_of(output)
        display_path = path or "<root>"
        text = call_text(depth, display_path, module_type, marks, inputs, outputs)
        facts_text = (
            (module_facts.get(id(facts)) or facts_of(facts, path))
            if nth == 1 and facts is not None
            else ()
        )
        under = under_calls.get(call.index, ()) if under_calls is not None else ()
        # Positional: sixteen keywords would cost more than the line itself.
        append(GoldenLine(
            depth, display_path, module_type, nth, registered, inputs, outputs, text, frozen,
            reused, scripted, mode, facts_text, under, direct, call.index,
        ))  # fmt: skip
    return lines


def _mode_marks(trace: TraceRecords) -> dict[bool | None, str]:
    """A call's `training` -> its mode mark: "" where it is the model's mode (or hidden)."""
    marks: dict[bool | None, str] = {None: "", True: "", False: ""}
    if "mode" not in trace.options.hidden and trace.mode is not None:
        root_training = trace.mode == "train"
        marks[not root_training] = "eval" if root_training else "train"
    return marks


def _step_numbers(trace: TraceRecords) -> dict[int, int]:
    """The outermost calls' `[step N]` numbers by call id, where a recording holds several
    (a `record` block, generate()); empty for a single forward, which is not marked."""
    outermost = [call for call in trace.calls if call.depth == 0]
    if len(outermost) < 2:
        return {}
    return {id(call): number for number, call in enumerate(outermost, 1)}


class TextMemo:
    """`render_value` with the trace's annotations, each description written once per golden.

    Descriptions are shared objects (a model passes a few shapes around many times), found
    by identity while the trace holds them: make one memo per golden and give it to every
    writer of its lines (the call lines, the facets' lines under the calls: `text_of`).
    """

    def __init__(self, trace: TraceRecords) -> None:
        self.annotations = trace.options.annotations
        self.texts: dict[int, str] = {}  # read directly by the call lines' loop

    def text_of(self, value: ValueDescription | None) -> str:
        text = self.texts.get(id(value))
        if text is None:
            text = self.texts[id(value)] = render_value(value, self.annotations)
        return text


class _SharedTexts:
    """Descriptions and facts are shared objects (a model passes a few shapes around many
    times): each is rendered once per golden, found by identity while the trace holds it."""

    def __init__(self, trace: TraceRecords, memo: TextMemo) -> None:
        self.hidden = trace.options.hidden
        self.names = "argument_names" not in self.hidden
        self.tied = tied_names(trace)
        self.texts, self.text_of = memo.texts, memo.text_of
        self.inputs: dict[tuple[int, int], str] = {}
        # Without ties equal facts read alike whatever the path, and are kept by identity
        # alone; with ties the path matters through tied names.
        self.facts: dict[int, tuple[str, ...]] = {}
        self.tied_facts: dict[tuple[int, str], tuple[str, ...]] = {}

    def inputs_of(self, call: Call) -> str:
        args = call.args
        if len(args) != 1 or call.kwargs:
            return render_inputs(call, self.names, self.text_of)
        # One argument, the common call: its text depends only on forward's parameters
        # (the shared facts') and the shared description.
        key = (id(call.facts), id(args[0]))
        text = self.inputs.get(key)
        if text is None:
            text = self.inputs[key] = render_inputs(call, self.names, self.text_of)
        return text

    def facts_of(self, facts: ModuleFacts, path: str) -> tuple[str, ...]:
        if not self.tied:
            lines = self.facts.get(id(facts))
            if lines is None:
                lines = self.facts[id(facts)] = render_facts(facts, path, self.hidden)
            return lines
        key = (id(facts), path)
        lines = self.tied_facts.get(key)
        if lines is None:
            lines = self.tied_facts[key] = render_facts(facts, path, self.hidden, self.tied)
        return lines


def tied_names(trace: TraceRecords) -> dict[str, tuple[str, ...]]:
    """Full tensor name -> the other names of the same tensor, for every name of a tie."""
    names: dict[str, tuple[str, ...]] = {}
    for first, others in trace.tied:
        group = (first, *others)
        for name in group:
            names[name] = tuple(other for other in group if other != name)
    return names


def render_inputs(
    call: Call,
    names: bool = True,
    text_of: Callable[[ValueDescription | None], str] = render_value,
) -> str:
    """The arguments in parentheses: by forward's parameter names where they can be read.

    Without names (or when forward's signature is unknown) positional arguments come first
    as given, then keyword arguments in the order they were passed. `text_of` renders one
    value (a memo shared by the lines of one golden, with the trace's annotations); by
    default `render_value`.
    """
    forward = call.facts.forward if names and call.facts is not None else None
    args = call.args
    if (
        forward is not None
        and not call.kwargs
        and len(args) == 1
        and forward.positional_names
        and not (type(args[0]) is LiteralDescription and args[0].text == _NONE_TEXT)
    ):
        return f"({text_of(args[0])})"  # the common call, one tensor: what `_bind` gives
    named = _bind(forward, args, call.kwargs) if forward is not None else None
    if named is None:
        parts = [text_of(value) for value in args]
        parts.extend(f"{name}={text_of(value)}" for name, value in call.kwargs)
        return f"({', '.join(parts)})"
    first = forward.positional_names[0] if forward and forward.positional_names else None
    return (
        "("
        + ", ".join(
            text_of(value) if name == first else f"{name}={text_of(value)}" for name, value in named
        )
        + ")"
    )


_NONE_TEXT = "None"


def _bind(
    forward: ForwardParameters,
    args: tuple[ValueDescription, ...],
    kwargs: tuple[tuple[str, ValueDescription], ...],
) -> list[tuple[str, ValueDescription]] | None:
    """Arguments by parameter name in the signature's order, or None if they do not bind.

    A None given for a parameter whose default is None is left out: it is what not passing
    the argument does.
    """
    names = forward.positional_names
    if len(args) > len(names):
        return None
    bound = dict(zip(names, args, strict=False))
    for name, value in kwargs:
        if name in bound:
            return None  # bound twice: the signature read is not the one called
        bound[name] = value
    # The signature's order, keyword-only parameters included, so the order a caller passes
    # keywords in does not matter; names forward takes through **kwargs come last, sorted.
    ordered = [name for name in (*names, *forward.keyword_names) if name in bound]
    ordered += sorted(
        name for name, _ in kwargs if name not in names and name not in forward.keyword_names
    )
    return [
        (name, bound[name])
        for name in ordered
        if not (
            name in forward.none_defaults
            and isinstance(bound[name], LiteralDescription)
            and bound[name].text == _NONE_TEXT  # type: ignore[union-attr]
        )
    ]


def render_outputs(
    call: Call, text_of: Callable[[ValueDescription | None], str] = render_value
) -> str:
    return RAISED if call.raised else text_of(call.output)
