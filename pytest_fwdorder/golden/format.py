"""The golden file's text format: how each kind of line is spelled, and read back. No torch.

A golden file is a header of `#` lines with totals, then one line
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

A facet behind the protocol (values, backward, costs, graph breaks, initialization, a
plugin's) spells its own lines, in its module.

Every reader of golden text (diff, compare, view, report, the command line, the snapshot
extension) reads a line where it is written, so a change to one kind of line is made in one
module; `golden.parse` cuts a whole golden into its header and call
lines with the call line's spelling from here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.calls.facet_records import ForwardRun, OddBlock
from pytest_fwdorder.calls.records import ModuleFacts, TensorFact
from pytest_fwdorder.calls.value_descriptions import (
    LiteralDescription,
    MappingDescription,
    ObjectDescription,
    SequenceDescription,
    TensorDescription,
    ValueDescription,
)
from pytest_fwdorder.hookspecs import call_line_writers

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_fwdorder.calls.facet_records import Facet, TensorAnnotation

FORMAT_VERSION = 2
FORMAT_LINE = f"# pytest-fwdorder trace (format {FORMAT_VERSION})"
FORMAT_PATTERN = re.compile(r"# pytest-fwdorder trace \(format ([0-9]+)\)")
# One tensor in inputs or outputs text: dtype and comma-separated sizes, `f32[1,3,224,224]`.
TENSOR_PATTERN = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\]")
UNREGISTERED_MARK = "[unregistered]"
FROZEN_MARK = "[frozen]"
SCRIPTED_MARK = "[scripted]"
# A call recorded from a forward run without a module call (`self.mlp.forward(x)`).
DIRECT_MARK = "[direct]"
MODE_MARKS = ("[train]", "[eval]")
FACT_PREFIX = "| "
# A facet's section after the calls starts with its title and a colon (`backward:`) and
# runs to the next such line or the end; a call line always holds ": " and a class name,
# so it never reads as one. `parse_golden` keeps these sections last among the header.
END_SECTION_TITLE = re.compile(r"[a-z][a-z0-9_]*( [a-z0-9_]+)*:")
MODE_PREFIX = "# mode: "
CALLS_PREFIX = "# calls: "
# What `folded_mark` writes, read back to count the calls a folded line stands for.
FOLDED_PATTERN = re.compile(r" \[\+([0-9]+) calls? folded\]")
EXTRA_REPR_SETTING = "extra_repr"  # the one setting of a user module: its extra_repr() text
RAISED = "raised"
_LISTED_IN_HEADER = 200
MODEL_PREFIX = "# model: "
# The releases that wrote a golden, after its format line: `# written with: torch 2.14.1,
# torchvision 0.29.1`. Written by the snapshot extension, read by upgrades.py, and left out
# of every comparison (parse_golden skips it), since it tells where a golden came from, not
# what the model computes.
ENVIRONMENT_PREFIX = "# written with: "
# The tensor facts' flags after dtype and shape: `weight f32[8,3] frozen not saved tied to b`.
FROZEN_FLAG = "frozen"
NOT_SAVED_FLAG = "not saved"
TIED_FLAG = "tied to "
# A tie at the end of a tensor fact, `tied to a.weight, b.weight`, up to the next fact.
TIED_PATTERN = re.compile(r" tied to [^,]*(, [a-zA-Z_<][^ ,]*\.[^ ,]*)*")
# The header sections that list items, as `render_header` titles them.
REUSED_SECTION = "called more than once"
NEVER_CALLED_SECTION = "registered but never called"
USED_THROUGH_PARAMETERS_SECTION = "used through its parameters"
UNREGISTERED_SECTION = "called but not registered under the model"
ALIASED_SECTION = "registered under several names"
TIED_SECTION = "tied tensors"
FORWARD_RUNS_SECTION = "forward run without a call"
ODD_BLOCKS_SECTION = "blocks that differ from their siblings"
ODD_CLASS_MEMBERS_SECTION = "modules whose dtypes differ from their class"
# `# called more than once (3):`; after the count, some sections give more totals:
# `# initialization (6 steps, 72 random draws, seed 0):`.
_SECTION_TITLE = re.compile(r"# (?P<title>[a-z ]+) \((?P<count>[0-9]+)(?: [^)]*)?\):?")
SECTION_ITEM = "#   "
# The titles of the facts the golden writes itself; each facet (calls/facet_records.py), a
# built-in one included, takes a title of its own.
FACT_TITLES = ("settings", "parameters", "buffers")


# Not `frozen=True`: a frozen dataclass sets each of its 16 fields through
# `object.__setattr__`, which made building the lines of a 100,001-call golden cost 10x what
# plain slots do. Equal lines hash alike as before; nothing assigns to a line once made
# (`dataclasses.replace` makes a new one).
@dataclass(slots=True, unsafe_hash=True)
class GoldenLine:
    """One call line of a golden file, split into its parts. Never changed once made."""

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
    # The lines facets write under the call, each with its facet's mark (`line_mark`,
    # calls/facet_records.py): `~ relu(f32[2,16]) -> f32[2,16]`.
    under: tuple[str, ...] = ()
    direct: bool = False  # recorded from `module.forward(...)`: marked `[direct]`
    # The call's index in its trace (-1 for a line read from text): not part of equality.
    index: int = field(default=-1, compare=False)
    # The facets' values (calls/facet_records.py), each with its facet, typed as the facet
    # reads them: their text is among `facts`, which equality compares.
    facet_values: tuple[tuple[Facet, Any], ...] = field(default=(), compare=False)
    # Whether a line whose path a comparison blanked was its module's first call, where the
    # module's facts are (`is_first_call`): not part of equality, as its path is not.
    nameless_first_call: bool = field(default=False, compare=False)

    @property
    def fact_lines(self) -> list[str]:
        """The facts as the golden shows them, indented under the call line."""
        indent = "  " * (self.depth + 1)
        return [f"{indent}{FACT_PREFIX}{fact}" for fact in self.facts]

    @property
    def under_lines(self) -> list[str]:
        """The facets' lines under the call as the golden shows them, indented under it."""
        indent = "  " * (self.depth + 1)
        return [f"{indent}{text}" for text in self.under]

    def values_under(self, title: str) -> tuple[Any, ...]:
        """The values of the lines the facet titled `title` writes under the call, each read
        back by the facet (`read_call_line`): `line.values_under("operations")`.

        Raises KeyError for a title no registered facet writing such lines has.
        """
        writers = call_line_writers(FACT_TITLES)
        for facet in writers:
            if facet.title == title:
                mark = facet.line_mark
                written = [text[len(mark) :] for text in self.under if text.startswith(mark)]
                return tuple(map(facet.read_call_line, written))
        raise KeyError(
            f"no facet titled {title!r} writes lines under the calls: name one of "
            f"{', '.join(repr(facet.title) for facet in writers)}"
        )

    @property
    def name(self) -> str:
        """The call as the golden line names it: `layer1.0.relu #2`, or `conv1`."""
        name = self.path or self.module_type  # no path when a comparison ignores paths
        return f"{name} #{self.nth}" if self.reused else name

    @property
    def identity(self) -> tuple[str, int]:
        """Which call this is, independent of what it was given: (path, nth)."""
        return (self.path, self.nth)


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
    under: tuple[str, ...] = (),
    index: int = -1,
    direct: bool = False,
    facet_values: tuple[tuple[Facet, Any], ...] = (),
    nameless_first_call: bool = False,
) -> GoldenLine:
    """A call line and its text; an empty `path` (a comparison ignoring paths) shows no path.

    `step` marks an outermost call `[step N]` (0: no mark); `nameless_first_call`: with an
    empty path, whether the call was its module's first.
    """
    marks = call_marks(nth, reused, frozen, mode, registered, scripted, direct, step)
    text = call_text(depth, path, module_type, marks, inputs, outputs)
    # Positional, as a render's loop makes its lines: sixteen keywords cost more than the line.
    return GoldenLine(
        depth, path, module_type, nth, registered, inputs, outputs, text, frozen, reused,
        scripted, mode, facts, under, direct, index, facet_values, nameless_first_call,
    )  # fmt: skip


