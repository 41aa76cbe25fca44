"""Local shapes (`show_local_shapes=True`): a DTensor's shard shape inside its placements,
`f32[2,16]{Shard(1) local=[2,8]}`, and the process's rank in the header.

One module holds the whole facet behind the protocol (`TensorAnnotation`,
calls/facet_records.py): its option, how it annotates a tensor's text and reads it back, and
its header line (`# local shapes: shown (rank 0 of 2)`). The shard shape is part of a
DTensor's description (recording/distributed.py reads it with the placements, one attribute
for a DTensor only); this facet only decides that the golden shows it, which makes goldens
differ between ranks, and names the rank the trace was taken in. It is registered as a
built-in plugin (`hookspecs.BUILTIN_PLUGINS`), so the golden reaches it through the
`pytest_fwdorder_facets` hook and never names it. No torch: the process group is looked up
in `sys.modules`.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fwdorder.hookspecs import hookimpl

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import TensorAnnotation
    from pytest_fwdorder.calls.value_descriptions import TensorDescription
    from pytest_fwdorder.options import TraceOptions

TITLE = "local shapes"
# The shard shape as written, before the brace that closes the placements: ` local=[2,8]}`.
_SHARD_SHAPE = re.compile(r" local=\[([0-9,]*)\]\}")


@dataclass(frozen=True)
class LocalShapesAnnotation:
    """A DTensor's shard shape after its placements, `{Shard(1) local=[2,8]}`; `rank` names
    the process the trace was taken in (`rank 0 of 2`), None outside a process group."""

    title = TITLE
    option = "show_local_shapes"
    rank: str | None = None

    def configured(self, options: TraceOptions) -> LocalShapesAnnotation:
        """The annotation with the rank of this process: shard shapes differ between ranks."""
        return LocalShapesAnnotation(process_rank())

    def annotate(self, tensor: TensorDescription, text: str) -> str:
        shard_shape = tensor.local_shape
        if tensor.placements is None or shard_shape is None:
            return text  # a plain tensor
        layout = f"{{{tensor.placements}}}"  # the first braces of a tensor's text
        shard = ",".join(map(str, shard_shape))
        return text.replace(layout, f"{{{tensor.placements} local=[{shard}]}}", 1)

    def read(self, text: str) -> tuple[str, tuple[int, ...] | None]:
        """`f32[2,16]{Shard(1) local=[2,8]}` -> (`f32[2,16]{Shard(1)}`, (2, 8)); a text
        without a shard shape -> (text, None)."""
        found = _SHARD_SHAPE.search(text)
        if found is None:
            return text, None
        shape = tuple(int(size) for size in found.group(1).split(",") if size)
        return f"{text[: found.start()]}}}{text[found.end() :]}", shape

    def header_line(self) -> str:
        rank = f" ({self.rank})" if self.rank else ""
        return f"# {TITLE}: shown{rank}"


def process_rank() -> str | None:
    """`rank 0 of 2` in an initialized process group; None outside one."""
    module = sys.modules.get("torch.distributed")
    if module is None or not module.is_available() or not module.is_initialized():
        return None
    return f"rank {module.get_rank()} of {module.get_world_size()}"


LOCAL_SHAPES = LocalShapesAnnotation()


@hookimpl
def pytest_fwdorder_facets() -> list[TensorAnnotation]:
    """The local shapes annotation."""
    return [LOCAL_SHAPES]
