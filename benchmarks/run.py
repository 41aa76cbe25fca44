"""pytest-fwdorder benchmarks: every figure side by side in one run, medians over rounds.

    python benchmarks/run.py            # the full suite (about 13 minutes on 2 cores)
    python benchmarks/run.py --smoke    # each benchmark once at tiny sizes (the test suite runs this)

Timings are medians of interleaved rounds (bare, floor and traced alternate), so a noisy
neighbour slows all of them alike and the ratios stay meaningful. Cases that need their own
memory figure (ViT-H/14 on CPU, the 7B-shaped decoder on meta) run in a child process that
reports its own wall time and peak resident memory; the heap a trace keeps per call is
measured in a fresh child process per size, so it does not depend on what ran before it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.util
import io
import json
import operator
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torchvision
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import (
    Decoder,
    TinyGPT2,
    deep_copied_batch_norms,
    rebuilt_after_deep_copy,
    tiny_modules,
)
from scale import PAIRS as SCALE_PAIRS
from scale import TARGETS as LINEAR_TARGETS
from scale import linear_time, suite
from torch.nn.modules import module as torch_module
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from pytest_fwdorder import TensorSpec, diff_golden, trace_forward
from pytest_fwdorder.calls.records import Call
from pytest_fwdorder.calls.value_descriptions import LiteralDescription, TensorDescription
from pytest_fwdorder.diff.diffing import diff_lines
from pytest_fwdorder.facets.shape_keys import shape_key
from pytest_fwdorder.golden.garbage_collection import without_garbage_collection
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.recording import model_index, model_state, numpy_random
from pytest_fwdorder.recording import recorder as recorder_module
from pytest_fwdorder.recording.module_facts import module_facts
from pytest_fwdorder.recording.torch_call_frames import WRAPPED_CALL_FRAME_CODE, forget_keyword_flag
from pytest_fwdorder.trace import Trace


@dataclass
class Row:
    section: str
    case: str
    value: str
    ratio: str = ""
    target: str = ""
    met: str = ""


def interleaved_medians(
    candidates: dict[str, Callable[[], object]], rounds: int
) -> dict[str, float]:
    """Median seconds of each candidate, the candidates alternating within every round."""
    for run in candidates.values():  # warm-up: first-call allocations, lazy imports
        run()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for round_index in range(rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            start = time.perf_counter()
            candidates[name]()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


@contextlib.contextmanager
def hooks_doing(before: Callable[..., None], after: Callable[..., None]):  # type: ignore[no-untyped-def]
    """torch's two global module hooks, as the recorder installs them, running `before` and
    `after`: with hooks doing nothing, the dispatch floor of a global-hook recorder; with
    hooks doing only what one guarantee needs, the floor of that guarantee."""
    pre = torch_module.register_module_forward_pre_hook(before)
    post = torch_module.register_module_forward_hook(after, with_kwargs=True, always_call=True)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
        # torch leaves the with_kwargs flag behind; left there, the fast path stays off.
        forget_keyword_flag(post.id)


def global_noop_hooks():  # type: ignore[no-untyped-def]
    """The floor: installing two global hooks costs microseconds; what is measured is the
    slow path every module call then takes."""
    return hooks_doing(lambda module, args: None, lambda module, args, kwargs, output: None)


def tiny_decoder() -> tuple[nn.Module, torch.Tensor]:
    """The GPT-2-shaped 2-layer decoder and 16 tokens: Hugging Face's tiny test configs."""
    return TinyGPT2().eval(), torch.randint(0, 1000, (1, 16))


def every_module_facts(model: nn.Module) -> list[object]:
    """What a trace spends on the golden's facets: the facts of every module, once each."""
    return [module_facts(module) for module in model.modules()]


@dataclass(frozen=True)
class OverheadTarget:
    """Issue 37's target for an overhead row: traced / bare, or microseconds per call above
    the floor (where the forward is so cheap that a ratio says more about the model)."""

    traced_over_bare: float | None = None
    us_per_call: float | None = None

    def text(self) -> str:
        if self.us_per_call is not None:
            return f"<= {self.us_per_call:g} us per call"
        return f"<= {self.traced_over_bare}"

    def met(self, ratio: float, us_per_call: float) -> bool:
        if self.us_per_call is not None:
            return us_per_call <= self.us_per_call
        return self.traced_over_bare is not None and ratio <= self.traced_over_bare


# Issue 37's targets for `costs=True` / a plain trace, by case.
COSTS_TARGETS = {"ResNet-50, 1x3x224x224": 1.15, "tiny modules, 801 calls": 1.6}


