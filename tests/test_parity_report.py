"""A failed parity check in the HTML report, a parity report's notebook display, and its
picture of the error per call."""

from __future__ import annotations

import dataclasses
import html
import re
import xml.etree.ElementTree as ElementTree

import pytest
import torch
from picture_geometry import legend
from test_parity import SMALL_PATH_MAP, _ids, _renamed_with_weights, _small
from torch import nn

from pytest_fwdorder import compare_with_reference, record_reference
from pytest_fwdorder.checks.parity import ParityReport
from pytest_fwdorder.picture.parity_picture import UNPAIRED_FILL, WITHIN_FILL, error_colour

SCRIPT_NAME = "<script>alert(1)</script>"

PARITY_PROJECT = f"""
from pathlib import Path

import torch
from torch import nn

from pytest_fwdorder import ReferenceMismatchError, assert_matches_reference, record_reference

NAME = {SCRIPT_NAME!r}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(NAME, nn.Linear(4, 4))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(getattr(self, NAME)(x))


def test_port():
    torch.manual_seed(0)
    reference_model = Model().eval()
    reference = record_reference(reference_model, torch.randn(3, 4), calls=["*", ""])
    candidate = Model().eval()
    candidate.load_state_dict(reference_model.state_dict())
    with torch.no_grad():
        getattr(candidate, NAME).bias.add_(1.0)
    try:
        assert_matches_reference(candidate, reference, path_map={{}})
    except ReferenceMismatchError as error:
        Path("message.txt").write_text(str(error), encoding="utf-8")
        raise


def test_passes():
    pass
"""


_TABLE_TITLE = "error at each paired call, in the order the reference made its outputs:"


def _text(fragment: str) -> str:
    """The text a reader sees of an HTML fragment: tags dropped, references resolved."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.fixture(scope="module")
def broken_report() -> ParityReport:
    """Small against its port with layer 1's residual left out (reference `blocks.1`)."""
    reference = record_reference(_small(), _ids(), weights=True)
    candidate = _renamed_with_weights(reference, broken_layer=1)
    return compare_with_reference(candidate, reference, path_map=SMALL_PATH_MAP)


def test_a_failed_parity_check_shows_its_report_on_the_page_escaped(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_port=PARITY_PROJECT)

    result = pytester.runpytest("--fwdorder-report=report.html")

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["fwdorder: report of 0 trace(s) and 1 failed parity check(s) written to *report.html"]
    )
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    message = (pytester.path / "message.txt").read_text(encoding="utf-8").splitlines()
    # The one <script> element is the page's own; the module's name is only ever text.
    assert page.count("<script>") == 1
    assert SCRIPT_NAME not in page
    assert html.escape(SCRIPT_NAME) in page
    entry = re.search(r'<details class="fo-entry fo-parity-entry".*?</details>\n', page, re.S)
    assert entry is not None
    assert 'data-status="failed" data-test="test_port.py::test_port" open>' in entry.group()
    assert "1 parity check failed" in page
    section = entry.group()
    headline = re.search(r'<div class="fo-summary fo-parity-headline">(.*?)</div>', section)
    assert headline is not None
    assert _text(headline.group(1)) == message[0]
    assert message[0].startswith(
        f"first divergence at {SCRIPT_NAME} (reference {SCRIPT_NAME}, paired call 1 of 3): "
    )
    environments = re.findall(r"<li>((?:reference|candidate): .*?)</li>", section)
    assert [_text(line) for line in environments] == [
        line for line in message if line.startswith(("reference: ", "candidate: "))
    ]
    rules = message[message.index("pairing rules:") + 1 : message.index(_TABLE_TITLE)]
    assert (
        [_text(rule) for rule in re.findall(r"<li>(.*?)</li>", _rules(section))]
        == [
            "equal paths: 2 calls",
            "the root with the root: 1 call",
        ]
        == [rule.strip() for rule in rules]
    )
    diverging = re.findall(r'<tr class="fo-diverges[^"]*" data-reference-path="([^"]*)"', section)
    assert [html.unescape(path) for path in diverging] == [SCRIPT_NAME, "head", ""]
    first = re.findall(
        r'<tr class="fo-diverges fo-first-divergence" data-reference-path="([^"]*)"', section
    )
    assert first == [html.escape(SCRIPT_NAME)]


def _rules(section: str) -> str:
    found = re.search(r'<ul class="fo-parity-list fo-parity-rules">.*?</ul>', section)
    assert found is not None
    return found.group()


