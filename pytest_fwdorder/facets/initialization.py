"""Record how a model initializes itself while its builder runs (`initialization=True`):
the one owner of the facet.

One module holds the whole facet behind the protocol (`WatchedTraceFacet`,
calls/facet_records.py): its option, how it watches the build (`InitializationWatcher`),
the header section it writes and reads back into `WrittenStep`s, and the words for a change.
It is registered as a built-in plugin (`hookspecs.BUILTIN_PLUGINS`), so the trace, the
golden and the diff reach it through the `pytest_fwdorder_facets` hook and never name it.
torch is imported only when a trace asks for the initialization (pytest's start-up
registers this module).

    # initialization (3 steps, 544 random draws, seed 0):
    #   fc.weight kaiming_uniform_(a=2.236) 512 draws
    #   fc.bias uniform_(a=-0.1768, b=0.1768) 32 draws

**Capture.** Two public mechanisms watch the build, both removed when it ends:
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

**Comparison.** The steps are compared in order, each as (target, operations, draws); a
change names the first step that moved or changed, and how many differ.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_fwdorder.calls.facet_records import InitializationRecords, InitializationStep
from pytest_fwdorder.golden.format import SECTION_ITEM
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.hookspecs import hookimpl
from pytest_fwdorder.recording.seeding import SEED

if TYPE_CHECKING:
    import torch
    from torch import nn

    from pytest_fwdorder.calls.facet_records import TraceFacet
    from pytest_fwdorder.options import TraceOptions

TITLE = "initialization"
_TITLE_PREFIX = f"# {TITLE} ("
_DRAWS = re.compile(r" ([0-9,]+) draws?$")


class WrittenStep(NamedTuple):
    """A step as a golden gives it: `fc.weight kaiming_uniform_(a=2.236) 512 draws` is
    ("fc.weight", "kaiming_uniform_(a=2.236)", 512); draws 0 when it drew none."""

    target: str
    operations: str
    draws: int


class InitializationFacet:
    """The initialization as a facet with one value per trace: the `InitializationRecords`
    of a builder's build, watched while it runs, written as a header section, read back as
    `WrittenStep`s and compared step by step."""

    title = TITLE
    change_words = "initialization changed"
    option = "initialization"
    # Left out of a structure comparison unless `compare` names it; what it measures.
    compared_on_request = "how the model initialized itself"
    record_refusal = (
        "record(initialization=True) cannot watch the build: record takes a model "
        "already built. Pass a function that builds it to trace_forward(build, ..., "
        "initialization=True), or leave initialization off for this recording"
    )

    def built_model_refusal(self, model_type: str) -> str:
        """What `trace_forward` says when given a model already built, not a builder."""
        return (
            f"initialization=True needs the build to run under watch, but trace_forward "
            f"got a model already built ({model_type}): pass a function that "
            "builds it, trace_forward(lambda: MyModel(), x, initialization=True)"
        )

    def watcher(self, options: TraceOptions) -> InitializationWatcher:
        return InitializationWatcher()

    def header_lines(self, value: InitializationRecords) -> list[str]:
        """The header's section: a title with the totals, then one step a line."""
        return render_initialization(value)

    def read_header(self, header: Sequence[str]) -> tuple[WrittenStep, ...] | None:
        """The section's steps, or None when the golden has no initialization section."""
        steps = GoldenHeader.sections_of(header).get(TITLE)
        return None if steps is None else tuple(map(read_step, steps))

    def describe_changes(
        self, old: tuple[WrittenStep, ...], new: tuple[WrittenStep, ...]
    ) -> list[str]:
        """One sentence, for the first step that moved or changed; [] when none did."""
        return [] if old == new else [describe_initialization_change(old, new)]


INITIALIZATION = InitializationFacet()


@hookimpl
def pytest_fwdorder_facets() -> list[TraceFacet]:
    """The initialization facet."""
    return [INITIALIZATION]


