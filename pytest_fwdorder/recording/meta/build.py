"""Build a model on the meta device without allocating memory, through registration hooks.

`build_on_meta` calls a zero-argument builder under `parameters_and_buffers_on_meta`: its
factory calls, parameters and buffers land on meta (torch's public parameter and buffer
registration hooks, removed on exit). It calls the builder again with the CPU for the
tensors whose values the builder reads, and explains one that still fails in a
`MetaTraceError`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors
from torch.utils.weak import WeakIdKeyDictionary

from pytest_fwdorder.errors import MetaTraceError
from pytest_fwdorder.recording.describe import MAXIMUM_DEPTH
from pytest_fwdorder.recording.meta.failures import OUR_DIRECTORY, TORCH_DIRECTORY, without_period

# How many times a builder runs at most, each time with more of its value-read tensors on the CPU.
_BUILD_TRIES = 8


def build_on_meta(model: Callable[[], nn.Module]) -> object:
    """Call the builder with its factory calls on meta, again with the CPU for the tensors
    whose values it read (found by the failed call), until it builds or nothing is left."""
    on_cpu: frozenset[_Site] = frozenset()
    for attempt in range(_BUILD_TRIES):
        with parameters_and_buffers_on_meta(on_cpu) as build:
            try:
                return model()
            except Exception as error:
                more = build.needed_values - build.registered - on_cpu
                if not more or attempt == _BUILD_TRIES - 1:
                    raise MetaTraceError(
                        _meta_build_failure_message(model, error, build)
                    ) from error
                on_cpu |= more
    raise AssertionError("unreachable: the last try returns or raises")  # pragma: no cover


def _meta_build_failure_message(
    model: Callable[[], nn.Module], error: Exception, build: _MetaBuild
) -> str:
    name = getattr(model, "__qualname__", repr(model))
    failure = f"building the model for the meta device failed in {name!r}: " + (
        f"{type(error).__name__}: {without_period(error)}."
    )
    memory = _memory_bytes()
    if memory is not None and build.registered_bytes > memory:
        return (
            f"{failure} It registered {build.registered_bytes / 2**30:.1f} GiB of parameters "
            f"and buffers before it failed, more than this machine's {memory / 2**30:.1f} GiB "
            "of memory, so it cannot be built on the CPU either: fix the line that fails on "
            "meta, or build a smaller configuration of the model."
        )
    return (
        f"{failure} If it builds on the CPU, build it there and pass the model with "
        "device='meta': its weights are replaced by meta stand-ins for the trace."
    )


def _memory_bytes() -> int | None:
    """This machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# Where a factory call was made: the innermost line outside torch and this package.
_Site = tuple[str, int]


def _factory_site() -> _Site:
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(
        (TORCH_DIRECTORY, OUR_DIRECTORY)
    ):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno)


class _MetaBuild(TorchFunctionMode):
    """While a builder runs: factory calls without a device land on meta, except those made
    at `on_cpu` sites, whose values the builder reads.

    Each tensor keeps the sites of the factory calls it was computed from, so an operation
    that fails (`.item()`, `.tolist()`, a comparison in an `if`) names the sites it needed
    values from; sites of parameters and buffers never go to the CPU. A call's cost is
    bounded by the tensors it reads (`_tensors_read`), never by a container it is handed.
    """

    def __init__(self, on_cpu: frozenset[_Site]) -> None:
        super().__init__()
        self.on_cpu = on_cpu
        self.constructors = _device_constructors()
        self.origins: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.needed_values: set[_Site] = set()
        self.registered: set[_Site] = set()
        self.registered_bytes = 0
        self._counted: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = {} if kwargs is None else kwargs
        origins: frozenset[_Site] | None = None
        if func in self.constructors and kwargs.get("device") is None:
            site = _factory_site()
            origins = frozenset({site})
            if site not in self.on_cpu:
                kwargs["device"] = _META
        try:
            output = func(*args, **kwargs)
        except Exception:
            self.needed_values.update(self._origins_of(args, kwargs))
            raise
        if origins is None:
            origins = self._origins_of(args, kwargs)
        if origins:
            for tensor in _tensors_read((output,)):
                self.origins[tensor] = origins
        return output

    def _origins_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> frozenset[_Site]:
        found: set[_Site] = set()
        for tensor in _tensors_read(args, kwargs.values()):
            found.update(self._origins_of_tensor(tensor))
        return frozenset(found)

    def _origins_of_tensor(self, tensor: torch.Tensor) -> frozenset[_Site]:
        return self.origins.get(tensor, frozenset())  # type: ignore[no-untyped-call,no-any-return]

    def saw_registered(self, tensor: torch.Tensor) -> None:
        """Keep a parameter's or buffer's sites on meta, and count its bytes once."""
        self.registered.update(self._origins_of_tensor(tensor))
        if tensor not in self._counted:
            self._counted[tensor] = True
            self.registered_bytes += tensor.numel() * tensor.element_size()


