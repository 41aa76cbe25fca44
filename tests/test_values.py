"""Output fingerprints per call (`values=True`): taken, written, compared within a tolerance."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.facets.values import VALUES, ValuesFacet, fingerprint
from pytest_fwdorder.golden.facet_facts import within_facets
from pytest_fwdorder.options import DEFAULT_VALUES_TOLERANCE, Tolerance
from pytest_fwdorder.snapshot.extension import TraceSnapshotExtension


class Attention(nn.Module):
    """Scaled dot-product scores, with the scale as a constant inside forward."""

    def __init__(self, width: int = 8, divide_by_width: bool = False) -> None:
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.project = nn.Linear(width, width)
        self.width = width
        self.divide_by_width = divide_by_width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.query(x) @ self.key(x).transpose(-1, -2)
        scale = self.width if self.divide_by_width else math.sqrt(self.width)
        return self.project((scores / scale).softmax(-1) @ x)


def facts_match(old: str, new: str, tolerance: Tolerance = DEFAULT_VALUES_TOLERANCE) -> bool:
    """Whether two `values:` facts' texts match, as the values facet reads and compares them."""
    facet = ValuesFacet(tolerance)
    return facet.same(facet.parse(old), facet.parse(new))


def tolerated(old_text: str, new_text: str, tolerance: Tolerance) -> str:
    return within_facets(old_text, new_text, [ValuesFacet(tolerance)])


def values_facts(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("| values:")]


def test_every_call_gets_a_values_fact_and_the_header_says_the_seed() -> None:
    trace = trace_forward(
        lambda: nn.Sequential(nn.Linear(4, 3), nn.Tanh()), torch.ones(2, 4), values=True
    )
    text = trace.render()
    assert "# values: each call's output, the forward run with seed 0" in text
    assert len(values_facts(text)) == 3


def test_a_fingerprint_gives_mean_std_and_absmax_of_the_values() -> None:
    found = fingerprint(torch.tensor([1.0, -3.0, 2.0, 0.0]))
    assert (found.mean, found.absmax, found.nan, found.inf) == (0.0, 3.0, 0, 0)
    assert found.std == pytest.approx(math.sqrt(3.5))


def test_nan_and_inf_are_counted_and_left_out_of_the_statistics() -> None:
    found = fingerprint(torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 3.0]))
    assert (found.mean, found.absmax, found.nan, found.inf) == (2.0, 3.0, 1, 2)


def test_a_tensor_without_finite_values_says_so() -> None:
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / 0.0

    text = trace_forward(Broken(), torch.ones(3), values=True).render()
    assert values_facts(text) == ["| values: no finite values, inf 3"]


def test_each_tensor_of_a_tuple_output_gets_its_own_fingerprint() -> None:
    class Two(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, -2 * x

    (fact,) = values_facts(trace_forward(Two(), torch.ones(2), values=True).render())
    assert fact == "| values: [0] mean 1, std 0, absmax 1; [1] mean -2, std 0, absmax 2"


def test_a_fingerprint_is_taken_before_an_in_place_activation_changes_the_output() -> None:
    # The convolution's output is the tensor ReLU(inplace=True) overwrites: a hook that kept
    # it to look at later would see no negative values there.
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(inplace=True))
    trace = trace_forward(model, torch.randn(8, 4), values=True)
    values = trace.facet_values["values"]
    linear, relu = values[1], values[2]
    linear_mean, relu_mean = linear[0].mean, relu[0].mean
    assert linear_mean is not None
    assert relu_mean is not None
    assert linear_mean < relu_mean


def test_the_forward_runs_under_a_seed_so_dropout_repeats() -> None:
    model = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5)).train()
    x = torch.ones(4, 16)
    first = trace_forward(model, x, values=True).render()
    torch.rand(100)  # whatever the caller's stream did in between
    assert trace_forward(model, x, values=True).render() == first


def test_the_callers_random_state_is_put_back() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    trace_forward(nn.Sequential(nn.Dropout(0.5)).train(), torch.ones(8), values=True)
    assert torch.equal(torch.rand(3), expected)


def test_a_builder_is_built_under_the_seed_so_its_weights_repeat() -> None:
    x = torch.ones(2, 8)
    first = trace_forward(lambda: Attention(), x, values=True).render()
    torch.rand(100)
    assert trace_forward(lambda: Attention(), x, values=True).render() == first


