"""One trace at a time per model: a model another thread traces is refused, naming it.

Each trace claims its model's modules for its thread (issue 20, item 9), since each puts
the model and the random state back when it ends.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward


class WaitsInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Identity()
        self.entered = threading.Event()
        self.release = threading.Event()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.entered.set()
        if not self.release.wait(10):
            raise TimeoutError("the test never released the forward")
        return self.inner(x)


def _trace_in_thread(model: WaitsInForward) -> threading.Thread:
    worker = threading.Thread(target=trace_forward, args=(model, torch.ones(1, 2)))
    worker.start()
    if not model.entered.wait(10):
        raise TimeoutError("the other thread's trace never reached forward")
    return worker


def test_a_second_trace_of_a_model_another_thread_traces_is_refused_naming_it() -> None:
    model = WaitsInForward()
    worker = _trace_in_thread(model)
    refusal = (
        r"^cannot trace 'Sequential': its module '0' is being traced by another thread "
        r"\(thread \d+\) right now, and each trace puts the model and the random state back "
        r"when it ends, undoing the other's changes: trace a model from one thread at a "
        r"time, or give each thread its own copy \(copy\.deepcopy\(model\)\)$"
    )
    try:
        with pytest.raises(RuntimeError, match=refusal):
            trace_forward(nn.Sequential(model), torch.ones(1, 2))
    finally:
        model.release.set()
        worker.join(10)


def test_a_model_can_be_traced_again_once_the_other_threads_trace_ended() -> None:
    model = WaitsInForward()
    worker = _trace_in_thread(model)
    model.release.set()
    worker.join(10)

    trace = trace_forward(model, torch.ones(1, 2))

    assert [call.path for call in trace.calls] == ["", "inner"]


def test_another_thread_may_trace_a_different_model_at_the_same_time() -> None:
    model = WaitsInForward()
    worker = _trace_in_thread(model)
    try:
        trace = trace_forward(nn.Linear(2, 2), torch.ones(1, 2))
    finally:
        model.release.set()
        worker.join(10)

    assert [call.path for call in trace.calls] == [""]


def test_a_trace_nested_in_a_trace_of_the_same_model_in_one_thread_is_allowed() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    inner_paths: list[list[str]] = []

    class TracesItsChild(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inner_paths.append([call.path for call in trace_forward(model, x).calls])
            return x

    trace_forward(TracesItsChild(), torch.ones(1, 2))

    assert inner_paths == [["", "0"]]
