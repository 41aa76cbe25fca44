"""Hook a model, record every module call into a `Trace`, and leave the model as it was.

This is the only module that installs hooks. It uses torch's public global module hooks
(`register_module_forward_pre_hook` / `register_module_forward_hook`) for the length of a
`with` block, so it sees modules that are not registered under the root too, and never
writes into the user's modules.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

from pytest_fwdorder.describe import (
    describe_keyword_arguments,
    finish_value,
    raw_arguments,
    raw_value,
    tensors_of,
)
from pytest_fwdorder.errors import FwdOrderWarning
from pytest_fwdorder.trace import Call, RenderOptions, Trace

# Calls listed in the note added to an exception raised by forward.
_CALLS_IN_FAILURE_NOTE = 12


def resolve_model(model: object, *, entry_point: str) -> nn.Module:
    """Return the module to trace, unwrapping torch.compile and DataParallel wrappers.

    Raises TypeError for anything that is not an `nn.Module` or is a TorchScript module,
    whose calls never reach Python hooks.
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(
            f"{entry_point} cannot trace a TorchScript module ({type(model).__name__}): "
            "scripted code never calls Python forward hooks. Trace the nn.Module you "
            "scripted, before torch.jit.script / torch.jit.trace."
        )
    if not isinstance(model, nn.Module):
        hint = ""
        if callable(model):
            hint = (
                ": pass the model, not its forward method"
                if isinstance(getattr(model, "__self__", None), nn.Module)
                else ": to trace a model built by a function, pass the function to "
                "trace_forward with device='meta' (or call it yourself)"
            )
        raise TypeError(f"{entry_point} expected an nn.Module, got {type(model).__name__!r}{hint}")
    wrapped = _unwrap(model)
    if wrapped is not model:
        warnings.warn(
            f"{entry_point} traced the module inside {type(model).__name__} "
            f"({type(wrapped).__name__}); paths are relative to it and the wrapper's own "
            "machinery (compiled graphs, replicas) is not part of the trace",
            FwdOrderWarning,
            stacklevel=3,
        )
    return wrapped


def _unwrap(model: nn.Module) -> nn.Module:
    inner = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
    if isinstance(inner, nn.Module):
        return _unwrap(inner)
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return _unwrap(model.module)
    return model


@dataclass
class _ModelIndex:
    """One walk over the model: its modules, their first paths, other names and callables."""

    modules: list[nn.Module]
    first_paths: dict[int, str]
    aliases: dict[str, tuple[str, ...]]
    callable_paths: tuple[str, ...]


def index_model(root: nn.Module) -> _ModelIndex:
    modules: list[nn.Module] = []
    first_paths: dict[int, str] = {}
    other_names: dict[int, list[str]] = {}
    for path, module in root.named_modules(remove_duplicate=False):
        module_id = id(module)
        if module_id in first_paths:
            other_names.setdefault(module_id, []).append(path)
        else:
            first_paths[module_id] = path
            modules.append(module)
    return _ModelIndex(
        modules=modules,
        first_paths=first_paths,
        aliases={first_paths[module_id]: tuple(names) for module_id, names in other_names.items()},
        callable_paths=tuple(
            first_paths[id(module)]
            for module in modules
            if type(module).forward is not nn.Module.forward
        ),
    )


@dataclass
class _ModuleState:
    """What a forward can change in a model, captured so that it can be put back.

    Capture is cheap (references, version counters, flags); only buffers are copied, since
    a forward may update them in place (BatchNorm's running statistics).
    """

    modules: list[nn.Module]
    training: list[bool]
    parameters: list[tuple[nn.Module, dict[str, Any], list[tuple[str, int, bool]]]]
    buffers: list[tuple[nn.Module, dict[str, Any], dict[str, torch.Tensor]]]
    grad_enabled: bool
    cpu_rng: torch.Tensor
    cuda_rng: list[torch.Tensor] | None


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # inference tensors keep no version counter
        return -1


