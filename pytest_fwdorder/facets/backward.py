"""Record the order of the backward pass (`backward=True`): the one owner of the facet.

One module holds the whole facet behind the protocol (`TraceFacet`, calls/facet_records.py):
its option, how it watches a trace (`BackwardRecorder`), the header line and the section
after the calls it writes and reads back, and the words for a change. It is registered as a
built-in plugin (`hookspecs.BUILTIN_PLUGINS`), so the trace, the golden and the diff reach
it through the `pytest_fwdorder_facets` hook and never name it. torch is imported only when
a trace asks for backward (pytest's start-up registers this module).

    # backward: 4 steps, from the sum of the output's floating tensors
    ...
    backward:
      <root>: Sequential <- f32[3,2]
        2: Linear <- f32[3,2]
        1: ReLU <- f32[3,8]
        0: Linear <- f32[3,8]

Through the autograd graph, not module backward hooks. torch's global full backward hooks
wrap every module's inputs and outputs in `BackwardHookFunction`, which changes forward:
an in-place operation on a module's output then fails (ResNet's `ReLU(inplace=True)` after
a BatchNorm). Instead, a global forward hook (registered only while backward is recorded)
puts a pre-hook on the `grad_fn` of each call's output tensors; the pre-hook fires when the
gradient of that output arrives, which is when the call's backward starts. Forward runs
exactly as it would. Calls whose outputs share one node (a `Sequential` and its last layer)
are listed outermost first.

Backward runs with `torch.autograd.grad` on the model's parameters (and inputs) that
require grad, so no `.grad` is accumulated anywhere; `.grad` of every parameter is saved
and put back all the same. Modules that run forward during backward (activation
checkpointing's recomputation, `torch.utils.checkpoint` with `use_reentrant=False`) are
recorded as recomputed steps, and set aside from the forward calls.

The hooks this module installs, each removed when its block ends: the global forward hook
(`watching`), a pre-hook on each output's `grad_fn`, and, while backward runs
(`forward_ran`), a global forward pre-hook and post-hook that see the recomputed calls. The
recorder's own hooks (recorder.py) record the forward calls these refer to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.calls.facet_records import BackwardRecords, BackwardStep
from pytest_fwdorder.golden.format import render_value
from pytest_fwdorder.golden.parse import end_section
from pytest_fwdorder.hookspecs import hookimpl

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import nn

    from pytest_fwdorder.calls.facet_records import TraceFacet
    from pytest_fwdorder.calls.records import TraceRecords
    from pytest_fwdorder.options import TraceOptions
    from pytest_fwdorder.recording.recorder import Recorder

TITLE = "backward"
GRADIENT_ARROW = " <- "  # a step: `fc: Linear <- f32[2,4]`, the gradient that arrived
RECOMPUTED_PREFIX = "recomputed "


class BackwardFacet:
    """The backward order as a facet with one value per trace: the `BackwardRecords` of a
    trace, watched while it runs, written as a header line and a section after the calls,
    read back as that section's step lines and compared as text."""

    title = TITLE
    # The same words as the review's count of its steps (`backward steps changed`, from
    # `change_noun`), so that the summary, `explained_counts` and the review agree.
    change_words = "backward steps changed"
    change_noun = "backward step"
    option = "backward"

    def watcher(self, options: TraceOptions) -> BackwardRecorder:
        return BackwardRecorder(options.backward)

    def header_lines(self, value: BackwardRecords) -> list[str]:
        return []  # its header line is among what the trace recorded: `summary_lines`

    def summary_lines(self, value: BackwardRecords) -> list[str]:
        """`# backward: 4 steps, from the sum of the output's floating tensors`."""
        steps = f"{len(value.steps)} step{'s' if len(value.steps) != 1 else ''}"
        if value.loss.startswith("sum "):
            return [f"# {TITLE}: {steps}, from the {value.loss}"]
        return [f"# {TITLE}: {steps}, from {value.loss}(output)"]

    def types_renamed(
        self, value: BackwardRecords, type_names: Mapping[str, str]
    ) -> BackwardRecords:
        """The steps with their module classes renamed, `Tanh` as `ReLU`: the section names
        each step's class."""
        steps = tuple(
            replace(step, module_type=type_names.get(step.module_type, step.module_type))
            for step in value.steps
        )
        return replace(value, steps=steps)

    def end_lines(
        self, value: BackwardRecords, trace: TraceRecords, counts: dict[str, int]
    ) -> list[str]:
        """`backward:`, then one line per step in order.

        A step is the gradient of a call's output arriving, `fc: Linear <- f32[2,4]`
        (indented as the call is in forward, `#2` for a module called more than once), or
        a module run again to recompute activations, `recomputed block.0: Linear`.
        """
        annotations = trace.options.annotations
        lines = [f"{TITLE}:"]
        for step in value.steps:
            indent = "  " * step.depth
            name = step.path or "<root>"
            if step.recomputed:
                lines.append(f"{indent}{RECOMPUTED_PREFIX}{name}: {step.module_type}")
                continue
            nth = f" #{step.nth}" if counts.get(step.path, 0) > 1 else ""
            gradient = render_value(step.gradient, annotations)
            lines.append(f"{indent}{name}: {step.module_type}{nth}{GRADIENT_ARROW}{gradient}")
        return lines

    def read_header(self, header: Sequence[str]) -> tuple[str, ...] | None:
        """The section's step lines as written, or None when the golden has no section."""
        steps = end_section(header, TITLE)
        return None if steps is None else tuple(steps)

    def describe_changes(self, old: tuple[str, ...], new: tuple[str, ...]) -> list[str]:
        """One sentence per run of steps that differs, compared as text, each numbered in the
        order that has it: a changed step in the new order (`step 3 of 4: 1: ReLU <- f32[3,8]
        -> 1: Tanh <- f32[3,8]`), a removed one in the old (`step 3 of 4 removed: ...`), an
        inserted one in the new (`step 4 of 5 inserted: ...`)."""
        from pytest_fwdorder.diff.ordered_pairing import changed_runs

        if old == new:
            return []
        sentences = []
        for tag, old_start, old_end, new_start, new_end in changed_runs(old, new):
            before = _joined(old[old_start:old_end])
            after = _joined(new[new_start:new_end])
            if tag == "delete":
                sentences.append(f"{_numbered(old_start, old_end, len(old))} removed: {before}")
            elif tag == "insert":
                sentences.append(f"{_numbered(new_start, new_end, len(new))} inserted: {after}")
            else:
                sentences.append(f"step {new_start + 1} of {len(new)}: {before} -> {after}")
        return sentences


