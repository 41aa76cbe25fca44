"""A recorded reference: chosen calls' output tensors, the inputs and (if asked) the weights
of one run, in a safetensors file that outlives the process, beside a text to review.

The tensor file (`NAME.safetensors`) holds only what was asked for; its metadata carries the
environment line (torch release, dtype, device, the model's framework), the recorded calls
and the trace's golden text, so a later process, release or machine can pair and compare.
The text beside it (`NAME.reference.txt`) says the same for a reviewer's diff.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pytest_fwdorder.calls.records import Call, RenderOptions
from pytest_fwdorder.errors import did_you_mean
from pytest_fwdorder.golden.figures import human_bytes
from pytest_fwdorder.golden.render import render_trace
from pytest_fwdorder.recording.describe import tensors_of
from pytest_fwdorder.recording.recorder import Recorder, recording
from pytest_fwdorder.recording.resolve import resolve_model
from pytest_fwdorder.report.parity_rows import call_display_path

FORMAT = "fwdorder-reference 1"
_METADATA_KEY = "fwdorder-reference"
# 8 MiB: room for every block of a small model on a short input, and an early stop for a
# 7B model's every activation, which is not a test artifact.
DEFAULT_BUDGET_BYTES = 8 * 2**20
# The JSON-able values an input may be besides a tensor.
_PLAIN = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class RecordedCall:
    """One recorded call of the reference: where, which call of that module, its outputs."""

    path: str
    nth: int
    module_type: str
    outputs: tuple[torch.Tensor, ...]

    @property
    def display_path(self) -> str:
        """The path as reports show it: `<root>` for the model itself, `(call 2)` after a
        module's later calls."""
        return call_display_path(self.path, self.nth)


