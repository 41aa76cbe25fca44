"""The warning and error classes pytest-fwdorder raises, how its warnings are issued, and
the "did you mean" of its messages."""

from __future__ import annotations

import contextlib
import difflib
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path

_PACKAGE_DIRECTORY = str(Path(__file__).resolve().parent)
# Frames in these files are ours or plumbing between the user's line and ours.
_NOT_THE_CALLER = (_PACKAGE_DIRECTORY, str(Path(contextlib.__file__).resolve()))


class FwdOrderWarning(UserWarning):
    """Base class of every warning pytest-fwdorder emits."""


class UnwrappedModelWarning(FwdOrderWarning):
    """The trace looked through a wrapper: torch.compile, DataParallel, DDP, FSDP2's classes."""


class UnpicklableFacetWarning(FwdOrderWarning):
    """A trace's facets could not travel between a pytest-xdist worker and the controller
    (pickled there, unpickled here): the reports compare with the registered facets."""


class EmptyTraceError(ValueError):
    """A recording block ended without a single call of the model's modules."""


class UnregisteredModuleError(ValueError):
    """A module that owns parameters ran in forward without being registered under the model."""


class MetaTraceError(RuntimeError):
    """A forward needed real tensor values while traced on the meta device."""


class NotEquivalentError(AssertionError):
    """Two models' outputs diverged beyond tolerance at some call."""


class StructureMismatchError(AssertionError):
    """Two traces differ in execution structure beyond what was ignored."""


class ReferenceMismatchError(AssertionError):
    """A candidate's outputs departed from a recorded reference's at some paired call.

    `report` is the `ParityReport` the message was written from (None when unknown): the
    HTML report (`--fwdorder-report`) shows it.
    """

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class CoverageError(AssertionError):
    """Modules matching a path pattern are not all of the class asserted, or none matches."""


class CheckpointMismatchError(AssertionError):
    """A state_dict does not load into a model: keys missing, unexpected or of other shapes."""


def did_you_mean(name: str, candidates: Iterable[str], *, lead: str = ": ") -> str:
    """`: did you mean 'act'?` for the candidates close to `name` (case ignored), else ``.

    `lead` goes before "did you mean" (`"; "` after a message that has a colon already).
    The one "did you mean" of the package's messages.
    """
    by_lower = {candidate.lower(): candidate for candidate in sorted(set(candidates))}
    close = [by_lower[match] for match in difflib.get_close_matches(name.lower(), by_lower)]
    if not close:
        return ""
    return f"{lead}did you mean {' or '.join(map(repr, close))}?"


def warn_at_caller(message: str, category: type[Warning] = FwdOrderWarning) -> None:
    """Warn at the user's line: the first frame outside this package and contextlib.

    A fixed `stacklevel` points at our own files whenever the path from the public entry
    point to the warning changes (a `with record(...)` block exits through contextlib).
    """
    frame = sys._getframe(0)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_NOT_THE_CALLER):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
