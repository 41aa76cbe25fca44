"""Compare two traces' execution structure, ignoring what the caller names. Pure, no torch."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pytest_fwdorder.diff import TraceDiff, check_trace, diff_lines, diff_traces
from pytest_fwdorder.errors import StructureMismatchError
from pytest_fwdorder.golden_format import (
    COSTS_FACT,
    FROZEN_FLAG,
    TENSOR_PATTERN,
    TIED_PATTERN,
    GoldenLine,
    fact_title,
    make_line,
    mode_line,
)
from pytest_fwdorder.render import backward_lines, golden_lines

if TYPE_CHECKING:
    from pytest_fwdorder.record_types import TraceRecords

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
    "operations",
    "backward",
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
    operations: bool = False
    backward: bool = False
    dimensions: frozenset[int] = frozenset()
    type_names: tuple[tuple[str, str], ...] = ()

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
                ("operations", self.operations),
                ("backward", self.backward),
            )
            if on
        ]
        parts += [f"dim {dimension}" for dimension in sorted(self.dimensions)]
        parts += [f"{old} as {new}" for old, new in self.type_names]
        return ", ".join(parts) if parts else "nothing"


def _parse_ignore(ignore: Iterable[IgnoreItem]) -> _Ignored:
    """Read `ignore` once: it may be a generator, which a second reading would find empty."""
    if isinstance(ignore, str):
        ignore = (ignore,)  # `ignore="paths"` is an easy slip; take it as meant
    ignored = _Ignored()
    for item in ignore:
        if isinstance(item, Mapping):
            ignored = replace(ignored, type_names=ignored.type_names + tuple(item.items()))
        elif item == "batch":
            ignored = replace(ignored, dimensions=ignored.dimensions | {0})
        elif item in _NAMES:
            ignored = replace(ignored, **{item: True})  # type: ignore[arg-type]
        elif isinstance(item, str) and (match := _DIMENSION.fullmatch(item)):
            ignored = replace(ignored, dimensions=ignored.dimensions | {int(match.group(1))})
        else:
            raise ValueError(
                f"cannot ignore {item!r}: name one of {', '.join(map(repr, _NAMES))}, "
                "'dim:N' for one dimension of every tensor, or a mapping of module types "
                "to treat as equal such as {'LeakyReLU': 'ReLU'}"
            )
    return ignored


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
            operations=()
            if ignored.operations
            else tuple(TENSOR_PATTERN.sub(tensor, operation) for operation in line.operations),
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
        if title == COSTS_FACT:
            continue  # what a call costs is not its structure (`costs=True` traces)
        if title == "settings" and (ignored.settings or type_mapped):
            continue
        if title in ("parameters", "buffers"):
            if ignored.parameters:
                continue
            if ignored.frozen:
                fact = fact.replace(f" {FROZEN_FLAG}", "")
            if ignored.paths:
                fact = TIED_PATTERN.sub("", fact)
            fact = TENSOR_PATTERN.sub(tensor, fact)
        kept.append(fact)
    return tuple(kept)


def structure_diff(
    expected: TraceRecords, actual: TraceRecords, ignore: Iterable[IgnoreItem] = ()
) -> TraceDiff:
    """The differences between two traces that remain once `ignore` is applied."""
    check_trace("structure_diff", "expected", expected)
    check_trace("structure_diff", "actual", actual)
    return _structure_diff(expected, actual, _parse_ignore(ignore))


def _structure_diff(expected: TraceRecords, actual: TraceRecords, ignored: _Ignored) -> TraceDiff:
    return diff_lines(
        [*_mode_header(expected, ignored), *_backward_header(expected, ignored)],
        _normalize(golden_lines(expected), ignored),
        [*_mode_header(actual, ignored), *_backward_header(actual, ignored)],
        _normalize(golden_lines(actual), ignored),
        match_paths=not ignored.paths,
    )


def _backward_header(trace: TraceRecords, ignored: _Ignored) -> list[str]:
    """The backward section (`backward=True`), compared as text unless ignored.

    Its lines name modules by path, so ignoring paths ignores it too; ignored dtypes and
    shapes are left out of its gradients.
    """
    if ignored.backward or ignored.paths:
        return []

    def tensor(match: re.Match[str]) -> str:
        dtype = "*" if ignored.dtypes else match.group(1)
        return f"{dtype}[?]" if ignored.shapes else f"{dtype}[{match.group(2)}]"

    return [TENSOR_PATTERN.sub(tensor, line) for line in backward_lines(trace)]


def _mode_header(trace: TraceRecords, ignored: _Ignored) -> list[str]:
    """The one header line a structure comparison keeps: the model's mode."""
    if ignored.mode or trace.mode is None or "mode" in trace.options.hidden:
        return []
    return [mode_line(trace.mode)]


def assert_same_structure(
    expected: TraceRecords, actual: TraceRecords, *, ignore: Iterable[IgnoreItem] = ()
) -> TraceDiff:
    """Fail unless two traces have the same execution structure once `ignore` is applied.

    `ignore` names what may differ: `"paths"` (module names and reuse: a shared ReLU split in
    three), `"dtypes"`, `"batch"` (dimension 0), `"dim:N"` (any one dimension, negative
    counts from the end), `"shapes"`, `"types"`, `"frozen"`, the golden's facets
    `"settings"`, `"parameters"` (parameters and buffers) and `"mode"`, the recorded
    `"operations"` (`ops=True`) and `"backward"` section (`backward=True`), and mappings of
    module types to treat as equal, such as `{"LeakyReLU": "ReLU"}`.

    Returns the full diff (nothing ignored) so that a passing test can still say what changed:
    `assert_same_structure(a, b, ignore=("paths",)).summary()` -> `... 48 calls renamed`.
    Raises `StructureMismatchError`, an AssertionError, with the remaining differences.
    """
    __tracebackhide__ = True  # the message says it all; our frames would only add noise
    check_trace("assert_same_structure", "expected", expected)
    check_trace("assert_same_structure", "actual", actual)
    ignored = _parse_ignore(ignore)
    remaining = _structure_diff(expected, actual, ignored)
    if remaining:
        raise StructureMismatchError(
            f"execution structure differs (ignoring {ignored.describe()}):\n{remaining.render()}"
        )
    return diff_traces(expected, actual)
