"""The HTML report (`--fwdorder-report`), the saved failed goldens (`--fwdorder-save-failed`)
and a trace's display in a REPL and a notebook."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from cli_models import tiny, tiny_with_dropout
from torch import nn

from pytest_fwdorder import TensorSpec, trace_forward
from pytest_fwdorder.cli.main import EXIT_DIFFERENT, main
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.report.html import aligned_rows, render_report, trace_html
from pytest_fwdorder.snapshot.kept_comparisons import Comparison

PROJECT_TEST = """
import os

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Linear(4, 8), nn.ReLU()]
        if os.environ.get("FWDORDER_TEST_CHANGE"):
            layers.append(nn.Dropout(0.1))
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x))


def test_block(forward_trace, snapshot):
    assert forward_trace(Block().eval(), torch.randn(2, 4)) == snapshot


def test_linear(forward_trace, snapshot):
    assert forward_trace(nn.Linear(3, 3), torch.randn(1, 3)) == snapshot
"""
GOLDEN = "__snapshots__/test_project/test_block.fwdorder.txt"


def golden(model: nn.Module, *shape: int) -> str:
    return trace_forward(model.eval(), TensorSpec(shape)).render()


def comparison(
    status: str, new_text: str, old_text: str | None = None, test: str = "test_a"
) -> Comparison:
    return Comparison(
        test_id=f"tests/test_model.py::{test}",
        snapshot_name=test,
        golden_path=f"tests/__snapshots__/test_model/{test}.fwdorder.txt",
        status=status,  # type: ignore[arg-type]
        old_text=old_text,
        new_text=new_text,
    )


def attribute_values(page: str, element: str, css_class: str, attribute: str) -> list[str]:
    """The values of `attribute` on every `element` whose class list has `css_class`."""
    pattern = rf'<{element} class="(?:[^"]* )?{css_class}(?: [^"]*)?"[^>]*?{attribute}="([^"]*)"'
    return re.findall(pattern, page)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose two golden files were written and accepted."""
    pytester.makepyfile(test_project=PROJECT_TEST)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)
    return pytester


