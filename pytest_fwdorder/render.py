"""Trace -> golden text, and golden text -> lines: the one owner of the golden format.

Pure functions, no torch. A golden file is a header of `#` lines with totals, then one line
per call in execution order, indented two spaces per nesting level, and under a module's
first call its facts, one `| ` line each (settings, parameters, buffers):

    layer1.0.conv1: Conv2d (f32[1,64,56,56]) -> f32[1,64,56,56]
      | settings: in_channels=64, out_channels=64, kernel_size=(1, 1), ..., bias=False
      | parameters: weight f32[64,64,1,1]
    layer1.0.relu: ReLU #2 (f32[1,64,56,56]) -> f32[1,64,56,56]

path, class, which call of that module it is (only for modules called more than once),
`[frozen]` for modules whose own parameters all have requires_grad=False, `[train]` or
`[eval]` for a module whose mode differs from the model's, `[unregistered]`
for modules not registered under the model, `[scripted]` for TorchScript submodules (one
call; what runs inside them is invisible to hooks), inputs and output. Inputs are named by
forward's parameters where its signature can be read: the first without its name, the
others as `name=value`, in the signature's order, leaving out a None whose default is None
(so passing an argument by position or by keyword, or passing a default None, changes
nothing). No running index numbers, ids, addresses or timings: inserting one call changes
one line (and its facts).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial

from pytest_fwdorder.records import (
    Call,
    ForwardParameters,
    LiteralDescription,
    MappingDescription,
    ModuleFacts,
    ObjectDescription,
    Operation,
    ParameterUse,
    SequenceDescription,
    TensorDescription,
    TensorFact,
    TraceRecords,
    ValueDescription,
)

FORMAT_VERSION = 2
FORMAT_LINE = f"# pytest-fwdorder trace (format {FORMAT_VERSION})"
FORMAT_PATTERN = re.compile(r"# pytest-fwdorder trace \(format ([0-9]+)\)")
# One tensor in inputs or outputs text: dtype and comma-separated sizes, `f32[1,3,224,224]`.
TENSOR_PATTERN = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\]")
UNREGISTERED_MARK = "[unregistered]"
FROZEN_MARK = "[frozen]"
SCRIPTED_MARK = "[scripted]"
MODE_MARKS = ("[train]", "[eval]")
FACT_PREFIX = "| "
OPERATION_PREFIX = "~ "  # an operation line (`ops=True`): `~ relu(f32[2,16]) -> f32[2,16]`
BACKWARD_LINE = "backward:"  # starts the backward section (`backward=True`)
GRADIENT_ARROW = " <- "  # a backward line: `fc: Linear <- f32[2,4]`, the gradient that arrived
RECOMPUTED_PREFIX = "recomputed "
MODE_PREFIX = "# mode: "
CALLS_PREFIX = "# calls: "
# What `folded_mark` writes, read back to count the calls a folded line stands for.
FOLDED_PATTERN = re.compile(r" \[\+([0-9]+) calls? folded\]")
EXTRA_REPR_SETTING = "extra_repr"  # the one setting of a user module: its extra_repr() text
RAISED = "raised"
_LISTED_IN_HEADER = 200


@dataclass(frozen=True, slots=True)
class GoldenLine:
    """One call line of a golden file, split into its parts."""

    depth: int
    path: str
    module_type: str
    nth: int
    registered: bool
    inputs: str
    outputs: str
    text: str
    frozen: bool = False
    reused: bool = False  # the module is called more than once, so the line shows `#nth`
    scripted: bool = False
    mode: str = ""  # "train" or "eval" when it differs from the model's, else ""
    # The module's facts under its first call: "settings: ...", "parameters: ...", ...
    facts: tuple[str, ...] = ()
    # With `ops=True`: the operations its forward made, `relu(f32[2,16]) -> f32[2,16]`.
    operations: tuple[str, ...] = ()
    # The call's index in its trace (-1 for a line read from text): not part of equality.
    index: int = field(default=-1, compare=False)

    @property
    def fact_lines(self) -> list[str]:
        """The facts as the golden shows them, indented under the call line."""
        indent = "  " * (self.depth + 1)
        return [f"{indent}{FACT_PREFIX}{fact}" for fact in self.facts]

    @property
    def operation_lines(self) -> list[str]:
        """The operations as the golden shows them, indented under the call line."""
        indent = "  " * (self.depth + 1)
        return [f"{indent}{OPERATION_PREFIX}{operation}" for operation in self.operations]

    @property
    def name(self) -> str:
        """The call as the golden line names it: `layer1.0.relu #2`, or `conv1`."""
        name = self.path or self.module_type  # no path when a comparison ignores paths
        return f"{name} #{self.nth}" if self.reused else name

    @property
    def identity(self) -> tuple[str, int]:
        """Which call this is, independent of what it was given: (path, nth)."""
        return (self.path, self.nth)


def render_value(
    value: ValueDescription | None, devices: bool = False, local_shapes: bool = False
) -> str:
    """One described value as golden text: `f32[1,3,224,224]`, `(f32[2], None)`, `{'a': i64[]}`.

    A DTensor adds its placements, and with `local_shapes` its shard's shape:
    `f32[2,16]{Shard(1)}`, `f32[2,16]{Shard(1) local=[2,8]}`.
    """
    if isinstance(value, TensorDescription):
        text = f"{value.dtype}[{','.join(map(str, value.shape))}]"
        if value.placements is not None:
            text += render_layout(value, local_shapes)
        return f"{text}@{value.device}" if devices else text
    if isinstance(value, LiteralDescription):
        return value.text
    if isinstance(value, SequenceDescription):
        items = ", ".join(render_value(item, devices, local_shapes) for item in value.items)
        if value.kind == "list":
            return f"[{items}]"
        return f"({items},)" if len(value.items) == 1 else f"({items})"
    if isinstance(value, MappingDescription):
        items = ", ".join(
            f"{key}: {render_value(item, devices, local_shapes)}" for key, item in value.items
        )
        prefix = "" if value.type_name == "dict" else value.type_name
        return f"{prefix}{{{items}}}"
    if isinstance(value, ObjectDescription):
        fields = ", ".join(
            f"{name}={render_value(item, devices, local_shapes)}" for name, item in value.fields
        )
        return f"{value.type_name}({fields})"
    return "?"  # a call still running has no output yet


def render_inputs(
    call: Call,
    devices: bool = False,
    names: bool = True,
    local_shapes: bool = False,
    text_of: Callable[[ValueDescription | None], str] | None = None,
) -> str:
    """The arguments in parentheses: by forward's parameter names where they can be read.

    Without names (or when forward's signature is unknown) positional arguments come first
    as given, then keyword arguments in the order they were passed. `text_of` renders one
    value (a memo shared by the lines of one golden); by default `render_value`.
    """
    if text_of is None:
        text_of = partial(render_value, devices=devices, local_shapes=local_shapes)
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


def render_layout(tensor: TensorDescription, local_shapes: bool = False) -> str:
    """A DTensor's placements in braces, `{Shard(1)}`; with `local_shapes` its shard's shape."""
    local = ""
    if local_shapes and tensor.local_shape is not None:
        local = f" local=[{','.join(map(str, tensor.local_shape))}]"
    return f"{{{tensor.placements}{local}}}"


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


def render_outputs(call: Call, devices: bool = False, local_shapes: bool = False) -> str:
    return RAISED if call.raised else render_value(call.output, devices, local_shapes)


def make_line(
    *,
    depth: int,
    path: str,
    module_type: str,
    nth: int,
    reused: bool,
    frozen: bool,
    registered: bool,
    inputs: str,
    outputs: str,
    scripted: bool = False,
    mode: str = "",
    facts: tuple[str, ...] = (),
    step: int = 0,
    operations: tuple[str, ...] = (),
    index: int = -1,
) -> GoldenLine:
    """A call line and its text; an empty `path` (a comparison ignoring paths) shows no path.

    `step` marks an outermost call `[step N]` (0: no mark).
    """
    head = f"{'  ' * depth}{escape_line_breaks(path) + ': ' if path else ''}{module_type}"
    if reused:
        head += f" #{nth}"
    if frozen:
        head += f" {FROZEN_MARK}"
    if mode:
        head += f" [{mode}]"
    if not registered:
        head += f" {UNREGISTERED_MARK}"
    if scripted:
        head += f" {SCRIPTED_MARK}"
    if step:
        head += f" [step {step}]"
    return GoldenLine(
        depth=depth,
        path=path,
        module_type=module_type,
        nth=nth,
        registered=registered,
        inputs=inputs,
        outputs=outputs,
        text=f"{head} {inputs} -> {outputs}",
        frozen=frozen,
        reused=reused,
        scripted=scripted,
        mode=mode,
        facts=facts,
        operations=operations,
        index=index,
    )


def golden_lines(trace: TraceRecords) -> list[GoldenLine]:
    """The call lines of a trace's golden text, in order, each with its module's facts."""
    devices = trace.options.devices
    hidden = trace.options.hidden
    counts = trace.counts()
    names = "argument_names" not in hidden
    show_mode = "mode" not in hidden and trace.mode is not None
    root_training = trace.mode == "train"
    tied = _tied_names(trace)
    local_shapes = trace.options.local_shapes
    # Descriptions and facts are shared objects (a model passes a few shapes around many
    # times): each is rendered once per golden, found by identity while the trace holds it.
    texts: dict[int, str] = {}
    fact_lines: dict[tuple[int, str], tuple[str, ...]] = {}

    def text_of(value: ValueDescription | None) -> str:
        text = texts.get(id(value))
        if text is None:
            text = texts[id(value)] = render_value(value, devices, local_shapes)
        return text

    # Where a recording holds several outermost calls (a `record` block, generate()), each
    # is marked `[step N]`; a single forward has one and no mark.
    with_operations = trace.operations_skipped is not None
    outermost = [call for call in trace.calls if call.depth == 0]
    steps = {id(call): number for number, call in enumerate(outermost, 1)}
    if len(steps) < 2:
        steps = {}

    def facts_of(facts: ModuleFacts, path: str) -> tuple[str, ...]:
        # The path matters only through tied names; without ties equal facts read alike.
        key = (id(facts), path if tied else "")
        lines = fact_lines.get(key)
        if lines is None:
            lines = fact_lines[key] = render_facts(facts, path, hidden, tied)
        return lines

    lines = [
        make_line(
            depth=call.depth,
            path=call.display_path,
            module_type=call.module_type,
            nth=call.nth,
            reused=counts[call.path] > 1,
            frozen=call.frozen and "parameters" not in hidden,
            registered=call.registered,
            inputs=render_inputs(call, devices, names, local_shapes, text_of),
            outputs=RAISED if call.raised else text_of(call.output),
            scripted=call.scripted,
            mode=(
                ("train" if call.training else "eval")
                if show_mode and call.training is not None and call.training != root_training
                else ""
            ),
            facts=(
                facts_of(call.facts, call.path) if call.nth == 1 and call.facts is not None else ()
            ),
            step=steps.get(id(call), 0) if steps else 0,
            operations=(
                tuple(render_operation(operation, text_of) for operation in call.operations)
                if with_operations
                else ()
            ),
            index=call.index,
        )
        for call in trace.calls
    ]
    if trace.options.fold or trace.options.call_views:
        return _apply_views(trace, lines)
    return lines


def folded_mark(count: int) -> str:
    """What ends the line of a call whose inside is folded: ` [+27 calls folded]`."""
    return f" [+{count} call{'s' if count != 1 else ''} folded]"


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


def render_facts(
    facts: ModuleFacts,
    path: str,
    hidden: frozenset[str] = frozenset(),
    tied: dict[str, tuple[str, ...]] | None = None,
) -> tuple[str, ...]:
    """A module's fact lines: `settings: ...`, `parameters: ...`, `buffers: ...` (if any)."""
    lines = []
    if facts.settings and "settings" not in hidden:
        lines.append(f"settings: {render_settings(facts.settings)}")
    if "parameters" not in hidden:
        prefix = f"{path}." if path else ""
        tied = tied or {}
        for title, group in (
            ("parameters", facts.tensors.parameters),
            ("buffers", facts.tensors.buffers),
        ):
            if group:
                items = ", ".join(
                    render_tensor_fact(fact, tied.get(prefix + fact.name)) for fact in group
                )
                lines.append(f"{title}: {items}")
    lines.extend(f"{name}: {text}" for name, text in facts.extra)
    return tuple(lines)


def render_settings(settings: tuple[tuple[str, str], ...]) -> str:
    """`kernel_size=(3, 3), bias=False`; a user module's extra_repr text as it is, on one line."""
    return ", ".join(
        " ".join(text.split()) if name == EXTRA_REPR_SETTING else f"{name}={text}"
        for name, text in settings
    )


def render_tensor_fact(fact: TensorFact, other_names: tuple[str, ...] | None = None) -> str:
    """`weight f32[64,3,7,7]`, with `frozen`, `not saved`, `tied to x.weight` where they hold;
    a lazy module's tensor that has no shape yet is `weight f32 uninitialized`."""
    shape = " uninitialized" if fact.shape is None else f"[{','.join(map(str, fact.shape))}]"
    text = f"{fact.name} {fact.dtype}{shape}"
    if fact.kind == "parameter" and not fact.requires_grad:
        text += " frozen"
    if not fact.persistent:
        text += " not saved"
    if other_names:
        text += f" tied to {', '.join(other_names)}"
    return text


def _tied_names(trace: TraceRecords) -> dict[str, tuple[str, ...]]:
    """Full tensor name -> the other names of the same tensor, for every name of a tie."""
    names: dict[str, tuple[str, ...]] = {}
    for first, others in trace.tied:
        group = (first, *others)
        for name in group:
            names[name] = tuple(other for other in group if other != name)
    return names


def mode_line(mode: str) -> str:
    """The header line that gives the model's mode: `# mode: eval`."""
    return f"{MODE_PREFIX}{mode}"


def mode_of(header: list[str]) -> str:
    """The model's mode a golden header gives, or "" when it gives none."""
    for line in header:
        if line.startswith(MODE_PREFIX):
            return line[len(MODE_PREFIX) :].strip()
    return ""


def render_header(trace: TraceRecords) -> list[str]:
    """The `#` lines above the calls: totals, reuse, unused and unregistered modules."""
    counts = trace.counts()
    reused = [(path, count) for path, count in counts.items() if count > 1]
    unused = trace.unused()
    unregistered = list(dict.fromkeys(call.display_path for call in trace.unregistered()))
    hidden = trace.options.hidden
    parameters = "parameters" not in hidden
    header = [FORMAT_LINE, f"# model: {trace.root_type}"]
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
    header += _section(
        "called more than once", [f"{path or '<root>'} x{count}" for path, count in reused]
    )
    used = trace.used_through_parameters() if trace.operations_skipped is not None else {}
    known = (
        _known_parameter_uses(trace, unused, parameters) if trace.operations_skipped is None else {}
    )
    header += _section(
        "registered but never called",
        [
            _unused_item(trace, path, parameters)
            for path in unused
            if path not in used and path not in known
        ],
    )
    if trace.operations_skipped is not None:
        header += _section(
            "used through its parameters",
            [_parameter_use_item(trace, path, uses) for path, uses in used.items()],
        )
    elif known:
        header += _section("used through its parameters", list(known.values()))
    header += _section("called but not registered under the model", unregistered)
    aliased = [f"{path or '<root>'} = {', '.join(names)}" for path, names in trace.aliases.items()]
    if aliased:
        header += _section("registered under several names", aliased)
    if trace.tied and parameters:
        header += _section(
            "tied tensors", [f"{first} = {', '.join(others)}" for first, others in trace.tied]
        )
    if hidden:
        header.append(f"# hidden: {', '.join(sorted(hidden))}")
    header += _view_lines(trace)
    header += _recorded_lines(trace)
    if trace.options.devices:
        header.append("# devices: shown")
    if trace.options.local_shapes:
        rank = f" ({trace.options.rank})" if trace.options.rank else ""
        header.append(f"# local shapes: shown{rank}")
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
        tied = _tied_names(trace)
        prefix = f"{path}." if path else ""
        text += " | " + ", ".join(
            render_tensor_fact(fact, tied.get(prefix + fact.name)) for fact in facts.tensors.tensors
        )
    return text


def _section(title: str, items: list[str]) -> list[str]:
    lines = [f"# {title} ({len(items)})" + (":" if items else "")]
    lines.extend(f"#   {item}" for item in items[:_LISTED_IN_HEADER])
    if len(items) > _LISTED_IN_HEADER:
        lines.append(f"#   ... {len(items) - _LISTED_IN_HEADER} more")
    return lines


def render_trace(trace: TraceRecords) -> str:
    """The whole golden text of a trace, ending with a newline."""
    body: list[str] = []
    lines = golden_lines(trace)
    if trace.operations:
        body = _with_operations(trace, lines)
    else:
        for line in lines:
            body.append(line.text)
            if line.facts:
                body.extend(line.fact_lines)
    body += backward_lines(trace)
    return "\n".join(map(escape_line_breaks, [*render_header(trace), *body])) + "\n"


def escape_line_breaks(line: str) -> str:
    """`line` with each character that is not printable written as its escape: `a\\nb`.

    A module name may hold a newline (a `ModuleDict` key); written as it is, one call would
    read back as two lines. Also covers what `str.splitlines` splits on (`\\x85`, `\\u2028`).
    """
    if line.isprintable():
        return line
    return "".join(
        character if character.isprintable() else character.encode("unicode_escape").decode()
        for character in line
    )


def format_problem(text: str) -> str | None:
    """Why golden text of another format cannot be compared, as a clause after its name
    (`the golden file ` + clause), or None when it is of this format.

    A newer format says to upgrade: regenerating would downgrade a teammate's golden.
    """
    version = format_version(text)
    if version == FORMAT_VERSION:
        return None
    if version is not None and version > FORMAT_VERSION:
        return (
            f"was written in format {version} by a newer pytest-fwdorder; this one reads "
            f"and writes format {FORMAT_VERSION}: upgrade pytest-fwdorder (pip install -U "
            "pytest-fwdorder) rather than regenerate it, which would downgrade the golden"
        )
    written = f"format {version}" if version is not None else "an unknown format"
    return (
        f"was written in {written}; this pytest-fwdorder writes format {FORMAT_VERSION}: "
        "regenerate it with `pytest --snapshot-update` and review the new golden (see the "
        "CHANGELOG for what the format adds)"
    )


def format_version(text: str) -> int | None:
    """The format number a golden text declares in its first line, or None."""
    first_line = text.split("\n", 1)[0]
    match = FORMAT_PATTERN.fullmatch(first_line.strip())
    return int(match.group(1)) if match else None


def declared_and_written_calls(text: str) -> tuple[int | None, int]:
    """The call count the header's `# calls: N` line declares (None without one), and the
    calls the body holds: its call lines plus the calls folded into them."""
    declared = None
    for line in text.splitlines():
        if line.startswith(CALLS_PREFIX) and line[len(CALLS_PREFIX) :].strip().isdigit():
            declared = int(line[len(CALLS_PREFIX) :])
            break
    _, lines = parse_golden(text)
    folded = sum(
        int(match.group(1)) for line in lines if (match := FOLDED_PATTERN.search(line.text))
    )
    return declared, len(lines) + folded


def parse_golden(text: str) -> tuple[list[str], list[GoldenLine]]:
    """Split golden text into its header lines and its call lines.

    Lines that do not parse as calls (a hand-edited file) are kept as calls of type `?`
    so that a diff still shows them.
    """
    header: list[str] = []
    lines: list[GoldenLine] = []
    # Operation lines go to the call they are indented under: the last call one level up.
    last_at_depth: dict[int, int] = {}
    operations: dict[int, list[str]] = {}
    in_backward = False
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw.startswith("#"):
            header.append(raw)
            continue
        if in_backward or raw == BACKWARD_LINE:
            in_backward = True  # the backward section is compared as text, with the header
            header.append(raw)
            continue
        fact = raw.lstrip(" ")
        if fact.startswith(FACT_PREFIX) and lines:
            lines[-1] = replace(lines[-1], facts=(*lines[-1].facts, fact[len(FACT_PREFIX) :]))
            continue
        if fact.startswith(OPERATION_PREFIX) and lines:
            owner = last_at_depth.get((len(raw) - len(fact)) // 2 - 1, len(lines) - 1)
            operations.setdefault(owner, []).append(fact[len(OPERATION_PREFIX) :])
            continue
        lines.append(parse_call_line(raw))
        last_at_depth[lines[-1].depth] = len(lines) - 1
    for owner, texts in operations.items():
        lines[owner] = replace(lines[owner], operations=tuple(texts))
    return header, lines


def parse_call_line(raw: str) -> GoldenLine:
    """Parse one call line as `golden_lines` writes it."""
    stripped = raw.lstrip(" ")
    depth = (len(raw) - len(stripped)) // 2
    path, separator, rest = stripped.partition(": ")
    open_paren = rest.find(" (")
    if not separator or open_paren < 0:
        return GoldenLine(depth, stripped, "?", 1, True, "", "", raw)
    head, signature = rest[:open_paren], rest[open_paren + 1 :]
    words = head.split(" ")
    module_type, nth, registered, frozen, reused, scripted = words[0], 1, True, False, False, False
    mode = ""
    for word in words[1:]:
        if word.startswith("#") and word[1:].isdigit():
            nth, reused = int(word[1:]), True
        elif word == UNREGISTERED_MARK:
            registered = False
        elif word == FROZEN_MARK:
            frozen = True
        elif word == SCRIPTED_MARK:
            scripted = True
        elif word in MODE_MARKS:
            mode = word[1:-1]
    close = _matching_close(signature)
    inputs = signature[: close + 1]
    outputs = signature[close + 1 :].removeprefix(" -> ")
    return GoldenLine(
        depth,
        path,
        module_type,
        nth,
        registered,
        inputs,
        outputs,
        raw,
        frozen,
        reused,
        scripted,
        mode,
    )


def _matching_close(text: str) -> int:
    """Index of the bracket that closes the one at text[0], skipping quoted strings."""
    for index, character, level in _outside_quotes(text):
        if character in ")]}" and level == 0:
            return index
    return len(text) - 1


def split_top_level(text: str) -> list[str]:
    """Split golden text at the commas outside brackets and quoted strings."""
    items: list[str] = []
    start = 0
    for index, character, level in _outside_quotes(text):
        if character == "," and level == 0:
            items.append(text[start:index].strip())
            start = index + 1
    if text[start:].strip():
        items.append(text[start:].strip())
    return items


def _outside_quotes(text: str) -> Iterator[tuple[int, str, int]]:
    """Each character outside quoted strings, its index, and the bracket level after it."""
    level = 0
    quote = ""
    index = 0
    while index < len(text):
        character = text[index]
        if quote:
            if character == "\\":
                index += 1
            elif character == quote:
                quote = ""
        elif character in "'\"":
            quote = character
        else:
            if character in "([{":
                level += 1
            elif character in ")]}":
                level -= 1
            yield index, character, level
        index += 1


def render_operation(
    operation: Operation, text_of: Callable[[ValueDescription | None], str] = render_value
) -> str:
    """An operation as its golden line shows it: `linear(f32[2,8], fc.weight) -> f32[2,16]`.

    Arguments as they were given, positional then keyword; model parameters and buffers by
    their full names.
    """
    parts = [text_of(value) for value in operation.args]
    parts.extend(f"{name}={text_of(value)}" for name, value in operation.kwargs)
    output = RAISED if operation.raised else text_of(operation.output)
    return f"{operation.name}({', '.join(parts)}) -> {output}"


def _with_operations(trace: TraceRecords, lines: list[GoldenLine]) -> list[str]:
    """The body with each operation between the calls it ran between, under its own call."""
    by_index = {line.index: line for line in lines}
    operations = trace.operations
    body: list[str] = []
    position = 0

    def add_operations(before: int) -> None:
        nonlocal position
        while position < len(operations) and operations[position].after <= before:
            operation = operations[position]
            owner = by_index.get(operation.call_index)
            if owner is not None and operation.number <= len(owner.operations):
                indent = "  " * (owner.depth + 1)
                text = owner.operations[operation.number - 1]
                body.append(f"{indent}{OPERATION_PREFIX}{text}")
            position += 1

    for line in lines:
        add_operations(line.index)
        body.append(line.text)
        body.extend(line.fact_lines)
    add_operations(len(trace.calls))
    return body


def backward_lines(trace: TraceRecords) -> list[str]:
    """The backward section (`backward=True`): `backward:`, then one line per step in order.

    A step is the gradient of a call's output arriving, `fc: Linear <- f32[2,4]` (indented
    as the call is in forward), or a module run again to recompute activations,
    `recomputed block.0: Linear`. Empty when backward was not recorded.
    """
    backward = trace.backward
    if backward is None:
        return []
    counts = trace.counts()
    devices, local_shapes = trace.options.devices, trace.options.local_shapes
    lines = [BACKWARD_LINE]
    for step in backward.steps:
        indent = "  " * step.depth
        name = step.path or "<root>"
        if step.recomputed:
            lines.append(f"{indent}{RECOMPUTED_PREFIX}{name}: {step.module_type}")
            continue
        nth = f" #{step.nth}" if counts.get(step.path, 0) > 1 else ""
        gradient = render_value(step.gradient, devices, local_shapes)
        lines.append(f"{indent}{name}: {step.module_type}{nth}{GRADIENT_ARROW}{gradient}")
    return lines


def _recorded_lines(trace: TraceRecords) -> list[str]:
    """`# operations: ...` and `# backward: ...` when the trace recorded them."""
    lines = []
    if trace.operations_skipped is not None:
        left_out = ", ".join(trace.operations_skipped) or "nothing"
        lines.append(f"# operations: {len(trace.operations)} recorded (left out: {left_out})")
    if trace.backward is not None:
        steps = len(trace.backward.steps)
        lines.append(
            f"# backward: {steps} step{'s' if steps != 1 else ''}, from the {trace.backward.loss}"
            if trace.backward.loss.startswith("sum ")
            else f"# backward: {steps} step{'s' if steps != 1 else ''}, from "
            f"{trace.backward.loss}(output)"
        )
    return lines


# Modules torch's own classes never call but hand to a function, known without `ops=True`:
# (parent class, child name) -> the function that uses the child's tensors.
_KNOWN_PARAMETER_USES = {("MultiheadAttention", "out_proj"): "multi_head_attention_forward"}


def _known_parameter_uses(
    trace: TraceRecords, unused: list[str], parameters: bool
) -> dict[str, str]:
    """Never-called modules whose tensors a called parent is known to use, with the header
    item that says so: `attn.out_proj: Linear | weight f32[8,8], ... used by ... in attn`."""
    called = trace.counts()
    tied = _tied_names(trace) if parameters else {}
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
    places = len({(use.call_index, use.operation) for use in uses})
    more = f" (+{places - 1} more)" if places > 1 else ""
    return f"{path}: {module_type} | {names} used by {first.operation} in {where}{more}"
