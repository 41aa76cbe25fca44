"""Graph breaks (`graph_breaks=True`), the compile and export gates, and their diff words.

The oracles: each break's line is found in the models' source text (compile_models.py), the
module call it belongs to is where that source sits in the model, the graph count is
dynamo's own `explain`, and determinism is checked in a second process and under another
thread count.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from compile_models import (
    Branching,
    Counting,
    ExportSkips,
    Net,
    Printing,
    Reading,
    Straight,
    inputs,
    line_of,
)
from torch import nn

from pytest_fwdorder import (
    assert_export_matches_eager,
    assert_no_graph_breaks,
    diff_traces,
    record,
    trace_forward,
)
from pytest_fwdorder.facets.graph_breaks import GRAPH_BREAKS
from pytest_fwdorder.golden.format import header_sections

BRANCH = "data-dependent branch on a tensor's value"
_TITLE = re.compile(r"# graph breaks \((?P<breaks>[0-9]+) breaks?, (?P<graphs>[0-9]+) graphs?, ")


def graph_break_items(header: list[str]) -> list[str]:
    """The graph breaks section's items as the golden's text gives them."""
    return header_sections(header).get("graph breaks", [])


def recompilation_items(header: list[str]) -> list[str]:
    return header_sections(header).get("recompilations on a second call", [])


def graph_break_counts(header: list[str]) -> tuple[int, int] | None:
    """(graph breaks, graphs) from the section's title, read from the text."""
    for line in header:
        match = _TITLE.match(line)
        if match:
            return int(match.group("breaks")), int(match.group("graphs"))
    return None


def header(trace: object) -> list[str]:
    return [line for line in trace.render().splitlines() if line.startswith("#")]  # type: ignore[attr-defined]


def built(block: nn.Module) -> Net:
    torch.manual_seed(0)
    return Net(block)


@pytest.mark.parametrize(
    ("block", "reason", "statement"),
    [
        (Branching, BRANCH, "if x.sum() > 0:"),
        (Printing, "call of print()", 'print("printing in forward")'),
        (Reading, "Tensor.item() reads a tensor's value", "x * x.sum().item()"),
    ],
    ids=["branch", "print", "item"],
)
def test_each_break_is_named_at_its_module_call_and_source_line(
    block: type[nn.Module], reason: str, statement: str
) -> None:
    trace = trace_forward(built(block()), inputs(), graph_breaks=True)
    assert graph_break_items(header(trace)) == [
        f"blocks.1 (call 1): {reason} at {line_of(statement)}"
    ]


def test_the_graph_count_is_dynamos_own() -> None:
    model = built(Branching())
    trace = trace_forward(model, inputs(), graph_breaks=True)
    with warnings.catch_warnings():  # dynamo's own, while it traces
        warnings.simplefilter("ignore")
        explained = torch._dynamo.explain(model)(inputs())
    counts = graph_break_counts(header(trace))
    assert counts is not None
    assert counts[1] == explained.graph_count


def test_a_model_without_breaks_compiles_to_one_graph_and_no_recompilation() -> None:
    trace = trace_forward(built(Straight()), inputs(), graph_breaks=True)
    assert "# graph breaks (0 breaks, 1 graph, backend eager)" in header(trace)
    assert "# recompilations on a second call (0)" in header(trace)


def test_two_blocks_of_one_class_each_have_their_break() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Branching(), nn.ReLU(), Branching())
    trace = trace_forward(model, inputs(), graph_breaks=True)
    where = line_of("if x.sum() > 0:")
    assert graph_break_items(header(trace)) == [
        f"0 (call 1): {BRANCH} at {where}",
        f"2 (call 1): {BRANCH} at {where}",
    ]


def test_a_second_call_that_recompiles_names_the_guard() -> None:
    model = Counting()
    trace = trace_forward(model, inputs(), graph_breaks=True)
    # The oracle for the function's first line: Python's own code object.
    first_line = Counting.forward.__code__.co_firstlineno
    assert recompilation_items(header(trace)) == [
        f"<root>: compile_models.py:{first_line} after the guard self.steps == 0 failed"
    ]
    assert model.steps == 0  # the compiled calls' counting was put back


