"""Golden files stay safe: never collected, never deleted by a run that did not finish,
never shared by two tests, and every unreadable golden says what is wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fwdorder.snapshot.policy import explain_mismatch

MODEL_TEST = """
import pytest
import torch
from torch import nn


@pytest.mark.parametrize("width", [{widths}])
def test_block(forward_trace, snapshot, width):
    {before}
    assert forward_trace(nn.Linear(4, width), torch.randn(2, 4)) == snapshot
"""

SNAPSHOTS = Path("__snapshots__/test_model")

TWO_TESTS = """
import torch
from torch import nn


def test_net(forward_trace, snapshot):
    assert forward_trace(nn.Linear(2, 2), torch.randn(1, 2)) == snapshot


def test_other(forward_trace, snapshot):
    pass  # breaks
    assert forward_trace(nn.ReLU(), torch.randn(1, 2)) == snapshot
"""


def write_model_test(pytester: pytest.Pytester, widths: str = "2, 3", before: str = "") -> None:
    pytester.makepyfile(test_model=MODEL_TEST.format(widths=widths, before=before or "pass"))


def goldens(pytester: pytest.Pytester) -> list[str]:
    return sorted(path.name for path in (pytester.path / SNAPSHOTS).iterdir())


def containing(text: str) -> str:
    """An fnmatch pattern for a line containing `text` literally (golden text has brackets)."""
    escaped = "".join({"[": "[[]", "]": "[]]", "*": "[*]", "?": "[?]"}.get(c, c) for c in text)
    return f"*{escaped}*"


@pytest.fixture
def accepted(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with two tests whose goldens were written and accepted."""
    write_model_test(pytester)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)
    return pytester


GOLDEN_2 = "test_block[2].fwdorder.txt"
GOLDEN_3 = "test_block[3].fwdorder.txt"


def conflict(text: str) -> str:
    """`text` as git leaves it when two branches changed its last line."""
    head, last = text.rstrip("\n").rsplit("\n", 1)
    return f"{head}\n<<<<<<< HEAD\n{last}\n=======\n{last} \n>>>>>>> feature\n"


# 1. Goldens are never collected


@pytest.mark.parametrize("glob", [None, "*.txt"], ids=["default-glob", "user-glob"])
def test_goldens_are_not_collected_as_doctests(accepted: pytest.Pytester, glob: str | None) -> None:
    arguments = ["--doctest-glob", glob] if glob else []
    golden = accepted.path / SNAPSHOTS / GOLDEN_2
    golden.write_text(conflict(golden.read_text()))

    result = accepted.runpytest("--collect-only", "-q", *arguments)

    result.stdout.fnmatch_lines(["2 tests collected in *"])
    assert "error" not in result.stdout.str().lower()


def test_a_golden_with_conflict_markers_fails_its_test_naming_the_file(
    accepted: pytest.Pytester,
) -> None:
    golden = accepted.path / SNAPSHOTS / GOLDEN_2
    golden.write_text(conflict(golden.read_text()))

    result = accepted.runpytest()

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            containing(
                f"the golden file {str(SNAPSHOTS / GOLDEN_2)!r} holds unresolved "
                "merge-conflict markers (<<<<<<<, =======, >>>>>>>): resolve the conflict, "
                "or rewrite it with `pytest --snapshot-update` and review the new golden"
            )
        ]
    )


def test_snapshot_update_rewrites_only_the_golden_with_conflict_markers(
    accepted: pytest.Pytester,
) -> None:
    golden = accepted.path / SNAPSHOTS / GOLDEN_2
    clean = golden.read_text()
    golden.write_text(conflict(clean))
    other = (accepted.path / SNAPSHOTS / GOLDEN_3).stat().st_mtime_ns

    result = accepted.runpytest("--snapshot-update")

    result.assert_outcomes(passed=2)
    assert golden.read_text() == clean
    assert (accepted.path / SNAPSHOTS / GOLDEN_3).stat().st_mtime_ns == other


# 2. --snapshot-update deletes only goldens it knows are unused


def test_an_update_keeps_the_golden_of_a_test_that_errors_before_its_assertion(
    accepted: pytest.Pytester,
) -> None:
    write_model_test(accepted, before="assert width != 2, 'broken before the assertion'")

    result = accepted.runpytest("--snapshot-update")

    result.assert_outcomes(passed=1, failed=1)
    assert goldens(accepted) == [GOLDEN_2, GOLDEN_3]
    result.stdout.fnmatch_lines(
        [
            "fwdorder: kept 1 golden file(s) whose test failed, errored or was skipped "
            "before asserting them; they are deleted only when their test passes without "
            "asserting them"
        ]
    )


