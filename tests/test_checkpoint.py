"""Checkpoint checks: what a strict `load_state_dict` would refuse, key by key."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import CheckpointMismatchError, assert_checkpoint_loads, check_checkpoint


def test_a_checkpoint_value_that_is_not_a_tensor_is_reported_by_key_and_type() -> None:
    report = check_checkpoint(nn.Linear(2, 2), {"weight": 5, "bias": torch.zeros(2)})

    assert not report.loads
    assert str(report) == (
        "the checkpoint does not load into the model:\n"
        "  not a tensor in the checkpoint (1):\n"
        "    weight (2, 2) <- int"
    )


def test_a_checkpoint_value_that_is_not_a_tensor_fails_the_assertion() -> None:
    with pytest.raises(CheckpointMismatchError, match=r"weight \(2, 2\) <- int"):
        assert_checkpoint_loads(nn.Linear(2, 2), {"weight": 5, "bias": torch.zeros(2)})
