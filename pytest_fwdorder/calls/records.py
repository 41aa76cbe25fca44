"""Plain records of a forward pass: `Call`, the module facts it holds, and `TraceRecords`.

The bottom of the package with `value_descriptions.py` (what a call's arguments and output
look like) and `facet_records.py` (what the facets add), beside it: nothing here imports
torch or any module of the package but those two, so records can be built, rendered and
compared anywhere. `Trace` (in `trace.py`) adds the conveniences that need rendering and
diffing on top of `TraceRecords`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from pytest_fwdorder.calls.facet_records import (
    CallCosts,
    Facet,
    ForwardRun,
    InitializationRecords,
    Operation,
    ParameterUse,
    TensorAnnotation,
    TraceCosts,
    TraceFacet,
)
from pytest_fwdorder.calls.value_descriptions import TensorDescription, ValueDescription, tensors_in

Setting = tuple[str, str]
TensorKind = Literal["parameter", "buffer"]


@dataclass(frozen=True, slots=True)
class ForwardParameters:
    """The parameters of a module class's `forward`, without `self`."""

    positional_names: tuple[str, ...]
    none_defaults: frozenset[str]  # names, positional or keyword-only, whose default is None
    keyword_names: tuple[str, ...] = ()  # keyword-only parameters, in the signature's order


@dataclass(frozen=True, slots=True)
class TensorFact:
    """One parameter or buffer a module holds itself: name, kind, dtype, shape and flags.

    `shape` is None for a lazy (uninitialized) tensor, whose shape is not known yet.
    `requires_grad` is always False for buffers; `persistent` always True for parameters.
    """

    name: str
    kind: TensorKind
    dtype: str
    shape: tuple[int, ...] | None
    requires_grad: bool = False
    persistent: bool = True

    @property
    def initialized(self) -> bool:
        """False for a lazy module's `UninitializedParameter` or `UninitializedBuffer`."""
        return self.shape is not None


@dataclass(frozen=True, slots=True)
class ModuleTensors:
    """A module's own parameters, then its own buffers, in registration order (None skipped).

    `parameters`, `buffers`, `frozen` and `partially_frozen` are worked out once, when the
    record is made: every call of the module reads them.
    """

    tensors: tuple[TensorFact, ...]
    parameters: tuple[TensorFact, ...] = field(init=False)
    buffers: tuple[TensorFact, ...] = field(init=False)
    # The module has parameters and none of them requires grad. A module without
    # parameters (ReLU, BatchNorm2d(affine=False)) is never frozen.
    frozen: bool = field(init=False)
    # Some of the module's own parameters require grad and some do not.
    partially_frozen: bool = field(init=False)

    def __post_init__(self) -> None:
        parameters = tuple(fact for fact in self.tensors if fact.kind == "parameter")
        flags = {fact.requires_grad for fact in parameters}
        object.__setattr__(self, "parameters", parameters)
        object.__setattr__(
            self, "buffers", tuple(fact for fact in self.tensors if fact.kind == "buffer")
        )
        object.__setattr__(self, "frozen", flags == {False})
        object.__setattr__(self, "partially_frozen", len(flags) == 2)


@dataclass(frozen=True, slots=True)
class ModuleFacts:
    """What a module is, computed once per module per trace: settings, own tensors, forward.

    `extra`: (name, text) facts that plugins add (`pytest_fwdorder_module_facts`).
    """

    settings: tuple[Setting, ...]
    tensors: ModuleTensors
    forward: ForwardParameters | None = None
    extra: tuple[Setting, ...] = ()


@dataclass(frozen=True, slots=True)
class TensorTotals:
    """Element counts over a model, each tensor counted once however often it is tied.

    Lazy tensors have no element count yet: they are counted in `uninitialized_count`.
    """

    parameter_count: int
    trainable_parameter_count: int
    buffer_count: int
    uninitialized_count: int = 0


