"""The `fold` option, and `[step N]` marks: views of a trace for big models and for loops."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from pytest_fwdorder import FwdOrderWarning, TraceOptions, record, trace_forward
from pytest_fwdorder.cli.main import main

BACKBONE = ("layer1", "layer2", "layer3", "layer4")


@pytest.fixture(scope="module")
def resnet50_folded() -> str:
    model = torchvision.models.resnet50().eval()
    return trace_forward(model, torch.zeros(1, 3, 224, 224), device="meta", fold=BACKBONE).render()


def test_folding_the_backbone_shows_each_stage_in_one_line(resnet50_folded: str) -> None:
    body = [line for line in resnet50_folded.splitlines() if line.startswith("  layer")]

    assert body == [
        "  layer1: Sequential (f32[1,64,56,56]) -> f32[1,256,56,56] [+33 calls folded]",
        "  layer2: Sequential (f32[1,256,56,56]) -> f32[1,512,28,28] [+43 calls folded]",
        "  layer3: Sequential (f32[1,512,28,28]) -> f32[1,1024,14,14] [+63 calls folded]",
        "  layer4: Sequential (f32[1,1024,14,14]) -> f32[1,2048,7,7] [+33 calls folded]",
    ]


def test_a_folded_golden_still_counts_every_call(resnet50_folded: str) -> None:
    assert "# calls: 183" in resnet50_folded.splitlines()


def test_a_folded_golden_names_what_was_folded(resnet50_folded: str) -> None:
    assert "# folded: layer1, layer2, layer3, layer4" in resnet50_folded.splitlines()


def test_folding_by_type_folds_every_call_of_that_type() -> None:
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.Sequential(nn.ReLU()))

    text = trace_forward(model, torch.zeros(1, 2), fold=("Sequential",)).render()

    assert text.splitlines()[-1] == "<root>: Sequential (f32[1,2]) -> f32[1,2] [+5 calls folded]"


def test_without_fold_the_golden_is_unchanged() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    assert (
        trace_forward(model, torch.zeros(1, 2), fold=()).render()
        == trace_forward(model, torch.zeros(1, 2)).render()
    )


def test_fold_is_a_trace_option_of_the_fixture(forward_trace: object) -> None:
    model = nn.Sequential(nn.Sequential(nn.ReLU()), nn.ReLU())

    trace = forward_trace(model, torch.zeros(1), fold="0")  # type: ignore[operator]

    assert "  0: Sequential (f32[1]) -> f32[1] [+1 call folded]" in trace.render()


def test_fold_refuses_a_value_that_names_nothing() -> None:
    with pytest.raises(TypeError, match=r"fold must name module paths or types, got 3"):
        TraceOptions(fold=3)  # type: ignore[arg-type]


def test_the_marker_and_ini_option_fold(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_fold = 0\n")
    pytester.makepyfile(
        test_fold_options="""
        import pytest
        import torch
        from torch import nn

        def model():
            return nn.Sequential(nn.Sequential(nn.ReLU()), nn.Sequential(nn.ReLU()))

        def test_ini(forward_trace):
            text = forward_trace(model(), torch.zeros(1)).render()
            assert "  0: Sequential (f32[1]) -> f32[1] [+1 call folded]" in text.splitlines()

        @pytest.mark.fwdorder(fold=("1",))
        def test_marker(forward_trace):
            text = forward_trace(model(), torch.zeros(1)).render()
            assert text.endswith("  1: Sequential (f32[1]) -> f32[1] [+1 call folded]\\n")
        """
    )

    pytester.runpytest().assert_outcomes(passed=2)


def test_the_command_line_folds(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        [
            "show", "torchvision.models:resnet18", "--input", "1x3x64x64", "--device", "meta",
            "--fold", "layer1,layer2", "--fold", "layer3", "--fold", "layer4",
        ]
    )  # fmt: skip

    assert status == 0
    assert "  layer4: Sequential (f32[1,256,4,4]) -> f32[1,512,2,2] [+17 calls folded]" in (
        capsys.readouterr().out.splitlines()
    )


def test_several_outermost_calls_are_marked_as_steps() -> None:
    model = nn.Linear(2, 2)

    with record(model) as trace:
        model(torch.zeros(1, 2))
        model(torch.zeros(3, 2))

    assert [line for line in trace.render().splitlines() if line.startswith("<root>")] == [
        "<root>: Linear #1 [step 1] (f32[1,2]) -> f32[1,2]",
        "<root>: Linear #2 [step 2] (f32[3,2]) -> f32[3,2]",
    ]


def test_one_outermost_call_has_no_step_mark() -> None:
    model = nn.Linear(2, 2)

    with record(model) as trace:
        model(torch.zeros(1, 2))

    assert "[step" not in trace.render()


def test_steps_count_outermost_calls_of_different_modules() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    with record(model) as trace:
        model[0](torch.zeros(1, 2))
        model(torch.zeros(1, 2))

    assert [line for line in trace.render().splitlines() if "[step" in line] == [
        "0: Linear #1 [step 1] (f32[1,2]) -> f32[1,2]",
        "<root>: Sequential [step 2] (f32[1,2]) -> f32[1,2]",
    ]


def test_a_fold_name_that_matches_no_call_warns_with_close_matches() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    with pytest.warns(FwdOrderWarning, match=r"fold names no called module.*'Relu'.*ReLU"):
        trace_forward(model, torch.ones(1, 2), fold=("Relu",))
