"""`fwdorder show --costs --sort flops [--top N]`: the table of the calls that spend the most.

Each test writes a small model module to its own folder and runs `main(argv)` from there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from facet_plugins import NestingTable, offered
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.cli.main import EXIT_ERROR, EXIT_SAME, main

MODEL_SOURCE = """
from torch import nn


def build():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 1),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(4, 4)

    def forward(self, x):
        return self.block(self.block(x))


def nested():
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Sequential(nn.Linear(4, 2))))
"""
SMALL = ["cost_table_models:build", "--input", "1x3x8x8", "--costs"]


@pytest.fixture(autouse=True)
def model_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cost_table_models.py").write_text(MODEL_SOURCE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def nested_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Sequential(nn.Linear(4, 2))))


def small_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 1),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )


def test_sort_flops_lists_every_call_by_flops_with_children(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["show", *SMALL, "--sort", "flops"])

    assert status == EXIT_SAME
    assert capsys.readouterr().out == (
        "# Sequential: 6 calls by FLOPs with children; forward total 108,544 FLOPs (109 k)\n"
        "FLOPs with children   share        own FLOPs              output  call\n"
        "    108,544 (109 k)  100.0%                0                40 B  <root> (Sequential)\n"
        "    55,296 (55.3 k)   50.9%  55,296 (55.3 k)  4,096 B (4.00 KiB)  0 (Conv2d)\n"
        "    32,768 (32.8 k)   30.2%  32,768 (32.8 k)  4,096 B (4.00 KiB)  2 (Conv2d)\n"
        "    20,480 (20.5 k)   18.9%  20,480 (20.5 k)                40 B  4 (Linear)\n"
        "                  0    0.0%                0  4,096 B (4.00 KiB)  1 (ReLU)\n"
        "                  0    0.0%                0  4,096 B (4.00 KiB)  3 (Flatten)\n"
        "FLOPs with children: the call's own operations and its children's; own FLOPs: its\n"
        "forward's outside its children; share: FLOPs with children / the forward's total;\n"
        "output: the bytes of its outputs\n"
    )


def test_sort_flops_figures_are_the_traces_own(capsys: pytest.CaptureFixture[str]) -> None:
    # The oracle: the API's trace of the same model, call by call.
    trace = trace_forward(small_model().eval(), torch.randn(1, 3, 8, 8), costs=True)

    main(["show", *SMALL, "--sort", "flops"])

    rows = capsys.readouterr().out.splitlines()[2:8]
    for call in trace.calls:
        assert call.costs is not None
        row = next(
            row for row in rows if row.endswith(f" {call.display_path} ({call.module_type})")
        )
        assert row.split()[0] == f"{call.costs.flops:,}"


def test_top_keeps_the_first_calls_by_own_flops(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["show", *SMALL, "--sort", "own-flops", "--top", "2"])

    lines = capsys.readouterr().out.splitlines()
    assert status == EXIT_SAME
    assert lines[0] == (
        "# Sequential: top 2 of 6 calls by own FLOPs; forward total 108,544 FLOPs (109 k)"
    )
    assert [line.rsplit("  ", 1)[1] for line in lines[2:4]] == ["0 (Conv2d)", "2 (Conv2d)"]
    assert lines[4].startswith("FLOPs with children: ")


def test_a_module_called_twice_is_named_with_its_call_number(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["show", "cost_table_models:Twice", "--input", "2x4", "--costs", "--sort", "flops"])

    calls = [line.rsplit("  ", 1)[1] for line in capsys.readouterr().out.splitlines()[2:5]]
    assert calls == ["<root> (Twice)", "block #1 (Linear)", "block #2 (Linear)"]


def test_sort_works_on_meta(capsys: pytest.CaptureFixture[str]) -> None:
    main(["show", *SMALL, "--sort", "flops"])
    on_cpu = capsys.readouterr().out

    main(["show", *SMALL, "--sort", "flops", "--device", "meta"])

    assert capsys.readouterr().out == on_cpu


def test_without_sort_costs_show_the_golden(capsys: pytest.CaptureFixture[str]) -> None:
    expected = trace_forward(small_model().eval(), torch.randn(1, 3, 8, 8), costs=True).render()

    main(["show", *SMALL])

    assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["cost_table_models:build", "--input", "1x3x8x8", "--sort", "flops"],
            "--sort flops needs the costs: add --costs to trace cost_table_models:build",
        ),
        ([*SMALL, "--top", "3"], "--top 3 needs --sort, such as --sort flops"),
        ([*SMALL, "--sort", "flops", "--top", "0"], "bad --top 0: give 1 or more calls"),
    ],
)
def test_sort_misuse_says_what_to_do(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["show", *arguments])

    assert status == EXIT_ERROR
    assert message in capsys.readouterr().err


def test_sort_refuses_a_golden_file(model_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = model_folder / "test_small.fwdorder.txt"
    golden.write_text(
        trace_forward(small_model().eval(), torch.randn(1, 3, 8, 8), costs=True).render(),
        encoding="utf-8",
    )

    status = main(["show", str(golden), "--costs", "--sort", "flops"])

    assert status == EXIT_ERROR
    assert "--sort flops needs a model TARGET (package.module:factory)" in capsys.readouterr().err


def test_an_unknown_sort_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["show", *SMALL, "--sort", "bytes"])

    assert status == EXIT_ERROR
    assert "invalid choice: 'bytes'" in capsys.readouterr().err


NESTED = ["cost_table_models:nested", "--input", "2x4", "--ops"]


def test_a_plugin_facets_table_is_sorted_by_its_own_order(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--sort` takes the orders the registered facets offer (`table_orders`); the oracle
    is the model's own nesting, read from its modules."""
    model = nested_model()
    depth = {path: path.count(".") + 1 if path else 0 for path, _ in model.named_modules()}
    with offered(request.config, NestingTable()):
        status = main(["show", *NESTED, "--sort", "depth", "--top", "2"])
    deepest = sorted(depth.items(), key=lambda item: -item[1])[:2]
    assert status == EXIT_SAME
    assert capsys.readouterr().out == "".join(f"{d}  {path}\n" for path, d in deepest)


def test_an_order_of_a_facet_left_out_of_the_trace_says_which_option_records_it(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    with offered(request.config, NestingTable()):
        status = main(["show", "cost_table_models:nested", "--input", "2x4", "--sort", "depth"])
    assert status == EXIT_ERROR
    assert "--sort depth needs the nesting: add --ops to trace cost_table_models:nested" in (
        capsys.readouterr().err
    )


def test_without_the_plugin_its_order_is_no_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", *NESTED, "--sort", "depth"]) == EXIT_ERROR
    assert "invalid choice: 'depth'" in capsys.readouterr().err
