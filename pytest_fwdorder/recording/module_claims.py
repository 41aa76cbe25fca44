"""One trace at a time per module: each trace claims its model's modules for its thread."""

from __future__ import annotations

import threading
from itertools import repeat

from pytest_fwdorder.recording.model_index import ModelIndex

# Each module under a trace in progress, by id, and the thread tracing it.
_TRACING_THREADS: dict[int, int] = {}
_TRACING_LOCK = threading.Lock()


def claim_modules(index: ModelIndex) -> list[int]:
    """Mark the model's modules as traced by this thread; refuse a model another one traces.

    A trace puts buffers and the process-wide random state back when it ends, so two at
    once would undo each other's changes. Returns the ids this trace claimed (a nested
    trace in the same thread claims none of its outer trace's).
    """
    thread_id = threading.get_ident()
    module_ids = list(map(id, index.python_modules))
    with _TRACING_LOCK:
        if not _TRACING_THREADS:  # no trace in progress: the common case, no look-up
            _TRACING_THREADS.update(zip(module_ids, repeat(thread_id)))
            return module_ids
        owners = set(map(_TRACING_THREADS.get, module_ids, repeat(thread_id)))
        if owners - {thread_id}:
            _refuse(index, thread_id)
        claimed = [module_id for module_id in module_ids if module_id not in _TRACING_THREADS]
        _TRACING_THREADS.update(zip(claimed, repeat(thread_id)))
    return claimed


def _refuse(index: ModelIndex, thread_id: int) -> None:
    """Raise for the first module of the model that another thread is tracing."""
    for module in index.python_modules:
        owner = _TRACING_THREADS.get(id(module), thread_id)
        if owner != thread_id:
            path = index.entries[id(module)].path or "the root"
            raise RuntimeError(
                f"cannot trace {index.entries[id(index.modules[0])].module_type!r}: its "
                f"module {path!r} is being traced by another thread (thread {owner}) "
                "right now, and each trace puts the model and the random state back when "
                "it ends, undoing the other's changes: trace a model from one thread at a "
                "time, or give each thread its own copy (copy.deepcopy(model))"
            )


def release_modules(claimed: list[int]) -> None:
    """Give back the modules `claim_modules` claimed."""
    with _TRACING_LOCK:
        if len(claimed) == len(_TRACING_THREADS):  # the table holds this trace's alone
            _TRACING_THREADS.clear()
            return
        for module_id in claimed:
            _TRACING_THREADS.pop(module_id, None)
        if not _TRACING_THREADS:
            # Popping leaves the table at its largest; clearing frees it (a 100,001-module
            # model's is 3 MiB, kept for as long as the process runs).
            _TRACING_THREADS.clear()
