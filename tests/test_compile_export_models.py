"""Real models through the compile and export gates (slow: compiling them takes tens of seconds).

The oracle for reuse: torch's own forward hook on the module counts its eager calls.
"""

from __future__ import annotations

import pytest
import torch
import torchvision

from pytest_fwdorder import assert_export_matches_eager, assert_no_graph_breaks


def eager_calls(module: torch.nn.Module, model: torch.nn.Module, *args: object) -> int:
    calls: list[int] = []
    handle = module.register_forward_hook(lambda *_: calls.append(1))
    try:
        model(*args)
    finally:
        handle.remove()
    return len(calls)


@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True])
def test_resnet18_exports_with_eagers_calls(strict: bool) -> None:
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 32, 32)
    program = assert_export_matches_eager(model, x, strict=strict)
    keys = {
        key
        for node in program.graph.nodes
        if node.op == "call_function"
        for key, (path, _) in node.meta.get("nn_module_stack", {}).items()
        if path == "layer1.0.relu"
    }
    assert len(keys) == eager_calls(model.layer1[0].relu, model, x) == 2


@pytest.mark.slow
def test_resnet18_compiles_without_graph_breaks() -> None:
    records = assert_no_graph_breaks(
        torchvision.models.resnet18().eval(), torch.randn(1, 3, 32, 32)
    )
    assert records.graphs == 1


@pytest.mark.slow
@pytest.mark.transformers
@pytest.mark.parametrize("strict", [False, True])
def test_a_tiny_gpt2_compiles_without_breaks_and_exports_with_eagers_calls(strict: bool) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=64,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 64, (1, 8))
    assert_export_matches_eager(model, ids, use_cache=False, strict=strict)
    if not strict:
        assert assert_no_graph_breaks(model, ids, use_cache=False).breaks == ()
