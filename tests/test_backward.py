"""Backward order as an opt-in second section (`backward=True`)."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.checkpoint import checkpoint

from pytest_fwdorder import record, trace_forward
from pytest_fwdorder.checks.structure import assert_same_structure
from pytest_fwdorder.diff.changes import ChangeKind
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.errors import StructureMismatchError
from pytest_fwdorder.facets.backward import BACKWARD
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.hookspecs import trace_facets
from pytest_fwdorder.report.git_review import Review, explain_golden
from pytest_fwdorder.report.review_format import format_json, review_total


def small() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def backward_section(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[lines.index("backward:") :]


def test_backward_steps_are_listed_in_the_order_gradients_arrive() -> None:
    text = trace_forward(small(), torch.randn(3, 4), backward=True).render()
    assert backward_section(text) == [
        "backward:",
        "  <root>: Sequential <- f32[3,2]",
        "    2: Linear <- f32[3,2]",
        "    1: ReLU <- f32[3,8]",
        "    0: Linear <- f32[3,8]",
    ]


def test_the_header_says_where_backward_started() -> None:
    text = trace_forward(small(), torch.randn(3, 4), backward=True).render()
    assert "# backward: 4 steps, from the sum of the output's floating tensors" in text


def test_a_loss_function_is_named_in_the_header() -> None:
    def first_column(output: torch.Tensor) -> torch.Tensor:
        return output[:, 0].sum()

    text = trace_forward(small(), torch.randn(3, 4), backward=first_column).render()
    assert "# backward: 4 steps, from test_a_loss_function_is_named_in_the_header.<locals>" in text


def test_without_backward_the_golden_has_no_backward_section() -> None:
    text = trace_forward(small(), torch.randn(3, 4)).render()
    assert "backward:" not in text
    assert "# backward" not in text


def test_gradients_already_on_parameters_are_left_as_they_were() -> None:
    model = small()
    model[0].weight.grad = torch.ones(8, 4)
    kept = model[0].weight.grad
    trace_forward(model, torch.randn(3, 4), backward=True)
    assert model[0].weight.grad is kept
    assert torch.equal(kept, torch.ones(8, 4))
    assert model[2].weight.grad is None


def test_inputs_that_require_grad_get_no_grad() -> None:
    inputs = torch.randn(3, 4, requires_grad=True)
    trace_forward(small(), inputs, backward=True)
    assert inputs.grad is None


def test_nothing_that_requires_grad_gives_an_empty_section() -> None:
    model = small().requires_grad_(False)
    text = trace_forward(model, torch.randn(3, 4), backward=True).render()
    assert backward_section(text) == ["backward:"]
    assert "# backward: 0 steps" in text


def test_a_loss_function_that_returns_no_tensor_is_a_type_error() -> None:
    def forgot_to_return(output: torch.Tensor) -> None:
        output.sum()

    with pytest.raises(TypeError, match=r"forgot_to_return returned NoneType, not a tensor"):
        trace_forward(small(), torch.randn(3, 4), backward=forgot_to_return)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=False))


def test_checkpoint_recomputation_shows_as_recomputed_calls() -> None:
    trace = trace_forward(Checkpointed(), torch.randn(2, 4), backward=True)
    assert backward_section(trace.render()) == [
        "backward:",
        "  <root>: Checkpointed <- f32[2,2]",
        "    head: Linear <- f32[2,2]",
        "    block: Sequential <- f32[2,4]",
        "      block.1: ReLU <- f32[2,4]",
        "        recomputed block: Sequential",
        "          recomputed block.0: Linear",
        "          recomputed block.1: ReLU",
        "      block.0: Linear <- f32[2,4]",
    ]


def test_recomputed_calls_are_not_forward_calls() -> None:
    trace = trace_forward(Checkpointed(), torch.randn(2, 4), backward=True)
    assert [call.display_path for call in trace] == [
        "<root>",
        "block",
        "block.0",
        "block.1",
        "head",
    ]


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_resnet50_traces_with_backward(mode: str) -> None:
    model = torchvision.models.resnet50(weights=None)
    model.train(mode == "train")
    before = {name: value.clone() for name, value in model.state_dict().items()}
    trace = trace_forward(model, torch.randn(1, 3, 64, 64), backward=True)
    assert trace.trace_facet_values.get("backward") is not None
    assert len(trace.trace_facet_values["backward"].steps) == len(
        trace
    )  # every call's output got its gradient
    assert trace.trace_facet_values["backward"].steps[0].path == ""
    assert trace.trace_facet_values["backward"].steps[-1].path == "conv1"
    assert all(parameter.grad is None for parameter in model.parameters())
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def relu_and_tanh_goldens() -> tuple[str, str]:
    """Two goldens with backward whose orders differ in one step (ReLU -> Tanh)."""
    old = trace_forward(small(), torch.randn(3, 4), backward=True).render()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    new = trace_forward(model, torch.randn(3, 4), backward=True).render()
    return old, new


def test_a_changed_backward_order_is_a_change_in_the_facets_words() -> None:
    diff = diff_golden(*relu_and_tanh_goldens())

    facet_changes = diff.of_kind(ChangeKind.FACET_CHANGED)
    assert [(change.words, change.noun) for change in facet_changes] == [
        ("backward steps changed", "backward step")
    ]
    assert diff.summary().splitlines() == [
        "4 calls before, 4 after: 1 call type changed, 1 backward step changed",
        "type changed at 1: ReLU -> Tanh",
        "backward steps changed: step 3 of 4: 1: ReLU <- f32[3,8] -> 1: Tanh <- f32[3,8]",
    ]


def test_more_than_five_changed_runs_are_summed_up() -> None:
    def steps(activation: type[nn.Module]) -> str:
        torch.manual_seed(0)
        layers = [layer for _ in range(6) for layer in (nn.Linear(4, 4), activation())]
        return trace_forward(nn.Sequential(*layers), torch.randn(3, 4), backward=True).render()

    summary = diff_golden(steps(nn.ReLU), steps(nn.Tanh)).summary().splitlines()

    assert summary[0] == "13 calls before, 13 after: 6 calls type changed, 6 backward steps changed"
    line = summary[-1]
    assert line.startswith("backward steps changed: step 2 of 13: 11: ReLU <- f32[3,4] -> ")
    assert line.count("; ") == 4
    assert line.endswith(" (+1 more)")


def test_the_section_reads_back_into_the_lines_the_trace_wrote() -> None:
    text = trace_forward(small(), torch.randn(3, 4), backward=True).render()
    header, _ = parse_golden(text)

    assert BACKWARD.read_header(header) == tuple(backward_section(text)[1:])
    assert (
        BACKWARD.read_header(parse_golden(trace_forward(small(), torch.randn(3, 4)).render())[0])
        is None
    )


def test_the_backward_facet_is_offered_through_the_facets_hook() -> None:
    assert BACKWARD in trace_facets(FACT_TITLES)


def test_without_the_facet_registered_no_trace_writes_or_compares_backward(
    request: pytest.FixtureRequest,
) -> None:
    old, new = relu_and_tanh_goldens()
    manager = request.config.pluginmanager
    plugin = manager.unregister(name="pytest_fwdorder.facets.backward")
    try:
        text = trace_forward(small(), torch.randn(3, 4), backward=True).render()
        summary = diff_golden(old, new).summary()
    finally:
        manager.register(plugin, name="pytest_fwdorder.facets.backward")

    assert "backward" not in text  # neither its header line nor its section
    assert "backward steps changed" not in summary  # nothing compares the sections
    assert "backward steps changed" in diff_golden(old, new).summary()  # back, it does


def test_a_review_counts_backward_changes_in_the_facets_words() -> None:
    reviewed = explain_golden("g.fwdorder.txt", *relu_and_tanh_goldens())
    review = Review("HEAD", "0" * 40, None, None, (reviewed,))

    assert reviewed.changes == (("type changed", 1), ("backward steps changed", 1))
    assert review_total(review) == (
        "1 golden changed: 1 with classes changed, 1 with backward steps changed"
    )


def test_assert_same_structure_can_ignore_backward() -> None:
    old = trace_forward(small(), torch.randn(3, 4), backward=True)
    new = trace_forward(small(), torch.randn(3, 4), backward=lambda output: output[:, 0].sum())
    assert_same_structure(old, new, ignore=("backward",))


def test_assert_same_structure_compares_backward_unless_ignored() -> None:
    old = trace_forward(small(), torch.randn(3, 4), backward=True)
    new = trace_forward(Checkpointed(), torch.randn(3, 4), backward=True)
    with pytest.raises(StructureMismatchError, match="backward steps changed"):
        assert_same_structure(old, new, ignore=("types", "shapes"))


def test_record_with_backward_records_the_blocks_own_backward() -> None:
    model = small()
    with record(model, backward=True) as trace:
        model(torch.randn(3, 4)).pow(2).sum().backward()
    model.zero_grad(set_to_none=True)
    assert trace.trace_facet_values.get("backward") is not None
    assert [step.path for step in trace.trace_facet_values["backward"].steps] == ["", "2", "1", "0"]


def test_backward_must_be_a_bool_or_a_function() -> None:
    with pytest.raises(TypeError, match="backward must be True, False or a function"):
        trace_forward(small(), torch.randn(3, 4), backward="sum")


def test_blocking_the_built_in_backward_facet_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")

    result = pytester.runpytest("-p", "no:pytest_fwdorder.facets.backward")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest_fwdorder.facets.backward cannot be disabled*"])


def test_the_marker_turns_backward_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch


        @pytest.mark.fwdorder(backward=True)
        def test_marked(forward_trace):
            text = forward_trace(torch.nn.Linear(2, 3), torch.randn(1, 2)).render()
            assert text.endswith("backward:\\n  <root>: Linear <- f32[1,3]\\n")
        """
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_step_gone_at_the_end_is_numbered_in_the_old_order_and_said_removed() -> None:
    old = trace_forward(small(), torch.randn(3, 4), backward=True).render()
    new = old.replace("    0: Linear <- f32[3,8]\n", "")  # the last step gone

    summary = diff_golden(old, new).summary()

    # Counted in the new order this was "step 4 of 3", a step the new order does not have.
    assert summary.splitlines()[-1] == (
        "backward steps changed: step 4 of 4 removed: 0: Linear <- f32[3,8]"
    )


