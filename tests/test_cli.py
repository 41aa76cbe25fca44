"""The `fwdorder` command line: `show` and `diff`, their exit statuses and their errors.

Most tests run `main(argv)` in this process on the small models of `cli_models`; one runs
`python -m pytest_fwdorder` in a child process.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from cli_models import tiny, tiny_with_dropout

from pytest_fwdorder import TensorSpec, trace_forward
from pytest_fwdorder.cli.main import EXIT_DIFFERENT, EXIT_ERROR, EXIT_SAME, main
from pytest_fwdorder.cli.parser import build_parser
from pytest_fwdorder.golden.folding import fold_golden
from pytest_fwdorder.golden.parse import parse_golden
from pytest_fwdorder.options import OPTION_NAMES

TINY = ["cli_models:tiny", "--input", "2x4"]
ESCAPE = "\x1b["


def tiny_golden() -> str:
    return trace_forward(tiny().eval(), TensorSpec((2, 4))).render()


@pytest.fixture
def golden_file(tmp_path: Path) -> Path:
    path = tmp_path / "test_tiny.fwdorder.txt"
    path.write_text(tiny_golden(), encoding="utf-8")
    return path


def test_show_prints_the_golden_text_the_api_renders(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["show", *TINY])

    assert status == EXIT_SAME
    assert capsys.readouterr().out == tiny_golden()


def test_show_accepts_a_model_class(capsys: pytest.CaptureFixture[str]) -> None:
    main(["show", "cli_models:Tiny", "--input", "2x4"])

    assert capsys.readouterr().out == tiny_golden()


def test_show_prints_a_golden_file_as_it_is(
    golden_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["show", str(golden_file)])

    assert status == EXIT_SAME
    assert capsys.readouterr().out == golden_file.read_text(encoding="utf-8")


def test_models_are_traced_in_train_mode_only_with_train(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["show", *TINY, "--train"])

    assert "# mode: train" in capsys.readouterr().out.splitlines()


def test_depth_folds_deeper_calls_into_their_parent(capsys: pytest.CaptureFixture[str]) -> None:
    main(["show", *TINY, "--depth", "1"])

    _, calls = parse_golden(capsys.readouterr().out)
    assert [call.path for call in calls] == ["<root>", "body", "head"]
    assert calls[1].text.endswith("-> f32[2,8] [+2 calls folded]")


def test_folding_at_depth_zero_keeps_the_header_and_the_root_call() -> None:
    folded = fold_golden(tiny_golden(), 0)

    header, _, body = folded.partition("<root>")
    assert header.splitlines() == [line for line in tiny_golden().splitlines() if line[0] == "#"]
    assert body.strip().endswith("-> f32[2,2] [+4 calls folded]")


def test_folding_at_a_negative_depth_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cannot fold at depth -1: use 0"):
        fold_golden(tiny_golden(), -1)


def test_input_dtype_sets_the_dtype_of_the_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    main(["show", "cli_models:embedding", "--input", "2x5", "--input-dtype", "int64"])

    assert "<root>: Embedding (i64[2,5]) -> f32[2,5,3]" in capsys.readouterr().out


def test_the_trace_options_are_the_names_every_entry_point_takes() -> None:
    parser = build_parser()
    show = parser._subparsers._group_actions[0].choices["show"]  # type: ignore[union-attr]
    group = next(group for group in show._action_groups if group.title.startswith("trace"))

    flags = {flag for action in group._group_actions for flag in action.option_strings}

    assert flags == {"--" + name.replace("_", "-") for name in OPTION_NAMES}


def test_hide_leaves_facets_out(capsys: pytest.CaptureFixture[str]) -> None:
    main(["show", *TINY, "--hide", "settings,parameters", "--hide", "mode"])

    text = capsys.readouterr().out
    assert "# hidden: mode, parameters, settings" in text
    assert "| settings:" not in text


def test_show_devices_writes_each_tensors_device(capsys: pytest.CaptureFixture[str]) -> None:
    main(["show", *TINY, "--show-devices"])

    assert "<root>: Tiny (f32[2,4]@cpu) -> f32[2,2]@cpu" in capsys.readouterr().out


def test_the_meta_device_gives_the_cpu_golden(capsys: pytest.CaptureFixture[str]) -> None:
    main(["show", *TINY, "--device", "meta"])

    assert capsys.readouterr().out == tiny_golden()


def test_unregistered_error_stops_at_a_module_kept_in_a_plain_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["show", "cli_models:Unregistered", "--input", "1x4", "--unregistered", "error"])

    assert status == EXIT_ERROR
    error = capsys.readouterr().err
    assert error.startswith("fwdorder: error: running cli_models:Unregistered on inputs 1x4")
    assert "UnregisteredModuleError" in error
    assert error.count("\n") == 1


def test_diff_of_equal_traces_says_so_and_exits_0(
    golden_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["diff", str(golden_file), *TINY])

    assert status == EXIT_SAME
    assert capsys.readouterr().out == "no differences\n"


def test_diff_prints_the_summary_then_the_aligned_calls_and_exits_1(
    golden_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["diff", str(golden_file), "cli_models:tiny_with_dropout", "--input", "2x4"])

    assert status == EXIT_DIFFERENT
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        "5 calls before, 6 after: 1 call inserted",
        "1 call inserted: body.2 (Dropout) after body.1 (ReLU)",
    ]
    assert "+     body.2: Dropout (f32[2,8]) -> f32[2,8]" in lines


def test_diff_explains_like_the_api(golden_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = trace_forward(tiny_with_dropout().eval(), TensorSpec((2, 4)))
    new_file = golden_file.with_name("new.fwdorder.txt")
    new_file.write_text(new.render(), encoding="utf-8")

    main(["diff", str(golden_file), str(new_file)])

    expected = trace_forward(tiny().eval(), TensorSpec((2, 4))).diff(new).explanation()
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["show", "cli_models", "--input", "2x4"],
            "TARGET 'cli_models' is neither a file nor package.module:factory",
            id="not-a-target",
        ),
        pytest.param(
            ["show", "no_such_models:build", "--input", "2x4"],
            "cannot import 'no_such_models' for TARGET 'no_such_models:build': No module named",
            id="no-module",
        ),
        pytest.param(
            ["show", "cli_models:tinny", "--input", "2x4"],
            "'cli_models' has no attribute 'tinny' (TARGET 'cli_models:tinny'); did you mean "
            "'tiny'",
            id="no-attribute",
        ),
        pytest.param(
            ["show", "cli_models:NeedsWidth", "--input", "2x4"],
            "TARGET 'cli_models:NeedsWidth' needs arguments to build the model (width)",
            id="needs-arguments",
        ),
        pytest.param(
            ["show", "cli_models:NUMBER", "--input", "2x4"],
            "TARGET 'cli_models:NUMBER' is a int, not a model class",
            id="not-callable",
        ),
        pytest.param(
            ["show", "cli_models:not_a_model", "--input", "2x4"],
            "cli_models:not_a_model() returned 'int', not an nn.Module",
            id="builds-no-model",
        ),
        pytest.param(
            ["show", "cli_models:broken", "--input", "2x4"],
            "building the model with cli_models:broken() failed: RuntimeError: the checkpoint "
            "is missing",
            id="build-fails",
        ),
        pytest.param(
            ["show", "cli_models:broken", "--input", "2x4", "--device", "meta"],
            "building the model with cli_models:broken() failed: RuntimeError: the checkpoint "
            "is missing",
            id="build-fails-on-meta",
        ),
        pytest.param(
            ["show", "cli_models:tiny", "--input", "2x5"],
            # torch's own words follow: "mat1 and mat2 shapes cannot be multiplied" (torch 2.15
            # starts them with "addmm: "); the next test checks they are kept.
            "running cli_models:tiny on inputs 2x5 failed: RuntimeError: ",
            id="forward-fails",
        ),
        pytest.param(
            ["show", "cli_models:tiny", "--input", "2,4"],
            "bad --input '2,4': write the sizes of one tensor joined by 'x', such as",
            id="bad-input",
        ),
        pytest.param(
            ["show", "cli_models:tiny"],
            "TARGET 'cli_models:tiny' is a model: give its input sizes, such as --input",
            id="no-input",
        ),
        pytest.param(
            ["show", *TINY, "--input-dtype", "float23"],
            "bad --input-dtype 'float23': use a torch dtype name such as float32",
            id="bad-dtype",
        ),
        pytest.param(
            ["show", *TINY, "--input-dtype", "float32", "--input-dtype", "int64"],
            "2 --input-dtype for 1 --input: give one dtype for every input, or one per --input",
            id="dtype-count",
        ),
        pytest.param(
            ["show", *TINY, "--device", "gpu0"],
            "--device 'gpu0' is not a torch device (Invalid device string: 'gpu0'): use 'cpu', "
            "'meta' or 'cuda'",
            id="bad-device",
        ),
        pytest.param(
            ["show", *TINY, "--hide", "weights"],
            "cannot hide 'weights': the facets are settings",
            id="bad-facet",
        ),
        pytest.param(
            ["show", *TINY, "--unregistered", "ignore"],
            "unregistered must be 'warn' or 'error', got 'ignore'",
            id="bad-policy",
        ),
        pytest.param(
            ["show", *TINY, "--depth", "-1"],
            "bad --depth -1: give 0 (the root call only) or more",
            id="bad-depth",
        ),
    ],
)
def test_problems_are_one_line_errors_with_exit_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(argv)

    error = capsys.readouterr().err
    assert status == EXIT_ERROR
    assert error.startswith("fwdorder: error: ")
    assert message in error
    assert error.count("\n") == 1


def test_a_failing_forward_keeps_torchs_own_message(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["show", "cli_models:tiny", "--input", "2x5"])

    assert status == EXIT_ERROR
    assert "mat1 and mat2 shapes cannot be multiplied (2x5 and 4x8)" in capsys.readouterr().err


def test_a_file_that_is_not_a_golden_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n", encoding="utf-8")

    status = main(["show", str(notes)])

    assert status == EXIT_ERROR
    assert "is not a pytest-fwdorder golden file: its first line is 'hello'" in (
        capsys.readouterr().err
    )


def test_a_golden_of_another_format_says_to_regenerate_it(
    golden_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = golden_file.with_name("old.fwdorder.txt")
    old.write_text(tiny_golden().replace("(format 2)", "(format 1)"), encoding="utf-8")

    status = main(["diff", str(old), str(golden_file)])

    assert status == EXIT_ERROR
    assert "was written in format 1; this pytest-fwdorder writes format 2: regenerate it" in (
        capsys.readouterr().err
    )


def test_usage_errors_exit_with_2(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["compare", "a", "b"])

    assert status == EXIT_ERROR
    assert "invalid choice: 'compare'" in capsys.readouterr().err


def test_colour_on_a_terminal(
    golden_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)

    main(["show", str(golden_file)])

    assert ESCAPE in capsys.readouterr().out


def test_no_colour_on_a_terminal_when_no_color_is_set(
    golden_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)

    main(["show", str(golden_file)])

    assert ESCAPE not in capsys.readouterr().out


def test_no_colour_when_stdout_is_not_a_terminal(
    golden_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)

    main(["diff", str(golden_file), "cli_models:tiny_with_dropout", "--input", "2x4"])

    assert ESCAPE not in capsys.readouterr().out


def test_python_dash_m_runs_the_command_in_a_fresh_process(golden_file: Path) -> None:
    changed = golden_file.with_name("changed.fwdorder.txt")
    new = trace_forward(tiny_with_dropout().eval(), torch.randn(2, 4))
    changed.write_text(new.render(), encoding="utf-8")

    result = subprocess.run(
        [sys.executable, "-m", "pytest_fwdorder", "diff", str(golden_file), str(changed)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": ""},
        timeout=120,
    )

    assert result.returncode == EXIT_DIFFERENT, result.stderr
    assert result.stdout.startswith("5 calls before, 6 after: 1 call inserted\n")


def test_the_console_script_is_declared() -> None:
    scripts = importlib.metadata.entry_points(group="console_scripts")

    assert [script.value for script in scripts if script.name == "fwdorder"] == [
        "pytest_fwdorder.cli.main:main"
    ]


@pytest.mark.parametrize("builder", ["exits_quietly", "exits_with_a_reason"])
def test_a_builder_that_exits_instead_of_returning_a_model_is_an_error(
    builder: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["diff", f"cli_models:{builder}", "cli_models:tiny", "--input", "2x4"])

    captured = capsys.readouterr()
    assert status == EXIT_ERROR
    assert captured.out == ""
    assert captured.err == (
        f"fwdorder: error: building the model with cli_models:{builder}() failed: it called "
        "sys.exit() instead of returning a model: point TARGET at a function that returns "
        "the model\n"
    )


def test_non_ascii_names_on_a_cp1252_output_are_written_with_replacement_characters(
    tmp_path: Path,
) -> None:
    tests_folder = Path(__file__).resolve().parent
    result = subprocess.run(
        [sys.executable, "-m", "pytest_fwdorder", "show", "cli_models:Accented", "--input", "1x4"],
        capture_output=True,
        check=False,
        cwd=tests_folder,
        env={**os.environ, "PYTHONIOENCODING": "cp1252", "NO_COLOR": "1"},
        timeout=120,
    )

    assert result.returncode == EXIT_SAME, result.stderr.decode(errors="replace")
    assert b"  couche_?: Linear (f32[1,4]) -> f32[1,4]" in result.stdout


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--version"])

    assert status == EXIT_SAME
    assert capsys.readouterr().out == (
        f"fwdorder {importlib.metadata.version('pytest-fwdorder')}\n"
    )


def test_a_golden_of_a_newer_format_says_to_upgrade_not_regenerate(
    golden_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = golden_file.with_name("newer.fwdorder.txt")
    newer.write_text(tiny_golden().replace("(format 2)", "(format 3)"), encoding="utf-8")

    status = main(["diff", str(newer), str(golden_file)])

    assert status == EXIT_ERROR
    assert "was written in format 3 by a newer pytest-fwdorder; this one reads and writes " in (
        capsys.readouterr().err
    )


CONFLICTED = "<<<<<<< HEAD\n{golden}=======\n{golden}>>>>>>> feature\n"


@pytest.mark.parametrize("command", ["show", "diff"])
def test_a_golden_with_merge_conflict_markers_is_refused_as_pytest_refuses_it(
    command: str, golden_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conflicted = golden_file.with_name("conflicted.fwdorder.txt")
    conflicted.write_text(CONFLICTED.format(golden=tiny_golden()), encoding="utf-8")
    paths = [str(conflicted)] if command == "show" else [str(golden_file), str(conflicted)]

    status = main([command, *paths])

    assert status == EXIT_ERROR
    assert "holds unresolved merge-conflict markers (<<<<<<<, =======, >>>>>>>): resolve" in (
        capsys.readouterr().err
    )


def test_an_empty_golden_is_said_to_be_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "test_empty.fwdorder.txt"
    empty.write_text("", encoding="utf-8")

    status = main(["show", str(empty)])

    assert status == EXIT_ERROR
    assert "is empty" in capsys.readouterr().err


class _BrokenFacetsPlugin:
    """A plugin whose facets hook has a bug of its own."""

    def pytest_fwdorder_facets(self) -> list[object]:
        raise RuntimeError("the plugin's own bug")


@pytest.fixture
def broken_facets(request: pytest.FixtureRequest) -> Iterator[None]:
    """The broken plugin, registered under the name an entry point would give it."""
    manager = request.config.pluginmanager
    manager.register(_BrokenFacetsPlugin(), name="broken-facets")
    try:
        yield
    finally:
        manager.unregister(name="broken-facets")


def test_help_works_when_a_plugins_facets_hook_raises(
    broken_facets: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--help"]) == EXIT_SAME
    assert "commands:" in capsys.readouterr().out
    assert main(["show", "--help"]) == EXIT_SAME
    assert "--svg" in capsys.readouterr().out


def test_showing_a_golden_needs_no_facets_and_works_when_a_plugins_hook_raises(
    golden_file: Path, broken_facets: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(golden_file)]) == EXIT_SAME
    assert capsys.readouterr().out == golden_file.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["diff", "show-model", "show-sort"])
def test_a_command_that_needs_the_facets_names_the_broken_plugin_and_what_to_do(
    golden_file: Path, broken_facets: None, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = {
        "diff": ["diff", str(golden_file), str(golden_file)],
        "show-model": ["show", "cli_models:tiny", "--input", "2x4"],
        # The orders of `--sort` come from the facets: a built-in one is still no usage error.
        "show-sort": ["show", "cli_models:tiny", "--input", "2x4", "--costs", "--sort", "flops"],
    }[command]

    status = main(arguments)

    error = capsys.readouterr().err.splitlines()[-1]
    assert status == EXIT_ERROR
    assert error.startswith(
        "fwdorder: error: RuntimeError: the plugin's own bug (from the pytest_fwdorder_facets "
        "hook of the plugin 'broken-facets' ("
    )
    assert "_BrokenFacetsPlugin.pytest_fwdorder_facets))" in error
    assert f"; `fwdorder {arguments[0]}` needs the facets (pytest_fwdorder_facets): " in error
    assert "fix or uninstall the plugin" in error


def test_a_missing_svg_section_option_says_the_broken_plugin_took_it_away(
    golden_file: Path, broken_facets: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["show", str(golden_file), "--svg", "-", "--svg-backward"])

    error = capsys.readouterr().err.splitlines()[-1]
    assert status == EXIT_ERROR
    assert error.startswith("fwdorder: error: unrecognized arguments: --svg-backward (the facets'")
    assert "hook of the plugin 'broken-facets' (" in error


class _NoFacetPlugin:
    """A plugin whose facets hook returns something that is no facet."""

    def pytest_fwdorder_facets(self) -> list[object]:
        return [object()]


def test_a_plugin_that_offers_no_facet_is_named(
    golden_file: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    manager = request.config.pluginmanager
    manager.register(_NoFacetPlugin(), name="offers-an-object")
    try:
        status = main(["diff", str(golden_file), str(golden_file)])
    finally:
        manager.unregister(name="offers-an-object")

    error = capsys.readouterr().err.splitlines()[-1]
    assert status == EXIT_ERROR
    # The hook returned, so no traceback names it; the plugin that offered the object is
    # named all the same (it read "one of the plugins that offer facets", listing them all).
    assert "fwdorder: error: TypeError: pytest_fwdorder_facets returned <object object at " in (
        error
    )
    assert "(from the pytest_fwdorder_facets hook of the plugin 'offers-an-object' (" in error


def test_without_the_broken_plugin_the_same_commands_work(
    golden_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The oracle that the failures above are the plugin's: the commands themselves work.
    assert main(["diff", str(golden_file), str(golden_file)]) == EXIT_SAME
    assert main(["show", "cli_models:tiny", "--input", "2x4"]) == EXIT_SAME
    assert "broken" not in capsys.readouterr().err
