"""Count what each call costs (`costs=True`): FLOPs, output bytes, parameter and saved bytes.

The one owner of how costs are counted, with torch: the facet itself (its option, lines and
words) is costs.py, whose watcher enters `costs_counted` and calls `attach_costs`. FLOPs come from torch's own formulas
(`torch.utils.flop_counter.flop_registry`), looked up as `FlopCounterMode` looks them up, in
a `TorchDispatchMode` active for the length of the recording: each aten operation's FLOPs
go to the innermost call open when it ran, and a call's total is its own plus its
children's, added up once the trace is finished, so nothing is counted twice and a module
called three times costs three times. Formulas work on shapes alone, so meta tensors give
the same figures as real ones. An operation counted through its decomposition, as
FlopCounterMode counts it, is decomposed once per layout of its arguments and runs its own
kernel after (decomposition_counts.py).

An operation without a formula that computes something is counted by name under
"uncounted" rather than silently as zero; views, metadata reads, copies and tensor
creation compute nothing and are not listed. Output bytes come from the recorded output
descriptions (dtype size x elements). Parameter and buffer bytes are each module's own
tensors; the trace's total counts each storage once (tied and shared tensors). With grad
enabled, `torch.autograd.graph.saved_tensors_hooks` sees every tensor autograd saves for
backward: the activations, each storage once, the model's own tensors left out
(storage_bytes.py).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from threading import get_ident
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, shape_wrapper

from pytest_fwdorder.calls.facet_records import CallCosts, TraceCosts
from pytest_fwdorder.calls.records import TensorFact, TraceRecords
from pytest_fwdorder.calls.value_descriptions import TensorDescription, ValueDescription, tensors_in
from pytest_fwdorder.facets.decomposition_counts import (
    DecompositionCounts,
    counts_between,
    kept_counts,
    layout_key,
)
from pytest_fwdorder.facets.fused_kernel_flops import fused_kernel_formulas
from pytest_fwdorder.facets.shape_keys import key_by_looking, key_for_schema, shape_key, shapes_of
from pytest_fwdorder.facets.storage_bytes import SavedTensors, model_storages
from pytest_fwdorder.recording.bounded_cache import BoundedCache
from pytest_fwdorder.recording.describe import dtype_name

if TYPE_CHECKING:
    from pytest_fwdorder.recording.recorder import CallRecord, Recorder

# Operations that compute no value: tensor creation, copies, data movement and lookups.
# Views and metadata reads are found by torch's own flags (`is_view`, the `core` queries).
_COMPUTES_NOTHING = frozenset(
    {
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
        "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
        "new_full", "fill_", "zero_", "scalar_tensor", "arange", "lift_fresh",
        "lift_fresh_copy", "copy_", "_to_copy", "clone", "contiguous", "detach", "alias",
        "_unsafe_view", "cat", "stack", "index_select", "embedding", "gather", "repeat",
        "expand_copy", "permute_copy", "view_copy", "t_copy", "transpose_copy", "split_copy",
        "_local_scalar_dense", "resize_", "set_", "_reshape_alias", "slice_scatter",
        "select_scatter", "index", "masked_fill", "masked_fill_", "where", "unfold",
        "_assert_async", "_assert_tensor_metadata", "sym_constrain_range_for_size",
        "bernoulli_", "native_dropout", "rand", "randn", "rand_like", "randn_like",
        "normal_", "uniform_",
    }
)  # fmt: skip
_METADATA = frozenset(
    {
        "size", "sym_size", "stride", "sym_stride", "storage_offset", "sym_storage_offset",
        "numel", "sym_numel", "dim", "is_contiguous", "sym_is_contiguous",
        "is_strides_like_format", "is_non_overlapping_and_dense", "layout", "device",
        "is_same_size", "_has_compatible_shallow_copy_type", "equal",
    }
)  # fmt: skip


def computes_something(operation: torch._ops.OpOverload) -> bool:
    """Whether an aten operation without a FLOP formula belongs in "uncounted"."""
    name = operation._overloadpacket.__name__
    return not (operation.is_view or name in _COMPUTES_NOTHING or name in _METADATA)


# Eval-mode batch norm's statistics outputs: empty on the CPU, one value per channel from
# torch's meta kernel. Autograd saves them; they are left out of the saved bytes so that
# meta and CPU give the same figure (backward uses the running statistics instead).
_UNUSED_STATISTICS = frozenset({"_native_batch_norm_legit_no_training"})


def cost_formulas(registry: Mapping[Any, Callable[..., int]]) -> dict[Any, Callable[..., int]]:
    """The FLOP formula of each operation: torch's `registry`, and ours for the fused CPU kernels
    it has none for (fused_kernel_flops.py); torch's own formula wins once a release has one."""
    return {**fused_kernel_formulas(), **registry}


