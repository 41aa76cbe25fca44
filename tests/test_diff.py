"""Aligning and explaining differences between traces, and the golden format round trip."""

from __future__ import annotations

import copy

import pytest
import torch
from refactor_corpus import a_stage_flattened_as_a_layer_moves
from torch import nn

from pytest_fwdorder import diff_golden, diff_traces, trace_forward
from pytest_fwdorder.diff.call_tree import CallTree
from pytest_fwdorder.diff.changes import ChangeKind
from pytest_fwdorder.golden.format import FORMAT_LINE
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.golden.render import golden_lines


def chain(*activations: type[nn.Module], width: int = 4) -> nn.Module:
    layers: list[nn.Module] = []
    for activation in activations:
        layers += [nn.Linear(width, width), activation()]
    return nn.Sequential(*layers)


def trace_of(model: nn.Module, batch: int = 1) -> object:
    return trace_forward(model, torch.randn(batch, 4))


TWENTY = [nn.ReLU] * 20


def test_identical_traces_have_no_differences() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(*TWENTY)))

    assert not difference
    assert difference.summary() == "no differences"


def test_a_difference_at_the_end_only_shows_the_last_calls() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(*TWENTY[:-1], nn.Tanh)))

    assert difference.summary().splitlines()[1] == "type changed at 39: ReLU -> Tanh"
    body = difference.body()
    assert body[0] == "  ... 38 unchanged calls ..."
    assert body[-3:] == [
        "-   39: ReLU (f32[1,4]) -> f32[1,4]",
        "+   39: Tanh (f32[1,4]) -> f32[1,4]",
        "-     | settings: inplace=False",  # a ReLU's setting; a Tanh has none
    ]


def test_a_difference_at_the_start_only_shows_the_first_calls() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(nn.Tanh, *TWENTY[1:])))

    body = difference.body()
    assert body[:3] == [
        "  <root>: Sequential (f32[1,4]) -> f32[1,4]",
        "    0: Linear (f32[1,4]) -> f32[1,4]",
        "-   1: ReLU (f32[1,4]) -> f32[1,4]",
    ]
    assert body[-1] == "  ... 36 unchanged calls ..."


def test_differences_everywhere_are_all_listed_and_counted() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(*TWENTY), batch=2))

    assert difference.count("input changed") == 41
    assert difference.count("output changed") == 41
    assert not any("unchanged" in line for line in difference.body())


def test_long_diffs_are_cut_with_a_count_of_what_is_not_shown() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(*TWENTY), batch=2))

    body = difference.body(max_rows=5)

    assert body[-1] == "  ... 36 more changed rows not shown"


def test_a_call_taken_out_of_order_is_moved_not_removed_and_inserted() -> None:
    before = nn.Sequential()
    before.add_module("a", nn.ReLU())
    before.add_module("b", nn.Tanh())
    before.add_module("c", nn.Sigmoid())
    after = nn.Sequential()
    after.add_module("b", nn.Tanh())
    after.add_module("c", nn.Sigmoid())
    after.add_module("a", nn.ReLU())

    difference = trace_of(before).diff(trace_of(after))

    assert [change.kind for change in difference.changes] == ["moved"]
    assert "1 call moved: a (ReLU)" in difference.summary()


def test_golden_text_parses_back_into_the_same_lines() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model.requires_grad_(False)
    trace = trace_of(model)

    header, lines = parse_golden(trace.render())

    assert lines == golden_lines(trace)
    assert header[0] == FORMAT_LINE
    assert lines[1].frozen


def test_parsing_skips_brackets_inside_quoted_strings() -> None:
    text = "<root>: M ('a) -> b', x=f32[2]) -> (f32[2], '(')\n"

    _, [line] = parse_golden(text)

    assert line.inputs == "('a) -> b', x=f32[2])"
    assert line.outputs == "(f32[2], '(')"


def test_a_hand_edited_line_still_shows_in_the_diff() -> None:
    golden = trace_of(chain(nn.ReLU)).render()

    difference = diff_golden(golden + "this is not a call line\n", golden)

    assert difference.count("removed") == 1
    assert "- this is not a call line" in difference.body()


