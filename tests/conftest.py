"""Test-suite set-up."""

from __future__ import annotations

# pytester's in-process runs drop modules first imported during the run from sys.modules.
# torch._dynamo registers C++ operators at import, so a second import fails: import it
# once here so that every in-process run finds it already loaded.
import torch._dynamo  # noqa: F401
