"""`fwdorder review`: which goldens differ between two commits of a real git repository, in
text, Markdown and JSON, with its exit statuses and its one-line errors.

The repository (`git_goldens`) has a base commit on `main` and a head commit on `feature`:
a layer inserted, a setting changed, a golden added and one deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from git_goldens import (
    ADDED,
    DELETED,
    INSERTED,
    SETTINGS,
    SNAPSHOTS,
    UNCHANGED,
    git,
    golden,
    make_repository,
    write,
)

from pytest_fwdorder.cli.main import EXIT_DIFFERENT, EXIT_ERROR, EXIT_SAME, main
from pytest_fwdorder.diff.changes import ChangeKind
from pytest_fwdorder.report.git_review import ReviewError, collect_review, explain_golden
from pytest_fwdorder.report.review_format import (
    JSON_VERSION,
    KIND_PHRASES,
    format_markdown,
    kind_phrase,
    review_total,
)
from pytest_fwdorder.snapshot.policy import explain_mismatch

TOTAL = (
    "2 goldens changed: 1 with calls inserted, 1 with settings changed; "
    "1 golden added; 1 golden deleted"
)
ESCAPE = "\x1b["


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository at `feature`, as the current folder."""
    folder = make_repository(tmp_path / "project")
    monkeypatch.chdir(folder)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return folder


