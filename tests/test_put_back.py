"""A trace puts the model back: submodules, hooks, attributes, data and the random states.

Submodules, hooks, list and dict attributes are issue 20, item 8; one thread at a time
per model is tests/test_module_claims.py.
"""

from __future__ import annotations

import random
import subprocess
import sys
import warnings

import numpy
import pytest
import torch
from torch import nn

from pytest_fwdorder import FwdOrderWarning, TensorSpec, record, trace_forward


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


def test_a_lazy_module_is_initialized_by_a_cpu_trace_and_named_in_the_warning() -> None:
    """The README's claim about lazy modules under a CPU trace, as a test."""
    # README: a CPU trace initializes a lazy module, as any first forward does.
    model = nn.Sequential(nn.LazyLinear(3))

    with pytest.warns(FwdOrderWarning, match=r"0\.weight, 0\.bias"):
        trace = trace_forward(model, torch.ones(1, 4))

    # The golden shows the module as it was before the forward that initialized it.
    assert "| parameters: weight f32 uninitialized, bias f32 uninitialized" in trace.render()
    assert model[0].weight.shape == (3, 4)


class ReassignsItsScale(nn.Module):
    """Like torchvision's AnchorGenerator: forward moves a plain tensor attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.ones(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale = self.scale.to(x.device)
        return x * self.scale


def test_a_meta_trace_leaves_a_reassigned_tensor_attribute_on_the_cpu() -> None:
    """Issue 8, defect 3: a reassigned tensor attribute was left on meta."""
    model = ReassignsItsScale()
    original = model.scale

    trace_forward(model, TensorSpec((2, 4)), device="meta")

    assert model.scale is original
    assert model(torch.ones(2, 4)).sum().item() == 8.0


def test_an_attribute_added_in_forward_is_removed_after_the_trace() -> None:
    """Issue 8, defect 3: attributes added in forward stayed after the trace."""

    class Caches(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.cache = x
            return x

    model = Caches()

    trace_forward(model, torch.ones(1))

    assert not hasattr(model, "cache")


def test_attributes_forward_deletes_reassigns_and_adds_come_back_as_they_were() -> None:
    """The very objects, under the same names, in the same order, in the same dict."""

    class Rearranges(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = [2.0]
            self.flag = True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            del self.scale
            self.flag = False
            self.added = 1
            self.scale = [3.0]  # back under its name, now after `flag`
            return x

    model = nn.Sequential(nn.Identity(), Rearranges())
    attributes = vars(model[1])
    before = list(attributes.items())

    trace_forward(model, torch.ones(1))

    assert vars(model[1]) is attributes
    assert list(attributes) == [name for name, _ in before]
    assert all(attributes[name] is value for name, value in before)


class ReplacesData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.register_buffer("cache", torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache.data = torch.ones(3)
        self.linear.weight.data = self.linear.weight.data.double()
        return x


def test_data_replaced_in_forward_is_put_back_or_named() -> None:
    """Found reviewing 0.2.0: `.data` replaced in forward escaped the restore."""
    model = ReplacesData()

    with pytest.warns(FwdOrderWarning, match=r"linear\.weight"):
        trace_forward(model, torch.ones(1, 2))

    assert model.cache.shape == (2,)
    assert torch.equal(model.cache, torch.zeros(2))


class PlainListNorm(nn.Module):
    """Keeps its BatchNorm in a plain list: reached in forward, not registered."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = [nn.BatchNorm1d(2)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norms[0](x)


def test_an_unregistered_module_is_put_back_too() -> None:
    """Found reviewing 0.2.0: a module kept in a plain list was not put back."""
    model = PlainListNorm().train()
    before = model.norms[0].running_mean.clone()

    with pytest.warns(FwdOrderWarning, match="not registered"):
        trace_forward(model, torch.randn(4, 2))

    assert torch.equal(model.norms[0].running_mean, before)
    assert model.norms[0].num_batches_tracked.item() == 0


class DrawsFromEveryGenerator(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        numpy.random.random()
        random.random()
        return x


def test_numpy_and_python_random_states_are_put_back() -> None:
    """Issue 8, defect 7: Python's and numpy's random states were not put back."""
    numpy.random.seed(0)
    random.seed(0)
    expected = (numpy.random.random(), random.random())
    numpy.random.seed(0)
    random.seed(0)

    trace_forward(DrawsFromEveryGenerator(), torch.ones(1))

    assert (numpy.random.random(), random.random()) == expected


def test_a_trace_does_not_import_numpys_random_module() -> None:
    """The cost of the fix for issue 8, defect 7, paid only where numpy could draw."""
    # Saving numpy's generator costs about 170 us a trace: not where nothing could draw.
    program = (
        "import sys, numpy, torch\n"
        "from pytest_fwdorder import trace_forward\n"
        "trace_forward(torch.nn.Linear(2, 2), torch.ones(1, 2))\n"
        "print('numpy.random' in sys.modules)\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "False"


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


class NotesItsCall(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.note = "after"
        return x


class ChangesAnUnregisteredAndARegisteredModule(nn.Module):
    """Its helper is kept in a plain list (joins the state capture at its first call)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.helpers = [NotesItsCall()]
        self.helpers[0].note = "before"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.linear.extra = x
        return self.helpers[0](self.linear(x))


def _attributes(module: nn.Module) -> list[tuple[str, int]]:
    return [(name, id(value)) for name, value in vars(module).items()]


def test_a_model_traced_again_gets_its_and_its_unregistered_modules_attributes_back() -> None:
    # From the second trace on, the capture takes the kept index's reading of the model,
    # and the unregistered helper's attributes join it at its first call.
    model = ChangesAnUnregisteredAndARegisteredModule()
    before = [_attributes(model), _attributes(model.linear), _attributes(model.helpers[0])]

    for _ in range(3):
        trace_forward(model, torch.ones(1, 2))

        assert [
            _attributes(model),
            _attributes(model.linear),
            _attributes(model.helpers[0]),
        ] == before
    with record(model, restore_state=False):  # the oracle sees a change left in place
        model(torch.ones(1, 2))
    assert _attributes(model.linear) != before[1]
    assert model.helpers[0].note == "after"
