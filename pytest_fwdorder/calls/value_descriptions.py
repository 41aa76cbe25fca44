"""How a call's arguments and outputs are described: a tensor's shape, dtype and device,
never its values; plain values by repr; sequences, mappings and dataclasses by their items.

The bottom of the package with `facet_records.py` and `records.py`: nothing here imports
torch or any other module of the package. `recording/describe.py` makes these descriptions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TensorDescription:
    """Shape, dtype and device of one tensor; never its values.

    For a DTensor, `shape` is the global shape, `placements` its layout over the device
    mesh (`Shard(1)`, `Shard(0),Replicate()`) and `local_shape` this rank's shard; both are
    None for a plain tensor.
    """

    shape: tuple[int, ...]
    dtype: str
    device: str
    placements: str | None = None
    local_shape: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class LiteralDescription:
    """A value shown as fixed text: `None`, an int, a bool, a short string, or `<TypeName>`."""

    text: str


@dataclass(frozen=True, slots=True)
class SequenceDescription:
    """A tuple or list, item by item."""

    kind: str
    items: tuple[ValueDescription, ...]


@dataclass(frozen=True, slots=True)
class MappingDescription:
    """A dict or other mapping: keys (as their repr) and values, in the mapping's order."""

    type_name: str
    items: tuple[tuple[str, ValueDescription], ...]


@dataclass(frozen=True, slots=True)
class ObjectDescription:
    """A namedtuple or a dataclass: field names and values, in declaration order."""

    type_name: str
    fields: tuple[tuple[str, ValueDescription], ...]


ValueDescription = (
    TensorDescription
    | LiteralDescription
    | SequenceDescription
    | MappingDescription
    | ObjectDescription
)


def tensors_in(value: ValueDescription) -> list[TensorDescription]:
    """Every tensor inside a described value, depth first, in order."""
    found: list[TensorDescription] = []
    pending: list[ValueDescription] = [value]
    while pending:
        current = pending.pop()
        if isinstance(current, TensorDescription):
            found.append(current)
        elif isinstance(current, SequenceDescription):
            pending.extend(reversed(current.items))
        elif isinstance(current, MappingDescription):
            pending.extend(item for _, item in reversed(current.items))
        elif isinstance(current, ObjectDescription):
            pending.extend(item for _, item in reversed(current.fields))
    return found
