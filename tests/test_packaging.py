"""The package as a user installs it: the wheel built from a tagged copy of this tree holds
every file of the package and the metadata pyproject.toml declares, installs alone into a
fresh environment, and says the tag's version; an untagged tree builds a dev version.

The build runs `.ci/check-wheel`, the script .ci/run and the release workflow run, on a copy
of the work tree committed in a scratch repository and tagged `v0.7.0`: the real repository
and its tags are never touched. The copy gains a subpackage (`pytest_fwdorder/probe/`), so
the wheel is shown to find subpackages by itself. The build needs the package index (an
isolated build environment); those tests are marked `packaging` (CI runs them) and share
one build, about 40 s of CPU (the examples' run is most of it).
"""

from __future__ import annotations

import email.parser
import email.policy
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock
from git_goldens import git
from packaging.requirements import Requirement
from packaging.version import Version
from scratch_trees import TAG, copy_work_tree

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROBE = {
    "pytest_fwdorder/probe/__init__.py": '"""A subpackage only the packaging tests add."""\n',
    "pytest_fwdorder/probe/inner.py": "VALUE = 1\n",
}


@dataclass(frozen=True)
class Build:
    """What `.ci/check-wheel` built from a tagged copy, and what it printed."""

    source: Path
    wheel: Path
    sdist: Path
    output: str


def check_wheel(source: Path, dist: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`.ci/check-wheel` with this interpreter's environment first on PATH."""
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        [
            "bash",
            str(ROOT / ".ci" / "check-wheel"),
            "--source",
            str(source),
            "--dist",
            str(dist),
            *arguments,
        ],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=900,
    )


def scm_version(source: Path) -> str:
    """The version setuptools-scm gives `source`, as a build would."""
    result = subprocess.run(
        [sys.executable, "-m", "setuptools_scm"],
        cwd=source,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]