# The FLOPs of formulas that see shapes alone, by `CostMode._shape_flops`'s key, for the
# process: the key holds the formula itself, so one registered since is another key. Kept per
# trace, 23 of ResNet-50's 53 convolutions were worked out again in every trace, at about
# 35 us each (0.8 ms of a 68 ms trace with costs).
FLOPS_BY_SHAPES: BoundedCache[tuple[Any, ...], int] = BoundedCache(16384)


class _OperationPlan(NamedTuple):
    """What the mode does with one operation overload, worked out at its first run."""

    operation: torch._ops.OpOverload  # held, so that its id (the plan's key) is not reused
    run: Callable[..., Any]  # what runs it: the overload, or the C++ entry its call reaches
    formula: Callable[..., int] | None  # its FLOP formula, None if it has none
    takes_shapes: bool  # the formula wants shapes for tensors (torch's `shape_wrapper`)
    decomposes: bool  # no formula, but a decomposition whose operations may have some
    uncounted: str | None  # the name it is counted by under "uncounted", None if it is not
    unused_statistics: bool  # its outputs after the first are left out of the saved bytes
    counted: bool  # it has a formula, or is counted under "uncounted"
    argument_key: Callable[[tuple[Any, ...]], tuple[Any, ...]]  # its formula's key, by schema


# The code of the wrapper torch's `register_flop_formula` puts around a formula that takes
# shapes: a formula made by it is called unwrapped, with shapes from `shapes_of`.
_SHAPE_WRAPPER_CODE = getattr(shape_wrapper(int), "__code__", None)  # type: ignore[no-untyped-call]


def operation_plan(operation: torch._ops.OpOverload, formulas: Mapping[Any, Any]) -> _OperationPlan:
    """How `CostMode` counts an aten operation: its formula, or what it does without one."""
    packet = operation._overloadpacket
    formula = formulas.get(packet)
    takes_shapes = False
    if formula is not None:
        wrapped = getattr(formula, "__wrapped__", None)
        code = getattr(formula, "__code__", None)
        if wrapped is not None and code is not None and code is _SHAPE_WRAPPER_CODE:
            formula, takes_shapes = wrapped, True
    uncounted = str(packet) if formula is None and computes_something(operation) else None
    return _OperationPlan(
        operation=operation,
        run=runner(operation),
        formula=formula,
        takes_shapes=takes_shapes,
        decomposes=formula is None and decomposes(operation),
        uncounted=uncounted,
        unused_statistics=packet.__name__ in _UNUSED_STATISTICS,
        counted=formula is not None or uncounted is not None,
        argument_key=key_for_schema(operation),
    )


def runner(operation: torch._ops.OpOverload) -> Callable[..., Any]:
    """What runs `operation`: `operation._op`, the C++ entry that calling it reaches, where its
    call does nothing else (every aten operation); else the overload itself.

    The overload's `__call__` is a Python frame in between: about 0.3 us at every operation.
    Custom operations made by `torch.library.custom_op` (a "pyobj" dispatcher) and overload
    classes with a `__call__` of their own are called as they are.
    """
    entry = getattr(operation, "_op", None)
    plain_call = type(operation).__call__ is torch._ops.OpOverload.__call__
    if entry is None or not plain_call or getattr(operation, "_pyobj_dispatcher", None) is not None:
        return operation
    return cast("Callable[..., Any]", entry)


