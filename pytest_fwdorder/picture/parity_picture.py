"""A parity report -> the picture of its error per call: the reference's call tree with each
paired call coloured by its error relative to tolerance. Pure, no torch.

Green within tolerance; beyond it, yellow to red as the error grows from once to a
thousand times the tolerance (on a log scale); red for NaN, Inf or a shape mismatch;
grey for a recorded call with no partner; white for a call that was not recorded. The
first divergent call has a thick border. Same report, same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.picture.layout import (
    MARGIN,
    TEXT_INSET,
    Box,
    golden_calls,
    lay_out,
    text_width,
)
from pytest_fwdorder.picture.svg import (
    BORDER,
    INK,
    LEAF_FILL,
    LEGEND_HEIGHT,
    SUMMARY_LINE_HEIGHT,
    TYPE_INK,
    Picture,
    svg_legend,
    svg_opening,
    xml_text,
)


class ParityCall(Protocol):
    """What the picture and the report page read of a recorded reference call (`RecordedCall`
    has it: protocols, so these modules below the parity check need not import it)."""

    @property
    def path(self) -> str: ...
    @property
    def nth(self) -> int: ...
    @property
    def display_path(self) -> str: ...


class ParityErrorTolerance(Protocol):
    """A call's tolerance: `ParityTolerance` has it."""

    @property
    def rtol(self) -> float: ...
    @property
    def atol(self) -> float: ...


class CallErrorLike(Protocol):
    """What is read of one paired call's error: `checks.parity.CallError` has it."""

    @property
    def reference(self) -> ParityCall: ...
    @property
    def candidate_path(self) -> str: ...
    @property
    def candidate_display_path(self) -> str: ...
    @property
    def relative_error(self) -> float: ...
    @property
    def max_abs(self) -> float: ...
    @property
    def max_rel(self) -> float: ...
    @property
    def fraction_off(self) -> float: ...
    @property
    def cosine(self) -> float: ...
    @property
    def tolerance(self) -> ParityErrorTolerance: ...
    @property
    def non_finite(self) -> str: ...
    @property
    def problem(self) -> str: ...
    @property
    def diverges(self) -> bool: ...


class ParityReportLike(Protocol):
    """What is read of a parity report: `checks.parity.ParityReport` has it."""

    @property
    def errors(self) -> Sequence[CallErrorLike]: ...
    @property
    def rules(self) -> Sequence[str]: ...
    @property
    def unpaired(self) -> Sequence[tuple[str, int, str]]: ...
    @property
    def notes(self) -> Sequence[str]: ...
    @property
    def reference_environment(self) -> str: ...
    @property
    def candidate_environment(self) -> str: ...
    @property
    def reference_golden(self) -> str: ...
    @property
    def first_divergence(self) -> CallErrorLike | None: ...
    @property
    def first_non_finite(self) -> CallErrorLike | None: ...


WITHIN_FILL = "#dafbe1"
UNPAIRED_FILL = "#d0d7de"
DIVERGENCE_BORDER = "#82071e"
# Beyond tolerance: from yellow at the tolerance to red at 1000 times it.
_YELLOW = (0xFF, 0xE0, 0x66)
_RED = (0xE5, 0x53, 0x4B)
_WORST_RATIO_DECADES = 3.0


def error_colour(error: CallErrorLike) -> str:
    """The fill of a paired call's box: green within tolerance, yellow to red beyond it."""
    if error.problem or error.non_finite:
        return _hex(_RED)
    if not error.diverges:
        return WITHIN_FILL
    # The tolerance as a relative error; atol's share is left out (it is tiny by default).
    allowed = error.tolerance.rtol or error.tolerance.atol or 1e-12
    decades = math.log10(max(error.relative_error / allowed, 1.0)) / _WORST_RATIO_DECADES
    share = min(max(decades, 0.0), 1.0)
    return _hex(
        tuple(round(low + (high - low) * share) for low, high in zip(_YELLOW, _RED, strict=True))
    )


def parity_picture(report: ParityReportLike) -> Picture:
    """The reference's call tree, each paired call coloured by its error (see the module)."""
    _header, lines = parse_golden(report.reference_golden)
    layout = lay_out(golden_calls(lines), rolled=False)
    errors = {(error.reference.path, error.reference.nth): error for error in report.errors}
    unpaired = {(path, nth) for path, nth, _reason in report.unpaired}
    first = report.first_divergence
    first_call = (first.reference.path, first.reference.nth) if first is not None else None
    title = (
        f"first divergence at reference {first.reference.display_path}"
        if first is not None
        else f"all {len(report.errors)} paired calls within tolerance"
    )
    summary = [title, f"reference: {report.reference_environment}"]
    summary.append(f"candidate: {report.candidate_environment}")
    top = len(summary) * SUMMARY_LINE_HEIGHT + LEGEND_HEIGHT + MARGIN
    width = max(layout.width, *(text_width(line) + 2 * MARGIN for line in summary), 640)
    height = layout.height + top
    parts = svg_opening(width, height, title, summary, "fwdorder-picture fwdorder-parity")
    parts.append(svg_legend(_LEGEND, len(summary)))
    parts.append(f'<g class="fo-calls" transform="translate(0,{top})">')
    for box in layout.boxes:
        # The golden names the model itself `<root>`, the recorded calls ``.
        call = ("" if box.line.path == "<root>" else box.line.path, box.line.nth)
        error = errors.get(call)
        if error is not None:
            fill, state = error_colour(error), "diverges" if error.diverges else "within"
            note = (
                f"{state}: relative error {error.relative_error:.2e}, rtol {error.tolerance.rtol:g}"
            )
        elif call in unpaired:
            fill, state, note = UNPAIRED_FILL, "unpaired", "recorded, no partner in the candidate"
        else:
            fill, state, note = LEAF_FILL, "not-recorded", "not recorded"
        parts.append(_box(box, fill, state, note, first=call == first_call))
    parts += ["</g>", "</svg>"]
    return Picture("\n".join(parts) + "\n")


def _box(box: Box, fill: str, state: str, note: str, *, first: bool) -> str:
    classes = f"fo-box fo-{state}" + (" fo-first-divergence" if first else "")
    border = f'stroke="{DIVERGENCE_BORDER}" stroke-width="3"' if first else f'stroke="{BORDER}"'
    weight = ' font-weight="bold"' if box.container else ""
    name = f'<tspan fill="{INK}">{xml_text(box.name)}: </tspan>' if box.name else ""
    return (
        f'<g class="{classes}" data-path="{xml_text(box.line.path)}" data-nth="{box.line.nth}">'
        f"<title>{xml_text(box.line.text.strip())}\n({xml_text(note)})</title>"
        f'<rect class="fo-frame" x="{box.x}" y="{box.y}" width="{box.width}" '
        f'height="{box.height}" rx="4" fill="{fill}" {border}/>'
        f'<text class="fo-header" x="{box.x + TEXT_INSET}" y="{box.y + 16}"{weight}>'
        f'{name}<tspan fill="{TYPE_INK}">{xml_text(box.kind)}</tspan></text></g>'
    )


def _hex(colour: tuple[int, ...]) -> str:
    return "#" + "".join(f"{channel:02x}" for channel in colour)


# The legend: (fill, border, name) of each colour a call can have.
_LEGEND = (
    (WITHIN_FILL, BORDER, "within tolerance"),
    (_hex(_YELLOW), BORDER, "beyond"),
    (_hex(_RED), BORDER, "1000x beyond, NaN"),
    (UNPAIRED_FILL, BORDER, "unpaired"),
    (LEAF_FILL, BORDER, "not recorded"),
)
