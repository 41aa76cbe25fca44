"""A built-in facet is a facet as a plugin's is: the values facet (`values=True`) is offered
through the `pytest_fwdorder_facets` hook, switched on by its option, configured by the
options, written, read back into typed fingerprints and compared through the protocol alone.

The oracle for its numbers is torch's global forward hook computing the same statistics
independently of the recorder.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from pytest_fwdorder import Facet, diff_golden, trace_forward
from pytest_fwdorder.calls.facet_records import TensorFingerprint, checked_facets
from pytest_fwdorder.facets.values import VALUES, ValuesFacet
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.hookspecs import plugin_facets
from pytest_fwdorder.options import VALUES_ABSOLUTE_TOLERANCE
from pytest_fwdorder.snapshot.policy import explain_mismatch, golden_holds


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def statistics_by_global_hook(module: nn.Module, inputs: torch.Tensor) -> list[tuple[float, ...]]:
    """The oracle: (mean, std, absmax) of each module call's output, in the order calls end."""
    found: list[tuple[float, ...]] = []

    def take(called: nn.Module, args: object, output: torch.Tensor) -> None:
        values = output.detach().double()
        found.append(
            (float(values.mean()), float(values.std(correction=0)), float(values.abs().max()))
        )

    handle = nn.modules.module.register_module_forward_hook(take)
    try:
        module(inputs)
    finally:
        handle.remove()
    return found


def test_the_values_facet_is_offered_through_the_facets_hook_first() -> None:
    offered = plugin_facets(FACT_TITLES)

    assert isinstance(VALUES, Facet)
    assert offered[0] is VALUES


def test_a_trace_records_it_only_when_its_option_is_on_with_the_options_tolerance() -> None:
    off = trace_forward(model(), torch.ones(1, 4))
    on = trace_forward(model(), torch.ones(1, 4), values=True, values_relative_tolerance=0.25)

    assert off.facets == ()
    assert "| values: " not in off.render()
    (facet,) = on.facets
    assert isinstance(facet, ValuesFacet)
    assert facet.tolerance == (0.25, VALUES_ABSOLUTE_TOLERANCE)


def test_a_golden_reads_back_into_the_fingerprints_the_global_hook_computes() -> None:
    inputs = torch.randn(3, 4)
    text = trace_forward(model(), inputs, values=True).render()
    _, lines = parse_golden(text, plugin_facets(FACT_TITLES))
    # Lines are in call order; the hook sees calls end: the root ends last.
    read = [value for line in lines[1:] + lines[:1] for _, value in line.facet_values]
    expected = statistics_by_global_hook(model(), inputs)
    other = statistics_by_global_hook(model(), inputs * 2)

    assert all(isinstance(one, tuple) and isinstance(one[0], TensorFingerprint) for one in read)
    got = [(one[0].mean, one[0].std, one[0].absmax) for one in read]
    assert got == [pytest.approx(numbers, rel=1e-4, abs=1e-6) for numbers in expected]
    assert got != [pytest.approx(numbers, rel=1e-4, abs=1e-6) for numbers in other]


def test_a_plugin_cannot_take_the_values_title() -> None:
    class Impostor(ValuesFacet):
        pass

    with pytest.raises(ValueError, match=r"title 'values', which another fact of the golden"):
        checked_facets([VALUES, Impostor()], FACT_TITLES)


def nudged(text: str, factor: float) -> str:
    """`text` with the first values fact's absmax multiplied by `factor`."""
    fact = next(line for line in text.splitlines() if line.strip().startswith("| values: "))
    absmax = VALUES.parse(fact.split("| values: ")[1])[0].absmax
    assert absmax is not None
    return text.replace(
        fact, fact.replace(f"absmax {fact.split('absmax ')[1]}", f"absmax {absmax * factor:.5g}"), 1
    )


def test_the_traces_own_tolerance_decides_whether_the_golden_holds_and_what_the_diff_says() -> None:
    text = trace_forward(model(), torch.ones(1, 4), values=True).render()
    golden = nudged(text, 1.01)  # 1% of absmax: beyond the default, within a 5% tolerance
    wide = (ValuesFacet((0.05, 0.0)),)

    assert not golden_holds(golden, text)
    assert golden_holds(golden, text, facets=wide)
    default_words = "\n".join(explain_mismatch(golden, text))
    assert "1 call values moved beyond the tolerance" in default_words
    # The golden's side compares: a diff made with the wide facet finds nothing beyond it.
    assert diff_golden(golden, text, facets=wide).changes == []


