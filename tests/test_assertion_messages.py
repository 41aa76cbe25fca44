"""Assertion helpers fail with their message alone: none of our own frames in the traceback."""

from __future__ import annotations

import pytest

HELPER_FAILURES = {
    "checkpoint": """
import torch
from torch import nn
from pytest_fwdorder import assert_checkpoint_loads

def test_it():
    assert_checkpoint_loads(nn.Linear(2, 2), {"weight": torch.full((3, 3), 1234.5)})
""",
    "structure": """
import torch
from torch import nn
from pytest_fwdorder import assert_same_structure, trace_forward

def test_it():
    x = torch.randn(1, 4)
    before = trace_forward(nn.Sequential(nn.Linear(4, 4)), x)
    after = trace_forward(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), x)
    assert_same_structure(before, after)
""",
    "equivalence": """
import torch
from torch import nn
from pytest_fwdorder import assert_equivalent

def test_it():
    torch.manual_seed(0)
    first, second = nn.Sequential(nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 4))
    assert_equivalent(first, second, torch.randn(1, 4))
""",
}
# What each failure must say, and a line of the helper's own source it must not show.
EXPECTED = {
    "checkpoint": ("*the checkpoint does not load into the model:*", "report = check_checkpoint"),
    "structure": ("*execution structure differs*", "remaining = _structure_diff"),
    "equivalence": ("*NotEquivalentError*", "report ="),
}


@pytest.mark.parametrize("helper", sorted(HELPER_FAILURES))
def test_a_failing_assertion_helper_shows_its_message_and_not_its_own_source(
    pytester: pytest.Pytester, helper: str
) -> None:
    pytester.makepyfile(test_helper=HELPER_FAILURES[helper])
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")

    message, own_source = EXPECTED[helper]
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([message])
    assert own_source not in result.stdout.str()
    assert "pytest_fwdorder/" not in result.stdout.str()


def test_an_unregistered_module_error_shows_its_message_and_not_our_checks(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_unregistered="""
        import torch
        from torch import nn
        from pytest_fwdorder import trace_forward

        class Holder(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = [nn.Linear(2, 2)]

            def forward(self, x):
                return self.blocks[0](x)

        def test_it():
            trace_forward(Holder(), torch.randn(1, 2), unregistered="error")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*UnregisteredModuleError: 1 module(s) own parameters*"])
    assert "raise UnregisteredModuleError(message)" not in result.stdout.str()
    assert "_check_unregistered(trace, options.unregistered)" not in result.stdout.str()
