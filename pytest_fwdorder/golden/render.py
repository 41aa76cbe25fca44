"""Trace records -> golden lines: which calls, facts, views and facets' lines a trace's
golden text shows, and in what order. Pure functions, no torch.

How each kind of line is spelled, and read back, is `golden.format`'s; this module decides
what goes in a golden: the header's totals and sections, one line per call (with the calls
a view folds or hides), each module's facts under its first call, the facets' lines under
the calls between the calls they came between, and the facets' sections after the calls.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping
from dataclasses import replace

from pytest_fwdorder.calls.call_line_facets import writes_call_lines
from pytest_fwdorder.calls.facet_records import ParameterUse
from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.golden.call_lines import TextMemo, call_lines, tied_names
from pytest_fwdorder.golden.facet_facts import facet_header_lines, render_facet_fact
from pytest_fwdorder.golden.format import (
    ALIASED_SECTION,
    CALLS_PREFIX,
    FORMAT_LINE,
    FORWARD_RUNS_SECTION,
    MODEL_PREFIX,
    NEVER_CALLED_SECTION,
    ODD_BLOCKS_SECTION,
    ODD_CLASS_MEMBERS_SECTION,
    REUSED_SECTION,
    TIED_SECTION,
    UNREGISTERED_SECTION,
    USED_THROUGH_PARAMETERS_SECTION,
    GoldenLine,
    escape_line_breaks,
    folded_mark,
    mode_line,
    render_forward_run,
    render_odd_block,
    render_section,
    render_tensor_fact,
)
from pytest_fwdorder.golden.garbage_collection import without_garbage_collection
from pytest_fwdorder.golden.odd_blocks import odd_blocks, odd_class_members

__all__ = ["end_lines", "golden_lines", "render_header", "render_trace"]

# A facet's line under a call as the body places it: (how many calls started before it, the
# call it belongs to, its text with the facet's mark).
_PlacedLine = tuple[int, int, str]


def golden_lines(trace: TraceRecords) -> list[GoldenLine]:
    """The call lines of a trace's golden text, in order, each with its module's facts."""
    memo = TextMemo(trace)
    return _golden_lines(trace, trace.counts(), _lines_under_calls(trace, memo), memo)


def _golden_lines(
    trace: TraceRecords,
    counts: dict[str, int],
    under: list[_PlacedLine],
    memo: TextMemo,
) -> list[GoldenLine]:
    """`golden_lines`, with the calls per path counted already (render counts them once),
    the facets' lines under the calls written (`_lines_under_calls`) and the golden's texts
    of descriptions (`TextMemo`), which they wrote into."""
    lines = _with_per_call_facts(trace, call_lines(trace, counts, _by_call(under), memo))
    if trace.options.fold or trace.options.call_views:
        return _apply_views(trace, lines)
    return lines


def _with_per_call_facts(trace: TraceRecords, lines: list[GoldenLine]) -> list[GoldenLine]:
    """The lines with the facts every call may have, after its module's: those of the facets
    with one value per trace (`call_facts`), then the facets' (the built-in ones first)."""
    for facet in trace.trace_facets:
        write = getattr(facet, "call_facts", None)
        if write is not None:
            texts = write(trace.trace_facet_values[facet.title], trace)
            lines = _with_call_facts(facet.title, texts, lines)
    if trace.facets:
        lines = _with_facets(trace, lines)
    return lines


def _lines_under_calls(trace: TraceRecords, memo: TextMemo) -> list[_PlacedLine]:
    """The lines the trace's facets write under the calls (`call_lines`), in the order the
    body writes them: by the calls started before each, a facet's in its own order, the
    facets' in theirs where they tie. Empty when no facet writes any."""
    written = []
    for facet in trace.trace_facets:
        if writes_call_lines(facet):
            value = trace.trace_facet_values[facet.title]
            mark = facet.line_mark
            found = facet.call_lines(value, trace, memo.text_of)
            written.append([(after, call_index, mark + text) for call_index, after, text in found])
    if len(written) == 1:
        return written[0]
    return list(heapq.merge(*written, key=lambda placed: placed[0]))


def _by_call(under: list[_PlacedLine]) -> dict[int, tuple[str, ...]] | None:
    """The facets' lines under each call by call index, in order (`GoldenLine.under`); None
    when there are none."""
    if not under:
        return None
    by_call: dict[int, list[str]] = {}
    for _, call_index, text in under:
        by_call.setdefault(call_index, []).append(text)
    return {call_index: tuple(texts) for call_index, texts in by_call.items()}