def decomposes(operation: torch._ops.OpOverload) -> bool:
    """Whether `operation.decompose` would run a decomposition rather than say NotImplemented.

    FlopCounterMode counts an operation without a formula through its decomposition;
    asking once per overload saves entering the mode again for each one that has none.
    """
    if operation is torch.ops.prim.device.default:
        return False
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    return key in operation.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(
        operation.name(),  # type: ignore[no-untyped-call]
        key,
    )


class CostMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """The dispatch mode that adds each operation's FLOPs to the open call of a `Recorder`.

    `saved` is the saved-tensor counter: the mode leaves out of it the outputs autograd
    saves but the figures should not count.
    """

    def __init__(self, recorder: Recorder, saved: SavedTensors) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.saved = saved
        self.recorder = recorder
        self.open_calls: list[CallRecord] = recorder.open_calls
        self.thread_id = threading.get_ident()
        # Formulas registered later (`register_flop_formula`) are not seen, as in
        # FlopCounterMode, which takes the registry when it is made.
        # Fused CPU kernels torch has no formula for are counted as their decompositions are
        # on meta (fused_kernel_flops.py); torch's own formula wins where it has one.
        self.formulas = cost_formulas(flop_registry)
        # id(operation overload) -> what to do with it, worked out at its first run. Keyed
        # by id: an overload's own hash is a Python method, a lookup at every operation.
        self.plans: dict[int, _OperationPlan] = {}
        # (formula, argument shapes and values, output shapes) -> its FLOPs, for the formulas
        # that see shapes alone: the same shapes give the same figure, in any trace.
        self.flops_by_shapes = FLOPS_BY_SHAPES
        # Call record number -> the FLOPs of its own forward (outside its children).
        self.own_flops: dict[int, int] = {}
        # Operation name -> how many times it ran without a formula, inside a call.
        self.uncounted: dict[str, int] = {}
        # Layout of a decomposed operation's arguments -> what its decomposition counted
        # (decomposition_counts.py), for those whose formulas read shapes alone.
        self.decompositions = kept_counts(self.formulas)
        self.value_formulas = 0  # formulas run that read more than shapes
        # Storages of outputs left out while a decomposition runs, for its counts.
        self.left_out_now: list[int] | None = None

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Leave `__torch_dispatch__` as written, not wrapped in `torch._disable_dynamo`.

        The wrapper keeps dynamo out of the mode's frames; a trace runs compiled code eagerly
        (`compiled_code_run_eagerly`), so there is no dynamo to keep out, and the wrapper's
        two Python frames were a tenth of what counting an operation cost.
        """
        return False

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        plan = self.plans.get(id(func))
        if plan is None:
            plan = self.plans[id(func)] = operation_plan(func, self.formulas)
        if plan.decomposes:
            decomposed = self._decomposed(plan, args, kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        output = plan.run(*args, **kwargs) if kwargs else plan.run(*args)
        if plan.unused_statistics and torch.is_grad_enabled():  # else autograd saves nothing
            self._leave_out(output[1:])
        # `_counting` written out: this runs at every operation.
        if (
            plan.counted
            and self.open_calls
            and get_ident() == self.thread_id
            and not self.recorder.reading_outputs
        ):
            self._count(plan, args, kwargs, output)
        return output

    def _counting(self) -> bool:
        """Whether an operation run now is counted: the model's operations inside a call, not
        those the recorder runs on an output it reads (`values=True`'s fingerprints)."""
        return bool(
            self.open_calls and get_ident() == self.thread_id and not self.recorder.reading_outputs
        )

    def _leave_out(self, outputs: Any) -> None:
        """Leave the storages of `outputs` out of the saved bytes."""
        keys = self.saved.leave_out(outputs)
        if self.left_out_now is not None:
            self.left_out_now.extend(keys)

    def _decomposed(
        self, plan: _OperationPlan, args: tuple[Any, ...], kwargs: dict[str, Any] | None
    ) -> Any:
        """What FlopCounterMode does: an operation that has a decomposition is counted through
        the operations it decomposes into, which may have formulas; NotImplemented if it has
        none for these arguments.

        Once per layout of its arguments: a later call of that layout runs the operation's own
        kernel and adds what the decomposition counted (decomposition_counts.py).
        """
        key = layout_key(plan.operation, args, kwargs) if self._counting() else None
        if key is None:
            with self:
                return plan.operation.decompose(*args, **(kwargs or {}))
        counts = self.decompositions.get(key)
        if counts is not None:
            output = plan.run(*args, **kwargs) if kwargs else plan.run(*args)
            self._add(counts, output)
            return output
        number = self.open_calls[-1].number
        flops_before, uncounted_before = self.own_flops.get(number, 0), dict(self.uncounted)
        value_formulas, outer_left_out = self.value_formulas, self.left_out_now
        left_out: list[int] = []
        self.left_out_now = left_out
        try:
            with self:
                decomposed = plan.operation.decompose(*args, **(kwargs or {}))
        finally:
            self.left_out_now = outer_left_out
            if outer_left_out is not None:
                outer_left_out.extend(left_out)
        if decomposed is not NotImplemented and self.value_formulas == value_formulas:
            self.decompositions.keep(
                key,
                counts_between(
                    flops_before,
                    self.own_flops.get(number, 0),
                    uncounted_before,
                    self.uncounted,
                    left_out,
                    decomposed,
                ),
            )
        return decomposed

    def _add(self, counts: DecompositionCounts, output: Any) -> None:
        """Add what a decomposition counted to the open call, for a call run by its kernel."""
        if counts.flops:
            number = self.open_calls[-1].number
            self.own_flops[number] = self.own_flops.get(number, 0) + counts.flops
        for name, count in counts.uncounted:
            self.uncounted[name] = self.uncounted.get(name, 0) + count
        if counts.ignored_outputs:
            outputs = output if isinstance(output, (tuple, list)) else (output,)
            self._leave_out([outputs[position] for position in counts.ignored_outputs])

    def _count(
        self,
        plan: _OperationPlan,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        output: Any,
    ) -> None:
        """Add an operation's FLOPs to the innermost open call, or count it as uncounted."""
        uncounted, formula = plan.uncounted, plan.formula
        if uncounted is not None:
            self.uncounted[uncounted] = self.uncounted.get(uncounted, 0) + 1
            return
        if formula is None:
            return
        if plan.takes_shapes:
            flops = self._shape_flops(formula, args, kwargs, output, plan.argument_key)
        else:
            self.value_formulas += 1
            flops = int(formula(*args, **(kwargs or {}), out_val=output))
        number = self.open_calls[-1].number
        own_flops = self.own_flops
        own_flops[number] = own_flops.get(number, 0) + flops

    def _shape_flops(
        self,
        formula: Callable[..., int],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        output: Any,
        argument_key: Callable[[tuple[Any, ...]], tuple[Any, ...]] = key_by_looking,
    ) -> int:
        """A formula that sees shapes alone, worked out once per process for each set of shapes.

        torch's formulas for fused products call other wrapped formulas (`addmm` calls
        `mm`'s), each of which rebuilds its arguments with `tree_map`: tens of microseconds
        an operation, where a model repeats the same few shapes. The key is `shape_key` of
        each argument, as `argument_key` gives it (`key_for_schema` of the operation: one
        conversion per position, by its schema).
        """
        key: tuple[Any, ...] | None
        try:
            key = (
                formula,
                argument_key(args),
                output.shape if isinstance(output, Tensor) else shape_key(output),
            )
            if kwargs:
                key += (shape_key(kwargs),)
            flops = self.flops_by_shapes.get(key)
        except (TypeError, AttributeError):  # unhashable, symbolic, not as the schema says:
            # no cache, the same figure
            key, flops = None, None
        if flops is None:
            flops = int(
                formula(*shapes_of(args), out_shape=shapes_of(output), **shapes_of(kwargs or {}))
            )
            if key is not None:
                self.flops_by_shapes.keep(key, flops)
        return flops


class CostCounters:
    """What `costs_counted` keeps of one recording until `attach_costs` uses it."""

    def __init__(self, mode: CostMode, saved: SavedTensors, tensor_bytes: int) -> None:
        self.mode = mode
        self.saved = saved
        self.tensor_bytes = tensor_bytes


@contextmanager
def costs_counted(recorder: Recorder) -> Iterator[CostCounters]:
    """Count FLOPs into `recorder`'s open calls, and saved tensors, for the block's length.

    Entered after `recording`, so the model's tensors are those forward sees (stand-ins);
    the model's modules are those of the recorder's index.
    """
    storages = model_storages(recorder.index.modules)
    saved = SavedTensors(set(storages))
    counters = CostCounters(CostMode(recorder, saved), saved, sum(storages.values()))
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack), counters.mode:
        try:
            yield counters
        finally:
            saved.keep_alive.clear()


