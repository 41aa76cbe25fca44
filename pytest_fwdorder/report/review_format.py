"""A review's three renderings: text for a terminal, Markdown for a pull request, JSON for
bots. Pure functions of a `Review`, no git, no torch.

The JSON schema (`JSON_VERSION` 2; keys are only ever added within a version)::

    {
      "format": "pytest-fwdorder review",
      "version": 2,
      "base": {"revision": "the merge base of HEAD and main", "commit": "<40 hex digits>"},
      "head": {"revision": null, "commit": null},      # null: the work tree
      "total": "1 golden changed: 1 with calls inserted; 1 golden added",
      "counts": {"changed": 1, "added": 1, "deleted": 0},
      "goldens": [                                      # sorted by path
        {
          "path": "tests/__snapshots__/test_model/test_tiny.fwdorder.txt",
          "status": "changed",                          # or "added", "deleted"
          "summary": "4 calls before, 5 after: 1 call inserted, 1 call renamed",
          "problem": null,                              # why it cannot be diffed, or null
          "changes": {"inserted": 1, "renamed": 1},     # ChangeKind values, in their order
                                                        # (a facet's: its own words)
          "header_changed": true,
          "lines": ["4 calls before, 5 after: ...", "..."]   # the explanation, as printed
        }
      ]
    }
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from pytest_fwdorder.diff.changes import ChangeKind, declared_kinds
from pytest_fwdorder.diff.places import plural
from pytest_fwdorder.golden.folding import colorize_diff
from pytest_fwdorder.report.git_review import Review, ReviewedGolden

JSON_FORMAT = "pytest-fwdorder review"
JSON_VERSION = 2  # 2: `changes` keys are the facets' own words ("backward steps changed")
# GitHub's limit for a pull-request comment and for a step summary, in characters.
MARKDOWN_BUDGET = 65_536

# How the one-line total names a golden with changes of each kind: "2 with calls inserted".
# The kinds a facet declares (`FacetChangeKind`) are named by their `phrase`; a kind missing
# from both, or a facet's changes, is named after its words: "with FLOPs changed",
# "with backward steps changed".
KIND_PHRASES: dict[str, str] = {
    ChangeKind.INSERTED: "with calls inserted",
    ChangeKind.REMOVED: "with calls removed",
    ChangeKind.MOVED: "with calls moved",
    ChangeKind.RENAMED: "with calls renamed",
    ChangeKind.TYPE_CHANGED: "with classes changed",
    ChangeKind.INPUT_CHANGED: "with inputs changed",
    ChangeKind.OUTPUT_CHANGED: "with outputs changed",
    ChangeKind.NESTING_CHANGED: "with nesting changed",
    ChangeKind.REGISTRATION_CHANGED: "with registration changed",
    ChangeKind.FROZEN_CHANGED: "with frozen state changed",
    ChangeKind.SETTINGS_CHANGED: "with settings changed",
    ChangeKind.PARAMETERS_CHANGED: "with parameters changed",
    ChangeKind.MODE_CHANGED: "with modes changed",
    ChangeKind.REUSE_CHANGED: "with reuse counts changed",
}
HEADER_PHRASE = "with only the header changed"
PROBLEM_PHRASE = "that cannot be diffed"
RELEASE_PHRASE = "with only torch-release differences"

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")
_BACKTICKS = re.compile(r"`+")


def review_total(review: Review) -> str:
    """The one-line total: `3 goldens changed: 2 with calls inserted, 1 with settings
    changed; 1 golden added; 1 golden deleted`, or `no goldens changed`."""
    changed = [golden for golden in review.goldens if golden.status == "changed"]
    parts = []
    if changed:
        reasons: dict[str, int] = {}
        for golden in changed:
            for phrase in _phrases(golden):
                reasons[phrase] = reasons.get(phrase, 0) + 1
        order = _phrase_order(reasons)
        grouped = ", ".join(f"{reasons[phrase]} {phrase}" for phrase in order if phrase in reasons)
        parts.append(f"{plural(len(changed), 'golden')} changed: {grouped}")
    for status in ("added", "deleted"):
        count = sum(golden.status == status for golden in review.goldens)
        if count:
            parts.append(f"{plural(count, 'golden')} {status}")
    return "; ".join(parts) if parts else "no goldens changed"


def _phrases(golden: ReviewedGolden) -> list[str]:
    if golden.problem is not None:
        return [PROBLEM_PHRASE]
    phrases = [kind_phrase(kind) for kind, _ in golden.changes]
    if phrases:
        return phrases
    return [HEADER_PHRASE if golden.header_changed else RELEASE_PHRASE]


def kind_phrase(kind: str) -> str:
    """How the total names goldens with changes of `kind` (a `ChangeKind`, or a facet's
    words for its changes): `with calls inserted`."""
    phrase = KIND_PHRASES.get(kind)
    if phrase is not None:
        return phrase
    declared = declared_kinds().get(kind)
    return declared[1].phrase if declared is not None else f"with {kind}"


def _phrase_order(reasons: dict[str, int]) -> list[str]:
    """The order of the total's phrases: `ChangeKind`'s, the facets' where their changes'
    kind is (in the order they came), then the goldens with no change of a kind."""
    kinds = [kind_phrase(kind) for kind in ChangeKind]
    rest = [HEADER_PHRASE, PROBLEM_PHRASE, RELEASE_PHRASE]
    facets = [phrase for phrase in reasons if phrase not in kinds and phrase not in rest]
    at = kinds.index(kind_phrase(ChangeKind.FACET_CHANGED))
    return [*kinds[:at], *facets, *kinds[at:], *rest]


def compared_line(review: Review) -> str:
    """`compared 1a2b3c4d5e6f (the merge base of HEAD and main) with the work tree`."""
    base = f"{review.base_commit[:12]} ({review.base})"
    if review.head is None or review.head_commit is None:
        return f"compared {base} with the work tree"
    return f"compared {base} with {review.head_commit[:12]} ({review.head})"


def format_golden_text(golden: ReviewedGolden, *, color: bool = False) -> list[str]:
    """One golden as the terminal shows it: `path: status`, then its explanation."""
    explanation = golden.explanation()
    if golden.status != "changed":
        heading = f"{golden.path}: {explanation[0]}"
        return [_bold(heading) if color else heading]
    heading = f"{golden.path}: changed"
    return [
        _bold(heading) if color else heading,
        *(colorize_diff(explanation) if color else explanation),
    ]


def format_text(review: Review, *, color: bool = False) -> str:
    """The review for a terminal: each golden, then the compared commits and the total."""
    lines: list[str] = []
    for golden in review.goldens:
        lines += [*format_golden_text(golden, color=color), ""]
    total = review_total(review)
    lines += [compared_line(review), _bold(total) if color else total]
    return "\n".join(lines) + "\n"


def _bold(line: str) -> str:
    # colorize_diff bolds the first line it is given: view keeps the one set of ANSI codes.
    return colorize_diff([line])[0]


def format_json(review: Review) -> str:
    """The review as JSON in the schema this module's docstring shows, ending in a newline."""
    return json.dumps(review_as_data(review), indent=2, ensure_ascii=False) + "\n"


