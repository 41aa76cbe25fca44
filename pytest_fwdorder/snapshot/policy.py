"""The comparison policy for goldens: when a golden still holds a trace, and how a difference is
explained. One place, used by the syrupy extension, `fwdorder review`, the git diff driver and the
CI reports alike. Pure functions on text, no torch and no syrupy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_fwdorder.golden.facet_facts import within_facets
from pytest_fwdorder.golden.format import FACT_TITLES
from pytest_fwdorder.golden.parse import declared_and_written_calls, format_problem
from pytest_fwdorder.golden.upgrades import (
    UpgradeDifferences,
    comparable_text,
    same_model,
    upgrade_differences,
    without_environment,
)
from pytest_fwdorder.hookspecs import plugin_facets

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import Facet


def comparison_facets(trace_facets: Sequence[Facet] | None = None) -> tuple[Facet, ...]:
    """The facets a golden comparison reads and compares with: the registered ones (built-in
    and the plugins'), each replaced by the trace's own facet of its title where the trace
    has one: a trace's values facet carries the tolerance its options gave."""
    registered = plugin_facets(FACT_TITLES)
    if not trace_facets:
        return registered
    own = {facet.title: facet for facet in trace_facets}
    titles = {facet.title for facet in registered}
    return (
        *(own.get(facet.title, facet) for facet in registered),
        *(facet for facet in trace_facets if facet.title not in titles),
    )


def golden_holds(old_text: str, new_text: str, *, facets: Sequence[Facet] | None = None) -> bool:
    """Whether the golden text `old_text` holds the new trace's text, leaving out what an upgrade
    changes alone (the environment line, and torch.nn settings at this torch's defaults:
    golden/upgrades.py) and facts a facet calls the same (output fingerprints within their
    tolerance). `facets`: the trace's own (`comparison_facets`)."""
    new_text = within_facets(old_text, new_text, comparison_facets(facets))
    return same_model(old_text, new_text)


def explain_mismatch(
    old_text: str,
    new_text: str,
    golden_name: str | None = None,
    *,
    facets: Sequence[Facet] | None = None,
) -> list[str]:
    """What changed from the golden text to the new one: summary, changed calls, header.

    A golden that cannot be compared line by line (merge-conflict markers, another format,
    cut off, or different only in whitespace) gets one line saying so and what to do.
    `golden_name` names the file in that line. When the golden was written with other
    torch releases, or differs also in what an upgrade changes alone, the first lines say
    so, and the diff leaves those differences out; so it does for facts that `facets` (the
    trace's own, `comparison_facets`) call the same, output fingerprints within tolerance.
    """
    upgrades = upgrade_differences(old_text, new_text)
    compared = comparison_facets(facets)
    old_text, new_text = comparable_texts(old_text, new_text, upgrades, facets=compared)
    problem = golden_problem(old_text, new_text)
    if problem is None:
        # Imported here: a session whose goldens all hold never needs the diff.
        from pytest_fwdorder.diff.diffing import diff_golden

        difference = diff_golden(old_text, new_text, facets=compared)
        return [*upgrades.notes(), *difference.explanation()]
    named = f"the golden file {golden_name!r}" if golden_name else "the golden file"
    return [f"{named} {problem}"]


def comparable_texts(
    old_text: str,
    new_text: str,
    upgrades: UpgradeDifferences | None = None,
    *,
    facets: Sequence[Facet] | None = None,
) -> tuple[str, str]:
    """The golden and new texts as `explain_mismatch` diffs them: without the environment
    line, without torch.nn settings at their defaults where those differ, and with the new
    text's facts that a facet calls the same as the golden's (output fingerprints within
    tolerance) written as the golden's."""
    new_text = within_facets(old_text, new_text, comparison_facets(facets))
    if upgrades is None:
        upgrades = upgrade_differences(old_text, new_text)
    if upgrades.settings_lines:
        return comparable_text(old_text), comparable_text(new_text)
    return without_environment(old_text), without_environment(new_text)


def golden_problem(old_text: str, new_text: str) -> str | None:
    """Why the golden text cannot be diffed with the new text, or None when it can."""
    problem = conflict_problem(old_text) or format_problem(old_text)
    if problem is not None:
        return problem
    if _line_ends_trimmed(old_text) == _line_ends_trimmed(new_text):
        return (
            "differs from the new trace only in whitespace at line ends (a trailing space or "
            "the final newline, often trimmed by an editor): rewrite it with `pytest "
            "--snapshot-update`, and keep your editor from trimming *.fwdorder.txt files"
        )
    declared, written_calls = declared_and_written_calls(old_text)
    if declared is not None and written_calls != declared:
        cause = (
            "it looks cut off (a half-written or truncated file), or the count was edited"
            if written_calls < declared
            else "the count or the body was edited by hand"
        )
        return (
            f"does not add up: its header says '# calls: {declared}' but the body holds "
            f"{written_calls} call(s); {cause}: restore it from version control, or rewrite "
            "it with `pytest --snapshot-update` and review the new golden"
        )
    return None


def conflict_problem(text: str) -> str | None:
    """The clause saying a golden holds merge-conflict markers (after `the golden file`),
    or None: pytest and the command line say the same."""
    if not has_conflict_markers(text):
        return None
    return (
        "holds unresolved merge-conflict markers (<<<<<<<, =======, >>>>>>>): resolve "
        "the conflict, or rewrite it with `pytest --snapshot-update` and review the new "
        "golden"
    )


def has_conflict_markers(text: str) -> bool:
    """Whether `text` holds git's merge-conflict markers, left from an unresolved merge."""
    return any(
        line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======" or line == "<<<<<<<"
        for line in text.splitlines()
    )


def looks_cut_off(text: str) -> bool:
    """Whether the golden text holds fewer calls than its header's `# calls: N` declares."""
    declared, written_calls = declared_and_written_calls(text)
    return declared is not None and written_calls < declared


def _line_ends_trimmed(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]
