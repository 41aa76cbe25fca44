"""Meta under torch.no_grad(): torch's eval fast path is refused, never a silent difference.

Issue 33, defect 2. The oracle is torch itself: a dispatch mode sees whether a plain CPU
forward ran the fast path's fused kernel. Every setting below either gives a meta golden
equal to the CPU's, or a `MetaTraceError` exactly where the CPU ran the fused kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_fwdorder import MetaTraceError, trace_forward

FUSED_KERNELS = frozenset(
    {
        "aten._native_multi_head_attention.default",
        "aten._transformer_encoder_layer_fwd.default",
        "aten._nested_tensor_from_mask.default",
    }
)


class FusedKernelSeen(TorchDispatchMode):
    """The oracle: records whether any fast-path kernel ran."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if str(func) in FUSED_KERNELS:
            self.seen.add(str(func))
        return func(*args, **(kwargs or {}))


def cpu_takes_fast_path(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    with FusedKernelSeen() as oracle:
        module(*args, **kwargs)
    return bool(oracle.seen)


def test_the_oracle_sees_a_fast_path_and_its_absence() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        assert cpu_takes_fast_path(layer, (x,), {})
    assert not cpu_takes_fast_path(layer, (x,), {})  # grad enabled: the usual code


def test_the_issue_reproduction_is_a_meta_trace_error_naming_the_fast_path() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    with (
        torch.no_grad(),
        pytest.raises(
            MetaTraceError,
            match=r"TransformerEncoderLayer may take torch's eval fast path on the CPU "
            r"\(torch\._transformer_encoder_layer_fwd.*set_fastpath_enabled\(False\).*train mode, "
            r"or with grad enabled",
        ),
    ):
        trace_forward(layer, x, device="meta")


@contextmanager
def fast_path(enabled: bool) -> Iterator[None]:
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def test_with_the_fast_path_off_the_meta_golden_equals_the_cpu_golden() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    with torch.no_grad(), fast_path(False):
        cpu, meta = trace_forward(layer, x), trace_forward(layer, x, device="meta")

    assert len(cpu.calls) == 9
    assert cpu.render() == meta.render()


Case = tuple[Callable[[], nn.Module], Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]]


def attention_cases() -> Iterator[tuple[str, Case]]:
    # The fast path's own conditions, each turned off once from a setting that takes it.
    for batch_first, heads, bias, add_bias_kv, kdim in (
        (True, 2, True, False, None),
        (False, 2, True, False, None),
        (True, 3, True, False, None),
        (True, 2, False, False, None),
        (True, 2, True, True, None),
        (True, 2, True, False, 4),
    ):

        def build(
            batch_first=batch_first, heads=heads, bias=bias, add_bias_kv=add_bias_kv, kdim=kdim
        ):  # type: ignore[no-untyped-def]
            return nn.MultiheadAttention(
                6,
                heads,
                bias=bias,
                add_bias_kv=add_bias_kv,
                kdim=kdim,
                vdim=kdim,
                batch_first=batch_first,
            )

        def inputs(kdim=kdim):  # type: ignore[no-untyped-def]
            query = torch.randn(2, 3, 6)
            if kdim is None:
                return (query, query, query), {"need_weights": False}
            other = torch.randn(2, 3, kdim)
            return (query, other, other), {}

        yield f"attention-bf{batch_first}-h{heads}-b{bias}-kv{add_bias_kv}-k{kdim}", (build, inputs)
    yield (
        "attention-keywords",
        (
            lambda: nn.MultiheadAttention(6, 2, batch_first=True),
            lambda: ((), {"query": (q := torch.randn(2, 3, 6)), "key": q, "value": q}),
        ),
    )


def layer_cases() -> Iterator[tuple[str, Case]]:
    for batch_first, heads, activation, norm_first, eps in (
        (True, 2, "relu", False, 1e-5),
        (True, 2, "gelu", True, 1e-5),
        (False, 2, "relu", False, 1e-5),
        (True, 3, "relu", False, 1e-5),
        (True, 2, torch.tanh, False, 1e-5),
        (True, 2, "relu", False, None),
    ):

        def build(
            batch_first=batch_first,
            heads=heads,
            activation=activation,
            norm_first=norm_first,
            eps=eps,
        ):  # type: ignore[no-untyped-def]
            layer = nn.TransformerEncoderLayer(
                6,
                heads,
                dim_feedforward=8,
                activation=activation,
                norm_first=norm_first,
                batch_first=batch_first,
            )
            if eps is None:
                layer.norm2.eps = 1e-3
            return layer

        name = getattr(activation, "__name__", activation)
        yield (
            f"layer-bf{batch_first}-h{heads}-{name}-nf{norm_first}-eps{eps}",
            (
                build,
                lambda: ((torch.randn(2, 3, 6),), {}),
            ),
        )
    yield (
        "layer-keyword-src",
        (
            lambda: nn.TransformerEncoderLayer(6, 2, dim_feedforward=8, batch_first=True),
            lambda: ((), {"src": torch.randn(2, 3, 6)}),
        ),
    )
    yield (
        "layer-unbatched",
        (
            lambda: nn.TransformerEncoderLayer(6, 2, dim_feedforward=8, batch_first=True),
            lambda: ((torch.randn(3, 6),), {}),
        ),
    )


def encoder_cases() -> Iterator[tuple[str, Case]]:
    for nested, padding, batch_first in itertools.product((True, False), (True, False), (True,)):

        def build(nested=nested, batch_first=batch_first):  # type: ignore[no-untyped-def]
            layer = nn.TransformerEncoderLayer(6, 2, dim_feedforward=8, batch_first=batch_first)
            return nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested)

        def inputs(padding=padding, batch_first=batch_first):  # type: ignore[no-untyped-def]
            x = torch.randn(2, 3, 6) if batch_first else torch.randn(3, 2, 6)
            if not padding:
                return (x,), {}
            return (x,), {"src_key_padding_mask": torch.tensor([[False, False, True]] * 2)}

        yield f"encoder-nested{nested}-padding{padding}-bf{batch_first}", (build, inputs)


CASES = [*attention_cases(), *layer_cases(), *encoder_cases()]


@pytest.mark.layers
@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: "enable_nested_tensor is True, but ..."
@pytest.mark.parametrize(
    ("mode", "grad"),
    [("eval", "no_grad"), ("eval", "grad"), ("eval", "frozen"), ("train", "no_grad")],
)
@pytest.mark.parametrize(
    ("build", "inputs"), [pytest.param(*case, id=name) for name, case in CASES]
)
def test_meta_equals_the_cpu_or_refuses_exactly_where_the_cpu_takes_the_fast_path(
    build: Callable[[], nn.Module],
    inputs: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]],
    mode: str,
    grad: str,
) -> None:
    torch.manual_seed(0)
    module = build().train(mode == "train")
    if grad == "frozen":
        module.requires_grad_(False)
    args, kwargs = inputs()
    context = torch.no_grad() if grad == "no_grad" else nullcontext()
    with context:
        fast = cpu_takes_fast_path(module, args, kwargs)
        cpu = trace_forward(module, *args, **kwargs).render()
        try:
            meta = trace_forward(module, *args, **kwargs, device="meta").render()
        except MetaTraceError as error:
            if "may take torch's eval fast path" in str(error):
                assert fast, "refused a call the CPU runs without the fast path"
            # Otherwise torch failed on meta first (TransformerEncoder's mask check has no
            # meta kernel): an error, not a silent difference.
            return
    # Not refused: the golden is the CPU's, also where the CPU ran MultiheadAttention's
    # fused kernel (which calls no submodule on either path).
    assert meta == cpu
