"""The old import path of `pytest_fwdorder.builtin_describers`, kept for code that imported it.

The built-in describers moved there; new code imports that module.
"""

import sys

from pytest_fwdorder import builtin_describers
from pytest_fwdorder.builtin_describers import *  # noqa: F403  (what a type checker sees)

# One module under both names, so that setting an attribute through the old path (a test's
# monkeypatch) changes what the package reads.
sys.modules[__name__] = builtin_describers