def package_files(source: Path) -> set[str]:
    """Every file under `source`'s pytest_fwdorder/, bytecode left out, as wheel paths."""
    return {
        path.relative_to(source).as_posix()
        for path in (source / "pytest_fwdorder").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def missing_from_wheel(expected: Iterable[str], wheel_names: Iterable[str]) -> list[str]:
    """The files of `expected` that the wheel lacks."""
    present = set(wheel_names)
    return sorted(name for name in expected if name not in present)


@pytest.fixture(scope="session")
def tagged_build(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Build:
    """One build a session: under pytest-xdist the workers share it through a lock."""
    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker: its parent is the run's
        shared = shared.parent
    folder = shared / "tagged_build"
    with FileLock(f"{folder}.lock"):
        if not (folder / "output.txt").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            source = folder / "source"
            source.mkdir(parents=True)
            for name, text in PROBE.items():
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                (source / name).write_text(text, encoding="utf-8")
            copy_work_tree(source)
            git(source, "tag", TAG)
            result = check_wheel(source, folder / "dist")
            assert result.returncode == 0, result.stdout + result.stderr
            (folder / "output.txt").write_text(result.stdout + result.stderr, encoding="utf-8")
    (wheel,) = (folder / "dist").glob("*.whl")
    (sdist,) = (folder / "dist").glob("*.tar.gz")
    output = (folder / "output.txt").read_text(encoding="utf-8")
    return Build(folder / "source", wheel, sdist, output)


@pytest.mark.packaging
def test_a_tagged_tree_builds_installs_and_reports_the_tags_version(tagged_build: Build) -> None:
    version = TAG.removeprefix("v")

    assert tagged_build.wheel.name == f"pytest_fwdorder-{version}-py3-none-any.whl"
    assert tagged_build.sdist.name == f"pytest_fwdorder-{version}.tar.gz"
    # check-wheel printed these from the fresh environment the wheel was installed into.
    assert f"\nfwdorder {version}\n" in tagged_build.output
    assert re.search(
        rf"^pytest_fwdorder {re.escape(version)} from .+/site-packages/pytest_fwdorder$",
        tagged_build.output,
        re.MULTILINE,
    ), tagged_build.output
    assert "PASSED" in tagged_build.output  # twine check


@pytest.mark.packaging
def test_the_examples_pass_against_the_installed_wheel(tagged_build: Build) -> None:
    # check-wheel copied examples/ out of the tree and ran them with the fresh environment;
    # each test function there runs at least once.
    functions = sum(
        len(re.findall(r"^def test_", path.read_text(encoding="utf-8"), re.MULTILINE))
        for path in (ROOT / "examples").rglob("test_*.py")
    )
    (passed,) = re.findall(r"^(\d+) passed in ", tagged_build.output, re.MULTILINE)

    assert functions >= 4
    assert int(passed) >= functions
    assert f"check-wheel: {tagged_build.wheel.name} passed" in tagged_build.output


@pytest.mark.packaging
def test_the_wheel_holds_every_file_of_the_package_and_nothing_else(tagged_build: Build) -> None:
    names = zipfile.ZipFile(tagged_build.wheel).namelist()
    package = {name for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    expected = package_files(tagged_build.source)

    assert missing_from_wheel(expected, names) == []
    assert package == expected
    assert {"pytest_fwdorder/py.typed", *PROBE} <= package
    # The oracle sees a file the wheel lacks.
    assert missing_from_wheel(expected, set(names) - {"pytest_fwdorder/probe/inner.py"}) == [
        "pytest_fwdorder/probe/inner.py"
    ]


@pytest.mark.packaging
def test_the_wheel_metadata_is_what_pyproject_declares(tagged_build: Build) -> None:
    wheel = zipfile.ZipFile(tagged_build.wheel)
    info = f"pytest_fwdorder-{TAG.removeprefix('v')}.dist-info"
    metadata = email.parser.Parser(policy=email.policy.compat32).parsestr(
        wheel.read(f"{info}/METADATA").decode()
    )
    project = PYPROJECT["project"]

    assert metadata["Name"] == project["name"]
    assert metadata["License-Expression"] == project["license"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert wheel.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    assert metadata["Requires-Python"] == project["requires-python"]
    assert metadata.get_all("Classifier") == project["classifiers"]
    assert {"Framework :: Pytest", "Typing :: Typed"} <= set(project["classifiers"])
    assert [Requirement(line) for line in metadata.get_all("Requires-Dist")] == [
        Requirement(line) for line in project["dependencies"]
    ]
    # No extras: nothing a user can ask for pulls the benchmark peers or the dev tools.
    assert metadata.get_all("Provides-Extra") is None
    assert "torchinfo" not in wheel.read(f"{info}/METADATA").decode()
    entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    for group, declared in (
        ("console_scripts", project["scripts"]),
        ("pytest11", project["entry-points"]["pytest11"]),
    ):
        for name, target in declared.items():
            assert re.search(
                rf"^\[{group}\]\n(?:.+\n)*?{name} = {re.escape(target)}$",
                entry_points,
                re.MULTILINE,
            ), entry_points
            module = target.partition(":")[0].replace(".", "/")
            assert {f"{module}.py", f"{module}/__init__.py"} & set(wheel.namelist()), target


@pytest.mark.packaging
def test_the_sdist_holds_the_license_the_tests_and_the_examples(tagged_build: Build) -> None:
    import tarfile

    with tarfile.open(tagged_build.sdist) as sdist:
        names = {name.partition("/")[2] for name in sdist.getnames()}

    assert {"LICENSE", "README.md", "pyproject.toml", "tests/conftest.py"} <= names
    assert "examples/test_resnet50.py" in names
    assert missing_from_wheel(package_files(tagged_build.source), names) == []


def test_an_untagged_tree_builds_a_dev_version_between_the_last_release_and_the_next(
    tmp_path: Path,
) -> None:
    source = copy_work_tree(tmp_path / "source")
    fallback = Version(PYPROJECT["tool"]["setuptools_scm"]["fallback_version"])

    version = Version(scm_version(source))

    assert version.is_devrelease
    assert version.release == fallback.release
    assert latest_release() < version < Version(fallback.base_version)
    git(source, "tag", TAG)
    assert scm_version(source) == TAG.removeprefix("v")  # the oracle sees a tag


def test_a_tarball_of_a_tag_builds_the_tags_version(tmp_path: Path) -> None:
    # What GitHub hands `uses: owner/pytest-fwdorder@v0.7.0` and a release's source archive:
    # no .git, only .git_archival.txt filled in by `git archive` (export-subst).
    source = copy_work_tree(tmp_path / "source")
    git(source, "tag", TAG)
    archive = subprocess.run(
        ["git", "-C", str(source), "archive", "--format=tar", TAG], capture_output=True, check=True
    ).stdout
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    subprocess.run(["tar", "-x", "-C", str(extracted)], input=archive, check=True)

    assert not (extracted / ".git").exists()
    assert "$Format" not in (extracted / ".git_archival.txt").read_text(encoding="utf-8")
    assert scm_version(extracted) == TAG.removeprefix("v")


def test_the_untagged_fallback_is_newer_than_every_release_and_tag() -> None:
    # After a release is tagged, the fallback must move to the next release's .dev0, or an
    # untagged clone would claim to be older than what is already published.
    fallback = Version(PYPROJECT["tool"]["setuptools_scm"]["fallback_version"])
    tags = git(ROOT, "tag", "--list", "v*").split()

    assert fallback.is_devrelease
    assert all(Version(tag.removeprefix("v")) < fallback for tag in tags), tags
    assert latest_release() < fallback


def latest_release() -> Version:
    """The newest release CHANGELOG.md names (`## [0.6.0] - 2026-12-02`)."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return max(Version(found) for found in re.findall(r"^## \[(\d[^\]]*)\]", text, re.MULTILINE))
