"""Record how a model initializes itself while its builder runs (`initialization=True`).

The one owner of the initialization record. Two public mechanisms watch the build, both
removed when it ends:
- a profile function (`sys.setprofile`, chained to any profiler already set) sees each call
  of a `torch.nn.init` function (`kaiming_uniform_`, `trunc_normal_`, `constant_`, ...) and
  records it by its name and the arguments given away from their defaults, as the code
  calls it: `kaiming_uniform_(a=2.236)`. What it does inside (rejection sampling, a
  `normal_` on a temporary) is an implementation detail that differs between torch
  releases and between meta and real tensors, so it is not recorded;
- a `TorchFunctionMode` sees every other in-place call on a tensor (`zero_`, `fill_`,
  `copy_`, `mul_` on `.data`, `normal_` called on a tensor) and the random factories
  (`torch.randn`, `torch.rand`, ...).
Tensors are named once the build is over, from the model's parameters and buffers, by
object and, for a tensor wrapped later (`nn.Parameter(torch.randn(3))`), by storage.

A random operation's draws are the elements it fills, counted from shapes, so meta and real
builds give the same figures (on meta nothing is drawn). Random draws into tensors the
model does not keep are listed too, as temporaries: they move the random stream that every
later step draws from.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from pytest_fwdorder.calls.facet_records import InitializationRecords, InitializationStep
from pytest_fwdorder.recording.describe import dtype_name

# Operations that fill their tensor (the first argument) with random numbers.
_RANDOM_IN_PLACE = frozenset(
    {
        "uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_",
        "xavier_uniform_", "xavier_normal_", "orthogonal_", "sparse_", "random_",
        "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_",
    }
)  # fmt: skip
# Functions that make a new tensor of random numbers.
_RANDOM_FACTORIES = frozenset(
    {
        "rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial",
        "rand_like", "randn_like", "randint_like", "poisson",
    }
)  # fmt: skip
# In-place calls that change a tensor's flags or placement, not its values.
_NOT_INITIALIZING = frozenset({"requires_grad_", "share_memory_", "retain_grad", "set_"})
# Significant digits of a number in an operation's arguments: enough to tell `std=0.02`
# from `std=0.01`, few enough that the text does not depend on the last bits of arithmetic.
_DIGITS = 4


@dataclass(slots=True)
class _Seen:
    """One operation the mode saw: its target tensor, its text, its draws and its replay."""

    target: torch.Tensor
    text: str
    draws: int
    function: object
    arguments: tuple[object, ...]
    keywords: dict[str, object]


def _init_functions() -> dict[CodeType, tuple[str, Callable[..., Any], inspect.Signature]]:
    """The in-place `torch.nn.init` functions by code object: name, function, signature."""
    found: dict[CodeType, tuple[str, Callable[..., Any], inspect.Signature]] = {}
    for name in dir(nn.init):
        function = getattr(nn.init, name)
        code = getattr(function, "__code__", None)
        if name.endswith("_") and not name.startswith("_") and code is not None:
            found[code] = (name, function, inspect.signature(function))
    return found


_INIT_FUNCTIONS = _init_functions()


class InitializationMode(TorchFunctionMode):
    """While a builder runs: keeps each initializing operation, with its target tensor.

    `profile` is the profile function that sees `torch.nn.init` calls; while one runs, the
    tensor operations it makes are its own and are not kept.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[_Seen] = []
        self.inside: FrameType | None = None  # the frame of the nn.init call running

    def profile(self, frame: FrameType, event: str, argument: object) -> None:
        if event == "call":
            if self.inside is None:
                found = _INIT_FUNCTIONS.get(frame.f_code)
                if found is not None:
                    self.inside = frame
                    self._init_call(frame, *found)
        elif event == "return" and frame is self.inside:
            self.inside = None

    def _init_call(
        self,
        frame: FrameType,
        name: str,
        function: Callable[..., Any],
        signature: inspect.Signature,
    ) -> None:
        values = frame.f_locals
        parameters = list(signature.parameters.values())
        target = values.get(parameters[0].name) if parameters else None
        if not isinstance(target, torch.Tensor):
            return
        given = {
            parameter.name: values[parameter.name]
            for parameter in parameters[1:]
            if parameter.name in values
            and values[parameter.name] is not parameter.default
            and not _equal_default(values[parameter.name], parameter.default)
        }
        shown = {key: value for key, value in given.items() if key != "generator"}
        text = _operation_text(name, (), shown, target)
        if given.get("generator") is not None:
            text = text[:-1] + (", " if shown else "") + "generator=a generator)"
        draws = target.numel() if name in _RANDOM_IN_PLACE else 0
        self.seen.append(_Seen(target, text, draws, function, (None,), given))

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = {} if kwargs is None else kwargs
        output = func(*args, **kwargs)
        if self.inside is not None:
            return output  # made by the nn.init call that is recorded
        name = getattr(func, "__name__", "")
        if name in _RANDOM_FACTORIES and isinstance(output, torch.Tensor):
            self.seen.append(
                _Seen(
                    output,
                    _operation_text(name, args, kwargs, None),
                    output.numel(),
                    func,
                    args,
                    kwargs,
                )
            )
        elif (
            name.endswith("_")
            and not name.startswith("_")
            and name not in _NOT_INITIALIZING
            and args
            and isinstance(args[0], torch.Tensor)
        ):
            target = args[0]
            draws = target.numel() if name in _RANDOM_IN_PLACE else 0
            self.seen.append(
                _Seen(
                    target,
                    _operation_text(name, args[1:], kwargs, target),
                    draws,
                    func,
                    (None, *args[1:]),
                    kwargs,
                )
            )
        return output