def attach_costs(trace: TraceRecords, counters: CostCounters) -> None:
    """Give each finished call its costs, and the trace its totals.

    FLOPs of operations made by calls that are not in the trace (backward's recomputation,
    whose calls are set aside) are dropped.
    """
    calls = trace.calls
    own = counters.mode.own_flops
    own_of = own.get
    totals = [own_of(index, 0) for index in range(len(calls))]
    for call in reversed(calls):  # children follow their parent: theirs are complete first
        if call.parent is not None:
            totals[call.parent.index] += totals[call.index]
    # Calls with the same figures share one (frozen) CallCosts: making one is most of this
    # loop's cost, and a model's calls repeat a few figures.
    made: dict[tuple[int, int, int, int | None], CallCosts] = {}
    for call in calls:
        index = call.index
        facts = call.facts
        figures = (  # in CallCosts' field order
            totals[index],
            own_of(index, 0),
            output_bytes(call.output),
            own_tensor_bytes(facts.tensors.tensors)
            if call.nth == 1 and facts is not None
            else None,
        )
        costs = made.get(figures)
        if costs is None:
            costs = made[figures] = CallCosts(*figures)
        call._costs = costs  # type: ignore[attr-defined]
    trace.costs = TraceCosts(
        flops=sum(totals[call.index] for call in calls if call.parent is None),
        tensor_bytes=counters.tensor_bytes,
        saved_bytes=counters.saved.saved_bytes,
        uncounted=tuple(
            sorted(counters.mode.uncounted.items(), key=lambda item: (-item[1], item[0]))
        ),
    )


def own_tensor_bytes(facts: tuple[TensorFact, ...]) -> int | None:
    """The bytes of a module's own parameters and buffers; None if one is lazy."""
    total = 0
    for fact in facts:
        if fact.shape is None:
            return None
        total += math.prod(fact.shape) * _ITEM_SIZES.get(fact.dtype, 0)
    return total


def output_bytes(output: ValueDescription | None) -> int:
    """The bytes of every tensor in a call's described output (0 while none is known)."""
    if output is None:
        return 0
    if type(output) is TensorDescription:  # most outputs: one tensor, nothing to walk
        return math.prod(output.shape) * _ITEM_SIZES.get(output.dtype, 0)
    return sum(tensor_bytes(tensor.dtype, tensor.shape) for tensor in tensors_in(output))


def tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """The bytes of a tensor of this golden dtype name (`f32`) and shape."""
    return math.prod(shape) * _ITEM_SIZES.get(dtype, 0)


def _item_sizes() -> dict[str, int]:
    """Golden dtype name -> bytes per element, for every dtype torch has."""
    dtypes = {value for value in vars(torch).values() if isinstance(value, torch.dtype)}
    return {dtype_name(dtype): dtype.itemsize for dtype in dtypes}


_ITEM_SIZES = _item_sizes()
