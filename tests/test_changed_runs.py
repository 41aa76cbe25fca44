"""`changed_runs`: the runs where two sequences differ, as a line diff shows them."""

from __future__ import annotations

import pytest

from pytest_fwdorder.diff.ordered_pairing import ChangedRun, changed_runs


def rebuilt_new(old: str, runs: list[ChangedRun], new: str) -> str:
    """The oracle: `old` with each run's new part spliced in, checking that what lies
    between the runs is the same on both sides."""
    pieces, old_at, new_at = [], 0, 0
    for run in runs:
        assert old[old_at : run.old_start] == new[new_at : run.new_start]
        pieces += [old[old_at : run.old_start], new[run.new_start : run.new_end]]
        old_at, new_at = run.old_end, run.new_end
    assert old[old_at:] == new[new_at:]
    return "".join(pieces) + old[old_at:]


@pytest.mark.parametrize(
    ("old", "new"),
    [("abcd", "abxd"), ("abcd", "abd"), ("abd", "abcd"), ("", "ab"), ("ab", ""), ("aaaa", "aa")],
)
def test_the_runs_turn_the_old_sequence_into_the_new(old: str, new: str) -> None:
    runs = changed_runs(old, new)
    assert rebuilt_new(old, runs, new) == new
    assert all(run.tag in ("replace", "delete", "insert") for run in runs)


def test_the_runs_name_each_kind_of_change_and_nothing_shared() -> None:
    assert changed_runs("abcd", "abcd") == []
    assert changed_runs("abcd", "axcd") == [ChangedRun("replace", 1, 2, 1, 2)]
    assert changed_runs("abcd", "acd") == [ChangedRun("delete", 1, 2, 1, 1)]
    assert changed_runs("acd", "abcd") == [ChangedRun("insert", 1, 1, 1, 2)]


def test_the_oracle_fails_runs_that_leave_a_difference_out() -> None:
    with pytest.raises(AssertionError, match="assert 'abcd' == 'abxd'"):
        rebuilt_new("abcd", [], "abxd")
