"""Record the torch-level operations each module's forward calls directly (`ops=True`).

How the operations facet (facets/operations.py) captures them, imported when a trace asks. It uses torch's public function-mode
machinery (`torch.overrides.TorchFunctionMode`): while the mode is on, every `torch.*`,
`torch.nn.functional.*` and Tensor method or operator call made in this thread reaches
`__torch_function__` first. An operation belongs to the innermost module call open at
that moment; what it calls itself runs with the mode popped (torch's rule), so
`F.multi_head_attention_forward` is one record, not the dozens of operations inside it.

Left out always: metadata queries and value reads (`size`, `dim`, `shape` and every other
attribute read, `is_contiguous`, `item`, `__len__`, `requires_grad_`) and torch's private
functions (`_set_grad_enabled`). Left out by default, and configurable with `ops_skip`:
`views` (view, reshape, permute, transpose, indexing, split ...), `conversions` (to, float,
half, clone, cpu ...) and `torch_modules` (the operations inside torch.nn's own modules:
Linear's `linear`, BatchNorm's `batch_norm`), which are implied by the module and change
with torch releases. `ops_skip` may also name single operations (`"dropout"`).

Parameters and buffers of the model are named by their full path wherever an operation
receives them, left-out operations included, so `out_proj.weight` given to a function
shows how a module that is never called is used.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from pytest_fwdorder.calls.facet_records import Operation, ParameterUse
from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.calls.value_descriptions import (
    LiteralDescription,
    SequenceDescription,
    ValueDescription,
)
from pytest_fwdorder.options import OPERATION_GROUPS  # noqa: F401  (documented above)
from pytest_fwdorder.recording.describe import finish_value, raw_value

if TYPE_CHECKING:
    from pytest_fwdorder.recording.recorder import CallRecord, Recorder


# Never records: they read metadata or values, or do autograd bookkeeping, and compute
# nothing a golden should follow.
_QUERIES = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
        "element_size", "data_ptr", "get_device", "has_names", "item", "tolist", "numpy",
        "untyped_storage", "storage", "dim_order", "requires_grad_", "retain_grad",
        "register_hook", "register_post_accumulate_grad_hook", "len", "bool", "format",
        "repr", "str", "hash", "index", "int", "float", "complex", "array", "reduce_ex",
        "deepcopy", "contains", "dir", "setstate", "reversed", "get", "set", "delete",
    }
)  # fmt: skip
_VIEWS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze",
        "unsqueeze", "squeeze_", "unsqueeze_", "permute", "transpose", "transpose_", "t",
        "t_", "swapaxes", "swapdims", "movedim", "moveaxis", "expand", "expand_as",
        "broadcast_to", "contiguous", "getitem", "iter", "narrow", "select", "split",
        "split_with_sizes", "tensor_split", "chunk", "unbind", "hsplit", "vsplit", "dsplit",
        "as_strided", "diagonal", "detach", "detach_", "alias", "view_as_real",
        "view_as_complex", "adjoint",
    }
)  # fmt: skip
_CONVERSIONS = frozenset(
    {
        "to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long",
        "short", "bool", "byte", "char", "cpu", "cuda", "clone", "pin_memory",
    }
)  # fmt: skip


def operation_name(function: object) -> tuple[str, str | None] | None:
    """How an operation is named in a golden, and its group (`views`, ...); None: never shown.

    Operators are named by their method (`x + y` reaches torch as `add`); a reflected or
    other dunder loses its underscores (`__rsub__` is `rsub`, `x[0]` is `getitem`).
    """
    name = getattr(function, "__name__", None)
    if not isinstance(name, str):
        name = type(function).__name__
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name in _QUERIES or name in ("get", "set", "delete"):
            return None  # `__get__` of a property: an attribute read
    elif name.startswith("_"):
        return None  # torch's own plumbing, `_set_grad_enabled`
    elif (name in _QUERIES or name.startswith("is_")) and name not in _CONVERSIONS:
        return None  # `x.float()` converts (`float(x)` is `__float__`, handled above)
    if name in _VIEWS:
        return name, "views"
    if name in _CONVERSIONS:
        return name, "conversions"
    return name, None


def tensor_names(root: nn.Module) -> dict[int, str]:
    """id of each parameter and buffer now held by the model -> its full name (the first)."""
    names: dict[int, str] = {}
    for path, module in root.named_modules():
        prefix = f"{path}." if path else ""
        for tensors in (module._parameters, module._buffers):
            for name, value in tensors.items():
                if value is not None:
                    names.setdefault(id(value), prefix + name)
    return names


class _OperationKind(NamedTuple):
    """What the mode knows of a function once per trace: how to name it and what to record."""

    name: str  # the name goldens show
    recorded: bool  # False for an operation `ops_skip` leaves out (its tensors still named)
    defaults: dict[str, object]  # keyword defaults, so arguments left at them are not shown
    derives: bool  # a view or conversion: a recorded one names its result after its source


class _OperationRecord:
    """What the mode keeps of one operation until `attach_operations` builds it."""

    __slots__ = ("after", "args", "kwargs", "name", "output", "owner", "parameters", "raised")

    def __init__(
        self,
        name: str,
        owner: int,
        after: int,
        args: list[object],
        kwargs: list[tuple[str, object]],
        parameters: tuple[str, ...],
    ) -> None:
        self.name = name
        self.owner = owner  # the owner's record number: its call index
        self.after = after
        self.args = args
        self.kwargs = kwargs
        self.parameters = parameters
        self.output: object = None
        self.raised = False


class OperationMode(TorchFunctionMode):
    """The function mode that records operations into the open call of a `Recorder`."""

    def __init__(self, recorder: Recorder, root: nn.Module, skipped: tuple[str, ...]) -> None:
        super().__init__()
        self.open_calls: list[CallRecord] = recorder.open_calls
        self.records = recorder.records
        self.thread_id = threading.get_ident()
        self.skipped = frozenset(skipped)
        self.skip_torch_modules = "torch_modules" in self.skipped
        # Per function: its kind, or None for a query; found once per trace.
        self.kinds: dict[object, _OperationKind | None] = {}
        self.torch_module_types: dict[type, bool] = {}
        self.names = tensor_names(root)
        # The full name of the model tensor each named tensor comes from (views included).
        self.sources: dict[int, str] = dict(self.names)
        # Views and conversions of model tensors stay alive, so their ids are not reused.
        self.keep_alive: list[torch.Tensor] = []
        self.operations: list[_OperationRecord] = []
        self.uses: list[tuple[str, int, str]] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        open_calls = self.open_calls
        if not open_calls or threading.get_ident() != self.thread_id:
            return func(*args, **kwargs)
        kind = self.kinds.get(func, _UNKNOWN)
        if kind is _UNKNOWN:
            kind = self.kinds[func] = self._kind(func)
        if kind is None:
            return func(*args, **kwargs)
        name, recorded, defaults, derives = kind
        owner = open_calls[-1]
        if recorded and self.skip_torch_modules:
            module_type = type(owner.module)
            inside_torch = self.torch_module_types.get(module_type)
            if inside_torch is None:
                inside_torch = self.torch_module_types[module_type] = _defined_in_torch(module_type)
            recorded = not inside_torch
        sources = self.sources
        used = [
            sources[id(value)]
            for value in (*args, *kwargs.values())
            if isinstance(value, torch.Tensor) and id(value) in sources
        ]
        for tensor in used:
            self.uses.append((tensor, owner.number, name))
        if not recorded:
            result = func(*args, **kwargs)
            if used and args and isinstance(result, torch.Tensor) and id(args[0]) in sources:
                self._name_derived(result, args[0], name)
            return result
        record = _OperationRecord(
            name,
            owner.number,
            len(self.records),
            [self._raw(value) for value in args],
            [
                (key, self._raw(value))
                for key, value in kwargs.items()
                if value is not None
                and not key.startswith("_")
                and not _is_default(value, defaults.get(key, _UNKNOWN))
            ],
            tuple(used),
        )
        self.operations.append(record)
        try:
            result = func(*args, **kwargs)
        except BaseException:
            record.raised = True
            raise
        record.output = raw_value(result)
        # A recorded view or conversion of a model tensor is named in later operations as a
        # left-out one is: recording more must not show less of which tensor is used.
        if (
            derives
            and used
            and args
            and isinstance(result, torch.Tensor)
            and id(args[0]) in sources
        ):
            self._name_derived(result, args[0], name)
        return result

    def _kind(self, func: object) -> _OperationKind | None:
        found = operation_name(func)
        if found is None:
            return None
        name, group = found
        recorded = name not in self.skipped and (group is None or group not in self.skipped)
        derives = group in ("views", "conversions")
        return _OperationKind(name, recorded, _keyword_defaults(func), derives)

    def _raw(self, value: object) -> object:
        """A raw value, or the name of a model tensor; one level into lists and tuples."""
        if isinstance(value, torch.Tensor):
            name = self.names.get(id(value))
            return raw_value(value) if name is None else LiteralDescription(name)
        if type(value) in (list, tuple) and any(
            isinstance(item, torch.Tensor) and id(item) in self.names
            for item in value  # type: ignore[attr-defined]
        ):
            items = tuple(finish_value(self._raw(item)) for item in value)  # type: ignore[attr-defined]
            return SequenceDescription(type(value).__name__, items)
        return raw_value(value)

    def _name_derived(self, result: torch.Tensor, source: torch.Tensor, name: str) -> None:
        """Name a left-out view or conversion of a model tensor: `fc.weight.t()`."""
        base = self.names.get(id(source))
        if base is None:
            return
        derived = f"{base}[...]" if name == "getitem" else f"{base}.{name}()"
        self.names[id(result)] = derived
        self.sources[id(result)] = self.sources[id(source)]
        self.keep_alive.append(result)


_UNKNOWN: Any = object()


def _keyword_defaults(func: object) -> dict[str, object]:
    """A Python function's parameter defaults (`F.relu`'s `inplace=False`); builtins have none.

    torch passes a Python function's keyword arguments on whether given or not, and one
    given its default value is what not giving it does: it is left out, as for module calls.
    """
    if not inspect.isfunction(func):
        return {}
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {
        parameter.name: parameter.default
        for parameter in parameters
        if parameter.default is not inspect.Parameter.empty
    }


def _is_default(value: object, default: object) -> bool:
    if value is default:
        return True
    return type(value) in (bool, int, str) and type(value) is type(default) and value == default


def _defined_in_torch(module_type: type) -> bool:
    """Whether a module class is torch's own (`torch.nn.Linear`), not a user's subclass."""
    return module_type.__module__.startswith("torch.")


@contextmanager
def operations_recorded(
    recorder: Recorder, root: nn.Module, skipped: tuple[str, ...]
) -> Iterator[OperationMode]:
    """Record operations into `recorder`'s open calls for the length of the block."""
    mode = OperationMode(recorder, root, skipped)
    with mode:
        try:
            yield mode
        finally:
            mode.keep_alive.clear()


