"""The old import path of `pytest_fwdorder.record_types`, kept for code that imported it.

The record types moved there; new code imports that module.
"""

import sys

from pytest_fwdorder import record_types
from pytest_fwdorder.record_types import *  # noqa: F403  (what a type checker sees)

# One module under both names, so that setting an attribute through the old path (a test's
# monkeypatch) changes what the package reads.
sys.modules[__name__] = record_types