def _with_call_facts(
    title: str, texts: list[str | None], lines: list[GoldenLine]
) -> list[GoldenLine]:
    """The lines with a fact `title: text` after their facts, for each text not None."""
    return [
        line if text is None else replace(line, facts=(*line.facts, f"{title}: {text}"))
        for text, line in zip(texts, lines, strict=True)
    ]


def _with_facets(trace: TraceRecords, lines: list[GoldenLine]) -> list[GoldenLine]:
    """The lines with each facet's value as a fact, last, in the facets' order."""
    facets = [(facet, trace.facet_values.get(facet.title, {})) for facet in trace.facets]
    made = []
    for call, line in zip(trace.calls, lines, strict=True):
        found = tuple(
            (facet, values[call.index]) for facet, values in facets if call.index in values
        )
        if found:
            facts = tuple(render_facet_fact(facet, value) for facet, value in found)
            line = replace(line, facts=(*line.facts, *facts), facet_values=found)
        made.append(line)
    return made


def _apply_views(trace: TraceRecords, lines: list[GoldenLine]) -> list[GoldenLine]:
    """The lines with folded calls' insides summarized and hidden calls left out.

    A call is folded when its path (`<root>` for the root) or type name is in the `fold`
    option or a plugin chose "fold" for its path; a plugin's "hide" leaves the call and the
    calls inside it out. A call's inside follows it in the trace as the deeper calls.
    """
    fold = set(trace.options.fold)
    views = dict(trace.options.call_views)
    kept: list[GoldenLine] = []
    folded: dict[int, int] = {}  # index in `kept` -> calls folded into it
    inside: int | None = None  # depth of the folded or hidden call being skipped
    folding: int | None = None
    for call, line in zip(trace.calls, lines, strict=True):
        if inside is not None and call.depth > inside:
            if folding is not None:
                folded[folding] += 1
            continue
        inside = folding = None
        view = views.get(call.path)
        if view is None and (call.display_path in fold or call.module_type in fold):
            view = "fold"
        if view == "hide":
            inside = call.depth
            continue
        kept.append(line)
        if view == "fold":
            inside, folding = call.depth, len(kept) - 1
            folded[folding] = 0
    for index, count in folded.items():
        if count:
            kept[index] = replace(kept[index], text=kept[index].text + folded_mark(count))
    return kept


def render_header(trace: TraceRecords, counts: dict[str, int] | None = None) -> list[str]:
    """The `#` lines above the calls: totals, reuse, unused and unregistered modules.

    `counts` is the trace's calls per path where the caller counted them already.
    """
    counts = trace.counts() if counts is None else counts
    hidden = trace.options.hidden
    parameters = "parameters" not in hidden
    header = [FORMAT_LINE, f"{MODEL_PREFIX}{trace.root_type}"]
    if trace.mode is not None and "mode" not in hidden:
        header.append(mode_line(trace.mode))
    header += [f"{CALLS_PREFIX}{len(trace.calls)}", f"# modules called: {len(counts)}"]
    if trace.totals is not None and parameters:
        totals = trace.totals
        frozen = totals.parameter_count - totals.trainable_parameter_count
        header.append(
            f"# parameters: {totals.parameter_count:,} "
            f"(trainable {totals.trainable_parameter_count:,}, frozen {frozen:,})"
        )
        header.append(f"# buffers: {totals.buffer_count:,}")
        if totals.uninitialized_count:
            header.append(f"# uninitialized (lazy) tensors: {totals.uninitialized_count}")
    header += _section_lines(trace, counts, parameters)
    if hidden:
        header.append(f"# hidden: {', '.join(sorted(hidden))}")
    header += _view_lines(trace)
    header += _recorded_lines(trace)
    header += facet_header_lines(trace.facets)
    for facet in trace.trace_facets:
        header += facet.header_lines(trace.trace_facet_values[facet.title])
    header += [annotation.header_line() for annotation in trace.options.annotations]
    return header