def review_output(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    status = main(["review", *arguments])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_text_review_explains_each_golden_and_ends_with_the_total(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = review_output(capsys)
    base = git(repository, "rev-parse", "main").strip()

    assert status == EXIT_DIFFERENT
    assert out.endswith(
        f"compared {base[:12]} (the merge base of HEAD and main) with the work tree\n{TOTAL}\n"
    )
    assert f"{ADDED}: added, 3 calls\n" in out
    assert f"{DELETED}: deleted, it held 2 calls\n" in out
    assert (
        f"{INSERTED}: changed\n"
        "4 calls before, 5 after: 1 call inserted\n"
        "1 call inserted: drop (Dropout) after act (ReLU)\n"
        "\n"
        "+   drop: Dropout (f32[2,8]) -> f32[2,8]\n"
    ) in out
    assert (
        f"{SETTINGS}: changed\n"
        "4 calls before, 4 after: 1 call settings changed\n"
        "settings changed at 1 call: act (LeakyReLU): negative_slope 0.2 -> 0.1\n"
    ) in out
    assert UNCHANGED not in out
    assert "README" not in out
    assert ESCAPE not in out


def test_the_text_review_is_coloured_only_when_asked_or_on_a_terminal(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, coloured, _ = review_output(capsys, "--color", "always")
    _, plain, _ = review_output(capsys, "--color", "never")

    assert f"{ESCAPE}1m{TOTAL}" in coloured
    assert f"{ESCAPE}32m+   drop: Dropout" in coloured
    assert ESCAPE not in plain


def test_the_markdown_review_has_a_heading_and_one_details_block_per_golden(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = review_output(capsys, "--format", "markdown")

    assert status == EXIT_DIFFERENT
    assert out.startswith(f"### fwdorder review: {TOTAL}\n\nCompared ")
    assert out.count("<details>") == out.count("</details>") == 4
    assert (
        f"<summary><code>{INSERTED}</code>: changed \N{EM DASH} 4 calls before, 5 after: "
        "1 call inserted</summary>\n\n"
        "- 1 call inserted: drop (Dropout) after act (ReLU)\n\n"
        "```diff\n"
        "+   drop: Dropout (f32[2,8]) -> f32[2,8]\n"
    ) in out
    assert f"<summary><code>{ADDED}</code>: added \N{EM DASH} 3 calls</summary>" in out
    # Markdown would read `negative_slope` as emphasis and `->` as the start of HTML.
    assert "negative\\_slope 0.2 -&gt; 0.1" in out


def test_the_json_review_follows_the_documented_schema(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = review_output(capsys, "--format", "json")
    data = json.loads(out)

    assert status == EXIT_DIFFERENT
    assert list(data) == ["format", "version", "base", "head", "total", "counts", "goldens"]
    assert data["format"] == "pytest-fwdorder review"
    assert data["version"] == JSON_VERSION == 2
    assert data["base"] == {
        "revision": "the merge base of HEAD and main",
        "commit": git(repository, "rev-parse", "main").strip(),
    }
    assert data["head"] == {"revision": None, "commit": None}
    assert data["total"] == TOTAL
    assert data["counts"] == {"changed": 2, "added": 1, "deleted": 1}
    by_path = {entry["path"]: entry for entry in data["goldens"]}
    assert list(by_path) == sorted([ADDED, DELETED, INSERTED, SETTINGS])
    inserted = by_path[INSERTED]
    assert list(inserted) == [
        "path",
        "status",
        "summary",
        "problem",
        "changes",
        "header_changed",
        "lines",
    ]
    assert inserted["status"] == "changed"
    assert inserted["summary"] == "4 calls before, 5 after: 1 call inserted"
    assert inserted["changes"] == {"inserted": 1}
    assert inserted["header_changed"] is True
    assert inserted["lines"][:2] == [
        "4 calls before, 5 after: 1 call inserted",
        "1 call inserted: drop (Dropout) after act (ReLU)",
    ]
    assert by_path[SETTINGS]["changes"] == {"settings changed": 1}
    assert by_path[ADDED] == {
        "path": ADDED,
        "status": "added",
        "summary": "3 calls",
        "problem": None,
        "changes": {},
        "header_changed": False,
        "lines": ["added, 3 calls"],
    }
    assert by_path[DELETED]["status"] == "deleted"


def test_review_runs_as_a_command_in_a_child_process(repository: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest_fwdorder", "review", "main"],
        cwd=repository,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )

    assert result.returncode == EXIT_DIFFERENT, result.stderr
    assert result.stdout.endswith(f" (main) with the work tree\n{TOTAL}\n")


def test_review_does_not_import_torch(repository: Path) -> None:
    script = (
        "import sys\n"
        "from pytest_fwdorder.cli.main import main\n"
        "main(['review', 'main', '--format', 'json'])\n"
        "print('torch' in sys.modules, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=repository,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert result.stderr == "False\n"


def test_review_exits_0_and_says_so_when_no_golden_changed(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = review_output(capsys, "HEAD")

    assert status == EXIT_SAME
    assert out.endswith(" (HEAD) with the work tree\nno goldens changed\n")


def test_head_compares_two_commits_whatever_the_work_tree_holds(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(repository, "checkout", "--quiet", "main")
    write(repository, INSERTED, "not even a golden\n")

    status, out, _ = review_output(capsys, "main", "--head", "feature", "--format", "json")
    data = json.loads(out)

    assert status == EXIT_DIFFERENT
    assert data["total"] == TOTAL
    assert data["head"] == {
        "revision": "feature",
        "commit": git(repository, "rev-parse", "feature").strip(),
    }


def test_the_default_base_with_head_is_its_merge_base_with_main(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(repository, "checkout", "--quiet", "main")

    _, out, _ = review_output(capsys, "--head", "feature")

    assert out.endswith(
        f"(the merge base of feature and main) with {_short(repository)} (feature)\n{TOTAL}\n"
    )


def _short(repository: Path) -> str:
    return git(repository, "rev-parse", "feature").strip()[:12]


def test_goldens_not_yet_added_to_git_are_reviewed_and_nothing_is_written(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new_golden = f"{SNAPSHOTS}/test_new.fwdorder.txt"
    write(repository, new_golden, golden("plain"))
    write(repository, UNCHANGED, golden("dropout"))
    index = (repository / ".git" / "index").read_bytes()
    status_before = git(repository, "status", "--porcelain")

    _, out, _ = review_output(capsys, "HEAD")

    assert f"{new_golden}: added, 4 calls\n" in out
    assert f"{UNCHANGED}: changed\n" in out
    assert out.endswith("\n1 golden changed: 1 with calls inserted; 1 golden added\n")
    assert (repository / ".git" / "index").read_bytes() == index
    assert git(repository, "status", "--porcelain") == status_before


def test_a_golden_only_touched_on_disk_is_not_reported(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repository / UNCHANGED).write_text(golden("plain"), encoding="utf-8")  # a new mtime

    status, out, _ = review_output(capsys, "HEAD")

    assert status == EXIT_SAME
    assert out.endswith("no goldens changed\n")


def test_a_shallow_clone_that_holds_the_base_commit_is_reviewed(
    repository: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clone = tmp_path / "clone"
    git(
        tmp_path,
        "clone",
        "--quiet",
        "--depth",
        "2",
        "--branch",
        "feature",
        f"file://{repository}",
        str(clone),
    )
    monkeypatch.chdir(clone)

    status, out, _ = review_output(capsys, git(repository, "rev-parse", "main").strip())

    assert git(clone, "rev-parse", "--is-shallow-repository").strip() == "true"
    assert status == EXIT_DIFFERENT
    assert out.endswith(f"{TOTAL}\n")


def test_a_shallow_clone_without_the_base_says_to_fetch_it(
    repository: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clone = tmp_path / "clone"
    git(
        tmp_path,
        "clone",
        "--quiet",
        "--depth",
        "1",
        "--branch",
        "feature",
        f"file://{repository}",
        str(clone),
    )
    monkeypatch.chdir(clone)
    base = git(repository, "rev-parse", "main").strip()

    status, out, err = review_output(capsys, base)

    assert status == EXIT_ERROR
    assert out == ""
    assert err == (
        f"fwdorder: error: unknown BASE {base!r}: not a commit here: give a branch, tag or "
        "commit of this repository; this is a shallow clone: fetch it first (git fetch "
        f"origin {base})\n"
    )


def test_outside_a_git_repository_review_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "not_a_repository"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))

    status, out, err = review_output(capsys)

    assert status == EXIT_ERROR
    assert out == ""
    assert err == (
        f"fwdorder: error: {str(folder)!r} is not in a git repository: run fwdorder review "
        "inside a git work tree (a clone of the project)\n"
    )


def test_an_unknown_base_is_a_usage_error(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = review_output(capsys, "no-such-branch")

    assert status == EXIT_ERROR
    assert err == (
        "fwdorder: error: unknown BASE 'no-such-branch': not a commit here: give a branch, "
        "tag or commit of this repository\n"
    )


def test_without_a_default_branch_review_asks_for_the_base(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(repository, "branch", "--quiet", "--move", "main", "trunk")

    status, _, err = review_output(capsys)

    assert status == EXIT_ERROR
    assert err == (
        "fwdorder: error: no default branch to review against: none of origin/HEAD, main, "
        "master exists here; give the base: fwdorder review BASE (a branch, tag or commit)\n"
    )


def test_review_lines_are_the_explanation_a_failing_comparison_prints(repository: Path) -> None:
    review = collect_review("main")

    for reviewed in review.goldens:
        if reviewed.status == "changed":
            old = git(repository, "show", f"main:{reviewed.path}")
            new = (repository / reviewed.path).read_text(encoding="utf-8")
            assert reviewed.explanation() == explain_mismatch(old, new, reviewed.path)


def test_the_oracle_sees_a_different_explanation() -> None:
    reviewed = explain_golden("g.fwdorder.txt", golden("plain"), golden("dropout"))

    assert reviewed.explanation() != explain_mismatch(golden("plain"), golden("slope_2"))


def test_a_golden_with_conflict_markers_is_counted_as_one_that_cannot_be_diffed(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(repository, UNCHANGED, f"<<<<<<< HEAD\n{golden('plain')}=======\n>>>>>>> other\n")

    _, out, _ = review_output(capsys, "HEAD")

    assert (
        f"{UNCHANGED}: changed\nthe new golden file {UNCHANGED!r} holds unresolved "
        "merge-conflict markers"
    ) in out
    assert out.endswith("\n1 golden changed: 1 that cannot be diffed\n")


def test_every_kind_of_change_has_a_phrase_in_the_total() -> None:
    phrases = [kind_phrase(kind) for kind in ChangeKind]

    assert all(phrase.startswith("with ") for phrase in phrases)
    assert len(set(phrases)) == len(phrases)
    assert kind_phrase(ChangeKind.INSERTED) == KIND_PHRASES[ChangeKind.INSERTED]


def test_the_total_groups_changed_goldens_by_kind(repository: Path) -> None:
    assert review_total(collect_review("main")) == TOTAL


def test_markdown_past_its_budget_is_cut_and_says_what_was_left_out(repository: Path) -> None:
    review = collect_review("main")
    whole = format_markdown(review)

    cut = format_markdown(review, budget=1200)

    assert len(whole) > 1200
    assert len(cut) <= 1200
    assert cut.startswith(f"### fwdorder review: {TOTAL}\n")
    assert cut.count("<details>") == cut.count("</details>")
    assert cut.endswith(
        "**Cut to stay within 1,200 characters:** 1 golden and 5 lines left out. "
        "Run `fwdorder review` locally to see everything.\n"
    )


def test_markdown_cut_inside_a_golden_keeps_its_code_block_closed(repository: Path) -> None:
    cut = format_markdown(collect_review("main"), budget=1000)

    assert len(cut) <= 1000
    assert (
        "```diff\n+   drop: Dropout (f32[2,8]) -> f32[2,8]\n```\n\n_7 more lines left out_\n\n"
        "</details>\n"
    ) in cut
    assert cut.endswith(
        "** 1 golden and 12 lines left out. Run `fwdorder review` locally to see everything.\n"
    )


@pytest.mark.parametrize("budget", range(700, 1500, 50))
def test_markdown_never_passes_its_budget(repository: Path, budget: int) -> None:
    assert len(format_markdown(collect_review("main"), budget=budget)) <= budget


def test_markdown_within_its_budget_is_whole(repository: Path) -> None:
    review = collect_review("main")

    assert "Cut to stay" not in format_markdown(review)


def test_a_markdown_budget_too_small_for_the_heading_is_refused(repository: Path) -> None:
    with pytest.raises(ValueError, match=r"a Markdown budget of 100 characters cannot hold"):
        format_markdown(collect_review("main"), budget=100)


def test_collect_review_raises_review_error_for_an_unknown_head(repository: Path) -> None:
    with pytest.raises(ReviewError, match=r"^unknown --head 'nowhere': not a commit here"):
        collect_review("main", head="nowhere")
