"""A recorded reference kept with a test's goldens: --snapshot-update writes it, a plain run
reads it without building the reference, and syrupy deletes it with the test."""

from __future__ import annotations

import pytest

PORT_TEST = """
import os

import torch
from torch import nn

from pytest_fwdorder import (
    assert_matches_reference, copy_mapped_weights, record_reference, reference_snapshot
)


def build_reference():
    if os.environ.get("NO_REFERENCE_HERE"):
        raise RuntimeError("the reference was built in a run that only reads it")
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()


def record():
    inputs = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    return record_reference(build_reference(), inputs, weights=True)


def {test_name}(snapshot):
    reference = reference_snapshot(snapshot, record)
    port = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    copy_mapped_weights(reference, port)
    assert_matches_reference(port, reference, path_map={{}})
"""


def _files(pytester: pytest.Pytester) -> list[str]:
    folder = pytester.path / "__snapshots__" / "test_port"
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


def test_an_update_writes_the_reference_and_a_plain_run_reads_it_without_building_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_port=PORT_TEST.format(test_name="test_port"))

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    assert _files(pytester) == ["test_port.reference.safetensors", "test_port.reference.txt"]

    monkeypatch.setenv("NO_REFERENCE_HERE", "1")
    pytester.runpytest().assert_outcomes(passed=1)


def test_the_building_check_of_the_plain_run_can_fail(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_port=PORT_TEST.format(test_name="test_port"))
    monkeypatch.setenv("NO_REFERENCE_HERE", "1")

    result = pytester.runpytest("--snapshot-update")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the reference was built in a run that only reads it*"])


def test_a_plain_run_without_a_recorded_reference_says_how_to_record_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_port=PORT_TEST.format(test_name="test_port"))

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*no reference recorded for this test at *test_port.reference.safetensors*: run "
         "pytest --snapshot-update where record() can build the reference model*"]
    )  # fmt: skip


def test_the_reference_is_deleted_with_its_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_port=PORT_TEST.format(test_name="test_port"))
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)

    pytester.makepyfile(test_port=PORT_TEST.format(test_name="test_renamed"))
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)

    assert _files(pytester) == ["test_renamed.reference.safetensors", "test_renamed.reference.txt"]
