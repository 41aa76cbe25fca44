"""The odd block out and coverage (issue 36, items 2 and 3).

The oracle is the model itself: which of its layers hold the adapter class (`isinstance`),
which linears a quantization converted; each test proves the oracle can tell the cases apart.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from adapters import Decoder, Linear, add_adapters
from torch import nn

from pytest_fwdorder import CoverageError, assert_coverage, trace_forward
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.golden.format import header_sections, odd_block_items
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.report.coverage_table import class_matches, golden_coverage, path_matches

QV = r"layers\.\d+\.self_attn\.[qv]_proj"
QV_PATTERN = "layers.*.self_attn.[qv]_proj"


def tokens() -> torch.Tensor:
    return torch.randint(0, 32, (1, 5), generator=torch.Generator().manual_seed(0))


def unadapted_layers(model: Decoder) -> list[int]:
    """The oracle: the layers whose q_proj or v_proj is not the adapter class."""
    return [
        index
        for index, layer in enumerate(model.layers)
        if not isinstance(layer.self_attn.q_proj, Linear)
        or not isinstance(layer.self_attn.v_proj, Linear)
    ]


def section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = next((n for n, line in enumerate(lines) if line.startswith(f"# {title} (")), None)
    if start is None:
        return []
    return [line for line in lines[start + 1 :] if line.startswith("#   ")][
        : int(lines[start].split("(")[1].split(")")[0])
    ]


def test_the_oracle_tells_a_missed_layer_from_none() -> None:
    assert unadapted_layers(add_adapters(Decoder(), QV, skip=[7])) == [7]
    assert unadapted_layers(add_adapters(Decoder(), QV)) == []


def test_a_decoder_with_adapters_on_every_layer_but_7_names_layer_7() -> None:
    model = add_adapters(Decoder(), QV, skip=[7]).eval()

    text = trace_forward(model, tokens()).render()

    assert unadapted_layers(model) == [7]
    assert section(text, "blocks that differ from their siblings") == [
        "#   layers.7.self_attn.q_proj: torch.nn.modules.linear.Linear, 31 of 32 siblings: "
        "adapters.Linear",
        "#   layers.7.self_attn.v_proj: torch.nn.modules.linear.Linear, 31 of 32 siblings: "
        "adapters.Linear",
    ]


def test_with_all_32_layers_adapted_the_header_says_nothing() -> None:
    text = trace_forward(add_adapters(Decoder(), QV).eval(), tokens()).render()

    assert "differ from" not in text


def test_a_missed_first_layer_is_named_though_first_blocks_may_differ() -> None:
    text = trace_forward(add_adapters(Decoder(layers=8), QV, skip=[0]).eval(), tokens()).render()

    assert [
        line.split(":")[0] for line in section(text, "blocks that differ from their siblings")
    ] == [
        "#   layers.0.self_attn.q_proj",
        "#   layers.0.self_attn.v_proj",
    ]


def test_two_neighbouring_missed_layers_are_both_named() -> None:
    model = add_adapters(Decoder(layers=12), QV, skip=[4, 5]).eval()

    found = section(
        trace_forward(model, tokens()).render(), "blocks that differ from their siblings"
    )

    assert [line.split(":")[0].removeprefix("#   ") for line in found] == [
        "layers.4.self_attn.q_proj",
        "layers.4.self_attn.v_proj",
        "layers.5.self_attn.q_proj",
        "layers.5.self_attn.v_proj",
    ]


def quantized_but_the_head(layers: int = 4) -> nn.Module:
    """Every nn.Linear dynamically quantized to qint8, the head put back in float."""
    torch.manual_seed(0)
    model = Decoder(layers=layers).eval()
    head = model.lm_head
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    quantized.lm_head = head
    return quantized


def float_linears(model: nn.Module) -> list[str]:
    """The oracle: the paths of the modules that are still torch's float nn.Linear."""
    return [path for path, module in model.named_modules() if type(module) is nn.Linear]


def test_quantizing_all_linears_but_the_head_names_the_head() -> None:
    model = quantized_but_the_head()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = trace_forward(model, tokens()).render()

    assert float_linears(model) == ["lm_head"]
    assert section(text, "modules whose dtypes differ from their class") == [
        "#   lm_head: Linear f32 tensors, 24 of 25 Linear modules: Linear dtype=torch.qint8, "
        "no tensors of its own"
    ]


