"""A module's facts are remembered across traces, and forgotten by any change to the module.

Issue 37: the facts of every module are read in every trace, so they are remembered per
module; a trace after a change must still show the change. The oracle is a fresh trace of
a deep copy of the changed model: new module objects, which nothing remembered can serve.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.recording import module_facts as module_facts_module
from pytest_fwdorder.recording.bounded_cache import BoundedCache
from pytest_fwdorder.recording.module_settings import SETTINGS_PLANS


class ConvThenHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.act = nn.LeakyReLU(0.5)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.norm(self.conv(x))).mean((2, 3))
        return self.head(x.to(self.head.weight.dtype))


def change_stride(model: ConvThenHead) -> None:
    model.conv.stride = (2, 2)


def replace_a_parameter(model: ConvThenHead) -> None:
    model.head.weight = nn.Parameter(torch.randn(2, 4), requires_grad=False)


def drop_the_bias(model: ConvThenHead) -> None:
    model.head.bias = None


def halve_one_layer(model: ConvThenHead) -> None:
    model.head.half()  # the same parameter objects, their dtype changed in place


def freeze_in_place(model: ConvThenHead) -> None:
    model.conv.weight.requires_grad_(False)


def change_a_float_setting(model: ConvThenHead) -> None:
    model.norm.eps = 1e-3


def negate_a_zero_setting(model: ConvThenHead) -> None:
    model.act.negative_slope = 0.0
    trace_forward(model, torch.randn(1, 3, 8, 8))  # remembered with 0.0
    model.act.negative_slope = -0.0  # equal to 0.0, written differently


def make_a_buffer_non_persistent(model: ConvThenHead) -> None:
    model.norm._non_persistent_buffers_set.add("running_mean")


def set_a_bool_setting_to_an_int(model: ConvThenHead) -> None:
    model.act.inplace = 0  # type: ignore[assignment]  # == False, written differently


MUTATIONS = [
    change_stride,
    replace_a_parameter,
    drop_the_bias,
    halve_one_layer,
    freeze_in_place,
    change_a_float_setting,
    negate_a_zero_setting,
    make_a_buffer_non_persistent,
    set_a_bool_setting_to_an_int,
]


@pytest.mark.parametrize("mutate", MUTATIONS, ids=[mutate.__name__ for mutate in MUTATIONS])
def test_a_change_between_two_traces_shows_in_the_second_golden(
    mutate: Callable[[ConvThenHead], None],
) -> None:
    torch.manual_seed(0)
    model = ConvThenHead().eval()
    inputs = torch.randn(1, 3, 8, 8)
    trace_forward(model, inputs)  # each class seen once
    before = trace_forward(model, inputs).render()  # each module's facts remembered

    mutate(model)
    after = trace_forward(model, inputs).render()

    assert after != before
    assert after == trace_forward(copy.deepcopy(model), inputs).render()


def test_an_unchanged_model_gives_the_same_golden_from_what_was_remembered() -> None:
    model = ConvThenHead().eval()
    inputs = torch.randn(1, 3, 8, 8)
    first = trace_forward(model, inputs).render()

    assert trace_forward(model, inputs).render() == first
    assert trace_forward(copy.deepcopy(model), inputs).render() == first


def test_an_unchanged_module_is_served_from_what_was_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cases above go through the remembered facts: a second trace reads no key."""
    model = ConvThenHead().eval()
    inputs = torch.randn(1, 3, 8, 8)
    trace_forward(model, inputs)
    first = trace_forward(model, inputs).render()

    def refuse(module: nn.Module) -> None:
        raise AssertionError(f"the facts of {type(module).__name__} were read again")

    monkeypatch.setattr(module_facts_module, "_raw_facts", refuse)

    assert trace_forward(model, inputs).render() == first


def test_a_module_without_torchs_non_persistent_set_is_traced_twice() -> None:
    """Modules built around nn.Module.__init__ may lack it; facts read it only for buffers."""
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    del vars(model[1])["_non_persistent_buffers_set"]
    first = trace_forward(model, torch.ones(1, 2)).render()

    assert trace_forward(model, torch.ones(1, 2)).render() == first


def test_a_model_with_more_modules_than_the_bound_is_served_from_what_was_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 37: a cache cleared at its bound forgot every module of a bigger model each trace."""
    # Caches of its own, bound 8, and room in the session's class plans: in CI's run of every
    # marker, with the session's caches filled by hundreds of earlier tests, one module's
    # facts were read again (a slower trace, never a wrong one: what is remembered is only
    # served while it holds). That is not what this test is about.
    monkeypatch.setattr(module_facts_module, "_REMEMBERED", BoundedCache(8))
    monkeypatch.setattr(module_facts_module, "_SHARED_REMEMBERED", BoundedCache(1024))
    monkeypatch.setattr(SETTINGS_PLANS, "most", len(SETTINGS_PLANS) + 1_000)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.ReLU()) for _ in range(10)])
    inputs = torch.ones(1, 2)
    first = trace_forward(model, inputs).render()
    with monkeypatch.context() as patched:
        patched.setattr(module_facts_module, "_raw_facts", refuse_to_read)

        assert trace_forward(model, inputs).render() == first

    model[9][0].weight.requires_grad_(False)  # a change is still seen past the bound
    after = trace_forward(model, inputs).render()
    assert after != first
    assert after == trace_forward(copy.deepcopy(model), inputs).render()


def test_equal_modules_share_what_is_remembered_of_them() -> None:
    """Issue 37's heap: a model repeats a few kinds of module, each kind remembered once."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU())
    inputs = torch.ones(1, 2)
    trace_forward(model, inputs)
    trace_forward(model, inputs)
    remembered = [module_facts_module._REMEMBERED.get(id(module)) for module in model]

    assert remembered[0] is not None
    assert remembered[0] is remembered[1] is remembered[2]
    assert remembered[3] is not remembered[0]

    model[1].weight.requires_grad_(False)  # one of them changes: the others keep theirs
    after = trace_forward(model, inputs).render()
    assert after == trace_forward(copy.deepcopy(model), inputs).render()
    assert module_facts_module._REMEMBERED.get(id(model[1])) is not remembered[0]
    assert module_facts_module._REMEMBERED.get(id(model[0])) is remembered[0]


def test_a_bounded_cache_forgets_its_oldest_half_when_full() -> None:
    cache: BoundedCache[str, int] = BoundedCache(4)
    for number, key in enumerate("abcd"):
        cache.keep(key, number)
    cache.keep("d", 10)  # already there: nothing forgotten, and "d" is the newest

    cache.keep("e", 4)

    assert cache == {"c": 2, "d": 10, "e": 4}


def test_a_key_kept_again_is_the_newest_and_outlives_older_ones() -> None:
    # Keys are module ids, and a new module often gets a dead one's id: its entry must not
    # keep the dead module's old place, or the next halving forgets the new module first.
    cache: BoundedCache[str, int] = BoundedCache(4)
    for number, key in enumerate("abcd"):
        cache.keep(key, number)
    cache.keep("a", 10)  # "a" now belongs to a new module

    cache.keep("e", 4)

    assert cache == {"d": 3, "a": 10, "e": 4}  # "a" once stood first: it went with "b"
    assert list(cache) == ["d", "a", "e"]


def refuse_to_read(module: nn.Module) -> None:
    raise AssertionError(f"the facts of {type(module).__name__} were read again")
