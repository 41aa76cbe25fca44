"""MetaTraceError names the line that needed real values; the transformers case included."""

from __future__ import annotations

import pytest
import torch
from torch import nn

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
