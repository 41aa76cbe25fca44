"""The trace options, one set of names for every entry point. No torch import.

`trace_forward`, `record`, the fixture's `Tracer`, the `fwdorder` marker and the
`fwdorder_*` ini options all take exactly these names, so a setting moves between them
unchanged. A model keyword argument whose name is an option's goes in `model_kwargs`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class TraceOptions:
    """How a trace is taken and what its golden shows.

    `device`: run the model there ('meta' traces without compute; None: where the model is).
    `show_devices`: write each tensor's device in the golden (off: goldens match across
    devices).
    """

    device: str | None = None
    show_devices: bool = False


OPTION_NAMES: tuple[str, ...] = tuple(option.name for option in fields(TraceOptions))


def check_option_values(values: dict[str, Any], *, source: str) -> None:
    """Raise TypeError for an unknown option name or a value of the wrong kind."""
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
