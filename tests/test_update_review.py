"""`pytest --snapshot-update` is reviewable: one line per golden it accepted, the obsolete
goldens by file name with the command that removes them, and `--fwdorder-update-only`."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

import pytest

ENCODER_TEST = """
import os

import torch
from torch import nn


def build():
    layers = [nn.Linear(4, 8), nn.ReLU()]
    if os.environ.get("WITH_DROPOUT"):
        layers.append(nn.Dropout(0.1))
    layers.append(nn.Linear(8, 2))
    return nn.Sequential(*layers)


def test_encoder(forward_trace, snapshot):
    assert forward_trace(build(), torch.randn(2, 4)) == snapshot


def test_head(forward_trace, snapshot):
    width = 5 if os.environ.get("WITH_DROPOUT") else 3
    assert forward_trace(nn.Linear(4, width), torch.randn(2, 4)) == snapshot
"""
SNAPSHOTS = "__snapshots__/test_review_encoder"
ENCODER_GOLDEN = f"{SNAPSHOTS}/test_encoder.fwdorder.txt"
HEAD_GOLDEN = f"{SNAPSHOTS}/test_head.fwdorder.txt"


@pytest.fixture
def accepted(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with two tests whose goldens were written and accepted."""
    pytester.makepyfile(test_review_encoder=ENCODER_TEST)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)
    return pytester


