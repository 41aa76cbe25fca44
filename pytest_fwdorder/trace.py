"""`Trace`: the recorded calls with the conveniences that render, diff and compare them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fwdorder.calls.records import TraceRecords
from pytest_fwdorder.golden.render import golden_lines, render_trace

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_fwdorder.diff.classification import TraceDiff
    from pytest_fwdorder.picture.svg import Picture
    from pytest_fwdorder.report.coverage_table import Coverage

# Call lines a repr shows; `render()` gives them all.
_REPR_LINES = 8


@dataclass(eq=False, repr=False)
class Trace(TraceRecords):
    """Every module call of a forward pass, in the order the calls started.

    A parent call precedes its children. Compare two traces with `==` (same golden text)
    or `diff`; render the golden text with `render`; `assert trace == snapshot` stores and
    compares the golden file.
    """

    def render(self) -> str:
        """The golden text: a header of totals, then one line per call."""
        return render_trace(self)

    def diff(self, other: TraceRecords) -> TraceDiff:
        """What changed from this trace to `other`, aligned call by call and explained.

        Raises TypeError if `other` is not a trace.
        """
        # Imported here: a suite whose goldens hold never diffs, and the diff is more than
        # half of what importing `trace_forward` costs (about 58 of 109 ms).
        from pytest_fwdorder.diff.diffing import check_trace, diff_traces

        check_trace("Trace.diff", "other", other)
        return diff_traces(self, other)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TraceRecords):
            return self.render() == render_trace(other)
        # `assert trace == snapshot`: the trace picks the extension that writes golden text.
        # Imported here: syrupy is only needed when a trace meets a snapshot.
        from pytest_fwdorder.snapshot.extension import compare_with_snapshot

        result: bool = compare_with_snapshot(self, other)
        return result

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def coverage(self, pattern: str) -> Coverage:
        """The classes of the modules whose paths match `pattern` (`layers.*.self_attn.[qv]_proj`),
        with their layer indices: `print(trace.coverage(...))` shows the table. See
        `pytest_fwdorder.assert_coverage` to assert on it."""
        from pytest_fwdorder.report.coverage_table import coverage  # only a coverage query needs it

        return coverage(self, pattern)

    def headline(self) -> str:
        """`<Trace of ResNet: 183 calls>`: how one-line messages (assertions) name a trace."""
        count = len(self.calls)
        return f"<Trace of {self.root_type}: {count} call{'s' if count != 1 else ''}>"

    def __repr__(self) -> str:
        """The headline, the counts a reader checks first, and the first call lines."""
        counts = self.counts()
        reused = sum(1 for count in counts.values() if count > 1)
        unregistered = len({call.path for call in self.unregistered()})
        lines = [
            self.headline(),
            f"  {len(counts)} modules called ({reused} more than once), "
            f"{len(self.unused())} registered but never called, {unregistered} unregistered",
        ]
        shown = golden_lines(self)[:_REPR_LINES] if self.calls else []
        lines += [f"  {line.text}" for line in shown]
        if len(self.calls) > len(shown):
            lines.append(f"  ... {len(self.calls) - len(shown)} more calls: print(trace.render())")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """Jupyter's display: totals, never-called and unregistered modules, the call tree."""
        from pytest_fwdorder.report.html import trace_html  # only a notebook needs it

        return trace_html(self.render())

    def picture(
        self,
        *,
        rolled: bool = True,
        depth: int | None = None,
        under: Sequence[str] = (),
        sections: Sequence[str] = (),
    ) -> Picture:
        """The trace as an SVG picture, drawn from its golden text: module calls as nested
        boxes in execution order, runs of identical blocks rolled into one `x N` box. A
        notebook shows it; `.svg` is the text, `.save(path)` writes it. The options are
        `golden_picture`'s."""
        from pytest_fwdorder.picture.svg import golden_picture  # only a picture needs it

        return golden_picture(
            self.render(), rolled=rolled, depth=depth, under=under, sections=sections
        )
