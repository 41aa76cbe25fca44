"""The golden text: one line per call, whatever the names hold."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.golden.parse import parse_golden


class Routed(nn.Module):
    """Calls the module registered under `name` in a ModuleDict, and one it never calls."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.routes = nn.ModuleDict({name: nn.Linear(4, 4), f"spare{name}": nn.ReLU()})
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.routes[self.name](x)


@pytest.mark.parametrize("name", ["a\nb", "a\rb", "a\x85b", "a\u2028b", "a\x0bb"])
def test_a_name_with_a_line_break_stays_on_its_own_line_written_as_an_escape(name: str) -> None:
    text = trace_forward(Routed(name), torch.randn(1, 4)).render()

    escaped = name.encode("unicode_escape").decode("ascii")
    _, calls = parse_golden(text)
    assert [line.path for line in calls] == ["<root>", f"routes.{escaped}"]
    assert f"#   routes.spare{escaped}: ReLU" in text.splitlines()


def test_printable_names_are_written_as_they_are() -> None:
    text = trace_forward(Routed("café_層"), torch.randn(1, 4)).render()

    assert "  routes.café_層: Linear (f32[1,4]) -> f32[1,4]" in text.splitlines()


def test_multihead_attentions_out_proj_is_used_through_its_parameters_without_ops() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()

    header = [
        line
        for line in trace_forward(layer, torch.randn(1, 3, 8)).render().splitlines()
        if line.startswith("#")
    ]

    assert "# registered but never called (0)" in header
    assert header[header.index("# used through its parameters (1):") + 1] == (
        "#   self_attn.out_proj: NonDynamicallyQuantizableLinear | weight f32[8,8], bias f32[8] "
        "used by multi_head_attention_forward in self_attn"
    )


def test_a_user_modules_uncalled_child_named_out_proj_stays_never_called() -> None:
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out_proj = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    text = trace_forward(nn.Sequential(Attention()), torch.randn(1, 4)).render()

    assert "#   0.out_proj: Linear | weight f32[4,4], bias f32[4]" in text.splitlines()


class KeywordOnly(nn.Module):
    def forward(self, x: torch.Tensor, *, a: int = 0, b: int = 0) -> torch.Tensor:
        return x


def test_keyword_only_arguments_follow_the_signature_not_the_call() -> None:
    """Found reviewing 0.2.0: keyword-only arguments were written in the caller's order."""

    class Calls(nn.Module):
        def __init__(self, swapped: bool) -> None:
            super().__init__()
            self.inner = KeywordOnly()
            self.swapped = swapped

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x, b=3, a=4) if self.swapped else self.inner(x, a=4, b=3)

    assert trace_forward(Calls(False), torch.ones(1)).render() == (
        trace_forward(Calls(True), torch.ones(1)).render()
    )