def test_a_large_renamed_trace_pairs_every_call() -> None:
    # 3,000 calls whose paths all changed: structural pairing must still find every pair.
    before = trace_of(chain(*[nn.ReLU] * 1500))
    after_model = nn.Sequential(chain(*[nn.ReLU] * 1500))
    after = trace_forward(after_model, torch.randn(1, 4))

    difference = before.diff(after)

    # The old model is the wrapper's `0`: every old call, the old root included, pairs.
    assert difference.count("renamed") == 3001
    assert difference.count("inserted") == 1  # the new wrapper
    assert difference.count("nesting changed") == 3001
    assert difference.explained_counts() == {"wrapped": 1}
    assert difference.summary().splitlines() == [
        "3001 calls before, 3002 after: 1 wrap",
        "<root> (Sequential) wraps the old model, now 0 (3001 calls renamed under it)",
    ]


def swapped_activations() -> tuple[nn.Module, nn.Module]:
    """`Sequential(Linear, ReLU, Tanh)` and the same with the two activations swapped."""
    return (
        nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Tanh()),
        nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.ReLU()),
    )


class Flagged(nn.Module):
    """Passes a keyword flag to its inner module: the flag shows in the inner call's inputs."""

    def __init__(self, flag: bool) -> None:
        super().__init__()
        self.inner = Keyword()
        self.flag = flag

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, flag=self.flag)


class Keyword(nn.Module):
    def forward(self, x: torch.Tensor, flag: bool = True) -> torch.Tensor:
        return x


