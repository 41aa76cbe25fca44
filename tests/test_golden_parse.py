"""Reading a whole golden back (golden/parse.py), and the collector paused while it is read and
written (golden/garbage_collection.py)."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.golden.garbage_collection import paused_garbage_collection
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.golden.render import golden_lines, render_trace
from pytest_fwdorder.trace import Trace


class Tagged(nn.Module):
    """Takes a string beside its tensor: brackets, quotes and backslashes in an argument."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, tag: str = "") -> torch.Tensor:
        return self.fc(x)


class Caller(nn.Module):
    def __init__(self, tag: str) -> None:
        super().__init__()
        self.inner = Tagged()
        self.tag = tag

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, tag=self.tag)


@pytest.mark.parametrize("tag", [") -> x", "a\\')", '(["])', "\\\\)"])
def test_brackets_and_quotes_in_a_string_argument_stay_in_the_inputs(tag: str) -> None:
    trace = trace_forward(Caller(tag), torch.randn(1, 4))

    _, lines = parse_golden(trace.render())

    assert lines == golden_lines(trace)  # the writer's own parts: the independent oracle
    inner = lines[1]
    assert inner.inputs == f"(f32[1,4], tag={tag!r})"
    assert inner.outputs == "f32[1,4]"
    # The oracle can fail: a reader cutting at the first `)` gets other inputs.
    naive_inputs = inner.text.split(" (", 1)[1].split(")", 1)[0]
    assert f"({naive_inputs})" != inner.inputs


class Mixed(nn.Module):
    """Operations of its own between and after its children's calls (`ops=True`)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.Linear(4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.block(torch.tanh(self.first(x)))) * 2


def test_facts_and_operations_read_back_under_the_call_they_belong_to() -> None:
    trace = trace_forward(Mixed(), torch.randn(1, 4), ops=True)

    _, lines = parse_golden(trace.render())

    written = golden_lines(trace)
    assert [(line.facts, line.values_under("operations")) for line in lines] == [
        (line.facts, line.values_under("operations")) for line in written
    ]
    assert any(line.values_under("operations") for line in lines)
    assert any(line.facts for line in lines)


def test_lines_read_twice_are_equal_and_hash_alike() -> None:
    text = trace_forward(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(1, 4)).render()

    _, first = parse_golden(text)
    _, second = parse_golden(text)

    assert first == second
    assert {hash(line) for line in first} == {hash(line) for line in second}
    assert set(first) == set(second)


def _large_golden() -> str:
    model = nn.Sequential(*[nn.ReLU() for _ in range(3000)])
    with torch.no_grad():
        return trace_forward(model, torch.randn(1, 2)).render()


def _collections_during(run: object) -> int:
    """Collector passes that started while `run()` ran, seen through gc.callbacks."""
    started: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(note)
    try:
        run()  # type: ignore[operator]
    finally:
        gc.callbacks.remove(note)
    return len(started)


def test_reading_a_large_golden_runs_at_most_one_collector_pass() -> None:
    text = _large_golden()
    gc.collect()

    paused = _collections_during(lambda: parse_golden(text))
    unpaused = _collections_during(lambda: parse_golden.__wrapped__(text))  # type: ignore[attr-defined]

    # At most the one pass that sees the new lines once the collector is back on; the oracle
    # can fail: the same read with the collector on runs a pass per 700 objects.
    assert paused <= 1 < unpaused
    assert gc.isenabled()


def test_rendering_a_large_trace_runs_at_most_one_collector_pass() -> None:
    model = nn.Sequential(*[nn.ReLU() for _ in range(3000)])
    with torch.no_grad():
        trace = trace_forward(model, torch.randn(1, 2))
    assert isinstance(trace, Trace)
    gc.collect()

    assert (
        _collections_during(trace.render)
        <= 1
        < _collections_during(
            lambda: render_trace.__wrapped__(trace)  # type: ignore[attr-defined]
        )
    )
    assert gc.isenabled()


def _raise_while_paused() -> None:
    with paused_garbage_collection():
        assert not gc.isenabled()
        raise ValueError("raised inside the paused block")


def test_the_collector_is_put_back_as_it_was_also_when_the_block_raises() -> None:
    with pytest.raises(ValueError, match="raised inside the paused block"):
        _raise_while_paused()
    assert gc.isenabled()

    gc.disable()
    try:
        with paused_garbage_collection():
            pass
        assert not gc.isenabled()  # a collector the user paused stays paused
    finally:
        gc.enable()
