"""How a model initializes itself (`initialization=True`): the steps, the draws, the replay."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torchvision
from torch import nn

from pytest_fwdorder import record, trace_forward
from pytest_fwdorder.calls.facet_records import InitializationRecords
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.facets.initialization import INITIALIZATION, WrittenStep
from pytest_fwdorder.golden.format import header_sections
from pytest_fwdorder.golden.parse import parse_golden


class Built(nn.Module):
    """A model whose only point is how it initializes itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def steps_of(text: str) -> list[str]:
    """The step lines of a golden's initialization section, as text (without `#   `)."""
    found = header_sections(parse_golden(text)[0]).get("initialization")
    assert found is not None
    return found


def replay_rebuilds(builder: Callable[[], nn.Module], x: torch.Tensor) -> None:
    """The oracle: replaying the recorded steps with the seed rebuilds every tensor bitwise."""
    trace = trace_forward(builder, x, initialization=True)
    records = trace.initialization
    assert records is not None
    torch.manual_seed(0)
    model = builder()
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    # The replay needs each tensor's starting storage: shape and dtype from the model.
    rebuilt = {name: torch.empty_like(tensor) for name, tensor in state.items()}
    replay_state = replayed_into(records, rebuilt)
    initialized = {step.target.partition("[offset=")[0] for step in records.steps}
    differing = [
        name
        for name in sorted(initialized)
        if not name.startswith("(") and not torch.equal(replay_state[name], state[name].detach())
    ]
    assert differing == []
    assert records.draws > 0


def replayed_into(
    records: InitializationRecords, rebuilt: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    for step in records.steps:
        for function, arguments, keywords, view in step.replay:
            assert callable(function)
            if arguments[:1] != (None,):
                function(*arguments, **keywords)
                continue
            if step.target.startswith("(temporary "):
                sizes = step.target.partition("[")[2].partition("]")[0].split(",")
                target = torch.empty([int(size) for size in sizes if size])
            else:
                target = rebuilt[step.target.partition("[offset=")[0]]
                if view is not None:
                    offset, shape, strides = view
                    target = target.as_strided(shape, strides, offset)
            with torch.no_grad():
                function(target, *arguments[1:], **keywords)
    return rebuilt


def test_each_parameter_and_buffer_step_is_written_in_build_order() -> None:
    text = trace_forward(
        lambda: nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)),
        torch.ones(2, 4),
        initialization=True,
    ).render()
    assert "# initialization (7 steps, 40 random draws, seed 0):" in text
    assert steps_of(text) == [
        "0.weight kaiming_uniform_(a=2.236) 32 draws",
        "0.bias uniform_(a=-0.5, b=0.5) 8 draws",
        "1.running_mean zero_()",
        "1.running_var fill_(1)",
        "1.num_batches_tracked zero_()",
        "1.weight ones_()",
        "1.bias zeros_()",
    ]


def test_an_init_function_is_written_with_the_arguments_given_away_from_their_defaults() -> None:
    class Net(Built):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, bias=False)
            nn.init.kaiming_normal_(self.conv.weight, mode="fan_out", nonlinearity="relu")

    text = trace_forward(lambda: Net(), torch.ones(1, 3, 5, 5), initialization=True).render()
    # Conv2d's own reset_parameters first, then the model's: one step, since both touch
    # the same tensor one after the other.
    assert steps_of(text) == [
        "conv.weight kaiming_uniform_(a=2.236) kaiming_normal_(mode='fan_out', "
        "nonlinearity='relu') 216 draws"
    ]


def test_operations_made_one_after_the_other_on_one_tensor_make_one_step() -> None:
    class Net(Built):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.empty(3))
            with torch.no_grad():
                self.scale.normal_(0, 0.02).mul_(0.5)

    text = trace_forward(lambda: Net(), torch.ones(3), initialization=True).render()
    assert steps_of(text) == ["scale normal_(0, 0.02) mul_(0.5) 3 draws"]