def overhead(smoke: bool) -> list[Row]:
    rows = []
    cases = [
        (
            "ResNet-50, 1x3x224x224",
            torchvision.models.resnet50(weights=None).eval(),
            torch.randn(1, 3, 224, 224),
            OverheadTarget(traced_over_bare=1.04),
            15,
        ),
        (
            "tiny modules, 801 calls",
            tiny_modules(400).eval(),
            torch.randn(1, 16),
            OverheadTarget(us_per_call=20),
            41,
        ),
        (
            "GPT-2-shaped decoder, 2 layers, 1x16 tokens",
            *tiny_decoder(),
            OverheadTarget(us_per_call=50),
            41,
        ),
    ]
    if smoke:
        cases = [
            (
                "ResNet-18, 1x3x32x32",
                torchvision.models.resnet18(weights=None).eval(),
                torch.randn(1, 3, 32, 32),
                OverheadTarget(traced_over_bare=1.04),
                1,
            ),
            (
                "tiny modules, 41 calls",
                tiny_modules(20).eval(),
                torch.randn(1, 16),
                OverheadTarget(us_per_call=20),
                1,
            ),
            (
                "GPT-2-shaped decoder, 2 layers, 1x16 tokens",
                *tiny_decoder(),
                OverheadTarget(us_per_call=50),
                1,
            ),
        ]
    for name, model, inputs, target, rounds in cases:
        calls = len(trace_forward(model, inputs))

        def bare(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad():
                return model(inputs)

        def floor(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with global_noop_hooks(), torch.no_grad():
                return model(inputs)

        def traced(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad():
                return trace_forward(model, inputs)

        def facts(model: nn.Module = model) -> object:
            return every_module_facts(model)

        medians = interleaved_medians(
            {"bare": bare, "floor": floor, "traced": traced, "facts": facts}, rounds
        )
        ratio = medians["traced"] / medians["bare"]
        above_floor = (medians["traced"] - medians["floor"]) / calls * 1e6
        rows += [
            Row("overhead", f"{name}: bare forward", f"{medians['bare'] * 1e3:.1f} ms"),
            Row(
                "overhead",
                f"{name}: global no-op hooks (floor)",
                f"{medians['floor'] * 1e3:.1f} ms",
                f"{medians['floor'] / medians['bare']:.3f}",
            ),
            Row(
                "overhead",
                f"{name}: trace_forward ({above_floor:.1f} us per call above the floor)",
                f"{medians['traced'] * 1e3:.1f} ms",
                f"{ratio:.3f}",
                target.text(),
                "yes" if target.met(ratio, above_floor) else "NO",
            ),
            Row(
                "overhead",
                f"{name}: of which the facets' module facts, every module once",
                f"{medians['facts'] * 1e3:.2f} ms",
                f"{medians['facts'] / medians['bare']:.3f}",
            ),
        ]
    return rows


def option_cases(smoke: bool) -> list[tuple[str, nn.Module, torch.Tensor, int]]:
    """The models a trace option is timed on, against the same trace without it: ResNet-50
    (convolutions dominate) and 801 tiny modules (the recorder dominates), with their rounds."""
    if smoke:
        return [
            (
                "ResNet-18, 1x3x32x32",
                torchvision.models.resnet18(weights=None).eval(),
                torch.randn(1, 3, 32, 32),
                1,
            ),
            ("tiny modules, 41 calls", tiny_modules(20).eval(), torch.randn(1, 16), 1),
        ]
    return [
        (
            "ResNet-50, 1x3x224x224",
            torchvision.models.resnet50(weights=None).eval(),
            torch.randn(1, 3, 224, 224),
            15,
        ),
        ("tiny modules, 801 calls", tiny_modules(400).eval(), torch.randn(1, 16), 41),
    ]


class RunOnlyMode(TorchDispatchMode):  # type: ignore[misc]
    """A dispatch mode that only runs each operation, written as the costs facet's mode
    runs one (no dynamo wrapper, the operation's C entry): the least any FLOP count through
    a dispatch mode can cost."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(  # type: ignore[no-untyped-def]
        self, func, types, args=(), kwargs=None
    ):
        run = getattr(func, "_op", func)
        return run(*args, **kwargs) if kwargs else run(*args)


class LeastCountingMode(RunOnlyMode):
    """The FLOPs `costs=True` gives, counted by the least Python that gives them: each
    operation's formula found once per overload, its figure worked out once per set of
    shapes in the process and added to one total. No calls to give the FLOPs to, no
    uncounted operations, no saved bytes: what counting through a dispatch mode pays at its
    least. Its total is FlopCounterMode's (tests/test_benchmarks.py)."""

    figures: ClassVar[dict[tuple[object, ...], int]] = {}  # for the process, as the facet's

    def __init__(self) -> None:
        super().__init__()
        self.formulas: dict[object, Callable[..., int] | None] = {}
        self.flops = 0

    def __torch_dispatch__(  # type: ignore[no-untyped-def]
        self, func, types, args=(), kwargs=None
    ):
        run = getattr(func, "_op", func)
        output = run(*args, **kwargs) if kwargs else run(*args)
        formula = self.formulas.get(func, False)
        if formula is False:
            formula = self.formulas[func] = flop_registry.get(func._overloadpacket)
        if formula is not None:
            keyed_kwargs = shape_key(kwargs) if kwargs else None
            key = (func, shape_key(args), keyed_kwargs, shape_key(output))
            flops = self.figures.get(key)
            if flops is None:
                flops = self.figures[key] = formula(*args, **(kwargs or {}), out_val=output)
            self.flops += flops
        return output


def costs(smoke: bool) -> list[Row]:
    """`costs=True` against `costs=False`, the two alternating in the same rounds, and what
    counting costs at its least: torch's own FlopCounterMode, and a dispatch mode that only
    runs each operation, each around a bare forward."""
    rows = []
    for name, model, inputs, rounds in option_cases(smoke):

        def without(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad():
                return trace_forward(model, inputs)

        def counted(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad():
                return trace_forward(model, inputs, costs=True)

        def bare(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad():
                return model(inputs)

        def flop_counter(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad(), FlopCounterMode(display=False):
                return model(inputs)

        def run_only(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad(), RunOnlyMode():
                return model(inputs)

        def least_counting(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad(), LeastCountingMode():
                return model(inputs)

        medians = interleaved_medians(
            {
                "without": without,
                "costs": counted,
                "bare": bare,
                "flop counter": flop_counter,
                "run only": run_only,
                "least counting": least_counting,
            },
            rounds,
        )
        ratio, target = medians["costs"] / medians["without"], COSTS_TARGETS.get(name)

        def with_mode_cost(mode: str, medians: dict[str, float] = medians) -> float:
            """The ratio's own least: a plain trace and what `mode` adds to a bare forward."""
            return (medians["without"] + medians[mode] - medians["bare"]) / medians["without"]

        rows += [
            Row("costs", f"{name}: trace_forward", f"{medians['without'] * 1e3:.1f} ms"),
            Row(
                "costs",
                f"{name}: trace_forward(costs=True), ratio to costs=False",
                f"{medians['costs'] * 1e3:.1f} ms",
                f"{ratio:.2f}",
                f"<= {target}" if target else "",
                ("yes" if ratio <= target else "NO") if target else "",
            ),
            Row("costs", f"{name}: bare forward", f"{medians['bare'] * 1e3:.1f} ms"),
            Row(
                "costs",
                f"{name}: least: FlopCounterMode alone, ratio to the bare forward",
                f"{medians['flop counter'] * 1e3:.1f} ms",
                f"{medians['flop counter'] / medians['bare']:.2f}",
            ),
            Row(
                "costs",
                f"{name}: least: a dispatch mode that only runs each operation, ratio to the "
                "bare forward",
                f"{medians['run only'] * 1e3:.1f} ms",
                f"{medians['run only'] / medians['bare']:.2f}",
            ),
            Row(
                "costs",
                f"{name}: least: a dispatch mode that counts each operation's FLOPs, each "
                "figure kept by shapes, ratio to the bare forward",
                f"{medians['least counting'] * 1e3:.1f} ms",
                f"{medians['least counting'] / medians['bare']:.2f}",
            ),
            Row(
                "costs",
                f"{name}: trace_forward(costs=True) at its least, ratio to costs=False: the "
                "floor (only running each operation) / the least counting",
                "",
                f"{with_mode_cost('run only'):.2f} / {with_mode_cost('least counting'):.2f}",
            ),
        ]
    return rows


def compile_gates(smoke: bool) -> list[Row]:
    """`graph_breaks=True` and `assert_export_matches_eager` against a plain trace: one round
    each, since compiling dominates and dynamo's caches are emptied for every trace."""
    from pytest_fwdorder import assert_export_matches_eager

    cases = [
        (
            "ResNet-18, 1x3x64x64",
            torchvision.models.resnet18(weights=None).eval(),
            torch.randn(1, 3, 64, 64),
        ),
        ("GPT-2-shaped 2-layer decoder", *tiny_decoder()),
    ]
    if smoke:
        cases = [("tiny modules, 11 calls", tiny_modules(5).eval(), torch.randn(1, 16))]
    # Importing dynamo and export's first set-up happen once per process: not in any row.
    warm_up = tiny_modules(2).eval()
    trace_forward(warm_up, torch.randn(1, 16), graph_breaks=True)
    assert_export_matches_eager(warm_up, torch.randn(1, 16))
    rows = []
    for name, model, inputs in cases:
        trace_forward(model, inputs)  # the plain trace's first call, as the others had theirs

        def plain(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            return trace_forward(model, inputs)

        def compiled(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            return trace_forward(model, inputs, graph_breaks=True)

        def exported(model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            return assert_export_matches_eager(model, inputs)

        medians = interleaved_medians(
            {"plain": plain, "compiled": compiled, "exported": exported}, 1
        )
        rows += [
            Row("compile", f"{name}: trace_forward", f"{medians['plain'] * 1e3:.0f} ms"),
            Row(
                "compile",
                f"{name}: trace_forward(graph_breaks=True), ratio to a plain trace",
                f"{medians['compiled']:.1f} s",
                f"{medians['compiled'] / medians['plain']:.0f}",
            ),
            Row(
                "compile",
                f"{name}: assert_export_matches_eager (strict=False), ratio to a plain trace",
                f"{medians['exported']:.1f} s",
                f"{medians['exported'] / medians['plain']:.0f}",
            ),
        ]
    return rows


def direct_forwards(smoke: bool) -> list[Row]:
    """The watch for forwards run without a call: `direct_forwards` "off", "watch" (the
    default) and "profile", alternating in the same rounds."""
    rows = []
    for name, model, inputs, rounds in option_cases(smoke):

        def traced(mode: str, model: nn.Module = model, inputs: torch.Tensor = inputs) -> object:
            with torch.no_grad():
                return trace_forward(model, inputs, direct_forwards=mode)

        modes = ("off", "watch", "profile")
        medians = interleaved_medians(
            {mode: lambda mode=mode: traced(mode) for mode in modes}, rounds
        )
        rows.append(
            Row(
                "direct forwards",
                f"{name}: direct_forwards='off'",
                f"{medians['off'] * 1e3:.1f} ms",
            )
        )
        rows += [
            Row(
                "direct forwards",
                f"{name}: direct_forwards={mode!r}, ratio to 'off'",
                f"{medians[mode] * 1e3:.1f} ms",
                f"{medians[mode] / medians['off']:.2f}",
            )
            for mode in modes[1:]
        ]
    return rows


def numbers(smoke: bool) -> list[Row]:
    """`values=True` against a plain trace, and a builder with `initialization=True` against
    the same builder traced without it, each pair alternating in the same rounds."""
    side, rounds = (32, 1) if smoke else (224, 15)
    resnet = torchvision.models.resnet18 if smoke else torchvision.models.resnet50
    name = f"ResNet-{18 if smoke else 50}, 1x3x{side}x{side}"
    model, inputs = resnet(weights=None).eval(), torch.randn(1, 3, side, side)

    def plain() -> object:
        with torch.no_grad():
            return trace_forward(model, inputs)

    def fingerprinted() -> object:
        with torch.no_grad():
            return trace_forward(model, inputs, values=True)

    def built() -> object:
        return trace_forward(lambda: resnet(weights=None).eval(), inputs, device="meta")

    def watched() -> object:
        return trace_forward(
            lambda: resnet(weights=None).eval(), inputs, device="meta", initialization=True
        )

    medians = interleaved_medians({"plain": plain, "values": fingerprinted}, rounds)
    builds = interleaved_medians({"built": built, "watched": watched}, max(rounds // 3, 1))
    return [
        Row("numbers", f"{name}: trace_forward", f"{medians['plain'] * 1e3:.1f} ms"),
        Row(
            "numbers",
            f"{name}: trace_forward(values=True), ratio to a plain trace",
            f"{medians['values'] * 1e3:.1f} ms",
            f"{medians['values'] / medians['plain']:.2f}",
        ),
        Row("numbers", f"{name} builder on meta: build + trace", f"{builds['built'] * 1e3:.1f} ms"),
        Row(
            "numbers",
            f"{name} builder on meta: initialization=True, ratio to without",
            f"{builds['watched'] * 1e3:.1f} ms",
            f"{builds['watched'] / builds['built']:.2f}",
        ),
    ]


def breakdown(smoke: bool) -> list[Row]:
    """Where a trace spends its time, phase by phase (the recorder's own steps, timed one by
    one; medians): the profile behind the overhead rows."""
    resnet = torchvision.models.resnet18 if smoke else torchvision.models.resnet50
    return [
        *guarantee_rows(
            "tiny modules", tiny_modules(20 if smoke else 400).eval(), torch.randn(1, 16), smoke
        ),
        *guarantee_rows("GPT-2-shaped decoder", *tiny_decoder(), smoke),
        *guarantee_rows(
            "ResNet-50 1x3x224x224" if not smoke else "ResNet-18",
            resnet(weights=None).eval(),
            torch.randn(1, 3, 224, 224) if not smoke else torch.randn(1, 3, 32, 32),
            smoke,
            rounds=15,
        ),
        # At 100,001 calls, where the linear-time target is read (scale.py), with the
        # collector paused throughout as trace_forward pauses it: at this size the least's
        # own records would otherwise pay the collector's full passes (about 9 us per call).
        *guarantee_rows(
            "tiny modules at scale",  # guarantee_rows adds how many calls
            tiny_modules(250 if smoke else SCALE_PAIRS).eval(),
            torch.randn(1, 16),
            smoke,
            rounds=5,
            paused_collector=True,
        ),
        *phase_rows(
            "tiny modules", tiny_modules(20 if smoke else 400).eval(), torch.randn(1, 16), smoke
        ),
        *phase_rows(
            "ResNet-50 1x3x224x224" if not smoke else "ResNet-18",
            resnet(weights=None).eval(),
            torch.randn(1, 3, 224, 224) if not smoke else torch.randn(1, 3, 32, 32),
            smoke,
        ),
    ]


def guarantee_rows(
    label: str,
    model: nn.Module,
    inputs: torch.Tensor,
    smoke: bool,
    rounds: int = 31,
    *,
    paused_collector: bool = False,
) -> list[Row]:
    """What the guarantees the recorder keeps cost by themselves, each written as the least
    Python that keeps it, next to the recorder's own cost in the same rounds.

    Per call: the shapes, dtypes and devices of inputs and output; keyword arguments read
    before the module runs (from the calling frame, as the recorder does); nesting (a stack
    of open calls, the parent and the call count of each). Per module: its facts, and the
    watch that puts the model back (copy each module's dicts and compare them afterwards).
    Per trace: the random states saved and put back.
    On ResNet-50 the per-call microseconds are small next to its forward: its rows end with
    the least a trace can cost as a ratio to the bare forward, the figure its overhead
    target is read against. With `paused_collector`, every candidate runs with Python's
    cyclic collector paused, as trace_forward runs its forward.
    """
    rounds = 1 if smoke else rounds
    tensor_type = torch.Tensor
    metadata = operator.attrgetter("shape", "dtype", "device")
    get_frame = sys._getframe
    wrapped_code = WRAPPED_CALL_FRAME_CODE
    kept: list[object] = []

    def shapes_before(module: nn.Module, args: tuple[object, ...]) -> None:
        kept.append([metadata(value) if type(value) is tensor_type else None for value in args])

    def shapes_after(module: nn.Module, args: object, kwargs: object, output: object) -> None:
        kept.append(metadata(output) if type(output) is tensor_type else None)

    def keywords_before(module: nn.Module, args: tuple[object, ...]) -> None:
        frame = get_frame(3)
        kept.append(frame.f_locals["kwargs"] if frame.f_code is wrapped_code else None)
        shapes_before(module, args)

    open_calls: list[object] = []
    counts: dict[int, int] = {}

    def nesting_before(module: nn.Module, args: tuple[object, ...]) -> None:
        keywords_before(module, args)
        counts[id(module)] = counts.get(id(module), 0) + 1
        kept.append((len(open_calls), open_calls[-1] if open_calls else None))
        open_calls.append(module)

    def nesting_after(module: nn.Module, args: object, kwargs: object, output: object) -> None:
        if open_calls and open_calls[-1] is module:
            open_calls.pop()
        shapes_after(module, args, kwargs, output)

    def with_hooks(before: Callable[..., None], after: Callable[..., None]) -> Callable[[], object]:
        def run() -> object:
            kept.clear()
            counts.clear()
            with hooks_doing(before, after), torch.no_grad():
                return model(inputs)

        return run

    modules_list = list(model.modules())
    dicts = [
        *map(vars, modules_list),
        *(module._parameters for module in modules_list),
        *(module._buffers for module in modules_list),
    ]

    def watch() -> object:  # copy every module's dicts, compare them afterwards
        copies = list(map(dict.copy, dicts))
        return model_state.dicts_unchanged(dicts, copies)

    def ours_per_module() -> object:  # index, capture, put back: the recorder's own
        index = model_index.index_model(model)
        state = model_state.capture_state(index)
        model_state.restore_state(state)
        return state

    def random_states() -> object:  # saved and put back, as every trace does
        # numpy's is set again only if it moved (recording/numpy_random.py): here it never does.
        saved = (
            torch.random.get_rng_state(),
            random.getstate(),
            numpy_random.save_numpy_random(),
        )
        torch.random.set_rng_state(saved[0])
        random.setstate(saved[1])
        numpy_random.restore_numpy_random(saved[2])
        return saved

    index = model_index.index_model(model)

    def ours_hooks() -> object:
        recorder = recorder_module.Recorder(index, Trace(root_type="", callable_paths=()))
        with recorder.hooks_installed(), torch.no_grad():
            return model(inputs)

    def traced() -> object:
        with torch.no_grad():
            return trace_forward(model, inputs)

    def bare() -> object:
        with torch.no_grad():
            return model(inputs)

    calls = len(trace_forward(model, inputs))
    modules = len(modules_list)
    candidates: dict[str, Callable[[], object]] = {
        "bare": bare,
        "floor": with_hooks(lambda module, args: None, lambda *rest: None),
        "shapes": with_hooks(shapes_before, shapes_after),
        "keywords": with_hooks(keywords_before, shapes_after),
        "nesting": with_hooks(nesting_before, nesting_after),
        "hooks": ours_hooks,
        "walk": lambda: list(model.named_modules(remove_duplicate=False)),
        "facts": lambda: every_module_facts(model),
        "watch": watch,
        "random states": random_states,
        "ours per module": ours_per_module,
        "trace_forward": traced,
    }
    if paused_collector:
        candidates = {name: without_garbage_collection(run) for name, run in candidates.items()}
    medians = interleaved_medians(candidates, rounds)
    floor = medians["floor"]

    def per_call(seconds: float) -> str:
        return f"{seconds / calls * 1e6:.2f} us per call"

    def per_module(seconds: float) -> str:
        return f"{seconds / modules * 1e6:.2f} us per module"

    rows = [
        Row(
            "guarantees",
            f"{label}, {calls} calls: {text}",
            f"{seconds * 1e3:.2f} ms",
            per_call(seconds),
        )
        for text, seconds in (
            (
                "torch's two global hooks doing nothing, above bare (the floor)",
                floor - medians["bare"],
            ),
            ("least: shape, dtype and device of every input and output", medians["shapes"] - floor),
            (
                "least: + keyword arguments read before the module runs",
                medians["keywords"] - medians["shapes"],
            ),
            (
                "least: + nesting (open calls, parent, call count)",
                medians["nesting"] - medians["keywords"],
            ),
            ("the recorder's hooks, above the floor", medians["hooks"] - floor),
        )
    ]
    rows += [
        Row(
            "guarantees",
            f"{label}, {modules} modules: {text}",
            f"{medians[name] * 1e3:.2f} ms",
            per_module(medians[name]),
        )
        for name, text in (
            ("walk", "least: walk the modules (named_modules)"),
            ("facts", "least: every module's facts (settings, own tensors)"),
            ("watch", "least: copy every module's dicts, compare them afterwards"),
            ("ours per module", "the recorder's index, state capture and put back"),
        )
    ]
    rows.append(
        Row(
            "guarantees",
            f"{label}, per trace: least: save and put back torch's, Python's and numpy's "
            "random states",
            f"{medians['random states'] * 1e3:.2f} ms",
            per_call(medians["random states"]),
        )
    )
    least = (
        medians["nesting"]
        - floor
        + medians["walk"]
        + medians["facts"]
        + medians["watch"]
        + medians["random states"]
    )
    ours = medians["trace_forward"] - floor
    rows.append(
        Row(
            "guarantees",
            f"{label}: all the guarantees at their least vs trace_forward, above the floor",
            f"{least * 1e3:.2f} ms vs {ours * 1e3:.2f} ms",
            f"{least / calls * 1e6:.1f} vs {ours / calls * 1e6:.1f} us per call",
        ),
    )
    rows.append(
        Row(
            "guarantees",
            f"{label}: least: the floor and all the guarantees at their least vs "
            "trace_forward, ratio to the bare forward",
            f"{(floor + least) * 1e3:.2f} ms vs {medians['trace_forward'] * 1e3:.2f} ms",
            f"{(floor + least) / medians['bare']:.3f} vs "
            f"{medians['trace_forward'] / medians['bare']:.3f}",
        )
    )
    return rows


def phase_rows(label: str, model: nn.Module, inputs: torch.Tensor, smoke: bool) -> list[Row]:
    rounds = 1 if smoke else 21
    phases: dict[str, list[float]] = {
        name: []
        for name in (
            "bare forward",
            "forward under global no-op hooks (floor)",
            "index the model: paths, module facts, ties, totals",
            "capture the state to put back (attributes, parameters, buffer copies, RNG)",
            "forward with the recorder's hooks",
            "put the state back",
            "build the Call records",
        )
    }
    names = list(phases)
    for _ in range(rounds + 1):  # the first round warms up and is dropped
        times = [time.perf_counter()]
        with torch.no_grad():
            model(inputs)
        times.append(time.perf_counter())
        with global_noop_hooks(), torch.no_grad():
            model(inputs)
        times.append(time.perf_counter())
        index = model_index.index_model(model)
        times.append(time.perf_counter())
        state = model_state.capture_state(index)
        times.append(time.perf_counter())
        trace = Trace(root_type=type(model).__name__, callable_paths=())
        recorder = recorder_module.Recorder(index, trace, state=state)
        with torch.no_grad(), recorder.hooks_installed():
            model(inputs)
        times.append(time.perf_counter())
        model_state.restore_state(state)
        times.append(time.perf_counter())
        recorder.finish()
        times.append(time.perf_counter())
        for name, start, end in zip(names, times, times[1:], strict=False):
            phases[name].append(end - start)
    calls = len(trace)
    bare = statistics.median(phases["bare forward"][1:])
    return [
        Row(
            "breakdown",
            f"{label}, {calls} calls: {name}",
            f"{statistics.median(samples[1:]) * 1e3:.2f} ms",
            f"{statistics.median(samples[1:]) / calls * 1e6:.1f} us per call",
            f"{statistics.median(samples[1:]) / bare:.2f} x bare",
        )
        for name, samples in phases.items()
    ]


def peers(smoke: bool) -> list[Row]:
    """Peers on ResNet-50 (all of them), and torchinfo and torchview on two models whose
    calls do little work each: there our per-call cost shows most."""
    if smoke:
        resnet = (torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 32, 32))
        tiny = (tiny_modules(20).eval(), torch.randn(1, 16))
    else:
        resnet = (torchvision.models.resnet50(weights=None).eval(), torch.randn(1, 3, 224, 224))
        tiny = (tiny_modules(400).eval(), torch.randn(1, 16))
    return [
        *peer_rows("ResNet-50 1x3x224x224" if not smoke else "ResNet-18", *resnet, smoke, True),
        *peer_rows("tiny modules", *tiny, smoke, False),
        *peer_rows("GPT-2-shaped decoder", *tiny_decoder(), smoke, False),
    ]


def peer_rows(
    label: str, model: nn.Module, inputs: torch.Tensor, smoke: bool, every_peer: bool
) -> list[Row]:
    rounds = 1 if smoke else (5 if every_peer else 21)
    candidates: dict[str, Callable[[], object]] = {}

    def ours() -> object:
        with torch.no_grad():
            return trace_forward(model, inputs).render()

    candidates["pytest-fwdorder trace_forward + render"] = ours
    try:
        import torchinfo

        candidates["torchinfo.summary"] = lambda: torchinfo.summary(
            model, input_data=inputs, verbose=0
        )
    except ImportError:
        pass
    try:
        import torchview

        candidates["torchview.draw_graph"] = lambda: torchview.draw_graph(model, input_data=inputs)
    except ImportError:
        pass

    def fx_shape_prop() -> object:
        from torch.fx.passes.shape_prop import ShapeProp

        graph_module = torch.fx.symbolic_trace(model)
        ShapeProp(graph_module).propagate(inputs)
        return graph_module

    if every_peer:
        candidates["torch.fx.symbolic_trace + ShapeProp"] = fx_shape_prop
        try:
            import torchscan

            def scan() -> object:
                with contextlib.redirect_stdout(io.StringIO()):
                    return torchscan.summary(model, tuple(inputs.shape[1:]))

            candidates["torchscan.summary"] = scan
        except ImportError:
            pass
        try:
            import torchlens

            candidates["torchlens.trace"] = lambda: torchlens.trace(model, inputs)
        except ImportError:
            pass
    medians = interleaved_medians(candidates, rounds)
    ours_median = medians["pytest-fwdorder trace_forward + render"]
    rows = []
    for name, median in medians.items():
        is_ours = name.startswith("pytest-fwdorder")
        rows.append(
            Row(
                "peers",
                f"{label}: {name}",
                f"{median * 1e3:.1f} ms",
                f"{median / ours_median:.2f}",
                "" if is_ours else "> ours",
                "" if is_ours else ("yes" if median > ours_median else "NO"),
            )
        )
    return rows


# --- meta device: each case in a child process, which reports its wall time and peak RSS ---


def child(case: str, smoke: bool) -> dict[str, float]:
    """Run one case twice in this process: seconds of the first and of the second (warm) run,
    and the peak resident memory in MiB."""
    vit = "vit_b_16" if smoke else "vit_h_14"  # with weights=None both take 224x224

    def vit_cpu() -> None:
        model = torchvision.models.get_model(vit, weights=None).eval()
        with torch.no_grad():
            model(torch.randn(1, 3, 224, 224))

    def vit_meta() -> None:
        trace_forward(
            lambda: torchvision.models.get_model(vit, weights=None).eval(),
            TensorSpec((1, 3, 224, 224)),
            device="meta",
        )

    def vit_meta_floor() -> None:
        # torch alone on meta: build under the meta device and run forward, no trace; every
        # meta kernel runs (many are Python decompositions). A trace answers the repeats of
        # a kernel from its cache, so it can take less than this.
        with torch.device("meta"):
            model = torchvision.models.get_model(vit, weights=None).eval()
            model(torch.empty(1, 3, 224, 224))

    def decoder_meta() -> None:
        shape = dict(layers=2, model_size=64, heads=4, hidden=128, vocabulary=100) if smoke else {}
        trace = trace_forward(
            lambda: Decoder(**shape), TensorSpec((1, 128), torch.int64), device="meta"
        )
        trace.render()

    run = {
        "vit_cpu": vit_cpu,
        "vit_meta": vit_meta,
        "vit_meta_floor": vit_meta_floor,
        "decoder_meta": decoder_meta,
    }[case]
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds[0], "warm_seconds": seconds[1], "peak_mib": own_peak_mib()}


def own_peak_mib() -> float:
    """This process's own peak resident memory (`VmHWM`).

    `ru_maxrss` of a child started by fork and exec can report the parent's high-water mark.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def run_children(cases: list[str], smoke: bool, rounds: int) -> dict[str, dict[str, float]]:
    """Each case in a fresh child process per round, the cases alternating within a round (a
    noisy neighbour slows all of them alike); medians of the seconds, the highest peak."""
    results: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
    for _ in range(rounds):
        for case in cases:
            command = [sys.executable, __file__, "--child", case] + (["--smoke"] if smoke else [])
            finished = subprocess.run(command, capture_output=True, text=True, check=True)
            results[case].append(json.loads(finished.stdout.strip().splitlines()[-1]))
    return {
        case: {
            "seconds": statistics.median(result["seconds"] for result in samples),
            "warm_seconds": statistics.median(result["warm_seconds"] for result in samples),
            "peak_mib": max(result["peak_mib"] for result in samples),
        }
        for case, samples in results.items()
    }


def meta(smoke: bool) -> list[Row]:
    rounds = 1 if smoke else 5
    vit = "ViT-B/16" if smoke else "ViT-H/14"
    children = run_children(
        ["vit_cpu", "vit_meta", "vit_meta_floor", "decoder_meta"], smoke, rounds
    )
    cpu = children["vit_cpu"]
    on_meta = children["vit_meta"]
    meta_floor = children["vit_meta_floor"]
    decoder = children["decoder_meta"]
    first = cpu["seconds"] / on_meta["seconds"]
    warm = cpu["warm_seconds"] / on_meta["warm_seconds"]
    return [
        Row(
            "meta",
            f"{vit} 224x224: CPU build + forward (first in a process / warm)",
            f"{cpu['seconds']:.2f} s / {cpu['warm_seconds']:.2f} s, peak {cpu['peak_mib']:.0f} MiB",
        ),
        Row(
            "meta",
            f"{vit} 224x224: meta build + trace (first in a process / warm)",
            f"{on_meta['seconds']:.2f} s / {on_meta['warm_seconds']:.2f} s, peak {on_meta['peak_mib']:.0f} MiB",
            f"{first:.1f}x / {warm:.1f}x faster",
            ">= 20x faster",
            f"{'yes' if first >= 20 else 'NO'} / {'yes' if warm >= 20 else 'NO'}",
        ),
        Row(
            "meta",
            f"{vit} 224x224: torch alone on meta, build + forward, no trace, every kernel run",
            f"{meta_floor['seconds']:.2f} s / {meta_floor['warm_seconds']:.2f} s, "
            f"peak {meta_floor['peak_mib']:.0f} MiB",
            f"{cpu['seconds'] / meta_floor['seconds']:.1f}x / "
            f"{cpu['warm_seconds'] / meta_floor['warm_seconds']:.1f}x faster",
        ),
        Row(
            "meta",
            "7B-shaped decoder (32 layers, d 4096, seq 128): meta build + trace + render",
            f"{decoder['seconds']:.2f} s, peak {decoder['peak_mib']:.0f} MiB",
            "",
            "< 10 s, < 2048 MiB",
            "yes" if decoder["seconds"] < 10 and decoder["peak_mib"] < 2048 else "NO",
        ),
    ]


# --- builders on meta: our build + trace against torch alone on meta, side by side ---


def builder_on_meta_row(
    label: str, build: Callable[[], nn.Module], inputs: tuple[object, ...], rounds: int
) -> Row:
    """`trace_forward(build, *inputs, device="meta")` as a ratio to torch alone on meta: the
    builder under `torch.device("meta")` and one forward, no trace (every kernel run)."""

    def ours() -> object:
        return trace_forward(build, *inputs, device="meta")

    def alone() -> object:
        with torch.device("meta"):
            return build()(*(spec.materialize("meta") for spec in inputs))

    try:
        alone()
    except Exception as error:  # RegNet reads values while it builds: only our builder can
        medians = interleaved_medians({"ours": ours}, rounds)
        return Row(
            "meta_builds",
            f"{label}: meta build + trace (torch alone fails on meta: {type(error).__name__})",
            f"{medians['ours']:.2f} s",
        )
    medians = interleaved_medians({"ours": ours, "alone": alone}, rounds)
    ratio = medians["ours"] / medians["alone"]
    return Row(
        "meta_builds",
        f"{label}: meta build + trace, ratio to torch alone on meta",
        f"{medians['ours']:.2f} s vs {medians['alone']:.2f} s",
        f"{ratio:.2f}",
        "<= 2",
        "yes" if ratio <= 2 else "NO",
    )


# A sample of torchvision's builders, every family whose forward runs on meta, at the
# smallest input each accepts (tests/zoo/catalogue.py).
ZOO_SAMPLE = (
    "alexnet", "convnext_tiny", "deeplabv3_mobilenet_v3_large", "densenet121",
    "efficientnet_b3", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t",
    "mnasnet1_0", "mobilenet_v3_large", "r3d_18", "raft_small", "regnet_y_400mf",
    "resnet101", "shufflenet_v2_x1_0", "squeezenet1_1", "swin_v2_t", "vgg16_bn", "vit_b_16",
    "wide_resnet50_2",
)  # fmt: skip
# timm's builders that deep-copy the model they build (issue 39 measured 25-35x on meta).
TIMM_PRUNED = ("ecaresnet101d_pruned", "efficientnet_b3_pruned")


def transformers_builders(smoke: bool) -> dict[str, Callable[[], nn.Module]]:
    """GPT-2, Llama and BERT from configs made here (nothing downloaded), 4 layers each;
    GPT-2 alone with `smoke`."""
    import transformers

    gpt2 = transformers.GPT2Config(
        n_layer=4, n_embd=256, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0
    )
    llama = transformers.LlamaConfig(
        num_hidden_layers=4, hidden_size=256, intermediate_size=512, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000,
    )  # fmt: skip
    bert = transformers.BertConfig(
        num_hidden_layers=4, hidden_size=256, intermediate_size=512, num_attention_heads=4,
        vocab_size=1000,
    )  # fmt: skip
    builders: dict[str, Callable[[], nn.Module]] = {
        "GPT-2": lambda: transformers.GPT2LMHeadModel(gpt2).eval(),
        "Llama": lambda: transformers.LlamaForCausalLM(llama).eval(),
        "BERT": lambda: transformers.BertModel(bert).eval(),
    }
    return {"GPT-2": builders["GPT-2"]} if smoke else builders


def meta_builds(smoke: bool) -> list[Row]:
    """Builders traced on meta, each as a ratio to torch alone on meta: deep copies (issue
    39), timm's pruned builders, a sample of torchvision's zoo and transformers models.
    Seven rounds: with three, a neighbour's burst during two of them read EfficientNet-B3
    at 2.60x where seven rounds read it at 0.91x."""
    rounds = 1 if smoke else 7
    rows = []
    image = (TensorSpec((1, 3, 32 if smoke else 224, 32 if smoke else 224)),)
    for layers in (10,) if smoke else (100, 200, 400, 800):
        rows.append(
            builder_on_meta_row(
                f"a builder that deep-copies {layers} BatchNorm1d layers",
                lambda layers=layers: deep_copied_batch_norms(layers),
                (TensorSpec((1, 4)),),
                rounds,
            )
        )
    base = "squeezenet1_1" if smoke else "resnet101"
    rows.append(
        builder_on_meta_row(
            f"torchvision {base} deep-copied and its layers made again (timm's pruned builders)",
            lambda: rebuilt_after_deep_copy(torchvision.models.get_model(base, weights=None)),
            image,
            rounds,
        )
    )
    if importlib.util.find_spec("timm") is None:
        rows.append(Row("meta_builds", "timm's pruned builders: timm is not installed", "-"))
    elif smoke:
        rows.append(Row("meta_builds", "timm's pruned builders: not run with --smoke", "-"))
    else:
        import timm

        for name in TIMM_PRUNED:
            rows.append(
                builder_on_meta_row(
                    f"timm {name}",
                    lambda name=name: timm.create_model(name, pretrained=False).eval(),
                    image,
                    rounds,
                )
            )
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "zoo"))
    from catalogue import case

    # The samples look for a slow path anywhere (a ratio far above 2), one round each.
    for name in ("squeezenet1_1",) if smoke else ZOO_SAMPLE:
        zoo_case = case(name)
        rows.append(builder_on_meta_row(f"torchvision {name}", zoo_case.build, zoo_case.inputs, 1))
    if importlib.util.find_spec("transformers") is None:
        rows.append(Row("meta_builds", "transformers models: transformers is not installed", "-"))
        return rows
    tokens = (TensorSpec((1, 16), torch.int64),)
    for name, build in transformers_builders(smoke).items():
        rows.append(builder_on_meta_row(f"transformers {name}", build, tokens, 1))
    return rows


# --- golden files at scale ---


def synthetic_trace(blocks: int, calls_per_block: int, variant: int = 0) -> Trace:
    """A ResNet-like trace: `blocks` blocks of `calls_per_block` calls; `variant` changes a few."""
    trace = Trace(root_type="Synthetic", callable_paths=())
    shape = TensorDescription((1, 64, 56, 56), "f32", "cpu")
    root = Call(
        path="",
        module_type="Synthetic",
        nth=1,
        depth=0,
        parent=None,
        registered=True,
        index=0,
        args=(shape,),
        output=shape,
    )
    trace.calls.append(root)
    for block in range(blocks):
        block_call = Call(
            path=f"blocks.{block}",
            module_type="Block",
            nth=1,
            depth=1,
            parent=root,
            registered=True,
            index=len(trace.calls),
            args=(shape,),
            output=shape,
        )
        trace.calls.append(block_call)
        for position in range(calls_per_block - 1):
            module_type = (
                "Conv2d" if position % 3 == 0 else "BatchNorm2d" if position % 3 == 1 else "ReLU"
            )
            output = shape
            if variant and block % 100 == 7 and position == 2:
                module_type = "LeakyReLU"  # 1% of the blocks: a type change
            if variant and block % 250 == 11 and position == 4:
                output = TensorDescription((1, 32, 56, 56), "f32", "cpu")  # a shape change
            trace.calls.append(
                Call(
                    path=f"blocks.{block}.layer{position}",
                    module_type=module_type,
                    nth=1,
                    depth=2,
                    parent=block_call,
                    registered=True,
                    index=len(trace.calls),
                    args=(shape, LiteralDescription("None")),
                    output=output,
                )
            )
        if variant and block % 500 == 3:
            trace.calls.append(
                Call(
                    path=f"blocks.{block}.extra",
                    module_type="Identity",
                    nth=1,
                    depth=2,
                    parent=block_call,
                    registered=True,
                    index=len(trace.calls),
                    args=(shape,),
                    output=shape,
                )
            )
    return trace


def scale(smoke: bool) -> list[Row]:
    blocks = 10 if smoke else 1000
    rounds = 1 if smoke else 5
    old = synthetic_trace(blocks, 100)
    new = synthetic_trace(blocks, 100, variant=1)
    old_text = old.render()
    new_text = new.render()
    calls = len(old)

    def render_and_compare() -> bool:
        return old.render() == old_text  # what `trace == snapshot` does: serialize, compare

    def failure_diff() -> str:
        return diff_golden(old_text, new_text).render()

    old_header, old_lines = parse_golden(old_text)
    new_header, new_lines = parse_golden(new_text)

    def tree_diff() -> object:  # the alignment and the changes, the golden read already
        return diff_lines(old_header, old_lines, new_header, new_lines)

    medians = interleaved_medians(
        {"render": render_and_compare, "diff": failure_diff, "tree": tree_diff}, rounds
    )
    return [
        *real_model_at_scale(smoke),
        *resnet50_tree_diff(smoke),
        Row(
            "scale",
            f"tree diff of two {calls:,}-call goldens",
            f"{medians['tree']:.2f} s",
            "",
            "< 2 s",
            "yes" if medians["tree"] < 2 else "NO",
        ),
        Row(
            "scale",
            f"render + compare, {calls:,} calls",
            f"{medians['render']:.2f} s",
            "",
            "< 2 s",
            "yes" if medians["render"] < 2 else "NO",
        ),
        Row(
            "scale",
            f"failure diff of two {calls:,}-call goldens",
            f"{medians['diff']:.2f} s",
            "",
            "< 10 s",
            "yes" if medians["diff"] < 10 else "NO",
        ),
    ]


def resnet50_tree_diff(smoke: bool) -> list[Row]:
    """The tree diff of ResNet-50 and the same with an SE block after layer2 (goldens read)."""
    import torchvision

    model = torchvision.models.resnet50(weights=None).eval()
    inputs = torch.randn(1, 3, 32 if smoke else 64, 32 if smoke else 64)
    old_text = trace_forward(model, inputs).render()
    model.layer2.add_module("extra", nn.Identity())
    new_text = trace_forward(model, inputs).render()
    old_header, old_lines = parse_golden(old_text)
    new_header, new_lines = parse_golden(new_text)

    def tree_diff() -> object:
        return diff_lines(old_header, old_lines, new_header, new_lines)

    medians = interleaved_medians({"tree": tree_diff}, 1 if smoke else 20)
    milliseconds = medians["tree"] * 1e3
    return [
        Row(
            "scale",
            "tree diff of ResNet-50 goldens (one call inserted)",
            f"{milliseconds:.1f} ms",
            "",
            "< 50 ms",
            "yes" if milliseconds < 50 else "NO",
        )
    ]


def real_model_at_scale(smoke: bool) -> list[Row]:
    """A real 100,001-call model: one trace, the render and the compare `trace == snapshot`
    does, and the Python heap the trace keeps, at two sizes to show it grows linearly."""
    pairs = 250 if smoke else SCALE_PAIRS
    rounds = 1 if smoke else 3
    model = tiny_modules(pairs).eval()
    inputs = torch.randn(1, 16)
    with torch.no_grad():
        golden = trace_forward(model, inputs).render()

    def trace_render_compare() -> bool:
        with torch.no_grad():
            return trace_forward(model, inputs).render() == golden

    def bare() -> object:
        with torch.no_grad():
            return model(inputs)

    def floor() -> object:
        with global_noop_hooks(), torch.no_grad():
            return model(inputs)

    medians = interleaved_medians(
        {"all": trace_render_compare, "bare": bare, "floor": floor}, rounds
    )
    calls = 2 * pairs + 1
    return [
        Row("scale", f"{calls:,}-call model: bare forward", f"{medians['bare']:.2f} s"),
        Row(
            "scale",
            f"{calls:,}-call model: global no-op hooks (floor)",
            f"{medians['floor']:.2f} s",
            f"{medians['floor'] / medians['bare']:.2f}",
        ),
        Row(
            "scale",
            f"{calls:,}-call model: trace_forward + render + compare",
            f"{medians['all']:.2f} s",
            "",
            "< 2 s",
            "yes" if medians["all"] < 2 else "NO",
        ),
        *trace_memory_rows((25, 250) if smoke else (5_000, pairs)),
    ]


def trace_memory_rows(sizes: tuple[int, int]) -> list[Row]:
    """The heap a trace keeps per call at two sizes, each in a fresh process, against issue
    37's target, and whether it grows linearly (the larger size's per call within 1.2x)."""
    target = LINEAR_TARGETS["bytes per call"]
    per_call: dict[int, float] = {}
    rows = []
    for pairs in sizes:
        calls = 2 * pairs + 1
        heap = fresh_trace_heap_bytes(pairs)
        per_call[pairs] = heap / calls
        rows.append(
            Row(
                "scale",
                f"trace memory (Python heap kept by the Trace, fresh process), {calls:,} calls",
                f"{heap / 2**20:.1f} MiB",
                f"{per_call[pairs]:.0f} B per call",
                f"<= {target} B per call",
                "yes" if per_call[pairs] <= target else "NO",
            )
        )
    small, large = sizes
    growth = per_call[large] / per_call[small]
    rows.append(
        Row(
            "scale",
            f"trace memory per call, {2 * large + 1:,} calls / {2 * small + 1:,} calls",
            f"{growth:.2f}",
            "",
            "<= 1.2 (linear in calls)",
            "yes" if growth <= 1.2 else "NO",
        )
    )
    return rows


@functools.cache
def fresh_trace_heap_bytes(pairs: int) -> int:
    """`trace_heap_bytes(pairs)` measured in a fresh child process, so the figure does not
    depend on what ran before it: the facts caches a trace fills are process-wide and keep
    what earlier traces put there. Each size is measured once per run (the scale and the
    linear sections share it)."""
    command = [sys.executable, __file__, "--child", "trace_heap", "--pairs", str(pairs)]
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        raise RuntimeError(
            f"the trace heap child for {pairs} pairs failed:\n{finished.stderr[-3000:]}"
        )
    measured: int = json.loads(finished.stdout.strip().splitlines()[-1])["bytes"]
    return measured


def trace_heap_bytes(pairs: int) -> int:
    """Bytes of Python heap a Trace of a `pairs`-pair model holds once the forward is over.

    The model is built first and outside the measured span; what the trace shares with
    other traces (cached descriptions and facts) is counted once, on this first trace.
    """
    model = tiny_modules(pairs).eval()
    inputs = torch.randn(1, 16)
    gc.collect()  # earlier garbage is not freed inside the measured span
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with torch.no_grad():
            trace = trace_forward(model, inputs)
        gc.collect()  # the trace runs with the collector paused: its cycles are not kept
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del trace
    return after - before


# --- pictures: the SVG of a trace, from its golden text ---


def pictures(smoke: bool) -> list[Row]:
    """SVG size and drawing time (golden text -> SVG text) for ResNet-50 and the 7B-shaped
    decoder traced on meta, rolled and unrolled."""
    from pytest_fwdorder.picture.svg import golden_picture

    rounds = 1 if smoke else 5
    decoder_shape = (
        dict(layers=2, model_size=64, heads=4, hidden=128, vocabulary=100) if smoke else {}
    )
    goldens = {
        "ResNet-50 on meta": trace_forward(
            lambda: torchvision.models.resnet50(weights=None).eval(),
            TensorSpec((1, 3, 224, 224)),
            device="meta",
        ).render(),
        "7B-shaped decoder on meta": trace_forward(
            lambda: Decoder(**decoder_shape), TensorSpec((1, 128), torch.int64), device="meta"
        ).render(),
    }
    rows = []
    for name, text in goldens.items():
        for rolled in (True, False):
            svg = golden_picture(text, rolled=rolled).svg
            medians = interleaved_medians(
                {"draw": lambda text=text, rolled=rolled: golden_picture(text, rolled=rolled)},
                rounds,
            )
            seconds = medians["draw"]
            drawn_boxes = svg.count('class="fo-box')
            rows.append(
                Row(
                    "pictures",
                    f"{name}: SVG {'rolled' if rolled else 'unrolled'}, golden text -> SVG",
                    f"{seconds * 1000:.1f} ms",
                    f"{len(svg.encode()):,} B, {drawn_boxes:,} boxes",
                    "< 1 s",
                    "yes" if seconds < 1 else "NO",
                )
            )
    return rows


def print_table(rows: list[Row]) -> None:
    headers = ("section", "case", "median", "ratio", "target", "met")
    cells = [
        headers,
        *[(row.section, row.case, row.value, row.ratio, row.target, row.met) for row in rows],
    ]
    widths = [max(len(line[column]) for line in cells) for column in range(len(headers))]
    for index, line in enumerate(cells):
        print(
            "| "
            + " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            + " |"
        )
        if index == 0:
            print("|" + "|".join("-" * (width + 2) for width in widths) + "|")


SECTIONS = {
    "overhead": overhead,
    "costs": costs,
    "compile": compile_gates,
    "direct_forwards": direct_forwards,
    "numbers": numbers,
    "breakdown": breakdown,
    "peers": peers,
    "meta": meta,
    "meta_builds": meta_builds,
    "scale": scale,
    "pictures": pictures,
    "linear_time": lambda smoke: linear_time(  # benchmarks/scale.py
        smoke, Row, interleaved_medians, global_noop_hooks, fresh_trace_heap_bytes
    ),
    "suite": lambda smoke: suite(smoke, Row),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="each benchmark once at tiny sizes")
    parser.add_argument(
        "--only", choices=sorted(SECTIONS), action="append", help="run only these sections"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=int, help=argparse.SUPPRESS)  # --child trace_heap
    arguments = parser.parse_args()
    if arguments.child == "trace_heap":
        print(json.dumps({"bytes": trace_heap_bytes(arguments.pairs)}))
        return
    if arguments.child:
        print(json.dumps(child(arguments.child, arguments.smoke)))
        return
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, {torch.get_num_threads()} threads"
    )
    rows: list[Row] = []
    for name in arguments.only or list(SECTIONS):
        rows += SECTIONS[name](arguments.smoke)
    print_table(rows)


if __name__ == "__main__":
    main()
