"""The model a trace runs: the module given, or what a zero-argument builder returns.

A builder is built where the trace runs (on meta through `build_on_meta`), seeded and
watched by the facets that watch a build (`FacetRecording.building`) when the options ask
for it. `required_parameters` is the one builder check: the
command line's TARGET check uses it too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import nn

from pytest_fwdorder.options import TraceOptions
from pytest_fwdorder.recording.meta.build import build_on_meta
from pytest_fwdorder.recording.resolve import resolve_model
from pytest_fwdorder.recording.seeding import seeded
from pytest_fwdorder.tracing.facet_setup import FacetRecording


def model_to_trace(
    model: nn.Module | Callable[[], nn.Module],
    options: TraceOptions,
    facets: FacetRecording,
) -> nn.Module:
    """The model to trace: `model` itself, or what the builder `model` returns.

    The build runs under the watch of the trace's facets that watch a build (each try of
    it, on meta), and then under seed 0, as it does with `values`. A model already built is
    refused when such a facet is on.
    """
    # A method bound to a module (`model.forward`), a module class, a tensor: mistakes that
    # resolve_model explains. Any other callable, a builder object's method included, builds.
    if (
        isinstance(model, (nn.Module, torch.Tensor, type))
        or not callable(model)
        or _is_module_method(model)
    ):
        facets.refuse_built_model(type(model).__name__)
        return resolve_model(model, entry_point="trace_forward")
    _check_builder(model)
    builder = _watched_builder(model, options, facets)
    device = options.device
    if device is not None and torch.device(device).type == "meta":
        built = build_on_meta(builder)
    else:
        with torch.device(device) if device is not None else nullcontext():
            built = builder()
    if not isinstance(built, nn.Module):
        raise TypeError(
            f"trace_forward called {_name(model)} as a zero-argument builder and got "
            f"{type(built).__name__!r}, not an nn.Module: the builder must return the model"
        )
    return resolve_model(built, entry_point="trace_forward")


def required_parameters(builder: Callable[..., object]) -> list[str]:
    """The parameters `builder()` would miss: those without a default, keyword-only ones
    included (`*args` and `**kwargs` are never missed). Empty for a signature that cannot
    be read (some builtins): calling it says more."""
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):
        return []
    return [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]


def _watched_builder(
    model: Callable[[], nn.Module], options: TraceOptions, facets: FacetRecording
) -> Callable[[], nn.Module]:
    """The builder as `model_to_trace` calls it: seeded and watched as the options ask."""
    if not (facets.watches_build or options.values):
        return model

    def build() -> nn.Module:
        with seeded(), facets.building():
            return model()

    build.__qualname__ = getattr(model, "__qualname__", "build")  # as failures name it
    return build


def _check_builder(builder: Callable[..., object]) -> None:
    """A callable taken for a builder must be callable with no arguments."""
    required = required_parameters(builder)
    if required:
        raise TypeError(
            f"trace_forward expected an nn.Module or a zero-argument function that builds one, "
            f"got {_name(builder)}, which requires {', '.join(map(repr, required))}: to trace "
            "a function, wrap it in an nn.Module; to trace a model, pass the model"
        )


def _name(value: object) -> str:
    return repr(getattr(value, "__qualname__", None) or type(value).__name__)


def _is_module_method(value: object) -> bool:
    return isinstance(getattr(value, "__self__", None), nn.Module)