def call_marks(
    nth: int,
    reused: bool,
    frozen: bool,
    mode: str,
    registered: bool,
    scripted: bool,
    direct: bool,
    step: int,
) -> str:
    """What follows a call's class: ` #2 [frozen] [train] [unregistered]`; "" for most calls."""
    return "".join((
        f" #{nth}" if reused else "",
        f" {FROZEN_MARK}" if frozen else "",
        f" [{mode}]" if mode else "",
        "" if registered else f" {UNREGISTERED_MARK}",
        f" {SCRIPTED_MARK}" if scripted else "",
        f" {DIRECT_MARK}" if direct else "",
        f" [step {step}]" if step else "",
    ))  # fmt: skip


def call_text(
    depth: int, path: str, module_type: str, marks: str, inputs: str, outputs: str
) -> str:
    """A call line's text, `  layer1.0.relu: ReLU #2 (f32[2,8]) -> f32[2,8]`, with the
    `call_marks` given; without a path (a comparison ignoring paths) the class comes first."""
    # `isprintable` first: a path almost never needs `escape_line_breaks`' Python call.
    name = (path if path.isprintable() else escape_line_breaks(path)) + ": " if path else ""
    return f"{'  ' * depth}{name}{module_type}{marks} {inputs} -> {outputs}"


