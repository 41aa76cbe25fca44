"""A parity report's words for one call, shared by its text (`str(report)`) and its HTML:
how a call is named, the error table's columns and each paired call's cells. Pure, no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_fwdorder.picture.parity_picture import CallErrorLike

# The error table's columns: a mark for a call outside tolerance, the two calls, the numbers.
PARITY_COLUMNS = (
    "",
    "candidate call",
    "reference call",
    "rel error",
    "max abs",
    "max rel",
    "off",
    "cosine",
)
# How many of the columns, from the left, are words; the rest are numbers.
PARITY_WORD_COLUMNS = 3


def call_display_path(path: str, nth: int) -> str:
    """A call as reports name it: `<root>` for the model itself, `(call 2)` after a module's
    later calls."""
    name = path or "<root>"
    return name if nth == 1 else f"{name} (call {nth})"


def error_cells(error: CallErrorLike) -> list[str]:
    """One paired call's row of the error table, a cell per column of `PARITY_COLUMNS`."""
    return [
        "x" if error.diverges else "",
        error.candidate_display_path,
        error.reference.display_path,
        f"{error.relative_error:.2e}",
        f"{error.max_abs:.2e}",
        f"{error.max_rel:.2e}",
        f"{error.fraction_off:.1%}",
        f"{error.cosine:.6f}",
    ]
