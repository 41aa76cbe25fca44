"""What the facets add to a call and a trace: operations, backward steps, costs, output
fingerprints, initialization steps, graph breaks, odd blocks and forwards run without a call.

Plain records like `records.py`'s, which hold them: nothing here imports torch, and only the
value descriptions of the package.

What a facet is, for a plugin's facet (`Facet`, offered through the `pytest_fwdorder_facets`
hook) and its checks, is here too: calls and golden lines name it as a type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, runtime_checkable

from pytest_fwdorder.calls.call_line_facets import check_line_mark
from pytest_fwdorder.calls.value_descriptions import TensorDescription, ValueDescription


@dataclass(frozen=True, slots=True)
class Operation:
    """One torch-level operation a module's forward called directly (with `ops=True`).

    `call_index` is the index of the call whose forward made it, `number` counts that
    call's recorded operations (1, 2, 3 ...), and `after` is how many calls of the trace had
    started before it: where it goes among them. Model parameters and buffers among the
    arguments are `LiteralDescription`s of their full names (`encoder.out_proj.weight`),
    listed in `parameters` too.
    """

    name: str
    call_index: int
    number: int
    after: int
    args: tuple[ValueDescription, ...]
    kwargs: tuple[tuple[str, ValueDescription], ...] = ()
    output: ValueDescription | None = None
    raised: bool = False
    parameters: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ParameterUse:
    """A model parameter or buffer given to an operation, recorded or left out (`ops=True`).

    `tensor` is its full name, `call_index` the call whose forward used it, `function` the
    name of the operation it was given to: how a module that is never called can still be
    used by its parent (`nn.MultiheadAttention` passes `out_proj.weight` to a function).
    """

    tensor: str
    call_index: int
    function: str


@dataclass(frozen=True, slots=True)
class BackwardStep:
    """One step of the backward pass (`backward=True`), in the order they happened.

    Either the gradient of a forward call's output arrived (`call_index` is that call's,
    `gradient` describes it), or a module ran forward again to recompute activations
    (activation checkpointing: `recomputed` is True and `call_index` is None). `depth` is
    the indentation in the golden's backward section.
    """

    path: str
    module_type: str
    nth: int
    depth: int
    call_index: int | None = None
    gradient: ValueDescription | None = None
    recomputed: bool = False


@dataclass(frozen=True, slots=True)
class BackwardRecords:
    """The backward pass of a trace: what it started from, and its steps in order."""

    loss: str
    steps: tuple[BackwardStep, ...] = ()


@dataclass(frozen=True, slots=True)
class CallCosts:
    """What one call costs (`costs=True`): FLOPs with its children's, its outputs' bytes.

    `flops` counts the operations torch has a FLOP formula for that ran while the call was
    open, its children's included; `own_flops` those that ran in its own forward, outside
    its children. `tensor_bytes` is the bytes of the module's own parameters and buffers,
    given at its first call only (None at later calls, and for lazy tensors).
    """

    flops: int
    own_flops: int
    output_bytes: int
    tensor_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class TraceCosts:
    """What a whole recording costs (`costs=True`): the totals the golden's header gives.

    `flops`: the outermost calls' FLOPs, summed. `tensor_bytes`: the model's parameters and
    buffers, each storage counted once however often it is tied or shared.
    `saved_bytes`: the activations autograd saved for backward, each storage once (the
    model's own tensors left out); None when grad was disabled and nothing was saved.
    `uncounted`: (operation name, how many times it ran) for each operation without a FLOP
    formula that computes something (views, copies and tensor creation are not listed).
    """

    flops: int
    tensor_bytes: int
    saved_bytes: int | None = None
    uncounted: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TensorFingerprint:
    """A few statistics of one output tensor's values (`values=True`).

    `mean`, `std` (population) and `absmax` are over the finite elements;
    `nan` and `inf` count the others. All three are None for a tensor without finite
    elements, an empty one included (`empty` says which).
    """

    mean: float | None
    std: float | None
    absmax: float | None
    nan: int = 0
    inf: int = 0
    empty: bool = False


@dataclass(frozen=True, slots=True)
class InitializationStep:
    """One step of a model's initialization (`initialization=True`), in build order.

    `target` names the tensor: a parameter's or buffer's full name (`conv1.weight`), or
    `(temporary f32[3,3])` for a tensor the build drew random numbers into without keeping
    it (it still moves the random stream). `operations` are the in-place or factory calls
    made on it one after the other (`kaiming_uniform_(a=2.236)`), `draws` the random numbers
    they drew (one per element filled by a random operation). `replay` holds, for tests,
    (function, arguments with the target as None, keyword arguments, the part of the
    target's storage as (offset, shape, strides) or None for all of it) per operation; it
    is not compared.
    """

    target: str
    operations: tuple[str, ...]
    draws: int
    replay: tuple[tuple[object, tuple[object, ...], dict[str, object], object], ...] = field(
        default=(), compare=False, repr=False
    )


@dataclass(frozen=True, slots=True)
class InitializationRecords:
    """How a model initialized itself while its builder ran: the steps, in order."""

    steps: tuple[InitializationStep, ...]
    seed: int | None  # the seed the build ran under, None when it ran on the caller's stream

    @property
    def draws(self) -> int:
        """The random numbers the whole build drew."""
        return sum(step.draws for step in self.steps)


@dataclass(frozen=True, slots=True)
class GraphBreak:
    """One place torch.compile's dynamo broke the graph (`graph_breaks=True`).

    `module_path` is the module call it happened in, as the golden names it (`<root>` for
    the root), `call_number` which call of that module; `reason` says why in words and
    `source` is the user's line as `file name:line`, without folders.
    """

    module_path: str
    call_number: int
    reason: str
    source: str


@dataclass(frozen=True, slots=True)
class Recompilation:
    """A frame dynamo compiled again when the model was called a second time with the same
    inputs: the module call it belongs to, the function's first line (`source`) and the first
    guard that failed (`guard`, as dynamo words it)."""

    module_path: str
    source: str
    guard: str


@dataclass(frozen=True, slots=True)
class CompileRecords:
    """What compiling the model with dynamo made of it: how many graphs the first call
    compiled, where the graph broke, and what the second call compiled again."""

    backend: str
    graphs: int
    breaks: tuple[GraphBreak, ...]
    recompilations: tuple[Recompilation, ...]


@dataclass(frozen=True, slots=True)
class OddBlock:
    """One position that differs from its peers: `path` is the full path of the call (or of
    the place where the peers have one), `label` what it is there, `norm` what `agreeing`
    of the `compared` peers are. `peers` says who they are: "siblings" for a block among
    its siblings, `Linear modules` for a module among the modules of its class."""

    path: str
    label: str
    agreeing: int
    compared: int
    norm: str
    peers: str = "siblings"


@dataclass(frozen=True, slots=True)
class ForwardRun:
    """A module's forward run without a module call, which module hooks never see: the
    module, how it ran, where from, how many times, and whether the trace records it.

    `how` is "called as .forward" (seen through the instance attribute the trace sets, and
    recorded as `[direct]` calls) or "run as Mlp.forward" (seen by the profile function:
    `super().forward`, an unbound or stored forward; not recorded). `caller` is the module
    path whose call was open at the time (`""` for the root), None outside every call;
    `location` the calling line as `file.py:42`.
    """

    path: str
    module_type: str
    how: str
    caller: str | None
    location: str
    count: int
    recorded: bool


# A title is how the golden names the fact (`| output elements: ...`): lowercase words, so
# that it can never be mistaken for a call line or a header section.
_TITLE = re.compile(r"[a-z][a-z0-9_]*( [a-z0-9_]+)*")


@runtime_checkable
class Facet(Protocol):
    """One facet of a trace: a value per call, as it is recorded, written, read and compared.

    `title` names the fact in the golden (`| title: text`, after the call's other facts);
    `change_words` name a change in a diff's summary (`output elements changed`).
    `observe` gets each call's output as the call ends and returns the value to keep, or
    None for nothing (no fact line). `render` writes a value as one line of text and
    `parse` reads that text back into an equal value; `same` says whether two values match
    (exactly, or within a tolerance of the facet's choosing); `describe_change` words the
    difference of two that do not. A plugin offers facets through the
    `pytest_fwdorder_facets` hook:

        class OutputElements:
            title = "output elements"
            change_words = "output elements changed"

            def observe(self, output):
                return output.numel() if isinstance(output, torch.Tensor) else None

            def render(self, value):
                return f"{value:,}"

            def parse(self, text):
                return int(text.replace(",", ""))

            def same(self, old, new):
                return old == new

            def describe_change(self, old, new):
                return f"{old:,} -> {new:,}"

    writes `| output elements: 4,096` under each call whose output is a tensor, and a
    change reads `output elements changed at 1 call: fc (Linear): 40 -> 80`.

    A facet may also have these members, which the built-in ones use (facets/values.py);
    the trace, the golden and the comparison look for each and never name a facet:

    - `option`: the name of the `TraceOptions` switch that turns it on (`"values"`);
      without one, every trace records it.
    - `configured(options)`: the facet as a trace with these options records and compares
      it (the values facet takes its tolerance from them); the trace keeps that one.
    - `check_device(device)`: raises ValueError, saying what to do, for a device it cannot
      record on (values on meta).
    - `running()`: a context manager entered around the forward (values: under seed 0).
    - `header_line()`: one line for the golden's header (`# values: ...`).
    - `compared_on_request`: what it measures (`"fingerprints of each call's output"`): a
      structure comparison leaves it out unless `compare` names its title, as a facet with
      one value per trace that has it (costs, initialization).
    """

    title: str
    change_words: str

    def observe(self, output: object) -> Any: ...

    def render(self, value: Any) -> str: ...

    def parse(self, text: str) -> Any: ...

    def same(self, old: Any, new: Any) -> bool: ...

    def describe_change(self, old: Any, new: Any) -> str: ...


@runtime_checkable
class TraceFacetMembers(Protocol):
    """What every facet with one value per trace has, however it takes its value: the members
    the golden and the diff use.

    A built-in shape (graph breaks, facets/graph_breaks.py; backward, facets/backward.py),
    offered through the same hook as a `Facet`. `option` names the `TraceOptions` switch
    that turns it on. `header_lines` writes a value, `read_header` reads it back from a
    golden's header lines (None when they hold none) and `describe_changes` says what
    differs between two values read back, one sentence each ([] for none), or (kind, detail)
    for a change of a kind it declares (`change_kinds`, calls/change_kinds.py); `change_words`
    name such a change in a summary.

    It takes its value in one of two ways, and is one of two protocols (`TraceFacet` is
    either):

    - `MeasuredTraceFacet`: `measure(...)` once the traced forward has run (graph breaks).
    - `WatchedTraceFacet`: `watcher(options)`, a new `TraceWatcher` that watches the trace
      while it runs and gives the value when it ends (backward).

    It may also have these members, which the trace, the golden and the diff look for:

    - `summary_lines(value)`: lines among the header's lines that say what the trace
      recorded besides its calls, after `# operations: ...` and before the header lines of
      the facets with a value per call (`# backward: 4 steps, from ...`; costs' totals).
    - `configured(options)`: the facet as a trace with these options writes it (costs: without
      parameter bytes when parameters are hidden); the trace keeps that one.
    - `call_facts(value, trace)`: a fact per call of the trace, its text after the title
      (None for a call without one), written `| title: text` after the call's module
      facts and before the facets' with a value per call (costs: `| costs: 1,024 FLOPs
      (1.02 k), output 64 B`). A golden's reader keeps it among the call's facts, and a
      diff does not take it for an unread fact.
    - `read_call_fact(text)` and `describe_call_change(old, new)`: such a fact's text read
      back into a typed value (None for text it cannot read), and the words for two paired
      calls' values that differ by the facet's rule (None where they do not: costs compare
      the FLOPs alone). A diff counts these changes per call under `change_words`, and says
      them before the facets' with a value per call (the order of their facts).
    - `summary_line(calls)`: the summary's line for those changes, from (the call as the
      summary names it, old value, new value, words) each (costs: `FLOPs changed at 2
      calls: ...`, the biggest first); without one, the line the facets with a value per
      call get (`... changed at 2 calls, first at ...`).
    - `bar_class`, `bar_measure(value)` and `bar_words(measure, total)`: the HTML report
      draws a bar after each call with such a fact, as long as its measure's share of the
      outermost calls' (costs: FLOPs), styled by the CSS class `bar_class` (`fo-cost`), with
      `bar_words`' title and figures (`4,096 of the forward's 8,192 FLOPs`, `4.10 k FLOPs,
      50.0%`).
    - `end_lines(value, trace, counts)`: a section written after the calls, its first line
      the title and a colon (`backward:`), from the trace's records and its calls per path;
      a golden's reader keeps it with the header lines `read_header` gets.
    - `types_renamed(value, type_names)`: the value with the module classes it names
      renamed by `type_names` (a mapping whose `get(name, name)` gives the new name), for
      a structure comparison that takes two classes as the same (`ignore=({"Tanh":
      "ReLU"},)`, or `"types"`); a facet that names classes in its section needs it.
    - `line_mark`, `call_lines(value, trace, text_of)`, `read_call_line(text)`: lines under
      the calls (`CallLineWriter`, calls/call_line_facets.py; operations: `~ relu(f32[2,16]) -> f32[2,16]`).
    - `change_noun`: what one of its sentences counts (`backward step`): the summary's
      totals then say `2 backward steps changed` and its line gives the first five
      sentences after `change_words` (`backward steps changed: ...; ...`); without one,
      the totals say `change_words` and the line gives every sentence.
    - `report_warnings`: (section title, noun for one item, what the items are) for each
      section of its header lines (`# graph breaks (2 breaks, ...):`) that the HTML report
      shows as a warning box (`2 graph breaks in the model compiled with torch.compile`).
    - `table_orders` and `table(value, trace, order, top)`: `fwdorder show --sort ORDER
      [--top N]` prints `table(...)` instead of the golden, for a trace with the facet's
      option, where `table_orders` maps each ORDER it ranks calls by to its words for
      `--help` (costs: `{"flops": "FLOPs with children", ...}`).
    """

    title: str
    change_words: str
    option: str

    def header_lines(self, value: Any) -> list[str]: ...

    def read_header(self, header: Sequence[str]) -> Any: ...

    def describe_changes(self, old: Any, new: Any) -> Sequence[str | tuple[str, str]]: ...


@runtime_checkable
class MeasuredTraceFacet(TraceFacetMembers, Protocol):
    """A facet with one value per trace, measured once the traced forward has run.

    `measure(model, args, kwargs, device)` takes it from the model (put back as it was),
    its inputs and the device (graph breaks compiles the model); `record_refusal` is the
    message a `record` block, which has no model call to measure, raises when asked for it.
    """

    record_refusal: str

    def measure(
        self, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: Any
    ) -> Any: ...


@runtime_checkable
class WatchedTraceFacet(TraceFacetMembers, Protocol):
    """A facet with one value per trace, watched while the trace runs.

    `watcher(options)` gives a new `TraceWatcher` per trace (`options` are its
    `TraceOptions`), in `trace_forward` and `record` alike.
    """

    def watcher(self, options: Any) -> TraceWatcher: ...


@runtime_checkable
class BuildWatchingFacet(WatchedTraceFacet, Protocol):
    """A watched facet whose watcher watches a builder's build, not the trace (initialization).

    Its watcher has `building()`: a context manager `trace_forward` enters around each try
    of the build (a builder on meta may be called again), under seed 0. It refuses a model
    already built, `built_model_refusal(model_type)` saying what to do, and a `record` block
    (`record_refusal`), which takes a model already built too.
    """

    record_refusal: str

    def built_model_refusal(self, model_type: str) -> str: ...


# What the facets hook may offer besides a `Facet`, and what a trace keeps in `trace_facets`.
TraceFacet = MeasuredTraceFacet | WatchedTraceFacet


class TraceWatcher(Protocol):
    """What a `WatchedTraceFacet`'s `watcher(options)` gives: it watches one trace as it runs.

    `watching()` is entered before the recorder's module hooks are installed and left after
    they are removed (global hooks run in the order they were registered, so the watcher's
    see each call after the recorder opened it); `started(recorder)` then hands it the
    recorder, whose open calls and records it reads. `value()` is the facet's value once
    the trace ended.

    It may also have these members, which the trace looks for:

    - `forward_context()` and `forward_ran(model, inputs, output)`: `trace_forward` runs the
      model under the first (backward: with grad enabled) and calls the second with its
      output before the hooks are removed; a `record` block calls neither.

    - `recording(recorder, root)`: a context manager entered inside the recording, after
      `started`, for the length of the block: for hooks that must see the model's tensors as
      forward sees them (stand-ins) and run inside the recorder's (costs' dispatch mode).
    - `trace_ended(trace)`: called with the finished trace before `value()`, for a watcher
      that gives each call a value (costs: each call's FLOPs, added up once the calls are
      final).
    """

    def watching(self) -> AbstractContextManager[object]: ...

    def started(self, recorder: Any) -> None: ...

    def value(self) -> Any: ...


@runtime_checkable
class TensorAnnotation(Protocol):
    """Something written onto each tensor's text in the golden: its device (`f32[2,4]@cuda:0`,
    facets/devices.py), a DTensor's shard shape (`f32[2,16]{Shard(1) local=[2,8]}`,
    facets/local_shapes.py), or a plugin's.

    Offered through the `pytest_fwdorder_facets` hook like a `Facet`. `title` names it (it
    takes a title no fact uses); `annotate(tensor, text)` gives the text of the tensor
    `tensor` describes with the annotation added to `text`, what the golden shows so far
    (`f32[2,4]`, with the annotations before it already in); `read(text)` is its inverse: a
    tensor's text as written -> (that text without the annotation, the annotation's value,
    None where the text has none); `header_line()` says in the golden's header that the
    annotation is shown (`# devices: shown`). A trace keeps the annotations its options
    switch on (`trace.options.annotations`, in the order they were offered), and renders
    each tensor once per golden: a tensor's text costs nothing more when none is on.

        @dataclass(frozen=True)
        class Elements:
            title = "elements"

            def annotate(self, tensor, text):
                return f"{text}#{math.prod(tensor.shape)}"

            def read(self, text):
                plain, mark, count = text.rpartition("#")
                return (plain, int(count)) if mark else (text, None)

            def header_line(self):
                return "# elements: shown"

    writes `f32[2,4]#8`. It may also have `option` (the `TraceOptions` switch that turns it
    on; without one every trace shows it) and `configured(options)` (the annotation as a
    trace with these options shows it: local shapes keeps the process's rank for its header
    line). Annotations are kept on the trace and pickled with it: make them frozen
    dataclasses, or other values that compare and pickle as one.
    """

    title: str

    def annotate(self, tensor: TensorDescription, text: str) -> str: ...

    def read(self, text: str) -> tuple[str, Any]: ...

    def header_line(self) -> str: ...


def read_annotations(
    text: str, annotations: Sequence[TensorAnnotation]
) -> tuple[str, dict[str, Any]]:
    """One tensor's text as the golden shows it -> (its text without `annotations`, each
    annotation's value by title): the last one added is read first, as it was written last."""
    values: dict[str, Any] = {}
    for annotation in reversed(annotations):
        text, values[annotation.title] = annotation.read(text)
    return text, values


# What kind a facet with one value per trace is, asked of a facet `checked_facets` let through
# (which checked each kind's every member): one attribute, where `isinstance` on a runtime
# protocol reads them all (some 20 us, at every trace that records the facet).
def is_measured(facet: TraceFacet) -> TypeGuard[MeasuredTraceFacet]:
    """Whether the facet takes its value after the forward (`measure`)."""
    return hasattr(facet, "measure")


def is_watched(facet: TraceFacet) -> TypeGuard[WatchedTraceFacet]:
    """Whether the facet watches the trace, or the build, as it runs (`watcher`)."""
    return hasattr(facet, "watcher")


def watches_build(facet: TraceFacet) -> TypeGuard[BuildWatchingFacet]:
    """Whether the facet's watcher watches a builder's build (`built_model_refusal`)."""
    return hasattr(facet, "built_model_refusal")


def checked_facets(
    offered: Iterable[object], taken_titles: Sequence[str]
) -> tuple[Facet | TraceFacet | TensorAnnotation, ...]:
    """The facets plugins offered, each checked once: a `Facet` (or a `TraceFacet`, or a
    `TensorAnnotation`) with a title of its own.

    `taken_titles` are the fact titles the golden already uses (`settings`, `costs`, ...).
    Raises TypeError for an object that is not a facet and ValueError for a title, or a
    mark of lines under the calls (`check_line_mark`), that is malformed or taken.
    """
    facets: list[Facet | TraceFacet | TensorAnnotation] = []
    titles, marks = set(taken_titles), dict[str, str]()
    for facet in offered:
        if not isinstance(facet, (Facet, TraceFacetMembers, TensorAnnotation)):
            # One that annotates tensors was meant as an annotation: name what it lacks of one.
            members, protocol = (
                (_ANNOTATION_MEMBERS, "TensorAnnotation (calls/facet_records.py)")
                if hasattr(facet, "annotate")
                else (_MEMBERS, "pytest_fwdorder.Facet")
            )
            missing = [name for name in members if not hasattr(facet, name)]
            raise TypeError(
                f"pytest_fwdorder_facets returned {facet!r}, which is no facet: it lacks "
                f"{', '.join(missing)}; give it every member of {protocol}"
            )
        if not isinstance(facet.title, str) or not _TITLE.fullmatch(facet.title):
            raise ValueError(
                f"facet {facet!r} has the title {facet.title!r}: a title is lowercase words "
                "(letters, digits, underscores) such as 'output elements'"
            )
        if facet.title in titles:
            raise ValueError(
                f"facet {facet!r} has the title {facet.title!r}, which another fact of the "
                "golden already uses: give it a title of its own"
            )
        if not isinstance(facet, (Facet, MeasuredTraceFacet, WatchedTraceFacet, TensorAnnotation)):
            raise TypeError(
                f"facet {facet!r} has one value per trace but no way to take it: give it "
                "`measure` and `record_refusal` (after the forward) or `watcher` (while the "
                "trace runs)"
            )
        if hasattr(facet, "built_model_refusal") and not isinstance(facet, BuildWatchingFacet):
            raise TypeError(
                f"facet {facet!r} watches a build (`built_model_refusal`) but lacks `watcher` "
                "or `record_refusal`: give it both, as facets/initialization.py does"
            )
        check_line_mark(facet, marks)
        titles.add(facet.title)
        facets.append(facet)
    return tuple(facets)


_MEMBERS = ("title", "change_words", "observe", "render", "parse", "same", "describe_change")
_ANNOTATION_MEMBERS = ("title", "annotate", "read", "header_line")