def folded_mark(count: int) -> str:
    """What ends the line of a call whose inside is folded: ` [+27 calls folded]`."""
    return f" [+{count} call{'s' if count != 1 else ''} folded]"


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


def render_value(
    value: ValueDescription | None, annotations: Sequence[TensorAnnotation] = ()
) -> str:
    """One described value as golden text: `f32[1,3,224,224]`, `(f32[2], None)`, `{'a': i64[]}`.

    A DTensor adds its placements, `f32[2,16]{Shard(1)}`; each of `annotations` (a trace's
    `options.annotations`) then adds to each tensor's text what it shows (`@cuda:0`).
    """
    if isinstance(value, TensorDescription):
        text = f"{value.dtype}[{','.join(map(str, value.shape))}]"
        if value.placements is not None:
            text += f"{{{value.placements}}}"
        if annotations:
            for annotation in annotations:
                text = annotation.annotate(value, text)
        return text
    if isinstance(value, LiteralDescription):
        return value.text
    if isinstance(value, SequenceDescription):
        items = ", ".join(render_value(item, annotations) for item in value.items)
        if value.kind == "list":
            return f"[{items}]"
        return f"({items},)" if len(value.items) == 1 else f"({items})"
    if isinstance(value, MappingDescription):
        items = ", ".join(f"{key}: {render_value(item, annotations)}" for key, item in value.items)
        prefix = "" if value.type_name == "dict" else value.type_name
        return f"{prefix}{{{items}}}"
    if isinstance(value, ObjectDescription):
        fields = ", ".join(
            f"{name}={render_value(item, annotations)}" for name, item in value.fields
        )
        return f"{value.type_name}({fields})"
    return "?"  # a call still running has no output yet


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
        text += f" {FROZEN_FLAG}"
    if not fact.persistent:
        text += f" {NOT_SAVED_FLAG}"
    if other_names:
        text += f" {TIED_FLAG}{', '.join(other_names)}"
    return text


def fact_title(fact: str) -> str:
    """What a fact line is about: `settings`, `parameters`, `buffers`, or an extra title."""
    return fact.partition(": ")[0]


def is_first_call(line: GoldenLine) -> bool:
    """A module's first call, where its facts are, even when it has none; for a line whose
    path a comparison blanked, as the comparison kept it (`nameless_first_call`)."""
    return line.nth == 1 if line.path else line.nameless_first_call


def mode_line(mode: str) -> str:
    """The header line that gives the model's mode: `# mode: eval`."""
    return f"{MODE_PREFIX}{mode}"


def model_of(header: Sequence[str]) -> str:
    """The model's class a golden header gives (`# model: ResNet`), or "" when it gives none."""
    return next((line[len(MODEL_PREFIX) :] for line in header if line.startswith(MODEL_PREFIX)), "")


def mode_of(header: Sequence[str]) -> str:
    """The model's mode a golden header gives, or "" when it gives none."""
    for line in header:
        if line.startswith(MODE_PREFIX):
            return line[len(MODE_PREFIX) :].strip()
    return ""


