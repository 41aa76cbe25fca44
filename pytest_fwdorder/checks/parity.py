"""Port parity: run a candidate on a recorded reference's inputs, pair its calls with the
reference's, and say where it first diverges, with the error at every paired call."""

from __future__ import annotations

import copy
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Any, NamedTuple

import torch
from torch import nn

from pytest_fwdorder.calls.records import RenderOptions
from pytest_fwdorder.checks.parity_pairing import (
    Pairing,
    PathMap,
    PathMapEntry,
    compile_path_map,
    pair_by_path_map,
    partner_path,
)
from pytest_fwdorder.checks.parity_reference import (
    RecordedCall,
    Reference,
    environment_line,
    leading_parameter,
    load_reference,
)
from pytest_fwdorder.diff.diffing import diff_lines
from pytest_fwdorder.errors import ReferenceMismatchError
from pytest_fwdorder.golden.format import TENSOR_PATTERN, GoldenLine, make_line
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.golden.render import render_trace
from pytest_fwdorder.picture.parity_picture import parity_picture
from pytest_fwdorder.picture.svg import Picture
from pytest_fwdorder.recording.describe import tensors_of
from pytest_fwdorder.recording.recorder import Recorder, recording
from pytest_fwdorder.recording.resolve import resolve_model
from pytest_fwdorder.report.parity_html import parity_report_page_fragment
from pytest_fwdorder.report.parity_rows import (
    PARITY_COLUMNS,
    PARITY_WORD_COLUMNS,
    call_display_path,
    error_cells,
)


class ParityTolerance(NamedTuple):
    """A call's outputs match when `||candidate - reference|| <= atol * sqrt(n) + rtol *
    ||reference||` (2-norms over all n elements): assert_close's rule, for the whole output.

    Judged per output rather than per element because error accumulates with depth: a
    float32 port of a 4-layer LLaMA has elements 4x past assert_close's per-element float32
    tolerance from rounding alone, while its normwise error stays under 1e-6.
    """

    rtol: float
    atol: float


# By the less precise dtype of the two outputs. Measured on the 4-layer LLaMA of the tests
# against a float64 reference, rounding alone reaches normwise 9e-7 in float32, 2.8e-2 in
# bfloat16 and 3.2e-3 in float16; the two port bugs there reach 0.22 and more.
DEFAULT_TOLERANCES = {
    torch.float64: ParityTolerance(1e-6, 1e-7),
    torch.float32: ParityTolerance(1e-5, 1e-5),
    torch.bfloat16: ParityTolerance(1.25e-1, 1e-5),
    torch.float16: ParityTolerance(1e-2, 1e-5),
}
# torch.testing.assert_close's per-element defaults: the report's share of elements off.
ASSERT_CLOSE_TOLERANCES = {
    torch.float64: ParityTolerance(1e-7, 1e-7),
    torch.float32: ParityTolerance(1.3e-6, 1e-5),
    torch.bfloat16: ParityTolerance(1.6e-2, 1e-5),
    torch.float16: ParityTolerance(1e-3, 1e-5),
}
_EXACT = ParityTolerance(0.0, 0.0)


@dataclass(frozen=True)
class CallError:
    """How far the candidate's outputs at one paired call are from the reference's.

    `relative_error` is `||candidate - reference|| / ||reference||` over all output
    elements, what `tolerance` judges; `max_abs` and `max_rel` are the largest element
    errors, `fraction_off` the share of elements outside assert_close's per-element
    defaults, `cosine` the cosine similarity of the outputs flattened. `non_finite` names
    NaN or Inf the candidate has where the reference is finite; `problem` a mismatch that
    is not a number (tensor count, shape).
    """

    reference: RecordedCall
    candidate_path: str
    candidate_nth: int
    relative_error: float
    max_abs: float
    max_rel: float
    fraction_off: float
    cosine: float
    tolerance: ParityTolerance
    dtype: str
    within: bool = True
    non_finite: str = ""
    problem: str = ""

    @property
    def diverges(self) -> bool:
        return bool(self.problem or self.non_finite or not self.within)

    @property
    def candidate_display_path(self) -> str:
        return call_display_path(self.candidate_path, self.candidate_nth)


