"""House rules CI enforces: ruff lint and format, mypy strict on the package."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["pytest_fwdorder", "tests", "examples", "benchmarks"]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_ruff_finds_nothing_to_lint() -> None:
    finished = run("ruff", "check", *SOURCES)

    assert finished.returncode == 0, finished.stdout


@pytest.mark.slow
def test_the_code_is_ruff_formatted() -> None:
    finished = run("ruff", "format", "--check", *SOURCES)

    assert finished.returncode == 0, finished.stdout


@pytest.mark.slow
def test_the_package_passes_mypy_strict() -> None:
    finished = run("mypy")

    assert finished.returncode == 0, finished.stdout


def package_modules() -> dict[str, Path]:
    """Dotted module name below the package (`recording.recorder`, `__init__`) -> its file."""
    package = ROOT / "pytest_fwdorder"
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        modules[".".join(parts)] = path
    return modules


def package_imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports, at any level (function-level imports too)."""
    modules = package_modules()
    return {
        name: imports_of_source(path.read_text(), set(modules)) - {name}
        for name, path in modules.items()
    }


def imports_of_source(source: str, modules: set[str]) -> set[str]:
    """The package modules `source` imports: `import pytest_fwdorder.golden.render`, `from
    pytest_fwdorder.recording import recorder` (that module) and `from pytest_fwdorder
    import trace_forward` (the package's face, `__init__`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(
                module_named(alias.name, modules)
                for alias in node.names
                if alias.name.split(".")[0] == "pytest_fwdorder"
            )
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] != "pytest_fwdorder":
                continue
            for alias in node.names:
                imported = f"{node.module}.{alias.name}".removeprefix("pytest_fwdorder.")
                found.add(imported if imported in modules else module_named(node.module, modules))
    return found


def module_named(dotted: str, modules: set[str]) -> str:
    """The package module an import names (`pytest_fwdorder.golden` -> `golden.__init__`)."""
    name = dotted.removeprefix("pytest_fwdorder").removeprefix(".")
    if name in modules:
        return name
    return f"{name}.__init__" if f"{name}.__init__" in modules else "__init__"


def cycle_in(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first repeated last), or None."""
    done: set[str] = set()

    def visit(path: list[str]) -> list[str] | None:
        for target in sorted(edges.get(path[-1], ())):
            if target in path:
                return [*path[path.index(target) :], target]
            if target not in done and (found := visit([*path, target])):
                return found
        done.add(path[-1])
        return None

    for start in sorted(edges):
        if start not in done and (found := visit([start])):
            return found
    return None


def test_the_circle_finder_can_fail() -> None:
    assert cycle_in({"trace": {"render"}, "render": {"trace"}}) == ["render", "trace", "render"]


def test_the_package_has_no_import_circle() -> None:
    edges = package_imports()
    # __init__ names every module lazily; it is the top, never imported by the others.
    del edges["__init__"]

    assert cycle_in(edges) is None


RECORDS = {
    "calls.records",
    "calls.facet_records",
    "calls.call_line_facets",
    "calls.change_kinds",
    "calls.value_descriptions",
}


def test_the_records_at_the_bottom_import_nothing_of_the_package_but_each_other() -> None:
    imports = package_imports()
    assert {name: imports[name] - RECORDS for name in RECORDS} == {name: set() for name in RECORDS}


# The package's stages from the bottom up (docs/architecture.md draws them): a folder or a
# module at the root imports only from the layers below its own, and from itself.
LAYERS = (
    ("calls", "errors"),
    ("hookspecs",),
    ("golden", "options"),
    ("recording", "diff"),
    ("facets", "picture", "snapshot"),
    ("report",),
    ("trace",),
    ("tracing",),
    ("checks", "plugin"),
    ("__init__",),
    ("cli",),
    ("__main__",),
)


def unit_of(module: str) -> str:
    """The folder a module is in (`recording.meta.build` -> `recording`), or the root module."""
    return module.split(".")[0]


