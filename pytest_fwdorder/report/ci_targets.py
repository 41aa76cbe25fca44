"""Which reports of this run show goldens, read from pytest's options alone.

Apart from report/ci.py so that pytest's start-up reads it without importing the diff.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class CiTargets:
    """Which reports of this run show goldens."""

    html: bool
    junit: bool
    github: bool
    update: bool

    def __bool__(self) -> bool:
        return self.html or self.junit or self.github or self.update


def ci_targets(config: pytest.Config) -> CiTargets:
    """The reports this run writes that show goldens: pytest-html with `--html`, JUnit XML
    with `--junitxml`, annotations under `GITHUB_ACTIONS=true`, and `--snapshot-update`."""
    return CiTargets(
        html=bool(config.getoption("htmlpath", None)) and config.pluginmanager.hasplugin("html"),
        junit=bool(getattr(config.option, "xmlpath", None)),
        github=os.environ.get("GITHUB_ACTIONS") == "true",
        update=bool(getattr(config.option, "update_snapshots", False)),
    )