def test_an_update_after_a_test_errors_reports_its_golden_kept_not_deleted(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_other=TWO_TESTS)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)
    golden = pytester.path / "__snapshots__/test_other/test_other.fwdorder.txt"
    before = golden.read_bytes()
    pytester.makepyfile(test_other=TWO_TESTS.replace("pass  # breaks", "raise RuntimeError"))

    result = pytester.runpytest("--snapshot-update")

    result.assert_outcomes(passed=1, failed=1)
    assert golden.read_bytes() == before
    assert [line for line in result.outlines if "Deleted" in line or "unused" in line] == []
    assert [line for line in result.outlines if "fwdorder: kept" in line] == [
        "fwdorder: kept 1 golden file(s) whose test failed, errored or was skipped before "
        "asserting them; they are deleted only when their test passes without asserting them"
    ]
    result.stdout.fnmatch_lines(["1 snapshot passed."])


def test_an_update_after_a_test_errors_still_deletes_an_obsolete_golden_beside_its_own(
    pytester: pytest.Pytester,
) -> None:
    # syrupy matches a test that is not parametrized to every file in its module's folder,
    # so the erroring test held back the obsolete golden beside its own and counted it.
    three = TWO_TESTS + (
        "\n\ndef test_gone(forward_trace, snapshot):\n"
        "    assert forward_trace(nn.Tanh(), torch.randn(1, 2)) == snapshot\n"
    )
    pytester.makepyfile(test_other=three)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=3)
    folder = pytester.path / "__snapshots__/test_other"
    erroring = (folder / "test_other.fwdorder.txt").read_bytes()
    pytester.makepyfile(test_other=TWO_TESTS.replace("pass  # breaks", "raise RuntimeError"))

    result = pytester.runpytest("--snapshot-update")

    result.assert_outcomes(passed=1, failed=1)
    assert sorted(path.name for path in folder.iterdir()) == [
        "test_net.fwdorder.txt",
        "test_other.fwdorder.txt",
    ]
    assert (folder / "test_other.fwdorder.txt").read_bytes() == erroring
    assert [line for line in result.outlines if line.startswith("fwdorder: kept")] == [
        "fwdorder: kept 1 golden file(s) whose test failed, errored or was skipped before "
        "asserting them; they are deleted only when their test passes without asserting them"
    ]


def test_an_update_keeps_the_escaped_golden_of_a_test_that_errors_before_its_assertion(
    pytester: pytest.Pytester,
) -> None:
    write_model_test(pytester, widths="pytest.param(2, id='a/b')")
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    write_model_test(pytester, widths="pytest.param(2, id='a/b')", before="assert False")

    result = pytester.runpytest("--snapshot-update")

    result.assert_outcomes(failed=1)
    assert goldens(pytester) == ["test_block[a%2Fb].fwdorder.txt"]
    result.stdout.fnmatch_lines(["fwdorder: kept 1 golden file(s) whose test failed*"])


def test_an_update_keeps_the_golden_of_a_test_skipped_before_its_assertion(
    accepted: pytest.Pytester,
) -> None:
    write_model_test(accepted, before="if width == 2: pytest.skip('not today')")

    accepted.runpytest("--snapshot-update").assert_outcomes(passed=1, skipped=1)

    assert goldens(accepted) == [GOLDEN_2, GOLDEN_3]


def test_an_update_with_a_collection_error_deletes_no_golden(accepted: pytest.Pytester) -> None:
    accepted.makepyfile(test_broken="def test_x(:\n    pass\n")
    write_model_test(accepted, widths="3")  # test_block[2] is gone: its golden is unused

    result = accepted.runpytest("--snapshot-update", "--continue-on-collection-errors")

    assert goldens(accepted) == [GOLDEN_2, GOLDEN_3]
    result.stdout.fnmatch_lines(
        [
            "fwdorder: kept 1 unused golden file(s): the session had collection errors; "
            "run `pytest --snapshot-update` again once every test collects and runs to delete "
            "them"
        ]
    )


def test_an_update_stopped_by_maxfail_deletes_no_golden(accepted: pytest.Pytester) -> None:
    write_model_test(accepted, before="assert width != 2, 'broken before the assertion'")

    result = accepted.runpytest("--snapshot-update", "-x")

    result.assert_outcomes(failed=1)
    assert goldens(accepted) == [GOLDEN_2, GOLDEN_3]
    result.stdout.fnmatch_lines(["fwdorder: kept 2 unused golden file(s): the session stopped*"])


def test_an_interrupted_update_deletes_no_golden(accepted: pytest.Pytester) -> None:
    write_model_test(
        accepted, before="if width == 2: raise KeyboardInterrupt  # the user pressed Ctrl-C"
    )

    # In a subprocess: an inline run hands the KeyboardInterrupt on to this test.
    result = accepted.runpytest_subprocess("--snapshot-update")

    assert goldens(accepted) == [GOLDEN_2, GOLDEN_3]
    result.stdout.fnmatch_lines(["fwdorder: kept 2 unused golden file(s): the session was*"])


