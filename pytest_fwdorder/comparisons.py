"""The old import path of `pytest_fwdorder.golden_comparisons`, kept for code that imported it.

The golden comparisons of a test run moved there; new code imports that module.
"""

import sys

from pytest_fwdorder import golden_comparisons
from pytest_fwdorder.golden_comparisons import *  # noqa: F403  (what a type checker sees)

# One module under both names, so that setting an attribute through the old path (a test's
# monkeypatch) changes what the package reads.
sys.modules[__name__] = golden_comparisons
