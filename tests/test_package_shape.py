"""Sizes a reader can hold in their head: modules of at most 600 lines, functions of at most 60.

What is over today is listed below with the reason; a listed entry that is no longer over
fails too, so the lists can only shrink. Nothing may be added to them: split the module by
job, or the function into named steps, instead.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_fwdorder"
MODULE_LINES = 600
FUNCTION_LINES = 60

# Module (path below the package) -> why it is still over 600 lines.
MODULES_OVER: dict[str, str] = {}

# "path:function" -> why it is still over 60 lines.
FUNCTIONS_OVER = {
    # Runs for every torch-level operation under ops=True: a hot path that keeps its locals.
    "facets/operation_capture.py:__torch_function__": "the per-operation hot path of ops=True",
    # Walks every parameter and buffer once per trace, on the recorder's path.
    "recording/module_facts.py:index_tensors": "the per-trace tensor index, kept in one loop",
}


def module_sizes() -> dict[str, int]:
    """Each module's path below the package -> its number of lines."""
    return {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def function_sizes(source: str) -> dict[str, int]:
    """Each function's (and method's, and closure's) name -> its lines, decorators included;
    the longest where a name repeats."""
    sizes: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
            start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            sizes[node.name] = max(sizes.get(node.name, 0), node.end_lineno - start + 1)
    return sizes


def functions_over(limit: int) -> set[str]:
    return {
        f"{path.relative_to(PACKAGE).as_posix()}:{name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, lines in function_sizes(path.read_text(encoding="utf-8")).items()
        if lines > limit
    }


def test_no_module_is_over_600_lines_but_those_listed() -> None:
    over = {path for path, lines in module_sizes().items() if lines > MODULE_LINES}

    assert over - set(MODULES_OVER) == set(), "split these by job"
    assert set(MODULES_OVER) - over == set(), "no longer over: take them off the list"


def test_no_function_is_over_60_lines_but_those_listed() -> None:
    over = functions_over(FUNCTION_LINES)

    assert over - set(FUNCTIONS_OVER) == set(), "split these into named steps"
    assert set(FUNCTIONS_OVER) - over == set(), "no longer over: take them off the list"


def test_the_function_measure_counts_decorators_and_finds_a_long_function() -> None:
    # The oracle can fail: a 62-line function (decorator, def, 60 body lines) is found.
    body = "".join(f"    x{number} = {number}\n" for number in range(60))
    source = f"@decorator\ndef long():\n{body}\ndef short():\n    pass\n"

    assert function_sizes(source) == {"long": 62, "short": 2}


def tracked_package_files() -> list[str]:
    """The package's files under version control, as paths below the package."""
    listed = subprocess.run(
        ["git", "ls-files", "--", str(PACKAGE)],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [str(Path(path).relative_to(PACKAGE.name)) for path in listed]


def stray_files(paths: list[str]) -> list[str]:
    """Paths that are neither Python source nor the `py.typed` marker (merge leftovers)."""
    return [path for path in paths if not path.endswith(".py") and path != "py.typed"]


def test_the_package_holds_only_source_and_its_type_marker() -> None:
    if not (PACKAGE.parent / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked")
    assert stray_files(tracked_package_files()) == []


def test_a_merge_leftover_is_a_stray_file() -> None:
    assert stray_files(["golden/format.py", "py.typed", "snapshot/policy.py.orig"]) == [
        "snapshot/policy.py.orig"
    ]
