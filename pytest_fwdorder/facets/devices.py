"""Devices (`show_devices=True`): each tensor's device after its text, `f32[2,4]@cuda:0`.

One module holds the whole facet behind the protocol (`TensorAnnotation`,
calls/facet_records.py): its option, how it annotates a tensor's text and reads it back, and
its header line (`# devices: shown`). The device is part of every tensor's description
(recording/describe.py keeps it whatever the options); this facet only decides that the
golden shows it, which makes goldens differ between devices. It is registered as a built-in
plugin (`hookspecs.BUILTIN_PLUGINS`), so the golden reaches it through the
`pytest_fwdorder_facets` hook and never names it. No torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fwdorder.hookspecs import hookimpl

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import TensorAnnotation
    from pytest_fwdorder.calls.value_descriptions import TensorDescription

TITLE = "devices"
DEVICE_MARK = "@"
# A device as torch writes it: `cpu`, `meta`, `cuda:0`, `privateuseone:1`.
_DEVICE = re.compile(r"[a-z][a-z0-9_]*(:[0-9]+)?")


@dataclass(frozen=True)
class DevicesAnnotation:
    """A tensor's device after its text: `f32[2,4]@cuda:0`, `f32[2,16]{Shard(1)}@cpu`."""

    title = TITLE
    option = "show_devices"

    def annotate(self, tensor: TensorDescription, text: str) -> str:
        return f"{text}{DEVICE_MARK}{tensor.device}"

    def read(self, text: str) -> tuple[str, str | None]:
        """`f32[2,4]@cuda:0` -> (`f32[2,4]`, `cuda:0`); a text without a device -> (text, None)."""
        plain, mark, device = text.rpartition(DEVICE_MARK)
        if not mark or not _DEVICE.fullmatch(device):
            return text, None
        return plain, device

    def header_line(self) -> str:
        return f"# {TITLE}: shown"


DEVICES = DevicesAnnotation()


@hookimpl
def pytest_fwdorder_facets() -> list[TensorAnnotation]:
    """The devices annotation."""
    return [DEVICES]
