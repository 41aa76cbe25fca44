"""Meta-device failures explained, and autocast refused there by a global forward pre-hook.

`meta_failures_explained` turns any failure of a forward on meta into a `MetaTraceError`
that says where forward stopped and which line of the model needed real values or another
dtype. `autocast_refused` refuses a meta trace that runs under autocast: torch's public
global forward pre-hook asks before each module call, and is removed on exit.
"""

from __future__ import annotations

import linecache
import os
import re
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook

from pytest_fwdorder.calls.records import Call, TraceRecords
from pytest_fwdorder.errors import MetaTraceError

# Files of torch and of this package, as imported and resolved: frames there are not the user's.
TORCH_DIRECTORY = str(Path(torch.__file__).resolve().parent) + os.sep
OUR_DIRECTORY = str(Path(__file__).resolve().parent) + os.sep
_NOT_THE_USERS = (
    TORCH_DIRECTORY,
    OUR_DIRECTORY,
    str(Path(torch.__file__).parent) + os.sep,
    str(Path(__file__).parent) + os.sep,
)


def _line_that_needed_values(error: BaseException) -> str | None:
    """`modeling_x.py:88: mask = make_mask(x) (which called .../masking_utils.py:12: ...)`.

    The model's own line: the innermost frame of the error's traceback, outside torch's own
    package and ours, that runs a method of an nn.Module; with the innermost such frame of
    any function it called (a library helper) when that differs. None when every frame is
    torch's.
    """
    frames = [
        (frame, line_number)
        for frame, line_number in traceback.walk_tb(error.__traceback__)
        if frame.f_code.co_filename and not frame.f_code.co_filename.startswith(_NOT_THE_USERS)
    ]
    if not frames:
        return None
    innermost = _frame_line(*frames[-1])
    models = [entry for entry in frames if isinstance(entry[0].f_locals.get("self"), nn.Module)]
    if not models or models[-1] is frames[-1]:
        return innermost
    return f"{_frame_line(*models[-1])} (which called {innermost})"


def _frame_line(frame: FrameType, line_number: int) -> str:
    filename = frame.f_code.co_filename
    text = linecache.getline(filename, line_number).strip()
    return f"{_short_path(filename)}:{line_number}: {text}"


def _short_path(filename: str) -> str:
    """A library file from where its package starts (`.../transformers/masking_utils.py`),
    a file of the user's from the current folder when it is under it."""
    path = Path(filename)
    parts = path.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return ".../" + "/".join(parts[parts.index(marker) + 1 :])
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return filename


@contextmanager
def meta_failures_explained(device: torch.device | str | None) -> Iterator[list[TraceRecords]]:
    """Turn any failure of a forward on the meta device into a `MetaTraceError`.

    The block appends its trace to the yielded list so the error can say where forward
    stopped. The original error stays as the cause, with its notes.
    """
    traces: list[TraceRecords] = []
    try:
        yield traces
    except Exception as error:
        meta = device is not None and torch.device(device).type == "meta"
        if not meta or isinstance(error, MetaTraceError):
            raise
        calls = traces[0].calls if traces else []
        raise MetaTraceError(_meta_failure_message(error, calls)) from error


def _meta_failure_message(error: Exception, calls: list[Call]) -> str:
    failing = [call for call in calls if call.raised]
    if failing:
        innermost = max(failing, key=lambda call: call.depth)
        where = (
            f"in {innermost.display_path} ({innermost.module_type}, call {innermost.nth} of "
            f"that module, call {innermost.index + 1} of the trace)"
        )
    else:
        where = "before any module call"
    return (
        f"forward raised on the meta device {where}: {type(error).__name__}: "
        f"{without_period(error)}.{_what_the_line_needs(error)} Meta tensors have shapes but "
        "no data, so .item(), data-dependent control flow and ops whose meta kernel is "
        "stricter than the CPU one fail there. Trace on the CPU instead (leave device unset, "
        "or build a smaller configuration of the model); if the model fails the same way on "
        "the CPU, the error is the model's own."
    )