@dataclass(frozen=True)
class ParityReport:
    """The outcome of `assert_matches_reference`: every paired call's error in the order
    the reference made its outputs, the pairing rules used and the calls left unpaired."""

    errors: list[CallError]
    rules: list[str]
    unpaired: list[tuple[str, int, str]]
    notes: list[str]
    reference_environment: str
    candidate_environment: str
    # The reference's trace (golden text), which `picture()` draws.
    reference_golden: str = ""

    def picture(self) -> Picture:
        """The reference's call tree with each paired call coloured by its error: green
        within tolerance, yellow to red beyond, grey unpaired (`parity_picture`)."""
        return parity_picture(self)

    def _repr_html_(self) -> str:
        return parity_report_page_fragment(self)

    @property
    def first_divergence(self) -> CallError | None:
        return next((error for error in self.errors if error.diverges), None)

    @property
    def first_non_finite(self) -> CallError | None:
        return next((error for error in self.errors if error.non_finite), None)

    def __str__(self) -> str:
        divergence = self.first_divergence
        if divergence is None:
            head = f"the candidate matches the reference at all {len(self.errors)} paired calls"
        else:
            head = (
                f"first divergence at {divergence.candidate_display_path} (reference "
                f"{divergence.reference.display_path}, paired call "
                f"{self.errors.index(divergence) + 1} of {len(self.errors)}): "
                + _describe_error(divergence)
            )
        lines = [head]
        non_finite = self.first_non_finite
        if non_finite is not None:
            lines.append(
                f"{non_finite.non_finite} first appeared at {non_finite.candidate_display_path}"
            )
        lines.append(f"reference: {self.reference_environment}")
        lines.append(f"candidate: {self.candidate_environment}")
        lines.append("pairing rules:")
        lines.extend(f"  {rule}" for rule in self.rules)
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.append("error at each paired call, in the order the reference made its outputs:")
        lines.extend(f"  {row}" for row in error_table(self.errors))
        if self.unpaired:
            lines.append(f"reference calls without a partner ({len(self.unpaired)}):")
            lines.extend(
                f"  {call_display_path(path, nth)}: {reason}" for path, nth, reason in self.unpaired
            )
        return "\n".join(lines)