def test_the_model_is_left_as_it_was() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), Branching())
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trace_forward(model, inputs(), graph_breaks=True)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[name], after[name]) for name in before)
    # No compiled code stays in dynamo's caches for the model's forward.
    assert torch._dynamo.eval_frame._debug_get_cache_entry_list(Branching.forward.__code__) == []


def test_removing_the_branch_shows_in_the_diff() -> None:
    old = trace_forward(built(Branching()), inputs(), graph_breaks=True)
    new = trace_forward(built(Straight()), inputs(), graph_breaks=True)
    text = diff_traces(old, new).summary()
    assert "graph breaks 1 -> 0" in text
    assert (
        f"graph break removed in blocks.1 (call 1): {BRANCH} at {line_of('if x.sum() > 0:')}"
        in text
    )


def test_the_section_is_the_same_in_another_process_and_with_two_threads() -> None:
    model = built(Net(Reading()))
    here = graph_break_items(header(trace_forward(model, inputs(), graph_breaks=True)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads != 1 else 2)
    try:
        other_threads = trace_forward(model, inputs(), graph_breaks=True)
    finally:
        torch.set_num_threads(threads)
    assert graph_break_items(header(other_threads)) == here
    script = textwrap.dedent(
        """
        import torch
        from compile_models import Net, Reading, inputs
        from pytest_fwdorder import trace_forward
        torch.manual_seed(0)
        model = Net(Net(Reading()))
        print(trace_forward(model, inputs(), graph_breaks=True).render())
        """
    )
    tests = str(Path(__file__).parent)
    environment = {"PYTHONPATH": f"{tests}:{Path(tests).parent}", "PYTHONHASHSEED": "7"}
    completed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, **environment},
    )
    there = [line for line in completed.stdout.splitlines() if line.startswith("#")]
    assert graph_break_items(there) == here
    assert here  # the oracle can fail: the section holds the break


def test_record_refuses_graph_breaks() -> None:
    with (
        pytest.raises(ValueError, match=r"record\(graph_breaks=True\) cannot compile"),
        record(Straight(), graph_breaks=True),
    ):
        pass


def test_graph_breaks_refuses_meta() -> None:
    with pytest.raises(ValueError, match="device='meta' cannot"):
        trace_forward(Straight(), inputs(), device="meta", graph_breaks=True)


def test_assert_no_graph_breaks_names_the_break() -> None:
    with pytest.raises(AssertionError, match=r"blocks\.1 \(call 1\): data-dependent branch"):
        assert_no_graph_breaks(built(Branching()), inputs())
    assert assert_no_graph_breaks(built(Branching()), inputs(), at_most=1).graphs >= 2
    assert assert_no_graph_breaks(built(Straight()), inputs()).breaks == ()


def test_assert_no_graph_breaks_refuses_a_bad_budget() -> None:
    with pytest.raises(TypeError, match=r"at_most must be a non-negative int, got -1"):
        assert_no_graph_breaks(Straight(), inputs(), at_most=-1)


def test_export_that_skips_a_call_fails_naming_the_module() -> None:
    model = ExportSkips()
    # The oracle: torch's own count of ReLU calls in eager.
    calls = []
    handle = model.relu.register_forward_hook(lambda *_: calls.append(1))
    try:
        model(inputs())
    finally:
        handle.remove()
    assert len(calls) == 3
    with pytest.raises(AssertionError, match="export calls relu twice, eager three times"):
        assert_export_matches_eager(model, inputs())


