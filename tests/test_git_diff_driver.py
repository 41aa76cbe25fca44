"""`fwdorder git-diff` as git's diff driver: `git diff` and `git log -p` of golden files
show our explanation, set up as the docs say, in a real repository (`git_goldens`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from git_goldens import ADDED, DELETED, INSERTED, SETTINGS, git, golden, make_repository, write

from pytest_fwdorder.cli.main import EXIT_ERROR, EXIT_SAME, main

# The command the docs give is `fwdorder git-diff`; this one does not depend on PATH.
DRIVER = f"{shlex.quote(sys.executable)} -m pytest_fwdorder git-diff"


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """The repository with `*.fwdorder.txt diff=fwdorder` in its .gitattributes."""
    folder = make_repository(tmp_path / "project")
    write(folder, ".gitattributes", "*.fwdorder.txt diff=fwdorder\n")
    return folder


def git_diff(repository: Path, *arguments: str) -> str:
    return git(repository, "-c", f"diff.fwdorder.command={DRIVER}", *arguments)


def test_git_diff_of_two_commits_shows_the_explanation_of_each_golden(repository: Path) -> None:
    out = git_diff(repository, "diff", "main", "feature")

    assert (
        f"{INSERTED}: changed\n"
        "4 calls before, 5 after: 1 call inserted\n"
        "1 call inserted: drop (Dropout) after act (ReLU)\n"
        "\n"
        "+   drop: Dropout (f32[2,8]) -> f32[2,8]\n"
        "+     | settings: p=0.1, inplace=False\n"
    ) in out
    assert (
        f"{SETTINGS}: changed\n"
        "4 calls before, 4 after: 1 call settings changed\n"
        "settings changed at 1 call: act (LeakyReLU): negative_slope 0.2 -> 0.1\n"
    ) in out
    assert f"{ADDED}: added, 3 calls\n" in out
    assert f"{DELETED}: deleted, it held 2 calls\n" in out
    assert "@@ -1 +1 @@\n-a project\n+a project, changed: not a golden\n" in out  # README
    assert "@@" not in out.split("README.md")[0]  # no golden shown as a text diff


def test_without_the_driver_git_shows_a_text_diff(repository: Path) -> None:
    out = git(repository, "diff", "main", "feature", "--", INSERTED)

    assert "@@" in out
    assert "1 call inserted" not in out


def test_git_log_p_explains_each_commit_s_golden_changes(repository: Path) -> None:
    out = git_diff(
        repository, "log", "-p", "--ext-diff", "-1", "--format=commit %s", "--", SETTINGS
    )

    assert out.startswith("commit a layer inserted, a setting changed\n")
    assert "negative_slope 0.2 -> 0.1" in out


def test_git_diff_of_the_work_tree_explains_an_uncommitted_change(repository: Path) -> None:
    write(repository, SETTINGS, golden("slope_2"))

    out = git_diff(repository, "diff")

    assert out.startswith(
        f"{SETTINGS}: changed\n4 calls before, 4 after: 1 call settings changed\n"
    )
    assert "negative_slope 0.1 -> 0.2" in out


def test_the_driver_prints_the_explanation_for_the_seven_arguments_git_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text(golden("plain"), encoding="utf-8")
    new.write_text(golden("dropout"), encoding="utf-8")

    status = main(
        ["git-diff", "g.fwdorder.txt", str(old), "a" * 40, "100644", str(new), ".", "100644"]
    )

    assert status == EXIT_SAME  # git stops at a driver that exits with anything else
    assert capsys.readouterr().out.startswith(
        "g.fwdorder.txt: changed\n4 calls before, 5 after: 1 call inserted\n"
    )


def test_the_driver_reads_dev_null_as_a_golden_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "new"
    new.write_text(golden("plain"), encoding="utf-8")

    main(["git-diff", "g.fwdorder.txt", "/dev/null", ".", ".", str(new), "b" * 40, "100644"])
    main(["git-diff", "g.fwdorder.txt", str(new), "b" * 40, "100644", "/dev/null", ".", "."])

    assert capsys.readouterr().out == (
        "g.fwdorder.txt: added, 4 calls\ng.fwdorder.txt: deleted, it held 4 calls\n"
    )


def test_the_driver_says_an_unmerged_path_is_unmerged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["git-diff", "g.fwdorder.txt"])

    assert status == EXIT_SAME
    assert capsys.readouterr().out == (
        "g.fwdorder.txt: unmerged: resolve the conflict, then git diff explains it\n"
    )


def test_the_driver_colours_when_git_pages_its_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text(golden("plain"), encoding="utf-8")
    new.write_text(golden("dropout"), encoding="utf-8")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("GIT_PAGER_IN_USE", "true")

    main(["git-diff", "g", str(old), ".", "100644", str(new), ".", "100644"])

    assert "\x1b[32m+   drop: Dropout" in capsys.readouterr().out


def test_the_driver_with_the_wrong_arguments_says_how_to_set_it_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["git-diff", "a", "b"])

    assert status == EXIT_ERROR
    assert capsys.readouterr().err == (
        "fwdorder: error: git-diff takes the 7 arguments git passes a diff driver (path "
        "old-file old-hex old-mode new-file new-hex new-mode), got 2: ['a', 'b']; set it up "
        'with git config diff.fwdorder.command "fwdorder git-diff"\n'
    )


def test_git_diff_of_a_renamed_golden_names_both_paths(repository: Path) -> None:
    renamed = INSERTED.replace("test_inserted", "test_renamed")
    git(repository, "mv", INSERTED, renamed)

    out = git_diff(repository, "diff", "--cached", "-M")

    assert out == f"{renamed}: the same golden text\nrenamed from {INSERTED}\n"


def test_a_renamed_and_changed_golden_is_explained_under_its_new_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text(golden("plain"), encoding="utf-8")
    new.write_text(golden("dropout"), encoding="utf-8")

    main(
        [
            "git-diff",
            "a.txt",
            str(old),
            ".",
            "100644",
            str(new),
            ".",
            "100644",
            "b.txt",
            "similarity index 90%",
        ]
    )

    assert capsys.readouterr().out.startswith(
        "b.txt: changed\nrenamed from a.txt\n4 calls before, 5 after: 1 call inserted\n"
    )
