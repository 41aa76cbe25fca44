"""The core names no facet: recording, golden, diff, picture, report, checks and cli iterate
over facets (`Facet`, calls/facet_records.py) instead of branching on costs, values, backward, ...

Where a core module names a built-in facet today is listed below: each is a place that facet
has not yet moved into its own module. The map must equal what the modules name, so a new
place fails, and so does one that no longer names its facet (the map can only shrink).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_fwdorder"
CORE = ("recording", "tracing", "golden", "diff", "picture", "report", "checks", "cli")
# Each built-in facet, by the words its names are made of (`render_call_costs`, `.flops`):
# one word, or two in a row where one alone means something else (`local` is torch's
# `to_local`; `compiled` a model torch.compile wrapped, which every trace looks through).
VOCABULARY = {
    "costs": {"cost", "costs", "flops"},
    "values": {"fingerprint", "fingerprints", "values tolerance"},
    "backward": {"backward"},
    "operations": {"operation", "operations"},
    "initialization": {"initialization"},
    "graph_breaks": {"graph breaks", "graph break", "recompilation", "recompilations"},
    "devices": {"devices"},
    "local_shapes": {"local shapes"},
}
# Module below the package -> the built-in facets it still names (issue 32: each goes when
# that facet is one module behind the protocol, as a plugin's facet already is). The checks
# besides the golden are each one facet's gate, and name it by their job.
NAMED_TODAY = {
    "checks/compile_gates.py": {"graph_breaks"},
    "checks/cost_budgets.py": {"costs"},
}
# Module below the package -> the facet modules it imports (facets/, by file name): none,
# but for a check that is one facet's gate.
IMPORTS_TODAY = {"checks/compile_gates.py": {"graph_breaks"}}


def identifiers(source: str) -> Iterator[str]:
    """Every name the code uses or defines: variables, attributes, functions, classes,
    arguments, keywords and imports (not strings or comments)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            yield node.arg
        elif isinstance(node, ast.alias):
            yield from (node.asname or node.name).split(".")
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield from node.module.split(".")


def facets_named(source: str) -> set[str]:
    """The built-in facets whose words, one or two in a row, make up a name in `source`."""
    words = set()
    for name in identifiers(source):
        parts = name.lower().split("_")
        words.update(parts)
        words.update(f"{first} {second}" for first, second in itertools.pairwise(parts))
    return {facet for facet, vocabulary in VOCABULARY.items() if words & vocabulary}


def facet_modules_imported(source: str) -> set[str]:
    """The modules of facets/ that `source` imports, by file name."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(
            name.split(".")[2] for name in names if name.startswith("pytest_fwdorder.facets.")
        )
    return found


def named_in_core() -> dict[str, set[str]]:
    named = {}
    for folder in CORE:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            found = facets_named(path.read_text(encoding="utf-8"))
            if found:
                named[path.relative_to(PACKAGE).as_posix()] = found
    return named


def test_the_core_names_no_facet_but_where_listed() -> None:
    named = named_in_core()
    new = {path: sorted(found - NAMED_TODAY.get(path, set())) for path, found in named.items()}
    new = {path: found for path, found in new.items() if found}
    assert not new, (
        f"core modules name facets they did not before: {new}; iterate over the facets "
        "(Facet, calls/facet_records.py) instead of naming one"
    )
    gone = {
        path: sorted(listed - named.get(path, set()))
        for path, listed in NAMED_TODAY.items()
        if listed - named.get(path, set())
    }
    assert not gone, f"no longer named, so take them off NAMED_TODAY: {gone}"


def test_the_scan_finds_a_facet_named_in_code_and_not_in_words() -> None:
    assert facets_named("from x.render import render_call_costs\n") == {"costs"}
    assert facets_named("line.flops\n") == {"costs"}
    assert facets_named("show_local_shapes = True\n") == {"local_shapes"}
    assert facets_named("count_graph_breaks()\n") == {"graph_breaks"}
    assert facets_named("tensor.to_local()\ncompiled = graph\n") == set()
    assert facets_named('"""costs and backward, in prose only"""\n# fingerprints\n') == set()


def test_the_core_imports_no_facet_module_but_where_listed() -> None:
    imported = {}
    for folder in CORE:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            found = facet_modules_imported(path.read_text(encoding="utf-8"))
            if found:
                imported[path.relative_to(PACKAGE).as_posix()] = found
    assert imported == IMPORTS_TODAY


def test_the_import_scan_finds_a_facet_module_however_imported() -> None:
    assert facet_modules_imported("from pytest_fwdorder.facets.costs import COSTS\n") == {"costs"}
    assert facet_modules_imported("from pytest_fwdorder.facets import values\n") == {"values"}
    assert facet_modules_imported("import pytest_fwdorder.facets.backward as b\n") == {"backward"}
    assert facet_modules_imported("from pytest_fwdorder.golden import format\n") == set()


def test_the_code_that_carries_plugin_facets_names_no_facet() -> None:
    for module in ("diff/facet_changes.py", "golden/facet_facts.py"):
        assert facets_named((PACKAGE / module).read_text(encoding="utf-8")) == set()
    records = (PACKAGE / "calls" / "facet_records.py").read_text(encoding="utf-8")
    protocol = [
        ast.get_source_segment(records, node)
        for node in ast.parse(records).body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef))
        and node.name in ("Facet", "checked_facets")
    ]
    assert len(protocol) == 2
    assert facets_named("\n\n".join(filter(None, protocol))) == set()
