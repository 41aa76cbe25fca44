"""The warning and error classes pytest-fwdorder raises."""

from __future__ import annotations


class FwdOrderWarning(UserWarning):
    """Base class of every warning pytest-fwdorder emits."""


class EmptyTraceError(ValueError):
    """A recording block ended without a single call of the model's modules."""


class MetaTraceError(RuntimeError):
    """A forward needed real tensor values while traced on the meta device."""


class NotEquivalentError(AssertionError):
    """Two models' outputs diverged beyond tolerance at some call."""


class StructureMismatchError(AssertionError):
    """Two traces differ in execution structure beyond what was ignored."""


class CheckpointMismatchError(AssertionError):
    """A state_dict does not load into a model: keys missing, unexpected or of other shapes."""
