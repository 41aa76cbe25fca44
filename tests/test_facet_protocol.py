"""A facet from outside the package reaches the golden, the diff, the failure and the report.

The toy facet counts the positive elements of each call's output. Its oracle is torch's
global forward hook counting the same thing independently; the model's sign flips the count
without changing a single shape, so only the facet can see the change.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree

import pytest
import torch
from facet_plugins import (
    CallNesting,
    ComparedCallNesting,
    ComparedNestingLines,
    FacetPlugin,
    NestingBars,
    NestingLines,
    NestingWarnings,
    offered,
)
from torch import nn

from pytest_fwdorder import (
    Facet,
    StructureMismatchError,
    assert_same_structure,
    diff_golden,
    golden_picture,
    structure_diff,
    trace_forward,
)
from pytest_fwdorder.calls.facet_records import (
    MeasuredTraceFacet,
    WatchedTraceFacet,
    checked_facets,
    is_measured,
    is_watched,
    watches_build,
)
from pytest_fwdorder.golden.folding import fold_golden
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.golden.render import golden_lines
from pytest_fwdorder.hookspecs import plugin_manager
from pytest_fwdorder.report.html import trace_html
from pytest_fwdorder.snapshot.policy import golden_holds

pytest_plugins = ["pytester"]
SVG = "{http://www.w3.org/2000/svg}"

FACET_SOURCE = '''
class PositiveOutputs:
    """A counter: how many elements of a call's output are above zero."""

    title = "positive outputs"
    change_words = "positive outputs changed"

    def __init__(self, allowed=0):
        self.allowed = allowed
        self.parsed = 0

    def observe(self, output):
        import torch

        if not isinstance(output, torch.Tensor):
            return None
        return int((output > 0).sum())

    def render(self, value):
        return f"{value:,}"

    def parse(self, text):
        self.parsed += 1
        return int(text.replace(",", ""))

    def same(self, old, new):
        return abs(old - new) <= self.allowed

    def describe_change(self, old, new):
        return f"{old:,} -> {new:,}"
