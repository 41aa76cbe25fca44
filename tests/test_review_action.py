"""The GitHub Action's work (action/review-goldens, which action.yml runs) in a scratch git
repository whose `feature` branch changed goldens (`git_goldens`): the step summary holds
the same Markdown `fwdorder review --format markdown` prints, the outputs say whether a
golden changed and whether to comment, and a base that cannot be found fails in one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from git_goldens import git, make_repository

from pytest_fwdorder.report.git_review import collect_review
from pytest_fwdorder.report.review_format import format_markdown

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "action" / "review-goldens"


def run_action(
    repository: Path, tmp_path: Path, **settings: str
) -> tuple[subprocess.CompletedProcess[str], str, dict[str, str]]:
    """The script as action.yml runs it: its exit, the step summary, and its outputs."""
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    summary.write_text("", encoding="utf-8")
    outputs.write_text("", encoding="utf-8")
    environment = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(outputs),
        "RUNNER_TEMP": str(tmp_path),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        **settings,
    }
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=repository,
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=300,
    )
    lines = outputs.read_text(encoding="utf-8").splitlines()
    return result, summary.read_text(encoding="utf-8"), dict(line.split("=", 1) for line in lines)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return make_repository(tmp_path / "project")


def test_the_summary_holds_the_review_and_a_comment_is_due_when_asked(
    repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = git(repository, "rev-parse", "main").strip()
    monkeypatch.chdir(repository)
    expected = format_markdown(collect_review(base, None))

    result, summary, outputs = run_action(
        repository, tmp_path, REVIEW_BASE=base, REVIEW_COMMENT="true"
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert summary == expected
    assert summary.startswith("### fwdorder review: 2 goldens changed")
    assert outputs == {
        "changed": "true",
        "comment": "true",
        "markdown": str(tmp_path / "review.md"),
    }
    assert (tmp_path / "review.md").read_text(encoding="utf-8") == expected


def test_no_comment_unless_asked_and_none_when_no_golden_changed(
    repository: Path, tmp_path: Path
) -> None:
    _, _, not_asked = run_action(repository, tmp_path, REVIEW_BASE="main")
    result, summary, unchanged = run_action(
        repository, tmp_path, REVIEW_BASE="feature", REVIEW_COMMENT="true"
    )

    assert not_asked["changed"] == "true"
    assert not_asked["comment"] == "false"
    assert result.returncode == 0, result.stdout + result.stderr
    assert unchanged["changed"] == unchanged["comment"] == "false"
    assert summary.startswith("### fwdorder review")


def test_a_changed_golden_fails_the_step_only_when_asked(repository: Path, tmp_path: Path) -> None:
    result, _, outputs = run_action(
        repository, tmp_path, REVIEW_BASE="main", REVIEW_FAIL_ON_CHANGE="true"
    )

    assert result.returncode == 1
    assert outputs["changed"] == "true"


def test_a_base_that_cannot_be_found_fails_in_one_line_and_writes_no_summary(
    repository: Path, tmp_path: Path
) -> None:
    missing = "0123456789abcdef0123456789abcdef01234567"

    result, summary, outputs = run_action(repository, tmp_path, REVIEW_BASE=missing)

    assert result.returncode == 2
    assert f"cannot fetch the base {missing} from origin" in result.stderr
    assert summary == ""
    assert outputs == {}


def test_action_yml_runs_the_script_with_its_inputs() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    steps = action["runs"]["steps"]
    review = next(step for step in steps if step.get("id") == "review")

    assert action["runs"]["using"] == "composite"
    assert all(step["shell"] == "bash" for step in steps)
    assert review["run"] == '"$GITHUB_ACTION_PATH/action/review-goldens"'
    assert set(review["env"]) == {
        "PYTHON",
        "REVIEW_BASE",
        "REVIEW_COMMENT",
        "REVIEW_FAIL_ON_CHANGE",
    }
    assert {"base", "comment", "fail-on-change", "install", "python"} <= set(action["inputs"])
    assert action["outputs"]["changed"]["value"] == "${{ steps.review.outputs.changed }}"
    assert SCRIPT.is_file()
    assert os.access(SCRIPT, os.X_OK)