def attach_operations(trace: TraceRecords, mode: OperationMode) -> None:
    """Give the finished trace its operations and parameter uses, and say what was left out.

    Operations made by calls that are not in the trace (backward's recomputation, whose
    calls are set aside) are dropped.
    """
    calls = trace.calls
    trace.operations_skipped = tuple(sorted(mode.skipped))
    per_call: dict[int, list[Operation]] = {}
    operations: list[Operation] = []
    for record in mode.operations:
        if record.owner >= len(calls):
            continue
        own = per_call.setdefault(record.owner, [])
        operation = Operation(
            name=record.name,
            call_index=record.owner,
            number=len(own) + 1,
            after=record.after,
            args=tuple(_finish(value) for value in record.args),
            kwargs=tuple((key, _finish(value)) for key, value in record.kwargs),
            output=None if record.raised else _finish(record.output),
            raised=record.raised,
            parameters=record.parameters,
        )
        own.append(operation)
        operations.append(operation)
    for index, own in per_call.items():
        calls[index]._operations = tuple(own)  # type: ignore[attr-defined]
    trace.operations = operations
    trace.parameter_uses = tuple(
        ParameterUse(tensor, owner, name) for tensor, owner, name in mode.uses if owner < len(calls)
    )


def _finish(value: object) -> ValueDescription:
    return finish_value(value)
