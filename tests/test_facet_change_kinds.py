"""Kinds of change a facet declares (`change_kinds`, `FacetChangeKind`): a diff counts them
by name, its summary totals and words them, a review names the goldens with them, and the
package names none of them (operations' and costs' kinds are declared the same way); and the
mark a facet's lines under the calls are told apart by."""

from __future__ import annotations

import pytest
import torch
from facet_plugins import (
    ClashingKindLines,
    KindedNestingLines,
    NestingLines,
    UndeclaredKindLines,
    offered,
)
from torch import nn

from pytest_fwdorder import FacetChangeKind, TraceDiff, diff_golden, trace_forward
from pytest_fwdorder.calls.facet_records import checked_facets
from pytest_fwdorder.facets.operations import OPERATIONS
from pytest_fwdorder.report.review_format import kind_phrase


def _nested() -> nn.Module:
    return nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU()))


def _edited_diff(facet: object, request: pytest.FixtureRequest) -> TraceDiff:
    """The golden of a nested model, and the same with one line deepened and one inserted."""
    with offered(request.config, facet):
        old = trace_forward(_nested(), torch.ones(1), ops=True).render()
        assert old.count("      % open 2\n") == 1  # under 1.0, which the edit changes
        new = old.replace("      % open 2\n", "      % open 5\n      % open 7\n")
        return diff_golden(old, new)


def test_a_declared_kind_is_counted_by_name_totalled_and_worded(
    request: pytest.FixtureRequest,
) -> None:
    difference = _edited_diff(KindedNestingLines(), request)
    with offered(request.config, KindedNestingLines()):
        assert difference.count("nesting deepened") == 1
        assert difference.count("nesting opened") == 1
        assert difference.count(KindedNestingLines.change_kinds[2]) == 0
        assert [change.detail for change in difference.of_kind("nesting opened")] == ["open 7"]
        assert kind_phrase("nesting deepened") == "with nestings deepened"
    summary = difference.summary().splitlines()
    assert summary[0] == "4 calls before, 4 after: 1 nesting deepened, 1 nesting opened"
    assert summary[1:] == [
        "1 nesting deepened: 1.0: open 2 -> open 5",
        "1 nesting opened: 1.0: open 7",
    ]
    assert difference.explained_counts() == {"nesting deepened": 1, "nesting opened": 1}


def test_a_kind_no_facet_declares_is_refused_listing_the_declared_ones(
    request: pytest.FixtureRequest,
) -> None:
    difference = _edited_diff(KindedNestingLines(), request)
    with (
        offered(request.config, KindedNestingLines()),
        pytest.raises(
            ValueError, match=r"unknown change kind 'nesting shrunk'.*'nesting deepened'"
        ),
    ):
        difference.count("nesting shrunk")
    # Without the plugin its kinds are unknown, and operations' are still there.
    with pytest.raises(ValueError, match=r"'nesting deepened'.*'operation inserted'"):
        difference.count("nesting deepened")


def test_a_facet_giving_a_kind_it_does_not_declare_is_named(
    request: pytest.FixtureRequest,
) -> None:
    with pytest.raises(ValueError, match=r"facet 'opened' gave a change of kind 'nesting widened'"):
        _edited_diff(UndeclaredKindLines(), request)


def test_a_kind_is_named_by_its_noun_and_verb() -> None:
    kind = FacetChangeKind("operation", "inserted", "with operations inserted")
    assert kind.name == "operation inserted"


class _Relu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def test_the_built_in_kinds_read_as_before() -> None:
    """Operations' kinds, declared by their facet: the totals count operations, the line is
    the facet's own."""
    old = trace_forward(nn.Sequential(_Relu()), torch.ones(2), ops=True).render()
    new = old.replace(
        "~ relu(f32[2]) -> f32[2]\n", "~ relu(f32[2]) -> f32[2]\n    ~ relu(f32[2]) -> f32[2]\n"
    )
    assert new != old
    difference = diff_golden(old, new)
    assert difference.count("operation inserted") == 1
    assert difference.summary().splitlines()[-2:] == [
        "2 calls before, 2 after: 1 operation inserted",
        "1 operation inserted in 0: relu (op 2 of 2)",
    ]


@pytest.mark.parametrize(
    ("mark", "problem"),
    [
        ("%", r"facet 'opened' has the line mark '%'"),
        ("| ", r"facet 'opened' has the line mark '\| '"),
        ("# ", r"facet 'opened' has the line mark '# '"),
        ("x ", r"facet 'opened' has the line mark 'x '"),
        ("~ ", r"line mark '~ ', which the facet 'operations' already uses"),
    ],
)
def test_a_line_mark_the_golden_could_not_tell_apart_is_refused(mark: str, problem: str) -> None:
    """A mark is one character that starts no other line (not a fact's `|`, the header's
    `#`, a letter or digit of a path) and a space, and no other facet's: the golden's reader
    tells a facet's lines apart by it alone."""
    facet = NestingLines()
    facet.line_mark = mark
    with pytest.raises(ValueError, match=problem):
        checked_facets([OPERATIONS, facet], ())
    facet.line_mark = "% "
    assert checked_facets([OPERATIONS, facet], ()) == (OPERATIONS, facet)


def test_a_kind_whose_name_another_has_is_refused_naming_both(
    request: pytest.FixtureRequest,
) -> None:
    with (
        offered(request.config, ClashingKindLines()),
        pytest.raises(
            ValueError,
            match=r"facet 'opened' declares the change kind 'operation inserted', which facet "
            r"'operations' already has",
        ),
    ):
        trace_forward(nn.ReLU(), torch.ones(1)).diff(trace_forward(nn.ReLU(), torch.ones(1))).count(
            "operation inserted"
        )


def test_a_kind_object_no_facet_declares_is_refused() -> None:
    difference = trace_forward(nn.ReLU(), torch.ones(1)).diff(
        trace_forward(nn.ReLU(), torch.ones(1))
    )
    with pytest.raises(ValueError, match=r"unknown change kind FacetChangeKind\(noun='nesting'"):
        difference.count(FacetChangeKind("nesting", "deepened", "with nestings deepened"))


def test_a_costs_header_without_its_uncounted_section_adds_none() -> None:
    """A golden written before the section (or cut by hand) says nothing of operations
    without a FLOP formula: none is taken as added."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    text = trace_forward(model, torch.ones(1, 4), costs=True).render()
    section = "# uncounted operations (1):\n#   aten.relu x1\n"
    assert section in text
    without = text.replace(section, "")
    added = section.replace("(1):", "(2):") + "#   aten.gelu x1\n"

    assert (
        diff_golden(without, text.replace(section, added)).count("uncounted operation added") == 0
    )
    assert diff_golden(text, text.replace(section, added)).count("uncounted operation added") == 1