def _section_lines(trace: TraceRecords, counts: dict[str, int], parameters: bool) -> list[str]:
    """The header's listed sections: reused, never called, used through parameters,
    unregistered, forward runs, odd blocks, aliases and ties."""
    reused = [(path, count) for path, count in counts.items() if count > 1]
    unused = trace.unused()
    unregistered = list(dict.fromkeys(call.display_path for call in trace.unregistered()))
    header: list[str] = []
    header += render_section(
        REUSED_SECTION, [f"{path or '<root>'} x{count}" for path, count in reused]
    )
    # Where the trace recorded which functions its tensors were given to, it knows the uses;
    # otherwise only those of torch's own classes are known.
    recorded = trace.parameter_uses is not None
    used = trace.used_through_parameters() if recorded else {}
    known = {} if recorded else _known_parameter_uses(trace, unused, parameters, counts)
    header += render_section(
        NEVER_CALLED_SECTION,
        [
            _unused_item(trace, path, parameters)
            for path in unused
            if path not in used and path not in known
        ],
    )
    if recorded:
        header += render_section(
            USED_THROUGH_PARAMETERS_SECTION,
            [_parameter_use_item(trace, path, uses) for path, uses in used.items()],
        )
    elif known:
        header += render_section(USED_THROUGH_PARAMETERS_SECTION, list(known.values()))
    header += render_section(UNREGISTERED_SECTION, unregistered)
    if trace.forward_runs:
        header += render_section(
            FORWARD_RUNS_SECTION, [render_forward_run(run) for run in trace.forward_runs]
        )
    odd = odd_blocks(trace)
    if odd:
        header += render_section(ODD_BLOCKS_SECTION, [render_odd_block(item) for item in odd])
    odd = odd_class_members(trace)
    if odd:
        header += render_section(
            ODD_CLASS_MEMBERS_SECTION, [render_odd_block(item) for item in odd]
        )
    aliased = [f"{path or '<root>'} = {', '.join(names)}" for path, names in trace.aliases.items()]
    if aliased:
        header += render_section(ALIASED_SECTION, aliased)
    if trace.tied and parameters:
        header += render_section(
            TIED_SECTION, [f"{first} = {', '.join(others)}" for first, others in trace.tied]
        )
    return header


def _view_lines(trace: TraceRecords) -> list[str]:
    """`# folded: layer1, layer2` and `# calls hidden: ...` when the golden is a view."""
    options = trace.options
    folded = [*options.fold]
    folded += [path or "<root>" for path, view in options.call_views if view == "fold"]
    hidden = [path or "<root>" for path, view in options.call_views if view == "hide"]
    lines = [f"# folded: {', '.join(folded)}"] if folded else []
    if hidden:
        lines.append(f"# calls hidden: {', '.join(hidden)}")
    return lines


def _unused_item(trace: TraceRecords, path: str, parameters: bool) -> str:
    """A never-called module: path and type, and its own tensors (a checkpoint holds them)."""
    found = trace.modules.get(path)
    if found is None:
        return path or "<root>"
    module_type, facts = found
    text = f"{path or '<root>'}: {module_type}"
    if parameters and facts.tensors.tensors:
        tied = tied_names(trace)
        prefix = f"{path}." if path else ""
        text += " | " + ", ".join(
            render_tensor_fact(fact, tied.get(prefix + fact.name)) for fact in facts.tensors.tensors
        )
    return text


@without_garbage_collection
def render_trace(trace: TraceRecords) -> str:
    """The whole golden text of a trace, ending with a newline."""
    counts = trace.counts()
    memo = TextMemo(trace)
    under = _lines_under_calls(trace, memo)
    lines = _golden_lines(trace, counts, under, memo)
    text_lines = render_header(trace, counts)
    text_lines += _body_with_lines_under(lines, under, len(trace.calls)) if under else _body(lines)
    text_lines += end_lines(trace, counts)
    text_lines.append("")  # the newline that ends the text, without copying it whole
    text = "\n".join(text_lines)
    # Almost every golden is printable throughout: a C-level pass says so, and only a
    # golden with a line to escape pays a Python call per line.
    if not _printable(text, len(text_lines) - 1):
        text = "\n".join(map(escape_line_breaks, text_lines))
    return text


# What `str.isprintable` accepts among ASCII characters: the space to the tilde.
_PRINTABLE_ASCII = bytes(range(0x20, 0x7F))


def _printable(text: str, line_breaks: int) -> bool:
    """Whether `text`, its lines joined by `line_breaks` newlines, holds no other character
    that is not printable (which `escape_line_breaks` would write as its escape)."""
    if text.isascii():
        # Deleting the printable bytes leaves the newlines that join the lines, and any
        # control character a line holds: 10 ms for a 100,001-call golden, not 30.
        return len(text.encode("ascii").translate(None, _PRINTABLE_ASCII)) == line_breaks
    return all(map(str.isprintable, text.split("\n"))) and text.count("\n") == line_breaks