def test_a_step_gone_from_the_middle_is_numbered_in_the_old_order_and_said_removed() -> None:
    old = trace_forward(small(), torch.randn(3, 4), backward=True).render()
    new = old.replace("    1: ReLU <- f32[3,8]\n", "")  # the third of four steps gone
    # The oracle: the old section's own lines, numbered from 1.
    assert backward_section(old).index("    1: ReLU <- f32[3,8]") == 3

    sentences = BACKWARD.describe_changes(
        BACKWARD.read_header(parse_golden(old)[0]), BACKWARD.read_header(parse_golden(new)[0])
    )

    # Before, in the new order's numbering: "step 3 of 3: 1: ReLU <- f32[3,8] -> nothing",
    # the new order's third step, which is `0: Linear` and is still there.
    assert sentences == ["step 3 of 4 removed: 1: ReLU <- f32[3,8]"]


def test_an_inserted_step_is_numbered_in_the_new_order_and_said_inserted() -> None:
    old = trace_forward(small(), torch.randn(3, 4), backward=True).render()
    new = old.replace(
        "    1: ReLU <- f32[3,8]\n", "    1: ReLU <- f32[3,8]\n    1: Tanh <- f32[3,8]\n"
    )
    assert backward_section(new).index("    1: Tanh <- f32[3,8]") == 4  # the oracle

    sentences = BACKWARD.describe_changes(
        BACKWARD.read_header(parse_golden(old)[0]), BACKWARD.read_header(parse_golden(new)[0])
    )

    assert sentences == ["step 4 of 5 inserted: 1: Tanh <- f32[3,8]"]


def test_two_steps_gone_in_a_row_are_one_sentence_naming_both_old_numbers() -> None:
    old = ("a", "b", "c", "d")
    assert BACKWARD.describe_changes(old, ("a", "d")) == ["steps 2-3 of 4 removed: b / c"]
    assert BACKWARD.describe_changes(old, old) == []


def test_the_summary_the_counts_and_the_review_name_a_backward_change_alike() -> None:
    diff = diff_golden(*relu_and_tanh_goldens())
    reviewed = explain_golden("g.fwdorder.txt", *relu_and_tanh_goldens())

    # Before, the counts said "backward order changed" and the review "backward steps changed".
    assert diff.explained_counts() == {"type changed": 1, "backward steps changed": 1}
    assert dict(reviewed.changes) == diff.explained_counts()
    data = json.loads(format_json(Review("HEAD", "0" * 40, None, None, (reviewed,))))
    assert data["version"] == 2  # the JSON's keys are what they were
    assert data["goldens"][0]["changes"] == diff.explained_counts()
    assert "1 backward step changed" in diff.summary().splitlines()[0]
