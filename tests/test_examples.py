"""`examples/` is what users copy: it must run as copied and never shadow a real package."""

from __future__ import annotations

import importlib.machinery
import shutil
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FOLDERS = sorted(
    path.name for path in EXAMPLES.iterdir() if path.is_dir() and not path.name.startswith("__")
)


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_example_folder_is_named_like_an_installed_package(folder: str) -> None:
    # pytest puts examples/ on sys.path; a folder named `transformers` would then be imported
    # as a namespace package in place of the real one.
    assert _installed_spec(folder) is None


def test_the_oracle_sees_an_installed_package_name() -> None:
    assert _installed_spec("torchvision") is not None


def _installed_spec(name: str) -> object:
    """Where `name` imports from when examples/ itself is not on sys.path (pytest puts it there)."""
    elsewhere = [entry for entry in sys.path if Path(entry or ".").resolve() != EXAMPLES]
    return importlib.machinery.PathFinder.find_spec(name, elsewhere)


@pytest.mark.transformers
def test_the_transformers_example_runs_as_copied_under_strict_markers(
    pytester: pytest.Pytester,
) -> None:
    shutil.copytree(EXAMPLES / "huggingface_models", pytester.path / "huggingface_models")

    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider")

    result.assert_outcomes(passed=6)
