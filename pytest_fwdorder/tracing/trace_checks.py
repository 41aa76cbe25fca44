"""What every finished trace goes through: the unregistered and fold checks, then the call
views the plugins choose (`pytest_fwdorder_call_view`)."""

from __future__ import annotations

from dataclasses import replace

from pytest_fwdorder.errors import UnregisteredModuleError, did_you_mean, warn_at_caller
from pytest_fwdorder.hookspecs import call_view_hooks_exist, call_views_from_plugins
from pytest_fwdorder.options import TraceOptions
from pytest_fwdorder.trace import Trace


def check_finished_trace(trace: Trace, options: TraceOptions) -> None:
    """Warn about (or refuse) unregistered modules and `fold` names that match nothing, then
    ask the plugins how each called module's calls are shown."""
    __tracebackhide__ = True
    _check_unregistered(trace, options.unregistered)
    _check_fold(trace, options.fold)
    _choose_call_views(trace)


def _check_fold(trace: Trace, fold: tuple[str, ...]) -> None:
    """Warn about `fold` names that match no called module's path or type: a typo would
    otherwise leave the golden unfolded without a word."""
    if not fold:
        return
    known = {call.display_path for call in trace.calls} | {call.module_type for call in trace.calls}
    for name in fold:
        if name not in known:
            warn_at_caller(
                f"fold names no called module: {name!r} is neither a called module's path nor "
                f"its type{did_you_mean(name, known, lead='; ')}"
            )


def _check_unregistered(trace: Trace, policy: str) -> None:
    """Warn about (or refuse) modules that own parameters but are not registered."""
    owners = [
        f"{call.path} ({call.module_type}: "
        f"{', '.join(fact.name for fact in call.facts.tensors.parameters)})"
        for call in trace.calls
        if not call.registered
        and call.nth == 1
        and call.facts is not None
        and call.facts.tensors.parameters
    ]
    if not owners:
        return
    message = (
        f"{len(owners)} module(s) own parameters but are not registered under "
        f"{trace.root_type}, so an optimizer over model.parameters() never trains them and "
        f"state_dict() never saves them: {', '.join(owners[:5])}"
        f"{' ...' if len(owners) > 5 else ''}. Keep them in nn.ModuleList or nn.ModuleDict "
        "(not a plain list or dict), or assign them as attributes"
    )
    if policy == "error":
        __tracebackhide__ = True  # the message names the modules; our frames add nothing
        raise UnregisteredModuleError(message)
    warn_at_caller(message)


def _choose_call_views(trace: Trace) -> None:
    """Ask the plugins how each called module's calls are shown (`pytest_fwdorder_call_view`)."""
    if not call_view_hooks_exist():  # as usual: no dict of every call to build
        return
    called = {call.path: call.module_type for call in trace.calls}
    views = call_views_from_plugins(called)
    if views:
        trace.options = replace(trace.options, call_views=views)