def error_table(errors: list[CallError]) -> list[str]:
    """The error at each paired call as aligned rows; `x` marks the calls outside tolerance."""
    rows = [list(PARITY_COLUMNS)] + [error_cells(error) for error in errors]
    widths = [max(len(row[column]) for row in rows) for column in range(len(PARITY_COLUMNS))]
    return [
        "  ".join(
            cell.ljust(width) if column < PARITY_WORD_COLUMNS else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def assert_matches_reference(
    candidate: nn.Module,
    reference: Reference | str | PathLike[str],
    *,
    path_map: PathMap | None = None,
    tolerances: Mapping[str, ParityTolerance | tuple[float, float]] | None = None,
) -> ParityReport:
    """Fail at the first call where `candidate` departs from a recorded reference.

    Runs the candidate on the reference's recorded inputs (floating inputs cast to the
    candidate's dtype, all moved to its device), pairs its calls with the recorded ones and
    compares outputs in the order the reference made them. Pairing: with `path_map`, by its
    entries (`{"model.layers.{i}.self_attn": "layers.{i}.attn"}`), then the root with the
    root, then equal paths (`path_map={}`: equal paths only); without, by structure up to
    names (the call tree aligned by depth and shapes, paths, classes and dtypes left out),
    and the root with the root. Every rule used is listed in the report, and every
    reference call without a partner; a candidate that pairs with none fails.

    A call matches when `||candidate - reference|| <= atol * sqrt(n) + rtol *
    ||reference||` over its n output elements (see `ParityTolerance`); the defaults go by the less
    precise dtype of each pair (`DEFAULT_TOLERANCES`: float32 rtol 1e-5, bfloat16 0.125,
    float16 1e-2), and the share of elements outside assert_close's per-element defaults is
    reported beside. `tolerances` maps reference path patterns (`fnmatch`) to
    `ParityTolerance(rtol, atol)`, the first match winning. Raises
    `ReferenceMismatchError` (an AssertionError) naming the first diverging call with its
    max absolute and relative error, the fraction of elements off and cosine similarity,
    where NaN or Inf first appeared, both environments and a table of the error at every
    paired call; returns the report otherwise.
    """
    __tracebackhide__ = True  # the message says it all; our frames would only add noise
    report = compare_with_reference(candidate, reference, path_map=path_map, tolerances=tolerances)
    if not report.errors:
        raise ReferenceMismatchError(
            "no recorded call of the reference has a partner in the candidate, so nothing "
            f"was compared: give a path_map (reference path -> candidate path)\n{report}",
            report,
        )
    if report.first_divergence is not None:
        raise ReferenceMismatchError(str(report), report)
    return report


def compare_with_reference(
    candidate: nn.Module,
    reference: Reference | str | PathLike[str],
    *,
    path_map: PathMap | None = None,
    tolerances: Mapping[str, ParityTolerance | tuple[float, float]] | None = None,
) -> ParityReport:
    """The report `assert_matches_reference` would give, without failing."""
    root = resolve_model(candidate, entry_point="assert_matches_reference")
    if not isinstance(reference, Reference):
        reference = load_reference(reference)
    overrides = _check_tolerances(tolerances)
    entries = (
        compile_path_map(path_map, function="assert_matches_reference")
        if path_map is not None
        else None
    )
    recorder, outputs = _run_candidate(root, reference, _wanted_paths(reference, entries))
    pairing = _pair_calls(reference, recorder, entries)
    errors, notes = _compare_pairs(reference, pairing, outputs, overrides)
    return ParityReport(
        errors,
        pairing.rules,
        pairing.unpaired,
        notes,
        reference.environment,
        environment_line(root),
        reference.golden,
    )


def _wanted_paths(reference: Reference, entries: list[PathMapEntry] | None) -> set[str] | None:
    """The candidate paths whose outputs to copy: with a path map, only those a reference
    call can pair with; without one (None), all."""
    if entries is None:
        return None
    return {partner_path(entries, call.path)[0] for call in reference.calls}


def _run_candidate(
    root: nn.Module, reference: Reference, wanted: set[str] | None
) -> tuple[Recorder, dict[tuple[str, int], list[torch.Tensor]]]:
    """Run the candidate once on the reference's inputs; returns its recorder and CPU copies
    of the output tensors of each wanted call, by (path, nth)."""
    args, kwargs = _inputs_for(root, reference)
    with torch.no_grad(), recording(root, RenderOptions()) as recorder:
        records = recorder.records
        outputs: dict[tuple[str, int], list[torch.Tensor]] = {}

        def keep(number: int, output: object) -> None:
            record = records[number]
            if wanted is not None and record.entry.path not in wanted:
                return
            outputs[(record.entry.path, record.nth)] = [
                value.detach().to("cpu", copy=True) for value in tensors_of(output)
            ]

        recorder.output_observers.append(keep)
        root(*args, **kwargs)
    recorder.finish()  # the trace's calls, which both ways of pairing read
    return recorder, outputs


def _pair_calls(
    reference: Reference, recorder: Recorder, entries: list[PathMapEntry] | None
) -> Pairing:
    """Pair the reference's calls with the candidate's: by the path map's entries when
    there is one, else by the structure of the two call trees."""
    reference_calls = [(call.path, call.nth) for call in reference.calls]
    if entries is not None:
        candidate_calls = [(call.path, call.nth) for call in recorder.calls]
        return pair_by_path_map(reference_calls, candidate_calls, entries)
    return _pair_by_structure(reference, render_trace(recorder.trace), reference_calls)


def _compare_pairs(
    reference: Reference,
    pairing: Pairing,
    outputs: Mapping[tuple[str, int], list[torch.Tensor]],
    overrides: list[tuple[str, ParityTolerance]],
) -> tuple[list[CallError], list[str]]:
    """The error at each paired call, in the order the reference made its outputs, and a
    note for each module type whose calls gave another number of output tensors."""
    counts: dict[tuple[str, int, int], int] = {}
    errors = [
        _compare(
            call,
            pairing.pairs[(call.path, call.nth)],
            outputs.get(pairing.pairs[(call.path, call.nth)], []),
            _tolerance_for(call.path, overrides),
            counts,
        )
        for call in reference.calls
        if (call.path, call.nth) in pairing.pairs
    ]
    notes = [
        f"{calls} call{'s' if calls != 1 else ''} of {module_type} gave {reference_count} output "
        f"tensors and their partners {candidate_count}: the first {min(reference_count, candidate_count)} compared"
        for (module_type, reference_count, candidate_count), calls in counts.items()
    ]
    return errors, notes


def _pair_by_structure(
    reference: Reference, candidate_golden: str, reference_calls: list[tuple[str, int]]
) -> Pairing:
    """Pair by the call tree alignment of the two traces with names, classes, dtypes and
    facts left out: a port renames modules and classes and may change the dtype."""
    old_header, old_lines = parse_golden(reference.golden)
    new_header, new_lines = parse_golden(candidate_golden)
    diff = diff_lines(
        old_header, _shape_only(old_lines), new_header, _shape_only(new_lines), match_paths=False
    )
    by_identity = {old_lines[old].identity: new_lines[new].identity for old, new in diff.pairs}
    pairs = {call: by_identity[call] for call in reference_calls if call in by_identity}
    renamed = sum(1 for call, partner in pairs.items() if call != partner)
    rules = [
        "same structure up to names (the call tree aligned by depth and shapes, paths and "
        f"classes left out): {len(pairs)} calls, {renamed} of them at another path"
    ]
    if ("", 1) in reference_calls and ("", 1) not in pairs:  # the boundary both always have
        pairs[("", 1)] = ("", 1)
        rules.append("the root with the root: 1 call")
    unpaired = [
        (path, nth, "no call of the candidate aligns with it by structure; give a path_map")
        for path, nth in reference_calls
        if (path, nth) not in pairs
    ]
    return Pairing(pairs, rules, unpaired)


def _shape_only(lines: list[GoldenLine]) -> list[GoldenLine]:
    def tensor(match: re.Match[str]) -> str:
        return f"*[{match.group(2)}]"

    return [
        make_line(
            depth=line.depth,
            path="",
            module_type="?",
            nth=1,
            reused=False,
            frozen=False,
            registered=line.registered,
            inputs=TENSOR_PATTERN.sub(tensor, line.inputs),
            outputs=TENSOR_PATTERN.sub(tensor, line.outputs),
        )
        for line in lines
    ]


def _inputs_for(root: nn.Module, reference: Reference) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Copies of the recorded inputs on the candidate's device, floating ones in its dtype."""
    parameter = leading_parameter(root)

    def place(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or parameter is None:
            return copy.deepcopy(value)
        dtype = parameter.dtype if value.is_floating_point() else value.dtype
        return value.to(device=parameter.device, dtype=dtype, copy=True)

    return (
        tuple(place(value) for value in reference.args),
        {name: place(value) for name, value in reference.kwargs.items()},
    )


def _check_tolerances(
    tolerances: Mapping[str, ParityTolerance | tuple[float, float]] | None,
) -> list[tuple[str, ParityTolerance]]:
    if tolerances is None:
        return []
    if not isinstance(tolerances, Mapping):
        raise TypeError(
            f"assert_matches_reference expected tolerances as a dict of reference path "
            f"pattern -> ParityTolerance(rtol, atol), got {type(tolerances).__name__!r}"
        )
    checked = []
    for pattern, value in tolerances.items():
        if not (isinstance(value, tuple) and len(value) == 2):
            raise TypeError(
                f"assert_matches_reference's tolerance for {pattern!r} is {value!r}: give "
                "ParityTolerance(rtol=..., atol=...) or a (rtol, atol) tuple"
            )
        checked.append((pattern, ParityTolerance(float(value[0]), float(value[1]))))
    return checked


def _tolerance_for(
    path: str, overrides: list[tuple[str, ParityTolerance]]
) -> ParityTolerance | None:
    for pattern, tolerance in overrides:
        if fnmatch.fnmatchcase(path, pattern):
            return tolerance
    return None


def default_tolerance(first: torch.dtype, second: torch.dtype) -> ParityTolerance:
    """The default tolerance for the less precise of two dtypes (exact for integers)."""
    return _less_precise(first, second, DEFAULT_TOLERANCES)


def _less_precise(
    first: torch.dtype, second: torch.dtype, table: Mapping[torch.dtype, ParityTolerance]
) -> ParityTolerance:
    if not (first.is_floating_point and second.is_floating_point):
        return _EXACT
    return max(
        (table.get(dtype, table[torch.float32]) for dtype in (first, second)),
        key=lambda tolerance: tolerance.rtol,
    )


def _compare(
    call: RecordedCall,
    partner: tuple[str, int],
    actual: list[torch.Tensor],
    override: ParityTolerance | None,
    notes: dict[tuple[str, int, int], int],
) -> CallError:
    expected = list(call.outputs)
    partner_path, partner_nth = partner
    count = min(len(expected), len(actual))
    if len(expected) != len(actual) and count:
        key = (call.module_type, len(expected), len(actual))
        notes[key] = notes.get(key, 0) + 1
    tolerance = override or (
        default_tolerance(expected[0].dtype, actual[0].dtype) if count else _EXACT
    )
    dtype = str(actual[0].dtype).removeprefix("torch.") if actual else "none"

    def failed(problem: str) -> CallError:
        return CallError(
            call, partner_path, partner_nth, float("inf"), float("inf"), float("inf"), 1.0,
            float("nan"), tolerance, dtype, within=False, problem=problem,
        )  # fmt: skip

    if count == 0:
        return failed(
            f"{len(expected)} output tensors in the reference, {len(actual)} in the candidate"
        )
    for reference_tensor, candidate_tensor in zip(expected[:count], actual[:count], strict=True):
        if reference_tensor.shape != candidate_tensor.shape:
            return failed(
                f"output shape {tuple(reference_tensor.shape)} in the reference, "
                f"{tuple(candidate_tensor.shape)} in the candidate"
            )
    reference_values = torch.cat([tensor.double().flatten() for tensor in expected[:count]])
    candidate_values = torch.cat([tensor.double().flatten() for tensor in actual[:count]])
    element_tolerance = _less_precise(expected[0].dtype, actual[0].dtype, ASSERT_CLOSE_TOLERANCES)
    measured = _measure(reference_values, candidate_values, tolerance, element_tolerance)
    return CallError(call, partner_path, partner_nth, tolerance=tolerance, dtype=dtype, **measured)


def _measure(
    reference: torch.Tensor,
    candidate: torch.Tensor,
    tolerance: ParityTolerance,
    element_tolerance: ParityTolerance,
) -> dict[str, Any]:
    """The numbers of one comparison, both sides flattened in float64: CallError's fields."""
    non_finite = ""
    for kind, test in (("NaN", torch.isnan), ("Inf", torch.isinf)):
        if not non_finite and bool((test(candidate) & ~test(reference)).any()):
            non_finite = kind
    # Where both sides hold the same NaN or Inf, there is no error to measure.
    same = (candidate == reference) | (torch.isnan(candidate) & torch.isnan(reference))
    difference = torch.where(same, 0.0, (candidate - reference).abs()).nan_to_num(nan=float("inf"))
    finite_reference = torch.where(torch.isfinite(reference), reference, 0.0)
    finite_candidate = torch.where(torch.isfinite(candidate), candidate, 0.0)
    reference_norm = float(finite_reference.norm())
    error_norm = float(difference.norm())
    count = reference.numel()
    allowed = element_tolerance.atol + element_tolerance.rtol * reference.abs()
    relative = torch.where(difference == 0, 0.0, difference / reference.abs())
    norms = reference_norm * float(finite_candidate.norm())
    return {
        "relative_error": error_norm / reference_norm if reference_norm else error_norm,
        "max_abs": float(difference.max()) if count else 0.0,
        "max_rel": float(relative.max()) if count else 0.0,
        "fraction_off": float((~(difference <= allowed)).double().mean()) if count else 0.0,
        "cosine": float(finite_reference @ finite_candidate) / norms
        if norms
        else float(error_norm == 0),
        "within": error_norm <= tolerance.atol * count**0.5 + tolerance.rtol * reference_norm,
        "non_finite": non_finite,
    }


def _describe_error(error: CallError) -> str:
    if error.problem:
        return error.problem
    text = (
        f"relative error {error.relative_error:.2e} > rtol {error.tolerance.rtol:g} for "
        f"{error.dtype} (||candidate - reference|| / ||reference||); max abs error "
        f"{error.max_abs:.2e}, max rel error {error.max_rel:.2e}, {error.fraction_off:.1%} "
        f"of elements off, cosine similarity {error.cosine:.6f}"
    )
    if error.within:
        text = f"{error.non_finite} in the candidate where the reference is finite; " + text
    return text
