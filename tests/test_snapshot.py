"""The syrupy extension as a user meets it: what is stored, under which name, what a failure says."""

from __future__ import annotations

import ast
import pickle
import warnings
from pathlib import Path

import pytest

from pytest_fwdorder.errors import UnpicklableFacetWarning
from pytest_fwdorder.facets.values import VALUES
from pytest_fwdorder.snapshot.extension import TraceSnapshotExtension
from pytest_fwdorder.snapshot.kept_comparisons import (
    Comparison,
    from_worker_output,
    to_worker_output,
    warn_of_facets,
)

MODEL_TEST = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, {width})
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.act(self.linear(x))
        {extra_line}
        return x


def test_block(forward_trace, snapshot):
    trace = forward_trace(Block(), torch.randn(2, 4))
    assert trace == snapshot
"""

PARAMETRIZED_TEST = """
import pytest
import torch
from torch import nn


@pytest.mark.parametrize("name", {ids!r})
def {test_name}(forward_trace, snapshot, name):
    assert forward_trace(nn.ReLU(), torch.randn(1, 2)) == snapshot
"""

GOLDEN = Path("__snapshots__/test_model/test_block.fwdorder.txt")
JSON_DEFAULT = "--snapshot-default-extension=syrupy.extensions.json.JSONSnapshotExtension"
JSON_FIXTURE = """
import pytest
from syrupy.extensions.json import JSONSnapshotExtension


