"""The old import path of `pytest_fwdorder.entry_points`, kept for code that imported it.

The public entry points moved there; new code imports that module.
"""

import sys

from pytest_fwdorder import entry_points
from pytest_fwdorder.entry_points import *  # noqa: F403  (what a type checker sees)

# One module under both names, so that setting an attribute through the old path (a test's
# monkeypatch) changes what the package reads.
sys.modules[__name__] = entry_points
