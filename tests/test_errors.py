"""How warnings are issued: each points at the user's line, whichever entry point raised it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import FwdOrderWarning, record, trace_forward


class ScalesItsWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.encoder[0].weight.mul_(2)
        return self.encoder(x)


def test_the_in_place_parameter_warning_names_the_parameter_path_at_the_users_line() -> None:
    """Issue 8, defect 18: the warning named neither path nor user's line."""
    with pytest.warns(FwdOrderWarning, match=r"encoder\.0\.weight") as caught:
        trace_forward(ScalesItsWeight(), torch.ones(1, 2))

    assert caught[0].filename == __file__


def test_a_warning_at_the_end_of_a_record_block_points_at_the_users_line() -> None:
    """Issue 8, defect 18: from a `record` block too."""
    model = ScalesItsWeight()

    with pytest.warns(FwdOrderWarning, match=r"encoder\.0\.weight") as caught, record(model):
        model(torch.ones(1, 2))

    assert caught[0].filename == __file__