def _tensors_read(*groups: Iterable[object]) -> list[torch.Tensor]:
    """The tensors a torch call reads in its argument `groups` (positional, keyword): each
    argument that is a tensor, and those in its lists and tuples (`torch.cat`'s tensors,
    `torch.tensor`'s nested data), in no particular order.

    Mappings and other objects a call is handed are carried, not read (deepcopy's memo,
    which holds every tensor copied so far, a state dict): walking them made each call cost
    as much as everything before it, and a builder that deep-copies its model quadratic.
    """
    found: list[torch.Tensor] = []
    sequences: list[tuple[tuple[object, ...] | list[object], int]] = []
    for group in groups:
        for value in group:
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                sequences.append((value, 1))
    seen: set[int] = set()  # a list that holds itself is walked once
    while sequences:
        sequence, depth = sequences.pop()
        if depth >= MAXIMUM_DEPTH or id(sequence) in seen:
            continue
        seen.add(id(sequence))
        for value in sequence:
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                sequences.append((value, depth + 1))
    return found


_META = torch.device("meta")


@contextmanager
def parameters_and_buffers_on_meta(
    on_cpu: frozenset[_Site] = frozenset(),
) -> Iterator[_MetaBuild]:
    """While a builder runs, its factory calls and every parameter and buffer land on meta.

    No parameter memory is allocated at any point: factory calls without a device go to meta
    (as under `torch.device('meta')`) except at the `on_cpu` sites, the builder's own
    arithmetic whose values it reads (`.item()` in torchvision's RegNet), which stay on the
    CPU with real values. A parameter or buffer still made on the CPU (a factory call with
    `device='cpu'`, a site in `on_cpu`) is swapped for a meta one when it is registered: one
    meta tensor per original, so a tensor registered in two places stays tied. Uses torch's
    public registration hooks, removed on exit.
    """
    build = _MetaBuild(on_cpu)
    stand_ins = _MetaStandIns(build)
    with _registration_hooks(stand_ins.meta_parameter, stand_ins.meta_buffer), build:
        yield build


class _MetaStandIns:
    """The registration hooks' work: each parameter or buffer made off meta is swapped for
    one meta stand-in per original, so a tensor registered in two places stays tied."""

    def __init__(self, build: _MetaBuild) -> None:
        self.build = build
        self.on_meta: dict[int, torch.Tensor] = {}
        # The originals stay referenced until the end, so their ids cannot be reused meanwhile.
        self.originals: list[torch.Tensor] = []

    def meta_parameter(
        self, module: nn.Module, name: str, parameter: object
    ) -> nn.Parameter | None:
        if not isinstance(parameter, nn.Parameter):
            return None
        if isinstance(parameter, nn.UninitializedParameter):
            return None  # a lazy module's parameter has no shape to copy yet
        self.build.saw_registered(parameter)
        if parameter.device.type == "meta":
            return None
        return self._meta_copy(  # type: ignore[no-any-return]
            parameter,
            lambda tensor: nn.Parameter(
                torch.empty_like(tensor, device="meta"), requires_grad=tensor.requires_grad
            ),
        )

    def meta_buffer(self, module: nn.Module, name: str, buffer: object) -> torch.Tensor | None:
        if not isinstance(buffer, torch.Tensor) or isinstance(buffer, nn.UninitializedBuffer):
            return None
        self.build.saw_registered(buffer)
        if buffer.device.type == "meta":
            return None
        return self._meta_copy(  # type: ignore[no-any-return]
            buffer, lambda tensor: torch.empty_like(tensor, device="meta")
        )

    def _meta_copy(self, tensor: torch.Tensor, make: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        found = self.on_meta.get(id(tensor))
        if found is None:
            found = self.on_meta[id(tensor)] = make(tensor)
            self.originals.append(tensor)
        return found


@contextmanager
def _registration_hooks(
    parameter_hook: Callable[[nn.Module, str, object], nn.Parameter | None],
    buffer_hook: Callable[[nn.Module, str, object], torch.Tensor | None],
) -> Iterator[None]:
    """torch's global parameter and buffer registration hooks, both removed on exit."""
    # torch annotates the hooks as returning None, but documents (and honours) a returned
    # replacement: that is the point of these hooks.
    parameter_handle = torch_module.register_module_parameter_registration_hook(
        parameter_hook  # type: ignore[arg-type]
    )
    try:
        buffer_handle = torch_module.register_module_buffer_registration_hook(
            buffer_hook  # type: ignore[arg-type]
        )
    except BaseException:
        parameter_handle.remove()
        raise
    try:
        yield
    finally:
        parameter_handle.remove()
        buffer_handle.remove()
