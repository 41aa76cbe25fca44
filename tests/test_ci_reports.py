"""Failed goldens in the reports CI shows: a pytest-html row, JUnit XML properties, and
GitHub Actions annotations, each without `--fwdorder-report`."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ElementTree
from typing import Any

import pytest

from pytest_fwdorder.report.ci import annotation_line, change_summary

CLASSIFIER_TEST = """
import os

import torch
from torch import nn


def build():
    layers = [nn.Linear(4, 8), nn.ReLU()]
    if os.environ.get("WITH_DROPOUT"):
        layers.append(nn.Dropout(0.1))
    layers.append(nn.Linear(8, 2))
    return nn.Sequential(*layers)


def test_classifier(forward_trace, snapshot):
    assert forward_trace(build(), torch.randn(2, 4)) == snapshot


def test_head(forward_trace, snapshot):
    assert forward_trace(nn.Linear(4, 3), torch.randn(2, 4)) == snapshot
"""
GOLDEN = "__snapshots__/test_ci_classifier/test_classifier.fwdorder.txt"
SUMMARY = "1 call inserted: 2 (Dropout) after 1 (ReLU); 1 call renamed: 2 (Linear) -> 3"
# `def test_classifier` is the 15th line of CLASSIFIER_TEST as pytester writes it.
TEST_LINE = 15


@pytest.fixture
def changed(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project whose classifier gained a Dropout after its goldens were accepted."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    pytester.makepyfile(test_ci_classifier=CLASSIFIER_TEST)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)
    monkeypatch.setenv("WITH_DROPOUT", "1")
    return pytester


def html_report_tests(pytester: pytest.Pytester) -> dict[str, Any]:
    """The tests pytest-html 4 keeps as JSON in its page's `data-jsonblob` attribute."""
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="([^"]*)"', page)
    assert blob is not None, "no data-jsonblob in the pytest-html page"
    tests: dict[str, Any] = json.loads(html.unescape(blob.group(1)))["tests"]
    return tests


def html_extras(tests: dict[str, Any], nodeid: str) -> list[str]:
    return [
        extra["content"]
        for report in tests[nodeid]
        for extra in report["extras"]
        if extra["format_type"] == "html"
    ]


# pytest-html


def test_a_failed_golden_shows_its_explanation_in_its_pytest_html_row(
    changed: pytest.Pytester,
) -> None:
    changed.runpytest("--html=report.html", "--self-contained-html").assert_outcomes(
        passed=1, failed=1
    )

    (extra,) = html_extras(html_report_tests(changed), "test_ci_classifier.py::test_classifier")
    explanation = re.search(r'<pre class="fwdorder-explanation"[^>]*>(.*?)</pre>', extra, re.S)
    assert explanation is not None
    assert html.unescape(explanation.group(1)).splitlines()[:4] == [
        "4 calls before, 5 after: 1 call inserted, 1 call renamed",
        "1 call inserted: 2 (Dropout) after 1 (ReLU)",
        "1 call renamed: 2 (Linear) -> 3",
        "",
    ]


def test_the_pytest_html_row_shows_the_changed_calls_side_by_side(
    changed: pytest.Pytester,
) -> None:
    changed.runpytest("--html=report.html", "--self-contained-html")

    (extra,) = html_extras(html_report_tests(changed), "test_ci_classifier.py::test_classifier")
    rows = re.findall(r'<tr data-kind="(\w+)"><td[^>]*>(.*?)</td><td[^>]*>(.*?)</td></tr>', extra)
    changed_rows = [(kind, html.unescape(old), html.unescape(new)) for kind, old, new in rows]
    assert ("inserted", "", "  2: Dropout (f32[2,8]) -> f32[2,8]") in changed_rows
    assert (
        "changed",
        "  2: Linear (f32[2,8]) -> f32[2,2]",
        "  3: Linear (f32[2,8]) -> f32[2,2]",
    ) in (changed_rows)


def test_a_passing_test_gets_no_pytest_html_extras(changed: pytest.Pytester) -> None:
    changed.runpytest("--html=report.html", "--self-contained-html")

    assert html_extras(html_report_tests(changed), "test_ci_classifier.py::test_head") == []


def test_without_html_a_failed_golden_adds_no_extras(changed: pytest.Pytester) -> None:
    changed.makeconftest(
        """
        def pytest_runtest_logreport(report):
            if report.when == "call":
                print(f"extras of {report.nodeid}: {getattr(report, 'extras', None)!r}")
        """
    )

    result = changed.runpytest("-s")

    # pytest-html, installed but inactive, still gives every report an empty list.
    result.stdout.fnmatch_lines(["*extras of test_ci_classifier.py::test_classifier: []*"])