def test_a_float_model_lists_no_odd_class_member() -> None:
    model = Decoder(layers=4).eval()

    assert len(float_linears(model)) == 25
    assert "dtypes differ" not in trace_forward(model, tokens()).render()


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Moe(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 4)
        self.experts = nn.ModuleList(Expert() for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(expert(x) for expert in self.experts) + self.gate(x).sum()


class MoeLayer(nn.Module):
    """A decoder layer whose mlp is dense (Expert) in the first `dense` layers, else Moe."""

    def __init__(self, dense: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp: nn.Module = Expert() if dense else Moe()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


@pytest.mark.slow
def test_deliberate_differences_are_not_reported() -> None:
    # A dense first layer in a mixture-of-experts decoder, a different last block, every
    # fourth layer different (a pattern), ResNet's and ViT's own blocks.
    torchvision = pytest.importorskip("torchvision")
    moe = nn.Sequential(*(MoeLayer(dense=index == 0) for index in range(6)))
    every_fourth = nn.Sequential(*(MoeLayer(dense=index % 4 == 1) for index in range(12)))
    last_differs = nn.Sequential(*(MoeLayer(dense=index == 5) for index in range(6)))
    models = [
        (moe, torch.randn(1, 8)),
        (every_fourth, torch.randn(1, 8)),
        (last_differs, torch.randn(1, 8)),
        (torchvision.models.resnet18().eval(), torch.randn(1, 3, 32, 32)),
        (torchvision.models.vit_b_16().eval(), torch.randn(1, 3, 224, 224)),
    ]
    for model, x in models:
        assert "differ from" not in trace_forward(model, x, device="meta").render(), model


def test_an_interior_layer_of_another_class_is_reported_and_the_oracle_sees_it() -> None:
    model = nn.Sequential(*(MoeLayer(dense=index == 3) for index in range(8)))
    assert [type(layer.mlp).__name__ for layer in model].count("Expert") == 1

    found = section(
        trace_forward(model, torch.randn(1, 8)).render(), "blocks that differ from their siblings"
    )

    assert found == ["#   3.mlp: Expert, 7 of 8 siblings: Moe"]


def test_one_frozen_layer_among_trainable_ones_is_reported() -> None:
    model = Decoder(layers=8)
    model.layers[3].self_attn.requires_grad_(False)

    found = section(
        trace_forward(model, tokens()).render(), "blocks that differ from their siblings"
    )

    assert found == [
        f"#   layers.3.self_attn.{name}: Linear frozen, 7 of 8 siblings: Linear trainable"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj")
    ]


def test_the_header_reads_back_and_the_diff_says_it_in_words() -> None:
    before = trace_forward(add_adapters(Decoder(), QV).eval(), tokens()).render()
    after = trace_forward(add_adapters(Decoder(), QV, skip=[7]).eval(), tokens()).render()

    header = parse_golden(after)[0]
    items = odd_block_items(header_sections(header))
    assert header.odd_blocks == tuple(items)
    summary = str(diff_golden(before, after))
    back = str(diff_golden(after, before))

    assert [(item.path, item.agreeing, item.compared) for item in items] == [
        ("layers.7.self_attn.q_proj", 31, 32),
        ("layers.7.self_attn.v_proj", 31, 32),
    ]
    assert "2 blocks differing from the peers now: layers.7.self_attn.q_proj" in summary
    assert "2 blocks agreeing with the peers now: layers.7.self_attn.q_proj" in back


def test_coverage_gives_classes_with_layer_indices() -> None:
    trace = trace_forward(add_adapters(Decoder(), QV, skip=[7]).eval(), tokens())

    table = trace.coverage(QV_PATTERN)

    assert str(table).splitlines() == [
        f"coverage of {QV_PATTERN}: 64 modules",
        "  adapters.Linear                   62  layers 0-6, 8-31",
        "  torch.nn.modules.linear.Linear     2  layers 7",
    ]


def test_assert_coverage_fails_naming_layer_7_and_passes_when_all_are_adapted() -> None:
    missed = trace_forward(add_adapters(Decoder(), QV, skip=[7]).eval(), tokens())
    adapted = trace_forward(add_adapters(Decoder(), QV).eval(), tokens())

    with pytest.raises(
        CoverageError,
        match=r"^2 of 64 modules matching 'layers\.\*\.self_attn\.\[qv\]_proj' are not "
        r"adapters\.Linear in layer 7: torch\.nn\.modules\.linear\.Linear at "
        r"layers\.7\.self_attn\.q_proj, layers\.7\.self_attn\.v_proj\n",
    ):
        assert_coverage(missed, QV_PATTERN, is_a="adapters.Linear")
    assert assert_coverage(adapted, QV_PATTERN, is_a=Linear).matched == 64


def test_assert_coverage_refuses_a_pattern_that_matches_nothing() -> None:
    trace = trace_forward(add_adapters(Decoder(layers=2), QV).eval(), tokens())

    with pytest.raises(CoverageError, match=r"^no module of Decoder matches 'layer\.\*\.q_proj'"):
        assert_coverage(trace, "layer.*.q_proj", is_a="adapters.Linear")


def test_golden_coverage_tells_same_named_classes_apart_by_what_they_call() -> None:
    text = trace_forward(add_adapters(Decoder(layers=4), QV, skip=[2]).eval(), tokens()).render()

    rows = golden_coverage(text, QV_PATTERN).rows

    assert [(row.class_name, row.layers) for row in rows] == [
        (
            "Linear calling lora_dropout.default, lora_A.default, lora_B.default, base_layer",
            "0-1, 3",
        ),
        ("Linear", "2"),
    ]


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        ("layers.7.self_attn.q_proj", "layers.*.self_attn.[qv]_proj", True),
        ("layers.7.self_attn.k_proj", "layers.*.self_attn.[qv]_proj", False),
        ("layers.7.self_attn.q_proj", "layers.*.q_proj", False),
        ("layers.7.self_attn.q_proj", "**.q_proj", True),
        ("model.layers.7.self_attn.q_proj", "**.layers.*.**", True),
    ],
)
def test_a_wildcard_matches_one_name_and_a_double_one_any(
    path: str, pattern: str, expected: bool
) -> None:
    assert path_matches(path, pattern) is expected