def test_values_on_one_side_only_is_the_option_not_a_change_at_every_call() -> None:
    with_values = trace_forward(model(), torch.ones(1, 4), values=True).render()
    without = trace_forward(model(), torch.ones(1, 4)).render()

    summary = diff_golden(with_values, without).explanation()

    assert not any("values moved" in line for line in summary)
    assert any(line.startswith("- # values: ") for line in summary)


class Elements:
    """A plugin's facet: the element count of each call's output."""

    title = "output elements"
    change_words = "output elements changed"

    def observe(self, output: object) -> int | None:
        return output.numel() if isinstance(output, torch.Tensor) else None

    def render(self, value: int) -> str:
        return f"{value:,}"

    def parse(self, text: str) -> int:
        return int(text.replace(",", ""))

    def same(self, old: int, new: int) -> bool:
        return old == new

    def describe_change(self, old: int, new: int) -> str:
        return f"{old:,} -> {new:,}"


@pytest.fixture
def plugin_facet(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A plugin's facet (the output's element count) for the length of one test."""

    class Plugin:
        def pytest_fwdorder_facets(self) -> list[object]:
            return [Elements()]

    plugin = Plugin()
    request.config.pluginmanager.register(plugin)
    try:
        yield plugin
    finally:
        request.config.pluginmanager.unregister(plugin)


def test_the_built_in_facts_come_before_a_plugins_under_each_call(plugin_facet: Any) -> None:
    text = trace_forward(model(), torch.ones(1, 4), values=True).render()
    facts = [
        line.strip().split(":")[0]
        for line in text.splitlines()
        if "| values: " in line or "| output elements: " in line
    ]

    assert facts == ["| values", "| output elements"] * 4


def test_a_structure_comparison_holds_values_to_the_expected_traces_tolerance() -> None:
    from pytest_fwdorder import structure_diff

    inputs = torch.ones(1, 4)
    # Inputs 1% larger move every statistic by about 1%: beyond the default tolerance
    # (0.1% of the largest absolute value), within a 5% one.
    wide = trace_forward(model(), inputs, values=True, values_relative_tolerance=0.05)
    strict = trace_forward(model(), inputs, values=True)
    moved = trace_forward(model(), inputs * 1.01, values=True)

    assert structure_diff(wide, moved, compare=("values",)).changes == []
    strict_changes = structure_diff(strict, moved, compare=("values",)).changes
    # The oracle: the calls (in the order they end) whose statistics moved beyond the
    # default tolerance by the global hook's own numbers.
    before = statistics_by_global_hook(model(), inputs)
    after = statistics_by_global_hook(model(), inputs * 1.01)
    beyond = {
        path
        for path, old, new in zip(("0", "1", "2", ""), before, after, strict=True)
        if any(
            abs(a - b) > 1e-6 + 1e-3 * max(old[2], new[2]) for a, b in zip(old, new, strict=True)
        )
    }
    assert beyond
    assert {change.new.path for change in strict_changes if change.new} == beyond
    assert {change.words for change in strict_changes} == {"values moved beyond the tolerance"}
    # Left out unless compared, as before.
    assert structure_diff(strict, moved).changes == []


def test_the_built_in_facts_come_first_even_before_a_tryfirst_plugins(
    request: pytest.FixtureRequest,
) -> None:
    class Eager:
        @pytest.hookimpl(tryfirst=True)
        def pytest_fwdorder_facets(self) -> list[object]:
            return [Elements()]

    plugin = Eager()
    request.config.pluginmanager.register(plugin)
    try:
        text = trace_forward(model(), torch.ones(1, 4), values=True).render()
    finally:
        request.config.pluginmanager.unregister(plugin)
    titles = [line.strip().split(":")[0] for line in text.splitlines() if line.strip()[:2] == "| "]

    assert [title for title in titles if title in ("| values", "| output elements")] == [
        "| values",
        "| output elements",
    ] * 4


def test_a_facet_naming_no_trace_option_is_refused_naming_it(
    request: pytest.FixtureRequest,
) -> None:
    class Switched(ValuesFacet):
        title = "switched"
        option = "elements"

    class Plugin:
        def pytest_fwdorder_facets(self) -> list[object]:
            return [Switched()]

    plugin = Plugin()
    request.config.pluginmanager.register(plugin)
    try:
        with pytest.raises(ValueError, match=r"names the option 'elements', which is no trace"):
            trace_forward(model(), torch.ones(1, 4))
    finally:
        request.config.pluginmanager.unregister(plugin)


def test_blocking_a_built_in_facet_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")

    result = pytester.runpytest("-p", "no:pytest_fwdorder.facets.values")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest_fwdorder.facets.values cannot be disabled*"])
