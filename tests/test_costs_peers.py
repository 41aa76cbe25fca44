"""`costs=True` against fvcore and ptflops on classification models, every difference explained.

Three counts of the same forward, with different conventions:

- ours (torch's `flop_registry` formulas): a multiply-accumulate is 2 FLOPs; only matrix
  products and convolutions have formulas (no bias addition), every other operation that
  computes something is listed under "uncounted" instead.
- fvcore (`FlopCountAnalysis`, JIT tracing): a multiply-accumulate is 1 "flop"; it also counts
  batch norm, layer norm and adaptive average pooling by its own estimates, and skips the
  rest (element-wise operations, max pooling, attention scores: `unsupported_ops()`).
- ptflops reports MACs, with two backends. `aten` (a dispatch mode, like ours) counts only
  `mm`, `addmm`, `bmm` and `convolution`, with the bias additions. `pytorch` (the default:
  forward hooks on known module types, plus patched `torch.nn.functional` functions) adds
  activations, normalizations, poolings and its own attention formula, and counts some of
  them twice (the module's hook, then the patched function the module's forward calls).

Each relation is asserted exactly, with the figures it needs read from our own trace (the
calls' shapes and parameters), so that a change on either side shows as a failure.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torchvision
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.calls.records import Call
from pytest_fwdorder.trace import Trace

pytest.importorskip("ptflops")
with warnings.catch_warnings():
    # fvcore scripts a loss function at import; torch 2.14 warns that scripting is deprecated.
    warnings.filterwarnings(
        "ignore", message=".torch.jit.script. is deprecated", category=FutureWarning
    )
    pytest.importorskip("fvcore.nn")

from fvcore.nn import FlopCountAnalysis  # type: ignore[import-untyped]
from ptflops import get_model_complexity_info  # type: ignore[import-untyped]

pytestmark = pytest.mark.slow


def small_vision_transformer() -> nn.Module:
    """torchvision's ViT, two layers of width 32 on 32x32 images: 17 tokens, 2 heads."""
    model: nn.Module = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        num_classes=10,
    )  # fmt: skip
    return model


