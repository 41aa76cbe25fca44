"""MetaTraceError names the line that needed real values; the transformers case included."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from pytest_fwdorder import MetaTraceError, trace_forward


class _AsksForAValue(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # the line the error names
            return x
        return -x


def test_a_meta_error_names_the_users_line() -> None:
    with pytest.raises(
        MetaTraceError,
        match=r"The line that needed real values: tests/test_transformers\.py:[0-9]+: "
        r"if x\.sum\(\) > 0:  # the line the error names",
    ):
        trace_forward(_AsksForAValue(), torch.zeros(2), device="meta")


def test_a_meta_error_keeps_the_original_as_its_cause() -> None:
    with pytest.raises(MetaTraceError, match=r"in <root> \(_AsksForAValue") as caught:
        trace_forward(_AsksForAValue(), torch.zeros(2), device="meta")

    assert isinstance(caught.value.__cause__, RuntimeError)


@pytest.mark.transformers
def test_a_transformers_meta_error_names_the_masking_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, attn_implementation="sdpa",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.zeros(1, 8, dtype=torch.long)

    with pytest.raises(
        MetaTraceError, match=r"\.\.\./transformers/masking_utils\.py:[0-9]+: .*padding_mask"
    ):
        trace_forward(model, ids, attention_mask=torch.ones(1, 8, dtype=torch.long), device="meta")


@pytest.mark.transformers
def test_a_transformers_model_traces_on_meta_without_a_mask_of_all_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, attn_implementation="sdpa",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.zeros(1, 8, dtype=torch.long)

    meta = trace_forward(model, ids, device="meta")

    assert meta == trace_forward(model, ids)


def tiny_transformers_models() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...], dict]]:
    """The example suite's five forward models (examples/huggingface_models), built alike."""
    transformers = pytest.importorskip("transformers")
    attention = {"attn_implementation": "eager"}
    ids = (torch.arange(8) % 60 + 2).unsqueeze(0)
    decoder = {"decoder_input_ids": ids[:, :4]}
    gpt2 = transformers.GPT2Config(
        vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2, **attention
    )
    llama = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32, **attention,
    )  # fmt: skip
    t5 = transformers.T5Config(
        vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1,
        num_heads=2, decoder_start_token_id=0, pad_token_id=0, **attention,
    )  # fmt: skip
    bert = transformers.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=32, **attention,
    )  # fmt: skip
    whisper = transformers.WhisperConfig(
        vocab_size=64, num_mel_bins=8, encoder_layers=1, decoder_layers=1, d_model=16,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_source_positions=8, max_target_positions=16,
        decoder_start_token_id=1, pad_token_id=0, **attention,
    )  # fmt: skip
    return {
        "gpt2": (transformers.GPT2LMHeadModel(gpt2), (ids,), {}),
        "llama": (transformers.LlamaForCausalLM(llama), (ids,), {}),
        "t5": (transformers.T5ForConditionalGeneration(t5), (ids,), decoder),
        "bert": (transformers.BertModel(bert), (ids,), {}),
        "whisper": (
            transformers.WhisperForConditionalGeneration(whisper),
            (torch.randn(1, 8, 16),),
            decoder,
        ),
    }


@pytest.mark.transformers
@pytest.mark.parametrize("name", ["gpt2", "llama", "t5", "bert", "whisper"])
def test_a_transformers_models_flops_equal_flop_counter_modes(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, args, kwargs = tiny_transformers_models()[name]
    model.eval()
    with torch.no_grad():
        trace = trace_forward(model, *args, costs=True, **kwargs)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*args, **kwargs)

    assert trace.costs is not None
    assert trace.costs.flops == counter.get_total_flops() > 0