def _joined(steps: Sequence[str]) -> str:
    """Steps of a run as one phrase: `2: Linear <- f32[3,2] / 1: ReLU <- f32[3,8]`."""
    return " / ".join(line.strip() for line in steps)


def _numbered(start: int, end: int, total: int) -> str:
    """`step 3 of 4` for one step of an order, `steps 2-3 of 4` for a run of them."""
    if end - start == 1:
        return f"step {start + 1} of {total}"
    return f"steps {start + 1}-{end} of {total}"


BACKWARD = BackwardFacet()


@hookimpl
def pytest_fwdorder_facets() -> list[TraceFacet]:
    """The backward facet."""
    return [BACKWARD]


SUMMED_OUTPUT = "sum of the output's floating tensors"


def loss_description(loss: object) -> str:
    """How the golden header names what backward started from."""
    if loss is True or loss is None:
        return SUMMED_OUTPUT
    name = getattr(loss, "__qualname__", None) or type(loss).__name__
    return str(name)


@dataclass(slots=True, eq=False)  # waits are told apart by identity
class _Waiting:
    """A call whose output's gradient has not arrived yet: where to read it, how to show it."""

    number: int
    output_number: int
    path: str
    module_type: str
    nth: int
    depth: int


class BackwardRecorder:
    """Watches forward for the autograd nodes of each call's outputs, then runs backward (a
    `TraceWatcher`, calls/facet_records.py)."""

    def __init__(self, loss: object) -> None:
        # torch only now that a trace asks for backward; the hooks below run per call.
        from pytest_fwdorder.recording.describe import describe_value, tensors_of

        self.describe_value = describe_value
        self.tensors_of = tensors_of
        self.loss = loss
        self.recorder: Recorder | None = None
        self.in_backward = False
        self.waiting: dict[Any, list[_Waiting]] = {}
        self.handles: list[Any] = []
        self.arrived: set[int] = set()
        self.steps: list[BackwardStep] = []
        self.recompute_depth: list[int] = []

    @contextmanager
    def watching(self) -> Iterator[BackwardRecorder]:
        """Register the forward hook that finds each call's output nodes.

        Entered before the recorder's hooks: global forward hooks run in the order they
        were registered, so this one sees the recorder's call still open.
        """
        from torch.nn.modules.module import register_module_forward_hook

        handle = register_module_forward_hook(self._after_forward)
        try:
            yield self
        finally:
            handle.remove()
            for node_handle in self.handles:
                node_handle.remove()
            self.handles.clear()
            self.waiting.clear()

    def started(self, recorder: Recorder) -> None:
        """The recorder whose open calls the forward hook reads."""
        self.recorder = recorder

    def forward_context(self) -> AbstractContextManager[object]:
        """Grad enabled for the forward, whatever the caller's mode: backward needs a graph."""
        import torch

        return torch.enable_grad()

    def _after_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        recorder = self.recorder
        if recorder is None or self.in_backward:
            return
        open_calls = recorder.open_calls
        if not open_calls or open_calls[-1].module is not module:
            return
        record = open_calls[-1]
        for tensor in self.tensors_of(output):
            node = tensor.grad_fn
            if node is None:
                continue
            waiting = self.waiting.get(node)
            if waiting is None:
                waiting = self.waiting[node] = []
                self.handles.append(node.register_prehook(self._gradient_arrived(node)))
            entry = record.entry
            waiting.append(
                _Waiting(
                    record.number,
                    tensor.output_nr,
                    entry.path,
                    entry.module_type,
                    record.nth,
                    record.depth + 1,
                )
            )

    def _gradient_arrived(self, node: Any) -> Callable[[tuple[Any, ...]], None]:
        def prehook(gradients: tuple[Any, ...]) -> None:
            # Registered innermost call first (its forward ended first); outermost first here.
            for waiting in reversed(self.waiting.get(node, ())):
                if waiting.number in self.arrived:
                    continue
                self.arrived.add(waiting.number)
                gradient = (
                    gradients[waiting.output_number]
                    if waiting.output_number < len(gradients)
                    else None
                )
                self.steps.append(
                    BackwardStep(
                        path=waiting.path,
                        module_type=waiting.module_type,
                        nth=waiting.nth,
                        depth=waiting.depth,
                        call_index=waiting.number,
                        gradient=self.describe_value(gradient),
                    )
                )

        return prehook

    def forward_ran(self, root: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        """Run backward from `output` and record its steps; `.grad` fields are left as they were."""
        import torch
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        recorder = self.recorder
        assert recorder is not None  # given by `started` before forward runs
        loss = self._loss_of(output)
        if callable(self.loss) and not isinstance(loss, torch.Tensor):
            name = getattr(self.loss, "__qualname__", repr(self.loss))
            raise TypeError(
                f"backward={name} returned {type(loss).__name__}, not a tensor: the loss "
                "function must return the tensor to run backward from (a scalar)"
            )
        if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
            return  # nothing in the output requires grad: there is no backward to record
        leaves: list[torch.Tensor] = [
            parameter for parameter in root.parameters() if parameter.requires_grad
        ]
        leaves += [
            tensor for tensor in self.tensors_of(inputs) if tensor.requires_grad and tensor.is_leaf
        ]
        if not leaves:
            return
        saved = [(parameter, parameter.grad) for parameter in root.parameters()]
        kept, counts = len(recorder.records), dict(recorder.call_counts)
        self.in_backward = True
        try:
            with ExitStack() as stack:
                pre = register_module_forward_pre_hook(self._recomputing)
                stack.callback(pre.remove)
                post = register_module_forward_hook(self._recomputed, always_call=True)
                stack.callback(post.remove)
                torch.autograd.grad(loss, leaves, allow_unused=True)
        finally:
            self.in_backward = False
            # Calls made during backward (recomputation) are steps of it, not forward calls.
            recorder.forget_calls_after(kept, counts)
            for parameter, gradient in saved:
                if parameter.grad is not gradient:
                    parameter.grad = gradient

    def _loss_of(self, output: Any) -> Any:
        if callable(self.loss):
            return self.loss(output)
        floating = [
            tensor
            for tensor in self.tensors_of(output)
            if tensor.is_floating_point() or tensor.is_complex()
        ]
        if not floating:
            return None
        total = floating[0].float().sum()
        for tensor in floating[1:]:
            total = total + tensor.float().sum()
        return total

    def _recomputing(self, module: nn.Module, args: Any) -> None:
        recorder = self.recorder
        if recorder is None:
            return
        entry = recorder.entries.get(id(module))
        if entry is None:
            return
        base = self.steps[-1].depth + 1 if self.steps and not self.recompute_depth else 1
        if self.recompute_depth:
            base = self.recompute_depth[-1] + 1
        self.recompute_depth.append(base)
        self.steps.append(
            BackwardStep(
                path=entry.path,
                module_type=entry.module_type,
                nth=0,
                depth=base,
                recomputed=True,
            )
        )

    def _recomputed(self, module: nn.Module, args: Any, output: Any) -> None:
        recorder = self.recorder
        if recorder is not None and id(module) in recorder.entries and self.recompute_depth:
            self.recompute_depth.pop()

    def value(self) -> BackwardRecords:
        """What backward started from, and its steps in order."""
        return BackwardRecords(loss_description(self.loss), tuple(self.steps))