def test_the_picture_colours_the_first_divergence_and_keeps_the_calls_before_it_green(
    broken_report: ParityReport,
) -> None:
    picture = broken_report.picture()

    root = ElementTree.fromstring(picture.svg)
    namespace = {"svg": "http://www.w3.org/2000/svg"}
    fills = {
        group.get("data-path"): group.find("svg:rect", namespace).get("fill")  # type: ignore[union-attr]
        for group in root.iterfind(".//svg:g", namespace)
        if "fo-box" in (group.get("class") or "").split()
    }
    first = [
        group.get("data-path")
        for group in root.iterfind(".//svg:g", namespace)
        if "fo-first-divergence" in (group.get("class") or "").split()
    ]
    divergence = broken_report.first_divergence
    assert divergence is not None
    # The candidate was broken in its layer 1, the reference's blocks.1.
    assert first == ["blocks.1"]
    assert fills["blocks.1"] == error_colour(divergence) != WITHIN_FILL
    assert [fills[path] for path in ("embed", "blocks.0", "blocks.0.norm", "blocks.0.mix")] == [
        WITHIN_FILL
    ] * 4
    assert fills["blocks.2"] != WITHIN_FILL


def test_the_picture_legend_shows_the_colours_error_colour_gives(
    broken_report: ParityReport,
) -> None:
    divergence = broken_report.first_divergence
    assert divergence is not None
    rtol = divergence.tolerance.rtol
    picture = broken_report.picture()
    # A call within tolerance (see the test above), and the border every box but the first
    # divergent one is drawn with, read from its box.
    embed = ElementTree.fromstring(picture.svg).find(
        ".//svg:g[@data-path='embed']/svg:rect", {"svg": "http://www.w3.org/2000/svg"}
    )
    assert embed is not None
    border = embed.get("stroke")

    assert legend(picture.svg) == [
        (embed.get("fill"), border, "within tolerance"),
        (error_colour(dataclasses.replace(divergence, relative_error=rtol)), border, "beyond"),
        (
            error_colour(dataclasses.replace(divergence, non_finite="NaN")),
            border,
            "1000x beyond, NaN",
        ),
        (UNPAIRED_FILL, border, "unpaired"),
        ("#ffffff", border, "not recorded"),  # white, as the module says
    ]


def test_the_oracle_of_the_picture_test_sees_a_candidate_that_matches() -> None:
    reference = record_reference(_small(), _ids(), weights=True)
    report = compare_with_reference(
        _renamed_with_weights(reference), reference, path_map=SMALL_PATH_MAP
    )

    svg = report.picture().svg

    assert "fo-first-divergence" not in svg
    assert error_colour(report.errors[0]) == WITHIN_FILL
    assert svg.count('<g class="fo-box fo-within"') == len(report.errors)


def test_the_picture_is_the_same_bytes_for_the_same_report(broken_report: ParityReport) -> None:
    copied = dataclasses.replace(broken_report, errors=list(broken_report.errors))

    assert copied.picture().svg == broken_report.picture().svg


def test_beyond_tolerance_the_colour_runs_from_yellow_to_red_and_stops(
    broken_report: ParityReport,
) -> None:
    divergence = broken_report.first_divergence
    assert divergence is not None
    rtol = divergence.tolerance.rtol

    colours = [
        error_colour(dataclasses.replace(divergence, relative_error=rtol * factor))
        for factor in (1, 10, 1000, 10**6)
    ]

    red = [int(colour[3:5], 16) for colour in colours]  # green falls as the error grows
    assert red[0] > red[1] > red[2] == red[3]
    assert colours[2] == colours[3]


def test_unpaired_calls_are_grey_and_names_are_escaped_in_the_picture() -> None:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module(SCRIPT_NAME, nn.Linear(4, 4))
    model.add_module("head", nn.Linear(4, 2))
    reference = record_reference(model.eval(), torch.randn(2, 4), calls=["*", ""])
    candidate = nn.Sequential()
    candidate.add_module("other", nn.Linear(4, 4))
    candidate.add_module("head", nn.Linear(4, 2))
    candidate.load_state_dict(
        {key.replace(SCRIPT_NAME, "other"): value for key, value in model.state_dict().items()}
    )

    report = compare_with_reference(candidate.eval(), reference, path_map={})
    svg = report.picture().svg

    root = ElementTree.fromstring(svg)
    namespace = {"svg": "http://www.w3.org/2000/svg"}
    boxes = {
        group.get("data-path"): group.find("svg:rect", namespace).get("fill")  # type: ignore[union-attr]
        for group in root.iterfind(".//svg:g", namespace)
        if "fo-box" in (group.get("class") or "").split()
    }
    assert boxes[SCRIPT_NAME] == UNPAIRED_FILL
    assert boxes["head"] == WITHIN_FILL
    assert SCRIPT_NAME not in svg


def test_a_parity_report_shows_itself_in_a_notebook(broken_report: ParityReport) -> None:
    shown = broken_report._repr_html_()

    assert shown.startswith('<div class="fwdorder"><style>')
    assert (
        _text(re.search(r'fo-parity-headline">(.*?)</div>', shown).group(1))
        == (  # type: ignore[union-attr]
            str(broken_report).splitlines()[0]
        )
    )
    assert "<svg " in shown
    assert "xmlns=" not in shown  # inline, so the display names no address
