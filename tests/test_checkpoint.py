"""Checkpoint checks: what a strict `load_state_dict` would refuse, key by key, and the key map."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from torch import nn

import pytest_fwdorder.checks.checkpoint_reference
from pytest_fwdorder import (
    CheckpointMismatchError,
    assert_checkpoint_compatible,
    assert_checkpoint_loads,
    check_checkpoint,
    remap_state_dict,
    render_trace,
    trace_forward,
)
from pytest_fwdorder.checks.checkpoint_reference import read_reference, state_dict_keys

ROOT = Path(__file__).resolve().parent.parent
RESNET50_GOLDEN = (
    ROOT / "examples/__snapshots__/test_resnet50/test_resnet50_execution_structure.fwdorder.txt"
)
IMAGE = torch.zeros(1, 3, 8, 8)


class Block(nn.Module):
    """Two convolutions and a norm, their names given: `cv1`/`cv2` before a rename."""

    def __init__(self, first: str = "cv1", second: str = "cv2", channels: int = 8) -> None:
        super().__init__()
        self.first, self.second = first, second
        self.add_module(first, nn.Conv2d(3, channels, 3))
        self.bn = nn.BatchNorm2d(channels)
        self.add_module(second, nn.Conv2d(channels, 8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, self.second)(self.bn(getattr(self, self.first)(x)))


def renamed() -> Block:
    return Block("conv1", "conv2")


def write_golden(model: nn.Module, path: Path, **options: Any) -> Path:
    path.write_text(render_trace(trace_forward(model, IMAGE, **options)), encoding="utf-8")
    return path


def test_a_checkpoint_value_that_is_not_a_tensor_is_reported_by_key_and_type() -> None:
    report = check_checkpoint(nn.Linear(2, 2), {"weight": 5, "bias": torch.zeros(2)})

    assert not report.loads
    assert str(report) == (
        "the checkpoint does not load into the model: 1 key not a tensor\n"
        "  not a tensor in the checkpoint (1):\n"
        "    weight (2, 2) <- int"
    )


def test_a_checkpoint_value_that_is_not_a_tensor_fails_the_assertion() -> None:
    with pytest.raises(CheckpointMismatchError, match=r"weight \(2, 2\) <- int"):
        assert_checkpoint_loads(nn.Linear(2, 2), {"weight": 5, "bias": torch.zeros(2)})


def test_a_renamed_module_gets_a_key_map_of_all_its_keys() -> None:
    report = check_checkpoint(renamed(), Block().state_dict())

    assert report.key_map == {
        "cv1.weight": "conv1.weight",
        "cv1.bias": "conv1.bias",
        "cv2.weight": "conv2.weight",
        "cv2.bias": "conv2.bias",
    }


def test_the_key_map_makes_a_strict_load_of_the_old_checkpoint_succeed() -> None:
    old, new = Block(), renamed()
    key_map = check_checkpoint(new, old.state_dict()).key_map

    new.load_state_dict(remap_state_dict(old.state_dict(), key_map), strict=True)

    assert torch.equal(new.conv1.weight, old.cv1.weight)
    assert torch.equal(new.conv2.bias, old.cv2.bias)


def test_a_rename_fails_with_missing_and_unexpected_keys_and_the_key_map_to_paste() -> None:
    with pytest.raises(CheckpointMismatchError, match="does not load") as raised:
        assert_checkpoint_compatible(renamed(), Block())

    assert str(raised.value) == (
        "the checkpoint does not load into the model: 4 keys missing, 4 unexpected; the key "
        "map below renames all 4 unexpected onto missing ones: cv1.* -> conv1.* (2 keys), "
        "cv2.* -> conv2.* (2 keys)\n"
        "  missing from the checkpoint (4):\n"
        "    conv1.weight (8, 3, 3, 3) (nearest: cv1.weight (8, 3, 3, 3))\n"
        "    conv1.bias (8,) (nearest: cv1.bias (8,))\n"
        "    conv2.weight (8, 8, 3, 3) (nearest: cv2.weight (8, 8, 3, 3))\n"
        "    conv2.bias (8,) (nearest: cv2.bias (8,))\n"
        "  unexpected in the checkpoint (4):\n"
        "    cv1.weight (8, 3, 3, 3) (nearest: conv1.weight (8, 3, 3, 3))\n"
        "    cv1.bias (8,) (nearest: conv1.bias (8,))\n"
        "    cv2.weight (8, 8, 3, 3) (nearest: conv2.weight (8, 8, 3, 3))\n"
        "    cv2.bias (8,) (nearest: conv2.bias (8,))\n"
        "  suggested key map, checkpoint key -> model key (4); apply it with "
        "remap_state_dict(state_dict, key_map):\n"
        "    {\n"
        "        'cv1.weight': 'conv1.weight',\n"
        "        'cv1.bias': 'conv1.bias',\n"
        "        'cv2.weight': 'conv2.weight',\n"
        "        'cv2.bias': 'conv2.bias',\n"
        "    }"
    )


def test_the_pasted_key_map_is_the_report_key_map() -> None:
    report = check_checkpoint(renamed(), Block())
    pasted = str(report).split("remap_state_dict(state_dict, key_map):\n", 1)[1]

    assert ast.literal_eval(pasted) == report.key_map


def test_renamed_repeated_blocks_pair_in_order() -> None:
    old = nn.Module()
    old.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(12))
    new = nn.Module()
    new.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(12))

    key_map = check_checkpoint(new, old.state_dict()).key_map

    assert key_map == {
        f"layers.{index}.{name}": f"blocks.{index}.{name}"
        for index in range(12)
        for name in ("weight", "bias")
    }


def test_keys_of_other_shapes_are_not_suggested_as_renames() -> None:
    old = nn.Sequential()
    old.add_module("cv1", nn.Linear(4, 4))
    new = nn.Sequential()
    new.add_module("conv1", nn.Linear(4, 5))

    assert check_checkpoint(new, old.state_dict()).key_map == {}


def test_a_compiled_models_state_dict_is_compatible_with_a_note() -> None:
    compiled = torch.compile(renamed())  # never run: its state_dict keys are all we need

    report = assert_checkpoint_compatible(renamed(), compiled.state_dict())

    assert report.loads
    assert report.notes == [
        "every key of the checkpoint starts with '_orig_mod.' (torch.compile): compared "
        "without it; strip it before loading: torch.nn.modules.utils."
        "consume_prefix_in_state_dict_if_present(state_dict, '_orig_mod.')"
    ]


def test_a_data_parallel_checkpoint_is_compatible_with_a_note() -> None:
    report = assert_checkpoint_compatible(renamed(), nn.DataParallel(renamed()).state_dict())

    assert report.notes == [
        "every key of the checkpoint starts with 'module.' (DataParallel or "
        "DistributedDataParallel): compared without it; strip it before loading: "
        "torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state_dict, 'module.')"
    ]


def test_a_wrapped_model_against_a_plain_checkpoint_says_where_to_load() -> None:
    report = assert_checkpoint_compatible(nn.DataParallel(renamed()), renamed())

    assert report.notes == [
        "every key of the model starts with 'module.' (DataParallel or "
        "DistributedDataParallel): compared without it; load into model.module to load "
        "without it"
    ]


def test_a_prefix_is_still_a_strict_failure_of_check_checkpoint_with_the_fix_noted() -> None:
    report = check_checkpoint(renamed(), nn.DataParallel(renamed()).state_dict())

    assert len(report.missing) == len(report.unexpected) == 9
    assert report.notes[0].endswith(
        "(state_dict, 'module.'), or check with assert_checkpoint_compatible, which compares "
        "without it"
    )


def test_a_prefix_on_only_some_keys_is_not_stripped() -> None:
    checkpoint = renamed().state_dict()
    checkpoint["module.extra"] = torch.zeros(1)

    report = check_checkpoint(renamed(), checkpoint)

    assert [problem.key for problem in report.unexpected] == ["module.extra"]
    assert report.notes == []


def test_a_resized_convolution_fails_as_resized() -> None:
    with pytest.raises(
        CheckpointMismatchError,
        match=r"shape differs \(model <- checkpoint\) \(7\):\n"
        r"    conv1\.weight \(16, 3, 3, 3\) \(nearest: conv1\.weight \(8, 3, 3, 3\)\)",
    ):
        assert_checkpoint_compatible(Block("conv1", "conv2", channels=16), renamed())


def test_the_report_lists_the_resized_keys() -> None:
    report = check_checkpoint(Block("conv1", "conv2", channels=16), renamed())

    assert [problem.key for problem in report.resized] == [
        "conv1.weight",
        "conv1.bias",
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
        "conv2.weight",
    ]


def test_a_dtype_change_is_listed_and_does_not_fail() -> None:
    report = assert_checkpoint_compatible(renamed(), renamed().half())

    assert report.loads
    assert [str(change) for change in report.dtype_changes][:2] == [
        "conv1.weight f32 <- f16",
        "conv1.bias f32 <- f16",
    ]
    assert "bn.num_batches_tracked" not in {change.key for change in report.dtype_changes}
    assert "  dtype differs (model <- checkpoint), converted on load (8):" in str(report)


def test_a_golden_file_gives_the_keys_of_the_model_it_was_traced_from(tmp_path: Path) -> None:
    golden = write_golden(renamed(), tmp_path / "test_block.fwdorder.txt")

    report = assert_checkpoint_compatible(renamed(), golden)

    assert report.notes == [f"read the keys from the golden file {str(golden)!r}"]


def test_a_golden_file_of_the_old_model_fails_a_rename_with_the_key_map(tmp_path: Path) -> None:
    golden = write_golden(Block(), tmp_path / "test_block.fwdorder.txt")

    with pytest.raises(CheckpointMismatchError, match=r"'cv2\.bias': 'conv2\.bias',"):
        assert_checkpoint_compatible(renamed(), golden)


class Awkward(nn.Module):
    """Tied, aliased, never-called and non-persistent tensors, and the root's own."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.register_buffer("scratch", torch.zeros(3), persistent=False)
        self.encoder = nn.Linear(3, 3)
        self.alias = self.encoder
        self.unused = nn.Linear(3, 2)
        self.head = nn.Linear(3, 3, bias=False)
        self.head.weight = self.encoder.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x) * self.scale)