def torchvision_model(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        model: nn.Module = getattr(torchvision.models, name)(weights=None)
        return model

    return build


# name -> (build, image side)
MODELS: dict[str, tuple[Callable[[], nn.Module], int]] = {
    "resnet18": (torchvision_model("resnet18"), 64),
    "mobilenet_v2": (torchvision_model("mobilenet_v2"), 64),
    "alexnet": (torchvision_model("alexnet"), 64),
    "vit": (small_vision_transformer, 32),
}


@dataclass(frozen=True)
class Figures:
    """One model's counts: our trace, fvcore's per operator, ptflops' two backends."""

    trace: Trace
    fvcore_total: int
    fvcore_by_operator: dict[str, int]
    fvcore_unsupported: dict[str, int]
    ptflops_pytorch: int
    ptflops_aten: int


def count(name: str) -> Figures:
    """Each tool on a fresh copy of the model (ptflops leaves hooks on the modules it saw).

    Grad stays enabled, as a training forward has it: under `torch.no_grad()` an eval-mode
    MultiheadAttention takes a fused fast path (see the last test).
    """
    build, side = MODELS[name]
    image = torch.randn(1, 3, side, side)
    trace = trace_forward(build().eval(), image, costs=True)
    analysis = FlopCountAnalysis(build().eval(), image)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    pytorch_macs, _ = get_model_complexity_info(
        build().eval(), (3, side, side), as_strings=False, print_per_layer_stat=False
    )
    aten_macs, _ = get_model_complexity_info(
        build().eval(), (3, side, side), as_strings=False, print_per_layer_stat=False,
        backend="aten",
    )  # fmt: skip
    assert isinstance(pytorch_macs, int), "ptflops' pytorch backend failed"
    assert isinstance(aten_macs, int), "ptflops' aten backend failed"
    return Figures(
        trace=trace,
        fvcore_total=analysis.total(),
        fvcore_by_operator=dict(analysis.by_operator()),
        fvcore_unsupported=dict(analysis.unsupported_ops()),
        ptflops_pytorch=pytorch_macs,
        ptflops_aten=aten_macs,
    )


@pytest.fixture(scope="module", params=list(MODELS))
def figures(request: pytest.FixtureRequest) -> Figures:
    return count(request.param)


def calls_of(trace: Trace, *module_types: str) -> list[Call]:
    return [call for call in trace.calls if call.module_type in module_types]


def input_elements(call: Call) -> int:
    return math.prod(call.input_shapes[0])


def output_elements(call: Call) -> int:
    return math.prod(call.output_shapes[0])


def has_parameter(call: Call, name: str) -> bool:
    assert call.facts is not None
    return any(fact.name == name for fact in call.facts.tensors.parameters)


def flops_of(trace: Trace, *module_types: str) -> int:
    found = 0
    for call in calls_of(trace, *module_types):
        assert call.costs is not None
        found += call.costs.flops
    return found


def ours(figures: Figures) -> int:
    assert figures.trace.costs is not None
    return figures.trace.costs.flops


def uncounted(figures: Figures) -> dict[str, int]:
    assert figures.trace.costs is not None
    return dict(figures.trace.costs.uncounted)


def bias_additions(trace: Trace) -> int:
    """The bias additions ptflops counts and torch's formulas leave out: one per output
    element of a convolution or linear layer with a bias; MultiheadAttention adds the q, k, v
    and output projections' biases, four per output element (embedding width = value width)."""
    found = 0
    for call in calls_of(trace, "Conv2d", "Linear"):
        found += output_elements(call) if has_parameter(call, "bias") else 0
    for call in calls_of(trace, "MultiheadAttention"):
        _, projection = trace.modules[f"{call.path}.out_proj"]  # never called: used by weight
        assert has_parameter(call, "in_proj_bias")
        assert any(fact.name == "bias" for fact in projection.tensors.parameters)
        found += 4 * output_elements(call)
    return found


def adaptive_pool_inputs(trace: Trace) -> int:
    """The input elements of adaptive average pooling: AdaptiveAvgPool2d calls, and the
    output of MobileNetV2's `features`, which its forward pools by calling the function."""
    found = sum(map(input_elements, calls_of(trace, "AdaptiveAvgPool2d")))
    if trace.root_type == "MobileNetV2":
        (features,) = [call for call in trace.calls if call.path == "features"]
        found += output_elements(features)
    return found


def attention_scores(call: Call) -> dict[str, int]:
    """What ptflops' MultiheadAttention formula adds beyond its projections (in MACs), for a
    batch-first self-attention of `heads` heads: Q scaling, then per head Q K^T, softmax, A V."""
    batch, tokens, width = call.output_shapes[0]
    assert call.facts is not None
    heads = int(dict(call.facts.settings)["num_heads"])
    head_width = width // heads
    return {
        "q scaling": batch * tokens * width,
        "q k^t": batch * heads * tokens * tokens * head_width,
        "softmax": batch * heads * tokens * tokens,
        "a v": batch * heads * tokens * tokens * head_width,
    }


def attention_scores_flops(trace: Trace) -> int:
    """What we count for ViT's attention scores and their product with V (the CPU kernel
    `_scaled_dot_product_flash_attention_for_cpu`, by our formula): 2 FLOPs a MAC of
    `attention_scores`' "q k^t" and "a v". The peers below count none of it."""
    found = 0
    for call in calls_of(trace, "MultiheadAttention"):
        macs = attention_scores(call)
        found += 2 * (macs["q k^t"] + macs["a v"])
    return found


def test_our_figure_is_the_convolutions_and_matrix_products_alone(figures: Figures) -> None:
    # The base of every relation below: nothing outside these modules has a formula. ViT's
    # attention scores run in `_scaled_dot_product_flash_attention_for_cpu`, counted by our
    # formula for it (fused_kernel_flops.py), not listed as uncounted.
    assert ours(figures) == flops_of(figures.trace, "Conv2d", "Linear", "MultiheadAttention")
    assert ours(figures) > 0
    assert "aten._scaled_dot_product_flash_attention_for_cpu" not in uncounted(figures)


def without_attention_scores(figures: Figures) -> int:
    """Our figure less the attention scores, which no peer counts (0 for convolutional nets)."""
    return ours(figures) - attention_scores_flops(figures.trace)


def test_fvcore_counts_a_multiply_accumulate_as_one_flop(figures: Figures) -> None:
    # fvcore's conv and linear (addmm, matmul) handles count multiply-accumulates, without
    # the bias; torch's count 2 FLOPs per multiply-accumulate, without the bias: exactly half.
    fvcore = figures.fvcore_by_operator
    assert without_attention_scores(figures) == 2 * (fvcore["conv"] + fvcore.get("linear", 0))
    assert 2 * fvcore["conv"] == flops_of(figures.trace, "Conv2d")


def test_fvcore_adds_its_own_estimates_of_what_torch_has_no_formula_for(
    figures: Figures,
) -> None:
    trace, fvcore = figures.trace, figures.fvcore_by_operator
    batch_norms = calls_of(trace, "BatchNorm2d")
    layer_norms = calls_of(trace, "LayerNorm")
    # Eval-mode batch norm with affine weights: 2 flops an element (scale and shift).
    expected = {"batch_norm": 2 * sum(map(input_elements, batch_norms))} if batch_norms else {}
    # Layer norm with affine weights: "5 is just a rough estimate" an element, says fvcore.
    if layer_norms:
        expected["layer_norm"] = 5 * sum(map(input_elements, layer_norms))
    # Adaptive average pooling: 1 flop an input element (`aten::adaptive_avg_pool2d`).
    pooled = adaptive_pool_inputs(trace)
    if pooled:
        expected["adaptive_avg_pool2d"] = pooled
    others = {key: value for key, value in fvcore.items() if key not in ("conv", "linear")}
    assert others == expected
    assert figures.fvcore_total == without_attention_scores(figures) // 2 + sum(expected.values())
    # The same operations are uncounted on our side, by name and once a call.
    if batch_norms:
        assert uncounted(figures)["aten._native_batch_norm_legit_no_training"] == len(batch_norms)
    if layer_norms:
        assert uncounted(figures)["aten.native_layer_norm"] == len(layer_norms)


def test_what_fvcore_skips_we_list_as_uncounted(figures: Figures) -> None:
    # fvcore's unsupported operators are JIT names; ours are aten overload packets. Each one
    # fvcore skips that computes something is in our uncounted list under its aten name
    # (`max_pool2d` runs as `max_pool2d_with_indices`, `scaled_dot_product_attention` as
    # its CPU flash kernel). ViT's `mul`, `div` and `unflatten` are the JIT graph's
    # arithmetic on sizes and a view in MultiheadAttention's code: the eager forward
    # dispatches no such operation.
    # `scaled_dot_product_attention` we count by formula (its CPU kernel's, as on meta).
    eager_names = {"aten::max_pool2d": "aten.max_pool2d_with_indices"}
    skipped = {
        eager_names.get(name, name.replace("::", "."))
        for name in figures.fvcore_unsupported
        if name
        not in ("aten::mul", "aten::div", "aten::unflatten", "aten::scaled_dot_product_attention")
    }
    assert skipped
    assert skipped <= set(uncounted(figures))


def test_ptflops_aten_backend_counts_half_ours_and_the_bias_additions(figures: Figures) -> None:
    # ptflops' `aten` backend: MACs of mm, addmm, bmm and convolution, each with its bias
    # additions (one per output element); torch's formulas count 2 per MAC and no bias.
    assert figures.ptflops_aten == without_attention_scores(figures) // 2 + bias_additions(
        figures.trace
    )
    assert ours(figures) % 2 == 0


