"""Forwards run without a module call (issue 36, item 1): found, counted, put back.

The oracle for how often a forward ran is the model itself: each module counts the runs of
its own forward, which no hook can miss; the calling line is found in this file's text.
"""

from __future__ import annotations

import inspect
import sys

import pytest
import torch
from torch import nn

from pytest_fwdorder import FwdOrderWarning, record, trace_forward
from pytest_fwdorder.golden.format import forward_runs, header_sections
from pytest_fwdorder.golden.parse import parse_call_line, parse_golden

RUNS: dict[str, int] = {}


class Mlp(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        RUNS[self.name] = RUNS.get(self.name, 0) + 1
        return self.fc2(torch.relu(self.fc1(x))) * scale


class GatedMlp(Mlp):
    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return super().forward(x, scale) * 2  # the same module: not a run without a call

    def ungated(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x)  # LINE: super


class Block(nn.Module):
    """Runs its mlp as `how` says: called, `.forward` twice, or through `super().forward`."""

    def __init__(self, name: str, how: str) -> None:
        super().__init__()
        self.mlp = GatedMlp(name)
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "forward":
            first = self.mlp.forward(x)  # LINE: forward
            return self.mlp.forward(first, scale=0.5)  # LINE: forward keyword
        if self.how == "super":
            return self.mlp.ungated(x)
        return self.mlp(x)


def model_with(how: str) -> nn.Sequential:
    return nn.Sequential(Block("0.mlp", "call"), Block("1.mlp", how), Block("2.mlp", "call"))


def line_of(marker: str) -> str:
    """`test_direct_forwards.py:N` of the line ending with `# LINE: marker`."""
    lines = inspect.getsource(sys.modules[__name__]).splitlines()
    number = next(n for n, text in enumerate(lines, 1) if text.endswith(f"# LINE: {marker}"))
    return f"test_direct_forwards.py:{number}"


def runs_without_a_call(model: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """The oracle: forward runs the modules counted minus the calls torch's own global
    hooks saw, per path; only differences."""
    RUNS.clear()
    seen: dict[str, int] = {}
    names = {id(module): path for path, module in model.named_modules()}

    def count(module: nn.Module, args: object) -> None:
        path = names.get(id(module), "")
        seen[path] = seen.get(path, 0) + 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        model(x)
    finally:
        handle.remove()
    return {path: runs - seen.get(path, 0) for path, runs in RUNS.items() if runs != seen.get(path)}


@pytest.fixture
def x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(2, 4)


def test_the_oracle_sees_forward_runs_without_a_call_and_can_see_none(x: torch.Tensor) -> None:
    assert runs_without_a_call(model_with("forward"), x) == {"1.mlp": 2}
    assert runs_without_a_call(model_with("call"), x) == {}


def test_forward_called_directly_is_listed_with_its_count_caller_and_line(
    x: torch.Tensor,
) -> None:
    model = model_with("forward")
    expected = runs_without_a_call(model, x)

    trace = trace_forward(model, x)

    runs = trace.forward_runs
    assert sum(run.count for run in runs) == expected["1.mlp"] == 2
    assert {(run.path, run.caller, run.location, run.count) for run in runs} == {
        ("1.mlp", "1", line_of("forward"), 1),
        ("1.mlp", "1", line_of("forward keyword"), 1),
    }
    assert (
        f"#   1.mlp: GatedMlp x1, called as .forward by 1 at {line_of('forward')}, "
        "recorded as [direct]"
    ) in trace.render().splitlines()


def test_a_direct_run_is_recorded_as_a_direct_call_with_what_forward_got_and_gave(
    x: torch.Tensor,
) -> None:
    trace = trace_forward(model_with("forward"), x)

    direct = [call for call in trace.calls if call.index in trace.direct_calls]
    assert [(call.path, call.nth, call.parent and call.parent.path) for call in direct] == [
        ("1.mlp", 1, "1"),
        ("1.mlp", 2, "1"),
    ]
    assert [name for name, _ in direct[1].kwargs] == ["scale"]
    assert [child.path for child in direct[0].children] == ["1.mlp.fc1", "1.mlp.fc2"]
    lines = [line for line in trace.render().splitlines() if "1.mlp: GatedMlp" in line]
    assert lines[-2:] == [
        "    1.mlp: GatedMlp #1 [direct] (f32[2,4]) -> f32[2,4]",
        "    1.mlp: GatedMlp #2 [direct] (f32[2,4], scale=float) -> f32[2,4]",
    ]
    assert parse_call_line(lines[-1]).direct
    assert not parse_call_line(lines[0]).direct


def test_super_forward_on_a_registered_child_is_listed_by_the_profile_as_not_recorded(
    x: torch.Tensor,
) -> None:
    model = model_with("super")
    expected = runs_without_a_call(model, x)

    trace = trace_forward(model, x, direct_forwards="profile")

    assert expected == {"1.mlp": 1}
    assert [
        (run.path, run.how, run.caller, run.location, run.count) for run in trace.forward_runs
    ] == [("1.mlp", "run as Mlp.forward", "1", line_of("super"), 1)]
    assert not trace.direct_calls
    assert "1.mlp: GatedMlp" in trace.render().split("# registered but never called (1):")[1]


def test_watch_alone_does_not_see_super_forward(x: torch.Tensor) -> None:
    assert trace_forward(model_with("super"), x).forward_runs == ()


def test_a_model_that_calls_its_modules_lists_nothing_and_renders_as_before(
    x: torch.Tensor,
) -> None:
    model = model_with("call")
    watched = trace_forward(model, x, direct_forwards="profile")
    off = trace_forward(model, x, direct_forwards="off")

    assert watched.forward_runs == ()
    assert "without a call" not in watched.render()
    assert watched.render() == off.render()


def test_the_header_reads_back_into_the_same_records(x: torch.Tensor) -> None:
    for how, mode in (("forward", "watch"), ("super", "profile")):
        trace = trace_forward(model_with(how), x, direct_forwards=mode)
        header, _ = parse_golden(trace.render())
        assert header.forward_runs == trace.forward_runs != ()
        assert forward_runs(header_sections(header)) == list(trace.forward_runs)


def test_off_looks_for_nothing(x: torch.Tensor) -> None:
    trace = trace_forward(model_with("forward"), x, direct_forwards="off")

    assert trace.forward_runs == ()
    assert "[direct]" not in trace.render()


class OwnForward(nn.Module):
    """A module with an instance `forward`, as accelerate's hooks leave one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.forward = self.patched  # type: ignore[method-assign]

    def patched(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + 1


class Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = OwnForward()
        self.mlp = Mlp("failing")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mlp.forward(self.inner.forward(x))
        raise RuntimeError("forward failed on purpose")


def test_the_model_is_put_back_with_its_own_instance_forward(x: torch.Tensor) -> None:
    model = Fails()
    before = {name: dict(vars(module)) for name, module in model.named_modules()}
    own = vars(model.inner)["forward"]

    with pytest.raises(RuntimeError, match="forward failed on purpose"):
        trace_forward(model, x, direct_forwards="profile")

    after = {name: dict(vars(module)) for name, module in model.named_modules()}
    assert after.keys() == before.keys()
    for name in before:
        assert list(after[name]) == list(before[name]), name
        assert all(after[name][key] is before[name][key] for key in before[name]), name
    assert vars(model.inner)["forward"] is own
    assert "forward" not in vars(model.mlp)
    assert sys.getprofile() is None


class Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("the child failed on purpose")


class CallsAFailingChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.child = Raises()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child.forward(x)


def test_a_direct_run_that_raises_is_recorded_as_raised(x: torch.Tensor) -> None:
    model = CallsAFailingChild()

    with pytest.raises(RuntimeError, match="the child failed on purpose"):  # noqa: SIM117
        with record(model) as trace:
            model(x)

    assert [(call.path, call.raised) for call in trace.calls] == [("", True), ("child", True)]
    assert trace.direct_calls == frozenset({1})
    assert "forward" not in vars(model.child)


def test_profile_leaves_a_running_profiler_alone_and_says_so(x: torch.Tensor) -> None:
    def profiler(frame: object, event: str, argument: object) -> None:
        return None

    sys.setprofile(profiler)
    try:
        with pytest.warns(FwdOrderWarning, match="needs the profile hook"):
            trace = trace_forward(model_with("super"), x, direct_forwards="profile")
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert trace.forward_runs == ()


def test_an_unknown_mode_is_refused(x: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="direct_forwards must be 'watch' or 'profile' or 'off'"):
        trace_forward(model_with("call"), x, direct_forwards="always")


def test_a_torchvision_model_runs_no_forward_without_a_call() -> None:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None).eval()

    trace = trace_forward(model, torch.randn(1, 3, 32, 32), direct_forwards="profile")

    assert trace.forward_runs == ()
    assert trace.direct_calls == frozenset()


@pytest.mark.transformers
def test_a_transformers_model_runs_no_forward_without_a_call() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64)
    model = transformers.GPT2LMHeadModel(config).eval()
    tokens = torch.randint(0, 64, (1, 8))

    trace = trace_forward(model, tokens, direct_forwards="profile")

    assert trace.forward_runs == ()
    assert "forward" not in vars(model.transformer.h[0].attn)
