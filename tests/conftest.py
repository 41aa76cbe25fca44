"""Test-suite set-up."""

from __future__ import annotations

# pytester's in-process runs drop modules first imported during the run from sys.modules.
# torch._dynamo registers C++ operators at import, so a second import fails: import it
# once here so that every in-process run finds it already loaded.
import pytest
import torch._dynamo  # noqa: F401


@pytest.fixture(autouse=True)
def _inner_runs_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytester run inside an xdist worker would inherit the worker's environment, and
    syrupy would then skip its report and unused-snapshot cleanup as workers do."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The zoo and layers suites' reports: how many samples passed each check.

    It lives here, not in zoo/, because under pytest-xdist the controller process that
    writes the summary only loads the conftest files of the paths it was given.
    """
    for prefix, title in (("zoo ", "torchvision zoo"), ("layers ", "every torch.nn layer")):
        checks: dict[str, int] = {}
        for report in terminalreporter.stats.get("passed", []):
            for name, value in getattr(report, "user_properties", []):
                if name.startswith(prefix):
                    checks[name] = checks.get(name, 0) + int(value)
        if checks:
            terminalreporter.write_sep("-", title)
            for name in sorted(checks):
                terminalreporter.write_line(f"{name[len(prefix) :]}: {checks[name]}")
