"""The old import path of `pytest_fwdorder.structure_comparison`, kept for code that imported it.

The structure comparison moved there; new code imports that module.
"""

import sys

from pytest_fwdorder import structure_comparison
from pytest_fwdorder.structure_comparison import *  # noqa: F403  (what a type checker sees)

# One module under both names, so that setting an attribute through the old path (a test's
# monkeypatch) changes what the package reads.
sys.modules[__name__] = structure_comparison
