"""Budget tests on a trace's costs: `assert_costs`. Pure, no torch."""

from __future__ import annotations

from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.golden.figures import (
    human_bytes,
    human_count,
)

# How many of the most expensive calls a failed budget names.
_SPENDERS_SHOWN = 5


def assert_costs(
    trace: TraceRecords,
    *,
    flops_at_most: int | None = None,
    saved_activations_at_most: int | None = None,
    parameter_bytes_at_most: int | None = None,
) -> None:
    """Fail with `AssertionError` when a trace taken with `costs=True` spends over a budget.

    The message gives each figure over its budget, then the calls whose own operations
    spend the most FLOPs: where to look first. Raises ValueError for a trace taken
    without `costs=True` and TypeError for a budget that is not a non-negative int.
    """
    __tracebackhide__ = True
    budgets = {
        "flops_at_most": flops_at_most,
        "saved_activations_at_most": saved_activations_at_most,
        "parameter_bytes_at_most": parameter_bytes_at_most,
    }
    for name, budget in budgets.items():
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < 0
        ):
            raise TypeError(
                f"assert_costs {name} must be a non-negative int, got {budget!r}: "
                f"write {name}=2_000_000_000"
            )
    costs = trace.costs
    if costs is None:
        raise ValueError(
            f"assert_costs got a trace of {trace.root_type} taken without costs: take it with "
            "trace_forward(..., costs=True) (or the marker's costs=True)"
        )
    over: list[str] = []
    if flops_at_most is not None and costs.flops > flops_at_most:
        over.append(
            f"FLOPs {costs.flops:,} ({human_count(costs.flops)}) > {flops_at_most:,} "
            f"({human_count(flops_at_most)})"
        )
    if saved_activations_at_most is not None:
        saved = costs.saved_bytes
        if saved is None:
            raise ValueError(
                "assert_costs saved_activations_at_most needs activations saved for backward, "
                "but the trace ran with grad disabled: trace outside torch.no_grad()"
            )
        if saved > saved_activations_at_most:
            over.append(
                f"saved for backward {saved:,} B ({human_bytes(saved)}) > "
                f"{saved_activations_at_most:,} B ({human_bytes(saved_activations_at_most)})"
            )
    if parameter_bytes_at_most is not None and costs.tensor_bytes > parameter_bytes_at_most:
        over.append(
            f"parameters and buffers {costs.tensor_bytes:,} B ({human_bytes(costs.tensor_bytes)}) "
            f"> {parameter_bytes_at_most:,} B ({human_bytes(parameter_bytes_at_most)})"
        )
    if over:
        raise AssertionError(
            f"{trace.root_type} is over budget: {'; '.join(over)}\n" + _spenders(trace)
        )


def _spenders(trace: TraceRecords) -> str:
    """The calls whose own operations spend the most FLOPs, one line each, with their share."""
    total = trace.costs.flops if trace.costs is not None else 0
    spending = sorted(
        (call for call in trace.calls if call.costs is not None and call.costs.own_flops),
        key=lambda call: -call.costs.own_flops if call.costs is not None else 0,
    )
    if not spending:
        return "no call's own operations have a FLOP formula"
    lines = ["the calls that spend the most FLOPs themselves:"]
    for call in spending[:_SPENDERS_SHOWN]:
        flops = call.costs.own_flops if call.costs is not None else 0
        share = f" ({flops / total:.0%})" if total else ""
        nth = f" #{call.nth}" if call.nth > 1 or len(trace.find(call.path)) > 1 else ""
        lines.append(
            f"  {call.display_path}{nth} ({call.module_type}): {human_count(flops)}{share}"
        )
    if len(spending) > _SPENDERS_SHOWN:
        lines.append(f"  ... {len(spending) - _SPENDERS_SHOWN} more")
    return "\n".join(lines)
