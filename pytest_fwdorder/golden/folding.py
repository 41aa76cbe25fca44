"""Ways to look at golden text without changing it: folding deep calls, terminal colours,
and the header's sections. Pure functions on text, no torch.

The golden format itself has one owner, `golden.format`; these functions read it through
its parsers and never write a golden file, only views of one.
"""

from __future__ import annotations

from pytest_fwdorder.golden.format import (
    FACT_PREFIX,
    FROZEN_MARK,
    MODE_MARKS,
    SCRIPTED_MARK,
    UNREGISTERED_MARK,
    GoldenLine,
    folded_mark,
)
from pytest_fwdorder.golden.parse import call_line_parts, end_sections_start, parse_golden

# The section titles and their parser were view's before the golden format had its own
# module; kept importable from here.
__all__ = [
    "colorize_diff",
    "colorize_golden",
    "fold_golden",
]

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RED = "\x1b[31m"
_GREEN = "\x1b[32m"
_YELLOW = "\x1b[33m"
_CYAN = "\x1b[36m"


def fold_golden(text: str, depth: int) -> str:
    """The golden text with every call deeper than `depth` folded into its ancestor.

    The root call is depth 0. A call at `depth` that had calls inside it ends with
    `[+N calls folded]`; folded calls' fact lines go with them. The header is kept as it is,
    so its totals still count every call. Raises ValueError for a negative depth.
    """
    if depth < 0:
        raise ValueError(f"cannot fold at depth {depth!r}: use 0 (the root only) or more")
    header, lines = parse_golden(text)
    shown: list[tuple[GoldenLine, int]] = []  # each kept call and how many calls it folds
    for line in lines:
        if line.depth > depth and shown:
            kept, folded = shown[-1]
            shown[-1] = (kept, folded + 1)
        else:
            shown.append((line, 0))
    body: list[str] = []
    for line, folded in shown:
        suffix = folded_mark(folded) if folded else ""
        body.append(line.text + suffix)
        body.extend(line.fact_lines)
        body.extend(line.under_lines)  # grouped under their call, not between children
    # parse_golden keeps the facets' sections after the calls with the header; they go last.
    end = end_sections_start(header)
    return "\n".join([*header[:end], *body, *header[end:]]) + "\n"


def colorize_golden(text: str) -> str:
    """Golden text with ANSI colours for a terminal: header dim, paths bold, classes cyan,
    marks yellow (`[unregistered]` red), facts dim. Removing the colours gives the text back."""
    return "\n".join(_colorize_line(line) for line in text.split("\n"))


def colorize_diff(lines: list[str]) -> list[str]:
    """A diff explanation with ANSI colours: the summary's first line bold, `-` lines red,
    `+` lines green, elided runs dim."""
    colored: list[str] = []
    for index, line in enumerate(lines):
        if index == 0:
            colored.append(f"{_BOLD}{line}{_RESET}")
        elif line.startswith("- "):
            colored.append(f"{_RED}{line}{_RESET}")
        elif line.startswith("+ "):
            colored.append(f"{_GREEN}{line}{_RESET}")
        elif line.startswith("  ... "):
            colored.append(f"{_DIM}{line}{_RESET}")
        else:
            colored.append(line)
    return colored


def _colorize_line(line: str) -> str:
    stripped = line.lstrip(" ")
    indent = line[: len(line) - len(stripped)]
    if not stripped:
        return line
    if line.startswith("#") or stripped.startswith(FACT_PREFIX):
        return f"{_DIM}{line}{_RESET}"
    parts = call_line_parts(stripped)
    if parts is None:
        return line
    path, words, signature = parts
    head = [f"{_CYAN}{words[0]}{_RESET}"]
    for word in words[1:]:
        if word == UNREGISTERED_MARK:
            head.append(f"{_RED}{_BOLD}{word}{_RESET}")
        elif word in (FROZEN_MARK, SCRIPTED_MARK, *MODE_MARKS):
            head.append(f"{_YELLOW}{word}{_RESET}")
        else:
            head.append(word)
    return f"{indent}{_BOLD}{path}{_RESET}: {' '.join(head)}{signature}"
