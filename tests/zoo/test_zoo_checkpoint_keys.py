"""Every zoo golden gives its model's checkpoint keys, dtypes and shapes: an oracle from torch.

For each torchvision model the committed golden was traced from, the keys, dtypes and shapes
that `assert_checkpoint_compatible` reads from the golden's parameter and buffer facts equal
those of `model.state_dict()`, which nothing of this package computes. Building a model is
all it costs (no forward); run with `pytest -m zoo tests/zoo/test_zoo_checkpoint_keys.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import ZOO_MARKS, ZooCase, all_cases

from pytest_fwdorder import assert_checkpoint_compatible
from pytest_fwdorder.checks.checkpoint_reference import read_reference, state_dict_keys

pytestmark = ZOO_MARKS

GOLDENS = Path(__file__).resolve().parent / "__snapshots__" / "test_torchvision_zoo"
# Quantized modules write their state_dict themselves (`_packed_params`, `scale`,
# `zero_point`, through `_save_to_state_dict`) rather than from registered tensors, which
# are all a golden shows: their keys cannot come from a golden, and the oracle says so.
_QUANTIZED = pytest.mark.xfail(
    reason="quantized modules add state_dict keys that are no registered tensor", strict=True
)
CASES = [
    pytest.param(
        zoo_case, id=zoo_case.name, marks=[_QUANTIZED] if zoo_case.family == "quantization" else []
    )
    for zoo_case in all_cases()
    if (GOLDENS / f"test_model[{zoo_case.name}].fwdorder.txt").is_file()
]


@pytest.mark.parametrize("zoo_case", CASES)
def test_the_golden_gives_the_keys_dtypes_and_shapes_of_the_models_state_dict(
    zoo_case: ZooCase,
) -> None:
    model = zoo_case.build()
    golden = GOLDENS / f"test_model[{zoo_case.name}].fwdorder.txt"

    from_golden = read_reference(golden).signatures
    from_torch = state_dict_keys(model.state_dict()).signatures

    assert sorted(from_golden) == sorted(from_torch)
    assert {key: from_golden[key] for key in from_torch} == from_torch
    assert assert_checkpoint_compatible(model, golden).loads
