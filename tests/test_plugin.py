"""The plugin as a user sees it: fixtures, golden files, failures, updates, xdist."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fwdorder.golden.upgrades import environment_line

MODEL_TEST = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, {width})
        self.act = nn.{activation}()

    def forward(self, x):
        x = self.act(self.linear(x))
        {extra_line}
        return x


def test_block(forward_trace, snapshot):
    block = Block().to(torch.{dtype})
    trace = forward_trace(block, torch.randn(2, 4, dtype=torch.{dtype}))
    assert trace == snapshot
"""

DEFAULTS = {"width": 8, "activation": "ReLU", "extra_line": "", "dtype": "float32"}
GOLDEN = Path("__snapshots__/test_model/test_block.fwdorder.txt")


def containing(text: str) -> str:
    """An fnmatch pattern for a line containing `text` literally (golden text has brackets)."""
    escaped = "".join({"[": "[[]", "]": "[]]", "*": "[*]", "?": "[?]"}.get(c, c) for c in text)
    return f"*{escaped}*"


def write_model_test(pytester: pytest.Pytester, **changes: str | int) -> None:
    pytester.makepyfile(test_model=MODEL_TEST.format(**{**DEFAULTS, **changes}))


@pytest.fixture
def accepted(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose golden file was written and accepted."""
    write_model_test(pytester)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    return pytester


def test_a_missing_golden_fails_and_says_it_does_not_exist(pytester: pytest.Pytester) -> None:
    write_model_test(pytester)

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Snapshot 'test_block' does not exist!*", "*--snapshot-update*"])


def test_snapshot_update_writes_a_readable_golden_file(pytester: pytest.Pytester) -> None:
    write_model_test(pytester)

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)

    assert (pytester.path / GOLDEN).read_text() == (
        "# pytest-fwdorder trace (format 2)\n"
        f"{environment_line()}\n"
        "# model: Block\n"
        "# mode: train\n"
        "# calls: 3\n"
        "# modules called: 3\n"
        "# parameters: 40 (trainable 40, frozen 0)\n"
        "# buffers: 0\n"
        "# called more than once (0)\n"
        "# registered but never called (0)\n"
        "# called but not registered under the model (0)\n"
        "<root>: Block (f32[2,4]) -> f32[2,8]\n"
        "  linear: Linear (f32[2,4]) -> f32[2,8]\n"
        "    | settings: in_features=4, out_features=8, bias=True\n"
        "    | parameters: weight f32[8,4], bias f32[8]\n"
        "  act: ReLU (f32[2,8]) -> f32[2,8]\n"
        "    | settings: inplace=False\n"
    )


def test_a_rerun_against_the_accepted_golden_passes(accepted: pytest.Pytester) -> None:
    result = accepted.runpytest()

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 snapshot passed*"])


@pytest.mark.parametrize(
    ("change", "summary", "diff_lines"),
    [
        pytest.param(
            {"activation": "GELU"},
            "type changed at act: ReLU -> GELU",
            ["-   act: ReLU (f32[2,8]) -> f32[2,8]", "+   act: GELU (f32[2,8]) -> f32[2,8]"],
            id="class",
        ),
        pytest.param(
            {"width": 6},
            "output changed at 1 call: linear (Linear) output (2, 8) -> (2, 6), and so the "
            "input of act (ReLU), its output and the output of the model",
            [
                "-   linear: Linear (f32[2,4]) -> f32[2,8]",
                "+   linear: Linear (f32[2,4]) -> f32[2,6]",
            ],
            id="shape",
        ),
        pytest.param(
            {"dtype": "float64"},
            # The whole model cast: said once, by place (diff/uniform_changes.py).
            "dtype f32 -> f64 in the model: the parameters of 1 call, 1 input and 1 output "
            "(and 4 more inputs and outputs they passed on)",
            ["- <root>: Block (f32[2,4]) -> f32[2,8]", "+ <root>: Block (f64[2,4]) -> f64[2,8]"],
            id="dtype",
        ),
        pytest.param(
            {"extra_line": "x = self.act(x)"},
            "1 call inserted: act #2 (ReLU) after act #1 (ReLU)",
            [
                "-   act: ReLU (f32[2,8]) -> f32[2,8]",
                "+   act: ReLU #1 (f32[2,8]) -> f32[2,8]",
                "+   act: ReLU #2 ",
            ],
            id="reuse-count",
        ),
    ],
)
def test_a_changed_model_fails_with_a_summary_and_the_changed_lines(
    accepted: pytest.Pytester, change: dict[str, str | int], summary: str, diff_lines: list[str]
) -> None:
    write_model_test(accepted, **change)

    result = accepted.runpytest("-vv")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([containing(summary)])
    result.stdout.fnmatch_lines([containing(line) for line in diff_lines])


def test_a_changed_call_order_fails_naming_the_moved_call(accepted: pytest.Pytester) -> None:
    source = (accepted.path / "test_model.py").read_text()
    reordered = (
        source.replace("x = self.act(self.linear(x))", "x = self.linear(self.act(x))")
        .replace("nn.Linear(4, 8)", "nn.Linear(4, 4)")
        .replace("(4, {width})", "(4, 4)")
    )
    (accepted.path / "test_model.py").write_text(reordered)

    result = accepted.runpytest("-vv")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([containing("linear (Linear) and act (ReLU) swapped")])


def test_reuse_count_change_is_named_in_the_summary(accepted: pytest.Pytester) -> None:
    write_model_test(accepted, extra_line="x = self.act(x)")

    result = accepted.runpytest("-vv")

    result.stdout.fnmatch_lines(["*reuse count changed: act 1 -> 2*"])


def test_snapshot_update_accepts_an_intended_change(accepted: pytest.Pytester) -> None:
    write_model_test(accepted, activation="GELU")

    accepted.runpytest("--snapshot-update").assert_outcomes(passed=1)
    result = accepted.runpytest()

    result.assert_outcomes(passed=1)
    assert "act: GELU" in (accepted.path / GOLDEN).read_text()


def rename_test(project: pytest.Pytester) -> None:
    source = (project.path / "test_model.py").read_text()
    (project.path / "test_model.py").write_text(
        source.replace("def test_block", "def test_renamed")
    )


def test_a_golden_whose_test_was_removed_is_reported_unused(accepted: pytest.Pytester) -> None:
    rename_test(accepted)

    result = accepted.runpytest("--snapshot-update")
    rename_test(accepted)  # a no-op: the file is already renamed
    reported = accepted.runpytest()

    result.stdout.fnmatch_lines(["*1 snapshot generated. 1 unused snapshot deleted.*"])
    reported.assert_outcomes(passed=1)


def test_an_unused_golden_fails_the_run_until_it_is_cleaned_up(accepted: pytest.Pytester) -> None:
    rename_test(accepted)
    accepted.runpytest("--snapshot-update", "-k", "nothing_matches")

    result = accepted.runpytest("-p", "no:randomly")

    assert (accepted.path / GOLDEN).exists()
    result.stdout.fnmatch_lines(["*1 snapshot unused*"])


def test_snapshot_update_deletes_the_unused_golden(accepted: pytest.Pytester) -> None:
    rename_test(accepted)

    accepted.runpytest("--snapshot-update").assert_outcomes(passed=1)

    assert not (accepted.path / GOLDEN).exists()
    assert (accepted.path / "__snapshots__/test_model/test_renamed.fwdorder.txt").exists()


def test_two_trace_assertions_in_one_test_get_two_golden_files(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_two="""
        import torch
        from torch import nn

        def test_pair(forward_trace, snapshot):
            assert forward_trace(nn.ReLU(), torch.randn(1)) == snapshot
            assert forward_trace(nn.Tanh(), torch.randn(1)) == snapshot(name="tanh")
        """
    )

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)

    written = sorted(path.name for path in (pytester.path / "__snapshots__" / "test_two").iterdir())
    assert written == ["test_pair.fwdorder.txt", "test_pair[tanh].fwdorder.txt"]
    pytester.runpytest().assert_outcomes(passed=1)


def test_xdist_gives_the_same_results(accepted: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    accepted.makepyfile(
        test_more="""
        import torch
        from torch import nn

        def test_other(forward_trace, snapshot):
            assert forward_trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), torch.randn(1, 2)) == snapshot
        """
    )
    accepted.runpytest("-n", "2", "--snapshot-update").assert_outcomes(passed=2)

    passing = accepted.runpytest("-n", "2")
    write_model_test(accepted, activation="GELU")
    failing = accepted.runpytest("-n", "2")

    passing.assert_outcomes(passed=2)
    failing.assert_outcomes(passed=1, failed=1)
    failing.stdout.fnmatch_lines(["*type changed at act: ReLU -> GELU*"])


def test_comparing_two_traces_explains_the_difference(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_compare="""
        import torch
        from torch import nn

        def test_compare(forward_trace):
            before = forward_trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), torch.randn(1, 2))
            after = forward_trace(nn.Sequential(nn.Linear(2, 2), nn.LeakyReLU()), torch.randn(1, 2))
            assert after == before
        """
    )

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*traces differ (- right, + left):*", "*type changed at 1: ReLU -> LeakyReLU*"]
    )


def test_the_marker_sets_defaults_for_the_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_marker="""
        import pytest, torch
        from torch import nn

        @pytest.mark.fwdorder(show_devices=True)
        def test_devices(forward_trace):
            assert "f32[1,2]@cpu" in forward_trace(nn.ReLU(), torch.randn(1, 2)).render()
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_the_ini_option_sets_the_device_for_the_whole_project(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_device = meta\n")
    pytester.makepyfile(
        test_meta_ini_option="""
        import torch
        from torch import nn

        def test_meta(forward_trace):
            trace = forward_trace(lambda: nn.Linear(2, 3), torch.randn(1, 2))
            assert trace[0].output_tensors[0].device == "meta"
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_a_positional_marker_argument_is_one_line_naming_the_options(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_bad_marker="""
        import pytest

        @pytest.mark.fwdorder("meta")
        def test_bad(forward_trace):
            pass
        """
    )

    result = pytester.runpytest()

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*takes keyword arguments only, got ('meta',)*"])
    assert "plugin.py" not in result.stdout.str()  # no plugin source in the report


def test_the_ini_device_applies_to_record_too(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_device = meta\n")
    pytester.makepyfile(
        test_meta_record="""
        import torch
        from torch import nn

        def test_meta(forward_trace):
            model = nn.Linear(2, 3)
            with forward_trace.record(model) as trace:
                model(torch.empty(1, 2))  # made inside the block: on meta
            assert trace[0].output_tensors[0].device == "meta"
            assert model.weight.device.type == "cpu"
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_a_suite_that_never_traces_does_not_import_torch(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            print("torch imported:", "torch" in sys.modules)
        """
    )
    pytester.makepyfile(test_nothing="def test_nothing(): pass")

    result = pytester.runpytest_subprocess("-s", "-p", "fwdorder")

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*torch imported: False*"])


def test_pytest_start_up_imports_no_facet_golden_or_diff_module(
    pytester: pytest.Pytester,
) -> None:
    # The facets, the golden format and the diff are needed only when a test traces or
    # compares a golden: every pytest run where the plugin is installed, also one that never
    # traces, would pay their import (about half the plugin's start-up).
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(
                name for name in sys.modules
                if name.startswith(
                    ("pytest_fwdorder.diff.", "pytest_fwdorder.golden.", "pytest_fwdorder.facets.")
                )
                or name in ("pytest_fwdorder.trace", "pytest_fwdorder.calls.records")
            )
            print("plugin loaded:", "pytest_fwdorder.plugin" in sys.modules)
            print("loaded at start-up:", ", ".join(loaded) or "nothing")
        """
    )
    pytester.makepyfile(test_nothing="def test_nothing(): pass")

    result = pytester.runpytest_subprocess("-s", "-p", "fwdorder")

    result.assert_outcomes(passed=1)
    # The oracle can fail: the plugin itself is seen loaded in the same line-up.
    result.stdout.fnmatch_lines(["*plugin loaded: True*", "*loaded at start-up: nothing"])


def test_a_golden_that_holds_imports_no_diff_module(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The diff explains a failure; a suite whose goldens hold should not pay its import
    # (about 60 ms a session, much of a small suite's cost above its forwards).
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(n for n in sys.modules if n.startswith("pytest_fwdorder.diff."))
            print("diff modules loaded:", len(loaded))
        """
    )
    pytester.makepyfile(
        test_golden="""
        import os

        import torch
        from torch import nn
        from pytest_fwdorder import trace_forward

        def test_golden(snapshot):
            torch.manual_seed(0)
            width = int(os.environ.get("WIDTH", "3"))
            model = nn.Sequential(nn.Linear(2, width), nn.ReLU())
            assert trace_forward(model, torch.randn(1, 2)) == snapshot
        """
    )
    pytester.runpytest_subprocess("--snapshot-update").assert_outcomes(passed=1)

    held = pytester.runpytest_subprocess("-s")
    held.assert_outcomes(passed=1)
    held.stdout.fnmatch_lines(["*diff modules loaded: 0"])

    # The oracle can fail: a golden that fails loads the diff to explain it.
    monkeypatch.setenv("WIDTH", "4")
    failed = pytester.runpytest_subprocess("-s")
    failed.assert_outcomes(failed=1)
    assert "diff modules loaded: 0" not in failed.stdout.str()
    failed.stdout.fnmatch_lines(["*diff modules loaded: [1-9]*"])


def test_a_bad_device_in_the_ini_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_device = gpu0\n")
    pytester.makepyfile(test_nothing="def test_nothing(): pass")

    result = pytester.runpytest()

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: ini: fwdorder_device 'gpu0' is not a torch device (*): use 'cpu', 'meta' or 'cuda'"
        ]
    )


def test_an_ini_flag_that_is_not_a_truth_value_names_the_option_and_the_value(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfwdorder_costs = maybe\n")
    pytester.makepyfile(test_nothing="def test_nothing(): pass")

    result = pytester.runpytest()

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: ini: fwdorder_costs must be true or false: invalid truth value 'maybe'"]
    )


def test_a_bad_device_in_the_marker_fails_the_test_with_the_one_device_message(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_bad_device="""
        import pytest

        @pytest.mark.fwdorder(device="gpu0")
        def test_bad(forward_trace):
            pass
        """
    )

    result = pytester.runpytest()

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*@pytest.mark.fwdorder: device 'gpu0' is not a torch device (*): use 'cpu', 'meta'*"]
    )


def test_the_report_header_names_the_torch_version(pytester: pytest.Pytester) -> None:
    import torch

    pytester.makepyfile(test_nothing="def test_nothing(): pass")

    result = pytester.runpytest()

    # The installed distribution's version: the header does not import torch to ask it.
    result.stdout.fnmatch_lines([f"fwdorder: torch {torch.__version__.split('+')[0]}*"])


def test_the_marker_hides_facets_for_one_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_hide_marker="""
        import pytest, torch
        from torch import nn

        @pytest.mark.fwdorder(hide=("settings", "parameters"))
        def test_terse(forward_trace):
            text = forward_trace(nn.Linear(2, 3), torch.randn(1, 2)).render()
            assert "| settings" not in text and "| parameters" not in text
            assert "# hidden: parameters, settings" in text
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_the_ini_option_hides_facets_for_the_whole_project(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_hide = settings mode\n")
    pytester.makepyfile(
        test_hide_ini="""
        import torch
        from torch import nn

        def test_terse(forward_trace):
            text = forward_trace(nn.Linear(2, 3), torch.randn(1, 2)).render()
            assert "| settings" not in text and "# mode:" not in text
            assert "| parameters: weight f32[3,2], bias f32[3]" in text
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_the_ini_option_makes_unregistered_parameters_an_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_unregistered = error\n")
    pytester.makepyfile(
        test_strict="""
        import pytest, torch
        from torch import nn
        from pytest_fwdorder import UnregisteredModuleError

        class PlainList(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = [nn.Linear(2, 2)]

            def forward(self, x):
                return self.blocks[0](x)

        def test_strict(forward_trace):
            with pytest.raises(UnregisteredModuleError, match=r"blocks\\[0\\] \\(Linear"):
                forward_trace(PlainList(), torch.randn(1, 2))
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_a_bad_facet_in_the_ini_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfwdorder_hide = setings\n")
    pytester.makepyfile(test_nothing="def test_nothing(): pass")

    result = pytester.runpytest()

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot hide 'setings': the facets are settings*"])


def test_an_option_given_to_the_fixture_call_wins_over_the_marker(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_call_wins="""
        import pytest, torch
        from torch import nn

        @pytest.mark.fwdorder(hide=("settings",))
        def test_call(forward_trace):
            text = forward_trace(nn.Linear(2, 3), torch.randn(1, 2), hide=()).render()
            assert "| settings: in_features=2" in text
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_a_model_keyword_named_like_an_option_goes_in_model_kwargs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_model_kwargs="""
        import torch
        from torch import nn

        class TakesDevice(nn.Module):
            def forward(self, x, device=None):
                return x.to(device)

        def test_call(forward_trace):
            trace = forward_trace(TakesDevice(), torch.randn(1, 2), model_kwargs={"device": "cpu"})
            assert "(f32[1,2], device='cpu')" in trace.render()
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_a_golden_of_the_old_format_fails_with_one_line_saying_to_regenerate(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_model="""
        import torch
        from torch import nn

        def test_block(forward_trace, snapshot):
            assert forward_trace(nn.Linear(2, 3), torch.randn(1, 2)) == snapshot
        """
    )
    golden = pytester.path / "__snapshots__" / "test_model" / "test_block.fwdorder.txt"
    golden.parent.mkdir(parents=True)
    golden.write_text(
        "# pytest-fwdorder trace (format 1)\n# model: Linear\n# calls: 1\n"
        "<root>: Linear (f32[1,2]) -> f32[1,3]\n"
    )

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the golden file '__snapshots__/test_model/test_block.fwdorder.txt' was written "
            "in format 1; this pytest-fwdorder writes format 2: "
            "regenerate it with `pytest --snapshot-update`*"
        ]
    )
    assert "- # calls: 1" not in result.stdout.str()  # no line-by-line diff of the old format


def test_markers_on_a_class_and_a_test_both_apply(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_markers="""
        import pytest, torch
        from torch import nn

        @pytest.mark.fwdorder(device="meta", hide=("mode",))
        class TestBig:
            @pytest.mark.fwdorder(hide=("settings",))
            def test_big(self, forward_trace):
                trace = forward_trace(nn.Linear(2, 3), torch.randn(1, 2))
                assert trace[0].output_tensors[0].device == "meta"  # the class's device
                assert "# hidden: settings" in trace.render()  # the closest hide wins
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)