@pytest.fixture
def changed(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The same project after a Dropout was added at the end of `Block.body`."""
    monkeypatch.setenv("FWDORDER_TEST_CHANGE", "1")
    return project


def test_the_page_loads_nothing_from_outside_itself() -> None:
    page = render_report(
        [comparison("failed", golden(tiny_with_dropout(), 2, 4), golden(tiny(), 2, 4))]
    )

    assert not re.search(r"https?://|@import|\bsrc=", page)
    assert re.findall(r"<link [^>]*>", page) == ['<link rel="icon" href="data:,">']


def test_failed_goldens_come_first() -> None:
    text = golden(tiny(), 2, 4)
    page = render_report(
        [
            comparison("passed", text, text, test="test_a"),
            comparison("failed", golden(tiny_with_dropout(), 2, 4), text, test="test_b"),
            comparison("created", text, None, test="test_c"),
        ]
    )

    assert re.findall(r'data-status="(\w+)"', page) == ["failed", "created", "passed"]


def test_the_diff_highlights_exactly_the_inserted_call() -> None:
    page = render_report(
        [comparison("failed", golden(tiny_with_dropout(), 2, 4), golden(tiny(), 2, 4))]
    )

    assert attribute_values(page, "tr", "fo-inserted", "data-new-path") == ["body.2"]
    assert attribute_values(page, "tr", "fo-changed", "data-new-path") == []
    assert attribute_values(page, "tr", "fo-removed", "data-old-path") == []
    assert "5 calls before, 6 after: 1 call inserted" in page


def test_the_tree_highlights_the_inserted_call_too() -> None:
    page = render_report(
        [comparison("failed", golden(tiny_with_dropout(), 2, 4), golden(tiny(), 2, 4))]
    )

    assert attribute_values(page, "li", "fo-inserted", "data-path") == ["body.2"]


@pytest.mark.parametrize(
    ("old_model", "new_model"),
    [
        pytest.param(tiny(), tiny_with_dropout(), id="inserted"),
        pytest.param(
            nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Tanh()),
            nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.ReLU()),
            id="swapped",
        ),
        pytest.param(tiny(), nn.Sequential(tiny()), id="wrapped"),
        pytest.param(
            nn.Sequential(nn.Linear(4, 4), nn.ReLU()),
            nn.Sequential(nn.Linear(4, 4), nn.GELU()),
            id="type-changed",
        ),
    ],
)
def test_aligned_rows_are_the_rows_the_diff_explains(
    old_model: nn.Module, new_model: nn.Module
) -> None:
    difference = diff_golden(golden(old_model, 1, 4), golden(new_model, 1, 4))

    rows = aligned_rows(difference)

    # The oracle is the diff's own alignment, which it keeps private.
    expected = [(row.old, row.new, row.differs) for row in difference._rows]
    assert [(row.old, row.new, row.differs) for row in rows] == expected


def test_a_moved_call_shows_on_its_old_row_and_on_its_new_row() -> None:
    old = golden(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Tanh()), 1, 4)
    new = golden(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.ReLU()), 1, 4)

    page = render_report([comparison("failed", new, old)])

    assert attribute_values(page, "tr", "fo-moved", "data-old-path") == ["", "2"]
    assert attribute_values(page, "tr", "fo-moved", "data-new-path") == ["1", ""]


def test_aligned_rows_pair_every_call_once_on_each_side() -> None:
    difference = diff_golden(golden(tiny(), 2, 4), golden(tiny_with_dropout(), 2, 4))

    rows = aligned_rows(difference)

    assert [row.old for row in rows if row.old is not None] == list(range(5))
    assert [row.new for row in rows if row.new is not None] == list(range(6))


def test_the_tree_nests_calls_and_counts_reuse() -> None:
    class Reuse(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)
            self.act = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.linear(self.act(x)))

    fragment = trace_html(golden(Reuse(), 1, 4))

    assert fragment.count("#1 of 2") == 1
    assert fragment.count("#2 of 2") == 1
    assert '<li class="fo-node" data-path="&lt;root&gt;" data-type="Reuse"><details open>' in (
        fragment
    )
    assert "(3 calls inside)" in fragment
    assert "settings: in_features=4, out_features=4, bias=True" in fragment


def test_never_called_and_unregistered_modules_are_listed_and_marked() -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.ReLU()
            self.spare = nn.Linear(4, 4)
            self.hidden = [nn.Tanh()]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.hidden[0](self.used(x))

    fragment = trace_html(golden(Odd(), 1, 4))

    assert re.search(
        r'data-section="registered but never called"><strong>1 module</strong>.*?'
        r"<li>spare: Linear \| weight f32\[4,4\], bias f32\[4\]</li>",
        fragment,
    )
    assert 'data-section="called but not registered under the model"' in fragment
    assert attribute_values(fragment, "li", "fo-unregistered", "data-path") == ["hidden[0]"]


def test_a_run_without_comparisons_says_so() -> None:
    assert "No trace was compared with a golden file in this run." in render_report([])


def test_repr_shows_counts_and_the_first_calls() -> None:
    trace = trace_forward(tiny().eval(), TensorSpec((2, 4)))

    assert repr(trace).splitlines() == [
        "<Trace of Tiny: 5 calls>",
        "  5 modules called (0 more than once), 0 registered but never called, 0 unregistered",
        "  <root>: Tiny (f32[2,4]) -> f32[2,2]",
        "    body: Sequential (f32[2,4]) -> f32[2,8]",
        "      body.0: Linear (f32[2,4]) -> f32[2,8]",
        "      body.1: ReLU (f32[2,8]) -> f32[2,8]",
        "    head: Linear (f32[2,8]) -> f32[2,2]",
    ]


def test_repr_of_a_long_trace_says_how_many_calls_it_leaves_out() -> None:
    trace = trace_forward(nn.Sequential(*[nn.ReLU() for _ in range(20)]), torch.randn(1))

    assert repr(trace).splitlines()[-1] == "  ... 13 more calls: print(trace.render())"


def test_notebook_display_is_the_call_tree() -> None:
    trace = trace_forward(tiny().eval(), TensorSpec((2, 4)))

    fragment = trace._repr_html_()

    assert fragment.startswith('<div class="fwdorder"><style>')
    assert attribute_values(fragment, "li", "fo-node", "data-path") == [
        "<root>".replace("<", "&lt;").replace(">", "&gt;"),
        "body",
        "body.0",
        "body.1",
        "head",
    ]
    assert "<script" not in fragment


def test_an_assertion_message_names_the_trace_in_one_line(changed: pytest.Pytester) -> None:
    result = changed.runpytest()

    result.stdout.fnmatch_lines(["E * assert <Trace of Block: 6 calls> == snapshot 'test_block'"])


def test_the_report_holds_every_comparison_of_the_run(changed: pytest.Pytester) -> None:
    result = changed.runpytest("--fwdorder-report=out/report.html")

    result.assert_outcomes(passed=1, failed=1)
    page = (changed.path / "out/report.html").read_text(encoding="utf-8")
    assert re.findall(r'data-status="(\w+)" data-test="([^"]+)"', page) == [
        ("failed", "test_project.py::test_block"),
        ("passed", "test_project.py::test_linear"),
    ]
    assert attribute_values(page, "tr", "fo-inserted", "data-new-path") == ["body.2"]
    result.stdout.fnmatch_lines(["fwdorder: report of 2 trace(s) written to *report.html"])


def test_the_report_marks_goldens_that_snapshot_update_rewrote(changed: pytest.Pytester) -> None:
    changed.runpytest("--snapshot-update", "--fwdorder-report=report.html")

    page = (changed.path / "report.html").read_text(encoding="utf-8")
    assert re.findall(r'data-status="(\w+)"', page) == ["updated", "passed"]
    assert attribute_values(page, "tr", "fo-inserted", "data-new-path") == ["body.2"]


def test_the_report_marks_missing_goldens(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_project=PROJECT_TEST)

    pytester.runpytest("--fwdorder-report=report.html").assert_outcomes(failed=2)

    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert re.findall(r'data-status="(\w+)"', page) == ["missing", "missing"]


def test_save_failed_writes_the_new_trace_where_diff_can_compare_it(
    changed: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    changed.runpytest("--fwdorder-save-failed=failed-goldens").assert_outcomes(passed=1, failed=1)
    saved = sorted(
        path.relative_to(changed.path / "failed-goldens").as_posix()
        for path in (changed.path / "failed-goldens").rglob("*.txt")
    )
    capsys.readouterr()

    status = main(
        ["diff", str(changed.path / GOLDEN), str(changed.path / "failed-goldens" / GOLDEN)]
    )

    assert saved == [GOLDEN]
    assert status == EXIT_DIFFERENT
    assert capsys.readouterr().out.startswith("5 calls before, 6 after: 1 call inserted\n")


def test_the_report_gathers_the_comparisons_of_xdist_workers(changed: pytest.Pytester) -> None:
    pytest.importorskip("xdist")

    result = changed.runpytest(
        "-n", "2", "--fwdorder-report=report.html", "--fwdorder-save-failed=saved"
    )

    result.assert_outcomes(passed=1, failed=1)
    page = (changed.path / "report.html").read_text(encoding="utf-8")
    assert re.findall(r'data-status="(\w+)"', page) == ["failed", "passed"]
    assert (changed.path / "saved" / GOLDEN).is_file()


_UNPICKLABLE_FACET = """
import pytest


class Rounded:
    title = "rounded outputs"
    change_words = "rounded outputs changed"

    def __init__(self):
        self.rounding = lambda value: value  # pickle refuses a lambda

    def observe(self, output):
        return None  # no value: the accepted goldens still hold

    def render(self, value):
        return str(value)

    def parse(self, text):
        return int(text)

    def same(self, old, new):
        return old == new

    def describe_change(self, old, new):
        return f"{old} -> {new}"


@pytest.hookimpl
def pytest_fwdorder_facets():
    return [Rounded()]
"""


@pytest.mark.parametrize("as_errors", [False, True], ids=["warned", "warnings-as-errors"])
def test_an_unpicklable_facet_under_xdist_loses_no_comparison(
    changed: pytest.Pytester, as_errors: bool
) -> None:
    """The warning travels from the worker as text and is given on the controller once the
    report is written: warned in the worker, `filterwarnings = error` lost every comparison."""
    pytest.importorskip("xdist")
    changed.makeconftest(_UNPICKLABLE_FACET)
    if as_errors:
        changed.makeini("[pytest]\nfilterwarnings =\n    error\n")

    result = changed.runpytest_subprocess(
        "-n", "2", "-p", "no:randomly", "--fwdorder-report=r.html"
    )

    page = (changed.path / "r.html").read_text(encoding="utf-8")
    assert re.findall(r'data-status="(\w+)"', page) == ["failed", "passed"]
    output = result.stdout.str() + result.stderr.str()
    assert "fwdorder: report of 2 trace(s) written" in output
    assert "UnpicklableFacetWarning: the facet 'rounded outputs' (Rounded) cannot be sent" in output
    if not as_errors:
        result.stdout.fnmatch_lines(["*warnings summary*", "*UnpicklableFacetWarning*"])


def test_a_report_path_that_is_a_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.mkdir("reports")

    result = pytester.runpytest("--fwdorder-report=reports")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--fwdorder-report names a file to write, got the directory 'reports': write "
            "--fwdorder-report=reports/fwdorder-report.html"
        ]
    )


def test_save_failed_that_is_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".txt", saved="x")

    result = pytester.runpytest("--fwdorder-save-failed=saved.txt")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fwdorder-save-failed names a directory, got the file*"])


def test_without_the_options_nothing_is_written(changed: pytest.Pytester) -> None:
    before = {path for path in Path(changed.path).rglob("*")}

    changed.runpytest("-p", "no:cacheprovider")

    after = {path for path in Path(changed.path).rglob("*") if "__pycache__" not in path.parts}
    assert after - before == set()