def test_a_golden_gives_tied_aliased_and_never_called_keys_but_no_unsaved_one(
    tmp_path: Path,
) -> None:
    model = Awkward()
    golden = tmp_path / "awkward.fwdorder.txt"
    golden.write_text(render_trace(trace_forward(model, torch.zeros(1, 3))), encoding="utf-8")

    assert read_reference(golden).signatures == state_dict_keys(model.state_dict()).signatures


def test_the_golden_oracle_can_fail_on_a_key_the_golden_lacks(tmp_path: Path) -> None:
    golden = write_golden(renamed(), tmp_path / "test_block.fwdorder.txt")
    model = renamed()
    model.register_buffer("added", torch.zeros(2))

    with pytest.raises(CheckpointMismatchError, match=r"missing from the checkpoint \(1\)"):
        assert_checkpoint_compatible(model, golden)


def test_a_golden_written_with_hidden_parameters_is_refused(tmp_path: Path) -> None:
    golden = write_golden(renamed(), tmp_path / "hidden.fwdorder.txt", hide=("parameters",))

    with pytest.raises(ValueError, match=r"written with hide=\('parameters',\), so it holds no"):
        assert_checkpoint_compatible(renamed(), golden)


def test_a_folded_golden_is_refused(tmp_path: Path) -> None:
    model = nn.Sequential(renamed())
    golden = write_golden(model, tmp_path / "folded.fwdorder.txt", fold=("0",))

    with pytest.raises(ValueError, match=r"is a view \(folded: 0\)"):
        assert_checkpoint_compatible(model, golden)


