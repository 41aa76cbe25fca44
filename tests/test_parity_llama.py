"""A real port: transformers' LLaMA recorded as the reference, a from-scratch LLaMA (fused
qkv, other names, its own rotary embedding) compared with it through a path map."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from parity_models import LLAMA_PATH_MAP, ScratchLlama, tiny_llama_reference

from pytest_fwdorder import (
    Reference,
    ReferenceMismatchError,
    assert_matches_reference,
    copy_mapped_weights,
    load_reference,
    record_reference,
)

pytestmark = pytest.mark.transformers


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytest.importorskip("transformers")


def _ids() -> torch.Tensor:
    return torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[torch.dtype, Path]:
    """The reference recorded to files in float32 and float64, each by its own model."""
    pytest.importorskip("transformers")
    directory = tmp_path_factory.mktemp("llama")
    paths = {}
    for dtype in (torch.float32, torch.float64):
        paths[dtype] = directory / f"llama-{str(dtype).removeprefix('torch.')}.safetensors"
        record_reference(tiny_llama_reference(dtype), _ids(), path=paths[dtype], weights=True)
    return paths


def _candidate(
    reference: Reference, dtype: torch.dtype = torch.float32, **bugs: tuple[int, ...]
) -> ScratchLlama:
    candidate = ScratchLlama(**bugs).eval()
    copy_mapped_weights(reference, candidate, LLAMA_PATH_MAP)
    return candidate.to(dtype)


def test_the_port_matches_within_float32_tolerance(recorded: dict[torch.dtype, Path]) -> None:
    reference = load_reference(recorded[torch.float32])

    report = assert_matches_reference(_candidate(reference), reference, path_map=LLAMA_PATH_MAP)

    assert (
        len(report.errors) == 24
    )  # embeddings, 4 x (2 norms, attention, MLP, block), norm, head, root
    assert report.unpaired == []
    assert recorded[torch.float32].stat().st_size < 2**20


def test_the_plain_forward_oracle_agrees_that_the_port_matches(
    recorded: dict[torch.dtype, Path],
) -> None:
    reference = load_reference(recorded[torch.float32])
    with torch.no_grad():
        logits = tiny_llama_reference()(_ids()).logits

        torch.testing.assert_close(_candidate(reference)(_ids()), logits)
        with pytest.raises(AssertionError, match="Tensor-likes are not close"):  # it can fail
            torch.testing.assert_close(
                _candidate(reference, interleaved_rotary_in=(1,))(_ids()), logits
            )


def test_a_rotary_embedding_with_the_wrong_split_is_found_in_its_layer(
    recorded: dict[torch.dtype, Path],
) -> None:
    reference = load_reference(recorded[torch.float32])
    candidate = _candidate(reference, interleaved_rotary_in=(1,))

    with pytest.raises(
        ReferenceMismatchError,
        match=r"^first divergence at layers\.1\.attn \(reference model\.layers\.1\.self_attn, "
        r"paired call 8 of 24\): relative error [0-9.e+-]+ > rtol 1e-05 for float32",
    ) as caught:
        assert_matches_reference(candidate, reference, path_map=LLAMA_PATH_MAP)
    _assert_the_table_grows_after("layers.1.attn", str(caught.value))


def test_a_missing_residual_is_found_at_its_block(recorded: dict[torch.dtype, Path]) -> None:
    reference = load_reference(recorded[torch.float32])
    candidate = _candidate(reference, no_residual_in=(2,))

    with pytest.raises(
        ReferenceMismatchError,
        match=r"^first divergence at layers\.2 \(reference model\.layers\.2, paired call 16 of 24\)",
    ) as caught:
        assert_matches_reference(candidate, reference, path_map=LLAMA_PATH_MAP)
    _assert_the_table_grows_after("layers.2", str(caught.value))


def _assert_the_table_grows_after(first: str, message: str) -> None:
    """Every row from the first divergence on is marked, and their errors dwarf those before."""
    table = message.split("in the order the reference made its outputs:\n")[1]
    rows = [line.split() for line in table.splitlines()[1:] if line.startswith("  ")]
    names = [row[-7] for row in rows]
    start = names.index(first)
    assert all(row[0] == "x" for row in rows[start:])
    assert all(row[0] != "x" for row in rows[:start])
    before = max(float(row[-5]) for row in rows[:start])
    after = [float(row[-5]) for row in rows[start:]]
    assert min(after) > 1000 * before  # relative errors: rounding before, the bug after


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_float64_reference_passes_what_is_only_rounding(
    recorded: dict[torch.dtype, Path], dtype: torch.dtype
) -> None:
    reference = load_reference(recorded[torch.float64])

    report = assert_matches_reference(
        _candidate(reference, dtype), reference, path_map=LLAMA_PATH_MAP
    )

    assert "float64, cpu" in report.reference_environment
    assert f"{str(dtype).removeprefix('torch.')}, cpu" in report.candidate_environment
    assert all(error.relative_error > 0 for error in report.errors[2:])  # rounding is there


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_float64_reference_still_finds_the_bug_in_a_16_bit_port(
    recorded: dict[torch.dtype, Path], dtype: torch.dtype
) -> None:
    reference = load_reference(recorded[torch.float64])
    candidate = _candidate(reference, dtype, interleaved_rotary_in=(1,))

    with pytest.raises(ReferenceMismatchError, match=r"^first divergence at layers\.1\.attn "):
        assert_matches_reference(candidate, reference, path_map=LLAMA_PATH_MAP)


def test_calls_fused_in_the_port_are_listed_and_the_boundaries_around_them_compared(
    recorded: dict[torch.dtype, Path],
) -> None:
    weights = load_reference(recorded[torch.float32])
    reference = record_reference(
        tiny_llama_reference(), _ids(), calls=["model.layers.0.self_attn*"]
    )

    report = assert_matches_reference(_candidate(weights), reference, path_map=LLAMA_PATH_MAP)

    assert [error.candidate_path for error in report.errors] == [
        "layers.0.attn.out",
        "layers.0.attn",
    ]
    assert report.unpaired == [
        (
            f"model.layers.0.self_attn.{name}_proj",
            1,
            f"fused into layers.0.attn.qkv (part {part} of 3): compared only at the boundaries "
            "around it",
        )
        for part, name in enumerate("qkv", start=1)
    ]