def review_as_data(review: Review) -> dict[str, Any]:
    """The review as plain data in the JSON schema (`JSON_VERSION`)."""
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "base": {"revision": review.base, "commit": review.base_commit},
        "head": {"revision": review.head, "commit": review.head_commit},
        "total": review_total(review),
        "counts": {
            status: sum(golden.status == status for golden in review.goldens)
            for status in ("changed", "added", "deleted")
        },
        "goldens": [
            {
                "path": golden.path,
                "status": golden.status,
                "summary": golden.summary,
                "problem": golden.problem,
                "changes": dict(golden.changes),
                "header_changed": golden.header_changed,
                "lines": golden.explanation(),
            }
            for golden in review.goldens
        ],
    }


def format_markdown(review: Review, *, budget: int = MARKDOWN_BUDGET) -> str:
    """The review as Markdown for a pull-request comment or a CI step summary.

    A heading with the total, then one collapsible `<details>` per golden: the path, its
    status and summary line in the `<summary>`, the rest of the summary as a list and the
    changed calls in a `diff` code block. At most `budget` characters: past it, goldens and
    lines are left out from the end and a last line says how many. Raises ValueError for a
    budget too small to hold the heading and that line.
    """
    head = _markdown_head(review)
    blocks = [_markdown_block(golden) for golden in review.goldens]
    if len(head) + sum(map(len, blocks)) <= budget:
        return head + "".join(blocks)
    sizes = [len(_content(golden)) for golden in review.goldens]
    room = budget - len(head) - len(_left_out_note(budget, len(blocks), sum(sizes)))
    if room < 0:
        raise ValueError(
            f"a Markdown budget of {budget!r} characters cannot hold the heading and the "
            f"line that says what was left out ({budget - room} characters): give more"
        )
    shown: list[str] = []
    for index, (golden, block) in enumerate(zip(review.goldens, blocks, strict=True)):
        if len(block) <= room:
            shown.append(block)
            room -= len(block)
            continue
        kept = _lines_that_fit(golden, room)
        if kept is not None:
            shown.append(_markdown_block(golden, kept))
        left_goldens = len(blocks) - index - (kept is not None)
        left_lines = sum(sizes[index:]) - (kept or 0)
        return head + "".join(shown) + _left_out_note(budget, left_goldens, left_lines)
    return head + "".join(shown)  # not reached: the blocks did not fit, so one is cut