def _capture_state(modules: list[nn.Module]) -> _ModuleState:
    parameters = []
    buffers = []
    with torch.no_grad():
        for module in modules:
            if module._parameters:
                parameters.append(
                    (
                        module,
                        dict(module._parameters),
                        [
                            (name, _version(value), value.requires_grad)
                            for name, value in module._parameters.items()
                            if value is not None
                        ],
                    )
                )
            if module._buffers:
                copies = {
                    name: value.detach().clone()
                    for name, value in module._buffers.items()
                    if value is not None
                }
                buffers.append((module, dict(module._buffers), copies))
    return _ModuleState(
        modules=modules,
        training=[module.training for module in modules],
        parameters=parameters,
        buffers=buffers,
        grad_enabled=torch.is_grad_enabled(),
        cpu_rng=torch.random.get_rng_state(),
        # Asking for CUDA's state would initialise CUDA; only save it if it is in use.
        cuda_rng=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,  # type: ignore[no-untyped-call]
    )


def _same_entries(current: dict[str, Any], original: dict[str, Any]) -> bool:
    if len(current) != len(original):
        return False
    return all(current.get(name, current) is value for name, value in original.items())


def _restore_state(state: _ModuleState) -> None:
    torch.set_grad_enabled(state.grad_enabled)
    torch.random.set_rng_state(state.cpu_rng)
    if state.cuda_rng is not None:
        torch.cuda.set_rng_state_all(state.cuda_rng)
    with_parameters = {id(module) for module, _, _ in state.parameters}
    with_buffers = {id(module) for module, _, _ in state.buffers}
    for module, training in zip(state.modules, state.training, strict=True):
        if module.training is not training:
            module.training = training
        # A module that had none may have registered a parameter or buffer in forward.
        if module._parameters and id(module) not in with_parameters:
            module._parameters.clear()
        if module._buffers and id(module) not in with_buffers:
            module._buffers.clear()
    changed_in_place: list[str] = []
    for module, original, versions in state.parameters:
        if not _same_entries(module._parameters, original):
            module._parameters.clear()
            module._parameters.update(original)
        for name, version, requires_grad in versions:
            parameter = original[name]
            if parameter.requires_grad is not requires_grad:
                parameter.requires_grad_(requires_grad)
            if _version(parameter) != version:
                changed_in_place.append(f"{type(module).__name__}.{name}")
    # One no_grad (and, only if needed, inference_mode) for all buffers: entering a context
    # per buffer cost more than the copies themselves.
    inference_buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
    with torch.no_grad():
        for module, original, copies in state.buffers:
            if not _same_entries(module._buffers, original):
                module._buffers.clear()
                module._buffers.update(original)
            # Always copy back: BatchNorm's kernel updates running statistics in place without
            # bumping the version counter, so "unchanged" cannot be told from the version.
            for name, copy in copies.items():
                buffer = original[name]
                if buffer.is_inference():
                    inference_buffers.append((buffer, copy))
                else:
                    buffer.copy_(copy)
    if inference_buffers:
        with torch.inference_mode():
            for buffer, copy in inference_buffers:
                buffer.copy_(copy)
    if changed_in_place:
        warnings.warn(
            f"forward changed parameters in place ({', '.join(changed_in_place[:5])}); "
            "pytest-fwdorder puts buffers back but does not copy parameters, so these "
            "keep the values forward gave them",
            FwdOrderWarning,
            stacklevel=4,
        )


# Indexes into a raw record, the list a hook keeps per call until `_Recorder.finish`.
_MODULE, _PLACE, _NTH, _DEPTH, _PARENT, _ARGS, _KWARGS, _OUTPUT, _RAISED, _NUMBER = range(10)
_NOT_FINISHED = object()


