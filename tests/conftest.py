"""Test-suite set-up."""

from __future__ import annotations

# pytester's in-process runs drop modules first imported during the run from sys.modules.
# torch._dynamo registers C++ operators at import, so a second import fails: import it
# once here so that every in-process run finds it already loaded.
import sys
from pathlib import Path

import pytest
import torch._dynamo  # noqa: F401

# The torch.fx oracle lives beside the zoo suite that uses it most; the unit tests use it too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "zoo"))


@pytest.fixture(autouse=True)
def _inner_runs_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytester run inside an xdist worker would inherit the worker's environment, and
    syrupy would then skip its report and unused-snapshot cleanup as workers do."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
