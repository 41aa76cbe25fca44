"""A facet with one value per trace from outside the package, and a section after the calls:
the structure comparison and the picture reach it without naming it.

The toy facet lists the sign of each module's own parameters' sum, per module, in a section
after the calls (`weight signs:`). Its oracle is the model's own `named_modules` read here;
the models' sign flips every line of it without changing a single shape or class, so only the
section can tell the two traces apart.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch
from facet_plugins import offered
from torch import nn

from pytest_fwdorder import assert_same_structure, structure_diff, trace_forward
from pytest_fwdorder.calls.facet_records import TraceFacet
from pytest_fwdorder.errors import StructureMismatchError

TITLE = "weight signs"


class WeightSigns:
    """A toy facet with one value per trace: each module's own parameters' sum, by sign."""

    title = TITLE
    change_words = "weight signs changed"
    option = (
        "values"  # any trace option switches it on; `values=True` records nothing else compared
    )
    record_refusal = "weight signs need the model: use trace_forward"

    def measure(self, model: nn.Module, args: Any, kwargs: Any, device: Any) -> tuple[str, ...]:
        return tuple(signed_lines(model))

    def header_lines(self, value: tuple[str, ...]) -> list[str]:
        return []

    def end_lines(self, value: tuple[str, ...], trace: Any, counts: Any) -> list[str]:
        return [f"{TITLE}:", *value]

    def read_header(self, header: Sequence[str]) -> tuple[str, ...] | None:
        if f"{TITLE}:" not in header:
            return None
        return tuple(header[header.index(f"{TITLE}:") + 1 :])

    def describe_changes(self, old: tuple[str, ...], new: tuple[str, ...]) -> list[str]:
        return [
            f"{before.strip()} -> {after.strip()}"
            for before, after in zip(old, new, strict=False)
            if before != after
        ]


def signed_lines(model: nn.Module) -> Iterator[str]:
    """The section's lines: a module with parameters of its own, then each one's sign."""
    for path, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if own:
            yield f"{path or '<root>'}: {type(module).__name__}"
            yield from (
                f"  {name}: {'+' if float(tensor.detach().sum()) > 0 else '-'}"
                for name, tensor in own
            )


@pytest.fixture
def weight_signs(request: pytest.FixtureRequest) -> Iterator[WeightSigns]:
    """The toy facet, offered by a plugin for the length of one test."""
    made = WeightSigns()
    with offered(request.config, made):
        yield made


def signed_model(sign: float) -> nn.Module:
    """Linear(4, 8) then ReLU, every weight `sign`."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    with torch.no_grad():
        model[0].weight.fill_(sign)
        model[0].bias.fill_(sign)
    return model


def signed_traces() -> tuple[Any, Any]:
    inputs = torch.ones(1, 4)
    return (
        trace_forward(signed_model(1.0), inputs, values=True),
        trace_forward(signed_model(-1.0), inputs, values=True),
    )


def test_the_toy_facet_implements_the_per_trace_protocol() -> None:
    assert isinstance(WeightSigns(), TraceFacet)


def test_the_section_is_the_oracles_lines_after_the_calls(weight_signs: WeightSigns) -> None:
    model = signed_model(-1.0)
    text = trace_forward(model, torch.ones(1, 4), values=True).render()
    # The oracle: the model's own modules and parameters, read here.
    assert [(path, type(module).__name__) for path, module in model.named_modules()][1] == (
        "0",
        "Linear",
    )
    assert text.splitlines()[-4:] == ["weight signs:", "0: Linear", "  weight: -", "  bias: -"]


def test_the_oracle_sees_the_sign_flip_that_the_structure_does_not() -> None:
    assert list(signed_lines(signed_model(1.0))) != list(signed_lines(signed_model(-1.0)))
    old, new = signed_traces()  # no toy facet: the structures are the same
    assert_same_structure(old, new)


def test_a_plugin_facets_section_that_differs_fails_the_structure_comparison(
    weight_signs: WeightSigns,
) -> None:
    old, new = signed_traces()

    with pytest.raises(
        StructureMismatchError,
        match=r"weight signs changed\nweight: \+ -> weight: -; bias: \+ -> bias: -\n",
    ):
        assert_same_structure(old, new)
    assert structure_diff(old, new)


def test_a_plugin_facets_section_is_ignored_by_its_title(weight_signs: WeightSigns) -> None:
    old, new = signed_traces()

    passed = assert_same_structure(old, new, ignore=(TITLE,))

    assert passed.summary().startswith("same structure (ignoring weight signs): ")
    assert not structure_diff(old, new, ignore=(TITLE,))
    assert not structure_diff(old, new, ignore=("paths",))  # the section names modules


def test_ignoring_a_section_no_facet_writes_names_the_sections_there_are(
    weight_signs: WeightSigns,
) -> None:
    old, _ = signed_traces()
    with pytest.raises(ValueError, match=r"cannot ignore 'weight sign': .*'weight signs'"):
        assert_same_structure(old, old, ignore=("weight sign",))