def test_values_on_meta_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"values=True .* on device='meta' tensors have no values"):
        trace_forward(nn.Linear(2, 2), torch.ones(1, 2), device="meta", values=True)


def test_a_golden_without_values_is_unchanged_by_the_option_being_off() -> None:
    model, x = nn.Linear(2, 2), torch.ones(1, 2)
    assert "values" not in trace_forward(model, x).render()


def test_a_changed_constant_inside_forward_fails_and_names_the_first_call_that_moved() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    before = trace_forward(lambda: Attention(), x, values=True).render()
    after = trace_forward(lambda: Attention(divide_by_width=True), x, values=True).render()
    extension = TraceSnapshotExtension()
    assert not extension.matches(serialized_data=after, snapshot_data=before)
    summary = diff_golden(before, tolerated(before, after, (1e-3, 1e-6))).summary()
    # query and key are computed before the scale: the first call whose output moved is
    # the projection, and its parent only follows from it.
    assert "values moved beyond the tolerance at 2 calls, first at project (Linear): " in summary
    assert "later: <root> (Attention)" in summary


def test_autocast_fails_with_the_call_whose_output_changed() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), torch.randn(4, 8)
    before = trace_forward(model, x, values=True).render()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        after = trace_forward(model, x, values=True).render()
    assert not TraceSnapshotExtension().matches(serialized_data=after, snapshot_data=before)
    summary = diff_golden(before, tolerated(before, after, (1e-3, 1e-6))).summary()
    # The dtype names the first call: bf16 rounding moves the values themselves only a few
    # times the tolerance, and for some inputs not at all (measured over 40 seeds).
    # Said once, at the first call, and followed through: the second call takes the bf16
    # output and gives bf16, which is the model's output.
    assert (
        "output changed at 1 call: 0 (Linear) output dtype f32 -> bf16, and so the input of "
        "1 (Linear), its output and the output of the model"
    ) in summary


def test_statistics_that_moved_within_the_tolerance_match() -> None:
    assert facts_match("mean 0.1, std 1, absmax 3", "mean 0.1002, std 1.001, absmax 3.001")


def test_a_statistic_that_moved_beyond_the_tolerance_does_not_match() -> None:
    assert not facts_match("mean 0.1, std 1, absmax 3", "mean 0.11, std 1, absmax 3")


def test_the_tolerance_scales_with_the_largest_absolute_value() -> None:
    # A mean near zero has no relative precision of its own: its error is bounded by the
    # tensor's magnitude, which is what the tolerance is relative to.
    assert facts_match("mean 1e-05, std 1, absmax 4", "mean -0.002, std 1, absmax 4")
    assert not facts_match("mean 1e-05, std 1, absmax 1", "mean -0.002, std 1, absmax 1")


def test_a_changed_nan_count_never_matches() -> None:
    assert not facts_match("mean 0, std 1, absmax 3", "mean 0, std 1, absmax 3, nan 1")


def test_the_tolerance_comes_from_the_trace_and_can_be_widened() -> None:
    model, x = nn.Linear(4, 4), torch.ones(1, 4)
    golden = trace_forward(model, x, values=True).render().replace("mean ", "mean 1", 1)
    strict = trace_forward(model, x, values=True)
    loose = trace_forward(model, x, values=True, values_absolute_tolerance=100.0)
    extension = TraceSnapshotExtension()
    assert not extension.matches(serialized_data=extension.serialize(strict), snapshot_data=golden)
    assert extension.matches(serialized_data=extension.serialize(loose), snapshot_data=golden)


def test_fingerprints_within_tolerance_are_left_out_of_a_failures_diff() -> None:
    from pytest_fwdorder.snapshot.policy import explain_mismatch

    x = torch.randn(2, 4)
    before = trace_forward(lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU()), x, values=True)
    after = trace_forward(
        lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Identity()), x, values=True
    )
    (first_fact, *_) = values_facts(before.render())
    absmax = VALUES.parse(first_fact.partition("values: ")[2])[0].absmax
    assert absmax is not None
    nudged = first_fact.replace(first_fact.rpartition("absmax ")[2], f"{absmax * 1.0001:.5g}")
    golden = before.render().replace(first_fact, nudged, 1)
    message = "\n".join(explain_mismatch(golden, after.render()))
    assert "1 call inserted" in message
    assert nudged not in message


