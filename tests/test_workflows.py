"""The GitHub Actions workflows, which cannot run here: what they call is what runs here.

CI for pull requests runs .ci/run unchanged; the release builds and checks with
.ci/check-wheel (which tests/test_packaging.py runs) and publishes only the files that
check left, with trusted publishing and attestations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    return loaded


def runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in job["steps"] if "uses" in step]


def test_ci_runs_what_ci_run_runs_on_pull_requests() -> None:
    ci = workflow("ci.yml")
    # PyYAML reads the key `on` as True (YAML 1.1).
    triggers = ci[True]

    assert "pull_request" in triggers
    assert "bash .ci/run" in runs(ci["jobs"]["ci-run"])
    assert "./" in uses(ci["jobs"]["review-goldens"])


def test_the_release_checks_the_wheel_with_the_script_ci_runs_and_publishes_what_it_built() -> None:
    release = workflow("release.yml")
    build, publish = release["jobs"]["build"], release["jobs"]["publish"]

    assert release[True] == {"push": {"tags": ["v*"]}}
    assert any(".ci/check-wheel --dist dist" in run for run in runs(build))
    assert build["steps"][0]["with"]["fetch-depth"] == 0
    upload = next(
        step for step in build["steps"] if step.get("uses", "").startswith("actions/upload")
    )
    assert upload["with"]["path"] == "dist/"
    assert publish["needs"] == "build"
    assert publish["permissions"] == {"id-token": "write"}
    assert "pypa/gh-action-pypi-publish@release/v1" in uses(publish)
    assert publish["steps"][-1]["with"]["attestations"] is True
    assert (ROOT / ".ci" / "check-wheel").is_file()