@pytest.fixture
def changed(accepted: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The accepted project after a Dropout was inserted and the head widened."""
    monkeypatch.setenv("WITH_DROPOUT", "1")
    return accepted


def remove_test_head(pytester: pytest.Pytester) -> None:
    """Leave `test_head`'s golden obsolete: no test asserts it any more."""
    source = ENCODER_TEST[: ENCODER_TEST.index("def test_head")]
    pytester.makepyfile(test_review_encoder=source)


# One line per golden accepted


def test_an_update_prints_what_it_accepted_per_golden(changed: pytest.Pytester) -> None:
    result = changed.runpytest("--snapshot-update")

    result.stdout.fnmatch_lines(
        [
            "fwdorder: --snapshot-update accepted 2 golden file(s):",
            f"  {ENCODER_GOLDEN}: 1 call inserted: 2 (Dropout) after 1 (ReLU); "
            "1 call renamed: 2 (Linear) -> 3",
            f"  {HEAD_GOLDEN}: output changed at 1 call: <root> (Linear) output (2, 3) -> (2, 5); "
            "settings changed at 1 call: <root> (Linear): out_features 3 -> 5 "
            "(weight f32[3,4] -> f32[5,4]; bias f32[3] -> f32[5])",
        ]
    )


def test_a_new_golden_is_accepted_with_its_number_of_calls(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_review_encoder=ENCODER_TEST)

    result = pytester.runpytest("--snapshot-update")

    result.stdout.fnmatch_lines(
        [
            "fwdorder: --snapshot-update accepted 2 golden file(s):",
            f"  {ENCODER_GOLDEN}: new golden, 4 calls",
            f"  {HEAD_GOLDEN}: new golden, 1 call",
        ]
    )


def test_an_update_that_changes_nothing_prints_no_accepted_line(
    accepted: pytest.Pytester,
) -> None:
    result = accepted.runpytest("--snapshot-update")

    assert not [line for line in result.outlines if line.startswith("fwdorder: --snapshot-update")]


def test_the_accepted_lines_come_from_xdist_workers_too(changed: pytest.Pytester) -> None:
    result = changed.runpytest_subprocess("--snapshot-update", "-n", "2", "-p", "no:randomly")

    result.stdout.fnmatch_lines(
        [
            "fwdorder: --snapshot-update accepted 2 golden file(s):",
            f"  {ENCODER_GOLDEN}: 1 call inserted: *",
            f"  {HEAD_GOLDEN}: output changed at 1 call: *",
        ]
    )


# Obsolete goldens


def test_an_update_lists_the_obsolete_goldens_it_deleted(accepted: pytest.Pytester) -> None:
    remove_test_head(accepted)

    result = accepted.runpytest("--snapshot-update")

    result.stdout.fnmatch_lines(
        ["fwdorder: deleted 1 obsolete golden file(s) no test asserted:", f"  {HEAD_GOLDEN}"]
    )
    assert not (accepted.path / HEAD_GOLDEN).exists()


def test_obsolete_goldens_kept_by_no_cleanup_come_with_the_command_that_removes_them(
    accepted: pytest.Pytester,
) -> None:
    remove_test_head(accepted)

    result = accepted.runpytest("--snapshot-update", "--snapshot-no-cleanup")

    result.stdout.fnmatch_lines(
        [
            "fwdorder: kept 1 obsolete golden file(s) no test asserted:",
            f"  {HEAD_GOLDEN}",
            f"  remove them with `rm {HEAD_GOLDEN}`, or run `pytest --snapshot-update` again "
            "with every test selected",
        ]
    )
    assert (accepted.path / HEAD_GOLDEN).is_file()


def test_the_printed_command_removes_the_obsolete_golden(accepted: pytest.Pytester) -> None:
    remove_test_head(accepted)
    result = accepted.runpytest("--snapshot-update", "--snapshot-no-cleanup")
    line = next(line for line in result.outlines if "remove them with" in line)
    command = line.split("`")[1]

    subprocess.run(shlex.split(command), cwd=accepted.path, check=True)

    assert sorted(path.name for path in (accepted.path / SNAPSHOTS).iterdir()) == [
        "test_encoder.fwdorder.txt"
    ]


def test_the_goldens_of_a_failing_test_are_not_listed_as_obsolete(
    accepted: pytest.Pytester,
) -> None:
    accepted.makepyfile(
        test_review_encoder=ENCODER_TEST.replace(
            "def test_head(forward_trace, snapshot):\n",
            "def test_head(forward_trace, snapshot):\n    raise RuntimeError('broken')\n",
        )
    )

    result = accepted.runpytest("--snapshot-update")

    result.assert_outcomes(passed=1, failed=1)
    assert not [line for line in result.outlines if "obsolete golden" in line]
    assert (accepted.path / HEAD_GOLDEN).is_file()


# --fwdorder-update-only


def test_update_only_rewrites_a_matching_golden(changed: pytest.Pytester) -> None:
    before = (changed.path / ENCODER_GOLDEN).read_bytes()

    result = changed.runpytest("--snapshot-update", "--fwdorder-update-only=*/test_encoder.*")

    result.assert_outcomes(passed=1, failed=1)
    assert (changed.path / ENCODER_GOLDEN).read_bytes() != before
    assert b"Dropout" in (changed.path / ENCODER_GOLDEN).read_bytes()


def test_update_only_leaves_a_changed_golden_it_does_not_match_failing_and_untouched(
    changed: pytest.Pytester,
) -> None:
    before = (changed.path / HEAD_GOLDEN).read_bytes()

    result = changed.runpytest("--snapshot-update", "--fwdorder-update-only=*/test_encoder.*")

    assert [report.nodeid for report in result.reprec.getfailures()] == [  # type: ignore[attr-defined]
        "test_review_encoder.py::test_head"
    ]
    assert (changed.path / HEAD_GOLDEN).read_bytes() == before


def test_update_only_says_why_a_golden_was_not_written(changed: pytest.Pytester) -> None:
    result = changed.runpytest("--snapshot-update", "--fwdorder-update-only=*/test_encoder.*")

    result.stdout.fnmatch_lines(
        [
            "E       AssertionError: assert <Trace of Linear: 1 call> == snapshot 'test_head'",
            f"E         Not written: '{HEAD_GOLDEN}' matches no --fwdorder-update-only pattern "
            "('*/test_encoder.*'); add a pattern that matches it to accept it.",
        ]
    )


def test_update_only_lists_only_what_it_accepted(changed: pytest.Pytester) -> None:
    result = changed.runpytest("--snapshot-update", "--fwdorder-update-only=*/test_encoder.*")

    result.stdout.fnmatch_lines(
        ["fwdorder: --snapshot-update accepted 1 golden file(s):", f"  {ENCODER_GOLDEN}: *"]
    )


def test_update_only_takes_several_patterns(changed: pytest.Pytester) -> None:
    result = changed.runpytest(
        "--snapshot-update",
        "--fwdorder-update-only=*/test_encoder.*",
        f"--fwdorder-update-only={HEAD_GOLDEN}",
    )

    result.assert_outcomes(passed=2)


def test_update_only_does_not_write_a_new_golden_it_does_not_match(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_review_encoder=ENCODER_TEST)

    result = pytester.runpytest("--snapshot-update", "--fwdorder-update-only=*/test_encoder.*")

    result.assert_outcomes(passed=1, failed=1)
    assert not (pytester.path / HEAD_GOLDEN).exists()


def test_update_only_keeps_obsolete_goldens_and_lists_them(accepted: pytest.Pytester) -> None:
    remove_test_head(accepted)

    result = accepted.runpytest("--snapshot-update", "--fwdorder-update-only=*/test_encoder.*")

    result.stdout.fnmatch_lines([f"  remove them with `rm {HEAD_GOLDEN}`*"])
    assert Path(accepted.path / HEAD_GOLDEN).is_file()


def test_update_only_without_snapshot_update_is_a_usage_error(accepted: pytest.Pytester) -> None:
    result = accepted.runpytest("--fwdorder-update-only=*")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "ERROR: --fwdorder-update-only limits which goldens --snapshot-update writes, but "
        "--snapshot-update is not given (patterns ['*']): add --snapshot-update, or leave "
        "out --fwdorder-update-only"
    ) in result.stderr.lines