@dataclass(frozen=True)
class Reference:
    """A reference run: recorded calls (in the order their outputs were made), the inputs
    it ran on, the environment line, the trace's golden text and the weights (if recorded).

    Read one with `load_reference(path)`; make one with `record_reference`.
    """

    calls: tuple[RecordedCall, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    environment: str
    golden: str
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    path: Path | None = None

    @property
    def nbytes(self) -> int:
        """The bytes of every tensor the file holds: outputs, inputs and weights."""
        return sum(_nbytes(tensor) for tensor in self._tensors().values())

    def text(self) -> str:
        """The text written beside the tensor file: what was recorded, where, and the trace."""
        outputs = sum(len(call.outputs) for call in self.calls)
        lines = [
            FORMAT,
            f"environment: {self.environment}",
            f"inputs: {_describe_inputs(self.args, self.kwargs)}",
            f"tensors: {len(self.calls)} calls, {outputs} outputs, {len(self.weights)} weights; "
            f"{human_bytes(self.nbytes)}",
            "recorded calls, in the order their outputs were made:",
        ]
        width = max((len(call.display_path) for call in self.calls), default=0)
        for call in self.calls:
            shapes = ", ".join(_describe_tensor(tensor) for tensor in call.outputs) or "no tensor"
            lines.append(f"  {call.display_path:<{width}}  {call.module_type}  {shapes}")
        lines.append("trace:")
        return "\n".join(lines) + "\n" + self.golden

    def save(self, path: str | PathLike[str]) -> Path:
        """Write the tensor file at `path` (`.safetensors`) and the text beside it; returns
        the tensor file's path."""
        tensor_path = _tensor_path(path)
        tensor_path.parent.mkdir(parents=True, exist_ok=True)
        tensor_path.write_bytes(self.to_bytes())
        text_path(tensor_path).write_text(self.text(), encoding="utf-8")
        return tensor_path

    def to_bytes(self) -> bytes:
        """The tensor file's bytes: the same reference always gives the same bytes."""
        from safetensors.torch import save

        description = {
            "format": FORMAT,
            "environment": self.environment,
            "golden": self.golden,
            "calls": [
                [call.path, call.nth, call.module_type, len(call.outputs)] for call in self.calls
            ],
            "inputs": {
                "args": [
                    _input_entry(value, f"inputs.args.{n}") for n, value in enumerate(self.args)
                ],
                "kwargs": {
                    name: _input_entry(value, f"inputs.kwargs.{name}")
                    for name, value in self.kwargs.items()
                },
            },
        }
        # One metadata entry: safetensors writes several in an order that varies by process.
        return save(self._tensors(), metadata={_METADATA_KEY: json.dumps(description)})

    def _tensors(self) -> dict[str, torch.Tensor]:
        tensors: dict[str, torch.Tensor] = {}
        for position, call in enumerate(self.calls):
            for number, tensor in enumerate(call.outputs):
                tensors[f"calls.{position}.{number}"] = tensor
        for number, value in enumerate(self.args):
            if isinstance(value, torch.Tensor):
                tensors[f"inputs.args.{number}"] = value
        for name, value in self.kwargs.items():
            if isinstance(value, torch.Tensor):
                tensors[f"inputs.kwargs.{name}"] = value
        for key, tensor in self.weights.items():
            tensors[f"weights.{key}"] = tensor
        return tensors


def text_path(tensor_path: Path) -> Path:
    """Where the text beside a tensor file lives: `NAME.reference.txt` for `NAME.safetensors`."""
    return tensor_path.with_name(f"{tensor_path.stem}.reference.txt")


def record_reference(
    model: nn.Module,
    *inputs: Any,
    path: str | PathLike[str] | None = None,
    calls: Iterable[str] | None = None,
    weights: bool = False,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    **keyword_inputs: Any,
) -> Reference:
    """Run `model` once on the inputs and keep the outputs of the chosen calls (and the inputs).

    `calls` are module path patterns (`fnmatch`: `"model.layers.*.self_attn"`, `""` for the
    root); by default the boundaries two implementations most likely share: the root, each
    embedding, each repeated block (the members of a ModuleList or Sequential of two or
    more of one class) and its direct children (attention, MLP, norms), and each module with
    weights of its own outside the blocks (final norm, head). Every call of a chosen module
    is kept. `weights=True` keeps the state_dict too, for `copy_mapped_weights` in another
    process. With `path`, the tensors go to that `.safetensors` file and the text beside it
    (`NAME.reference.txt`). Raises ValueError when the tensors would exceed `budget_bytes`,
    saying how much and which calls are largest, before a file is written.
    """
    root = resolve_model(model, entry_point="record_reference")
    chosen = _chosen_paths(root, calls)
    # Copied before the run: an in-place op in forward must not change what was recorded.
    recorded_args = tuple(_copy_input(value) for value in inputs)
    recorded_kwargs = {name: _copy_input(value) for name, value in keyword_inputs.items()}
    spending = _Spending(
        budget_bytes,
        input_bytes=sum(_nbytes(value) for value in _input_tensors(inputs, keyword_inputs)),
        weight_bytes=sum(_nbytes(tensor) for tensor in root.state_dict().values())
        if weights
        else 0,
    )
    recorder, captured = _record_chosen_outputs(root, chosen, spending, inputs, keyword_inputs)
    if spending.spent > budget_bytes:
        raise ValueError(_over_budget(spending))
    reference = Reference(
        calls=_recorded_calls(recorder.calls, captured),
        args=recorded_args,
        kwargs=recorded_kwargs,
        environment=environment_line(root),
        golden=render_trace(recorder.trace),
        weights={key: _copy(tensor) for key, tensor in root.state_dict().items()}
        if weights
        else {},
    )
    if path is None:
        return reference
    return dataclasses.replace(reference, path=reference.save(path))


@dataclass
class _Spending:
    """The bytes a reference would hold against its budget: the inputs and weights from the
    start, then each chosen call's outputs as the model makes them (`sizes`, by path)."""

    budget: int
    input_bytes: int
    weight_bytes: int
    sizes: dict[str, int] = field(default_factory=dict)
    spent: int = 0

    def __post_init__(self) -> None:
        self.spent = self.input_bytes + self.weight_bytes

    def add(self, path: str, size: int) -> bool:
        """Count `size` bytes of outputs at `path`; returns whether all is within the budget."""
        self.sizes[path] = self.sizes.get(path, 0) + size
        self.spent += size
        return self.spent <= self.budget


def _record_chosen_outputs(
    root: nn.Module,
    chosen: set[str],
    spending: _Spending,
    inputs: tuple[Any, ...],
    keyword_inputs: Mapping[str, Any],
) -> tuple[Recorder, list[tuple[int, list[torch.Tensor]]]]:
    """Run the model once; returns its recorder and copies of the chosen calls' output
    tensors by call number, kept while within the budget (past it they are only counted,
    so the error says how much)."""
    captured: list[tuple[int, list[torch.Tensor]]] = []
    with torch.no_grad(), recording(root, RenderOptions()) as recorder:
        records = recorder.records

        def keep(number: int, output: object) -> None:
            record = records[number]
            if record.entry.path not in chosen:
                return
            tensors = [value for value in tensors_of(output) if value.layout is torch.strided]
            if spending.add(record.entry.path, sum(_nbytes(value) for value in tensors)):
                captured.append((number, [_copy(value) for value in tensors]))

        recorder.output_observers.append(keep)
        root(*inputs, **keyword_inputs)
    return recorder, captured


def _recorded_calls(
    trace_calls: list[Call], captured: list[tuple[int, list[torch.Tensor]]]
) -> tuple[RecordedCall, ...]:
    """Each captured call's place in the trace with its output copies."""
    return tuple(
        RecordedCall(
            trace_calls[number].path,
            trace_calls[number].nth,
            trace_calls[number].module_type,
            tuple(copies),
        )
        for number, copies in captured
    )


def load_reference(path: str | PathLike[str]) -> Reference:
    """Read a reference that `record_reference` wrote (the `.safetensors` file).

    Raises FileNotFoundError naming the path and how to write it, and ValueError for a file
    that is not a reference of this format.
    """
    tensor_path = _tensor_path(path)
    if not tensor_path.is_file():
        raise FileNotFoundError(
            f"no reference at {str(tensor_path)!r}: record one with "
            "record_reference(model, *inputs, path=...) in the reference's environment"
        )
    reference = reference_from_bytes(tensor_path.read_bytes(), source=str(tensor_path))
    return dataclasses.replace(reference, path=tensor_path)


def reference_from_bytes(data: bytes, *, source: str = "the data") -> Reference:
    """A reference from a tensor file's bytes (`Reference.to_bytes`)."""
    from safetensors.torch import load

    header_size = int.from_bytes(data[:8], "little") if len(data) >= 8 else 0
    try:
        header = json.loads(data[8 : 8 + header_size])
        description = json.loads(header["__metadata__"][_METADATA_KEY])
        found = description["format"]
    except (ValueError, KeyError, TypeError):
        found = None
    if found != FORMAT:
        raise ValueError(
            f"{source!r} is not a reference of format {FORMAT!r} (its format: {found!r}): "
            "record it again with record_reference"
        )
    tensors = load(data)
    calls = tuple(
        RecordedCall(
            call_path,
            nth,
            module_type,
            tuple(tensors[f"calls.{position}.{number}"] for number in range(count)),
        )
        for position, (call_path, nth, module_type, count) in enumerate(description["calls"])
    )
    inputs = description["inputs"]
    return Reference(
        calls=calls,
        args=tuple(_read_input(entry, tensors) for entry in inputs["args"]),
        kwargs={name: _read_input(entry, tensors) for name, entry in inputs["kwargs"].items()},
        environment=description["environment"],
        golden=description["golden"],
        weights={
            key.removeprefix("weights."): tensor
            for key, tensor in tensors.items()
            if key.startswith("weights.")
        },
    )


def environment_line(model: nn.Module) -> str:
    """`torch 2.8.0, float64, cpu, python 3.11, Linux; model from transformers 4.57.1`: what a
    reader needs to know why two runs of one model differ."""
    tensor = leading_parameter(model)
    dtype = str(tensor.dtype).removeprefix("torch.") if tensor is not None else "no parameters"
    device = str(tensor.device) if tensor is not None else "cpu"
    line = (
        f"torch {torch.__version__}, {dtype}, {device}, "
        f"python {sys.version_info.major}.{sys.version_info.minor}, {platform.system()}"
    )
    framework = type(model).__module__.partition(".")[0]
    if framework not in ("torch", "__main__") and framework in sys.modules:
        version = getattr(sys.modules[framework], "__version__", None)
        if isinstance(version, str):
            line += f"; model from {framework} {version}"
    return line


def leading_parameter(model: nn.Module) -> nn.Parameter | None:
    """The parameter whose dtype and device speak for the model: its first floating one,
    else its first, else None."""
    return next(
        (value for value in model.parameters() if value.is_floating_point()),
        next(iter(model.parameters()), None),
    )


def default_reference_paths(model: nn.Module) -> set[str]:
    """The module paths `record_reference` keeps by default (see its docstring)."""
    blocks: set[str] = set()
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.named_children())
        types = [type(child) for _, child in children]
        for name, child in children:
            if types.count(type(child)) >= 2:
                blocks.add(f"{path}.{name}" if path else name)
    chosen = {""} | blocks
    for path, module in model.named_modules():
        parent = path.rpartition(".")[0]
        inside_block = any(path.startswith(f"{block}.") for block in blocks)
        own_weights = any(True for _ in module.parameters(recurse=False))
        leaf = not any(True for _ in module.children())
        block_part = parent in blocks and path not in blocks
        if (
            isinstance(module, nn.Embedding)
            or block_part
            or (own_weights and leaf and not inside_block)
        ):
            chosen.add(path)
    return chosen