def test_a_fingerprint_nudged_in_its_last_digit_matches_through_the_snapshot_extension() -> None:
    model, x = nn.Linear(4, 4), torch.randn(1, 4)
    text = trace_forward(model, x, values=True).render()
    (fact,) = values_facts(text)
    absmax = VALUES.parse(fact.partition("values: ")[2])[0].absmax
    assert absmax is not None
    nudged = fact.replace(f"absmax {fact.split('absmax ')[1]}", f"absmax {absmax * 1.0001:.5g}")
    golden = text.replace(fact, nudged)
    assert golden != text
    assert TraceSnapshotExtension().matches(serialized_data=text, snapshot_data=golden)


def test_fingerprints_are_the_same_in_another_process_and_with_one_thread() -> None:
    script = textwrap.dedent(
        """
        import sys, torch, torchvision
        from pytest_fwdorder import trace_forward
        torch.set_num_threads(int(sys.argv[1]))
        torch.manual_seed(0)
        x = torch.randn(1, 3, 64, 64)
        trace = trace_forward(lambda: torchvision.models.resnet18(), x, values=True)
        print(trace.render())
        """
    )
    texts = [
        subprocess.run(
            [sys.executable, "-c", script, threads], capture_output=True, text=True, check=True
        ).stdout
        for threads in ("1", "2")
    ]
    assert len(values_facts(texts[0])) == 76
    assert TraceSnapshotExtension().matches(serialized_data=texts[1], snapshot_data=texts[0])


def test_a_fixture_test_makes_the_same_inputs_on_every_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_seeded_inputs="""
        import torch
        from torch import nn

        def test_values(forward_trace, snapshot):
            model = nn.Linear(4, 2)
            assert forward_trace(model, torch.randn(3, 4), values=True) == snapshot
        """
    )
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)


def test_the_marker_turns_values_on_and_sets_the_tolerance(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_values_marker="""
        import pytest, torch
        from torch import nn

        @pytest.mark.fwdorder(values=True, values_relative_tolerance=0.5)
        def test_values(forward_trace):
            trace = forward_trace(nn.Linear(4, 2), torch.randn(3, 4))
            (facet,) = [facet for facet in trace.facets if facet.title == "values"]
            assert facet.tolerance == (0.5, 1e-06)
            assert "| values: " in trace.render()
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_the_ini_sets_the_tolerance(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nfwdorder_values = true\nfwdorder_values_absolute_tolerance = 1e-4\n"
    )
    pytester.makepyfile(
        test_values_ini="""
        import torch
        from torch import nn

        def test_values(forward_trace):
            trace = forward_trace(nn.Linear(4, 2), torch.randn(3, 4))
            (facet,) = [facet for facet in trace.facets if facet.title == "values"]
            assert facet.tolerance == (0.001, 0.0001)
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_a_negative_tolerance_is_refused() -> None:
    with pytest.raises(
        TypeError, match=r"values_relative_tolerance must be a number of at least 0, got -1"
    ):
        trace_forward(nn.Linear(2, 2), torch.ones(1, 2), values=True, values_relative_tolerance=-1)


def test_record_takes_values_too() -> None:
    from pytest_fwdorder import record

    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    with record(model, values=True) as first:
        model(torch.ones(2, 4))
    with record(model, values=True) as second:
        model(torch.ones(2, 4))
    assert len(values_facts(first.render())) == 3
    assert first.render() == second.render()


def test_assert_same_structure_ignores_values_unless_asked() -> None:
    from pytest_fwdorder import StructureMismatchError, assert_same_structure

    x = torch.randn(2, 5, 8)
    before = trace_forward(lambda: Attention(), x, values=True)
    after = trace_forward(lambda: Attention(divide_by_width=True), x, values=True)
    assert_same_structure(before, after)
    with pytest.raises(StructureMismatchError, match=r"first at project \(Linear\): "):
        assert_same_structure(before, after, compare=("values",))


def test_assert_same_structure_compares_values_within_the_tolerance() -> None:
    from pytest_fwdorder import assert_same_structure

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    x = torch.randn(4, 8)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.0)
    before = trace_forward(model, x, values=True)
    with torch.no_grad():
        model[0].bias.add_(1e-7)  # far inside the tolerance
    assert_same_structure(before, trace_forward(model, x, values=True), compare=("values",))