def test_golden_text_is_refused_with_the_path_asked_for() -> None:
    text = render_trace(trace_forward(renamed(), IMAGE))

    with pytest.raises(TypeError, match=r"got a golden's text; pass the path"):
        assert_checkpoint_compatible(renamed(), text)


def test_a_path_that_is_not_a_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no checkpoint reference at '.*absent\.pt'"):
        assert_checkpoint_compatible(renamed(), tmp_path / "absent.pt")


def test_a_reference_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"a state_dict or a model, got 'int'"):
        assert_checkpoint_compatible(renamed(), 5)  # type: ignore[arg-type]


def spy_on_torch_load(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each `torch.load` the reader makes returns, and the arguments it was given."""
    seen: list[Any] = []
    original: Callable[..., Any] = torch.load

    def load(*arguments: Any, **options: Any) -> Any:
        loaded = original(*arguments, **options)
        seen.append((options, loaded))
        return loaded

    monkeypatch.setattr(pytest_fwdorder.checks.checkpoint_reference.torch, "load", load)
    return seen


def test_a_saved_state_dict_is_read_on_meta_without_its_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "block.pt"
    torch.save(renamed().state_dict(), path)
    seen = spy_on_torch_load(monkeypatch)

    report = assert_checkpoint_compatible(renamed(), path)

    ((options, loaded),) = seen
    assert options == {"map_location": "meta", "weights_only": True}
    assert all(value.is_meta for value in loaded.values())
    assert report.notes == [f"read {str(path)!r} on meta"]


def test_a_saved_state_dict_of_the_old_model_fails_a_rename(tmp_path: Path) -> None:
    path = tmp_path / "block.pt"
    torch.save(Block().state_dict(), path)

    with pytest.raises(CheckpointMismatchError, match=r"'cv1\.weight': 'conv1\.weight',"):
        assert_checkpoint_compatible(renamed(), path)


def test_a_training_checkpoint_is_read_under_its_state_dict_key(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"epoch": 3, "model_state_dict": renamed().state_dict(), "optimizer": {}}, path)

    report = assert_checkpoint_compatible(renamed(), path)

    assert report.notes == [
        f"read the state_dict under 'model_state_dict' of {str(path)!r} on meta (the file "
        "also holds 'epoch', 'optimizer')"
    ]


def test_a_file_without_a_state_dict_names_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"epoch": 3, "weights": {}}, path)

    with pytest.raises(TypeError, match=r"its keys are 'epoch', 'weights': pass the state_dict"):
        assert_checkpoint_compatible(renamed(), path)


def test_a_saved_model_object_is_refused_with_a_note_to_save_its_state_dict(
    tmp_path: Path,
) -> None:
    path = tmp_path / "model.pt"
    torch.save(renamed(), path)

    with pytest.raises(Exception, match=r"[Ww]eights only load failed") as raised:
        assert_checkpoint_compatible(renamed(), path)

    assert "save the state_dict (torch.save(model.state_dict(), path))" in "".join(
        getattr(raised.value, "__notes__", [])
    )


def test_a_safetensors_file_is_read_from_its_header(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    path = tmp_path / "block.safetensors"
    model = renamed().to(torch.bfloat16)
    safetensors_torch.save_file(model.state_dict(), str(path))

    assert read_reference(path).signatures == state_dict_keys(model.state_dict()).signatures


def test_a_safetensors_file_of_the_old_model_fails_a_rename(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    path = tmp_path / "block.safetensors"
    safetensors_torch.save_file(Block().state_dict(), str(path))

    with pytest.raises(CheckpointMismatchError, match=r"unexpected in the checkpoint \(4\)"):
        assert_checkpoint_compatible(renamed(), path)


def test_resnet50_is_compatible_with_its_example_golden() -> None:
    model = torchvision.models.resnet50(weights=None)

    assert read_reference(RESNET50_GOLDEN).signatures == (
        state_dict_keys(model.state_dict()).signatures
    )
    assert assert_checkpoint_compatible(model, RESNET50_GOLDEN).loads


def test_remap_keeps_unmapped_keys_and_the_order() -> None:
    state_dict = {"a": 1, "b": 2, "c": 3}

    assert list(remap_state_dict(state_dict, {"b": "z"}).items()) == [("a", 1), ("z", 2), ("c", 3)]


def test_remap_carries_module_versions_to_the_new_path() -> None:
    remapped = remap_state_dict(Block().state_dict(), {"cv1.weight": "conv1.weight"})

    assert remapped._metadata["conv1"] == {"version": 1}  # type: ignore[attr-defined]


def test_remap_names_a_key_the_state_dict_lacks() -> None:
    with pytest.raises(KeyError, match=r"does not hold: 'cv1\.wieght' \(did you mean 'cv1\.wei"):
        remap_state_dict(Block().state_dict(), {"cv1.wieght": "conv1.weight"})


def test_remap_refuses_two_keys_under_one_name() -> None:
    with pytest.raises(ValueError, match=r"puts 'cv1\.bias' and 'cv2\.bias' both under 'bias'"):
        remap_state_dict(Block().state_dict(), {"cv1.bias": "bias", "cv2.bias": "bias"})


def test_remap_refuses_a_key_renamed_onto_one_kept() -> None:
    with pytest.raises(ValueError, match=r"puts 'bn\.bias' and 'cv2\.bias' both under 'bn\.bias'"):
        remap_state_dict(Block().state_dict(), {"cv2.bias": "bn.bias"})


class HeadOnBackbone(nn.Module):
    """torchvision's ResNet-18 refactored: the body under `backbone`, `fc` renamed `head`."""

    def __init__(self) -> None:
        super().__init__()
        body = torchvision.models.resnet18(weights=None)
        self.head = body.fc
        body.fc = nn.Identity()
        self.backbone = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


@pytest.fixture(scope="module")
def moved_under_backbone() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The refactored model and a checkpoint of the ResNet-18 it came from."""
    return HeadOnBackbone(), torchvision.models.resnet18(weights=None).state_dict()


def test_a_body_moved_under_a_new_parent_is_summed_up_in_the_first_line(
    moved_under_backbone: tuple[nn.Module, dict[str, torch.Tensor]],
) -> None:
    model, checkpoint = moved_under_backbone

    first_line = str(check_checkpoint(model, checkpoint)).split("\n", 1)[0]

    assert first_line == (
        "the checkpoint does not load into the model: 122 keys missing, 122 unexpected; "
        "the key map below renames all 122 unexpected onto missing ones: "
        "* -> backbone.* (120 keys), fc.* -> head.* (2 keys)"
    )


def test_the_long_lists_of_a_report_end_with_a_count_of_the_keys_left_out(
    moved_under_backbone: tuple[nn.Module, dict[str, torch.Tensor]],
) -> None:
    model, checkpoint = moved_under_backbone

    lines = str(check_checkpoint(model, checkpoint)).split("\n")

    assert lines.count("    ... and 112 more keys") == 2
    assert (
        "        # ... and 112 more keys: check_checkpoint(model, state_dict).key_map holds all 122"
        in lines
    )
    assert len(lines) < 50


def test_every_nearest_hint_agrees_with_the_key_map_that_makes_the_load_succeed(
    moved_under_backbone: tuple[nn.Module, dict[str, torch.Tensor]],
) -> None:
    model, checkpoint = moved_under_backbone
    report = check_checkpoint(model, checkpoint)
    renamed_from = {target: source for source, target in report.key_map.items()}

    # The oracle: torch's own strict load takes the remapped checkpoint.
    model.load_state_dict(remap_state_dict(checkpoint, report.key_map), strict=True)
    assert [(p.key, p.nearest) for p in report.missing if p.nearest != renamed_from[p.key]] == []
    assert [
        (p.key, p.nearest) for p in report.unexpected if p.nearest != report.key_map[p.key]
    ] == []


def test_the_key_map_oracle_can_fail_on_a_wrong_pairing(
    moved_under_backbone: tuple[nn.Module, dict[str, torch.Tensor]],
) -> None:
    model, checkpoint = moved_under_backbone
    key_map = dict(check_checkpoint(model, checkpoint).key_map)
    key_map["conv1.weight"], key_map["fc.weight"] = key_map["fc.weight"], key_map["conv1.weight"]

    with pytest.raises(RuntimeError, match=r"size mismatch for head\.weight"):
        model.load_state_dict(remap_state_dict(checkpoint, key_map), strict=True)