def test_an_update_still_deletes_the_golden_of_a_removed_test(accepted: pytest.Pytester) -> None:
    write_model_test(accepted, widths="3")

    result = accepted.runpytest("--snapshot-update")

    result.assert_outcomes(passed=1)
    assert goldens(accepted) == [GOLDEN_3]
    result.stdout.no_fnmatch_line("fwdorder: kept*")


def test_an_update_that_only_collects_deletes_no_golden(accepted: pytest.Pytester) -> None:
    accepted.runpytest("--snapshot-update", "--collect-only")

    assert goldens(accepted) == [GOLDEN_2, GOLDEN_3]


def test_an_update_deletes_the_golden_a_passing_test_no_longer_asserts(
    accepted: pytest.Pytester,
) -> None:
    write_model_test(accepted, before="if width == 2: return")

    accepted.runpytest("--snapshot-update").assert_outcomes(passed=2)

    assert goldens(accepted) == [GOLDEN_3]


# 4. and 5. Goldens that differ only in whitespace, are cut off, or are newer


GOLDEN_TEXT = (
    "# pytest-fwdorder trace (format 2)\n"
    "# model: Block\n"
    "# calls: 3\n"
    "<root>: Block (f32[2,4]) -> f32[2,8]\n"
    "  linear: Linear (f32[2,4]) -> f32[2,8]\n"
    "  act: ReLU (f32[2,8]) -> f32[2,8]\n"
)


def test_a_golden_without_its_final_newline_is_said_to_differ_only_in_whitespace() -> None:
    assert explain_mismatch(GOLDEN_TEXT.rstrip("\n"), GOLDEN_TEXT) == [
        "the golden file differs from the new trace only in whitespace at line ends "
        "(a trailing space or the final newline, often trimmed by an editor): rewrite it "
        "with `pytest --snapshot-update`, and keep your editor from trimming "
        "*.fwdorder.txt files"
    ]


def test_a_golden_with_trailing_spaces_is_said_to_differ_only_in_whitespace() -> None:
    spaced = GOLDEN_TEXT.replace("f32[2,8]\n", "f32[2,8]   \n")

    assert explain_mismatch(spaced, GOLDEN_TEXT)[0].startswith(
        "the golden file differs from the new trace only in whitespace at line ends"
    )


def test_a_cut_off_golden_says_it_looks_cut_off() -> None:
    cut = GOLDEN_TEXT.rsplit("\n", 2)[0]  # the last call line is gone

    assert explain_mismatch(cut, GOLDEN_TEXT) == [
        "the golden file does not add up: its header says '# calls: 3' but the body holds 2 "
        "call(s); it looks cut off (a half-written or truncated file), or the count was "
        "edited: restore it from version control, or rewrite it with `pytest "
        "--snapshot-update` and review the new golden"
    ]


def test_a_golden_from_a_newer_format_says_to_upgrade() -> None:
    newer = GOLDEN_TEXT.replace("(format 2)", "(format 3)")

    assert explain_mismatch(newer, GOLDEN_TEXT) == [
        "the golden file was written in format 3 by a newer pytest-fwdorder; this one "
        "reads and writes format 2: upgrade pytest-fwdorder (pip install -U "
        "pytest-fwdorder) rather than regenerate it, which would downgrade the golden"
    ]


def test_a_golden_from_an_older_format_still_says_to_regenerate() -> None:
    older = GOLDEN_TEXT.replace("(format 2)", "(format 1)")

    assert explain_mismatch(older, GOLDEN_TEXT)[0].startswith(
        "the golden file was written in format 1; this pytest-fwdorder writes format 2: "
        "regenerate it"
    )


def test_no_committed_golden_looks_cut_off() -> None:
    from pytest_fwdorder.snapshot.policy import looks_cut_off

    root = Path(__file__).parent.parent
    paths = [*root.glob("tests/**/*.fwdorder.txt"), *root.glob("examples/**/*.fwdorder.txt")]

    assert len(paths) > 10  # the oracle has something to check
    assert [path for path in paths if looks_cut_off(path.read_text())] == []


# 13. `snapshot == trace` behaves like `trace == snapshot`


def test_a_reversed_comparison_stores_the_golden_text(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_model="""
        import torch
        from torch import nn

        def test_block(forward_trace, snapshot):
            assert snapshot == forward_trace(nn.Linear(4, 2), torch.randn(2, 4))
        """
    )

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)

    assert goldens(pytester) == ["test_block.fwdorder.txt"]