@pytest.mark.parametrize(
    ("class_name", "is_a", "expected"),
    [
        ("peft.tuners.lora.layer.Linear", "lora.Linear", True),
        ("torch.nn.modules.linear.Linear", "lora.Linear", False),
        ("torch.nn.modules.linear.Linear", "nn.Linear", True),
        ("torch.nn.modules.linear.Linear", "Linear", True),
        ("torch.nn.modules.linear.Linear", "Conv2d", False),
    ],
)
def test_a_class_name_matches_by_its_names_in_order(
    class_name: str, is_a: str, expected: bool
) -> None:
    assert class_matches(class_name, is_a) is expected


@pytest.mark.slow
def test_show_coverage_prints_the_table_of_a_model(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        factory=f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from torch import nn
        from adapters import DecoderLayer, add_adapters

        def build():
            layers = nn.Sequential(*(DecoderLayer(16) for _ in range(4)))
            return add_adapters(layers, r"\\d+\\.self_attn\\.[qv]_proj", skip=[1])
        """
    )
    result = pytester.run(
        *("python", "-m", "pytest_fwdorder", "show", "factory:build", "--input", "1x5x16"),
        *("--device", "meta", "--coverage", "*.self_attn.[qv]_proj"),
    )
    assert result.ret == 0, result.stderr.str()
    assert result.outlines == [
        "coverage of *.self_attn.[qv]_proj: 8 modules",
        "  adapters.Linear                    6  layers 0, 2-3",
        "  torch.nn.modules.linear.Linear     2  layers 1",
    ]


def test_show_coverage_prints_the_table_of_a_golden_file(pytester: pytest.Pytester) -> None:
    model = add_adapters(Decoder(layers=3), QV, skip=[0]).eval()
    golden = pytester.path / "decoder.txt"
    golden.write_text(trace_forward(model, tokens()).render())

    result = pytester.run(
        "python", "-m", "pytest_fwdorder", "show", str(golden), "--coverage", "**.q_proj"
    )

    assert result.ret == 0, result.stderr.str()
    assert result.outlines[1:] == [
        "  Linear calling lora_dropout.default, lora_A.default, lora_B.default, base_layer     2"
        "  layers 1-2",
        "  Linear                                                                              1"
        "  layers 0",
    ]


@pytest.mark.transformers
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_peft_lora_that_misses_a_layer_is_named_and_fails_the_assertion() -> None:
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    config = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(config).eval()
    lora = peft.LoraConfig(
        r=4, target_modules=["q_proj", "v_proj"], layers_to_transform=[0, 1, 2, 4, 5]
    )
    model = peft.get_peft_model(base, lora).eval()
    layers = model.base_model.model.model.layers
    oracle = [i for i, layer in enumerate(layers) if type(layer.self_attn.q_proj) is nn.Linear]

    trace = trace_forward(model, tokens())

    assert oracle == [3]
    found = section(trace.render(), "blocks that differ from their siblings")
    assert [line.split(": ")[0] for line in found] == [
        "#   base_model.model.model.layers.3.self_attn.q_proj",
        "#   base_model.model.model.layers.3.self_attn.v_proj",
    ]
    with pytest.raises(CoverageError, match=r"are not lora\.Linear in layer 3: "):
        assert_coverage(trace, "**.layers.*.self_attn.[qv]_proj", is_a="lora.Linear")