class Call:
    """One call of one module, recorded when it started.

    `path` is the dotted path from the traced root (`""` for the root itself); `nth` counts
    the calls of that module instance (1, 2, 3 ...); `depth` is 0 for an outermost call.
    `registered` is False for a module reached in forward but not registered under the root
    (kept in a plain list, say): its parameters are neither trained nor saved. `frozen` is
    True when the module has parameters of its own and none of them requires grad.
    `scripted` is True for a TorchScript submodule: it is recorded as one call, since the
    calls inside it never reach Python hooks. `facts` (settings, own tensors, forward's
    parameters) and `training` are the module's, read once per trace before it ran; one
    `ModuleFacts` object is shared by every call of a module. `training` is None for a module
    whose class computes the same in train and eval mode (activations, containers whose
    forward only calls children): its mode changes nothing, so the golden gives it no mark.
    """

    __slots__ = (
        "_costs",
        "_operations",
        "args",
        "children",
        "depth",
        "facts",
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
        "training",
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
        facts: ModuleFacts | None = None,
        training: bool | None = None,
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
        self.facts = facts
        self.training = training
        # A tuple: a leaf call (most calls) shares the one empty tuple instead of keeping an
        # empty list of its own (56 B a call).
        self.children: tuple[Call, ...] = ()

    @property
    def operations(self) -> tuple[Operation, ...]:
        """The operations this call's forward made itself, in order (empty unless `ops=True`)."""
        found: tuple[Operation, ...] = getattr(self, "_operations", ())
        return found

    @property
    def costs(self) -> CallCosts | None:
        """What this call cost, its children included (None unless `costs=True`)."""
        found: CallCosts | None = getattr(self, "_costs", None)
        return found

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
    """What a rendered trace shows: the facets it hides, and what it writes onto each
    tensor's text.

    `annotations`: what each tensor's text shows besides its dtype, shape and placements
    (its device, a DTensor's shard shape: calls/facet_records.py's `TensorAnnotation`), in
    the order they are written.
    `fold`: module paths or type names whose calls are written as one line each, their
    inside summarized; `call_views`: (path, "fold" or "hide") that plugins chose.
    """

    hidden: frozenset[str] = frozenset()
    annotations: tuple[TensorAnnotation, ...] = ()
    fold: tuple[str, ...] = ()
    call_views: tuple[tuple[str, str], ...] = ()


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
    # The root's mode ("train" or "eval"), None when unknown (a trace built by hand).
    mode: str | None = None
    # Each registered module's path -> (type name, facts): never-called modules included.
    modules: dict[str, tuple[str, ModuleFacts]] = field(default_factory=dict)
    # Tensors reached under several names: first full name -> the other names.
    tied: tuple[tuple[str, tuple[str, ...]], ...] = ()
    totals: TensorTotals | None = None
    # With `ops=True`: what was left out (`views`, ...); None when operations were not recorded.
    operations_skipped: tuple[str, ...] | None = None
    # Every recorded operation, in the order they ran (each is also on its call).
    operations: list[Operation] = field(default_factory=list)
    # The model tensors the operations were given; None when operations were not recorded.
    parameter_uses: tuple[ParameterUse, ...] | None = None
    # With `costs=True`: the totals (each call's own costs are on the call).
    costs: TraceCosts | None = None
    # Forwards run without a module call (direct_forwards.py), in the order first seen, and
    # the indices of the calls recorded from such runs (shown `[direct]`).
    forward_runs: tuple[ForwardRun, ...] = ()
    direct_calls: frozenset[int] = frozenset()
    # Each registered module's path -> its class's qualified name
    # (`peft.tuners.lora.layer.Linear`): what `coverage` tells same-named classes apart by.
    module_classes: dict[str, str] = field(default_factory=dict)
    # The facets (calls/facet_records.py) this trace recorded, the built-in ones its options
    # switched on (output values) and the plugins', and each one's values by title, then by
    # call index (a call without a value has none).
    facets: tuple[Facet, ...] = ()
    facet_values: dict[str, dict[int, Any]] = field(default_factory=dict)
    # The facets with one value per trace that this trace recorded (backward with
    # `backward=True`, graph breaks with `graph_breaks=True`), and each one's value by title.
    trace_facets: tuple[TraceFacet, ...] = ()
    trace_facet_values: dict[str, Any] = field(default_factory=dict)

    @property
    def initialization(self) -> InitializationRecords | None:
        """With `initialization=True`: how the builder's model initialized itself (the
        initialization facet's value, facets/initialization.py)."""
        value: InitializationRecords | None = self.trace_facet_values.get("initialization")
        return value

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
        """Every call of the module at `path`, in order; `[]` for a module that never ran.

        Raises LookupError, naming the close paths, for a path the trace has no module at:
        a typo or a path a refactor removed must not read as "never called".
        """
        calls = [call for call in self.calls if call.path == path]
        if calls or path in self.modules or any(path in names for names in self.aliases.values()):
            return calls
        known = {*self.modules, *(call.path for call in self.calls)}
        # Not errors.did_you_mean: the records import nothing of the package.
        close = difflib.get_close_matches(path, sorted(known))
        hint = f": did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise LookupError(
            f"no module at {path!r} in this trace of {self.root_type}{hint} "
            "(trace.modules lists every path)"
        )

    def used_through_parameters(self) -> dict[str, list[ParameterUse]]:
        """Modules never called whose parameters or buffers an operation used (`ops=True`).

        Module path -> the uses of its own tensors, in order: `nn.MultiheadAttention`'s
        `out_proj` is never called, its weights go to a function.
        """
        unused = set(self.unused())
        found: dict[str, list[ParameterUse]] = {}
        for use in self.parameter_uses or ():
            owner = use.tensor.rpartition(".")[0]
            if owner in unused:
                found.setdefault(owner, []).append(use)
        return found

    def state_dict_keys(self) -> list[str]:
        """The keys a checkpoint of the traced model holds, as far as the trace shows them.

        Each registered module's parameters and persistent buffers under its first path
        and under every other name it or its tensors have. Keys that `get_extra_state` or
        state_dict hooks add are not seen.
        """
        keys: list[str] = []
        for path, (_, facts) in self.modules.items():
            for prefix in (path, *self.aliases.get(path, ())):
                keys.extend(
                    f"{prefix}.{fact.name}" if prefix else fact.name
                    for fact in facts.tensors.tensors
                    if fact.persistent
                )
        return keys

    def __repr__(self) -> str:
        return f"<TraceRecords of {self.root_type}: {len(self.calls)} calls>"