def test_a_reversed_comparison_explains_a_change_like_the_usual_order(
    pytester: pytest.Pytester,
) -> None:
    test = """
        import torch
        from torch import nn

        def test_block(forward_trace, snapshot):
            assert snapshot == forward_trace(nn.Linear(4, {width}), torch.randn(2, 4))
        """
    pytester.makepyfile(test_model=test.format(width=2))
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    pytester.makepyfile(test_model=test.format(width=3))

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([containing("<root> (Linear) output (2, 2) -> (2, 3)")])


# 17. A report path that cannot be written is a usage error at start-up


def test_a_report_path_under_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    (pytester.path / "notadir").write_text("a file")

    result = pytester.runpytest("--fwdorder-report=notadir/r.html")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --fwdorder-report cannot be written at 'notadir/r.html': 'notadir' is a "
            "file, not a directory: give a path in a directory you can write"
        ]
    )


# 19. A marker typo is one message with a did-you-mean


def test_a_marker_typo_is_said_once_with_a_did_you_mean(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad_marker="""
        import pytest

        @pytest.mark.fwdorder(devce="meta")
        def test_bad(forward_trace):
            pass
        """
    )

    result = pytester.runpytest()

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.fwdorder got unknown option(s) 'devce': the options are device, "
            "show_devices, hide, unregistered, show_local_shapes, fold, ops, ops_skip, "
            "backward, costs, initialization, values, graph_breaks, values_relative_tolerance, "
            "values_absolute_tolerance, direct_forwards; did you mean 'device'?"
        ]
    )
    # pytest's short summary repeats the message (whole when CI is set): count above it.
    report = result.stdout.str().partition("short test summary info")[0]
    assert report.count("unknown option(s) 'devce'") == 1
    assert "During handling of the above exception" not in result.stdout.str()


# 3. Every test gets its own golden file

IDS_TEST = """
import pytest
import torch
from torch import nn


@pytest.mark.parametrize("name", {ids!r}, ids={ids!r})
def test_p(forward_trace, snapshot, name):
    assert forward_trace(nn.ReLU(), torch.randn(1, 2)) == snapshot
"""


def write_ids_test(pytester: pytest.Pytester, ids: list[str]) -> None:
    pytester.makepyfile(test_model=IDS_TEST.format(ids=ids))


def test_long_ids_that_differ_only_at_the_end_get_their_own_goldens(
    pytester: pytest.Pytester,
) -> None:
    write_ids_test(pytester, ["x" * 299 + "a", "x" * 299 + "b"])

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)

    names = goldens(pytester)
    assert len(names) == 2
    assert all(len(name) <= 255 for name in names)
    pytester.runpytest().assert_outcomes(passed=2)


def test_an_id_with_a_percent_sign_does_not_share_the_golden_of_an_escaped_id(
    pytester: pytest.Pytester,
) -> None:
    write_ids_test(pytester, ["a/b", "a%2Fb"])

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=2)

    assert goldens(pytester) == ["test_p[a%252Fb].fwdorder.txt", "test_p[a%2Fb].fwdorder.txt"]


def test_ids_that_differ_only_in_case_are_an_error_naming_both_tests(
    pytester: pytest.Pytester,
) -> None:
    write_ids_test(pytester, ["Net", "net"])

    result = pytester.runpytest("--snapshot-update")

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            containing(
                "ValueError: the tests 'test_model.py::test_p[Net]' and "
                "'test_model.py::test_p[net]' would share the golden file "
                "'test_p[net].fwdorder.txt' on file systems that ignore case (macOS, "
                "Windows): give one of them another name or parametrize id"
            )
        ]
    )


def test_an_empty_golden_is_said_to_be_empty_not_of_an_unknown_format() -> None:
    from pytest_fwdorder.snapshot.policy import golden_problem

    problem = golden_problem("", "# pytest-fwdorder trace (format 2)\n")

    assert problem is not None
    assert problem.startswith("is empty")
    assert "unknown format" not in problem


def test_a_hand_edited_call_count_says_which_count_differs_from_the_body() -> None:
    from pytest_fwdorder import trace_forward
    from pytest_fwdorder.golden.parse import declared_and_written_calls
    from pytest_fwdorder.snapshot.policy import golden_problem

    torch = pytest.importorskip("torch")
    text = trace_forward(torch.nn.Sequential(torch.nn.ReLU()), torch.randn(1, 2)).render()
    declared, written = declared_and_written_calls(text)
    edited = text.replace(f"# calls: {declared}", f"# calls: {declared + 5}")

    problem = golden_problem(edited, text)

    assert problem is not None
    assert f"'# calls: {declared + 5}'" in problem
    assert f"the body holds {written} call" in problem
