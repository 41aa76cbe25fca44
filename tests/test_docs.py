"""Every Python block of the README and the docs site runs, so no snippet can drift.

A page's blocks run in order, in one fresh process, as one script: a later block may use what
an earlier one defined, as a reader would. Blocks whose first line names a file
(`# test_model.py`, `# conftest.py`) are files of a small pytest project instead: the page's files are written
together, then `pytest --snapshot-update` and a plain `pytest` must both pass. A block can be
left out only by a `<!-- not run: reason -->` line right above it. The page runs and the
site build are `slow` (CI runs them with `-m ""`): together they take about a minute.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_FENCE = re.compile(r"^(?P<indent> *)```(?P<language>[a-z]*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+) -->$")
_FILE_NAME = re.compile(r"^# (?P<name>[a-z_][a-z0-9_]*\.py)\s*$")
# `from pytest_fwdorder.snapshot import ...`, `import pytest_fwdorder.picture.svg`: a module
# below the package, whose names may move; users import from `pytest_fwdorder` itself.
_PRIVATE_IMPORT = re.compile(
    r"^\s*(?:from\s+pytest_fwdorder\.(?P<from>[\w.]+)\s+import|import\s+pytest_fwdorder\.(?P<import>[\w.]+))",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it starts, its code, and why it is not run if it is not."""

    page: Path
    line: int
    code: str
    not_run: str | None

    @property
    def file_name(self) -> str | None:
        match = _FILE_NAME.match(self.code.split("\n", 1)[0])
        return match.group("name") if match else None


def python_blocks(page: Path) -> list[Block]:
    """The page's ```python blocks, in order."""
    lines = page.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None or not fence.group("language"):
            index += 1
            continue
        indent, language, start = fence.group("indent"), fence.group("language"), index
        index += 1
        body: list[str] = []
        while index < len(lines) and lines[index].strip() != "```":
            body.append(lines[index][len(indent) :])
            index += 1
        index += 1
        if language == "python":
            above = lines[start - 1] if start else ""
            not_run = _NOT_RUN.match(above)
            blocks.append(
                Block(
                    page, start + 1, "\n".join(body), not_run.group("reason") if not_run else None
                )
            )
    return blocks


def private_imports(block: Block) -> list[str]:
    """`page:line: statement` for each import in the block from a module below the package."""
    found = []
    for match in _PRIVATE_IMPORT.finditer(block.code):
        line = block.line + block.code.count("\n", 0, match.start()) + 1
        statement = block.code[match.start() :].split("\n", 1)[0].strip()
        page = _page_id(block.page) if block.page.is_relative_to(ROOT) else block.page.name
        found.append(f"{page}:{line}: {statement}")
    return found


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _run(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "NO_COLOR": "1", "PYTHONHASHSEED": "0"}
    environment.pop("PYTEST_XDIST_WORKER", None)
    environment.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        arguments,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.parametrize("page", [page for page in PAGES if python_blocks(page)], ids=_page_id)
def test_every_python_block_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    blocks = [block for block in python_blocks(page) if block.not_run is None]
    files = [block for block in blocks if block.file_name is not None]
    script = [block for block in blocks if block.file_name is None]
    if script:
        source = "\n\n".join(f"# {_page_id(page)}:{block.line}\n{block.code}" for block in script)
        (tmp_path / "page_script.py").write_text(source, encoding="utf-8")
        result = _run([sys.executable, "page_script.py"], tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    if files:
        project = tmp_path / "project"
        project.mkdir()
        for block in files:
            assert block.file_name is not None
            (project / block.file_name).write_text(block.code + "\n", encoding="utf-8")
        for arguments in (["--snapshot-update"], []):
            result = _run(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *arguments],
                project,
            )
            assert result.returncode == 0, result.stdout + result.stderr


def test_every_block_left_out_says_why() -> None:
    left_out = [block for page in PAGES for block in python_blocks(page) if block.not_run]

    assert all(len(block.not_run or "") > 10 for block in left_out), left_out


def test_the_block_reader_sees_a_broken_block_so_the_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nraise SystemExit(3)\n```\n", encoding="utf-8")

    (block,) = python_blocks(page)
    (tmp_path / "script.py").write_text(block.code, encoding="utf-8")

    assert block.line == 3
    assert _run([sys.executable, "script.py"], tmp_path).returncode == 3


def test_python_blocks_import_only_the_public_names_of_the_package() -> None:
    private = [
        found for page in PAGES for block in python_blocks(page) for found in private_imports(block)
    ]

    assert private == [], "import these from `pytest_fwdorder` instead:\n" + "\n".join(private)


def test_the_private_import_check_sees_both_spellings_so_it_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nfrom pytest_fwdorder import trace_forward\n"
        "from pytest_fwdorder.diff.diffing import diff_golden\n"
        "import pytest_fwdorder.picture.svg as svg\n```\n",
        encoding="utf-8",
    )

    (block,) = python_blocks(page)

    assert [found.split(":", 1)[1] for found in private_imports(block)] == [
        "3: from pytest_fwdorder.diff.diffing import diff_golden",
        "4: import pytest_fwdorder.picture.svg as svg",
    ]


@pytest.mark.slow
def test_the_docs_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    result = _run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        ROOT,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
