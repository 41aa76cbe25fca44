"""A corpus of everyday refactors, each explained as a reviewer would: the kinds of change
the summary states are exactly the true ones, and it names where they are."""

from __future__ import annotations

import pytest
from refactor_corpus import REFACTORS, Refactor

from pytest_fwdorder import (
    StructureMismatchError,
    assert_same_structure,
    structure_diff,
    trace_forward,
)


def traces(refactor: Refactor) -> tuple[object, object]:
    """The traces before and after, made once for both tests (traces are not changed)."""
    if refactor.name not in _TRACES:
        before = trace_forward(refactor.before(), *refactor.example())
        after_example = refactor.example_after or refactor.example
        after = trace_forward(refactor.after(), *after_example())
        _TRACES[refactor.name] = (before, after)
    return _TRACES[refactor.name]


_TRACES: dict[str, tuple[object, object]] = {}


@pytest.mark.parametrize("refactor", REFACTORS, ids=[refactor.name for refactor in REFACTORS])
def test_the_summary_states_the_true_changes_and_where(refactor: Refactor) -> None:
    before, after = traces(refactor)

    difference = before.diff(after)

    summary = difference.summary()
    assert difference.explained_counts() == refactor.counts, summary
    for sentence in refactor.sentences:
        assert sentence in summary.splitlines() or sentence in summary, summary


@pytest.mark.parametrize("refactor", REFACTORS, ids=[refactor.name for refactor in REFACTORS])
def test_the_name_free_comparison_names_where(refactor: Refactor) -> None:
    before, after = traces(refactor)

    if refactor.keeps_structure:
        passed = assert_same_structure(before, after, ignore=("paths",))
        assert passed.summary().startswith("same structure (ignoring paths)")
        return
    with pytest.raises(StructureMismatchError, match="execution structure differs") as raised:
        assert_same_structure(before, after, ignore=("paths",))
    for text in refactor.name_free:
        assert text in str(raised.value), str(raised.value)
    # Names are not compared here, so a rename cannot be a finding.
    summary = str(raised.value).partition("\n\n")[0]
    assert "renamed" not in summary, summary
    if refactor.name_free_counts is not None:
        counts = structure_diff(before, after, ignore=("paths",)).explained_counts()
        assert counts == refactor.name_free_counts, summary
