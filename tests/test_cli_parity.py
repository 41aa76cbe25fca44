"""`fwdorder parity`: a port compared with a reference from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_models import Blocks

from pytest_fwdorder import record_reference
from pytest_fwdorder.cli.main import main

PORT = ["cli_models:Port", "--path-map", "cli_models:PORT_PATH_MAP"]


def test_a_port_with_the_reference_weights_matches(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["parity", "cli_models:Blocks", *PORT, "--input", "3x4"])

    output = capsys.readouterr().out
    assert status == 0, output
    assert output.startswith("the candidate matches the reference at all 8 paired calls\n")
    assert "  path map 'blocks.{i}' -> 'layers.{i}': 6 calls\n" in output


def test_a_broken_port_names_its_first_divergence_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "blocks.safetensors"
    record_reference(Blocks(), torch.randn(3, 4), path=path, weights=True)

    status = main(["parity", str(path), "cli_models:broken_port", *PORT[1:]])

    assert status == 1
    assert capsys.readouterr().out.startswith(
        "first divergence at out (reference head, paired call 7 of 8): relative error "
    )


def test_keeping_the_candidate_weights_shows_they_were_copied_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["parity", "cli_models:Blocks", *PORT, "--input", "3x4", "--keep-weights"])

    assert status == 1
    assert "first divergence at layers.0." in capsys.readouterr().out


def test_a_path_map_that_is_not_a_dict_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        [
            "parity",
            "cli_models:Blocks",
            "cli_models:Port",
            "--path-map",
            "cli_models:tiny",
            "--input",
            "3x4",
        ]
    )

    assert status == 2
    assert "--path-map 'cli_models:tiny' is a function, not a dict" in capsys.readouterr().err
