"""Port parity: a reference recorded to a file, a candidate compared with it call by call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from torch import nn

from pytest_fwdorder import (
    ParityTolerance,
    ReferenceMismatchError,
    assert_matches_reference,
    compare_with_reference,
    copy_mapped_weights,
    load_reference,
    record_reference,
)
from pytest_fwdorder.checks.parity_pairing import compile_path_map, map_path


class Block(nn.Module):
    def __init__(self, size: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.mix = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mix(self.norm(x))


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class RenamedBlock(nn.Module):
    """Block under other names, with a switch that breaks it the way a port goes wrong."""

    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 8)
        self.broken = broken

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = self.proj(self.ln(x))
        return mixed if self.broken else x + mixed


class Renamed(nn.Module):
    def __init__(self, broken_layer: int | None = None) -> None:
        super().__init__()
        self.tokens = nn.Embedding(16, 8)
        self.layers = nn.ModuleList(RenamedBlock(number == broken_layer) for number in range(3))
        self.final = nn.LayerNorm(8)
        self.out = nn.Linear(8, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.out(self.final(x))


SMALL_PATH_MAP = {
    "embed": "tokens",
    "blocks.{i}.norm": "layers.{i}.ln",
    "blocks.{i}.mix": "layers.{i}.proj",
    "blocks.{i}": "layers.{i}",
    "norm": "final",
    "head": "out",
}


def _small() -> Small:
    torch.manual_seed(0)
    return Small().eval()


def _ids() -> torch.Tensor:
    return torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(3))


def _renamed_with_weights(reference: object, broken_layer: int | None = None) -> Renamed:
    candidate = Renamed(broken_layer).eval()
    copy_mapped_weights(reference, candidate, SMALL_PATH_MAP)
    return candidate


def test_the_file_holds_what_a_plain_forward_hook_sees_bit_for_bit(tmp_path: Path) -> None:
    model = _small()
    seen: dict[str, torch.Tensor] = {}
    handles = [
        module.register_forward_hook(
            lambda _module, _args, output, name=name: seen.__setitem__(name, output.clone())
        )
        for name, module in model.named_modules()
    ]
    with torch.no_grad():
        model(_ids())
    for handle in handles:
        handle.remove()

    record_reference(model, _ids(), path=tmp_path / "small.safetensors")
    reference = load_reference(tmp_path / "small.safetensors")

    assert {call.path for call in reference.calls} == set(seen) - {"blocks"}
    for call in reference.calls:
        assert torch.equal(call.outputs[0], seen[call.path]), call.path
    assert torch.equal(reference.args[0], _ids())


def test_the_oracle_of_the_bit_for_bit_test_can_fail(tmp_path: Path) -> None:
    reference = record_reference(_small(), _ids(), path=tmp_path / "small.safetensors")
    other = _small()
    with torch.no_grad():
        other.head.bias.add_(1.0)
        assert not torch.equal(other(_ids()), reference.calls[-1].outputs[0])


def test_default_calls_are_the_root_embeddings_blocks_their_parts_and_the_head() -> None:
    reference = record_reference(_small(), _ids())

    assert [call.display_path for call in reference.calls] == [
        "embed",
        "blocks.0.norm",
        "blocks.0.mix",
        "blocks.0",
        "blocks.1.norm",
        "blocks.1.mix",
        "blocks.1",
        "blocks.2.norm",
        "blocks.2.mix",
        "blocks.2",
        "norm",
        "head",
        "<root>",
    ]


def test_call_patterns_choose_what_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "blocks.safetensors"
    record_reference(_small(), _ids(), path=path, calls=["", "blocks.*"])

    with safe_open(str(path), framework="pt") as opened:
        calls = json.loads(opened.metadata()["fwdorder-reference"])["calls"]
        keys = set(opened.keys())
    assert [call[0] for call in calls] == [
        "blocks.0.norm", "blocks.0.mix", "blocks.0", "blocks.1.norm", "blocks.1.mix",
        "blocks.1", "blocks.2.norm", "blocks.2.mix", "blocks.2", "",
    ]  # fmt: skip
    assert not any(key.startswith("weights.") for key in keys)


def test_a_call_pattern_that_matches_nothing_says_so_and_suggests() -> None:
    with pytest.raises(
        ValueError, match=r"pattern 'blok\.0' matches no module of Small: did you mean 'blocks\.0'"
    ):
        record_reference(_small(), _ids(), calls=["blok.0"])


def test_the_text_beside_names_the_environment_the_calls_and_the_trace(tmp_path: Path) -> None:
    record_reference(_small(), _ids(), path=tmp_path / "small.safetensors")

    text = (tmp_path / "small.reference.txt").read_text()
    assert text.startswith("fwdorder-reference 1\n")
    assert f"environment: torch {torch.__version__}, float32, cpu, " in text
    assert "inputs: args[0] int64 (2, 5)\n" in text
    assert "  blocks.1.mix   Linear  float32 (2, 5, 8)\n" in text
    assert "trace:\n# pytest-fwdorder trace" in text


def test_over_the_budget_says_how_much_and_how_to_choose_fewer(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    with pytest.raises(
        ValueError,
        match=r"would write 4\.77 KiB of tensors, over the budget of 0\.98 KiB: 13 chosen "
        r"modules \(largest: head 640 B, <root> 640 B, .*\), inputs 80 B\. Choose fewer calls"
        r".*or raise budget_bytes \(now 1000\)$",
    ):
        record_reference(_small(), _ids(), path=path, budget_bytes=1000)
    assert not path.exists()


def test_a_candidate_on_the_recorded_inputs_matches_through_the_path_map(tmp_path: Path) -> None:
    path = tmp_path / "small.safetensors"
    record_reference(_small(), _ids(), path=path, weights=True)
    reference = load_reference(path)

    report = assert_matches_reference(
        _renamed_with_weights(reference), reference, path_map=SMALL_PATH_MAP
    )

    assert len(report.errors) == 13
    assert "path map 'blocks.{i}.mix' -> 'layers.{i}.proj': 3 calls" in report.rules
    assert "the root with the root: 1 call" in report.rules
    assert max(error.relative_error for error in report.errors) < 1e-6


def test_the_first_divergence_is_named_with_its_numbers_and_the_table(tmp_path: Path) -> None:
    reference = record_reference(_small(), _ids(), weights=True)

    with pytest.raises(ReferenceMismatchError, match=r"^first divergence at layers\.1 ") as caught:
        assert_matches_reference(
            _renamed_with_weights(reference, broken_layer=1), reference, path_map=SMALL_PATH_MAP
        )

    message = str(caught.value)
    assert message.startswith(
        "first divergence at layers.1 (reference blocks.1, paired call 7 of 13): relative error "
    )
    assert "> rtol 1e-05 for float32" in message
    table = message.split(
        "error at each paired call, in the order the reference made its outputs:\n"
    )[1]
    marked = [line.split()[1] for line in table.splitlines()[1:] if line.startswith("  x")]
    assert marked == [
        "layers.1",
        "layers.2.ln",
        "layers.2.proj",
        "layers.2",
        "final",
        "out",
        "<root>",
    ]
    assert f"candidate: torch {torch.__version__}, float32, cpu" in message


def test_without_a_path_map_calls_pair_by_structure_and_the_rule_says_so() -> None:
    reference = record_reference(_small(), _ids(), weights=True)

    report = compare_with_reference(_renamed_with_weights(reference), reference)

    assert report.rules == [
        "same structure up to names (the call tree aligned by depth and shapes, paths and "
        "classes left out): 12 calls, 12 of them at another path",
        "the root with the root: 1 call",
    ]
    assert report.first_divergence is None
    assert [error.candidate_path for error in report.errors][:2] == ["tokens", "layers.0.ln"]


def test_reference_calls_without_a_partner_are_listed_with_the_reason() -> None:
    reference = record_reference(_small(), _ids(), weights=True)
    partial = {key: value for key, value in SMALL_PATH_MAP.items() if key != "blocks.{i}"}

    report = compare_with_reference(_renamed_with_weights(reference), reference, path_map=partial)

    assert ("blocks.1", 1, "no path map entry, and the candidate has no call at this path") in (
        report.unpaired
    )
    assert "reference calls without a partner (3):\n  blocks.0: no path map entry" in str(report)


def test_nan_is_named_where_it_first_appeared() -> None:
    reference = record_reference(_small(), _ids(), weights=True)
    candidate = _renamed_with_weights(reference)
    with torch.no_grad():
        candidate.layers[2].proj.bias[3] = float("nan")

    with pytest.raises(ReferenceMismatchError, match=r"\nNaN first appeared at layers\.2\.proj\n"):
        assert_matches_reference(candidate, reference, path_map=SMALL_PATH_MAP)


def test_a_tolerance_for_a_pattern_lets_a_known_difference_pass() -> None:
    reference = record_reference(_small(), _ids(), calls=["blocks.*.mix"], weights=True)
    candidate = _renamed_with_weights(reference)
    with torch.no_grad():
        candidate.layers[0].proj.bias.add_(1e-3)
    with pytest.raises(ReferenceMismatchError, match=r"first divergence at layers\.0\.proj "):
        assert_matches_reference(candidate, reference, path_map=SMALL_PATH_MAP)

    report = assert_matches_reference(
        candidate,
        reference,
        path_map=SMALL_PATH_MAP,
        tolerances={"blocks.*.mix": ParityTolerance(rtol=1e-2, atol=1e-5)},
    )
    assert report.errors[0].tolerance == ParityTolerance(1e-2, 1e-5)


def test_a_shape_change_is_named_as_the_problem() -> None:
    reference = record_reference(_small(), _ids(), calls=["head"])

    class Wider(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(1, 17)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(ids[..., None].float())

    with pytest.raises(
        ReferenceMismatchError,
        match=r"first divergence at head \(reference head, paired call 1 of 1\): output shape "
        r"\(2, 5, 16\) in the reference, \(2, 5, 17\) in the candidate",
    ):
        assert_matches_reference(Wider(), reference, path_map={})


def test_a_candidate_that_pairs_with_nothing_fails() -> None:
    reference = record_reference(_small(), _ids(), calls=["head"])

    with pytest.raises(
        ReferenceMismatchError, match=r"^no recorded call of the reference has a partner"
    ):
        assert_matches_reference(Renamed(), reference, path_map={})


def test_the_path_map_captures_parts_and_renames_what_lies_below() -> None:
    entries = compile_path_map(SMALL_PATH_MAP, function="test")

    assert map_path(entries, "blocks.12.mix") == ("layers.12.proj", entries[1])
    assert map_path(entries, "blocks.2")[0] == "layers.2"  # type: ignore[index]
    assert map_path(entries, "blocks.2.extra.inner")[0] == "layers.2.extra.inner"  # type: ignore[index]
    assert map_path(entries, "blocksx") is None


def test_a_capture_used_only_on_the_candidate_side_is_an_error() -> None:
    with pytest.raises(
        ValueError, match=r"uses \{j\} in the candidate path but not in the reference path"
    ):
        compile_path_map({"blocks.{i}": "layers.{j}"}, function="test")


def test_a_fused_entry_concatenates_weights_in_its_order() -> None:
    class Separate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = nn.Linear(4, 2), nn.Linear(4, 3), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)

    class Fused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(4, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.qkv(x)

    separate, fused = Separate(), Fused()
    copied = copy_mapped_weights(separate, fused, {("q", "k", "v"): "qkv"})

    assert torch.equal(
        fused.qkv.weight, torch.cat([separate.q.weight, separate.k.weight, separate.v.weight])
    )
    x = torch.randn(3, 4)
    torch.testing.assert_close(fused(x), separate(x))
    assert copied == [
        (("q.weight", "k.weight", "v.weight"), "qkv.weight"),
        (("q.bias", "k.bias", "v.bias"), "qkv.bias"),
    ]


def test_weights_that_do_not_map_are_listed_and_nothing_is_copied() -> None:
    reference, candidate = _small(), Renamed()
    before = candidate.out.weight.clone()
    partial = {key: value for key, value in SMALL_PATH_MAP.items() if key != "head"}

    with pytest.raises(
        ValueError, match=r"nothing mapped onto out\.weight \(nearest: head\.weight\)"
    ):
        copy_mapped_weights(reference, candidate, partial)
    assert torch.equal(candidate.out.weight, before)
    assert not torch.equal(candidate.tokens.weight, reference.embed.weight)


def test_a_reference_without_weights_says_how_to_record_them() -> None:
    reference = record_reference(_small(), _ids())
    with pytest.raises(
        ValueError,
        match=r"recorded without weights: record it with record_reference\(\.\.\., weights=True\)",
    ):
        copy_mapped_weights(reference, Renamed(), SMALL_PATH_MAP)


def test_the_same_reference_gives_the_same_bytes_in_another_process(tmp_path: Path) -> None:
    script = (
        "import sys, torch; sys.path.insert(0, 'tests'); import test_parity as t; "
        "sys.stdout.buffer.write(t.record_reference(t._small(), t._ids(), weights=True).to_bytes())"
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "1"},
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    path = tmp_path / "here.safetensors"
    record_reference(_small(), _ids(), path=path, weights=True)

    assert path.read_bytes() == elsewhere
    assert load_reference(path).to_bytes() == elsewhere  # read and written again: unchanged


def test_a_missing_reference_file_says_how_to_write_one(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"no reference at .*: record one with record_reference"
    ):
        load_reference(tmp_path / "absent.safetensors")


# CI records this reference with its oldest torch and compares with it under its newest
# (.ci/run sets FWDORDER_PARITY_DIRECTORY for both runs): a reference that outlives the
# process, the release and the environment.
_ACROSS = os.environ.get("FWDORDER_PARITY_DIRECTORY")


@pytest.mark.skipif(
    not _ACROSS, reason="FWDORDER_PARITY_DIRECTORY is set only by .ci/run, across torch releases"
)
def test_a_reference_from_another_torch_release_matches() -> None:
    path = Path(str(_ACROSS)) / "small.safetensors"
    if not path.exists():
        record_reference(_small(), _ids(), path=path, weights=True)
        pytest.skip(f"recorded {path} with torch {torch.__version__} for the next environment")
    reference = load_reference(path)

    report = assert_matches_reference(
        _renamed_with_weights(reference), reference, path_map=SMALL_PATH_MAP
    )

    assert f"candidate: torch {torch.__version__}," in str(report)
    print(f"{report.reference_environment} -> {report.candidate_environment}")