@contextmanager
def initialization_recorded() -> Iterator[InitializationMode]:
    """Watch the block (a builder's call) for initializing operations.

    The profile function set before is called as well, and put back at the end.
    """
    mode = InitializationMode()
    previous = sys.getprofile()

    def profile(frame: FrameType, event: str, argument: object) -> None:
        mode.profile(frame, event, argument)
        if previous is not None:
            previous(frame, event, argument)  # type: ignore[arg-type]

    sys.setprofile(profile)
    try:
        with mode:
            yield mode
    finally:
        sys.setprofile(previous)


def _equal_default(value: object, default: object) -> bool:
    """Whether an argument equals its default (`mode='fan_in'` passed as the default is)."""
    if default is inspect.Parameter.empty or isinstance(value, torch.Tensor):
        return False
    try:
        return bool(value == default) and type(value) is type(default)
    except Exception:  # a value whose comparison fails or is not a truth value
        return False


def initialization_records(
    model: nn.Module, mode: InitializationMode, seed: int | None
) -> InitializationRecords:
    """The steps the mode saw, named after the model's parameters and buffers.

    Operations on one tensor that follow each other make one step. Steps on tensors the
    model does not keep are left out, unless they drew random numbers.
    """
    by_object, by_storage = _tensor_names(model)
    steps: list[InitializationStep] = []
    for seen in mode.seen:
        name = by_object.get(id(seen.target))
        view = None
        if name is None:
            name, view = _view_name(seen.target, by_storage)
        if name is None:
            if not seen.draws:
                continue
            name = f"(temporary {_tensor_text(seen.target)})"
        replay = ((seen.function, seen.arguments, seen.keywords, view),)
        previous = steps[-1] if steps else None
        if previous is not None and previous.target == name and not name.startswith("("):
            steps[-1] = InitializationStep(
                name,
                (*previous.operations, seen.text),
                previous.draws + seen.draws,
                previous.replay + replay,
            )
        else:
            steps.append(InitializationStep(name, (seen.text,), seen.draws, replay))
    return InitializationRecords(tuple(steps), seed)


_View = tuple[int, tuple[int, ...], tuple[int, ...]]  # storage offset, shape, strides


def _view_name(
    tensor: torch.Tensor, by_storage: dict[object, tuple[str, torch.Tensor]]
) -> tuple[str | None, _View | None]:
    """The name of the parameter or buffer whose storage `tensor` uses: its own name when
    it is the whole tensor (`.data`, an `nn.Parameter` made from it), else the name with the
    part it is, `weight[offset=0,shape=32]` (a row zeroed for a padding index)."""
    key = _storage_key(tensor)
    found = by_storage.get(key) if key is not None else None
    if found is None:
        return None, None
    name, whole = found
    if (
        tensor.shape == whole.shape
        and tensor.storage_offset() == whole.storage_offset()
        and tensor.stride() == whole.stride()
    ):
        return name, None
    shape = "x".join(map(str, tensor.shape))
    view = (int(tensor.storage_offset()), tuple(tensor.shape), tuple(tensor.stride()))
    return f"{name}[offset={tensor.storage_offset()},shape={shape}]", view


def _tensor_names(
    model: nn.Module,
) -> tuple[dict[int, str], dict[object, tuple[str, torch.Tensor]]]:
    """Each parameter's and buffer's first full name, by object and by storage."""
    by_object: dict[int, str] = {}
    by_storage: dict[object, tuple[str, torch.Tensor]] = {}
    named = [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]
    for name, tensor in named:
        by_object.setdefault(id(tensor), name)
        key = _storage_key(tensor)
        if key is not None:
            by_storage.setdefault(key, (name, tensor))
    return by_object, by_storage


def _storage_key(tensor: torch.Tensor) -> object:
    """What identifies a tensor's storage, the same for a tensor, its `.data`, its views and
    an `nn.Parameter` made from it (on meta too: each allocation is its own storage)."""
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # tensors without a storage (subclasses)
        return None


def _tensor_text(tensor: torch.Tensor) -> str:
    return f"{dtype_name(tensor.dtype)}[{','.join(map(str, tensor.shape))}]"


def _operation_text(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], target: torch.Tensor | None
) -> str:
    """`kaiming_uniform_(a=2.236)`, `fill_(1)`, `copy_(f32[8,3])`, `randn(3, 4)`."""
    parts = [_argument_text(value, target) for value in args]
    parts += [f"{key}={_argument_text(value, target)}" for key, value in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _argument_text(value: object, target: torch.Tensor | None) -> str:
    if isinstance(value, torch.Tensor):
        return "itself" if value is target else _tensor_text(value)
    if isinstance(value, torch.Generator):
        return "a generator"
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return _number_text(value)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_argument_text(item, target) for item in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return str(value).removeprefix("torch.")
    return repr(value)


def _number_text(value: float) -> str:
    """A float with `_DIGITS` significant digits, integral ones without a point: `1`, `0.02`."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{_DIGITS}g}"
