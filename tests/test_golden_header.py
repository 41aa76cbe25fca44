"""A golden's header read once into a typed record (`GoldenHeader`): its lines, and the facts
a comparison reads from them, each read the first time it is asked for."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from pytest_fwdorder import diff_golden, trace_forward
from pytest_fwdorder.golden import header as header_module
from pytest_fwdorder.golden.format import header_sections
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.golden.parse import parse_golden


def _golden(**options: Any) -> str:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).train()
    return trace_forward(model, torch.randn(3, 4), **options).render()


def test_the_header_is_its_lines_as_a_list_gives_them() -> None:
    text = _golden()
    header, _ = parse_golden(text)
    lines = [line for line in text.splitlines() if line.startswith("#")]

    assert header == lines
    assert list(header) == lines
    assert header[1:3] == lines[1:3]
    assert header[0] == lines[0]
    assert lines[2] in header
    assert "# not a line of it" not in header
    assert header != [*lines, "# one more"]


def test_its_facts_are_typed_and_match_the_trace() -> None:
    header, _ = parse_golden(_golden())
    assert header.mode == "train"
    assert header.forward_runs == ()
    assert header.odd_blocks == ()


def test_its_sections_are_split_once_however_often_they_are_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []

    def counted(lines: Any) -> dict[str, list[str]]:
        reads.append(len(lines))
        return header_sections(lines)

    monkeypatch.setattr(header_module, "header_sections", counted)
    header, _ = parse_golden(_golden(costs=True))

    uncounted = GoldenHeader.sections_of(header)["uncounted operations"]
    assert header.forward_runs == ()
    assert header.odd_blocks == ()
    assert GoldenHeader.sections_of(header) is header.sections
    assert uncounted == ["aten.relu x1"]
    assert len(reads) == 1
    # The oracle counts every split: lines given as a list are split at each ask.
    lines = list(header)
    GoldenHeader.sections_of(lines)
    GoldenHeader.sections_of(lines)
    assert len(reads) == 3


class _CountingFacet:
    """A trace facet's reading side, counting its reads."""

    title = "counted"

    def __init__(self) -> None:
        self.reads = 0

    def read_header(self, header: Any) -> Any:
        self.reads += 1
        return len(header)


def test_a_trace_facets_value_is_read_once_per_header() -> None:
    header, _ = parse_golden(_golden())
    facet = _CountingFacet()

    values = {header.facet_value(facet) for _ in range(3)}  # type: ignore[arg-type]

    assert values == {len(header)}
    assert facet.reads == 1
    assert GoldenHeader.of(header) is header


def test_a_diff_reads_the_costs_section_once_per_side(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []

    def counted(lines: Any) -> dict[str, list[str]]:
        reads.append(len(lines))
        return header_sections(lines)

    before = _golden(costs=True)
    after = before.replace("#   aten.relu x1", "#   aten.relu x1\n#   aten.gelu x1")
    monkeypatch.setattr(header_module, "header_sections", counted)

    summary = str(diff_golden(before, after))

    assert "uncounted operation added" in summary, summary
    assert len(reads) == 2  # costs, forward runs and odd blocks share each side's split