@pytest.fixture
def snapshot(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)
"""


def containing(text: str) -> str:
    """An fnmatch pattern for a line containing `text` literally (golden text has brackets)."""
    escaped = "".join({"[": "[[]", "]": "[]]", "*": "[*]", "?": "[?]"}.get(c, c) for c in text)
    return f"*{escaped}*"


def write_model_test(pytester: pytest.Pytester, width: int = 8, extra_line: str = "") -> None:
    pytester.makepyfile(test_model=MODEL_TEST.format(width=width, extra_line=extra_line))


def write_parametrized_test(
    pytester: pytest.Pytester, ids: list[str], test_name: str = "test_ids"
) -> None:
    pytester.makepyfile(test_ids=PARAMETRIZED_TEST.format(ids=ids, test_name=test_name))


def goldens(pytester: pytest.Pytester, test_file: str) -> list[str]:
    return sorted(path.name for path in (pytester.path / "__snapshots__" / test_file).iterdir())


class Rendered:
    """Not a trace, but it renders: the extension takes anything with `render()`."""

    def render(self) -> str:
        return "# golden\n<root>: Thing () -> None\n"


class RendersBytes:
    def render(self) -> bytes:
        return b"<root>"


def test_anything_with_render_is_stored_as_its_text() -> None:
    assert TraceSnapshotExtension().serialize(Rendered()) == Rendered().render()


def test_a_render_that_returns_no_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"RendersBytes.render\(\) returned 'bytes'"):
        TraceSnapshotExtension().serialize(RendersBytes())


def test_something_without_render_is_a_type_error_naming_its_type() -> None:
    with pytest.raises(TypeError, match=r"stores traces, got 'dict'"):
        TraceSnapshotExtension().serialize({"a": 1})


def test_the_extension_does_not_import_the_trace_module() -> None:
    import pytest_fwdorder.snapshot.extension as module

    tree = ast.parse(Path(module.__file__ or "").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }

    assert "pytest_fwdorder.trace" not in imported


def test_the_default_output_shows_the_changed_calls_before_the_header_changes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CI", "BUILD_NUMBER"):  # pytest shows everything on CI
        monkeypatch.delenv(name, raising=False)
    write_model_test(pytester)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    write_model_test(pytester, extra_line="x = self.act(x)")  # one call more: header changes

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            containing("1 call inserted: act #2 (ReLU) after act"),
            containing("+   act: ReLU #2 (f32[2,8]) -> f32[2,8]"),
            "*Full output truncated*",
        ]
    )


@pytest.mark.parametrize(
    ("arguments", "conftest"),
    [
        pytest.param([JSON_DEFAULT], None, id="default-extension-option"),
        pytest.param([], JSON_FIXTURE, id="snapshot-fixture-override"),
    ],
)
def test_a_trace_is_stored_as_golden_text_whatever_the_default_extension(
    pytester: pytest.Pytester, arguments: list[str], conftest: str | None
) -> None:
    if conftest is not None:
        pytester.makeconftest(conftest)
    write_model_test(pytester)

    pytester.runpytest("--snapshot-update", *arguments).assert_outcomes(passed=1)

    assert goldens(pytester, "test_model") == ["test_block.fwdorder.txt"]
    assert "  linear: Linear (f32[2,4]) -> f32[2,8]" in (pytester.path / GOLDEN).read_text()


@pytest.mark.parametrize(
    ("arguments", "conftest"),
    [
        pytest.param([JSON_DEFAULT], None, id="default-extension-option"),
        pytest.param([], JSON_FIXTURE, id="snapshot-fixture-override"),
    ],
)
def test_a_shape_change_fails_whatever_the_default_extension(
    pytester: pytest.Pytester, arguments: list[str], conftest: str | None
) -> None:
    if conftest is not None:
        pytester.makeconftest(conftest)
    write_model_test(pytester)
    pytester.runpytest("--snapshot-update", *arguments).assert_outcomes(passed=1)
    write_model_test(pytester, width=6)

    result = pytester.runpytest(*arguments)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([containing("linear (Linear) output (2, 8) -> (2, 6)")])


def test_ids_with_slashes_and_non_ascii_get_golden_files_under_warnings_as_errors(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    write_parametrized_test(pytester, ["a/b", "é"])

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)

    assert goldens(pytester, "test_ids") == [
        "test_ids[%5Cxe9].fwdorder.txt",
        "test_ids[a%2Fb].fwdorder.txt",
    ]


def test_goldens_of_ids_with_slashes_and_non_ascii_are_read_back(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    write_parametrized_test(pytester, ["a/b", "é"])
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)

    result = pytester.runpytest()

    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2 snapshots passed.*"])
    result.stdout.no_fnmatch_line("*unused*")


def test_ids_that_differ_only_in_a_slash_get_their_own_goldens(
    pytester: pytest.Pytester,
) -> None:
    write_parametrized_test(pytester, ["a/b", "ab"])

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)

    assert goldens(pytester, "test_ids") == [
        "test_ids[a%2Fb].fwdorder.txt",
        "test_ids[ab].fwdorder.txt",
    ]


def test_escaped_goldens_of_a_removed_test_are_reported_unused(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    write_parametrized_test(pytester, ["a/b", "é"])
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)
    write_parametrized_test(pytester, ["a/b", "é"], test_name="test_renamed")

    result = pytester.runpytest("--snapshot-update")

    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2 snapshots generated. 2 unused snapshots deleted.*"])
    assert goldens(pytester, "test_ids") == [
        "test_renamed[%5Cxe9].fwdorder.txt",
        "test_renamed[a%2Fb].fwdorder.txt",
    ]


class _FacetHoldingALambda:
    """A facet as a conftest might configure it: its tolerance rule kept as a lambda."""

    title = "rounded outputs"
    change_words = "rounded outputs changed"

    def __init__(self) -> None:
        self.rule = lambda old, new: abs(old - new) < 1

    def same(self, old: float, new: float) -> bool:
        return bool(self.rule(old, new))


def _comparison_with(facets: tuple[object, ...]) -> Comparison:
    return Comparison(
        test_id="test_model.py::test_model",
        snapshot_name="test_model",
        golden_path="__snapshots__/test_model/test_model.fwdorder.txt",
        status="failed",
        old_text="old",
        new_text="new",
        facets=facets,  # type: ignore[arg-type]
    )


def test_an_unpicklable_facet_warns_naming_it_why_and_what_the_report_does_instead() -> None:
    # The oracle: pickle itself refuses the facet (a lambda cannot be pickled by reference).
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(_FacetHoldingALambda())
    comparisons = [_comparison_with((_FacetHoldingALambda(),))] * 2

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the worker warns of nothing: its warnings travel
        sent, messages = to_worker_output(comparisons)
    with pytest.warns(UnpicklableFacetWarning) as caught:
        warn_of_facets(messages)

    assert len(caught) == 1  # once for the session's comparisons, not once per comparison
    message = str(caught[0].message)
    assert "the facet 'rounded outputs' (_FacetHoldingALambda)" in message
    assert "lambda" in message  # pickle's own reason
    assert "2 goldens compare with the registered facets instead" in message
    assert [item["facets"] for item in sent] == [None, None]
    received, problems = from_worker_output(sent)
    assert [comparison.facets for comparison in received] == [None, None]
    assert problems == []


def test_picklable_facets_travel_without_a_warning() -> None:
    comparisons = [_comparison_with((VALUES,))]
    sent, messages = to_worker_output(comparisons)
    received, problems = from_worker_output(sent)
    assert messages == problems == []
    assert received[0].facets == (VALUES,)


def test_facets_the_controller_cannot_unpickle_warn_saying_why() -> None:
    sent, _ = to_worker_output([_comparison_with((VALUES,))])
    sent = [{**sent[0], "facets": b"not a pickle"}]

    (comparison,), problems = from_worker_output(sent)
    with pytest.warns(UnpicklableFacetWarning, match=r"could not be unpickled here \(") as caught:
        warn_of_facets(problems)

    assert "compares with the registered facets instead" in str(caught[0].message)
    assert comparison.facets is None
