"""Where torch's module call keeps what its global hooks are not given, read by the recorder.

torch's global forward pre-hooks receive `(module, args)` only; the keyword arguments are in
the frame of `Module._call_impl`'s inner function. These are the code objects that find
that frame, found once per process, and the clean-up a `with_kwargs=True` global hook needs.
"""

from __future__ import annotations

from types import CodeType, FrameType
from typing import Any

from torch import nn
from torch.nn.modules import module as torch_module

from pytest_fwdorder.recording.describe import describe_keyword_arguments

__all__ = [
    "CALL_FRAME_CODE",
    "KEYWORD_FRAME_CODE",
    "WRAPPED_CALL_FRAME_CODE",
    "forget_keyword_flag",
    "inner_keywords",
]


def _keyword_frame_code() -> CodeType | None:
    """The code of `Module._call_impl`'s inner function, whose frame holds a call's kwargs.

    torch's global forward pre-hooks receive `(module, args)` only, but they are called from
    this function, whose `kwargs` is the dict forward will get. Reading it there describes
    keyword arguments before forward can change them, at no registration cost. None when a
    torch release lays `_call_impl` out otherwise: the recorder then falls back to per-module
    pre-hooks with `with_kwargs=True` (correct, slower).
    """
    for constant in nn.Module._call_impl.__code__.co_consts:
        if (
            isinstance(constant, CodeType)
            and constant.co_name == "inner"
            and "kwargs" in constant.co_freevars
        ):
            return constant
    return None


KEYWORD_FRAME_CODE = _keyword_frame_code()
# In `module(...)`, `inner`'s caller is `_call_impl`, called by `_wrapped_call_impl(self,
# *args, **kwargs)`: a frame of three locals, whose dict Python builds faster than `inner`'s.
CALL_FRAME_CODE: CodeType = nn.Module._call_impl.__code__
WRAPPED_CALL_FRAME_CODE: CodeType | None = getattr(
    getattr(nn.Module, "_wrapped_call_impl", None), "__code__", None
)


def forget_keyword_flag(handle_id: int) -> None:
    """Undo what `RemovableHandle.remove()` leaves behind for a `with_kwargs=True` global hook.

    torch records the hook's id in `_global_forward_hooks_with_kwargs` but the handle does
    not remove it, so every trace would leave an entry there and `_has_any_global_hook()`
    would stay true for the rest of the process. Harmless once torch removes it itself.
    """
    flags = getattr(torch_module, "_global_forward_hooks_with_kwargs", None)
    if isinstance(flags, dict):
        flags.pop(handle_id, None)


def inner_keywords(
    frame: FrameType, keyword_frame_code: CodeType | None
) -> tuple[tuple[str, Any], ...] | None:
    """The keyword arguments of a call whose pre-hook runs in `frame`, read from `inner`'s
    frame when that is it (`module._call_impl(...)` called directly); None when the frame
    does not show them (a direct forward's run, another torch release): read later."""
    if frame.f_code is not keyword_frame_code:
        return None
    keyword_arguments = frame.f_locals.get("kwargs")
    return describe_keyword_arguments(keyword_arguments) if keyword_arguments else ()
