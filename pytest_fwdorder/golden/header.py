"""A golden's header read once into a typed record: its lines as written, and the facts a
comparison reads from them (the model's mode, the forwards run without a call, the odd blocks,
each trace facet's value), each read the first time it is asked for and kept. No torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

from pytest_fwdorder.golden.format import (
    FORMAT_LINE,
    forward_runs,
    header_sections,
    mode_of,
    odd_block_items,
)

if TYPE_CHECKING:
    from pytest_fwdorder.calls.facet_records import ForwardRun, OddBlock, TraceFacet


@dataclass(frozen=True, eq=False)
class GoldenHeader(Sequence[str]):
    """The header lines of one golden (or of a trace, as its golden writes them), the facets'
    sections after the calls included, in order.

    It is the sequence of its lines, so a facet reads its section from it as from a list
    (`end_section(header, "backward")`); the facts the diff compares are typed attributes.
    """

    lines: tuple[str, ...]
    # Trace facet title -> its value read back by the facet (`read_header`), once each.
    _facet_values: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def of(cls, lines: Iterable[str]) -> GoldenHeader:
        """The header of these lines; a header given is itself, with what it has read."""
        return lines if isinstance(lines, GoldenHeader) else cls(tuple(lines))

    @classmethod
    def sections_of(cls, lines: Iterable[str]) -> dict[str, list[str]]:
        """The listed sections of these header lines, by title: a facet's `read_header` asks
        here, so that a header read for a comparison splits its sections once."""
        return cls.of(lines).sections

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        # A slice is a list of lines, as the list the header used to be gives.
        return list(self.lines[index]) if isinstance(index, slice) else self.lines[index]

    def __len__(self) -> int:
        return len(self.lines)

    def __iter__(self) -> Iterator[str]:
        return iter(self.lines)

    def __eq__(self, other: object) -> bool:
        """Equal to a header or a list or tuple of the same lines."""
        if isinstance(other, GoldenHeader):
            return self.lines == other.lines
        if isinstance(other, (list, tuple)):
            return list(self.lines) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # it keeps what it read: not a dict key

    def __contains__(self, line: object) -> bool:
        return line in self._line_set

    @cached_property
    def _line_set(self) -> frozenset[str]:
        return frozenset(self.lines)

    @cached_property
    def compared_lines(self) -> list[str]:
        """The lines a comparison shows when they differ: all but the format line."""
        return [line for line in self.lines if line != FORMAT_LINE]

    @cached_property
    def mode(self) -> str:
        """The model's mode the header gives (`train`, `eval`), or "" when it gives none."""
        return mode_of(self.lines)

    @cached_property
    def sections(self) -> dict[str, list[str]]:
        """The listed sections by title (`header_sections`): a facet's items read once."""
        return header_sections(self.lines)

    @cached_property
    def forward_runs(self) -> tuple[ForwardRun, ...]:
        """The forwards run without a call that the header lists, as records."""
        return tuple(forward_runs(self.sections))

    @cached_property
    def odd_blocks(self) -> tuple[OddBlock, ...]:
        """The odd blocks and odd class members the header lists, as records."""
        return tuple(odd_block_items(self.sections))

    def facet_value(self, facet: TraceFacet) -> Any:
        """`facet`'s value read back from the header by the facet (None when it holds none),
        read once per title."""
        if facet.title not in self._facet_values:
            self._facet_values[facet.title] = facet.read_header(self)
        return self._facet_values[facet.title]
