"""Aligning and explaining differences between traces, and the golden format round trip."""

from __future__ import annotations

import torch
from torch import nn

from pytest_fwdorder import diff_golden, trace_forward
from pytest_fwdorder.render import golden_lines, parse_golden


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

    assert difference.summary().splitlines()[1] == "type changed at 1 call: ReLU -> Tanh"
    body = difference.body()
    assert body[0] == "  ... 38 unchanged calls ..."
    assert body[-2:] == [
        "-   39: ReLU (f32[1,4]) -> f32[1,4]",
        "+   39: Tanh (f32[1,4]) -> f32[1,4]",
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
    assert header[0] == "# pytest-fwdorder trace (format 1)"
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

    assert difference.count("renamed") == 3000
    assert difference.count("inserted") == 1  # the new wrapper
    assert difference.count("nesting changed") == 3000
