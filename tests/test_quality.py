"""House rules CI enforces: ruff lint and format, mypy strict on the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["pytest_fwdorder", "tests", "examples", "benchmarks"]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_ruff_finds_nothing_to_lint() -> None:
    finished = run("ruff", "check", *SOURCES)

    assert finished.returncode == 0, finished.stdout


@pytest.mark.slow
def test_the_code_is_ruff_formatted() -> None:
    finished = run("ruff", "format", "--check", *SOURCES)

    assert finished.returncode == 0, finished.stdout


@pytest.mark.slow
def test_the_package_passes_mypy_strict() -> None:
    finished = run("mypy")

    assert finished.returncode == 0, finished.stdout
