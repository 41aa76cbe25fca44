"""Will a checkpoint load into a model? Missing, unexpected and mis-shaped keys, with near matches."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from pytest_fwdorder.errors import CheckpointMismatchError


@dataclass(frozen=True)
class KeyProblem:
    """One key that stops a strict `load_state_dict`, and the nearest key on the other side."""

    key: str
    shape: tuple[int, ...] | None
    nearest: str | None = None
    nearest_shape: tuple[int, ...] | None = None

    def __str__(self) -> str:
        text = f"{self.key} {_shape(self.shape)}"
        if self.nearest is not None:
            text += f" (nearest: {self.nearest} {_shape(self.nearest_shape)})"
        return text


@dataclass(frozen=True)
class CheckpointReport:
    """What `model.load_state_dict(checkpoint)` would complain about, key by key."""

    missing: list[KeyProblem] = field(default_factory=list)
    unexpected: list[KeyProblem] = field(default_factory=list)
    mismatched: list[KeyProblem] = field(default_factory=list)
    # Keys whose checkpoint value is not a tensor: (key, the model's shape, the value's type).
    not_tensors: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        """True when `load_state_dict(checkpoint, strict=True)` would succeed."""
        return not (self.missing or self.unexpected or self.mismatched or self.not_tensors)

    def __str__(self) -> str:
        if self.loads:
            return "the checkpoint loads: every key present, none unexpected, all shapes equal"
        lines = ["the checkpoint does not load into the model:"]
        for title, problems in (
            ("missing from the checkpoint", self.missing),
            ("unexpected in the checkpoint", self.unexpected),
            ("shape differs (model <- checkpoint)", self.mismatched),
        ):
            if problems:
                lines.append(f"  {title} ({len(problems)}):")
                lines.extend(f"    {problem}" for problem in problems)
        if self.not_tensors:
            lines.append(f"  not a tensor in the checkpoint ({len(self.not_tensors)}):")
            lines.extend(
                f"    {key} {shape} <- {type_name}" for key, shape, type_name in self.not_tensors
            )
        return "\n".join(lines)


def check_checkpoint(
    model: nn.Module, checkpoint: Mapping[str, torch.Tensor] | nn.Module
) -> CheckpointReport:
    """Compare a model's state_dict keys and shapes with a checkpoint's, without loading it.

    `checkpoint` is a state_dict or another model (its state_dict is used). For a missing
    key the nearest unexpected key is shown, and the other way round, preferring keys of the
    same shape: after a rename (`fc` -> `head`) each side points at the other.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"check_checkpoint expected an nn.Module, got {type(model).__name__!r}")
    if isinstance(checkpoint, nn.Module):
        checkpoint = checkpoint.state_dict()
    if not isinstance(checkpoint, Mapping):
        raise TypeError(
            f"check_checkpoint expected a state_dict (a mapping of names to tensors) or a "
            f"model, got {type(checkpoint).__name__!r}: pass torch.load(path) or the model"
        )
    expected = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    given = {
        name: tuple(value.shape) if isinstance(value, torch.Tensor) else None
        for name, value in checkpoint.items()
    }
    missing_keys = [name for name in expected if name not in given]
    unexpected_keys = [name for name in given if name not in expected]
    return CheckpointReport(
        missing=[_problem(name, expected[name], unexpected_keys, given) for name in missing_keys],
        unexpected=[
            _problem(name, given[name], missing_keys, expected) for name in unexpected_keys
        ],
        mismatched=[
            KeyProblem(name, expected[name], name, given[name])
            for name in expected
            if name in given and given[name] is not None and given[name] != expected[name]
        ],
        not_tensors=[
            (name, expected[name], type(checkpoint[name]).__name__)
            for name in expected
            if name in given and given[name] is None
        ],
    )


def assert_checkpoint_loads(
    model: nn.Module, checkpoint: Mapping[str, torch.Tensor] | nn.Module
) -> CheckpointReport:
    """Fail with every missing, unexpected and mis-shaped key unless the checkpoint loads."""
    __tracebackhide__ = True  # the message says it all; our frames would only add noise
    report = check_checkpoint(model, checkpoint)
    if not report.loads:
        raise CheckpointMismatchError(str(report))
    return report


def _problem(
    name: str,
    shape: tuple[int, ...] | None,
    candidates: list[str],
    shapes: Mapping[str, tuple[int, ...] | None],
) -> KeyProblem:
    same_shape = [candidate for candidate in candidates if shapes[candidate] == shape]
    nearest = _nearest(name, same_shape) or _nearest(name, candidates)
    return KeyProblem(name, shape, nearest, shapes[nearest] if nearest is not None else None)


def _nearest(name: str, candidates: list[str]) -> str | None:
    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.4)
    return matches[0] if matches else None


def _shape(shape: tuple[int, ...] | None) -> str:
    return "(not a tensor)" if shape is None else str(shape)