def test_a_tensor_wrapped_in_a_parameter_after_it_was_drawn_is_named() -> None:
    class Net(Built):
        def __init__(self) -> None:
            super().__init__()
            self.table = nn.Parameter(torch.randn(4, 2))

    assert steps_of(trace_forward(lambda: Net(), torch.ones(1), initialization=True).render()) == [
        "table randn(4, 2) 8 draws"
    ]


def test_draws_into_a_tensor_the_model_does_not_keep_are_listed_as_temporary() -> None:
    class Net(Built):
        def __init__(self) -> None:
            super().__init__()
            noise = torch.rand(5)  # moves the stream every later step draws from
            self.bias = nn.Parameter(torch.zeros(2) + noise[:2].sum() * 0)

    steps = steps_of(trace_forward(lambda: Net(), torch.ones(1), initialization=True).render())
    assert steps == ["(temporary f32[5]) rand(5) 5 draws"]


def test_a_row_zeroed_in_an_embedding_is_named_with_its_part() -> None:
    text = trace_forward(
        lambda: nn.Embedding(4, 3, padding_idx=0),
        torch.zeros(1, dtype=torch.long),
        initialization=True,
    ).render()
    assert steps_of(text) == [
        "weight normal_() 12 draws",
        "weight[offset=0,shape=3] fill_(0)",
    ]


def test_meta_and_cpu_builds_record_the_same_steps_and_draws() -> None:
    def build() -> nn.Module:
        return torchvision.models.resnet18(num_classes=10)

    x = torch.randn(2, 3, 32, 32)
    on_cpu = steps_of(trace_forward(build, x, initialization=True).render())
    on_meta = steps_of(trace_forward(build, x, initialization=True, device="meta").render())
    assert on_cpu == on_meta
    assert len(on_cpu) == 182


def test_a_built_model_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"initialization=True needs the build to run under watch"):
        trace_forward(nn.Linear(2, 2), torch.ones(1, 2), initialization=True)


def test_record_refuses_initialization_and_says_why() -> None:
    recording = record(nn.Linear(2, 2), initialization=True)
    with pytest.raises(ValueError, match=r"record\(initialization=True\) cannot watch the build"):
        recording.__enter__()


def test_no_profile_function_or_mode_is_left_behind() -> None:
    import sys

    before = sys.getprofile()
    trace_forward(lambda: nn.Linear(2, 2), torch.ones(1, 2), initialization=True)
    assert sys.getprofile() is before
    assert not torch.overrides._get_current_function_mode_stack()


@pytest.mark.parametrize(
    "builder",
    [
        lambda: torchvision.models.resnet18(num_classes=10),
        lambda: torchvision.models.vgg11(num_classes=10),
        lambda: torchvision.models.efficientnet_b0(num_classes=10),
        lambda: torchvision.models.vit_b_16(image_size=32, num_classes=10),
    ],
    ids=["resnet18", "vgg11", "efficientnet_b0", "vit_b_16"],
)
def test_replaying_the_steps_with_the_seed_rebuilds_every_tensor_bitwise(
    builder: Callable[[], nn.Module],
) -> None:
    replay_rebuilds(builder, torch.randn(2, 3, 32, 32))


def test_an_init_call_moved_ahead_fails_and_names_both_tensors() -> None:
    class Before(Built):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.Linear(4, 4)
            self.second = nn.Linear(4, 4)
            nn.init.trunc_normal_(self.first.weight, std=0.02)
            nn.init.trunc_normal_(self.second.weight, std=0.02)

    class After(Before):
        def __init__(self) -> None:
            nn.Module.__init__(self)
            self.first = nn.Linear(4, 4)
            self.second = nn.Linear(4, 4)
            nn.init.trunc_normal_(self.second.weight, std=0.02)
            nn.init.trunc_normal_(self.first.weight, std=0.02)

    x = torch.ones(1, 4)
    before = trace_forward(lambda: Before(), x, initialization=True).render()
    after = (
        trace_forward(lambda: After(), x, initialization=True).render().replace("After", "Before")
    )
    summary = diff_golden(before, after).summary()
    assert summary.splitlines()[0] == "1 call before, 1 after: initialization changed"
    assert summary.splitlines()[1] == (
        "initialization order changed: second.weight now before first.weight; every later "
        "draw shifted (2 of 6 steps differ from step 5 on)"
    )


