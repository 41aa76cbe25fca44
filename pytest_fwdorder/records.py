"""Plain records of a forward pass: `Call`, `TraceRecords` and the value descriptions they hold.

The bottom of the package: nothing here imports torch or any other module of the package,
so records can be built, rendered and compared anywhere. `Trace` (in `trace.py`) adds the
conveniences that need rendering and diffing on top of `TraceRecords`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload


@dataclass(frozen=True, slots=True)
class TensorDescription:
    """Shape, dtype and device of one tensor; never its values."""

    shape: tuple[int, ...]
    dtype: str
    device: str


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


class Call:
    """One call of one module, recorded when it started.

    `path` is the dotted path from the traced root (`""` for the root itself); `nth` counts
    the calls of that module instance (1, 2, 3 ...); `depth` is 0 for an outermost call.
    `registered` is False for a module reached in forward but not registered under the root
    (kept in a plain list, say): its parameters are neither trained nor saved. `frozen` is
    True when the module has parameters of its own and none of them requires grad.
    `scripted` is True for a TorchScript submodule: it is recorded as one call, since the
    calls inside it never reach Python hooks.
    """

    __slots__ = (
        "args",
        "children",
        "depth",
        "frozen",
        "index",
        "kwargs",
        "module_type",
        "nth",
        "output",
        "parent",
        "path",
        "raised",
        "registered",
        "scripted",
    )

    def __init__(
        self,
        *,
        path: str,
        module_type: str,
        nth: int,
        depth: int,
        parent: Call | None,
        registered: bool,
        index: int,
        args: tuple[ValueDescription, ...],
        kwargs: tuple[tuple[str, ValueDescription], ...] = (),
        output: ValueDescription | None = None,
        raised: bool = False,
        frozen: bool = False,
        scripted: bool = False,
    ) -> None:
        self.path = path
        self.module_type = module_type
        self.nth = nth
        self.depth = depth
        self.parent = parent
        self.registered = registered
        self.index = index
        self.args = args
        self.kwargs = kwargs
        self.output = output
        self.raised = raised
        self.frozen = frozen
        self.scripted = scripted
        self.children: list[Call] = []

    @property
    def input_tensors(self) -> list[TensorDescription]:
        """Every tensor in the positional then keyword arguments, in order."""
        found: list[TensorDescription] = []
        for value in self.args:
            found.extend(tensors_in(value))
        for _, value in self.kwargs:
            found.extend(tensors_in(value))
        return found

    @property
    def output_tensors(self) -> list[TensorDescription]:
        """Every tensor in the output, in order (empty while the call runs or if it raised)."""
        return [] if self.output is None else tensors_in(self.output)

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return [tensor.shape for tensor in self.input_tensors]

    @property
    def output_shapes(self) -> list[tuple[int, ...]]:
        return [tensor.shape for tensor in self.output_tensors]

    @property
    def display_path(self) -> str:
        """The path as the golden file shows it: `<root>` for the traced model itself."""
        return self.path or "<root>"

    def __repr__(self) -> str:
        return f"<Call {self.display_path} {self.module_type} #{self.nth} depth={self.depth}>"


@dataclass(frozen=True)
class RenderOptions:
    """What a rendered trace shows beyond the defaults."""

    devices: bool = False


@dataclass(eq=False)
class TraceRecords(Sequence[Call]):
    """Every module call of a forward pass, in the order the calls started, and its queries.

    A parent call precedes its children. `Trace` adds rendering, diffing and `==`.
    """

    root_type: str
    callable_paths: tuple[str, ...]
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    options: RenderOptions = field(default_factory=RenderOptions)
    calls: list[Call] = field(default_factory=list)

    @overload
    def __getitem__(self, index: int) -> Call: ...

    @overload
    def __getitem__(self, index: slice) -> list[Call]: ...

    def __getitem__(self, index: int | slice) -> Call | list[Call]:
        return self.calls[index]

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self) -> Iterator[Call]:
        return iter(self.calls)

    def counts(self) -> dict[str, int]:
        """Calls per module path, in order of each module's first call."""
        counts: dict[str, int] = {}
        for call in self.calls:
            counts[call.path] = counts.get(call.path, 0) + 1
        return counts

    def unused(self) -> list[str]:
        """Registered module paths that were never called.

        Containers that cannot be called (`nn.ModuleList`, `nn.ModuleDict`) are left out.
        """
        called = {call.path for call in self.calls}
        return [path for path in self.callable_paths if path not in called]

    def unregistered(self) -> list[Call]:
        """Calls of modules that are not registered under the traced root."""
        return [call for call in self.calls if not call.registered]

    def leaves(self) -> list[Call]:
        """Calls that made no module call of their own."""
        return [call for call in self.calls if not call.children]

    def find(self, path: str) -> list[Call]:
        """Every call of the module at `path`, in order."""
        return [call for call in self.calls if call.path == path]

    def __repr__(self) -> str:
        return f"<TraceRecords of {self.root_type}: {len(self.calls)} calls>"
