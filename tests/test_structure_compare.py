"""Structure comparison: what it refuses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import assert_same_structure, structure_diff, trace_forward


def test_structure_diff_against_none_names_the_argument() -> None:
    trace = trace_forward(nn.Linear(2, 2), torch.randn(1, 2))

    with pytest.raises(
        TypeError, match=r"^structure_diff expected a trace as `actual`, got NoneType: None"
    ):
        structure_diff(trace, None)  # type: ignore[arg-type]


def test_assert_same_structure_of_models_says_to_trace_them_first() -> None:
    with pytest.raises(
        TypeError,
        match=r"^assert_same_structure expected a trace as `expected`, got Linear: .*"
        r"trace the model first: trace_forward\(model, \*inputs\)$",
    ):
        assert_same_structure(nn.Linear(2, 2), torch.randn(1, 2))  # type: ignore[arg-type]


def test_a_hide_that_is_not_facet_names_is_a_type_error_saying_what_to_write() -> None:
    with pytest.raises(TypeError, match=r"hide must name facets, got 5: write hide=\("):
        trace_forward(nn.Linear(2, 2), torch.randn(1, 2), hide=5)  # type: ignore[arg-type]
