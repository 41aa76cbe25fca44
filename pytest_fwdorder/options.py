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
    """

    device: str | None = None
    show_devices: bool = False
    hide: tuple[str, ...] = ()
    unregistered: str = "warn"

    def __post_init__(self) -> None:
        hide = self.hide
        if isinstance(hide, str):
            hide = tuple(hide.replace(",", " ").split())  # hide="settings mode", as in ini
        object.__setattr__(self, "hide", tuple(hide))
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
    unregistered = values.get("unregistered", "warn")
    if unregistered not in UNREGISTERED_POLICIES:
        raise ValueError(f"{source}: unregistered must be 'warn' or 'error', got {unregistered!r}")
