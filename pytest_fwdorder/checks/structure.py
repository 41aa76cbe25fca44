"""Compare two traces' execution structure, ignoring what the caller names. Pure, no torch."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.calls.call_line_facets import writes_call_lines
from pytest_fwdorder.calls.facet_records import watches_build
from pytest_fwdorder.diff.classification import TraceDiff
from pytest_fwdorder.diff.diffing import check_trace, diff_lines, diff_traces
from pytest_fwdorder.errors import StructureMismatchError
from pytest_fwdorder.golden.facet_facts import facet_header_lines
from pytest_fwdorder.golden.format import (
    FACT_TITLES,
    FROZEN_FLAG,
    TENSOR_PATTERN,
    TIED_FLAG,
    TIED_PATTERN,
    GoldenLine,
    fact_title,
    is_first_call,
    make_line,
    mode_line,
)
from pytest_fwdorder.golden.render import end_lines, golden_lines
from pytest_fwdorder.hookspecs import (
    plugin_facets,
    tensor_annotations,
    trace_facets,
)
from pytest_fwdorder.options import TraceOptions

if TYPE_CHECKING:
    from pytest_fwdorder.calls.records import TraceRecords

_DIMENSION = re.compile(r"dim:(-?[0-9]+)")
_NAMES = (
    "paths",
    "dtypes",
    "batch",
    "shapes",
    "types",
    "frozen",
    "settings",
    "parameters",
    "mode",
)


IgnoreItem = str | Mapping[str, str]


@dataclass(frozen=True)
class _Ignored:
    paths: bool = False
    dtypes: bool = False
    shapes: bool = False
    types: bool = False
    frozen: bool = False
    settings: bool = False
    parameters: bool = False
    mode: bool = False
    # The titles and marks of the facets whose lines under the calls to leave out
    # (`"operations"`, `~ `).
    lines_under: frozenset[str] = frozenset()
    line_marks: tuple[str, ...] = ()
    # The titles of the facets' sections after the calls to leave out (`"backward"`).
    sections: frozenset[str] = frozenset()
    # The titles of the annotations on each tensor's text to leave out (`"devices"`).
    annotations: frozenset[str] = frozenset()
    # The titles of the facets' facts under each call to leave out (a plugin's).
    facts: frozenset[str] = frozenset()
    dimensions: frozenset[int] = frozenset()
    type_names: tuple[tuple[str, str], ...] = ()
    # The titles of the facets a comparison leaves out unless `compare` names them
    # (`compared_on_request`: costs, values, initialization), and those it named.
    measured: frozenset[str] = frozenset()
    compared: frozenset[str] = frozenset()

    def describe(self) -> str:
        parts = [
            name
            for name, on in (
                ("paths", self.paths),
                ("dtypes", self.dtypes),
                ("shapes", self.shapes),
                ("types", self.types),
                ("frozen", self.frozen),
                ("settings", self.settings),
                ("parameters", self.parameters),
                ("mode", self.mode),
            )
            if on
        ]
        parts += sorted(self.lines_under)
        parts += sorted((self.sections | self.annotations | self.facts) - self.lines_under)
        parts += [f"dim {dimension}" for dimension in sorted(self.dimensions)]
        parts += [f"{old} as {new}" for old, new in self.type_names]
        ignoring = ", ".join(parts) if parts else "nothing"
        if not self.compared:
            return ignoring
        return f"{ignoring}; comparing {', '.join(sorted(self.compared))}"


def _parse_ignore(
    ignore: Iterable[IgnoreItem],
    sections: frozenset[str],
    annotations: frozenset[str] = frozenset(),
    facts: frozenset[str] = frozenset(),
    line_marks: Mapping[str, str] | None = None,
) -> _Ignored:
    """Read `ignore` once: it may be a generator, which a second reading would find empty.

    `sections` are the titles of the facets' sections after the calls (`backward`);
    `annotations` those of what the traces write onto each tensor's text (`devices`);
    `facts` those of the facets' facts under each call that a comparison compares;
    `line_marks` the marks of the facets' lines under the calls by title (`operations`).
    """
    if isinstance(ignore, str):
        ignore = (ignore,)  # `ignore="paths"` is an easy slip; take it as meant
    marks = line_marks or {}
    ignored = _Ignored()
    for item in ignore:
        if isinstance(item, Mapping):
            ignored = replace(ignored, type_names=ignored.type_names + tuple(item.items()))
        elif item == "batch":
            ignored = replace(ignored, dimensions=ignored.dimensions | {0})
        elif item in _NAMES:
            ignored = replace(ignored, **{item: True})  # type: ignore[arg-type]
        elif isinstance(item, str) and item in sections | annotations | facts | marks.keys():
            # A facet's title leaves out all it wrote: a section, facts and lines under the
            # calls, annotations.
            ignored = replace(
                ignored,
                sections=ignored.sections | ({item} & sections),
                annotations=ignored.annotations | ({item} & annotations),
                facts=ignored.facts | ({item} & facts),
                lines_under=ignored.lines_under | ({item} & marks.keys()),
                line_marks=(*ignored.line_marks, *([marks[item]] if item in marks else [])),
            )
        elif isinstance(item, str) and (match := _DIMENSION.fullmatch(item)):
            ignored = replace(ignored, dimensions=ignored.dimensions | {int(match.group(1))})
        else:
            titles = (sections | annotations | facts) - marks.keys()
            names = (*_NAMES, *sorted(marks), *sorted(titles))
            raise ValueError(
                f"cannot ignore {item!r}: name one of {', '.join(map(repr, names))}, "
                "'dim:N' for one dimension of every tensor, or a mapping of module types "
                "to treat as equal such as {'LeakyReLU': 'ReLU'}"
            )
    return ignored


def _fact_titles(*traces: TraceRecords) -> frozenset[str]:
    """The titles of the facets' facts under each call that `ignore` may name: the per-call
    facets' and those of the facets with one value per trace that write call facts
    (`call_facts`), the measurements that only `compare` brings in left out."""
    facets = [
        *(facet for trace in traces for facet in trace.facets),
        *(
            facet
            for trace in traces
            for facet in trace.trace_facets
            if hasattr(facet, "call_facts")
        ),
    ]
    return frozenset(facet.title for facet in facets if not hasattr(facet, "compared_on_request"))


def _trace_facets_known(*traces: TraceRecords) -> list[Any]:
    """The facets with one value per trace that `ignore` and `compare` may name: the
    registered ones, then those the traces recorded (a plugin's no longer registered)."""
    return [
        *trace_facets(FACT_TITLES),
        *(facet for trace in traces for facet in trace.trace_facets),
    ]


def _section_titles(*traces: TraceRecords) -> frozenset[str]:
    """The titles of the facets' sections after the calls that `ignore` may name
    (`backward`, which is also its option)."""
    facets = _trace_facets_known(*traces)
    return frozenset(facet.title for facet in facets if hasattr(facet, "end_lines"))


def _line_marks(*traces: TraceRecords) -> dict[str, str]:
    """The marks of the facets' lines under the calls that `ignore` may name, by title
    (`operations`)."""
    facets = _trace_facets_known(*traces)
    return {facet.title: facet.line_mark for facet in facets if writes_call_lines(facet)}


def _measurements(*traces: TraceRecords) -> dict[str, Any]:
    """The facets a structure comparison leaves out unless `compare` names them, by title:
    those with `compared_on_request` (what they measure), registered or the traces'."""
    facets = [
        *_trace_facets_known(*traces),
        *plugin_facets(FACT_TITLES),
        *(facet for trace in traces for facet in trace.facets),
    ]
    found = {facet.title: facet for facet in facets if hasattr(facet, "compared_on_request")}
    return dict(sorted(found.items()))


def _parse_compare(
    compare: Iterable[str], ignored: _Ignored, measurements: Mapping[str, Any]
) -> _Ignored:
    """`ignored` with the measurements `compare` names; read once, like `ignore`."""
    if isinstance(compare, str):
        compare = (compare,)  # `compare="costs"`, as `ignore="paths"`
    compared = set()
    for name in compare:
        if name not in measurements:
            raise ValueError(
                f"cannot compare {name!r}: name one of {', '.join(map(repr, measurements))}, "
                "the measurements a structure comparison leaves out unless asked"
            )
        compared.add(name)
    return replace(ignored, measured=frozenset(measurements), compared=frozenset(compared))


def _check_measured(
    function: str,
    ignored: _Ignored,
    measurements: Mapping[str, Any],
    expected: TraceRecords,
    actual: TraceRecords,
) -> None:
    """Refuse to compare a measurement that a trace did not record."""
    for title in sorted(ignored.compared):
        facet = measurements[title]
        missing = [
            argument
            for argument, trace in (("expected", expected), ("actual", actual))
            if title not in trace.trace_facet_values
            and not any(recorded.title == title for recorded in trace.facets)
        ]
        if missing:
            option = getattr(facet, "option", title)
            raise ValueError(
                f"{function}(compare=({title!r},)) needs {facet.compared_on_request}, and "
                f"{' and '.join(f'`{argument}`' for argument in missing)} "
                f"{'has' if len(missing) == 1 else 'have'} none: trace "
                f"both with {option}=True, such as trace_forward(model, *inputs, {option}=True)"
                + (" (a builder: trace_forward(build, ...))" if watches_build(facet) else "")
            )


def _normalize(lines: list[GoldenLine], ignored: _Ignored) -> list[GoldenLine]:
    type_names = dict(ignored.type_names)
    # Settings of two classes treated as equal are not comparable (LeakyReLU has a slope).
    mapped = {*type_names, *type_names.values()}

    def tensor(match: re.Match[str]) -> str:
        dtype = "*" if ignored.dtypes else match.group(1)
        sizes = match.group(2).split(",") if match.group(2) else []
        count = len(sizes)
        sizes = [
            "?"
            if ignored.shapes
            or position in ignored.dimensions
            or position - count in ignored.dimensions
            else size
            for position, size in enumerate(sizes)
        ]
        return f"{dtype}[{','.join(sizes)}]"

    return [
        make_line(
            depth=line.depth,
            path="" if ignored.paths else line.path,
            module_type="?"
            if ignored.types
            else type_names.get(line.module_type, line.module_type),
            nth=1 if ignored.paths else line.nth,
            reused=line.reused and not ignored.paths,
            frozen=False if ignored.frozen or ignored.parameters else line.frozen,
            registered=line.registered,
            inputs=TENSOR_PATTERN.sub(tensor, line.inputs),
            outputs=TENSOR_PATTERN.sub(tensor, line.outputs),
            scripted=line.scripted,
            mode="" if ignored.mode else line.mode,
            facts=_normalize_facts(line.facts, ignored, line.module_type in mapped),
            facet_values=tuple(
                (facet, value)
                for facet, value in line.facet_values
                if facet.title not in ignored.facts
                and (facet.title not in ignored.measured or facet.title in ignored.compared)
            ),
            under=tuple(
                TENSOR_PATTERN.sub(tensor, text)
                for text in line.under
                if not text.startswith(ignored.line_marks)
            ),
            nameless_first_call=ignored.paths and is_first_call(line),
        )
        for line in lines
    ]


def _normalize_facts(
    facts: tuple[str, ...], ignored: _Ignored, type_mapped: bool = False
) -> tuple[str, ...]:
    """The fact lines left once `ignored` is applied; tensor facts lose only dtypes, shapes
    and flags there (a parameter has no batch dimension)."""

    def tensor(match: re.Match[str]) -> str:
        dtype = "*" if ignored.dtypes else match.group(1)
        return f"{dtype}[?]" if ignored.shapes else f"{dtype}[{match.group(2)}]"

    kept = []
    for fact in facts:
        title = fact_title(fact)
        if title in ignored.facts:
            continue
        if title in ignored.measured:
            # What a call costs is not its structure (`costs=True` traces): compared only
            # when `compare` names it (written without parameters where they are ignored:
            # `_as_compared`).
            if title in ignored.compared:
                kept.append(fact)
            continue
        if title == "settings" and (ignored.settings or type_mapped):
            continue
        if title in ("parameters", "buffers"):
            if ignored.parameters:
                continue
            if ignored.frozen:
                fact = fact.replace(f" {FROZEN_FLAG}", "")
            if ignored.paths:
                # Which tensor it is tied to is a name; that it is tied is structure.
                fact = TIED_PATTERN.sub(f" {TIED_FLAG}another tensor", fact)
            fact = TENSOR_PATTERN.sub(tensor, fact)
        kept.append(fact)
    return tuple(kept)


def structure_diff(
    expected: TraceRecords,
    actual: TraceRecords,
    ignore: Iterable[IgnoreItem] = (),
    *,
    compare: Iterable[str] = (),
) -> TraceDiff:
    """The differences between two traces that remain once `ignore` is applied, the
    measurements `compare` names (`"costs"`, `"values"`, `"initialization"`) included."""
    ignored = _checked_request("structure_diff", expected, actual, ignore, compare)
    return _structure_diff(expected, actual, ignored)


def _checked_request(
    function: str,
    expected: TraceRecords,
    actual: TraceRecords,
    ignore: Iterable[IgnoreItem],
    compare: Iterable[str],
) -> _Ignored:
    """What a structure comparison was asked to leave out and to compare, once both traces
    and both requests are checked; errors name `function`."""
    check_trace(function, "expected", expected)
    check_trace(function, "actual", actual)
    # The registered annotations too: ignoring devices where no trace shows them is no error.
    annotations = frozenset(
        annotation.title
        for annotation in (
            *tensor_annotations(FACT_TITLES),
            *(
                annotation
                for trace in (expected, actual)
                for annotation in trace.options.annotations
            ),
        )
    )
    measurements = _measurements(expected, actual)
    ignored = _parse_compare(
        compare,
        _parse_ignore(
            ignore,
            _section_titles(expected, actual),
            annotations,
            _fact_titles(expected, actual),
            _line_marks(expected, actual),
        ),
        measurements,
    )
    _check_measured(function, ignored, measurements, expected, actual)
    return ignored


def _structure_diff(expected: TraceRecords, actual: TraceRecords, ignored: _Ignored) -> TraceDiff:
    expected = _as_compared(_without_annotations(expected, ignored.annotations), ignored)
    actual = _as_compared(_without_annotations(actual, ignored.annotations), ignored)
    expected_lines = _normalize(golden_lines(expected), ignored)
    actual_lines = _normalize(golden_lines(actual), ignored)
    actual_lines = _facets_tolerated(expected_lines, actual_lines)
    return diff_lines(
        _header(expected, ignored),
        expected_lines,
        _header(actual, ignored),
        actual_lines,
        match_paths=not ignored.paths,
        # Names are ignored for pairing, never for saying where a change is.
        names=(golden_lines(expected), golden_lines(actual)) if ignored.paths else None,
    )


def _as_compared(trace: TraceRecords, ignored: _Ignored) -> TraceRecords:
    """The trace with the measurements `compare` named written as a trace that hides
    parameters writes them, where parameters are ignored (costs without parameter bytes):
    each facet says how in `configured(options)`."""
    if not ignored.parameters or not ignored.compared:
        return trace
    hidden = TraceOptions(hide=("parameters",))
    facets = tuple(
        facet.configured(hidden)
        if facet.title in ignored.compared and hasattr(facet, "configured")
        else facet
        for facet in trace.trace_facets
    )
    return replace(trace, trace_facets=facets)


def _without_annotations(trace: TraceRecords, titles: frozenset[str]) -> TraceRecords:
    """The trace as it renders without the annotations titled `titles` on its tensors.

    Rendered again rather than stripped from the text: only an annotation's `annotate` knows
    what it wrote, and a plugin's may look like another's (or like a shape).
    """
    kept = tuple(
        annotation for annotation in trace.options.annotations if annotation.title not in titles
    )
    if kept == trace.options.annotations:
        return trace
    return replace(trace, options=replace(trace.options, annotations=kept))


def _facets_tolerated(expected: list[GoldenLine], actual: list[GoldenLine]) -> list[GoldenLine]:
    """The actual lines with each facet's value that the expected trace's facet calls the
    same as its call's expected one (output fingerprints within the expected tolerance)
    written as the expected one: only values that differ by the facet's rule differ. Calls
    are paired by name and call number, or by position when names are ignored."""
    expected_values = {
        _pairing_key(number, line): line
        for number, line in enumerate(expected)
        if line.facet_values
    }
    tolerated = []
    for number, line in enumerate(actual):
        partner = expected_values.get(_pairing_key(number, line)) if line.facet_values else None
        if partner is not None:
            line = _with_same_values(partner, line)
        tolerated.append(line)
    return tolerated


def _pairing_key(number: int, line: GoldenLine) -> tuple[str, int]:
    return (line.path, line.nth) if line.path else (str(number), 0)


def _with_same_values(expected: GoldenLine, actual: GoldenLine) -> GoldenLine:
    """`actual` with the facet values and facts its expected line's facets call the same."""
    expected_by_title = {facet.title: (facet, value) for facet, value in expected.facet_values}
    same = {}
    for facet, value in actual.facet_values:
        found = expected_by_title.get(facet.title)
        if found is not None and found[1] != value and found[0].same(found[1], value):
            same[facet.title] = found
    if not same:
        return actual
    expected_facts = {fact_title(fact): fact for fact in expected.facts}
    return replace(
        actual,
        facts=tuple(
            expected_facts[title] if (title := fact_title(fact)) in same else fact
            for fact in actual.facts
        ),
        facet_values=tuple(
            same.get(facet.title, (facet, value)) for facet, value in actual.facet_values
        ),
    )


def _header(trace: TraceRecords, ignored: _Ignored) -> list[str]:
    """The header lines a structure comparison keeps."""
    return [
        *_mode_header(trace, ignored),
        *_section_lines(trace, ignored),
        *_measurement_header(trace, ignored),
    ]


def _measurement_header(trace: TraceRecords, ignored: _Ignored) -> list[str]:
    """The header lines of the measurements `compare` named, as the golden gives them (each
    facet's as the trace configured it: costs without parameter bytes where it hid them)."""
    lines: list[str] = []
    for facet in trace.trace_facets:
        if facet.title in ignored.compared:
            value = trace.trace_facet_values[facet.title]
            summary = getattr(facet, "summary_lines", None)  # costs' totals are summary lines
            lines += [*(summary(value) if summary is not None else []), *facet.header_lines(value)]
    lines += facet_header_lines(
        [facet for facet in trace.facets if facet.title in ignored.compared]
    )
    return lines


def _section_lines(trace: TraceRecords, ignored: _Ignored) -> list[str]:
    """The facets' sections after the calls (`end_lines`: `backward=True`'s steps), each
    compared as text unless ignored by its title.

    A section is written from the trace's calls and may name them by path, so ignoring paths
    ignores every section; ignored dtypes and shapes are left out of its tensors.
    """
    if ignored.paths:
        return []

    def tensor(match: re.Match[str]) -> str:
        dtype = "*" if ignored.dtypes else match.group(1)
        return f"{dtype}[?]" if ignored.shapes else f"{dtype}[{match.group(2)}]"

    type_names = _EVERY_TYPE if ignored.types else dict(ignored.type_names)
    sections = end_lines(trace, left_out=ignored.sections, type_names=type_names)
    return [TENSOR_PATTERN.sub(tensor, line) for line in sections]


class _EveryTypeAs(Mapping[str, str]):
    """Every module class named `?`: how a comparison that ignores types writes them."""

    def __getitem__(self, name: str) -> str:
        return "?"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_EVERY_TYPE = _EveryTypeAs()


def _mode_header(trace: TraceRecords, ignored: _Ignored) -> list[str]:
    """The one header line a structure comparison keeps: the model's mode."""
    if ignored.mode or trace.mode is None or "mode" in trace.options.hidden:
        return []
    return [mode_line(trace.mode)]


def assert_same_structure(
    expected: TraceRecords,
    actual: TraceRecords,
    *,
    ignore: Iterable[IgnoreItem] = (),
    compare: Iterable[str] = (),
) -> TraceDiff:
    """Fail unless two traces have the same execution structure once `ignore` is applied.

    `ignore` names what may differ: `"paths"` (module names and reuse: a shared ReLU split in
    three), `"dtypes"`, `"batch"` (dimension 0), `"dim:N"` (any one dimension, negative
    counts from the end), `"shapes"`, `"types"`, `"frozen"`, the golden's facets
    `"settings"`, `"parameters"` (parameters and buffers) and `"mode"`, a facet's lines
    under the calls by its title (`"operations"`, `ops=True`), a facet's section after the
    calls by its title (`"backward"`, `backward=True`'s steps; a plugin's facet's too), a
    plugin's facet's facts under each call by its title (`"positive outputs"`), an
    annotation on each tensor's text by its title (`"devices"`: the same model on two
    devices; a plugin's annotation, which may count what `"batch"` leaves out), and
    mappings of module types to treat as equal, such as `{"LeakyReLU": "ReLU"}`.

    `compare` names the measurements that are left out unless asked for (the facets with
    `compared_on_request`, a plugin's too): `"costs"` (each
    call's costs fact, the header's costs totals and uncounted operations; both traces
    traced with `costs=True`, else a ValueError), so that a refactor that keeps every shape
    but changes the FLOPs fails: `compare=("costs",)`; `"values"` (each call's output
    fingerprints, within the expected trace's tolerance; `values=True`) and
    `"initialization"` (the initialization steps; `initialization=True`).

    Returns the full diff (nothing ignored) so that a passing test can still say what changed,
    its summary headed by the verdict and what it ignored:
    `assert_same_structure(a, b, ignore=("paths",)).summary()` ->
    `same structure (ignoring paths): 48 calls renamed, ignored`, then the full summary.
    Raises `StructureMismatchError`, an AssertionError, with the remaining differences.
    """
    __tracebackhide__ = True  # the message says it all; our frames would only add noise
    ignored = _checked_request("assert_same_structure", expected, actual, ignore, compare)
    remaining = _structure_diff(expected, actual, ignored)
    if remaining:
        raise StructureMismatchError(
            f"execution structure differs (ignoring {ignored.describe()}):\n{remaining.render()}"
        )
    full = diff_traces(expected, actual)
    verdict = f"same structure (ignoring {ignored.describe()})"
    if full:
        totals = full.summary().splitlines()[0].partition(": ")[2]
        verdict += f": {totals}, ignored"
    return replace(full, verdict=verdict)
