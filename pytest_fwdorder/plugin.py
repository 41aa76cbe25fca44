"""The pytest plugin: the `forward_trace` fixture, its marker and ini options, and messages.

Read top to bottom: options -> configure -> report header -> fixture -> assertion messages.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_fwdorder.snapshot import explain_snapshot_assertion
from pytest_fwdorder.trace import Trace

_MARKER = "fwdorder"
_MARKER_KEYWORDS = ("device", "show_devices")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "fwdorder_device",
        "device forward_trace runs models on by default ('meta' traces without compute); "
        "empty: wherever the model is",
        default="",
    )
    parser.addini(
        "fwdorder_show_devices",
        "show each tensor's device in golden files (off: goldens match across devices)",
        type="bool",
        default=False,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(device=None, show_devices=False): defaults for the forward_trace fixture "
        "in this test",
    )
    device = str(config.getini("fwdorder_device"))
    if device:
        _check_device(device, source="ini option fwdorder_device")


def pytest_report_header(config: pytest.Config) -> str:
    import torch

    return f"fwdorder: torch {torch.__version__}"


@pytest.fixture
def forward_trace(request: pytest.FixtureRequest) -> Any:
    """Trace a model: `forward_trace(model, *inputs)` or `with forward_trace.record(model)`.

    Defaults come from the `fwdorder` marker, then the `fwdorder_*` ini options.
    """
    from pytest_fwdorder.tracing import Tracer

    device = str(request.config.getini("fwdorder_device")) or None
    show_devices = bool(request.config.getini("fwdorder_show_devices"))
    marker = request.node.get_closest_marker(_MARKER)
    if marker is not None:
        if marker.args:
            raise TypeError(
                f"@pytest.mark.{_MARKER} takes keyword arguments only, got {marker.args!r}: "
                f"write @pytest.mark.{_MARKER}(device='meta')"
            )
        unknown = sorted(set(marker.kwargs) - set(_MARKER_KEYWORDS))
        if unknown:
            raise TypeError(
                f"@pytest.mark.{_MARKER} got unknown keyword(s) {unknown!r}: "
                f"it takes {', '.join(_MARKER_KEYWORDS)}"
            )
        device = marker.kwargs.get("device", device)
        if device is not None:
            _check_device(str(device), source=f"@pytest.mark.{_MARKER}(device=...)")
        show_devices = bool(marker.kwargs.get("show_devices", show_devices))
    return Tracer(device=device, show_devices=show_devices)


@pytest.hookimpl(wrapper=True)
def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> Generator[None, list[list[str] | None], list[list[str] | None]]:
    # Not a firstresult hook: every implementation's explanation comes back in a list, and
    # pytest shows the first non-empty one. Ours goes first, ahead of syrupy's generic diff.
    explanations = yield
    if op != "==" or not isinstance(left, Trace):
        return explanations
    if isinstance(right, Trace):
        difference = right.diff(left)
        ours: list[str] | None = [
            f"{left!r} == {right!r}",
            "traces differ (- right, + left):",
            *difference.summary().splitlines(),
            "",
            *difference.body(),
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