def _body(lines: list[GoldenLine]) -> list[str]:
    """Each call line with its fact lines under it; the facts of modules alike at one depth
    are one tuple, indented once."""
    body: list[str] = []
    append, extend = body.append, body.extend
    indented: dict[tuple[int, int], list[str]] = {}
    for line in lines:
        append(line.text)
        facts = line.facts
        if facts:
            key = (id(facts), line.depth)
            fact_lines = indented.get(key)
            if fact_lines is None:
                fact_lines = indented[key] = line.fact_lines
            extend(fact_lines)
    return body


def _body_with_lines_under(
    lines: list[GoldenLine], under: list[_PlacedLine], calls: int
) -> list[str]:
    """The body with each facet's line under a call between the calls it came between,
    indented under its own call (dropped with a call a view leaves out); `calls` is the
    trace's call count."""
    by_index = {line.index: line for line in lines}
    body: list[str] = []
    position = 0

    def add_lines(before: int) -> None:
        nonlocal position
        while position < len(under) and under[position][0] <= before:
            _, call_index, text = under[position]
            owner = by_index.get(call_index)
            if owner is not None:
                body.append(f"{'  ' * (owner.depth + 1)}{text}")
            position += 1

    for line in lines:
        add_lines(line.index)
        body.append(line.text)
        body.extend(line.fact_lines)
    add_lines(calls)
    return body


def end_lines(
    trace: TraceRecords,
    counts: dict[str, int] | None = None,
    *,
    left_out: Collection[str] = (),
    type_names: Mapping[str, str] | None = None,
) -> list[str]:
    """The sections the trace's facets write after the calls (`end_lines`), in the facets'
    order; empty when none has one. `counts`: the calls per path where the caller counted
    them already; `left_out`: the titles of facets whose sections to leave out;
    `type_names`: module classes to write under another name (`types_renamed`)."""
    lines: list[str] = []
    for facet in trace.trace_facets:
        write = getattr(facet, "end_lines", None)
        if write is not None and facet.title not in left_out:
            counts = trace.counts() if counts is None else counts
            value = trace.trace_facet_values[facet.title]
            rename = getattr(facet, "types_renamed", None)
            if type_names is not None and rename is not None:
                value = rename(value, type_names)
            lines += write(value, trace, counts)
    return lines


def _recorded_lines(trace: TraceRecords) -> list[str]:
    """The facets' lines on what the trace recorded besides its calls (`summary_lines`)."""
    lines = []
    for facet in trace.trace_facets:
        summarize = getattr(facet, "summary_lines", None)
        if summarize is not None:
            lines += summarize(trace.trace_facet_values[facet.title])
    return lines


# Modules torch's own classes never call but hand to a function, known without `ops=True`:
# (parent class, child name) -> the function that uses the child's tensors.
_KNOWN_PARAMETER_USES = {("MultiheadAttention", "out_proj"): "multi_head_attention_forward"}


def _known_parameter_uses(
    trace: TraceRecords, unused: list[str], parameters: bool, called: dict[str, int]
) -> dict[str, str]:
    """Never-called modules whose tensors a called parent is known to use, with the header
    item that says so: `attn.out_proj: Linear | weight f32[8,8], ... used by ... in attn`."""
    tied = tied_names(trace) if parameters else {}
    found: dict[str, str] = {}
    for path in unused:
        parent, _, name = path.rpartition(".")
        function = _KNOWN_PARAMETER_USES.get((trace.modules.get(parent, ("",))[0], name))
        if function is None or parent not in called or path not in trace.modules:
            continue
        module_type, facts = trace.modules[path]
        where = f"used by {function} in {parent or '<root>'}"
        if parameters and facts.tensors.tensors:
            tensors = ", ".join(
                render_tensor_fact(fact, tied.get(f"{path}.{fact.name}"))
                for fact in facts.tensors.tensors
            )
            where = f"{tensors} {where}"
        found[path] = f"{path}: {module_type} | {where}"
    return found


def _parameter_use_item(trace: TraceRecords, path: str, uses: list[ParameterUse]) -> str:
    """A module never called but used through its tensors, and where:
    `attn.out_proj: Linear | weight, bias used by multi_head_attention_forward in attn`."""
    module_type = trace.modules[path][0] if path in trace.modules else "?"
    names = ", ".join(dict.fromkeys(use.tensor[len(path) + 1 :] for use in uses))
    first = uses[0]
    call = trace.calls[first.call_index]
    where = call.display_path + (f" #{call.nth}" if trace.counts()[call.path] > 1 else "")
    places = len({(use.call_index, use.function) for use in uses})
    more = f" (+{places - 1} more)" if places > 1 else ""
    return f"{path}: {module_type} | {names} used by {first.function} in {where}{more}"