class Counted(nn.Module):
    """Returns a dict holding a tensor and a plain int."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        return {"y": x, "n": self.count}


def test_counting_a_kind_by_its_enum_member_or_its_text_agree() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(*TWENTY), batch=2))

    assert difference.count(ChangeKind.INPUT_CHANGED) == difference.count("input changed") == 41


def test_every_change_kind_is_a_change_kind_member() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(*TWENTY), batch=2))

    assert {type(change.kind) for change in difference.changes} == {ChangeKind}


def test_counting_a_misspelled_kind_is_an_error_listing_the_kinds() -> None:
    difference = trace_of(chain(nn.ReLU)).diff(trace_of(chain(nn.Tanh)))

    with pytest.raises(ValueError, match=r"unknown change kind 'renamd'.*'inserted', 'removed'"):
        difference.count("renamd")


def test_listing_a_misspelled_kind_is_an_error_too() -> None:
    difference = trace_of(chain(nn.ReLU)).diff(trace_of(chain(nn.Tanh)))

    with pytest.raises(ValueError, match=r"unknown change kind 'type_changed'"):
        difference.of_kind("type_changed")


def test_a_changed_keyword_flag_is_summarised_with_its_values() -> None:
    difference = trace_of(Flagged(True)).diff(trace_of(Flagged(False)))

    assert "inner (Keyword) input flag=True -> flag=False" in difference.summary()


def test_a_changed_int_in_a_dict_output_is_summarised_with_its_values() -> None:
    difference = trace_of(Counted(2)).diff(trace_of(Counted(3)))

    assert "<root> (Counted) output 'n': 2 -> 'n': 3" in difference.summary()


def test_a_shape_and_a_flag_changing_together_are_both_named() -> None:
    difference = trace_of(Flagged(True)).diff(trace_of(Flagged(False), batch=2))

    assert "inner (Keyword) input (1, 4) -> (2, 4) and flag=True -> flag=False" in (
        difference.summary()
    )


def test_swapped_layers_are_summarised_as_one_swap_naming_both_classes() -> None:
    before, after = swapped_activations()

    summary = trace_of(before).diff(trace_of(after)).summary().splitlines()

    assert summary == [
        "4 calls before, 4 after: 1 swap",
        "1 (ReLU) and 2 (Tanh) swapped, now 2 and 1",
    ]


def test_a_call_moved_under_the_same_name_says_where_it_went() -> None:
    before = nn.Sequential()
    for name, module in (("a", nn.ReLU()), ("b", nn.Tanh()), ("c", nn.Sigmoid())):
        before.add_module(name, module)
    after = nn.Sequential()
    for name, module in (("b", nn.Tanh()), ("c", nn.Sigmoid()), ("a", nn.ReLU())):
        after.add_module(name, module)

    summary = trace_of(before).diff(trace_of(after)).summary()

    assert "1 call moved: a (ReLU) now after c (Sigmoid)" in summary.splitlines()


def test_a_wrapped_model_pairs_its_old_root_with_the_wrapped_one() -> None:
    before = trace_of(chain(nn.ReLU))
    after = trace_forward(nn.Sequential(chain(nn.ReLU)), torch.randn(1, 4))

    difference = before.diff(after)

    assert [(change.old.name, change.new.name) for change in difference.of_kind("renamed")] == [
        ("<root>", "0"),
        ("0", "0.0"),
        ("1", "0.1"),
    ]
    assert difference.summary().splitlines()[1] == (
        "<root> (Sequential) wraps the old model, now 0 (3 calls renamed under it)"
    )


def test_a_module_that_gains_its_first_parameter_is_a_change() -> None:
    """Found reviewing 0.2.0: facts were not compared when a module gained its first tensor."""

    class Block(nn.Module):
        def __init__(self, scaled: bool) -> None:
            super().__init__()
            if scaled:
                self.scale = nn.Parameter(torch.ones(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    before = trace_forward(nn.Sequential(Block(False)), torch.ones(1, 2))
    after = trace_forward(nn.Sequential(Block(True)), torch.ones(1, 2))

    assert "added 0.scale (f32[2])" in before.diff(after).summary()


def test_untying_a_weight_is_named_without_phantom_tensors() -> None:
    """Found reviewing 0.2.0: tied names were not parsed whole, so untying added phantoms."""
    tied = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 5, bias=False))
    tied[1].weight = tied[0].weight
    untied = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 5, bias=False))

    summary = (
        trace_forward(tied, torch.zeros(1, 3, dtype=torch.long))
        .diff(trace_forward(untied, torch.zeros(1, 3, dtype=torch.long)))
        .summary()
    )

    assert "0.weight no longer tied to 1.weight" in summary
    assert "added" not in summary


def test_pairs_list_every_call_found_on_both_sides_in_old_order() -> None:
    before, after = swapped_activations()

    difference = trace_of(before).diff(trace_of(after))

    assert difference.pairs == [(0, 0), (1, 1), (2, 3), (3, 2)]


def test_pairs_follow_renamed_calls() -> None:
    before = trace_of(chain(nn.ReLU))
    after = trace_forward(nn.Sequential(chain(nn.ReLU)), torch.randn(1, 4))

    difference = before.diff(after)

    # The old root is the new `0`, inside the new wrapper root.
    assert difference.pairs == [(0, 1), (1, 2), (2, 3)]


def test_the_explanation_starts_the_calls_at_the_first_change() -> None:
    difference = trace_of(chain(*TWENTY)).diff(trace_of(chain(*TWENTY[:-1], nn.Tanh)))

    explanation = difference.explanation()

    assert explanation == [
        "41 calls before, 41 after: 1 call type changed",
        "type changed at 39: ReLU -> Tanh",
        "",
        "-   39: ReLU (f32[1,4]) -> f32[1,4]",
        "+   39: Tanh (f32[1,4]) -> f32[1,4]",
        "-     | settings: inplace=False",
    ]


def test_the_explanation_puts_header_changes_after_the_call_lines() -> None:
    difference = trace_of(chain(nn.ReLU)).diff(trace_of(chain(nn.ReLU, nn.ReLU)))

    explanation = difference.explanation()

    first_header = next(i for i, line in enumerate(explanation) if line.startswith(("- #", "+ #")))
    last_call = max(i for i, line in enumerate(explanation) if line.startswith(("-  ", "+  ")))
    assert last_call < first_header
    assert "- # calls: 3" in explanation[first_header:]


def test_render_joins_the_explanation() -> None:
    difference = trace_of(chain(nn.ReLU)).diff(trace_of(chain(nn.Tanh)))

    assert difference.render() == "\n".join(difference.explanation())


def test_diffing_a_trace_against_a_number_names_the_argument() -> None:
    trace = trace_of(chain(nn.ReLU))

    with pytest.raises(TypeError, match=r"diff_traces expected a trace as `new`, got int: 5"):
        diff_traces(trace, 5)  # type: ignore[arg-type]


def test_diffing_a_trace_against_text_points_at_diff_golden() -> None:
    trace = trace_of(chain(nn.ReLU))

    with pytest.raises(
        TypeError, match=r"Trace.diff expected a trace as `other`, got str: 'text'.*diff_golden"
    ):
        trace.diff("text")  # type: ignore[arg-type]


def test_diffing_golden_text_against_none_names_the_argument() -> None:
    text = trace_of(chain(nn.ReLU)).render()

    with pytest.raises(
        TypeError, match=r"diff_golden expected golden text as `old_text`, got NoneType: None"
    ):
        diff_golden(None, text)  # type: ignore[arg-type]


def test_a_diff_repr_is_its_summary() -> None:
    difference = trace_of(chain(nn.ReLU)).diff(trace_of(chain(nn.Tanh)))

    assert repr(difference) == (
        "<TraceDiff: 3 calls before, 3 after: 1 call type changed>\n"
        "  type changed at 1: ReLU -> Tanh\n"
        "  print(diff) shows the aligned calls"
    )


def test_an_empty_diff_repr_says_so() -> None:
    trace = trace_of(chain(nn.ReLU))

    assert repr(trace.diff(trace)) == "<TraceDiff: no differences>"


def test_a_diff_shows_in_a_notebook_as_escaped_text() -> None:
    difference = trace_of(chain(nn.ReLU)).diff(trace_of(chain(nn.Tanh)))

    html = difference._repr_html_()

    assert html.startswith('<pre class="fwdorder-diff">3 calls before, 3 after')
    assert "-   1: ReLU (f32[1,4]) -&gt; f32[1,4]" in html
    assert html.endswith("</pre>")


def test_a_one_call_model_is_counted_in_the_singular() -> None:
    # Before: "1 calls before, 1 after" and "<Trace of Linear: 1 calls>".
    torch.manual_seed(0)
    before = trace_forward(nn.Linear(4, 8), torch.randn(1, 4))
    after = trace_forward(nn.Linear(4, 9), torch.randn(1, 4))
    assert before.headline() == "<Trace of Linear: 1 call>"
    assert before.diff(after).summary().startswith("1 call before, 1 after: ")


def test_a_diff_builds_each_call_tree_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The alignment's trees serve the summary and its counts too, which built the new one
    again each."""
    from pytest_fwdorder.diff import (
        call_tree,
        classification,
        consequences,
        diffing,
        explanation,
        tree_alignment,
    )

    built: list[int] = []

    def counted(lines: list) -> call_tree.CallTree:
        built.append(len(lines))
        return call_tree.build_call_tree(lines)

    for module in (diffing, tree_alignment, classification, consequences, explanation):
        monkeypatch.setattr(module, "build_call_tree", counted, raising=False)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    before = trace_forward(model, torch.randn(1, 4))
    model[1] = nn.GELU()
    after = trace_forward(model, torch.randn(2, 4))

    difference = diff_traces(before, after)
    summary = difference.summary()
    counts = difference.explained_counts()

    # The oracle that the counter sees every tree: one each for the old and new calls.
    assert built == [4, 4], built
    assert "type changed" in summary, summary
    assert counts["type changed"] == 1, counts