class _Recorder:
    """The hook pair and the bookkeeping of one recording.

    The hooks only append raw records (immutable shape, dtype and device objects, the
    module); `finish` turns them into `Call`s once the forward is over.
    """

    def __init__(self, index: _ModelIndex, trace: Trace, *, capture_outputs: bool = False) -> None:
        self.trace = trace
        self.records: list[list[Any]] = []
        # With capture_outputs: (record number, detached copies of its output tensors), in
        # the order calls finished. Off by default: a trace holds no tensor.
        self.capture_outputs = capture_outputs
        self.captured_records: list[tuple[int, list[torch.Tensor]]] = []
        self.thread_id = threading.get_ident()
        # id(module) -> (path, registered). Unregistered modules are kept alive in
        # `self.keep_alive` so that their ids cannot be reused by another module mid-trace.
        self.places: dict[int, tuple[str, bool]] = {
            module_id: (path, True) for module_id, path in index.first_paths.items()
        }
        self.keep_alive: list[nn.Module] = []
        self.taken_paths = {path for path, _ in self.places.values()}
        self.call_counts: dict[int, int] = {}
        self.open_calls: list[list[Any]] = []

    @property
    def calls(self) -> list[Call]:
        self.finish()
        return self.trace.calls

    @property
    def captured(self) -> list[tuple[Call, list[torch.Tensor]]]:
        calls = self.calls
        return [(calls[number], copies) for number, copies in self.captured_records]

    def before_forward(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if threading.get_ident() != self.thread_id:
            return
        module_id = id(module)
        place = self.places.get(module_id)
        if place is None:
            if not self.open_calls:
                return  # a module outside the model, called outside the model
            place = self._place_unregistered(module)
        nth = self.call_counts.get(module_id, 0) + 1
        self.call_counts[module_id] = nth
        open_calls = self.open_calls
        record = [
            module,
            place,
            nth,
            len(open_calls),
            open_calls[-1][_NUMBER] if open_calls else -1,
            raw_arguments(args),
            (),
            _NOT_FINISHED,
            False,
            len(self.records),
        ]
        self.records.append(record)
        open_calls.append(record)

    def after_forward(self, module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        # torch calls this with (kwargs, output) normally, and with (output,) alone when
        # forward raised (the always_call path ignores with_kwargs).
        if threading.get_ident() != self.thread_id:
            return
        open_calls = self.open_calls
        if not open_calls or open_calls[-1][_MODULE] is not module:
            return
        record = open_calls.pop()
        if len(rest) == 2:
            if rest[0]:
                record[_KWARGS] = describe_keyword_arguments(rest[0])
            record[_OUTPUT] = raw_value(rest[1])
            if self.capture_outputs:
                copies = [tensor.detach().clone() for tensor in tensors_of(rest[1])]
                self.captured_records.append((record[_NUMBER], copies))
        else:
            record[_RAISED] = True

    def finish(self) -> None:
        """Turn the raw records made so far into the trace's `Call`s (once each)."""
        calls = self.trace.calls
        for record in self.records[len(calls) :]:
            path, registered = record[_PLACE]
            parent = calls[record[_PARENT]] if record[_PARENT] >= 0 else None
            output = record[_OUTPUT]
            module = record[_MODULE]
            call = Call(
                path=path,
                module_type=type(module).__name__,
                nth=record[_NTH],
                depth=record[_DEPTH],
                parent=parent,
                registered=registered,
                index=len(calls),
                args=tuple([finish_value(value) for value in record[_ARGS]]),
                kwargs=record[_KWARGS],
                output=None if output is _NOT_FINISHED else finish_value(output),
                raised=record[_RAISED],
                frozen=_is_frozen(module),
            )
            calls.append(call)
            if parent is not None:
                parent.children.append(call)

    def _place_unregistered(self, module: nn.Module) -> tuple[str, bool]:
        parent_record = self.open_calls[-1]
        parent_module = parent_record[_MODULE]
        parent_path, parent_registered = parent_record[_PLACE]
        prefix = f"{parent_path}." if parent_path else ""
        registered = False
        path = None
        for name, child in parent_module._modules.items():
            if child is module:  # registered during this forward
                path, registered = f"{prefix}{name}", parent_registered
                break
        if path is None:
            path = _attribute_path(parent_module, module, prefix)
        if path is None or path in self.taken_paths:
            base = f"{prefix}<{type(module).__name__}>"
            path, number = base, 1
            while path in self.taken_paths:
                number += 1
                path = f"{base}{number}"
        self.taken_paths.add(path)
        place = (path, registered)
        self.places[id(module)] = place
        self.keep_alive.append(module)
        return place

    @contextmanager
    def hooks_installed(self) -> Iterator[None]:
        pre_handle = register_module_forward_pre_hook(self.before_forward)
        try:
            post_handle = register_module_forward_hook(
                self.after_forward, with_kwargs=True, always_call=True
            )
        except BaseException:
            pre_handle.remove()
            raise
        try:
            yield
        finally:
            pre_handle.remove()
            post_handle.remove()
            _forget_keyword_flag(post_handle.id)
            self.keep_alive.clear()
            self.open_calls.clear()

    def failure_note(self) -> str:
        """Where forward failed and what ran before it, for the note on the user's error."""
        self.finish()
        if not self.calls:
            return "pytest-fwdorder: forward raised before any module call was recorded"
        failing = [call for call in self.calls if call.raised]
        lines = [f"pytest-fwdorder: forward raised after {len(self.calls)} recorded calls."]
        if failing:
            innermost = max(failing, key=lambda call: call.depth)
            chain = []
            current: Call | None = innermost
            while current is not None:
                chain.append(f"{current.display_path} ({current.module_type})")
                current = current.parent
            lines.append(f"Raised in: {' < '.join(chain)}")
        shown = self.calls[-_CALLS_IN_FAILURE_NOTE:]
        lines.append(f"Calls recorded up to the failure (last {len(shown)}):")
        lines.extend(
            f"  {'  ' * call.depth}{call.display_path} {call.module_type} #{call.nth}"
            f"{'  <- raised' if call.raised else ''}"
            for call in shown
        )
        return "\n".join(lines)


def _forget_keyword_flag(handle_id: int) -> None:
    """Undo what `RemovableHandle.remove()` leaves behind for a `with_kwargs=True` global hook.

    torch records the hook's id in `_global_forward_hooks_with_kwargs` but the handle does
    not remove it, so every trace would leave an entry there and `_has_any_global_hook()`
    would stay true for the rest of the process. Harmless once torch removes it itself.
    """
    flags = getattr(torch_module, "_global_forward_hooks_with_kwargs", None)
    if isinstance(flags, dict):
        flags.pop(handle_id, None)


def _is_frozen(module: nn.Module) -> bool:
    parameters = module._parameters
    if not parameters:
        return False
    return not any(value is not None and value.requires_grad for value in parameters.values())


def _attribute_path(owner: nn.Module, module: nn.Module, prefix: str) -> str | None:
    """Name an unregistered module by where its owner keeps it: `blocks[0]`, `heads['a']`."""
    for name, value in vars(owner).items():
        if value is module:
            return f"{prefix}{name}"
        if isinstance(value, (list, tuple)):
            for position, item in enumerate(value):
                if item is module:
                    return f"{prefix}{name}[{position}]"
        elif isinstance(value, dict):
            for key, item in value.items():
                if item is module:
                    return f"{prefix}{name}[{key!r}]"
    return None


@contextmanager
def recording(
    root: nn.Module,
    options: RenderOptions,
    *,
    restore_state: bool = True,
    capture_outputs: bool = False,
) -> Iterator[_Recorder]:
    """Record every call made in this thread inside the block into `recorder.trace`.

    Hooks are removed and (with `restore_state`) parameters, buffers, training and
    requires_grad flags, grad mode and the random state are put back, also when the
    block raises. An exception from the block gets a note naming the calls recorded.
    """
    index = index_model(root)
    trace = Trace(
        root_type=type(root).__name__,
        callable_paths=index.callable_paths,
        aliases=index.aliases,
        options=options,
    )
    recorder = _Recorder(index, trace, capture_outputs=capture_outputs)
    state = _capture_state(index.modules) if restore_state else None
    try:
        with recorder.hooks_installed():
            yield recorder
    except BaseException as error:
        error.add_note(recorder.failure_note())
        raise
    finally:
        recorder.finish()
        if state is not None:
            _restore_state(state)
