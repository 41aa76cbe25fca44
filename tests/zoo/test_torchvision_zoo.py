"""Every model torchvision lists, traced with random weights: a ready-made regression suite.

Each model's golden file under __snapshots__/ shows its execution structure; a torchvision
upgrade that changes a model shows up as a readable diff. Each model is also checked
against what nobody here wrote: torch.fx's leaf call order and shapes, a plain counter hook,
`get_submodule`, a meta-device run, a second run, and fresh processes with other hash seeds.

Run with `pytest -m zoo tests/zoo` (deselected from a plain `pytest`, run in CI).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torchvision
from catalogue import UNSUPPORTED, ZOO_MARKS, ZooCase, all_cases
from fx_oracle import fx_leaf_calls, our_leaf_calls
from torch import nn

from pytest_fwdorder import MetaTraceError, trace_forward

pytestmark = ZOO_MARKS

CASES = all_cases()
HERE = Path(__file__).resolve().parent
GOLDENS = HERE / "__snapshots__" / "test_torchvision_zoo"

# Models whose forward needs real values, so they cannot run on the meta device: where
# each one fails and why. The test checks that they do fail there, so the list cannot go stale.
_PROPOSALS = "torch.nonzero has no meta kernel: how many proposals survive depends on the values"
_QUANTIZE = "Quantize reads its scale with .item()"
_DEFAULT_BOXES = "DefaultBoxGenerator builds its boxes on the CPU explicitly"
NOT_ON_META: dict[str, tuple[str, str]] = {
    **{
        name: ("rpn (RegionProposalNetwork", _PROPOSALS)
        for name in (
            "fasterrcnn_mobilenet_v3_large_320_fpn",
            "fasterrcnn_mobilenet_v3_large_fpn",
            "fasterrcnn_resnet50_fpn",
            "fasterrcnn_resnet50_fpn_v2",
            "keypointrcnn_resnet50_fpn",
            "maskrcnn_resnet50_fpn",
            "maskrcnn_resnet50_fpn_v2",
        )
    },
    "fcos_resnet50_fpn": ("<root> (FCOS", _PROPOSALS),
    "retinanet_resnet50_fpn": ("<root> (RetinaNet", _PROPOSALS),
    "retinanet_resnet50_fpn_v2": ("<root> (RetinaNet", _PROPOSALS),
    "ssd300_vgg16": ("anchor_generator (DefaultBoxGenerator", _DEFAULT_BOXES),
    "ssdlite320_mobilenet_v3_large": ("anchor_generator (DefaultBoxGenerator", _DEFAULT_BOXES),
    **{
        name: ("quant (Quantize", _QUANTIZE)
        for name in torchvision.models.list_models()
        if name.startswith("quantized_")
    },
}


def counted_calls(model: nn.Module) -> tuple[Counter[int], list[torch.utils.hooks.RemovableHandle]]:
    """An independent count: a plain forward-pre-hook counter on every module."""
    counts: Counter[int] = Counter()
    handles = [
        module.register_forward_pre_hook(lambda module, args: counts.update([id(module)]))
        for module in model.modules()
    ]
    return counts, handles


@pytest.mark.parametrize("zoo_case", CASES, ids=[zoo_case.name for zoo_case in CASES])
def test_model(zoo_case: ZooCase, snapshot: object, record_property: object) -> None:
    model = zoo_case.build()
    inputs = zoo_case.real_inputs()
    counts, handles = counted_calls(model)
    try:
        with torch.no_grad():
            trace = trace_forward(model, *inputs)
    finally:
        for handle in handles:
            handle.remove()
    with torch.no_grad():
        again = trace_forward(model, *zoo_case.real_inputs())
    golden = trace.render()

    # Byte-identical in a second run, and equal to the committed golden.
    assert again.render() == golden
    assert trace == snapshot

    # Every registered path resolves; the per-module counts agree with the counter hook.
    paths = {id(module): path for path, module in model.named_modules()}
    for call in trace:
        if call.registered:
            model.get_submodule(call.path)
    recorded = Counter(call.path for call in trace if call.registered)
    assert recorded == Counter({paths[module_id]: count for module_id, count in counts.items()})
    record_property("zoo models traced", 1)
    record_property("zoo calls compared with a counter hook", sum(recorded.values()))

    # The meta device gives the same golden, or the model is listed as needing real values.
    # The model built on the CPU is traced with meta stand-ins for its weights: some
    # builders (RegNet, the quantized models) need real values themselves.
    if zoo_case.name in NOT_ON_META:
        where, _ = NOT_ON_META[zoo_case.name]
        with pytest.raises(MetaTraceError, match=f"on the meta device in {re.escape(where)}"):
            trace_forward(model, *zoo_case.inputs, device="meta")
        record_property("zoo models listed as needing real values on meta", 1)
        # After the failed meta trace the model runs on the CPU exactly as before (torchvision's
        # AnchorGenerator reassigns plain tensor attributes to the input's device).
        with torch.no_grad():
            assert trace_forward(model, *zoo_case.real_inputs()).render() == golden
    else:
        with torch.no_grad():
            on_meta = trace_forward(model, *zoo_case.inputs, device="meta")
        assert on_meta.render() == golden
        record_property("zoo models identical on meta", 1)

    # torch.fx as an oracle, for the models it can trace and shape-propagate.
    try:
        with torch.no_grad():
            expected = fx_leaf_calls(model, *inputs)
    except Exception:
        record_property("zoo models fx cannot check (symbolic_trace or ShapeProp fails)", 1)
        return
    assert our_leaf_calls(model, trace) == expected
    record_property("zoo models agreeing with torch.fx", 1)


def test_every_listed_model_is_covered() -> None:
    listed = set(torchvision.models.list_models())

    assert {zoo_case.name for zoo_case in CASES} | set(UNSUPPORTED) == listed
    assert not UNSUPPORTED, f"models that cannot run here: {UNSUPPORTED}"


def test_goldens_are_byte_identical_in_fresh_processes_with_other_hash_seeds(
    tmp_path: Path,
) -> None:
    script = HERE / "render_all.py"
    runs = []
    for seed in ("1", "2"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        out = tmp_path / f"seed{seed}"
        runs.append(
            (
                out,
                subprocess.Popen(
                    [sys.executable, str(script), str(out)], env=environment, cwd=HERE
                ),
            )
        )
    for _, process in runs:
        assert process.wait() == 0
    for zoo_case in CASES:
        committed = (GOLDENS / f"test_model[{zoo_case.name}].fwdorder.txt").read_text()
        for out, _ in runs:
            assert (out / f"{zoo_case.name}.txt").read_text() == committed, zoo_case.name
