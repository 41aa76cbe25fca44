"""The core names no facet: recording, golden, diff, picture, report, checks and cli iterate
over facets (`Facet`, calls/facet_records.py) instead of branching on costs, values, backward, ...

Where a core module names a built-in facet today is listed below: each is a place that facet
has not yet moved into its own module. The map must equal what the modules name, so a new
place fails, and so does one that no longer names its facet (the map can only shrink).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_fwdorder"
CORE = ("recording", "tracing", "golden", "diff", "picture", "report", "checks", "cli")
# Each built-in facet, by the words its names are made of (`render_call_costs`, `.flops`).
VOCABULARY = {
    "costs": {"cost", "costs", "flops"},
    "values": {"fingerprint", "fingerprints", "tolerance"},
    "backward": {"backward"},
    "operations": {"operation", "operations"},
    "initialization": {"initialization"},
    "graph_breaks": {"graph", "compiled"},
    "devices": {"devices"},
    "local_shapes": {"local"},
}
# Module below the package -> the built-in facets it still names (issue 32: each goes when
# that facet is one module behind the protocol, as a plugin's facet already is).
NAMED_TODAY = {
    # A DTensor's description, not the local shapes facet (facets/local_shapes.py, which only
    # writes it): its shard shape is read with its placements (torch's `to_local`) and kept
    # in the description's `local_shape`, as a tensor's device is kept whether shown or not.
    "recording/describe.py": {"local_shapes"},
    "recording/distributed.py": {"graph_breaks", "local_shapes"},
    "tracing/forward.py": {"graph_breaks"},
    # The kinds of change operations give (`line_changes`: "operation inserted", ...), which
    # a diff counts and words as its own, and the costs facet's uncounted operations.
    "diff/changes.py": {"operations"},
    "diff/classification.py": {"operations"},
    "diff/explanation.py": {"operations"},
    "picture/parity_picture.py": {"values"},
    # The checks besides the golden: a budget or a gate on one facet's measure names it by
    # its job (cost budgets, compile gates); structure comparison names what it may ignore or
    # compare; "graph" is torch.export's graph and "tolerance" a parity tolerance.
    "checks/compile_gates.py": {"graph_breaks"},
    "checks/cost_budgets.py": {"costs"},
    "checks/export_structure.py": {"graph_breaks"},
    "checks/parity.py": {"values"},
}  # fmt: skip


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
    """The built-in facets whose words make up a name in `source`."""
    words = {word for name in identifiers(source) for word in name.lower().split("_")}
    return {facet for facet, vocabulary in VOCABULARY.items() if words & vocabulary}


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
    assert facets_named('"""costs and backward, in prose only"""\n# fingerprints\n') == set()


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