def test_assert_same_structure_refuses_values_that_were_not_recorded() -> None:
    from pytest_fwdorder import assert_same_structure

    traced = trace_forward(nn.Linear(2, 2), torch.ones(1, 2))
    with pytest.raises(
        ValueError,
        match=r"needs fingerprints of each call's output, and `expected` and `actual` have none",
    ):
        assert_same_structure(traced, traced, compare=("values",))


def test_the_report_shows_the_calls_whose_values_moved(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_values_report="""
        import os, torch
        from torch import nn

        def test_values(forward_trace, snapshot):
            model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            with torch.no_grad():
                model[0].weight.mul_(float(os.environ.get("SCALE", "1")))
            assert forward_trace(model, torch.randn(2, 4), values=True) == snapshot
        """
    )
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    pytester._monkeypatch.setenv("SCALE", "2")
    pytester.runpytest("--fwdorder-report=report.html").assert_outcomes(failed=1)
    page = (pytester.path / "report.html").read_text()
    text_diff = page.partition("Picture of the change")[0]  # the picture marks them too
    assert text_diff.count("(values moved beyond the tolerance)") == 3
    assert "values moved beyond the tolerance at 3 calls, first at 0 (Linear)" in page


def test_the_command_line_takes_the_values_options() -> None:
    from pytest_fwdorder.cli.parser import build_parser

    arguments = build_parser().parse_args(
        ["show", "torchvision.models:resnet18", "--values", "--values-relative-tolerance", "0.01"]
    )
    assert arguments.values is True
    assert arguments.values_relative_tolerance == "0.01"


TOLERATED_PROJECT = """
import os, torch
from torch import nn

def test_values(forward_trace, snapshot):
    torch.manual_seed(0)
    last = getattr(nn, os.environ.get("LAST", "ReLU"))()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), last)
    with torch.no_grad():
        model[0].weight.mul_(float(os.environ.get("SCALE", "1")))
    tolerance = float(os.environ["TOLERANCE"])
    inputs = torch.ones(2, 4)
    assert forward_trace(model, inputs, values=True, values_relative_tolerance=tolerance) == snapshot
"""


@pytest.mark.parametrize("workers", [None, "1"], ids=["in-process", "xdist"])
@pytest.mark.parametrize("tolerance", ["0.5", "0"])
def test_the_reports_compare_values_within_the_traces_own_tolerance(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tolerance: str, workers: str | None
) -> None:
    """A golden that fails for a class change, its values 1% apart: the assertion (the trace's
    own tolerance) is the oracle for what the HTML report and the GitHub annotation say."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("TOLERANCE", tolerance)
    pytester.makepyfile(test_tolerated=TOLERATED_PROJECT)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    monkeypatch.setenv("SCALE", "1.01")
    monkeypatch.setenv("LAST", "Tanh")
    options = ["--fwdorder-report=report.html", "-p", "no:randomly"]
    if workers is None:
        result = pytester.runpytest(*options)
    else:
        result = pytester.runpytest_subprocess(*options, "-p", "xdist", "-n", workers)
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    page = (pytester.path / "report.html").read_text()
    annotation = next(line for line in output.splitlines() if line.startswith("::error"))
    assert "type changed" in annotation
    moved = "values moved beyond the tolerance"
    in_assertion = moved in output.replace(annotation, "")
    assert in_assertion is (tolerance == "0")  # the oracle tells the two tolerances apart
    assert (moved in annotation) is in_assertion
    assert (moved in page) is in_assertion


def test_the_html_report_of_a_trace_without_values_ignores_the_goldens_values(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A golden written with values, compared with a trace made without: the assertion says
    only what changed in the calls (its oracle), and so must the HTML report."""
    monkeypatch.setenv("TOLERANCE", "0.001")
    pytester.makepyfile(
        test_tolerated=TOLERATED_PROJECT.replace(
            "values=True", "values=os.environ.get('VALUES') == '1'"
        )
    )
    monkeypatch.setenv("VALUES", "1")
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    monkeypatch.setenv("VALUES", "0")
    monkeypatch.setenv("LAST", "Tanh")
    result = pytester.runpytest("--fwdorder-report=report.html", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    totals = "4 calls before, 4 after: 1 call type changed"
    result.stdout.fnmatch_lines([f"*{totals}"])  # the oracle: no values among the changes
    page = (pytester.path / "report.html").read_text()
    assert totals in page
    assert "values changed" not in page
    assert "values moved" not in page