def linear_initialized_with(std: float) -> Callable[[], nn.Module]:
    """A builder of a Linear whose weight is drawn again with `normal_(std=std)`."""

    def build() -> nn.Module:
        model = nn.Linear(4, 4)
        nn.init.normal_(model.weight, std=std)
        return model

    return build


def test_a_changed_init_argument_names_the_tensor() -> None:
    x = torch.ones(1, 4)
    before = trace_forward(linear_initialized_with(0.02), x, initialization=True).render()
    after = trace_forward(linear_initialized_with(0.01), x, initialization=True).render()
    assert (
        "initialization of weight changed: normal_(std=0.02) -> normal_(std=0.01); every "
        "later draw shifted" in diff_golden(before, after).summary()
    )


def test_a_golden_without_the_option_has_no_initialization_section() -> None:
    assert (
        "# initialization" not in trace_forward(lambda: nn.Linear(2, 2), torch.ones(1, 2)).render()
    )


def test_the_marker_turns_initialization_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_initialization_marker="""
        import pytest, torch
        from torch import nn

        @pytest.mark.fwdorder(initialization=True)
        def test_steps(forward_trace):
            trace = forward_trace(lambda: nn.Linear(4, 2), torch.randn(3, 4))
            assert trace.initialization.draws == 10
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


@pytest.mark.transformers
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_a_transformers_models_init_weights_replays_bitwise(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers initializes in `_init_weights`, called for each module after the build:
    # `.data.normal_(std=initializer_range)`, `zero_()`, a padding row zeroed.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    configs = {
        "bert": lambda: transformers.BertModel(
            transformers.BertConfig(
                vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=32, max_position_embeddings=32, pad_token_id=0,
            )
        ),
        "gpt2": lambda: transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2)
        ),
    }  # fmt: skip
    replay_rebuilds(configs[name], (torch.arange(8) % 60 + 2).unsqueeze(0))


def test_assert_same_structure_compares_initialization_only_when_asked() -> None:
    from pytest_fwdorder import StructureMismatchError, assert_same_structure

    x = torch.ones(1, 4)
    before = trace_forward(linear_initialized_with(0.02), x, initialization=True)
    after = trace_forward(linear_initialized_with(0.01), x, initialization=True)
    assert_same_structure(before, after)
    with pytest.raises(StructureMismatchError, match=r"initialization of weight changed"):
        assert_same_structure(before, after, compare=("initialization",))


def test_a_golden_reads_back_into_the_steps_the_trace_recorded() -> None:
    """The oracle: the trace's own records, each step's operations joined as written."""

    class Net(Built):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 8)
            self.table = nn.Embedding(5, 3, padding_idx=0)

    trace = trace_forward(lambda: Net(), torch.zeros(2, 4), initialization=True)
    records = trace.initialization
    assert records is not None

    read = INITIALIZATION.read_header(parse_golden(trace.render())[0])

    assert read == tuple(
        WrittenStep(step.target, " ".join(step.operations), step.draws) for step in records.steps
    )
    assert read is not None
    assert len(read) == 4
    assert read[2] == WrittenStep("table.weight", "normal_()", 15)


def test_a_golden_without_the_section_reads_back_as_none() -> None:
    text = trace_forward(lambda: nn.Linear(2, 2), torch.ones(1, 2)).render()

    assert INITIALIZATION.read_header(parse_golden(text)[0]) is None
