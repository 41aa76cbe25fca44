"""Every install line in the README and the docs works as copied, or says it cannot yet.

A line that installs (`pip install`, `uv pip install`, `uv add`) is run here, in a fresh
environment, against a scratch repository that stands for this one: a copy of the work tree
tagged `v0.7.0`, whose file URL replaces `<repository URL>`. The README's first block is run
by .ci/run itself. A line that cannot work yet says `not on PyPI yet`. pip lines install for
real (torch and the rest come from the running environment through a `.pth` file, as in
.ci/check-wheel; the environment's own pip and setuptools are today's); uv does not read `.pth` files and would fetch torch anew (minutes), so uv
lines resolve against the registries without installing (`--dry-run`, `--no-sync`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from git_goldens import git
from scratch_trees import ROOT, TAG, copy_work_tree

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
NOT_YET = "not on PyPI yet"
_INSTALL = re.compile(r"(?P<command>(?:uv pip|pip) install .+|uv add .+)$")
_FENCE = re.compile(r"^ *```")
VERSION = TAG.removeprefix("v")


def install_commands(page: Path) -> list[tuple[int, str]]:
    """The install commands in the page's fenced blocks, each with its line number; a
    trailing `# comment` is kept (it may say the line cannot work yet)."""
    found: list[tuple[int, str]] = []
    inside = False
    for number, line in enumerate(page.read_text(encoding="utf-8").split("\n"), start=1):
        if _FENCE.match(line):
            inside = not inside
            continue
        match = _INSTALL.search(line) if inside else None
        if match:
            found.append((number, match.group("command").strip()))
    return found


def first_block_commands() -> set[str]:
    """The README's first ```bash block: .ci/run runs these in CI."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return {line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()}


def without_comment(command: str) -> str:
    return command.split("  #", 1)[0].strip()


ALL_COMMANDS = {
    without_comment(command)
    for page in PAGES
    for _, command in install_commands(page)
    if NOT_YET not in command
}
PIP = sorted(
    command
    for command in ALL_COMMANDS - first_block_commands()
    if command.startswith("pip install")
)
UV = sorted(command for command in ALL_COMMANDS if command.startswith("uv "))


def test_every_install_line_is_run_here_or_says_it_cannot_be_yet() -> None:
    lines = [
        (page, number, command) for page in PAGES for number, command in install_commands(page)
    ]
    run = set(PIP) | set(UV) | first_block_commands()
    neither = [
        f"{page.name}:{number}: {command}"
        for page, number, command in lines
        if NOT_YET not in command and without_comment(command) not in run
    ]

    assert neither == []
    assert len(lines) >= 8
    assert any(NOT_YET in command for _, _, command in lines)
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in PIP


def test_the_line_reader_finds_a_line_in_a_yaml_block_and_skips_prose(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Run pip install x here.\n\n```yaml\n      - run: pip install y  # why\n```\n",
        encoding="utf-8",
    )

    assert install_commands(page) == [(4, "pip install y  # why")]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `repository` (the tagged copy), `pytest-fwdorder` (a clone of it at
    the tag) and the wheel built from it, as the README's lines expect."""
    folder = tmp_path_factory.mktemp("install_lines")
    repository = copy_work_tree(folder / "repository")
    git(repository, "tag", TAG)
    git(folder, "clone", "--quiet", "--branch", TAG, str(repository), "pytest-fwdorder")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(folder), str(repository)],
        capture_output=True,
        check=True,
    )
    assert (folder / f"pytest_fwdorder-{VERSION}-py3-none-any.whl").is_file()
    return folder


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_environment(tmp_path_factory.mktemp("environment") / "venv")


def fresh_environment(folder: Path) -> Path:
    """A new virtual environment with today's pip and setuptools (`--upgrade-deps`: a user's
    pip reads `name @ git+file:///...` lines that pip 23 rejects; torch needs setuptools 77+)
    and the running environment's packages through a .pth file, but no pytest_fwdorder."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--upgrade-deps", str(folder)],
        check=True,
        capture_output=True,
    )
    python = folder / "bin" / "python"
    borrowed = folder / "borrowed"
    borrowed.mkdir()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        name = entry.name.lower()
        if not name.startswith(
            ("pytest_fwdorder", "__editable__", "pip", "setuptools")
        ) and not name.endswith(".pth"):
            (borrowed / entry.name).symlink_to(entry)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "borrowed.pth").write_text(f"{borrowed}\n", encoding="utf-8")
    return folder


def run_line(command: str, cwd: Path, environment_folder: Path) -> subprocess.CompletedProcess[str]:
    """`command` as a user types it in `cwd` with the environment activated, `<repository
    URL>` being the scratch repository's file URL."""
    line = command.replace("<repository URL>", f"file://{cwd / 'repository'}")
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"}
    }
    environment["VIRTUAL_ENV"] = str(environment_folder)
    environment["PATH"] = f"{environment_folder / 'bin'}{os.pathsep}{os.environ['PATH']}"
    # uv caches a git source by its URL, and the scratch folder's path repeats between runs
    # (pytest numbers its temporary folders anew once they are deleted): a cache shared with
    # an earlier run resolved its old tag's tree. Each scratch folder gets a cache of its own.
    environment["UV_CACHE_DIR"] = str(cwd / "uv-cache")
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=600,
    )


@pytest.mark.packaging
@pytest.mark.parametrize("command", PIP)
def test_the_pip_line_installs_the_tagged_release(
    command: str, scratch: Path, environment: Path, tmp_path: Path
) -> None:
    # Each line starts from an environment without pytest-fwdorder.
    subprocess.run(
        [
            environment / "bin" / "python",
            "-m",
            "pip",
            "uninstall",
            "--quiet",
            "--yes",
            "pytest-fwdorder",
        ],
        capture_output=True,
        check=True,
    )

    result = run_line(command, scratch, environment)

    assert result.returncode == 0, result.stdout + result.stderr
    where = subprocess.run(
        [
            environment / "bin" / "python",
            "-c",
            "import importlib.metadata, pytest_fwdorder; "
            "print(importlib.metadata.version('pytest-fwdorder'), pytest_fwdorder.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
    ).stdout.split()
    if "pytest-fwdorder" in command or "pytest_fwdorder" in command:
        assert where[0] == VERSION
        assert Path(where[1]).is_relative_to(environment / "lib")
    else:  # the torch line: torch is already there, and stays the one there
        assert "Requirement already satisfied: torch" in result.stdout


@pytest.mark.packaging
@pytest.mark.parametrize("command", UV)
def test_the_uv_line_resolves_the_tagged_release_from_the_registries(
    command: str, scratch: Path, environment: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "my-models"\nversion = "0"\nrequires-python = ">=3.11"\n',
        encoding="utf-8",
    )
    if command.startswith("uv pip install"):
        result = run_line(f"{command} --dry-run", scratch, environment)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output
        # uv names a git requirement by its URL and commit, not its version.
        assert re.search(
            r"^ \+ pytest-fwdorder @ git\+file://\S+/repository@[0-9a-f]{40}$", output, re.MULTILINE
        ), output
    else:
        result = run_line(f"cd {project} && {command} --no-sync", scratch, environment)
        assert result.returncode == 0, result.stdout + result.stderr
        lock = (project / "uv.lock").read_text(encoding="utf-8")
        assert re.search(rf'name = "pytest-fwdorder"\nversion = "{re.escape(VERSION)}"', lock)
        assert "pytest-fwdorder" in (project / "pyproject.toml").read_text(encoding="utf-8")
