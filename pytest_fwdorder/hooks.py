"""The old import path of `pytest_fwdorder.hookspecs`, kept for code that imported it.

The pluggy hook specifications moved there; new code imports that module.
"""

import sys

from pytest_fwdorder import hookspecs
from pytest_fwdorder.hookspecs import *  # noqa: F403  (what a type checker sees)

# One module under both names, so that setting an attribute through the old path (a test's
# monkeypatch) changes what the package reads.
sys.modules[__name__] = hookspecs
