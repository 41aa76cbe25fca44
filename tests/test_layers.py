"""Every layer class torch.nn exports, in train and eval, through every check (issue 33).

Each sample of tests/layer_table.py is traced and checked against independent oracles:
call counts against torch's own global forward hook, the model after the trace against its
state before (a lazy module against a twin after one plain forward), a second trace, a meta
trace (equal or a `MetaTraceError`), the `ops`/`costs`/`backward` options, costs on meta
against the CPU's, meta under `torch.no_grad()`, and a bad input, whose exception must be
the plain forward's own. The totals per check are written at the end of the run.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from layer_table import NOT_LAYERS, TABLE, Sample
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.modules.module import register_module_forward_hook

from pytest_fwdorder import MetaTraceError, Trace, trace_forward

# Layers whose CPU kernels are fused ones the meta device decomposes: FLOPs agree, the
# uncounted operations and saved bytes may not (docs/costs.md).
FUSED_ON_THE_CPU = frozenset(
    {
        "RNN", "LSTM", "GRU", "MultiheadAttention", "TransformerEncoderLayer",
        "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
    }
)  # fmt: skip
# torch's meta kernel of `aten._embedding_bag` gives its auxiliary outputs other sizes than
# the CPU's (mode="sum": offset2bag [8] and max_indices [0] on meta, [0] and [2] on the
# CPU), so the bytes autograd saves differ (docs/meta.md).
SAVED_BYTES_DIFFER = frozenset({"EmbeddingBag"})
_INTERNALS = frozenset(vars(nn.Module())) - {"training"}


def layer_classes() -> set[str]:
    return {
        name
        for name, value in vars(nn).items()
        if isinstance(value, type) and issubclass(value, nn.Module) and name not in NOT_LAYERS
    }


def test_the_table_covers_every_layer_class_torch_nn_exports() -> None:
    missing = sorted(name for name in layer_classes() if not TABLE.get(name))
    assert not missing, f"tests/layer_table.py has no sample of {missing}"


SAMPLES = [
    pytest.param(name, number, sample, mode, id=f"{name}-{number}-{mode}")
    for name, samples in sorted(TABLE.items())
    for number, sample in enumerate(samples)
    for mode in ("train", "eval")
]


def counted_by_torch(
    module: nn.Module, inputs: tuple[Any, ...], **options: Any
) -> tuple[Trace, Counter[str]]:
    """A trace, and each module path's calls as torch's own global forward hook saw them."""
    names = {id(inner): name for name, inner in module.named_modules()}
    seen: Counter[str] = Counter()

    def count(inner: nn.Module, args: Any, output: Any) -> None:
        seen[names.get(id(inner), "<unregistered>")] += 1

    handle = register_module_forward_hook(count)
    try:
        trace = trace_forward(module, *inputs, **options)
    finally:
        handle.remove()
    return trace, seen


def settings_of(module: nn.Module) -> dict[str, Any]:
    return {name: value for name, value in vars(module).items() if name not in _INTERNALS}


def state_of(module: nn.Module) -> dict[str, Any]:
    """What a trace must leave as it was: tensors (values and flags), settings, the mode."""
    tensors = {
        name: (type(tensor), tensor.detach().clone(), tensor.requires_grad)
        for name, tensor in module.state_dict(keep_vars=True).items()
    }
    modules = {
        name: (type(inner), inner.training, settings_of(inner))
        for name, inner in module.named_modules()
    }
    return {"tensors": tensors, "modules": modules}


def same_state(before: dict[str, Any], after: dict[str, Any], *, parameters: bool) -> bool:
    if before["modules"] != after["modules"] or before["tensors"].keys() != after["tensors"].keys():
        return False
    for name, (kind, value, flag) in before["tensors"].items():
        kind_after, value_after, flag_after = after["tensors"][name]
        if (kind, flag) != (kind_after, flag_after):
            return False
        if kind is nn.Parameter and not parameters:
            continue
        if not torch.equal(value, value_after) and not (
            value.is_floating_point()
            and torch.allclose(value, value_after, rtol=0, atol=0, equal_nan=True)
        ):
            return False
    return True


def layouts(module: nn.Module) -> dict[str, Any]:
    return {
        name: (type(tensor), tensor.shape)
        for name, tensor in module.state_dict(keep_vars=True).items()
    }


def costs_lines(text: str, flops_only: bool) -> list[str]:
    lines = [line for line in text.splitlines() if "costs:" in line or line.startswith("#   ")]
    if flops_only:
        return [line.split(" FLOPs")[0] for line in lines if "costs:" in line]
    return lines


def meta_agrees(module: nn.Module, inputs: tuple[Any, ...], cpu: str, **options: Any) -> str:
    """'equal', or 'refused' for a MetaTraceError; a silent difference fails."""
    try:
        meta = trace_forward(module, *inputs, device="meta", **options).render()
    except MetaTraceError:
        return "refused"
    assert meta == cpu
    return "equal"


def plain_backward_works(module: nn.Module, inputs: tuple[Any, ...]) -> bool:
    twin = copy.deepcopy(module)
    try:
        output = twin(*inputs)
        tensors = [
            t for t in torch.utils._pytree.tree_leaves(output) if isinstance(t, torch.Tensor)
        ]
        loss = sum(t.sum() for t in tensors if t.is_floating_point())
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            return False
        loss.backward()
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


BAD_INPUT = torch.randn(7, 1, 1, 1, 1, 1, 1)  # a rank no layer takes


def bad_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    return (BAD_INPUT, *inputs[1:])


@pytest.mark.layers
@pytest.mark.filterwarnings(
    "ignore"
)  # torch's own (nested tensors, LSTM dropout) and the lazy in-place one
@pytest.mark.parametrize(("name", "number", "sample", "mode"), SAMPLES)
def test_every_layer_through_every_check(
    name: str, number: int, sample: Sample, mode: str, record_property: Any
) -> None:
    torch.manual_seed(0)
    module = sample.build().train(mode == "train")
    inputs = sample.inputs()
    lazy = isinstance(module, LazyModuleMixin)
    twin = sample.build().train(mode == "train") if lazy else None
    checks: dict[str, bool] = {}

    before = state_of(module) if not lazy else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace, seen = counted_by_torch(module, inputs)
    # Documented: parameters forward changes in place (Embedding's max_norm) keep their
    # values, with a warning that names them; everything else is put back.
    in_place = any("changed parameters in place" in str(warning.message) for warning in caught)
    checks["trace"] = len(trace.calls) > 0
    assert Counter(call.path for call in trace.calls) == seen
    checks["counts match torch's global hook"] = True

    if twin is not None:
        twin(*inputs)
        assert type(module) is type(twin)
        assert settings_of(module) == settings_of(twin)
        assert layouts(module) == layouts(twin)
    else:
        assert before is not None
        assert same_state(before, state_of(module), parameters=not in_place)
    checks["model equal afterwards"] = True

    first = trace_forward(module, *inputs).render()
    assert trace_forward(module, *inputs).render() == first
    checks["two traces byte-identical"] = True

    checks[f"meta {meta_agrees(module, inputs, first)}"] = True

    with_options = trace_forward(module, *inputs, ops=True, costs=True)
    checks["ops and costs"] = bool(with_options.calls)
    if mode == "train" and plain_backward_works(module, inputs):
        checks["backward"] = bool(trace_forward(module, *inputs, backward=True).calls)

    cpu_costs = with_options.render()
    try:
        meta_costs = trace_forward(module, *inputs, ops=True, costs=True, device="meta").render()
    except MetaTraceError:
        pass
    else:
        flops_only = name in FUSED_ON_THE_CPU or name in SAVED_BYTES_DIFFER
        assert costs_lines(meta_costs, flops_only) == costs_lines(cpu_costs, flops_only)
        checks["costs on meta equal the CPU's" + (" (FLOPs)" if flops_only else "")] = True

    with torch.no_grad():
        quiet = trace_forward(module, *inputs).render()
        checks[f"meta under no_grad {meta_agrees(module, inputs, quiet)}"] = True

    plain_error: Exception | None = None
    try:
        copy.deepcopy(module)(*bad_inputs(inputs))
    except Exception as error:
        plain_error = error
    if plain_error is not None:
        with pytest.raises(type(plain_error), match=re.escape(str(plain_error))) as raised:
            trace_forward(module, *bad_inputs(inputs))
        assert type(raised.value) is type(plain_error)
        assert str(raised.value) == str(plain_error)
        checks["bad input: the plain forward's exception"] = True

    for check, passed in checks.items():
        assert passed, check
        record_property(f"layers {check}", 1)


class CallsItsChildTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.inner(x))


def test_the_hook_count_oracle_can_fail() -> None:
    # torch's hook sees the child twice; a trace of a model that calls it once does not match.
    _, seen = counted_by_torch(CallsItsChildTwice(), (torch.randn(2),))
    once = trace_forward(nn.Sequential(nn.ReLU()), torch.randn(2))

    assert seen["inner"] == 2
    assert Counter(call.path.replace("0", "inner") for call in once.calls) != seen


def test_torchs_known_meta_kernel_mismatch_multi_label_margin_loss() -> None:
    """torch's own: reduction="none" on a 1-D input is [] on the CPU and [1] on meta
    (docs/meta.md lists it). When torch fixes it this test says so."""
    loss = nn.MultiLabelMarginLoss(reduction="none")
    x, target = torch.randn(4), torch.tensor([1, 0, -1, 2])
    cpu = trace_forward(loss, x, target).render()
    meta = trace_forward(loss, x, target, device="meta").render()

    assert "-> f32[]" in cpu
    assert "-> f32[1]" in meta