def test_without_pytest_html_nothing_of_it_is_imported(changed: pytest.Pytester) -> None:
    changed.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            print(f"pytest_html imported: {'pytest_html' in sys.modules}")
        """
    )

    # pytest-html has two entry points: its plugin and its fixtures.
    result = changed.runpytest_subprocess(
        "-s", "-p", "no:html", "-p", "no:html_fixtures", "--junitxml=junit.xml"
    )

    result.stdout.fnmatch_lines(["*pytest_html imported: False*"])
    result.assert_outcomes(passed=1, failed=1)


# JUnit XML


def junit_properties(pytester: pytest.Pytester) -> dict[str, list[tuple[str, str]]]:
    """Each test case's properties in `junit.xml`, by test name."""
    root = ElementTree.parse(pytester.path / "junit.xml").getroot()
    return {
        case.attrib["name"]: [
            (item.attrib["name"], item.attrib["value"]) for item in case.iter("property")
        ]
        for case in root.iter("testcase")
    }


def test_junit_xml_carries_the_failure_summary_and_the_golden(changed: pytest.Pytester) -> None:
    changed.runpytest("--junitxml=junit.xml").assert_outcomes(passed=1, failed=1)

    assert junit_properties(changed)["test_classifier"] == [
        ("fwdorder_summary", SUMMARY),
        ("fwdorder_golden", GOLDEN),
    ]


def test_junit_xml_gives_a_passing_test_no_properties(changed: pytest.Pytester) -> None:
    changed.runpytest("--junitxml=junit.xml")

    assert junit_properties(changed)["test_head"] == []


def test_junit_xml_says_a_missing_golden_is_missing(changed: pytest.Pytester) -> None:
    (changed.path / "__snapshots__/test_ci_classifier/test_head.fwdorder.txt").unlink()

    changed.runpytest("--junitxml=junit.xml")

    assert junit_properties(changed)["test_head"][0] == (
        "fwdorder_summary",
        "no golden file yet: run `pytest --snapshot-update` to write it, then review it",
    )


def test_junit_xml_under_xdist_carries_the_summary(changed: pytest.Pytester) -> None:
    changed.runpytest_subprocess("-n", "2", "--junitxml=junit.xml", "-p", "no:randomly")

    assert junit_properties(changed)["test_classifier"][0] == ("fwdorder_summary", SUMMARY)


# GitHub Actions annotations


def annotations(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("::")]


def test_under_github_actions_a_failed_golden_prints_one_annotation(
    changed: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")

    result = changed.runpytest()

    assert annotations(result) == [
        f"::error file=test_ci_classifier.py,line={TEST_LINE},title=pytest-fwdorder::"
        f"{SUMMARY} (golden {GOLDEN})"
    ]


def test_without_github_actions_no_annotation_is_printed(changed: pytest.Pytester) -> None:
    result = changed.runpytest()

    assert annotations(result) == []


def test_the_annotation_points_at_the_test_function_line(
    changed: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    lines = (changed.path / "test_ci_classifier.py").read_text(encoding="utf-8").splitlines()

    result = changed.runpytest()

    line = int(re.search(r",line=(\d+),", annotations(result)[0]).group(1))  # type: ignore[union-attr]
    assert lines[line - 1] == "def test_classifier(forward_trace, snapshot):"


def test_an_annotation_escapes_percent_and_line_breaks() -> None:
    line = annotation_line("tests/a,b:c.py", 7, "100% changed\r\nsee below")

    assert line == (
        "::error file=tests/a%2Cb%3Ac.py,line=7,title=pytest-fwdorder::100%25 changed%0D%0Asee below"
    )


# The one-line summary


def test_the_summary_joins_the_kinds_of_change_in_one_line() -> None:
    old = "# pytest-fwdorder trace (format 2)\n# calls: 1\n0: Linear (f32[2,4]) -> f32[2,3]\n"
    new = (
        "# pytest-fwdorder trace (format 2)\n# calls: 2\n0: Linear (f32[2,4]) -> f32[2,3]\n"
        "1: ReLU (f32[2,3]) -> f32[2,3]\n"
    )

    assert change_summary(old, new) == "1 call inserted: 1 (ReLU) after 0 (Linear)"


def test_the_summary_of_a_golden_with_conflict_markers_says_so() -> None:
    new = "# pytest-fwdorder trace (format 2)\n# calls: 1\n0: Linear (f32[2,4]) -> f32[2,3]\n"
    old = new.replace("0: Linear", "<<<<<<< HEAD\n0: Linear") + "=======\n>>>>>>> other\n"

    assert change_summary(old, new).startswith(
        "the golden file holds unresolved merge-conflict markers"
    )
