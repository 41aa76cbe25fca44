"""The zoo suite's report in the run summary: how many models were traced, fx-checked, agreed.

It lives here, not in zoo/, because under pytest-xdist the controller process that writes the
summary only loads the conftest files of the paths it was given.
"""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    checks: dict[str, int] = {}
    for report in terminalreporter.stats.get("passed", []):
        for name, value in getattr(report, "user_properties", []):
            if name.startswith("zoo "):
                checks[name] = checks.get(name, 0) + int(value)
    if checks:
        terminalreporter.write_sep("-", "torchvision zoo")
        for name in sorted(checks):
            terminalreporter.write_line(f"{name[4:]}: {checks[name]}")