def test_update_only_with_an_empty_pattern_is_a_usage_error(accepted: pytest.Pytester) -> None:
    result = accepted.runpytest("--snapshot-update", "--fwdorder-update-only=")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fwdorder-update-only takes a glob*got ''*"])


def test_update_only_says_once_that_a_pattern_matched_no_golden(changed: pytest.Pytester) -> None:
    result = changed.runpytest(
        "--snapshot-update",
        "--fwdorder-update-only=*/test_encoder.*",
        "--fwdorder-update-only=*/test_decoder.*",
    )

    lines = [line for line in result.outlines if "matched no golden" in line]
    assert lines == [
        "fwdorder: --fwdorder-update-only pattern '*/test_decoder.*' matched no golden this run "
        "compared, so it wrote nothing; a pattern is a glob on the golden's path relative to "
        f"the rootdir, like '{ENCODER_GOLDEN}', or a bare test name like 'test_encoder'"
    ]


def test_update_only_is_silent_about_patterns_that_matched(changed: pytest.Pytester) -> None:
    result = changed.runpytest("--snapshot-update", "--fwdorder-update-only=*/test_encoder.*")

    assert not [line for line in result.outlines if "matched no golden" in line]


def test_update_only_takes_a_bare_test_name_as_the_golden_of_that_test(
    changed: pytest.Pytester,
) -> None:
    head_before = (changed.path / HEAD_GOLDEN).read_bytes()

    result = changed.runpytest("--snapshot-update", "--fwdorder-update-only=test_encoder")

    result.assert_outcomes(passed=1, failed=1)
    assert b"Dropout" in (changed.path / ENCODER_GOLDEN).read_bytes()
    assert (changed.path / HEAD_GOLDEN).read_bytes() == head_before
    assert not [line for line in result.outlines if "matched no golden" in line]


# Under pytest-xdist the workers compare the goldens; the controller prints the summary.
WORKERS = [pytest.param((), id="one process"), pytest.param(("-n", "2"), id="xdist")]


def run_in_subprocess(pytester: pytest.Pytester, *arguments: str) -> pytest.RunResult:
    """Run pytest in a fresh process, with pytest-xdist's workers where `-n` asks for them."""
    if "-n" in arguments:
        pytest.importorskip("xdist", reason="pytest-xdist is not installed")
    return pytester.runpytest_subprocess(*arguments, "-p", "no:randomly")


@pytest.mark.parametrize("workers", WORKERS)
def test_update_only_says_once_that_a_pattern_matched_no_golden_also_under_xdist(
    changed: pytest.Pytester, workers: tuple[str, ...]
) -> None:
    result = run_in_subprocess(
        changed,
        "--snapshot-update",
        "--fwdorder-update-only=*/test_encoder.*",
        "--fwdorder-update-only=test_decoder",
        *workers,
    )

    result.assert_outcomes(passed=1, failed=1)
    lines = [line for line in result.outlines if "matched no golden" in line]
    assert lines == [
        "fwdorder: --fwdorder-update-only pattern 'test_decoder' matched no golden this run "
        "compared, so it wrote nothing; a pattern is a glob on the golden's path relative to "
        f"the rootdir, like '{ENCODER_GOLDEN}', or a bare test name like 'test_encoder'"
    ]