def imports_upward(edges: dict[str, set[str]]) -> list[str]:
    """Each import of a module from its own layer (another unit) or one above, as `a -> b`."""
    layer = {unit: number for number, units in enumerate(LAYERS) for unit in units}
    return [
        f"{module} -> {target}"
        for module, targets in sorted(edges.items())
        for target in sorted(targets)
        if unit_of(target) != unit_of(module) and layer[unit_of(target)] >= layer[unit_of(module)]
    ]


def test_every_unit_of_the_package_is_on_one_layer() -> None:
    units = {unit_of(module) for module in package_modules()}

    assert units == {unit for layer in LAYERS for unit in layer}


def test_no_module_imports_from_its_own_layer_or_above() -> None:
    assert imports_upward(package_imports()) == []


def documented_layers() -> tuple[tuple[str, ...], ...]:
    """The layers docs/architecture.md draws, bottom first (` 8  checks/, plugin.py  ...`)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    layers = {}
    for line in block.splitlines():
        number, units = line.split(maxsplit=1)
        names = re.split(r"\s{2,}", units.strip())[0].split(", ")
        layers[int(number)] = tuple(name.removesuffix("/").removesuffix(".py") for name in names)
    return tuple(layers[number] for number in sorted(layers))


def test_the_layers_are_the_ones_the_architecture_page_draws() -> None:
    assert documented_layers() == LAYERS


def test_the_layer_check_finds_an_import_upward_and_one_across() -> None:
    edges = {
        "golden.render": {"calls.records", "diff.changes"},  # up
        "picture.svg": {"snapshot.policy", "picture.layout"},  # across
    }

    assert imports_upward(edges) == [
        "golden.render -> diff.changes",
        "picture.svg -> snapshot.policy",
    ]


def test_the_import_reader_finds_every_form_of_import() -> None:
    """A plain import, a module by name from its folder, and a public name from the face, at
    module level or inside a function: each is an arrow the layer check sees."""
    source = (
        "import pytest_fwdorder.golden.render\n"
        "from pytest_fwdorder.recording import recorder\n"
        "def later():\n"
        "    from pytest_fwdorder import trace_forward\n"
        "    import pytest_fwdorder.diff\n"
        "    import torch\n"
    )

    found = imports_of_source(source, set(package_modules()))

    assert found == {"golden.render", "recording.recorder", "__init__", "diff.__init__"}


def test_the_test_suite_does_not_reach_into_examples() -> None:
    offenders = [
        path.name
        for path in (ROOT / "tests").rglob("*.py")
        if re.search(r"sys\.path.*examples", path.read_text())
    ]

    assert offenders == []


def raises_without_match(source: str) -> list[int]:
    """Lines of `pytest.raises(...)` calls that do not say which message they expect."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "raises"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "pytest"
        and not any(keyword.arg == "match" for keyword in node.keywords)
    ]


def test_every_pytest_raises_says_which_message_it_expects() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("tests", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in raises_without_match(path.read_text(encoding="utf-8"))
    ]

    assert offenders == []


def test_the_raises_check_finds_a_raises_without_match() -> None:
    assert raises_without_match("with pytest.raises(ValueError):\n    pass\n") == [1]


def test_no_module_only_aliases_an_old_import_path() -> None:
    offenders = [
        name
        for name, path in package_modules().items()
        if "sys.modules[__name__]" in path.read_text(encoding="utf-8")
    ]

    assert offenders == []


def test_every_folder_init_is_empty_of_code_so_start_up_imports_nothing() -> None:
    """A folder's `__init__` runs when any module below it is imported: a docstring only."""
    offenders = []
    for name, path in package_modules().items():
        if name.endswith("__init__") and name != "__init__":
            body = ast.parse(path.read_text(encoding="utf-8")).body
            if any(
                not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
                for node in body
            ):
                offenders.append(name)

    assert offenders == []