'''
namespace: dict[str, Any] = {}
exec(FACET_SOURCE, namespace)  # the facet as a user's conftest would define it
PositiveOutputs = namespace["PositiveOutputs"]


def signed_model(sign: float) -> nn.Module:
    """Linear(4, 8) then ReLU, every weight `sign`: all 8 outputs positive, or none."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    with torch.no_grad():
        model[0].weight.fill_(sign)
        model[0].bias.fill_(sign)
    return model


@pytest.fixture
def facet(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The toy facet, offered by a plugin for the length of one test."""
    made = PositiveOutputs()
    with offered(request.config, made):
        yield made


def positive_counts_by_global_hook(model: nn.Module, inputs: torch.Tensor) -> list[int]:
    """The oracle: each module call's positive output elements, in the order calls end."""
    counts: list[int] = []

    def count(module: nn.Module, args: object, output: torch.Tensor) -> None:
        counts.append(int((output > 0).sum()))

    handle = nn.modules.module.register_module_forward_hook(count)
    try:
        model(inputs)
    finally:
        handle.remove()
    return counts


def test_the_facet_writes_one_fact_per_call_equal_to_the_oracles_count(facet: Any) -> None:
    model, inputs = signed_model(1.0), torch.ones(1, 4)
    golden = trace_forward(model, inputs).render()
    facts = [line.strip() for line in golden.splitlines() if "positive outputs" in line]
    # Calls end innermost first: Linear, ReLU, then the Sequential around them.
    oracle = positive_counts_by_global_hook(model, inputs)
    assert oracle == [8, 8, 8]
    assert facts == [f"| positive outputs: {count}" for count in (oracle[2], oracle[0], oracle[1])]


def test_the_oracle_sees_the_sign_flip_that_the_shapes_do_not() -> None:
    inputs = torch.ones(1, 4)
    assert positive_counts_by_global_hook(signed_model(-1.0), inputs) == [0, 0, 0]
    assert positive_counts_by_global_hook(signed_model(1.0), inputs) != [0, 0, 0]


def test_a_golden_reads_back_into_the_facets_typed_values_once_each(facet: Any) -> None:
    old = trace_forward(signed_model(1.0), torch.ones(1, 4)).render()
    new = trace_forward(signed_model(-1.0), torch.ones(1, 4)).render()
    difference = diff_golden(old, new)
    assert [value for line in difference.old_lines for _, value in line.facet_values] == [8, 8, 8]
    assert [value for line in difference.new_lines for _, value in line.facet_values] == [0, 0, 0]
    assert facet.parsed == 6  # three facts a side, each parsed once, never again downstream


def test_the_diff_says_the_facets_change_in_its_words_at_each_call(facet: Any) -> None:
    old = trace_forward(signed_model(1.0), torch.ones(1, 4))
    new = trace_forward(signed_model(-1.0), torch.ones(1, 4))
    summary = old.diff(new).summary()
    assert summary.splitlines() == [
        "3 calls before, 3 after: 3 calls positive outputs changed",
        # In the order the calls ended, as the facet observed them.
        "positive outputs changed at 3 calls, first at 0 (Linear): 8 -> 0; later: 1 (ReLU): "
        "8 -> 0; <root> (Sequential): 8 -> 0",
    ]
    assert old.diff(new).explained_counts() == {"positive outputs changed": 3}
    assert diff_golden(old.render(), new.render()).summary() == summary


def test_a_golden_holds_when_the_facet_calls_the_values_the_same(facet: Any) -> None:
    old = trace_forward(signed_model(1.0), torch.ones(1, 4)).render()
    new = old.replace("| positive outputs: 8", "| positive outputs: 9")
    assert not golden_holds(old, new)  # exact by default: 8 and 9 differ
    facet.allowed = 1
    assert golden_holds(old, new)
    assert not golden_holds(old, new.replace(": 9", ": 11", 1))


def test_without_the_plugin_the_golden_has_no_facet_fact() -> None:
    golden = trace_forward(signed_model(1.0), torch.ones(1, 4)).render()
    assert "positive outputs" not in golden


@pytest.mark.parametrize(
    ("candidate", "error", "match"),
    [
        (object(), TypeError, r"returned <object .*>, which is no facet: it lacks title, "),
        (PositiveOutputs(), ValueError, r"title 'settings', which another fact"),
        (PositiveOutputs(), ValueError, r"title 'Positive: outputs': a title is lowercase"),
    ],
)
def test_a_facet_that_cannot_be_written_is_refused_naming_it(
    candidate: Any, error: type[Exception], match: str
) -> None:
    if isinstance(candidate, PositiveOutputs):
        candidate.title = "settings" if "settings" in match else "Positive: outputs"
    with pytest.raises(error, match=match):
        checked_facets([candidate], ("settings", "parameters"))


def test_the_toy_facet_implements_the_public_protocol() -> None:
    assert isinstance(PositiveOutputs(), Facet)


class _HeaderCount:
    """A facet with one value per trace, its way of taking the value given by the test."""

    title = "header count"
    change_words = "header count changed"
    option = "ops"

    def header_lines(self, value: int) -> list[str]:
        return [f"# header count: {value}"]

    def read_header(self, header: Any) -> int | None:
        return None

    def describe_changes(self, old: int, new: int) -> list[str]:
        return [f"{old} -> {new}"]


def test_a_facet_per_trace_is_taken_as_the_one_kind_whose_members_it_has() -> None:
    measured, watched = _HeaderCount(), _HeaderCount()
    measured.measure = lambda model, args, kwargs, device: 1  # type: ignore[attr-defined]
    measured.record_refusal = "record cannot count the header"  # type: ignore[attr-defined]
    watched.watcher = lambda options: None  # type: ignore[attr-defined]
    watched.title = "watched count"

    assert checked_facets([measured, watched], ()) == (measured, watched)
    assert isinstance(measured, MeasuredTraceFacet)
    assert not isinstance(measured, WatchedTraceFacet)
    assert isinstance(watched, WatchedTraceFacet)
    assert not isinstance(watched, MeasuredTraceFacet)
    # The fast tests the trace asks agree with the protocols' own.
    assert [is_measured(measured), is_watched(measured)] == [True, False]
    assert [is_measured(watched), is_watched(watched), watches_build(watched)] == [
        False,
        True,
        False,
    ]


def test_a_watched_facet_gives_each_call_a_fact_when_the_trace_ends(
    request: pytest.FixtureRequest,
) -> None:
    """`call_facts` after the module facts, from a watcher's `recording` and `trace_ended`;
    the oracle is the golden's own indentation, which the recorder's depth makes."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    with offered(request.config, CallNesting()):
        lines = trace_forward(model, torch.ones(1, 4), ops=True).render().splitlines()
    written = []  # (the indentation of the call line above, its nesting fact)
    for number, line in enumerate(lines):
        if line.lstrip().startswith("| nesting: "):
            owner = next(above for above in reversed(lines[:number]) if "| " not in above)
            indent = (len(owner) - len(owner.lstrip())) // 2
            written.append((indent, line.split(": ")[1]))
    assert "# nesting: 5 calls" in lines
    # Every call but the root, which nothing was open around, in the order they started.
    assert written == [(1, "1"), (1, "1"), (2, "2"), (2, "2")]


def test_the_oracle_of_nesting_facts_differs_from_a_flat_model(
    request: pytest.FixtureRequest,
) -> None:
    """A model whose calls are all at one depth gets facts of 1 only: the oracle can tell."""
    with offered(request.config, CallNesting()):
        text = trace_forward(nn.Sequential(nn.ReLU(), nn.ReLU()), torch.ones(1), ops=True).render()
    assert [line.strip() for line in text.splitlines() if "| nesting" in line] == [
        "| nesting: 1",
        "| nesting: 1",
    ]


def test_a_watched_facet_is_kept_as_its_configured_facet_and_its_hooks_go(
    request: pytest.FixtureRequest,
) -> None:
    hooks = dict(nn.modules.module._global_forward_pre_hooks)
    with offered(request.config, CallNesting()):
        trace = trace_forward(
            nn.Sequential(nn.ReLU()), torch.ones(1), ops=True, hide=("parameters",)
        )
    (nesting,) = [facet for facet in trace.trace_facets if facet.title == "nesting"]
    assert nesting.parameters_hidden  # type: ignore[union-attr]
    assert "| nesting: 1 (parameters hidden)" in trace.render()
    assert dict(nn.modules.module._global_forward_pre_hooks) == hooks


def test_a_watched_facets_call_facts_are_not_read_as_a_plugins_unread_facts(
    request: pytest.FixtureRequest,
) -> None:
    model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU()))
    with offered(request.config, CallNesting()):
        text = trace_forward(model, torch.ones(1), ops=True).render()
        difference = diff_golden(text, text.replace("| nesting: 2", "| nesting: 3"))
    assert "nesting changed" not in difference.summary()


def test_a_watched_facets_call_facts_that_changed_are_said_in_its_own_line(
    request: pytest.FixtureRequest,
) -> None:
    model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU())))
    with offered(request.config, ComparedCallNesting()):
        old = trace_forward(model, torch.ones(1), ops=True).render()
        # The first call's nesting grows by 1, the deepest call's by 6: that one comes first.
        new = old.replace("| nesting: 1\n", "| nesting: 2\n", 1).replace(
            "| nesting: 3\n", "| nesting: 9\n"
        )
        difference = diff_golden(old, new)
    assert difference.summary().splitlines() == [
        "6 calls before, 6 after: 2 calls nesting changed",
        "nesting changed at 2 calls, most first: 1.1.0 (ReLU) 3 -> 9; 0 (ReLU) 1 -> 2",
    ]
    assert difference.explained_counts() == {"nesting changed": 2}
    assert [change.values for change in difference.changes] == [(1, 2), (3, 9)]


def test_a_watched_facets_call_facts_that_its_rule_calls_the_same_are_no_change(
    request: pytest.FixtureRequest,
) -> None:
    """`describe_call_change` gives None: the texts differ, the values do not."""
    model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU()))
    with offered(request.config, ComparedCallNesting()):
        old = trace_forward(model, torch.ones(1), ops=True).render()
        difference = diff_golden(old, old.replace("| nesting: 2\n", "| nesting: 2 again\n"))
    assert "nesting" not in difference.summary()


def test_the_report_draws_a_watched_facets_bar_per_call_with_its_words(
    request: pytest.FixtureRequest,
) -> None:
    """The outermost call has nesting 0 (no fact): no total, no bar; a golden whose first
    call has a fact gets one bar per call with a fact, its width that call's share."""
    model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU()))
    with offered(request.config, NestingBars()):
        text = trace_forward(model, torch.ones(1), ops=True).render()
        without_total = trace_html(text)
        # Give the outermost call a fact of 4: the calls' 1, 1 and 2 are 25%, 25%, 50%.
        root = next(line for line in text.splitlines() if line.startswith("<root>"))
        with_total = trace_html(text.replace(root, f"{root}\n  | nesting: 4"))
    assert "fo-nesting-bar" not in without_total.split("</style>", 1)[1]
    widths = re.findall(r'class="fo-nesting-bar" style="width: ([0-9.]+)%"', with_total)
    assert widths == ["100.0", "25.0", "25.0", "50.0"]
    assert 'title="2 of 4"' in with_total
    assert ">nesting 2<" in with_total
    assert ".fwdorder .fo-nesting-bar {" in with_total


def _lines_under_calls(text: str) -> list[tuple[int, int, str]]:
    """(the indentation of the call line above, its own, the line) per `% ` line: the
    oracle is the golden's indentation of the calls, which the recorder's depth makes."""
    rows = text.splitlines()
    found = []
    for number, row in enumerate(rows):
        if row.lstrip().startswith("% "):
            owner = next(
                above
                for above in reversed(rows[:number])
                if not above.lstrip().startswith(("| ", "~ ", "% "))
            )
            indents = [(len(line) - len(line.lstrip())) // 2 for line in (owner, row)]
            found.append((indents[0], indents[1], row.strip()))
    return found


def test_a_watched_facet_writes_a_line_under_each_call_read_back_typed(
    request: pytest.FixtureRequest,
) -> None:
    """`call_lines`: a line under each call but the root, right after it, one level deeper;
    a golden reads them back on their call, typed by `read_call_line`, as they were written."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    with offered(request.config, NestingLines()):
        trace = trace_forward(model, torch.ones(1, 4), ops=True)
        text = trace.render()
        _, lines = parse_golden(text)
        written = golden_lines(trace)
        opened = [line.values_under("opened") for line in lines]
        folded = fold_golden(text, 1)
    assert _lines_under_calls(text) == [
        (1, 2, "% open 1"),
        (1, 2, "% open 1"),
        (2, 3, "% open 2"),
        (2, 3, "% open 2"),
    ]
    assert opened == [(), (1,), (1,), (2,), (2,)]
    assert [line.under for line in lines] == [line.under for line in written]
    assert [line.under for line in lines][1] == ("% open 1",)
    assert _lines_under_calls(folded) == [(1, 2, "% open 1"), (1, 2, "% open 1")]


def test_the_oracle_of_lines_under_calls_differs_from_a_flat_model(
    request: pytest.FixtureRequest,
) -> None:
    with offered(request.config, NestingLines()):
        text = trace_forward(nn.Sequential(nn.ReLU(), nn.ReLU()), torch.ones(1), ops=True).render()
    assert _lines_under_calls(text) == [(1, 2, "% open 1"), (1, 2, "% open 1")]


def test_a_facets_lines_under_the_calls_that_changed_are_said_in_its_words(
    request: pytest.FixtureRequest,
) -> None:
    """Paired as a line diff pairs them: a changed line, an inserted one; a change its rule
    calls none (1 -> 2) is not said."""
    model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU()))
    with offered(request.config, ComparedNestingLines()):
        old = trace_forward(model, torch.ones(1), ops=True).render()
        new = old.replace("    % open 2\n", "    % open 5\n    % open 7\n")
        within = old.replace("    % open 2\n", "    % open 3\n")
        difference = diff_golden(old, new)
        unchanged = diff_golden(old, within)
    assert sorted(change.detail for change in difference.changes) == [
        "open 2 -> open 5",
        "open None -> open 7",
    ]
    assert difference.explained_counts() == {"opened changed": 2}
    assert "opened" not in unchanged.summary()


def test_a_structure_comparison_leaves_out_a_facets_lines_under_the_calls_by_its_title(
    request: pytest.FixtureRequest,
) -> None:
    """Two traces alike but for the facet's lines (one traced without the facet): they
    differ unless `ignore` names the facet's title."""
    model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU()))
    with offered(request.config, ComparedNestingLines()):
        written = trace_forward(model, torch.ones(1), ops=True)
    with offered(request.config, ComparedNestingLines()):
        plain = trace_forward(model, torch.ones(1), ops=True)
        with pytest.raises(ValueError, match=r"'mode', 'opened', 'operations', 'backward'"):
            assert_same_structure(written, plain, ignore=("nothing",))
    plain.trace_facets = ()
    with offered(request.config, ComparedNestingLines()):
        summary = assert_same_structure(written, plain, ignore=("opened",)).summary()
        with pytest.raises(StructureMismatchError, match="opened changed"):
            assert_same_structure(written, plain)
    assert summary.startswith("same structure (ignoring opened)")


def test_values_under_a_title_no_facet_writes_lines_for_names_those_that_do() -> None:
    (line,) = parse_golden("# pytest-fwdorder trace (format 2)\n<root>: ReLU (f32[1]) -> f32[1]\n")[
        1
    ]
    assert line.values_under("operations") == ()
    with pytest.raises(KeyError, match=r"no facet titled 'opened' .*'operations'"):
        line.values_under("opened")


def test_a_facet_that_watches_a_build_without_its_record_refusal_is_refused() -> None:
    facet = _HeaderCount()
    facet.watcher = lambda options: None  # type: ignore[attr-defined]
    facet.built_model_refusal = lambda model_type: "pass a builder"  # type: ignore[attr-defined]

    with pytest.raises(TypeError, match=r"watches a build .* lacks `watcher` or `record_refusal`"):
        checked_facets([facet], ())

    facet.record_refusal = "record cannot watch a build"  # type: ignore[attr-defined]
    assert checked_facets([facet], ()) == (facet,)
    assert watches_build(facet)


def test_a_measured_facet_without_its_record_refusal_is_refused() -> None:
    """`measure` alone is not enough: a `record` block would have no message to raise."""
    facet = _HeaderCount()
    facet.measure = lambda model, args, kwargs, device: 1  # type: ignore[attr-defined]

    with pytest.raises(TypeError, match=r"no way to take it: give it `measure` and "):
        checked_facets([facet], ())


def test_a_conftest_facet_reaches_the_golden_the_failure_and_the_report(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        FACET_SOURCE
        + textwrap.dedent(
            """
            import pytest

            @pytest.hookimpl
            def pytest_fwdorder_facets():
                return [PositiveOutputs()]
            """
        )
    )
    pytester.makepyfile(
        test_model=textwrap.dedent(
            """
            import os
            import torch
            from torch import nn

            def test_model(forward_trace, snapshot):
                sign = float(os.environ.get("SIGN", "1"))
                model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
                with torch.no_grad():
                    model[0].weight.fill_(sign)
                    model[0].bias.fill_(sign)
                assert forward_trace(model, torch.ones(1, 4)) == snapshot
            """
        )
    )
    pytester.runpytest("--snapshot-update", "-p", "no:randomly").assert_outcomes(passed=1)
    (golden,) = pytester.path.joinpath("__snapshots__").rglob("*.fwdorder.txt")
    assert golden.read_text().count("| positive outputs: 8") == 3
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SIGN", "-1")
        failed = pytester.runpytest("-p", "no:randomly", "--fwdorder-report=report.html")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(
        [
            "*3 calls before, 3 after: 3 calls positive outputs changed*",
            "*positive outputs changed at 3 calls, first at 0 (Linear): 8 -> 0; later: 1 (ReLU)*",
        ]
    )
    report = pytester.path.joinpath("report.html").read_text()
    assert "positive outputs changed at 3 calls" in report


GOLDEN_WITH_A_PLUGIN_FACT = """# pytest-fwdorder trace (format 2)
# model: Sequential
# calls: 2
Sequential (f32[1,4]) -> f32[1,8]
  0: Linear (f32[1,4]) -> f32[1,8]
    | settings: in_features=4, out_features=8, bias=True
    | quantization: int8
"""


def test_a_module_fact_from_a_plugin_that_changed_is_said_in_its_own_words() -> None:
    # `pytest_fwdorder_module_facts` writes `| quantization: ...`; nothing reads it back, so
    # the diff compares its text: before, the golden failed while the diff said no differences.
    new = GOLDEN_WITH_A_PLUGIN_FACT.replace("int8", "int4")
    difference = diff_golden(GOLDEN_WITH_A_PLUGIN_FACT, new)
    assert difference.summary().splitlines() == [
        "2 calls before, 2 after: 1 call quantization changed",
        "quantization changed at 1 call: 0 (Linear): int8 -> int4",
    ]


def test_a_fact_whose_facet_is_not_registered_here_still_shows_its_change() -> None:
    # A golden written with a conftest's facet, compared where that conftest is not loaded
    # (`fwdorder diff` on the command line): the fact's text is compared as it is.
    old = GOLDEN_WITH_A_PLUGIN_FACT.replace("| quantization: int8", "| positive outputs: 8")
    new = old.replace(": 8\n", ": 0\n")
    assert diff_golden(old, new).summary().splitlines()[1] == (
        "positive outputs changed at 1 call: 0 (Linear): 8 -> 0"
    )
    dropped = old.replace("    | positive outputs: 8\n", "")
    assert diff_golden(old, dropped).summary().splitlines()[1] == (
        "positive outputs changed at 1 call: 0 (Linear): 8 -> none"
    )


class _Failing:
    title = "failing"
    change_words = "failing changed"

    def observe(self, output: object) -> object:
        raise ZeroDivisionError("the facet's own bug")

    def render(self, value: object) -> str:
        return str(value)

    def parse(self, text: str) -> object:
        return text

    def same(self, old: object, new: object) -> bool:
        return old == new

    def describe_change(self, old: object, new: object) -> str:
        return f"{old} -> {new}"


def test_a_facet_that_raises_keeps_its_error_with_a_note_naming_it(
    request: pytest.FixtureRequest,
) -> None:
    plugin = FacetPlugin(_Failing())
    request.config.pluginmanager.register(plugin)
    try:
        with pytest.raises(ZeroDivisionError, match="the facet's own bug") as raised:
            trace_forward(signed_model(1.0), torch.ones(1, 4))
    finally:
        request.config.pluginmanager.unregister(plugin)
    assert any("raised by the facet 'failing'" in note for note in raised.value.__notes__)
    assert trace_forward(signed_model(1.0), torch.ones(1, 4)).render()  # nothing left behind


class _CountingPlugin:
    """Offers one facet and counts how often it is asked for its facets."""

    def __init__(self, facet: object) -> None:
        self.facet = facet
        self.asked = 0

    def pytest_fwdorder_facets(self) -> list[object]:
        self.asked += 1
        return [self.facet]


def test_the_facets_are_asked_for_once_while_the_plugins_stay_the_same(
    request: pytest.FixtureRequest,
) -> None:
    plugin = _CountingPlugin(PositiveOutputs())
    request.config.pluginmanager.register(plugin)
    try:
        old = trace_forward(signed_model(1.0), torch.ones(1, 4))
        new = trace_forward(signed_model(-1.0), torch.ones(1, 4))
        diff_golden(old.render(), new.render())
        golden_holds(old.render(), new.render())
        assert plugin.asked == 1  # two traces, a diff and a comparison
        request.config.pluginmanager.register(unrelated := object())  # offers no facets
        trace_forward(signed_model(1.0), torch.ones(1, 4))
        assert plugin.asked == 1
        request.config.pluginmanager.unregister(unrelated)
        twice = PositiveOutputs()
        twice.title = "positive outputs again"
        second = FacetPlugin(twice)  # another plugin that offers facets changes the answer
        request.config.pluginmanager.register(second)
        golden = trace_forward(signed_model(1.0), torch.ones(1, 4)).render()
        assert golden.count("| positive outputs again: 8") == 3
        assert plugin.asked == 2
        request.config.pluginmanager.unregister(second)
        assert "again" not in trace_forward(signed_model(1.0), torch.ones(1, 4)).render()
        assert plugin.asked == 3
    finally:
        request.config.pluginmanager.unregister(plugin)


def test_a_facet_registered_after_a_trace_is_in_the_next_and_gone_once_unregistered(
    request: pytest.FixtureRequest,
) -> None:
    model, inputs = signed_model(1.0), torch.ones(1, 4)
    assert "positive outputs" not in trace_forward(model, inputs).render()
    plugin = FacetPlugin(PositiveOutputs())
    plugin_manager().register(plugin)  # the same manager as the session's, inside pytest
    try:
        assert trace_forward(model, inputs).render().count("| positive outputs: 8") == 3
    finally:
        plugin_manager().unregister(plugin)
    assert "positive outputs" not in trace_forward(model, inputs).render()


def test_a_facet_that_cannot_be_written_is_refused_at_every_trace(
    request: pytest.FixtureRequest,
) -> None:
    model, inputs = signed_model(1.0), torch.ones(1, 4)
    trace_forward(model, inputs)  # facets resolved once before the bad one comes
    taken = PositiveOutputs()
    taken.title = "settings"
    plugin = _CountingPlugin(taken)
    request.config.pluginmanager.register(plugin)
    try:
        for _ in range(2):
            with pytest.raises(ValueError, match=r"title 'settings', which another fact"):
                trace_forward(model, inputs)
        with pytest.raises(ValueError, match=r"title 'settings', which another fact"):
            diff_golden(GOLDEN_WITH_A_PLUGIN_FACT, GOLDEN_WITH_A_PLUGIN_FACT)
    finally:
        request.config.pluginmanager.unregister(plugin)
    assert plugin.asked == 3  # a refusal is not kept: each ask checks again
    assert "positive outputs" not in trace_forward(model, inputs).render()


class _RaisingFacetsPlugin:
    def pytest_fwdorder_facets(self) -> list[object]:
        raise RuntimeError("the plugin's own bug")


@pytest.mark.parametrize(
    ("plugin", "error", "message"),
    [
        (_RaisingFacetsPlugin(), RuntimeError, "the plugin's own bug"),
        (FacetPlugin(object()), TypeError, "which is no facet"),
    ],
    ids=["its-hook-raises", "it-offers-no-facet"],
)
def test_a_facets_hook_that_fails_is_named_by_a_note_on_its_error(
    plugin: object, error: type[Exception], message: str, request: pytest.FixtureRequest
) -> None:
    manager = request.config.pluginmanager
    manager.register(plugin, name="failing-facets")
    try:
        with pytest.raises(error, match=message) as raised:
            trace_forward(nn.Linear(2, 2), torch.randn(1, 2))
    finally:
        manager.unregister(name="failing-facets")

    (note,) = raised.value.__notes__
    assert note.startswith("from the pytest_fwdorder_facets hook of the plugin 'failing-facets' (")
    assert note.endswith(f"{type(plugin).__qualname__}.pytest_fwdorder_facets)")
    # The oracle that the note is the failing plugin's: with it gone, the trace runs.
    trace_forward(nn.Linear(2, 2), torch.randn(1, 2))


def test_a_structure_comparison_compares_the_facet_and_ignores_it_by_its_title(
    facet: Any,
) -> None:
    """The sign flip keeps every shape, so only the facet differs; naming its title in
    `ignore` leaves it out, as `"settings"` leaves out a built-in fact."""
    inputs = torch.ones(1, 4)
    old, new = trace_forward(signed_model(1.0), inputs), trace_forward(signed_model(-1.0), inputs)

    with pytest.raises(StructureMismatchError, match=r"positive outputs changed at 3 calls"):
        assert_same_structure(old, new)
    passed = assert_same_structure(old, new, ignore=("positive outputs",))
    assert passed.summary().startswith("same structure (ignoring positive outputs): ")
    assert not structure_diff(old, new, ignore=("positive outputs",))


def test_an_ignored_facet_is_left_out_of_calls_that_differ_in_something_else(
    facet: Any,
) -> None:
    """The batch grows as the sign flips: each call's shapes differ besides the facet's
    counts, so the calls are compared, and the ignored facet must not be."""
    old = trace_forward(signed_model(1.0), torch.ones(1, 4))
    new = trace_forward(signed_model(-1.0), torch.ones(2, 4))

    summary = structure_diff(old, new, ignore=("positive outputs",)).summary()

    assert "batch size (dimension 0) 1 -> 2" in summary
    assert "positive outputs" not in summary


def test_a_watched_facets_call_facts_are_ignored_by_its_title(
    request: pytest.FixtureRequest,
) -> None:
    """Its facts say when parameters were hidden, so two traces that differ only in that
    differ in the facet's facts once parameters are ignored, and not once it is too."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with offered(request.config, CallNesting()):
        shown = trace_forward(model, torch.ones(1, 4), ops=True)
        hidden = trace_forward(model, torch.ones(1, 4), ops=True, hide=("parameters",))

    assert "nesting" in str(structure_diff(shown, hidden, ignore=("parameters",)))
    assert not structure_diff(shown, hidden, ignore=("parameters", "nesting"))


def test_the_report_shows_a_facets_header_section_as_a_warning_box(
    request: pytest.FixtureRequest,
) -> None:
    """`report_warnings` names the section, its noun and what its items are; the oracle of
    the items is the golden's own indentation (a call nested two levels down)."""
    model = nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU(), nn.Sequential(nn.ReLU())))
    with offered(request.config, NestingWarnings()):
        text = trace_forward(model, torch.ones(1), ops=True).render()
        page = trace_html(text)
    call_line = re.compile(r"^(?P<indent> *)\S+: \w+ \(")
    depths = [
        len(match["indent"]) // 2 for line in text.splitlines() if (match := call_line.match(line))
    ]
    deep = [depth for depth in depths if depth > 1]
    assert len(deep) == 3  # the inner Sequential's ReLU, the innermost Sequential and its ReLU
    assert (
        '<div class="fo-warning" data-section="deep calls">'
        f"<strong>{len(deep)} deep calls</strong> nested more than one level down:"
    ) in page


class _NestingSection(CallNesting):
    """`CallNesting` with a section after the calls under the same title as its facts."""

    def configured(self, options: object) -> _NestingSection:
        return _NestingSection("parameters" in getattr(options, "hide", ()))

    def end_lines(self, value: tuple[int, ...], trace: object, counts: object) -> list[str]:
        return ["nesting:", f"  deepest {max(value)}"]


def test_a_title_ignored_leaves_out_both_the_facets_section_and_its_call_facts(
    request: pytest.FixtureRequest,
) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with offered(request.config, _NestingSection()):
        shown = trace_forward(model, torch.ones(1, 4), ops=True)
        hidden = trace_forward(model, torch.ones(1, 4), ops=True, hide=("parameters",))

    assert "nesting" in str(structure_diff(shown, hidden, ignore=("parameters",)))
    assert not structure_diff(shown, hidden, ignore=("parameters", "nesting"))


def test_a_picture_draws_the_lines_under_the_calls_of_the_facets_it_is_given(
    request: pytest.FixtureRequest,
) -> None:
    """The golden holds the plugin's lines and the operations' (`ops=True`): each facet's
    lines are drawn, by its mark's words, only when its title is given."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    with offered(request.config, NestingLines()):
        text = trace_forward(model, torch.ones(1, 4), ops=True).render()
        opened = golden_picture(text, under=("opened",)).svg
        neither = golden_picture(text).svg
        with pytest.raises(ValueError, match=r"of 'opend': .*\('opened', 'operations'\)"):
            golden_picture(text, under=("opend",))
    written = [line.strip().removeprefix("% ") for line in text.splitlines() if "% open" in line]
    root = ElementTree.fromstring(opened)
    nodes = [group for group in root.iter(f"{SVG}g") if group.get("class") == "fo-line-under"]
    # Each node: its tooltip (the line's text), then what it shows (the same: no label).
    assert ["".join(node.itertext()) for node in nodes] == [text * 2 for text in written]
    assert written
    assert "fo-line-under" not in neither


def test_a_facet_compared_on_request_is_left_out_until_compare_names_it(
    request: pytest.FixtureRequest,
) -> None:
    """`compared_on_request` makes a plugin's facet a measurement, as costs and values are:
    the sign flip changes only its counts (the oracle's), so only `compare` sees it."""
    measured = PositiveOutputs()
    measured.compared_on_request = "how many outputs are positive"
    inputs = torch.ones(1, 4)
    assert positive_counts_by_global_hook(signed_model(1.0), inputs) != (
        positive_counts_by_global_hook(signed_model(-1.0), inputs)
    )
    with offered(request.config, measured):
        old, new = (
            trace_forward(signed_model(1.0), inputs),
            trace_forward(signed_model(-1.0), inputs),
        )
        assert not structure_diff(old, new)
        with pytest.raises(StructureMismatchError, match=r"positive outputs changed at 3 calls"):
            assert_same_structure(old, new, compare=("positive outputs",))
        plain = trace_forward(signed_model(1.0), inputs)
    plain.facets = ()  # traced without the facet
    with (
        offered(request.config, measured),
        pytest.raises(ValueError, match=r"needs how many outputs are positive, and `actual` has"),
    ):
        structure_diff(old, plain, compare=("positive outputs",))