def _markdown_head(review: Review) -> str:
    compared = compared_line(review).replace("compared ", "Compared ", 1)
    return f"### fwdorder review: {_markdown_text(review_total(review))}\n\n{compared}.\n\n"


def _content(golden: ReviewedGolden) -> list[str]:
    """The lines of a golden's block below its summary: notes, details, then the calls."""
    return [*golden.notes, *golden.details, *golden.body]


def _markdown_block(golden: ReviewedGolden, kept: int | None = None) -> str:
    """One golden's `<details>` block, with only the first `kept` content lines if given."""
    summary = html.escape(f": {golden.status} \N{EM DASH} {golden.summary}")
    lines = [
        "<details>",
        f"<summary><code>{html.escape(golden.path)}</code>{summary}</summary>",
        "",
    ]
    content = _content(golden)
    shown = content if kept is None else content[:kept]
    listed = shown[: len(golden.notes) + len(golden.details)]
    calls = shown[len(listed) :]
    lines += [f"- {_markdown_text(line)}" for line in listed]
    if golden.status == "added":
        lines.append("A new golden: its whole text is in the file diff.")
    elif golden.status == "deleted":
        lines.append("The golden is deleted: check that its test was removed or renamed.")
    if calls:
        # A fence longer than any run of backticks in the calls, so none can close it.
        runs = [len(run) + 1 for line in calls for run in _BACKTICKS.findall(line)]
        fence = "`" * max([3, *runs])
        lines += ["", f"{fence}diff", *calls, fence]
    if len(shown) < len(content):
        lines += ["", f"_{plural(len(content) - len(shown), 'more line')} left out_"]
    return "\n".join([*lines, "", "</details>", "", ""])


def _lines_that_fit(golden: ReviewedGolden, room: int) -> int | None:
    """The most content lines of a golden's block that fit in `room`, None if none do."""
    low, high = 0, len(_content(golden))  # the full block did not fit: fewer than `high`
    if len(_markdown_block(golden, 0)) > room:
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if len(_markdown_block(golden, middle)) <= room:
            low = middle
        else:
            high = middle
    return low


def _left_out_note(budget: int, goldens: int, lines: int) -> str:
    counts = [plural(count, noun) for count, noun in ((goldens, "golden"), (lines, "line"))]
    left_out = " and ".join(count for count in counts if not count.startswith("0 "))
    return (
        f"**Cut to stay within {budget:,} characters:** {left_out or 'nothing'} left "
        "out. Run `fwdorder review` locally to see everything.\n"
    )


def _markdown_text(text: str) -> str:
    """Text shown as itself in Markdown: its special characters and HTML escaped."""
    return html.escape(_MARKDOWN_SPECIAL.sub(r"\\\1", text), quote=False)