def _chosen_paths(model: nn.Module, calls: Iterable[str] | None) -> set[str]:
    if calls is None:
        return default_reference_paths(model)
    if isinstance(calls, str):
        calls = [calls]
    paths = [path for path, _ in model.named_modules()]
    chosen: set[str] = set()
    for pattern in calls:
        wanted = "" if pattern == "<root>" else pattern
        matched = {path for path in paths if fnmatch.fnmatchcase(path, wanted)}
        if not matched:
            raise ValueError(
                f"record_reference's call pattern {pattern!r} matches no module of "
                f"{type(model).__name__}{did_you_mean(pattern, paths)}; patterns are module "
                "paths with * wildcards, '' or '<root>' for the model itself"
            )
        chosen |= matched
    return chosen


def _over_budget(spending: _Spending) -> str:
    largest = sorted(spending.sizes.items(), key=lambda item: -item[1])[:5]
    parts = ", ".join(f"{path or '<root>'} {human_bytes(size)}" for path, size in largest)
    extra = ""
    if spending.input_bytes:
        extra += f", inputs {human_bytes(spending.input_bytes)}"
    if spending.weight_bytes:
        extra += f", weights {human_bytes(spending.weight_bytes)}"
    budget = spending.budget
    return (
        f"record_reference would write {human_bytes(spending.spent)} of tensors, over the "
        f"budget of {human_bytes(budget)}: {len(spending.sizes)} chosen modules (largest: "
        f"{parts}){extra}. Choose fewer calls (calls=['', 'model.layers.*'], say, keeps the "
        "root and each block), a shorter input or weights=False, or raise budget_bytes (now "
        f"{budget})"
    )


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    """A detached, contiguous CPU copy: later in-place ops must not change what was recorded,
    and safetensors writes only contiguous tensors."""
    return tensor.detach().to("cpu", copy=True).contiguous()