def _count_alignments(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each alignment the diff makes from now on, as how many anchors started it."""
    from pytest_fwdorder.diff import diffing

    aligned: list[int] = []
    align_trees = diffing.align_trees

    def counted(old_tree: object, new_tree: object, **options: object) -> object:
        aligned.append(len(options.get("anchors", ())))
        return align_trees(old_tree, new_tree, **options)

    monkeypatch.setattr(diffing, "align_trees", counted)
    return aligned


class Stage(nn.Sequential):
    """A stage's own class."""


@pytest.mark.parametrize(
    ("refactor", "readings"),
    [
        ("one layer's class changed, every call keeping its path", 1),
        ("a stage made a subclass as its first layer moves out", 2),
    ],
)
def test_a_diff_is_read_again_only_where_a_call_that_kept_its_path_paired_otherwise(
    monkeypatch: pytest.MonkeyPatch, refactor: str, readings: int
) -> None:
    """The second reading (diff/readings.py) costs a second alignment: a diff where the calls
    that kept their paths pair with each other (one layer's class changed, a diff of 100,001
    calls among them) is read once."""

    aligned = _count_alignments(monkeypatch)
    torch.manual_seed(0)
    old = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Tanh()))
    if readings == 1:
        new = nn.Sequential(old[0], nn.Sequential(old[1][0], nn.GELU(), old[1][2]))
    else:
        new = nn.Sequential(nn.Sequential(old[1][0], old[0]), Stage(old[1][1], old[1][2]))
    inputs = torch.randn(2, 4)

    difference = trace_forward(old, inputs).diff(trace_forward(new, inputs))

    # The oracle that a second reading is counted: its anchors, the calls with nested calls
    # that kept their paths (the model's own and `1`, a Sequential now a Stage).
    assert aligned == [0, 2][:readings], (aligned, difference.summary())
    assert difference, difference.summary()