# ptflops' module hooks beyond convolution, linear and attention: module type -> (what it
# counts, how many times). `twice`: the hook counts, then the module's forward calls a
# `torch.nn.functional` function that ptflops has patched to count again (F.relu, F.gelu,
# F.max_pool2d, F.adaptive_avg_pool2d). ReLU6's forward calls F.hardtanh, not patched: once.
# BatchNorm2d: 2 an element with affine weights. LayerNorm: the hook checks `module.affine`,
# which LayerNorm does not have (it has `elementwise_affine`), so 1 an element.
PTFLOPS_HOOKS: dict[str, tuple[Callable[[Call], int], int]] = {
    "ReLU": (output_elements, 2),
    "ReLU6": (output_elements, 1),
    "GELU": (output_elements, 2),
    "BatchNorm2d": (input_elements, 2),
    "LayerNorm": (input_elements, 1),
    "MaxPool2d": (input_elements, 2),
    "AdaptiveAvgPool2d": (input_elements, 2),
}


def ptflops_pytorch_extras(trace: Trace) -> dict[str, int]:
    """What ptflops' default backend counts beyond half our FLOPs, by reason."""
    extras = {"bias additions": bias_additions(trace)}
    for module_type, (elements, times) in PTFLOPS_HOOKS.items():
        found = sum(times * elements(call) for call in calls_of(trace, module_type))
        if found:
            extras[module_type] = found
    for call in calls_of(trace, "MultiheadAttention"):
        for reason, macs in attention_scores(call).items():
            extras[f"attention {reason}"] = extras.get(f"attention {reason}", 0) + macs
    if trace.root_type == "MobileNetV2":
        # Its forward calls F.adaptive_avg_pool2d, patched: counted once, with no module hook.
        extras["F.adaptive_avg_pool2d"] = adaptive_pool_inputs(trace)
    return extras