class ReusedReLU(nn.Module):
    """Calls one ReLU three times, as ResNet-50's Bottleneck does."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.fc(self.relu(x)) + self.relu(x))


def test_export_matches_eager_for_a_reused_module() -> None:
    torch.manual_seed(0)
    program = assert_export_matches_eager(ReusedReLU(), inputs())
    # The oracle: the distinct module-call keys export wrote for the ReLU.
    keys = {
        key
        for node in program.graph.nodes
        if node.op == "call_function"
        for key, (path, _) in node.meta.get("nn_module_stack", {}).items()
        if path == "relu"
    }
    assert len(keys) == 3


def test_an_export_error_keeps_its_type_and_names_the_module_call() -> None:
    with pytest.raises(Exception, match=r"(?s)data.dependent|Could not guard") as raised:
        assert_export_matches_eager(built(Branching()), inputs())
    assert any("in the call of blocks.1" in note for note in raised.value.__notes__)


def test_show_graph_breaks_prints_the_section(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_fwdorder.cli.main import main

    assert main(["show", "compile_models:Printing", "--input", "2x4", "--graph-breaks"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert graph_break_items(printed) == [
        f"<root> (call 1): call of print() at {line_of('print(' + chr(34) + 'printing')}"
    ]


def test_show_export_names_the_module_export_calls_differently(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_fwdorder.cli.main import main

    assert main(["show", "compile_models:ExportSkips", "--input", "2x4", "--export"]) == 1
    assert "export calls relu twice, eager three times" in capsys.readouterr().out


MARKED_TEST = """
import pytest
import torch
from torch import nn


class Branching(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x = self.fc(x)
        if x.sum() > 0:
            return x * 2
        return x - 1


@pytest.mark.fwdorder(graph_breaks=True)
def test_model(forward_trace, snapshot):
    torch.manual_seed(0)
    assert forward_trace(Branching(), torch.ones(2, 4)) == snapshot
"""


def test_the_marker_writes_the_section_in_the_golden(pytester: pytest.Pytester) -> None:
    # pytester's in-process runs forget the modules a run imported; torch's compile stack
    # cannot be imported twice, so it is loaded here first, by a compile of our own.
    trace_forward(Straight(), inputs(), graph_breaks=True)
    pytester.makepyfile(test_model=MARKED_TEST)
    pytester.runpytest("--snapshot-update", "-p", "no:randomly").assert_outcomes(passed=1)
    (golden,) = pytester.path.glob("__snapshots__/**/*.txt")
    lines = golden.read_text().splitlines()
    source = MARKED_TEST.strip().splitlines().index("        if x.sum() > 0:") + 1
    assert graph_break_items(lines) == [f"<root> (call 1): {BRANCH} at test_model.py:{source}"]
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)


def test_the_html_shows_the_graph_breaks() -> None:
    from pytest_fwdorder.report.html import trace_html

    trace = trace_forward(built(Branching()), inputs(), graph_breaks=True)
    page = trace_html(trace.render())
    assert (
        '<div class="fo-warning" data-section="graph breaks"><strong>1 graph break</strong>' in page
    )
    assert (
        f"blocks.1 (call 1): data-dependent branch on a tensor&#x27;s value at {line_of('if x.sum() > 0:')}"
        in page
    )


@pytest.mark.parametrize(
    ("logged", "words"),
    [
        # torch 2.14, a break met inside an inlined call
        (
            "Encountered graph break when attempting to trace CALL: a function call, e.g. "
            "f(x, y):\n\nData-dependent branching\n  Explanation: Detected data-dependent "
            "branching (e.g. `if my_tensor.sum() > 0:`).",
            BRANCH,
        ),
        # torch 2.8, the same break
        ("Data-dependent branching\n  Explanation: Detected data-dependent branching", BRANCH),
        # explain()'s older wording
        ("generic_jump TensorVariable()", BRANCH),
        (
            "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to "
            "trace builtin operator `print` with argument types ['str']",
            "call of print()",
        ),
        ("A reason we have no words for\n  Hint: ...", "A reason we have no words for"),
    ],
    ids=["inlined-2.14", "2.8", "explain", "print", "other"],
)
def test_dynamos_reasons_read_as_the_same_words_across_releases(logged: str, words: str) -> None:
    from pytest_fwdorder.facets.graph_breaks import reason_in_words

    assert reason_in_words(logged) == words


def test_the_header_reads_back_into_the_records_the_trace_measured() -> None:
    trace = trace_forward(built(Branching()), inputs(), graph_breaks=True)
    measured = trace.trace_facet_values["graph breaks"]

    assert measured.breaks  # a break to read back, so that reading can fail
    assert GRAPH_BREAKS.read_header(header(trace)) == measured
    assert GRAPH_BREAKS.read_header(header(trace_forward(built(Straight()), inputs()))) is None