class ActivationsInAList(nn.Module):
    """Its activations kept in a plain list: unregistered, named `acts[0]`, `acts[1]`, ..."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.acts = [nn.ReLU() for _ in range(count)]
        self.out = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for act in self.acts:
            x = act(x)
        return self.out(x)


def test_a_look_alike_held_in_a_plain_list_is_hedged_as_a_numbered_one() -> None:
    # `acts[2]`, like `acts.2`, says where a call is, not which: the trace cannot tell
    # which of three look-alikes went, so the summary names them all.
    inputs = torch.randn(1, 4)
    before = trace_forward(ActivationsInAList(3), inputs)
    after = trace_forward(ActivationsInAList(2), inputs)
    # The oracle: removing the middle activation or the last one records the same trace.
    middle_removed, last_removed = ActivationsInAList(3), ActivationsInAList(3)
    del middle_removed.acts[1], last_removed.acts[2]
    assert trace_forward(middle_removed, inputs).render() == after.render()
    assert trace_forward(last_removed, inputs).render() == after.render()
    # And it can fail: a model with another head records another trace.
    head_removed = ActivationsInAList(3)
    head_removed.out = nn.Identity()
    assert trace_forward(head_removed, inputs).render() != after.render()

    summary = before.diff(after).summary().splitlines()

    assert summary[1] == (
        "1 call removed: one of acts[0], acts[1], acts[2] (ReLU look-alikes) after inp (Linear)"
    )


class DropoutAtOneEnd(nn.Module):
    """A dropout named for where it runs: `drop_in` before the layers, or `drop_out` after."""

    def __init__(self, at_input: bool) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)
        self.at_input = at_input
        if at_input:
            self.drop_in = nn.Dropout(0.1)
        else:
            self.drop_out = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.at_input:
            x = self.drop_in(x)
        x = self.fc2(torch.relu(self.fc1(x)))
        return x if self.at_input else self.drop_out(x)


def test_a_named_layer_gone_and_another_come_are_not_one_moved() -> None:
    # A name tells a call apart (as `attn.v` beside `attn.o`): `drop_in` is gone and
    # `drop_out` came. Only a numbered name, which says where a call is, pairs as moved.
    inputs = torch.randn(1, 4)
    old_model, new_model = DropoutAtOneEnd(True).eval(), DropoutAtOneEnd(False).eval()
    # The oracle: torch's own lookup of each name in the other model.
    assert not hasattr(new_model, "drop_in")
    assert not hasattr(old_model, "drop_out")
    assert hasattr(old_model, "drop_in")  # it can fail

    summary = trace_forward(old_model, inputs).diff(trace_forward(new_model, inputs)).summary()

    assert summary.splitlines() == [
        "4 calls before, 4 after: 1 call inserted, 1 call removed",
        "1 call inserted: drop_out (Dropout) after fc2 (Linear)",
        "1 call removed: drop_in (Dropout) at the start of <root> (DropoutAtOneEnd)",
    ]


@pytest.mark.parametrize(("most_calls", "readings"), [(None, 2), (1, 1)])
def test_a_diff_reads_flattened_stages_again_within_its_budget_of_calls(
    monkeypatch: pytest.MonkeyPatch, most_calls: int | None, readings: int
) -> None:
    """Two stages flattened beside moves, one in each half of a model, are read again in
    two rounds, each with its calls paired in its parent (diff/stage_readings.py). Each
    reading aligns the whole diff again: a diff aligns at most `_MOST_CALLS_READ` calls
    again, and reads again once whatever its size."""
    from pytest_fwdorder.diff import diffing

    aligned = _count_alignments(monkeypatch)
    if most_calls is not None:
        monkeypatch.setattr(diffing, "_MOST_CALLS_READ", most_calls)
    halves = [a_stage_flattened_as_a_layer_moves() for _ in range(2)]
    old = nn.Sequential(*(old for old, _ in halves))
    new = nn.Sequential(*(new for _, new in halves))
    inputs = torch.randn(2, 8)

    difference = trace_forward(old, inputs).diff(trace_forward(new, inputs))
    summary = difference.summary()

    first_half = "0.1 (Sequential) unwrapped: the old 0.1.0, 0.1.1, 0.1.2 are now 0.1, 0.2, 0.3"
    second_half = "1.1 (Sequential) unwrapped: the old 1.1.0, 1.1.1, 1.1.2 are now 1.1, 1.2, 1.3"
    assert first_half in summary, summary
    assert (second_half in summary) is (readings == 2), summary
    # The oracle that readings are counted: the first has no anchors. The first round reads
    # each half's stage as flattened (5 anchors) and its inner stage as wrapped (4), and
    # keeps the first half's; the second round reads the second half's with those (10).
    assert aligned == ([0, 5, 4, 5, 4, 10] if readings == 2 else [0, 5]), aligned


def test_a_diff_with_one_reading_to_spare_reads_the_model_wrapped_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six look-alike stages, the model wrapped whole as its fourth stage is flattened: the
    first reading leaves stages to read as flattened, and the model as wrapped. A large diff
    reads again only as often as its budget allows (here once): the model's reading comes
    first, rare and one at most, or a diff of many stages never tries it."""
    from pytest_fwdorder.diff import diffing

    aligned = _count_alignments(monkeypatch)
    monkeypatch.setattr(diffing, "_MOST_CALLS_READ", 1)
    torch.manual_seed(0)
    old = nn.Sequential(
        *(nn.Sequential(*(nn.Sequential(nn.Linear(8, 8)) for _ in range(3))) for _ in range(6))
    )
    stages = list(copy.deepcopy(old))
    stages[3:4] = list(stages[3])
    inputs = torch.randn(2, 8)

    difference = trace_forward(old, inputs).diff(
        trace_forward(nn.Sequential(nn.Sequential(*stages)), inputs)
    )

    summary = difference.summary()
    # The model's reading alone finds the flattened stage: each call is counted once, under
    # the innermost change that holds it.
    assert "<root> (Sequential) wraps the old model, now 0 (36 calls renamed under it)" in (
        summary
    ), summary
    assert "3 (Sequential) unwrapped: the old 3.0, 3.1, 3.2 are now 0.3, 0.4, 0.5" in summary
    assert difference.explained_counts() == {"wrapped": 1, "unwrapped": 1}, summary
    assert aligned == [0, 1], aligned  # the first reading, then the model's: one anchor


