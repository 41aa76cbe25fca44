"""The recorder: hook a model's module calls, keep raw records, and build the trace's calls.

It installs torch's public global module hooks (`register_module_forward_pre_hook` /
`register_module_forward_hook`) for the length of a `with` block, so it sees modules that
are not registered under the root too, and never leaves anything in the user's modules.
`recording` is that block: it indexes the model (model_index.py), claims its modules
(module_claims.py), captures its state (model_state.py), swaps in stand-ins for a device
(stand_ins.py), installs the hooks, and puts everything back at its end. Other modules
install hooks of their own: facets/backward.py (the backward order), meta/failures.py and
meta/fast_paths.py (refusals on meta) and meta/build.py (a builder's registrations).
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

from pytest_fwdorder.calls.records import Call, RenderOptions, TraceRecords
from pytest_fwdorder.calls.value_descriptions import ValueDescription
from pytest_fwdorder.errors import MetaTraceError
from pytest_fwdorder.recording.describe import (
    describe_keyword_arguments,
    finish_arguments,
    finish_value,
    raw_arguments,
    raw_value,
    tensors_of,
)
from pytest_fwdorder.recording.direct_forwards import forwards_watched
from pytest_fwdorder.recording.meta.kernels import meta_kernel_cache
from pytest_fwdorder.recording.model_index import (
    ModelIndex,
    ModuleEntry,
    attribute_path,
    index_model,
    module_entry,
)
from pytest_fwdorder.recording.model_state import (
    ModelState,
    capture_state,
    restore_state,
)
from pytest_fwdorder.recording.module_claims import claim_modules, release_modules
from pytest_fwdorder.recording.stand_ins import StandIns, check_stand_ins_possible
from pytest_fwdorder.recording.torch_call_frames import (
    KEYWORD_FRAME_CODE,
    WRAPPED_CALL_FRAME_CODE,
    forget_keyword_flag,
    inner_keywords,
)

__all__ = ["CallRecord", "Recorder", "recording"]

# Calls listed in the note added to an exception raised by forward.
_CALLS_IN_FAILURE_NOTE = 12


class CallRecord(NamedTuple):
    """What the pre-hook keeps of one call until `Recorder.finish` builds its `Call`.

    A tuple, made in C at every call; what is known only when the call ends (its output,
    whether it raised) goes in the recorder's `outputs`, at the record's number.
    """

    module: nn.Module
    entry: ModuleEntry
    nth: int
    depth: int
    parent: int  # the parent's record number, -1 for an outermost call
    args: list[object]
    kwargs: tuple[tuple[str, Any], ...] | None  # None when the frame did not show them
    number: int


# What `outputs` holds for a call that has not ended, and for one whose forward raised.
_NOT_FINISHED = object()
_RAISED = object()
# describe.raw_value's tuple for a plain strided tensor, read in C.
_RAW_TENSOR = operator.attrgetter("shape", "dtype", "device")
_PATH = operator.attrgetter("path")


class Recorder:
    """The hook pair and the bookkeeping of one recording; `trace` holds its calls.

    The hooks only keep raw records (immutable shape, dtype and device objects, the
    module's entry); `finish` turns them into `Call`s once the forward is over.
    """

    def __init__(
        self,
        index: ModelIndex,
        trace: TraceRecords,
        *,
        capture_outputs: bool = False,
        state: ModelState | None = None,
        stand_ins: StandIns | None = None,
    ) -> None:
        self.trace = trace
        # Unregistered modules join these at their first call, before they run.
        self.state = state
        self.stand_ins = stand_ins
        self.records: list[CallRecord] = []
        # Per record number: the raw output once the call ended, _RAISED, or _NOT_FINISHED.
        self.outputs: list[object] = []
        # Keyword arguments the pre-hook could not read from the frame, by record number.
        self.late_kwargs: dict[int, tuple[tuple[str, Any], ...]] = {}
        # With capture_outputs: (record number, detached copies of its output tensors), in
        # the order calls finished. Off by default: a trace holds no tensor.
        self.capture_outputs = capture_outputs
        self.captured_records: list[tuple[int, list[torch.Tensor]]] = []
        # Functions given (record number, raw output) the moment each call ends, before
        # later operations can change the output in place (`values=True`'s fingerprints).
        self.output_observers: list[Callable[[int, object], None]] = []
        # True while the post-hook copies or observes an output: the operations then run are
        # the recorder's, not the model's, and a dispatch mode counting the model's (costs)
        # leaves them out.
        self.reading_outputs = False
        self.thread_id = threading.get_ident()
        self.index = index
        # Unregistered modules get entries as they are met, and are kept alive in
        # `keep_alive` so that their ids cannot be reused by another module mid-trace.
        self.entries: dict[int, ModuleEntry] = dict(index.entries)
        self.keep_alive: list[nn.Module] = []
        self.taken_paths: set[str] | None = None  # made at the first unregistered module
        self.call_counts: dict[int, int] = {}
        self.open_calls: list[CallRecord] = []
        self.keyword_frame_code = KEYWORD_FRAME_CODE
        # The ids of the modules this recording claimed from other threads' traces.
        self.claimed: list[int] = []
        # The global hooks while installed, for a run that reaches no hook (direct_forwards.py).
        self.hook_pair: tuple[Callable[..., None], Callable[..., None]] | None = None

    @property
    def calls(self) -> list[Call]:
        self.finish()
        return self.trace.calls

    @property
    def captured(self) -> list[tuple[Call, list[torch.Tensor]]]:
        """Each finished call with copies of its output tensors (with `capture_outputs`)."""
        calls = self.calls
        return [(calls[number], copies) for number, copies in self.captured_records]

    def forget_calls_after(self, kept: int, call_counts: dict[int, int]) -> None:
        """Drop the records after the first `kept` and go back to these call counts.

        For calls that are not part of the forward: backward's recomputation.
        """
        del self.records[kept:]
        del self.outputs[kept:]
        for number in [number for number in self.late_kwargs if number >= kept]:
            del self.late_kwargs[number]
        self.open_calls.clear()
        self.call_counts.clear()
        self.call_counts.update(call_counts)

    def make_hooks(self) -> tuple[Callable[..., None], Callable[..., None]]:
        """Build the global pre-hook and post-hook torch calls around every module call.

        Each is a closure over what it touches: they run once per module call, so what they
        use is bound once, when they are built, rather than looked up on `self` at each call.
        """
        return self._make_before_forward(), self._make_after_forward()

    def _make_before_forward(self) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        """The pre-hook: opens a call and keeps its raw record, before the module runs."""
        thread_id, get_ident, get_frame = self.thread_id, threading.get_ident, sys._getframe
        keyword_frame_code = self.keyword_frame_code
        # Without `inner`'s layout, neither frame is read: per-module hooks read keywords.
        wrapped_call_frame_code = WRAPPED_CALL_FRAME_CODE if keyword_frame_code else None
        get_entry, enter_unregistered = self.entries.get, self._enter_unregistered
        call_counts, open_calls, records = self.call_counts, self.open_calls, self.records
        count_of, open_call, append_record = call_counts.get, open_calls.append, records.append
        append_output, not_finished = self.outputs.append, _NOT_FINISHED
        new_record, record_class = tuple.__new__, CallRecord
        tensor_type, strided, tensor_metadata = torch.Tensor, torch.strided, _RAW_TENSOR

        def before_forward(module: nn.Module, args: tuple[Any, ...]) -> None:
            if get_ident() != thread_id:
                return
            module_id = id(module)
            entry = get_entry(module_id)
            if entry is None:
                if not open_calls:
                    return  # a module outside the model, called outside the model
                entry = enter_unregistered(module)
            nth = call_counts[module_id] = count_of(module_id, 0) + 1
            try:  # `module(...)`: `_wrapped_call_impl` -> `_call_impl` -> `inner` -> this hook
                outer: FrameType | None = get_frame(3)
            except ValueError:  # fewer frames: called from C, not from `module(...)`
                outer = None
            kwargs: tuple[tuple[str, Any], ...] | None
            if outer is not None and outer.f_code is wrapped_call_frame_code:
                # Only `module(...)` has the wrapper there (a direct forward's run has the
                # user's frame), and its three locals are cheaper to read than `inner`'s.
                keyword_arguments = outer.f_locals["kwargs"]
                kwargs = describe_keyword_arguments(keyword_arguments) if keyword_arguments else ()
            else:
                kwargs = inner_keywords(get_frame(1), keyword_frame_code)
            value = args[0] if len(args) == 1 else None
            raw_args: list[object]
            if type(value) is tensor_type and value.layout is strided:  # the common case
                try:
                    raw_args = [tensor_metadata(value)]
                except RuntimeError:  # a nested tensor is strided but has no sizes to read
                    raw_args = [raw_value(value)]
            else:
                raw_args = raw_arguments(args)
            depth = len(open_calls)
            parent = open_calls[-1].number if depth else -1
            # CallRecord(...) without its Python __new__: the values in its fields' order.
            record = new_record(
                record_class, (module, entry, nth, depth, parent, raw_args, kwargs, len(records))
            )
            append_record(record)
            append_output(not_finished)
            open_call(record)

        return before_forward

    def _make_after_forward(self) -> Callable[..., None]:
        """The post-hook: closes the innermost call and keeps its raw output (or that it raised)."""
        thread_id, get_ident = self.thread_id, threading.get_ident
        open_calls, close_call = self.open_calls, self.open_calls.pop
        outputs, late_kwargs, raised = self.outputs, self.late_kwargs, _RAISED
        tensor_type, strided, tensor_metadata = torch.Tensor, torch.strided, _RAW_TENSOR
        capture_outputs, captured_records = self.capture_outputs, self.captured_records
        output_observers = self.output_observers  # filled after the hooks are made
        missing = _RAISED

        def after_forward(
            module: nn.Module,
            args: tuple[Any, ...],
            keyword_arguments: Any = missing,
            output: Any = missing,
        ) -> None:
            # torch calls this with (kwargs, output) normally, and with (output,) alone when
            # forward raised (the always_call path ignores with_kwargs): no output then.
            if get_ident() != thread_id:
                return
            if not open_calls or open_calls[-1].module is not module:
                return
            record = close_call()
            number = record.number
            if output is missing:
                outputs[number] = raised
                return
            if record.kwargs is None and number not in late_kwargs:
                # neither the frame nor a per-module hook saw them
                late_kwargs[number] = (
                    describe_keyword_arguments(keyword_arguments) if keyword_arguments else ()
                )
            try:  # raw_value, inlined for the common case
                outputs[number] = (
                    tensor_metadata(output)
                    if type(output) is tensor_type and output.layout is strided
                    else raw_value(output)
                )
            except RuntimeError:  # a nested tensor is strided but has no sizes to read
                outputs[number] = raw_value(output)
            if capture_outputs or output_observers:
                self.reading_outputs = True
                try:
                    if capture_outputs:
                        copies = [tensor.detach().clone() for tensor in tensors_of(output)]
                        captured_records.append((number, copies))
                    for observe in output_observers:
                        observe(number, output)
                finally:
                    self.reading_outputs = False

        return after_forward

    def before_forward_with_keywords(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """The fallback's per-module pre-hook: runs right after the global pre-hook."""
        open_calls = self.open_calls
        if open_calls and open_calls[-1].module is module and open_calls[-1].kwargs is None:
            number = open_calls[-1].number
            if number not in self.late_kwargs:
                self.late_kwargs[number] = describe_keyword_arguments(kwargs) if kwargs else ()

    def finish(self) -> None:
        """Turn the raw records made so far into the trace's `Call`s (once each)."""
        calls = self.trace.calls
        outputs = self.outputs
        late_kwargs = self.late_kwargs
        new_call = object.__new__
        children_of: dict[int, list[Call]] = {}
        # By a raw tensor: its finished description, and its one-tensor arguments. One look-up
        # for a call that takes or returns a tensor finished before (most calls).
        descriptions: dict[object, ValueDescription] = {}
        one_tensor_arguments: dict[object, tuple[ValueDescription, ...]] = {}
        # A record unpacked at once: one step, where each field read by name is a call.
        for _, entry, nth, depth, parent_number, raw_args, kwargs, number in self.records[
            len(calls) :
        ]:
            parent = calls[parent_number] if parent_number >= 0 else None
            output = outputs[number]
            if kwargs is None:
                kwargs = late_kwargs.get(number, ())
            # What Call(...) does, without parsing fifteen keyword arguments per call.
            call = new_call(Call)
            call.path = entry.path
            call.module_type = entry.module_type
            call.nth = nth
            call.depth = depth
            call.parent = parent
            call.registered = entry.registered
            call.index = len(calls)
            if len(raw_args) == 1 and type(raw_args[0]) is tuple:
                arguments = one_tensor_arguments.get(raw_args[0])
                if arguments is None:
                    arguments = one_tensor_arguments[raw_args[0]] = finish_arguments(raw_args)
                call.args = arguments
            else:
                call.args = finish_arguments(raw_args)
            call.kwargs = kwargs
            if type(output) is tuple:
                description = descriptions.get(output)
                if description is None:
                    description = descriptions[output] = finish_value(output)
                call.output = description
            else:
                call.output = (
                    None if output is _NOT_FINISHED or output is _RAISED else finish_value(output)
                )
            call.raised = output is _RAISED
            call.frozen = entry.facts.tensors.frozen
            call.scripted = entry.scripted
            call.facts = entry.facts
            call.training = entry.training
            call.children = ()
            calls.append(call)
            if parent is not None:
                siblings = children_of.get(parent_number)
                if siblings is None:
                    children_of[parent_number] = [call]
                else:
                    siblings.append(call)
        _add_children(calls, children_of)

    def _enter_unregistered(self, module: nn.Module) -> ModuleEntry:
        parent_record = self.open_calls[-1]
        parent_module = parent_record.module
        parent_entry = parent_record.entry
        prefix = f"{parent_entry.path}." if parent_entry.path else ""
        registered = False
        path = None
        for name, child in parent_module._modules.items():
            if child is module:  # registered during this forward
                path, registered = f"{prefix}{name}", parent_entry.registered
                break
        if path is None:
            path = attribute_path(parent_module, module, prefix)
        if self.taken_paths is None:  # the model's paths, and then the unregistered ones'
            self.taken_paths = set(map(_PATH, self.entries.values()))
        if path is None or path in self.taken_paths:
            base = f"{prefix}<{type(module).__name__}>"
            path, number = base, 1
            while path in self.taken_paths:
                number += 1
                path = f"{base}{number}"
        self.taken_paths.add(path)
        entry = module_entry(module, path, registered=registered)
        self.entries[id(module)] = entry
        self.keep_alive.append(module)
        if entry.scripted:
            return entry  # TorchScript owns its state, as for a registered scripted module
        if self.state is not None:
            self.state.add_modules([module], [path])
        if self.stand_ins is not None:
            self.stand_ins.install(module)
        return entry

    @contextmanager
    def hooks_installed(self) -> Iterator[None]:
        with ExitStack() as stack:
            before_forward, after_forward = self.make_hooks()
            self.hook_pair = (before_forward, after_forward)
            pre_handle = register_module_forward_pre_hook(before_forward)
            stack.callback(pre_handle.remove)
            post_handle = register_module_forward_hook(
                after_forward, with_kwargs=True, always_call=True
            )
            stack.callback(forget_keyword_flag, post_handle.id)
            stack.callback(post_handle.remove)
            if self.state is not None:
                # Appended after torch's initializing pre-hook, so it sees the initialization.
                for module in self.state.lazy_modules:
                    if "_initialize_hook" in vars(module):
                        handle = module.register_forward_pre_hook(self.state.keep_materialized)
                        stack.callback(handle.remove)
            if self.keyword_frame_code is None:
                for module in self.index.python_modules:
                    handle = module.register_forward_pre_hook(
                        self.before_forward_with_keywords, with_kwargs=True
                    )
                    stack.callback(handle.remove)
            try:
                yield
            finally:
                self.keep_alive.clear()
                self.open_calls.clear()
                # The hooks hold the recorder (a bound method): kept here, the pair would make
                # the recorder, its records and the model's entries garbage that only the
                # cyclic collector frees, a pass over every object of the process.
                self.hook_pair = None

    def failure_note(self) -> str:
        """Where forward failed and what ran before it, for the note on the user's error."""
        calls = self.calls
        if not calls:
            return "pytest-fwdorder: forward raised before any module call was recorded"
        failing = [call for call in calls if call.raised]
        count = f"{len(calls)} recorded call{'s' if len(calls) != 1 else ''}"
        lines = [f"pytest-fwdorder: forward raised after {count}."]
        if failing:
            innermost = max(failing, key=lambda call: call.depth)
            chain = []
            current: Call | None = innermost
            while current is not None:
                chain.append(f"{current.display_path} ({current.module_type})")
                current = current.parent
            lines.append(f"Raised in: {' < '.join(chain)}")
        shown = calls[-_CALLS_IN_FAILURE_NOTE:]
        lines.append(f"Calls recorded up to the failure (last {len(shown)}):")
        lines.extend(
            f"  {'  ' * call.depth}{call.display_path} {call.module_type} #{call.nth}"
            f"{'  <- raised' if call.raised else ''}"
            for call in shown
        )
        return "\n".join(lines)


def _add_children(calls: list[Call], children_of: dict[int, list[Call]]) -> None:
    """Give each parent its children finished now, after those it had (an earlier batch's)."""
    for parent_index, children in children_of.items():
        parent = calls[parent_index]
        parent.children = (*parent.children, *children)


@contextmanager
def recording(
    root: nn.Module,
    options: RenderOptions,
    *,
    device: torch.device | str | None = None,
    restore_state: bool = True,
    capture_outputs: bool = False,
    direct_forwards: str = "off",
    trace_type: type[TraceRecords] = TraceRecords,
) -> Iterator[Recorder]:
    """Record every call made in this thread inside the block into `recorder.trace`.

    With `device`, parameters and buffers that live elsewhere are swapped for stand-ins on
    it (meta stand-ins hold no memory) and factory calls inside the block land on it; the
    originals are always put back. Hooks are removed and (with `restore_state`) parameters,
    buffers, submodules, plain attributes and the dicts, lists and sets modules hold (their
    hooks too), training and requires_grad flags, grad mode and the random states (torch,
    Python, numpy) are put back, also when the block raises. An exception from the block
    gets a note naming the calls recorded. Raises `RuntimeError` if another thread is
    tracing a module of this model right now. `direct_forwards` is the trace option
    (direct_forwards.py): how forwards run without a module call are found. `trace_type`
    is the class `recorder.trace` is made of: the tracing entry asks for a `Trace`.
    """
    index = index_model(root)
    target = torch.device(device) if device is not None else None
    if target is not None:
        check_stand_ins_possible(index, target)
    trace = _empty_trace(root, index, options, trace_type)
    recorder = _start_recorder(
        index, trace, target, restore_state=restore_state, capture_outputs=capture_outputs
    )
    if recorder.stand_ins is not None:
        _install_stand_ins(recorder, recorder.stand_ins)
    in_flight: BaseException | None = None
    try:
        with ExitStack() as stack:
            if target is not None:
                stack.enter_context(target)
            stack.enter_context(recorder.hooks_installed())
            stack.enter_context(forwards_watched(recorder, index.python_modules, direct_forwards))
            if target is not None and target.type == "meta":
                stack.enter_context(meta_kernel_cache())
            yield recorder
    except BaseException as error:
        in_flight = error
        error.add_note(recorder.failure_note())
        raise
    finally:
        _put_back(recorder, in_flight)


def _empty_trace(
    root: nn.Module, index: ModelIndex, options: RenderOptions, trace_type: type[TraceRecords]
) -> TraceRecords:
    """The trace the recorder fills, of `trace_type`: the model's facts, no calls yet."""
    root_entry = index.entries[id(root)]
    tensors = index.tensors
    return trace_type(
        root_type=root_entry.module_type,
        callable_paths=index.callable_paths,
        aliases=index.aliases,
        options=options,
        mode="train" if root.training else "eval",
        modules=dict(index.facts_by_path),  # the trace's own: a kept index is traced again
        tied=tensors.tied,
        totals=tensors.totals,
        module_classes=dict(index.classes_by_path),
    )


def _start_recorder(
    index: ModelIndex,
    trace: TraceRecords,
    target: torch.device | None,
    *,
    restore_state: bool,
    capture_outputs: bool,
) -> Recorder:
    """Claim the model's modules, capture its state and make the recorder that holds both."""
    claimed = claim_modules(index)
    try:
        state = capture_state(index) if restore_state else None
        index.reading = None  # taken by the capture, or not wanted: the trace keeps none
        stand_ins = StandIns(target) if target is not None else None
        recorder = Recorder(
            index, trace, capture_outputs=capture_outputs, state=state, stand_ins=stand_ins
        )
        recorder.claimed = claimed
    except BaseException:
        release_modules(claimed)
        raise
    return recorder


def _install_stand_ins(recorder: Recorder, stand_ins: StandIns) -> None:
    """Swap in stand-ins for every Python module's tensors; on failure put all back first."""
    try:
        for module in recorder.index.python_modules:
            stand_ins.install(module)
    except Exception as error:
        _put_back(recorder, None)
        message = (
            f"cannot make stand-ins on {stand_ins.device.type!r} for the model's weights: "
            f"{type(error).__name__}: {error}. Trace where the model is (leave device "
            "unset), or build the model on that device"
        )
        if stand_ins.device.type == "meta":
            raise MetaTraceError(message) from error
        raise ValueError(message) from error


def _put_back(recorder: Recorder, in_flight: BaseException | None) -> None:
    """Put the originals and the model's state back; never hide an exception in flight.

    A failure here while the user's exception propagates becomes a note on that exception.
    """
    try:
        if recorder.stand_ins is not None:
            recorder.stand_ins.remove()
        if recorder.state is not None:
            restore_state(recorder.state)
            recorder.state = None  # its copies are garbage now: freed before the trace ends
    except Exception as error:
        if in_flight is None:
            raise
        in_flight.add_note(
            f"pytest-fwdorder: putting the model back failed too: {type(error).__name__}: {error}"
        )
    finally:
        release_modules(recorder.claimed)
        recorder.finish()
        # The raw records are garbage once finished: freed here, while trace_forward keeps the
        # collector paused, its one pass afterwards does not walk them (0.06 s at 100k calls).
        del recorder.records[:], recorder.outputs[:]
        recorder.late_kwargs.clear()
