"""The pytest plugin: the `forward_trace` fixture, its marker and ini options, and messages.

Read top to bottom: options -> configure -> report header -> fixture -> assertion messages.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Generator
from typing import Any, Literal

import pytest

from pytest_fwdorder.diff import diff_traces
from pytest_fwdorder.options import FACETS, OPTION_NAMES, TraceOptions, check_option_values
from pytest_fwdorder.records import TraceRecords
from pytest_fwdorder.snapshot import explain_snapshot_assertion
from pytest_fwdorder.trace import Trace

_MARKER = "fwdorder"
# One ini option per trace option, `fwdorder_<name>`: (ini type, default, help).
_INI_OPTIONS: dict[str, tuple[Literal["string", "bool", "args"], object, str]] = {
    "device": (
        "string",
        "",
        "device forward_trace runs models on by default ('meta' traces without compute); "
        "empty: wherever the model is",
    ),
    "show_devices": (
        "bool",
        False,
        "show each tensor's device in golden files (off: goldens match across devices)",
    ),
    "hide": (
        "args",
        [],
        f"facets left out of golden files, any of: {', '.join(FACETS)} (default: none)",
    ),
    "unregistered": (
        "string",
        "warn",
        "a module that owns parameters but is not registered under the model: 'warn' "
        "(default) or 'error'",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    for name, (kind, default, help_text) in _INI_OPTIONS.items():
        parser.addini(f"fwdorder_{name}", help_text, type=kind, default=default)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}({', '.join(f'{name}=...' for name in OPTION_NAMES)}): trace options for "
        "the forward_trace fixture in this test",
    )
    values = _ini_options(config)
    try:
        check_option_values(values, source="the fwdorder_* ini options")
    except (TypeError, ValueError) as error:
        raise pytest.UsageError(str(error)) from None
    if values["device"]:
        _check_device(values["device"], source="ini option fwdorder_device")


def _ini_options(config: pytest.Config) -> dict[str, Any]:
    values = {name: config.getini(f"fwdorder_{name}") for name in _INI_OPTIONS}
    values["device"] = str(values["device"]) or None
    values["hide"] = tuple(values["hide"])
    return values


def pytest_report_header(config: pytest.Config) -> str:
    # Read from the installed metadata: importing torch here would cost every run seconds,
    # also runs that never trace.
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"fwdorder: torch {torch_version}"


@pytest.fixture
def forward_trace(request: pytest.FixtureRequest) -> Any:
    """Trace a model: `forward_trace(model, *inputs)` or `with forward_trace.record(model)`.

    Options come from the call, then the `fwdorder` markers (the closest first), then the
    `fwdorder_*` ini options.
    """
    from pytest_fwdorder.tracing import Tracer

    values = _ini_options(request.config)
    # Outermost first (module, class, function), so the closest marker's options win while
    # a class-level device and a test-level hide both apply.
    for marker in reversed(list(request.node.iter_markers(_MARKER))):
        values.update(_marker_options(marker))
    return Tracer(TraceOptions(**values))


def _marker_options(marker: pytest.Mark) -> dict[str, Any]:
    """The marker's options, or a one-line failure naming what is wrong and what is valid."""
    usage = f"@pytest.mark.{_MARKER}(device='meta')"
    if marker.args:
        pytest.fail(
            f"@pytest.mark.{_MARKER} takes keyword arguments only, got {marker.args!r}: "
            f"write {usage}; the options are {', '.join(OPTION_NAMES)}",
            pytrace=False,
        )
    try:
        check_option_values(dict(marker.kwargs), source=f"@pytest.mark.{_MARKER}")
    except (TypeError, ValueError) as error:
        pytest.fail(str(error), pytrace=False)
    device = marker.kwargs.get("device")
    if device is not None:
        try:
            _check_device(str(device), source=f"@pytest.mark.{_MARKER}(device=...)")
        except pytest.UsageError as error:
            pytest.fail(str(error), pytrace=False)
    return dict(marker.kwargs)


@pytest.hookimpl(wrapper=True)
def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> Generator[None, list[list[str] | None], list[list[str] | None]]:
    # Not a firstresult hook: every implementation's explanation comes back in a list, and
    # pytest shows the first non-empty one. Ours goes first, ahead of syrupy's generic diff.
    explanations = yield
    if op != "==" or not isinstance(left, Trace):
        return explanations
    if isinstance(right, TraceRecords):
        ours: list[str] | None = [
            f"{left!r} == {right!r}",
            "traces differ (- right, + left):",
            *diff_traces(right, left).explanation(),
        ]
    else:
        ours = explain_snapshot_assertion(left, right)
    return [ours, *explanations] if ours else explanations


def _check_device(device: str, *, source: str) -> None:
    import torch

    try:
        torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise pytest.UsageError(
            f"{source} is not a torch device: {device!r} ({error}); use 'cpu', 'meta' or 'cuda'"
        ) from None