@pytest.mark.parametrize("flattened", [(0,), (3,), (5,), (0, 1), (1, 4), (2, 3), (0, 5), (4, 5)])
def test_look_alikes_more_on_one_side_leave_out_the_ones_where_the_gaps_are(
    flattened: tuple[int, ...],
) -> None:
    """Six look-alike stages, one or two flattened where they ran: those left out are the
    ones whose absence explains where the others now run among their siblings, on either
    side."""
    from pytest_fwdorder.diff.look_alike_order import least_displaced

    old_tree, new_tree, old_stages, new_stages = _stage_trees([0, 1, 2, 3, 4, 5], flattened)
    assert (len(old_stages), len(new_stages)) == (6, 6 - len(flattened))

    pairs = least_displaced(old_stages, new_stages, old_tree, new_tree)
    mirrored = least_displaced(new_stages, old_stages, new_tree, old_tree)

    kept = [stage for at, stage in enumerate(old_stages) if at not in flattened]
    assert pairs == list(zip(kept, new_stages, strict=True))
    assert mirrored == [(new, old) for old, new in pairs]


def test_pairing_in_order_leaves_out_where_the_shift_changes_and_the_last_on_a_tie() -> None:
    """Places among siblings: the pairs' shift (shorter place less longer place) changes
    only where a call is left out; on a tie the first ones pair, as pairing in order does."""
    from pytest_fwdorder.diff.look_alike_order import paired_in_order

    # Stages 1 and 4 of six flattened into two layers each: 8 siblings, shifts 0, 1, 1, 2.
    assert paired_in_order([0, 1, 2, 3, 4, 5], [0, 3, 4, 7], end_shift=2) == [0, 2, 3, 5]
    # Stage 0 flattened into three layers: every stage left moved by two.
    assert paired_in_order([0, 1, 2, 3], [3, 4, 5], end_shift=2) == [1, 2, 3]
    # A stage removed outright: leaving out any one moves none of the others. The last goes.
    assert paired_in_order([0, 1, 2, 3], [0, 1, 2], end_shift=-1) == [0, 1, 2]
    # A stage with a layer on either side, as near one as the other: a tie, the first pairs.
    assert paired_in_order([0, 2], [1], end_shift=0) == [0]
    # Too many to weigh (a thousand look-alikes, half left out): none is worked out.
    assert paired_in_order(list(range(1000)), list(range(0, 1000, 2)), end_shift=-500) is None
    assert paired_in_order(list(range(100)), list(range(0, 100, 2)), end_shift=-50) is not None


