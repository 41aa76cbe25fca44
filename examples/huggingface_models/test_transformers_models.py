"""Hugging Face transformers models, built from tiny configurations in code.

Nothing is downloaded: each model is built from a config with a few layers and a small
vocabulary, so the golden files stay short and the tests take seconds. What a golden
depends on is pinned in the config: `attn_implementation` is set explicitly ("eager"
builds its attention mask as a tensor, "sdpa" may pass None), and the transformers version
is part of the environment you pin with your other test dependencies.
"""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a tiny config must never reach the network
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.transformers

ATTENTION = "eager"  # pinned: the golden changes with the attention implementation


def tokens(length: int) -> torch.Tensor:
    return (torch.arange(length) % 60 + 2).unsqueeze(0)


def test_gpt2_forward(forward_trace, snapshot):
    config = transformers.GPT2Config(
        vocab_size=64,
        n_positions=32,
        n_embd=16,
        n_layer=2,
        n_head=2,
        attn_implementation=ATTENTION,
    )
    model = transformers.GPT2LMHeadModel(config).eval()

    trace = forward_trace(model, tokens(8))

    assert trace == snapshot


def test_gpt2_generate_three_tokens(forward_trace, snapshot):
    config = transformers.GPT2Config(
        vocab_size=64,
        n_positions=32,
        n_embd=16,
        n_layer=2,
        n_head=2,
        attn_implementation=ATTENTION,
    )
    model = transformers.GPT2LMHeadModel(config).eval()

    with forward_trace.record(model) as trace:
        model.generate(
            tokens(8), max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0
        )

    assert trace.counts()[""] == 3  # one forward per new token: [step 1] to [step 3]
    assert trace == snapshot


def test_llama_forward(forward_trace, snapshot):
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        attn_implementation=ATTENTION,
    )
    model = transformers.LlamaForCausalLM(config).eval()

    trace = forward_trace(model, tokens(8))

    assert trace == snapshot


def test_t5_forward(forward_trace, snapshot):
    config = transformers.T5Config(
        vocab_size=64,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
        pad_token_id=0,
        attn_implementation=ATTENTION,
    )
    model = transformers.T5ForConditionalGeneration(config).eval()

    trace = forward_trace(model, tokens(8), decoder_input_ids=tokens(4))

    assert trace == snapshot


def test_bert_forward(forward_trace, snapshot):
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        attn_implementation=ATTENTION,
    )
    model = transformers.BertModel(config).eval()

    trace = forward_trace(model, tokens(8))

    assert trace == snapshot


def test_whisper_forward(forward_trace, snapshot):
    config = transformers.WhisperConfig(
        vocab_size=64,
        num_mel_bins=8,
        encoder_layers=1,
        decoder_layers=1,
        d_model=16,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_source_positions=8,
        max_target_positions=16,
        decoder_start_token_id=1,
        pad_token_id=0,
        attn_implementation=ATTENTION,
    )
    model = transformers.WhisperForConditionalGeneration(config).eval()

    trace = forward_trace(model, torch.randn(1, 8, 16), decoder_input_ids=tokens(4))

    assert trace == snapshot
