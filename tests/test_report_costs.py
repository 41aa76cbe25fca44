"""FLOPs bars in the HTML report and the notebook display, for traces with costs.

A trace without costs gets no cost markup at all (checked once against the report module
of the commit before the bars: byte-identical pages; the browser and report tests pin the
page since).
"""

from __future__ import annotations

import html
import re

import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.report.html import render_report, trace_html
from pytest_fwdorder.snapshot.kept_comparisons import Comparison

# One `<li>` per call: its path, then (with costs) the bar's width and the figures.
BAR = re.compile(
    r'<li class="[^"]*" data-path="(?P<path>[^"]*)".*?'
    r'<span class="fo-cost" title="(?P<title>[^"]*)">'
    r'<span class="fo-cost-bar" style="width: (?P<width>[0-9.]+)%"></span></span>'
    r'<span class="fo-cost-figure">(?P<figure>[^<]*)</span>'
)


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 1),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    ).eval()


def golden(*, costs: bool) -> str:
    return trace_forward(model(), torch.randn(1, 3, 8, 8), costs=costs).render()


def comparison(new_text: str, status: str = "passed", old_text: str | None = None) -> Comparison:
    return Comparison(
        test_id="tests/test_model.py::test_a",
        snapshot_name="test_a",
        golden_path="tests/__snapshots__/test_model/test_a.fwdorder.txt",
        status=status,  # type: ignore[arg-type]
        old_text=old_text,
        new_text=new_text,
    )


def test_each_call_has_a_bar_as_long_as_its_share_of_the_forwards_flops() -> None:
    bars = {match["path"]: match for match in BAR.finditer(trace_html(golden(costs=True)))}

    assert {path: bar["width"] for path, bar in bars.items()} == {
        "&lt;root&gt;": "100.0",
        "0": "50.9",  # 55,296 of 108,544
        "1": "0.0",
        "2": "30.2",  # 32,768 of 108,544
        "3": "0.0",
        "4": "18.9",  # 20,480 of 108,544
    }
    assert bars["0"]["figure"] == "55.3 k FLOPs, 50.9%"
    assert html.unescape(bars["0"]["title"]) == "55,296 of the forward's 108,544 FLOPs"


def test_the_bars_widths_are_the_traces_own_shares() -> None:
    # The oracle: the API's figures, call by call.
    trace = trace_forward(model(), torch.randn(1, 3, 8, 8), costs=True)
    assert trace.costs is not None

    bars = {match["path"]: match["width"] for match in BAR.finditer(trace._repr_html_())}

    for call in trace.calls:
        assert call.costs is not None
        assert (
            bars[html.escape(call.display_path)]
            == f"{100 * call.costs.flops / trace.costs.flops:.1f}"
        )


def test_the_report_page_shows_the_bars_and_their_style() -> None:
    page = render_report([comparison(golden(costs=True))])

    assert len(BAR.findall(page)) == 6
    assert ".fwdorder .fo-cost-bar {" in page


def test_the_costs_figures_are_escaped() -> None:
    text = golden(costs=True).replace("<root>: Sequential", "<root>: Seq<b>uential", 1)

    page = trace_html(text)

    assert "Seq<b>uential" not in page
    assert "Seq&lt;b&gt;uential" in page


def test_a_forward_of_zero_flops_draws_empty_bars() -> None:
    text = trace_forward(nn.ReLU(), torch.randn(2, 3), costs=True).render()

    widths = [match["width"] for match in BAR.finditer(trace_html(text))]

    assert widths == ["0.0"]


def test_without_costs_the_notebook_display_has_no_cost_markup() -> None:
    assert "fo-cost" not in trace_html(golden(costs=False))


def test_without_costs_the_report_page_has_no_cost_markup_or_style() -> None:
    old = golden(costs=False)
    new = trace_forward(
        nn.Sequential(nn.Linear(4, 8), nn.ReLU()).eval(), torch.randn(2, 4)
    ).render()

    page = render_report([comparison(old), comparison(new, "failed", old_text=old)])

    assert "fo-cost" not in page
