"""The oldest supported torch: older releases get an error naming the release and the fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.recording.torch_release import check_torch_release


def test_a_release_older_than_the_oldest_supported_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"needs torch 2\.8 or newer, and this is torch 2\.1\.2"):
        check_torch_release("2.1.2")


@pytest.mark.parametrize("version", ["2.8.0", "2.15.0+cpu", "2.16.0a0+git1234", "10.0.0"])
def test_supported_releases_are_accepted(version: str) -> None:
    check_torch_release(version)


def test_a_version_that_cannot_be_read_is_accepted() -> None:
    check_torch_release("unknown")


def test_a_trace_on_an_older_torch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.7.1")

    with pytest.raises(RuntimeError, match=r"pip install 'torch>=2\.8'"):
        trace_forward(nn.Linear(2, 2), torch.zeros(1, 2))
