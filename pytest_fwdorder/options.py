"""The trace options, one set of names for every entry point. No torch import.

`trace_forward`, `record`, the fixture's `Tracer`, the `fwdorder` marker and the
`fwdorder_*` ini options all take exactly these names, so a setting moves between them
unchanged. A model keyword argument whose name is an option's goes in `model_kwargs`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

# The facets of a golden file that `hide` can turn off; all are shown by default, because
# a gate should be tight unless someone loosens it on purpose.
FACETS = ("settings", "parameters", "mode", "argument_names")
UNREGISTERED_POLICIES = ("warn", "error")
# What `ops_skip` leaves out of the recorded operations by default (see operations.py);
# besides these groups it takes single operation names.
OPERATION_GROUPS = ("views", "conversions", "torch_modules")


@dataclass(frozen=True)
class TraceOptions:
    """How a trace is taken and what its golden shows.

    `device`: run the model there ('meta' traces without compute; None: where the model is).
    `show_devices`: write each tensor's device in the golden (off: goldens match across
    devices).
    `hide`: facets left out of the golden, any of `FACETS`: module settings, parameters and
    buffers (with the totals), train/eval mode, argument names.
    `unregistered`: what a module that owns parameters but is not registered under the
    model (kept in a plain list: neither trained nor saved) causes: a `FwdOrderWarning`
    ("warn") or an `UnregisteredModuleError` ("error").
    `show_local_shapes`: write each DTensor's local shard shape after its placements
    (`f32[2,16]{Shard(1) local=[2,8]}`; off: goldens match across ranks).
    `fold`: module paths (`layer1`, `<root>`) or type names (`Bottleneck`) whose calls are
    written as one line each, their inside summarized as `[+N calls folded]`; the header
    still counts every call.
    `ops`: record the torch-level operations each module's forward calls directly, as
    `~ relu(f32[2,16]) -> f32[2,16]` lines under its call.
    `ops_skip`: what `ops` leaves out: any of `OPERATION_GROUPS` (`views`, `conversions`,
    `torch_modules`: the operations inside torch.nn's own modules) or operation names.
    `backward`: run backward from the output and record its order as a second section:
    True (from the sum of the output's floating tensors) or a function of the output that
    returns the loss.
    """

    device: str | None = None
    show_devices: bool = False
    hide: tuple[str, ...] = ()
    unregistered: str = "warn"
    show_local_shapes: bool = False
    fold: tuple[str, ...] = ()
    ops: bool = False
    ops_skip: tuple[str, ...] = OPERATION_GROUPS
    backward: Any = False

    def __post_init__(self) -> None:
        hide = self.hide
        if isinstance(hide, str):
            hide = tuple(hide.replace(",", " ").split())  # hide="settings mode", as in ini
        if isinstance(hide, (list, set, frozenset)):
            hide = tuple(hide)
        object.__setattr__(self, "hide", hide)
        fold = self.fold
        if isinstance(fold, str):
            fold = tuple(fold.replace(",", " ").split())  # fold="layer1 layer2", as in ini
        if isinstance(fold, (list, set, frozenset)):
            fold = tuple(fold)
        object.__setattr__(self, "fold", fold)
        ops_skip = self.ops_skip
        if isinstance(ops_skip, str):
            ops_skip = tuple(ops_skip.replace(",", " ").split())  # as in ini
        if isinstance(ops_skip, (list, set, frozenset)):
            ops_skip = tuple(ops_skip)
        if ops_skip == ("none",):  # as the command line and the ini spell "skip nothing"
            ops_skip = ()
        object.__setattr__(self, "ops_skip", ops_skip)
        check_option_values(
            {name: getattr(self, name) for name in OPTION_NAMES}, source="TraceOptions"
        )


OPTION_NAMES: tuple[str, ...] = tuple(option.name for option in fields(TraceOptions))


def check_option_values(values: dict[str, Any], *, source: str) -> None:
    """Raise TypeError for an unknown option name or a value of the wrong kind, ValueError
    for a value outside the option's choices."""
    unknown = sorted(set(values) - set(OPTION_NAMES))
    if unknown:
        raise TypeError(
            f"{source} got unknown option(s) {', '.join(map(repr, unknown))}: "
            f"the options are {', '.join(OPTION_NAMES)}"
        )
    device = values.get("device")
    if device is not None and not isinstance(device, str) and type(device).__name__ != "device":
        raise TypeError(
            f"{source}: device must be a string such as 'cpu' or 'meta', got {device!r}"
        )
    show_devices = values.get("show_devices", False)
    if not isinstance(show_devices, bool):
        raise TypeError(f"{source}: show_devices must be True or False, got {show_devices!r}")
    show_local_shapes = values.get("show_local_shapes", False)
    if not isinstance(show_local_shapes, bool):
        raise TypeError(
            f"{source}: show_local_shapes must be True or False, got {show_local_shapes!r}"
        )
    hide = values.get("hide", ())
    names = hide.replace(",", " ").split() if isinstance(hide, str) else hide
    if not isinstance(names, (tuple, list, set, frozenset)):
        raise TypeError(
            f"{source}: hide must name facets, got {hide!r}: write hide=('settings', 'mode')"
        )
    unknown = [name for name in names if name not in FACETS]
    if unknown:
        raise ValueError(
            f"{source}: cannot hide {', '.join(map(repr, unknown))}: the facets are "
            f"{', '.join(FACETS)}"
        )
    fold = values.get("fold", ())
    folded = fold.replace(",", " ").split() if isinstance(fold, str) else fold
    if not isinstance(folded, (tuple, list, set, frozenset)) or not all(
        isinstance(name, str) and name for name in folded
    ):
        raise TypeError(
            f"{source}: fold must name module paths or types, got {fold!r}: write "
            "fold=('layer1', 'layer2') or fold=('Bottleneck',)"
        )
    ops = values.get("ops", False)
    if not isinstance(ops, bool):
        raise TypeError(f"{source}: ops must be True or False, got {ops!r}")
    ops_skip = values.get("ops_skip", ())
    skipped = ops_skip.replace(",", " ").split() if isinstance(ops_skip, str) else ops_skip
    if not isinstance(skipped, (tuple, list, set, frozenset)) or not all(
        isinstance(name, str) and name for name in skipped
    ):
        raise TypeError(
            f"{source}: ops_skip must name operation groups ({', '.join(OPERATION_GROUPS)}) "
            f"or operations, got {ops_skip!r}: write ops_skip=('views', 'dropout'), or "
            "ops_skip=() to record every operation"
        )
    backward = values.get("backward", False)
    if not isinstance(backward, bool) and not callable(backward):
        raise TypeError(
            f"{source}: backward must be True, False or a function of the output that returns "
            f"the loss, got {backward!r}"
        )
    unregistered = values.get("unregistered", "warn")
    if unregistered not in UNREGISTERED_POLICIES:
        raise ValueError(f"{source}: unregistered must be 'warn' or 'error', got {unregistered!r}")
