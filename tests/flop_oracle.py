"""torch's FlopCounterMode as the oracle of `costs=True`: our figures in its naming."""

from __future__ import annotations

from pytest_fwdorder import Trace


def per_module(trace: Trace) -> dict[str, int]:
    """FLOPs per module over all its calls, named as FlopCounterMode's ModuleTracker names it."""
    found: dict[str, int] = {}
    for call in trace.calls:
        assert call.costs is not None
        name = f"{trace.root_type}.{call.path}" if call.path else trace.root_type
        found[name] = found.get(name, 0) + call.costs.flops
    return found