class InitializationWatcher:
    """Watches a builder's build (`building`, around each try) and names what it saw once
    the trace ends (a `TraceWatcher`, calls/facet_records.py); the trace itself it leaves
    alone."""

    def __init__(self) -> None:
        self.watch: InitializationWatch | None = None  # the last build's that returned
        self.model: nn.Module | None = None

    @contextmanager
    def building(self) -> Iterator[None]:
        """The build watched for initializing operations; a build that raised is forgotten
        (on meta a builder is called again, and the try that returned counts)."""
        with initialization_recorded() as watch:
            yield
        self.watch = watch

    def watching(self) -> nullcontext[None]:
        return nullcontext()

    def started(self, recorder: object) -> None:
        """Nothing to read from the recorder: the build is over."""

    def forward_ran(self, model: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        """The model the build made, whose parameters and buffers name the steps."""
        self.model = model

    def value(self) -> InitializationRecords | None:
        if self.watch is None or self.model is None:
            return None
        return initialization_records(self.model, self.watch, SEED)


def render_initialization(records: InitializationRecords) -> list[str]:
    """`# initialization (3 steps, 544 random draws, seed 0):`, then `#   ` and one step a
    line: its target, its operations and its draws (`fc.weight kaiming_uniform_(a=2.236) 512
    draws`)."""
    count = len(records.steps)
    seed = f", seed {records.seed}" if records.seed is not None else ""
    title = (
        f"{_TITLE_PREFIX}{count} step{'s' if count != 1 else ''}, "
        f"{records.draws:,} random draw{'s' if records.draws != 1 else ''}{seed})"
    )
    lines = [title + (":" if records.steps else "")]
    for step in records.steps:
        draws = f" {step.draws:,} draw{'s' if step.draws != 1 else ''}" if step.draws else ""
        lines.append(f"{SECTION_ITEM}{step.target} {' '.join(step.operations)}{draws}")
    return lines


def read_step(step: str) -> WrittenStep:
    """A step line (without `#   `) as `render_initialization` writes it."""
    match = _DRAWS.search(step)
    draws = int(match.group(1).replace(",", "")) if match else 0
    body = step[: match.start()] if match else step
    if body.startswith("(temporary "):  # `(temporary f32[3,3]) randn(3, 3)`
        end = body.index(")") + 1
        return WrittenStep(body[:end], body[end:].strip(), draws)
    target, _, operations = body.partition(" ")
    return WrittenStep(target, operations, draws)


def describe_initialization_change(old: Sequence[WrittenStep], new: Sequence[WrittenStep]) -> str:
    """The first initialization step that moved or changed, in words, and how many differ:
    `initialization order changed: b.weight now before a.weight; every later draw shifted`."""
    first = next(
        (number for number, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )
    differing = sum(
        1 for number in range(max(len(old), len(new)))
        if number >= len(old) or number >= len(new) or old[number] != new[number]
    )  # fmt: skip
    tail = f" ({differing} of {len(new)} steps differ from step {first + 1} on)"
    if first >= len(old):
        return f"initialization step added at the end: {_step_text(new[first])}{tail}"
    if first >= len(new):
        return f"initialization step removed at the end: {_step_text(old[first])}{tail}"
    before, after = old[first], new[first]
    old_later = {step.target for step in old[first + 1 :]}
    new_later = {step.target for step in new[first + 1 :]}
    shifted = (
        "; every later draw shifted"
        if any(step.draws for step in new[first:]) and (before.draws or after.draws)
        else ""
    )
    if before.target == after.target:
        draws = (
            f", {before.draws:,} -> {after.draws:,} draws" if before.draws != after.draws else ""
        )
        return (
            f"initialization of {after.target} changed: {before.operations} -> "
            f"{after.operations}{draws}{shifted}{tail}"
        )
    if after.target in old_later and before.target in new_later:
        return (
            f"initialization order changed: {after.target} now before {before.target}"
            f"{shifted}{tail}"
        )
    if before.target in new_later:
        return (
            f"initialization step added: {_step_text(after)} before {before.target}{shifted}{tail}"
        )
    if after.target in old_later:
        return f"initialization step removed: {_step_text(before)}{shifted}{tail}"
    return (
        f"initialization step {first + 1} changed: {_step_text(before)} -> "
        f"{_step_text(after)}{shifted}{tail}"
    )


def _step_text(step: WrittenStep) -> str:
    return f"{step.target} {step.operations}"


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


@functools.cache
def _init_functions() -> dict[int, tuple[str, Callable[..., Any], inspect.Signature]]:
    """The in-place `torch.nn.init` functions by the id of their code object (a code
    object's hash is computed anew at each lookup, and this one runs at every Python call
    of a build; `nn.init` keeps the code objects alive): name, function, signature."""
    from torch import nn

    found: dict[int, tuple[str, Callable[..., Any], inspect.Signature]] = {}
    for name in dir(nn.init):
        function = getattr(nn.init, name)
        code = getattr(function, "__code__", None)
        if name.endswith("_") and not name.startswith("_") and code is not None:
            found[id(code)] = (name, function, inspect.signature(function))
    return found


@functools.cache
def _mode_type() -> type[Any]:
    """A `TorchFunctionMode` that hands each torch function to an `InitializationWatch`:
    made on first use, so that importing this module imports no torch."""
    from torch.overrides import TorchFunctionMode

    class WatchMode(TorchFunctionMode):
        def __init__(self, watch: InitializationWatch) -> None:
            super().__init__()
            self.watch = watch

        def __torch_function__(
            self,
            func: Callable[..., Any],
            types: object,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            return self.watch.torch_function(func, args, {} if kwargs is None else kwargs)

    return WatchMode


class InitializationWatch:
    """While a builder runs: keeps each initializing operation, with its target tensor.

    `profile` is the profile function that sees `torch.nn.init` calls; while one runs, the
    tensor operations it makes are its own and are not kept. `torch_function` sees every
    other torch function, through the mode `initialization_recorded` enters.
    """

    def __init__(self) -> None:
        import torch

        self.tensor_type = torch.Tensor
        self.init_functions = _init_functions()
        self.seen: list[_Seen] = []
        self.inside: FrameType | None = None  # the frame of the nn.init call running

    def profile(self, frame: FrameType, event: str, argument: object) -> None:
        if event == "call":
            if self.inside is None:
                found = self.init_functions.get(id(frame.f_code))
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
        if not isinstance(target, self.tensor_type):
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

    def torch_function(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run `func`, keeping it when it initializes a tensor (in place, or a random one)."""
        output = func(*args, **kwargs)
        if self.inside is not None:
            return output  # made by the nn.init call that is recorded
        name = getattr(func, "__name__", "")
        if name in _RANDOM_FACTORIES and isinstance(output, self.tensor_type):
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
            and isinstance(args[0], self.tensor_type)
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
def initialization_recorded() -> Iterator[InitializationWatch]:
    """Watch the block (a builder's call) for initializing operations.

    The profile function set before is called as well, and put back at the end.
    """
    watch = InitializationWatch()
    mode = _mode_type()(watch)
    previous = sys.getprofile()

    def profile(frame: FrameType, event: str, argument: object) -> None:
        watch.profile(frame, event, argument)
        if previous is not None:
            previous(frame, event, argument)  # type: ignore[arg-type]

    sys.setprofile(profile)
    try:
        with mode:
            yield watch
    finally:
        sys.setprofile(previous)


def _equal_default(value: object, default: object) -> bool:
    """Whether an argument equals its default (`mode='fan_in'` passed as the default is)."""
    import torch

    if default is inspect.Parameter.empty or isinstance(value, torch.Tensor):
        return False
    try:
        return bool(value == default) and type(value) is type(default)
    except Exception:  # a value whose comparison fails or is not a truth value
        return False


def initialization_records(
    model: nn.Module, watch: InitializationWatch, seed: int | None
) -> InitializationRecords:
    """The steps the watch saw, named after the model's parameters and buffers.

    Operations on one tensor that follow each other make one step. Steps on tensors the
    model does not keep are left out, unless they drew random numbers.
    """
    by_object, by_storage = _tensor_names(model)
    steps: list[InitializationStep] = []
    for seen in watch.seen:
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
    from pytest_fwdorder.recording.describe import dtype_name

    return f"{dtype_name(tensor.dtype)}[{','.join(map(str, tensor.shape))}]"


def _operation_text(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], target: torch.Tensor | None
) -> str:
    """`kaiming_uniform_(a=2.236)`, `fill_(1)`, `copy_(f32[8,3])`, `randn(3, 4)`."""
    parts = [_argument_text(value, target) for value in args]
    parts += [f"{key}={_argument_text(value, target)}" for key, value in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _argument_text(value: object, target: torch.Tensor | None) -> str:
    import torch

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