@pytest.mark.parametrize("workers", WORKERS)
def test_update_only_under_xdist_is_silent_about_a_pattern_one_worker_matched(
    changed: pytest.Pytester, workers: tuple[str, ...]
) -> None:
    result = run_in_subprocess(
        changed,
        "--snapshot-update",
        "--fwdorder-update-only=test_encoder",
        "--fwdorder-update-only=test_head",
        *workers,
    )

    result.assert_outcomes(passed=2)
    assert not [line for line in result.outlines if "matched no golden" in line]


@pytest.mark.parametrize("workers", WORKERS)
def test_the_golden_of_an_erroring_test_is_left_untouched_by_an_update(
    accepted: pytest.Pytester, workers: tuple[str, ...]
) -> None:
    accepted.makepyfile(
        test_review_encoder=ENCODER_TEST.replace(
            "def test_head(forward_trace, snapshot):\n",
            "def test_head(forward_trace, snapshot):\n    raise RuntimeError('broken')\n",
        )
    )
    golden = accepted.path / HEAD_GOLDEN
    before = (golden.stat().st_mtime_ns, golden.read_bytes())
    time.sleep(0.01)  # so that a rewrite would show in the modification time

    result = run_in_subprocess(accepted, "--snapshot-update", *workers)

    result.assert_outcomes(passed=1, failed=1)
    assert golden.is_file()
    assert (golden.stat().st_mtime_ns, golden.read_bytes()) == before
    assert (
        "fwdorder: kept 1 golden file(s) whose test failed, errored or was skipped before "
        "asserting them; they are deleted only when their test passes without asserting them"
    ) in result.outlines
    assert not [line for line in result.outlines if "obsolete golden" in line]
    assert not [line for line in result.outlines if "Deleted" in line]


@pytest.mark.parametrize("workers", WORKERS)
def test_update_only_leaves_a_golden_it_does_not_match_untouched(
    changed: pytest.Pytester, workers: tuple[str, ...]
) -> None:
    golden = changed.path / HEAD_GOLDEN
    before = (golden.stat().st_mtime_ns, golden.read_bytes())
    time.sleep(0.01)

    result = run_in_subprocess(
        changed, "--snapshot-update", "--fwdorder-update-only=test_encoder", *workers
    )

    result.assert_outcomes(passed=1, failed=1)
    assert (golden.stat().st_mtime_ns, golden.read_bytes()) == before


def test_update_only_under_xdist_says_nothing_of_patterns_when_a_worker_crashed(
    changed: pytest.Pytester,
) -> None:
    # The crashed worker sent none of the goldens it compared, so whether a pattern matched
    # one is unknown: the line would be a guess.
    changed.makepyfile(
        test_crash="import os\n\n\ndef test_crash():\n    os._exit(1)\n",
    )

    result = run_in_subprocess(
        changed,
        "--snapshot-update",
        "--fwdorder-update-only=test_decoder",
        "-n",
        "2",
    )

    assert any("crashed" in line or "worker" in line for line in result.outlines)
    assert not [line for line in result.outlines if "matched no golden" in line]


@pytest.mark.parametrize("workers", WORKERS)
def test_an_update_with_an_erroring_test_still_deletes_an_obsolete_golden(
    accepted: pytest.Pytester, workers: tuple[str, ...]
) -> None:
    other = "import torch\nfrom torch import nn\n\n\ndef test_{}(forward_trace, snapshot):\n"
    other += "    assert forward_trace(nn.ReLU(), torch.randn(2)) == snapshot\n"
    accepted.makepyfile(test_other=other.format("old"))
    accepted.runpytest("--snapshot-update", "test_other.py").assert_outcomes(passed=1)
    accepted.makepyfile(
        test_other=other.format("new"),
        test_review_encoder=ENCODER_TEST.replace(
            "def test_head(forward_trace, snapshot):\n",
            "def test_head(forward_trace, snapshot):\n    raise RuntimeError('broken')\n",
        ),
    )
    head = accepted.path / HEAD_GOLDEN
    before = (head.stat().st_mtime_ns, head.read_bytes())
    time.sleep(0.01)

    result = run_in_subprocess(accepted, "--snapshot-update", *workers)

    result.assert_outcomes(passed=2, failed=1)
    assert not (accepted.path / "__snapshots__/test_other/test_old.fwdorder.txt").exists()
    assert (head.stat().st_mtime_ns, head.read_bytes()) == before
    result.stdout.fnmatch_lines(
        [
            "fwdorder: deleted 1 obsolete golden file(s) no test asserted:",
            "  __snapshots__/test_other/test_old.fwdorder.txt",
        ]
    )