# torch's grouped matmul (fused mixture-of-experts layers) takes half-precision matrices only.
# torch 2.14 words it the first way, torch 2.8 the second.
_HALF_PRECISION_ONLY = re.compile(
    r"Expected mat_[ab] to be BFloat16 or supported Float16|Expected inputs of BF16 type"
)


# What torch says when a meta tensor is asked for its data (`.item()`, `.tolist()`, `if`).
_VALUES_READ = re.compile(
    r"cannot be called on meta tensors|Cannot copy out of meta tensor|data-dependent|"
    r"no fake impl or Meta kernel|nonzero|Could not guard on data-dependent"
)


def _what_the_line_needs(error: Exception) -> str:
    """A sentence on what the failing line needs (a dtype, real values) and what can help."""
    line = _line_that_needed_values(error)
    if line is None:
        return ""
    if _HALF_PRECISION_ONLY.search(str(error)):
        return (
            f" At {line}, the line needs a dtype: torch's grouped matmul on meta takes bfloat16 "
            "or float16 matrices: trace the model in bfloat16 (build it with "
            "torch_dtype=torch.bfloat16 or call .to(torch.bfloat16), and give "
            "TensorSpec(..., dtype=torch.bfloat16) inputs)."
        )
    mask = (
        " That line reads a mask: if it runs because no attention mask was given, pass one; "
        "if it checks the mask you gave (all ones), leave it out."
        if "mask" in line.rsplit(": ", 1)[-1].lower()
        else ""
    )
    if not _VALUES_READ.search(str(error)):
        return f" The line that failed: {line}."
    return f" The line that needed real values: {line}.{mask}"


def without_period(error: BaseException) -> str:
    """An error's text without the full stop a sentence around it adds again."""
    return str(error).rstrip().removesuffix(".")


@contextmanager
def autocast_refused(device: torch.device | str | None) -> Iterator[None]:
    """On meta, refuse a forward that runs under autocast (meta tensors do not follow it).

    Autocast reads as off inside a dispatch mode, and a function mode costs a third of a
    meta trace, so torch's public global forward pre-hook asks before each module call of
    the block, in this thread only: autocast entered around module calls is refused. An
    autocast block around functional code alone, with no module call inside it, is not seen.
    """
    if device is None or torch.device(device).type != "meta":
        yield
        return
    _refuse_autocast_on("the trace")
    thread = threading.get_ident()
    any_enabled = getattr(torch._C, "_is_any_autocast_enabled", None)

    def refuse_under_autocast(module: nn.Module, args: object) -> None:
        if threading.get_ident() == thread and (any_enabled is None or any_enabled()):
            _refuse_autocast_on("forward")

    handle = register_module_forward_pre_hook(refuse_under_autocast)
    try:
        yield
    finally:
        handle.remove()


_AUTOCAST_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu")


def _refuse_autocast_on(what: str) -> None:
    """Raise `MetaTraceError` when autocast is on for a device: `what` ran under it."""
    for device_type in _AUTOCAST_DEVICE_TYPES:
        try:
            enabled = torch.is_autocast_enabled(device_type)
        except RuntimeError:  # a device type this build of torch does not know
            continue
        if enabled:
            dtype = torch.get_autocast_dtype(device_type)
            raise MetaTraceError(_autocast_message(what, device_type, dtype))


def _autocast_message(what: str, device_type: str, dtype: torch.dtype | None) -> str:
    dtype_name = str(dtype).removeprefix("torch.") if dtype is not None else "lower-precision"
    return (
        f"autocast is not followed on the meta device: {what} ran under "
        f"autocast({device_type!r}), and autocast({device_type!r}) would record {dtype_name} "
        f"outputs on the {device_type.upper()} and float32 ones on meta, a golden that differs "
        "without a word. Trace on that device instead (leave device unset for the CPU), or "
        "leave autocast out of the meta trace."
    )
