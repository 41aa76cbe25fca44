"""The separate pytest runs that make the pages the browser tests open."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_pytest(folder: Path, *arguments: str, flag: str | None = None) -> None:
    """A separate pytest run in `folder`, clear of this run's xdist and option settings and
    of GitHub Actions' (whose step summary it would write to); `flag` names an environment
    variable set to 1 for it, the switch the project's test reads."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS", "GITHUB_ACTIONS"))
    }
    if flag is not None:
        environment[flag] = "1"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *arguments],
        cwd=folder,
        env=environment,
        capture_output=True,
        check=False,
        timeout=300,
    )