def _stage_trees(
    kept: list[int], flattened: tuple[int, ...], extra_layer: bool = False, wrapped: bool = False
) -> tuple[CallTree, CallTree, list[int], list[int]]:
    """Six look-alike stages before; after, the stages in `kept` (those in `flattened`
    flattened where they ran), with a `Tanh` after the first with `extra_layer`, the model
    wrapped whole with `wrapped`."""
    from pytest_fwdorder.diff.call_tree import build_call_tree

    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(6)))
    layers: list[nn.Module] = []
    for at, stage in enumerate(copy.deepcopy(model)):
        if at in kept:
            layers += list(stage) if at in flattened else [stage]
        if extra_layer and at == 0:
            layers.append(nn.Tanh())
    inputs = torch.randn(1, 4)
    old_tree = build_call_tree(golden_lines(trace_forward(model, inputs)))
    new_model = nn.Sequential(*layers)
    new_tree = build_call_tree(
        golden_lines(trace_forward(nn.Sequential(new_model) if wrapped else new_model, inputs))
    )
    new_parent = new_tree.roots[0]
    if wrapped:
        new_parent = new_tree.children[new_parent][0]
    old_stages = old_tree.children[old_tree.roots[0]]
    new_stages = [j for j in new_tree.children[new_parent] if new_tree.children[j]]
    return old_tree, new_tree, old_stages, new_stages


def test_pairs_by_gaps_replace_pairs_by_name_that_leave_places_unexplained() -> None:
    """Stages 0 and 5 flattened: by name the old 2..5 pair with the new 2..5, and the stages
    after the first flattened one jump without a call left out. The gaps pair 1..4."""
    from pytest_fwdorder.diff.look_alike_order import pairs_by_gaps

    old_tree, new_tree, olds, news = _stage_trees([0, 1, 2, 3, 4, 5], (0, 5))
    by_name = list(zip(olds[2:], news, strict=True))

    assert pairs_by_gaps(by_name, olds, news, old_tree, new_tree) == list(
        zip(olds[1:5], news, strict=True)
    )
    # Given pairs that already explain every place, there is nothing to replace.
    assert (
        pairs_by_gaps(list(zip(olds[1:5], news, strict=True)), olds, news, old_tree, new_tree) == []
    )


