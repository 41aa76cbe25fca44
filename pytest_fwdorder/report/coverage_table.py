"""The coverage table: which classes the modules matching a path pattern are, by layer.

Adapters and quantization are applied by pattern, and a pattern that misses a layer (or
matches nothing) fails silently. `coverage(trace, "layers.*.self_attn.[qv]_proj")` gives
a table of the classes of the matching modules with their layer indices (`trace.coverage`
and `fwdorder show --coverage` print it); `checks/coverage.py` asserts on it. Pure
functions of a trace's records (or of a golden's call lines), no torch.

A pattern is a dotted path whose names may hold shell wildcards (`*`, `?`, `[qv]`): each
matches one name, and `**` any number of names (`**.q_proj`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.golden.parse import parse_golden

__all__ = ["Coverage", "CoverageRow", "coverage", "golden_coverage"]


@dataclass(frozen=True)
class CoverageRow:
    """The modules of one class among a pattern's matches: their paths and layer indices
    (the first name of each path that is a number; None for a path without one)."""

    class_name: str
    paths: tuple[str, ...]
    indices: tuple[int | None, ...]

    @property
    def layers(self) -> str:
        """The layer indices as ranges: `0-6, 8-31` (`-` when no path has one)."""
        return layer_ranges([index for index in self.indices if index is not None]) or "-"


@dataclass(frozen=True)
class Coverage:
    """The classes of the modules a pattern matches, most common first."""

    pattern: str
    rows: tuple[CoverageRow, ...]

    @property
    def matched(self) -> int:
        return sum(len(row.paths) for row in self.rows)

    def render(self) -> str:
        """The table: one line per class with its count and layers."""
        lines = [f"coverage of {self.pattern}: {self.matched} modules"]
        width = max((len(row.class_name) for row in self.rows), default=0)
        lines += [
            f"  {row.class_name:<{width}}  {len(row.paths):>4}  layers {row.layers}"
            for row in self.rows
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def missing(self, is_a: str) -> list[CoverageRow]:
        """The rows whose class is not `is_a` (see `class_matches`)."""
        return [row for row in self.rows if not class_matches(row.class_name, is_a)]


def class_matches(class_name: str, is_a: str) -> bool:
    """Whether a qualified class name is the class `is_a` names: the same last name, and
    each of `is_a`'s other names among the qualified name's, in order
    (`lora.Linear` is `peft.tuners.lora.layer.Linear`; `nn.Linear` is
    `torch.nn.modules.linear.Linear`; `Linear` is both)."""
    names, wanted = class_name.split("."), is_a.split(".")
    if names[-1] != wanted[-1]:
        return False
    position = 0
    for name in wanted[:-1]:
        try:
            position = names.index(name, position, len(names) - 1) + 1
        except ValueError:
            return False
    return True


def path_matches(path: str, pattern: str) -> bool:
    """Whether a dotted module path matches a pattern (module docstring)."""
    return _match(path.split(".") if path else [], pattern.split("."))


def _match(names: list[str], parts: list[str]) -> bool:
    if not parts:
        return not names
    if parts[0] == "**":
        return any(_match(names[start:], parts[1:]) for start in range(len(names) + 1))
    return bool(names) and fnmatchcase(names[0], parts[0]) and _match(names[1:], parts[1:])


def coverage(trace: TraceRecords, pattern: str) -> Coverage:
    """The classes of the registered modules whose paths match `pattern`, by qualified name."""
    classes = trace.module_classes or {path: found[0] for path, found in trace.modules.items()}
    return _coverage(pattern, classes)


def golden_coverage(text: str, pattern: str) -> Coverage:
    """The same table from golden text, which names classes by their short names: modules
    whose classes share a name but call other children are told apart by those children
    (`Linear calling base_layer, lora_A.default, ...`)."""
    _, lines = parse_golden(text)
    first = {line.path: line.module_type for line in lines if line.nth == 1}
    children: dict[str, list[str]] = {}
    for path in first:
        for above in _prefixes(path):
            if above in first:
                children.setdefault(above, []).append(path[len(above) + 1 :])
                break
    classes = {
        path: f"{name} calling {', '.join(children[path])}" if path in children else name
        for path, name in first.items()
    }
    return _coverage(pattern, classes)


def _coverage(pattern: str, classes: dict[str, str]) -> Coverage:
    by_class: dict[str, list[str]] = {}
    for path, class_name in classes.items():
        if path_matches(path, pattern):
            by_class.setdefault(class_name, []).append(path)
    rows = [
        CoverageRow(name, tuple(paths), tuple(_layer_index(path) for path in paths))
        for name, paths in by_class.items()
    ]
    rows.sort(key=lambda row: -len(row.paths))
    return Coverage(pattern, tuple(rows))


def _layer_index(path: str) -> int | None:
    return next((int(name) for name in path.split(".") if name.isdigit()), None)


def _prefixes(path: str) -> list[str]:
    """`a.b.c` -> `a.b`, `a`, `` (nearest first)."""
    names = path.split(".")
    return [".".join(names[:end]) for end in range(len(names) - 1, -1, -1)]


def layer_ranges(indices: list[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2, 5`."""
    parts: list[str] = []
    for index in sorted(set(indices)):
        if parts and index == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{index}"
        else:
            parts.append(str(index))
    return ", ".join(parts)