def _copy_input(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _copy(value)
    if isinstance(value, _PLAIN):
        return value
    raise TypeError(
        f"record_reference can record tensors and plain values (bool, int, float, str, None) "
        f"as inputs, got {type(value).__name__!r}: {value!r}; pass the tensors the model "
        "needs as separate arguments"
    )


def _input_tensors(
    inputs: tuple[Any, ...], keyword_inputs: Mapping[str, Any]
) -> list[torch.Tensor]:
    values = [*inputs, *keyword_inputs.values()]
    return [value for value in values if isinstance(value, torch.Tensor)]


def _input_entry(value: Any, key: str) -> dict[str, Any]:
    return {"tensor": key} if isinstance(value, torch.Tensor) else {"value": value}


def _read_input(entry: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> Any:
    return tensors[entry["tensor"]] if "tensor" in entry else entry["value"]


def _tensor_path(path: str | PathLike[str]) -> Path:
    tensor_path = Path(path)
    if tensor_path.suffix != ".safetensors":
        raise ValueError(
            f"a reference is written to a .safetensors file, got {str(path)!r}: "
            f"use {str(tensor_path.with_suffix('.safetensors'))!r}"
        )
    return tensor_path


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _describe_tensor(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)}"


def _describe_inputs(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    parts = [
        f"args[{n}] {_describe_tensor(v) if isinstance(v, torch.Tensor) else repr(v)}"
        for n, v in enumerate(args)
    ]
    parts += [
        f"{name}={_describe_tensor(v) if isinstance(v, torch.Tensor) else repr(v)}"
        for name, v in kwargs.items()
    ]
    return ", ".join(parts) or "none"
