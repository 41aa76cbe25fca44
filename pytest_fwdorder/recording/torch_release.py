"""The oldest torch release pytest-fwdorder supports, and the check that names it.

torch 2.8 is the oldest release tested (CI runs the quick suite on it). torch 2.1 lacks APIs
the recorder and the meta device use (global forward hooks that take keyword arguments,
`torch.is_autocast_enabled(device)`, `torch.jagged`) and fails inside our code with errors
that would blame the model or the meta device; releases between 2.1 and 2.8 were not tested.
pyproject.toml says the same floor.
"""

from __future__ import annotations

import re

OLDEST_TORCH = (2, 8)
_RELEASE = re.compile(r"([0-9]+)\.([0-9]+)")


def check_torch_release(version: str) -> None:
    """Raise RuntimeError naming the release when `version` (torch.__version__) is older than
    the oldest supported one; accept any version it cannot read (a source build)."""
    match = _RELEASE.match(version)
    if match is None or (int(match.group(1)), int(match.group(2))) >= OLDEST_TORCH:
        return
    oldest = ".".join(map(str, OLDEST_TORCH))
    raise RuntimeError(
        f"pytest-fwdorder needs torch {oldest} or newer, and this is torch {version}: upgrade "
        f"torch (pip install 'torch>={oldest}'), or use pytest-fwdorder 0.4 or older"
    )