def test_ptflops_default_backend_counts_half_ours_and_what_its_hooks_add(
    figures: Figures,
) -> None:
    extras = ptflops_pytorch_extras(figures.trace)
    assert figures.ptflops_pytorch == without_attention_scores(figures) // 2 + sum(
        extras.values()
    ), extras


def test_the_relations_fail_on_a_different_count() -> None:
    # The relations can fail: ResNet-18 counted by the peers on a larger image than ours.
    small, large = count("resnet18"), count_on_side("resnet18", 72)
    assert small.fvcore_by_operator["conv"] != large.fvcore_by_operator["conv"]
    assert large.ptflops_aten != ours(small) // 2 + bias_additions(small.trace)


def count_on_side(name: str, side: int) -> Figures:
    build, _ = MODELS[name]
    MODELS[f"{name} at {side}"] = (build, side)
    try:
        return count(f"{name} at {side}")
    finally:
        del MODELS[f"{name} at {side}"]


def test_without_grad_vit_attention_is_one_fused_operation_we_count_by_formula() -> None:
    # Under torch.no_grad() an eval-mode MultiheadAttention runs
    # `aten._native_multi_head_attention`, which has no torch formula: ours counts its
    # projections and attention as the usual path's operations are counted (issue 33).
    with_grad = count("vit")
    model = small_vision_transformer().eval()
    with torch.no_grad():
        without_grad = trace_forward(model, torch.randn(1, 3, 32, 32), costs=True)

    assert without_grad.costs is not None
    attention = flops_of(with_grad.trace, "MultiheadAttention")
    assert attention > 0
    assert without_grad.costs.flops == ours(with_grad)
    assert "aten._native_multi_head_attention" not in dict(without_grad.costs.uncounted)
    assert flops_of(without_grad, "MultiheadAttention") == attention
