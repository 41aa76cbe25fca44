"""A trace puts the model back: submodules, hooks, list and dict attributes (issue 20, 8),
and one thread at a time traces a model (issue 20, 9)."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch import nn

from pytest_fwdorder import FwdOrderWarning, trace_forward


class ReplacesItsHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc = nn.Linear(4, 4)
        return self.fc(x)


def test_a_submodule_forward_replaces_is_put_back() -> None:
    model = ReplacesItsHead()
    original = model.fc

    trace_forward(model, torch.ones(1, 4))

    assert model.fc is original
    assert list(model._modules.items()) == [("fc", original)]


class DeletesAChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.extra = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        del self.extra
        return self.fc(x)


def test_a_submodule_forward_deletes_is_put_back() -> None:
    model = DeletesAChild()
    extra = model.extra

    trace_forward(model, torch.ones(1, 4))

    assert model.extra is extra
    assert list(model._modules) == ["fc", "extra"]


class BuildsItsHeadAtFirstCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            self.head = nn.Linear(x.shape[-1], 2)
        return self.head(x)


def test_a_head_forward_builds_at_its_first_call_is_gone_after_the_trace() -> None:
    model = BuildsItsHeadAtFirstCall()

    trace = trace_forward(model, torch.ones(1, 4))

    assert model.head is None
    assert list(model._modules) == []
    assert [call.path for call in trace.calls] == ["", "head"]


class HooksItsChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc.register_forward_hook(lambda module, args, output: None)
        self.fc.register_forward_pre_hook(lambda module, args, kwargs: None, with_kwargs=True)
        return self.fc(x)


def test_hooks_forward_registers_on_a_child_are_removed() -> None:
    model = HooksItsChild()

    trace_forward(model, torch.ones(1, 4))

    assert len(model.fc._forward_hooks) == 0
    assert len(model.fc._forward_pre_hooks) == 0
    assert len(model.fc._forward_pre_hooks_with_kwargs) == 0


class RemembersInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Size] = []
        self.by_name: dict[str, torch.Size] = {"start": torch.Size([0])}
        self.names: set[str] = {"start"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.shape)
        self.by_name["last"] = x.shape
        del self.by_name["start"]
        self.names.add("last")
        return x


def test_items_forward_appends_to_a_list_attribute_are_removed() -> None:
    model = RemembersInputs()
    seen = model.seen

    trace_forward(model, torch.ones(1, 4))

    assert model.seen is seen
    assert model.seen == []


def test_keys_forward_adds_to_or_removes_from_a_dict_attribute_are_put_back() -> None:
    model = RemembersInputs()
    by_name = model.by_name

    trace_forward(model, torch.ones(1, 4))

    assert model.by_name is by_name
    assert model.by_name == {"start": torch.Size([0])}


def test_members_forward_adds_to_a_set_attribute_are_removed() -> None:
    model = RemembersInputs()

    trace_forward(model, torch.ones(1, 4))

    assert model.names == {"start"}


def test_a_lazy_module_keeps_its_first_call_initialisation_and_no_stale_hook() -> None:
    model = nn.Sequential(nn.LazyLinear(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "forward changed parameters in place" (tested apart)
        trace_forward(model, torch.ones(1, 4))

    assert type(model[0]) is nn.Linear
    assert "_initialize_hook" not in vars(model[0])
    assert "_load_hook" not in vars(model[0])
    assert len(model[0]._forward_pre_hooks) == 0
    assert model(torch.ones(1, 4)).shape == (1, 3)


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


class CachesInANestedList(nn.Module):
    """Appends to a list kept inside a dict attribute: two levels down."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.cache: dict[str, list[int]] = {"seen": []}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache["seen"].append(1)
        return self.fc(x)


class SeenList(list):  # type: ignore[type-arg]
    """A list subclass: not copied, since its class may hold more than its items."""


class AppendsToAListSubclass(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen = SeenList()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(1)
        return x


def test_a_change_a_trace_cannot_put_back_warns_naming_the_module_and_attribute() -> None:
    model = nn.Sequential(CachesInANestedList())

    with pytest.warns(
        FwdOrderWarning,
        match=r"^forward changed what a trace cannot put back:"
        r" 0\.cache\['seen'\] \(a list inside a dict attribute\)",
    ):
        trace_forward(model, torch.ones(1, 4))


def test_a_list_subclass_attribute_that_forward_changed_warns() -> None:
    with pytest.warns(FwdOrderWarning, match=r"seen \(a SeenList attribute\)"):
        trace_forward(AppendsToAListSubclass(), torch.ones(1, 4))


def test_a_forward_that_changes_nothing_nested_does_not_warn() -> None:
    model = CachesInANestedList()
    model.forward = lambda x: model.fc(x)  # type: ignore[method-assign]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace_forward(model, torch.ones(1, 4))
