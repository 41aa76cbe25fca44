"""Python's cyclic garbage collector paused while a golden of many calls is written or read
(and while `trace_forward` runs its one forward: tracing/forward.py says why).

Rendering, parsing and diffing a golden make a few objects per call that all live until the
end (the lines). Python's collector runs a pass per 700 such objects, and every tenth of
those passes over the older generation too: with a 100,001-call trace alive (millions of
objects), those passes cost more than the rendering itself. Nothing these steps make is a
reference cycle to collect, so they run with the collector paused, and the collector sees the
new objects in one pass afterwards (Mercurial's `util.nogc` does the same for its indexes).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

_Parameters = ParamSpec("_Parameters")
_Result = TypeVar("_Result")


@contextmanager
def paused_garbage_collection() -> Iterator[None]:
    """Pause the cyclic collector for the block where it runs; put it back as it was.

    A collector already paused (by the user, or by an enclosing block) is left paused.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def without_garbage_collection(
    function: Callable[_Parameters, _Result],
) -> Callable[_Parameters, _Result]:
    """`function` run with the cyclic collector paused (`paused_garbage_collection`)."""

    @wraps(function)
    def paused(*args: _Parameters.args, **kwargs: _Parameters.kwargs) -> _Result:
        with paused_garbage_collection():
            return function(*args, **kwargs)

    return paused