def render_section(title: str, items: list[str]) -> list[str]:
    """A header section: `# title (N):`, then one `#   item` line each, the first 200 only."""
    lines = [f"# {title} ({len(items)})" + (":" if items else "")]
    lines.extend(f"{SECTION_ITEM}{item}" for item in items[:_LISTED_IN_HEADER])
    if len(items) > _LISTED_IN_HEADER:
        lines.append(f"{SECTION_ITEM}... {len(items) - _LISTED_IN_HEADER} more")
    return lines


def header_sections(header: Sequence[str]) -> dict[str, list[str]]:
    """The header's listed sections by title: {'called more than once': ['layer1.0.relu x3'], ...}.

    A section whose list was cut short keeps its `... N more` item.
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in header:
        if line.startswith(SECTION_ITEM) and current is not None:
            current.append(line[len(SECTION_ITEM) :])
            continue
        match = _SECTION_TITLE.fullmatch(line)
        if match is None:
            current = None
            continue
        current = sections.setdefault(match.group("title"), [])
    return sections


# A forward run without a call, as `render_forward_run` writes it.
_FORWARD_RUN = re.compile(
    r"(?P<path>\S+): (?P<module_type>\S+) x(?P<count>[0-9]+), (?P<how>called as \.forward|run as "
    r"\S+) (?:by (?P<caller>\S+)|(?P<outside>outside the model)) at (?P<location>\S+), "
    r"(?P<done>recorded as \[direct\]|not recorded)"
)


def render_forward_run(run: ForwardRun) -> str:
    """One item of the header's forward-run section:
    `blocks.3.mlp: Mlp x2, called as .forward by blocks.3 at model.py:42, recorded as [direct]`."""
    caller = "outside the model" if run.caller is None else f"by {run.caller or '<root>'}"
    done = f"recorded as {DIRECT_MARK}" if run.recorded else "not recorded"
    return (
        f"{run.path or '<root>'}: {run.module_type} x{run.count}, {run.how} {caller} "
        f"at {run.location}, {done}"
    )


def forward_runs(sections: Mapping[str, list[str]]) -> list[ForwardRun]:
    """The forward runs without a call a golden header lists, read back into records from
    its sections (`header_sections`); an item written otherwise, by hand, is left out."""
    found = []
    for item in sections.get(FORWARD_RUNS_SECTION, []):
        match = _FORWARD_RUN.fullmatch(item)
        if match is None:
            continue
        path, caller = match.group("path"), match.group("caller")
        found.append(
            ForwardRun(
                path="" if path == "<root>" else path,
                module_type=match.group("module_type"),
                how=match.group("how"),
                caller=None if caller is None else ("" if caller == "<root>" else caller),
                location=match.group("location"),
                count=int(match.group("count")),
                recorded=match.group("done") != "not recorded",
            )
        )
    return found


# One odd block as `render_odd_block` writes it; the label may hold commas, the norm too.
_ODD_BLOCK = re.compile(
    r"(?P<path>\S+): (?P<label>.+?), (?P<agreeing>[0-9]+) of (?P<compared>[0-9]+) "
    r"(?P<peers>siblings|\S+ modules): (?P<norm>.+)"
)


def render_odd_block(item: OddBlock) -> str:
    """One item of the odd-block sections:
    `layers.7.self_attn.q_proj: Linear, 31 of 32 siblings: LoraLinear`."""
    return (
        f"{item.path}: {item.label}, {item.agreeing} of {item.compared} {item.peers}: {item.norm}"
    )


def odd_block_items(sections: Mapping[str, list[str]]) -> list[OddBlock]:
    """The odd blocks and odd class members a golden header lists, read back into records
    from its sections (`header_sections`); an item written otherwise, by hand, is left out."""
    found = []
    for title in (ODD_BLOCKS_SECTION, ODD_CLASS_MEMBERS_SECTION):
        for item in sections.get(title, []):
            match = _ODD_BLOCK.fullmatch(item)
            if match is not None:
                found.append(
                    OddBlock(
                        path=match.group("path"),
                        label=match.group("label"),
                        agreeing=int(match.group("agreeing")),
                        compared=int(match.group("compared")),
                        norm=match.group("norm"),
                        peers=match.group("peers"),
                    )
                )
    return found


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