def test_pairs_by_gaps_keep_names_that_explain_and_pair_none_that_gaps_cannot() -> None:
    from pytest_fwdorder.diff.look_alike_order import pairs_by_gaps

    # Stage 2 deleted: any one left out explains the others' places as well; names stand.
    old_tree, new_tree, olds, news = _stage_trees([0, 1, 3, 4, 5], ())
    by_name = list(zip(olds[:5], news, strict=True))
    assert pairs_by_gaps(by_name, olds, news, old_tree, new_tree) == []
    # A layer inserted after stage 0 and stage 5 flattened: no choice of the one left out
    # explains every place (the layer moves those after it), so the gaps pair nothing.
    old_tree, new_tree, olds, news = _stage_trees([0, 1, 2, 3, 4, 5], (5,), extra_layer=True)
    assert len(news) == 5
    assert pairs_by_gaps([], olds, news, old_tree, new_tree) == []
    # Under parents of other paths (the new stages inside a wrapper, `0`): none.
    old_tree, new_tree, olds, news = _stage_trees([0, 1, 2, 3, 4, 5], (0, 5), wrapped=True)
    assert new_tree.lines[new_tree.parents[news[0]]].path == "0"
    assert pairs_by_gaps([], olds, news, old_tree, new_tree) == []


def test_look_alikes_one_more_on_one_side_that_nothing_tells_apart_leave_out_the_last() -> None:
    """Two look-alike stages with a layer between them, one stage where that layer was: its
    place is as near one as the other, and the last is left out, as pairing in order does."""
    from pytest_fwdorder.diff.call_tree import build_call_tree
    from pytest_fwdorder.diff.look_alike_order import least_displaced

    def stage() -> nn.Module:
        return nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    inputs = torch.randn(1, 4)
    old_tree = build_call_tree(
        golden_lines(trace_forward(nn.Sequential(stage(), nn.Tanh(), stage()), inputs))
    )
    new_tree = build_call_tree(
        golden_lines(trace_forward(nn.Sequential(nn.Tanh(), stage(), nn.Tanh()), inputs))
    )
    old_stages = [i for i in old_tree.children[old_tree.roots[0]] if old_tree.children[i]]
    new_stages = [j for j in new_tree.children[new_tree.roots[0]] if new_tree.children[j]]

    assert least_displaced(old_stages, new_stages, old_tree, new_tree) == [
        (old_stages[0], new_stages[0])
    ]


def test_stages_the_first_reading_reads_as_flattened_are_not_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fifty stages `S(Linear, ReLU)` flattened into the model read as fifty unwraps at the
    first reading: reading any of them again as flattened costs an alignment of the whole
    diff and finds nothing new, so the diff is aligned once."""

    aligned = _count_alignments(monkeypatch)
    stages = [nn.Sequential(nn.Linear(2, 2), nn.ReLU()) for _ in range(50)]
    inputs = torch.randn(1, 2)
    before = trace_forward(nn.Sequential(*stages), inputs)
    after = trace_forward(nn.Sequential(*(layer for stage in stages for layer in stage)), inputs)

    difference = before.diff(after)

    assert difference.explained_counts() == {"unwrapped": 50}, difference.summary()
    # The oracle that alignments are counted: the first, without anchors.
    assert aligned == [0], aligned


def test_a_named_twin_is_a_call_of_a_path_called_once_on_each_side() -> None:
    """A stage or wrap reading never parts a call from the new call of its path and calls
    (diff/stage_readings.py), but a module called twice runs two calls under one path,
    and either may be the other's twin: only paths called once on each side count, and
    never a numbered one (numbers move when a stage is flattened)."""
    from pytest_fwdorder.diff.call_tree import build_call_tree
    from pytest_fwdorder.diff.stage_readings import _named_twins

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head, self.act = nn.Linear(4, 4), nn.ReLU()

        def forward(self, inputs: torch.Tensor) -> torch.Tensor:
            return self.act(self.head(self.act(inputs)))

    model = nn.Sequential(Twice(), nn.Linear(4, 4))
    golden = trace_forward(model, torch.randn(1, 4)).render()
    lines = parse_golden(golden)[1]
    tree = build_call_tree(lines)

    twins = _named_twins((tree, tree))

    paths = {lines[old].path: lines[new].path for old, new in twins.items()}
    # The oracle that twins are found at all: the model's own call and the Linear called
    # once, named `head`; `act`, called twice, is neither.
    assert paths == {"<root>": "<root>", "0.head": "0.head"}, paths
