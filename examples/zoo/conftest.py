"""The zoo suite's report: how many models were traced, fx-checked and agreed, in the summary."""

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
