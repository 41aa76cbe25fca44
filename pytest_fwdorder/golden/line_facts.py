"""A call line's module facts read once into typed values (`LineFacts`): each fact's text by
title, the settings by name, the parameters and buffers by name with dtype, sizes and flags.

The diff, the checks and the report read these and never a fact's text: `facts_of(line)`
reads a line's facts the first time they are asked for and keeps the reading for every line
with the same facts (modules alike share them), so a comparison reads each once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from pytest_fwdorder.golden.format import (
    FROZEN_FLAG,
    NOT_SAVED_FLAG,
    TENSOR_PATTERN,
    TIED_FLAG,
    GoldenLine,
    split_top_level,
)

TENSOR_TITLES = ("parameters", "buffers")
# A piece of a tensor fact that starts a tensor: `weight f32[8,3]`, `weight f32 uninitialized`;
# any other piece is the rest of a `tied to` list, which holds commas of its own.
_TENSOR_ITEM = re.compile(r"[^ ,]+ [a-z][a-z0-9]*(\[[0-9,]*\]| uninitialized)")
_FLAGS = (FROZEN_FLAG, NOT_SAVED_FLAG)
# How many distinct fact tuples keep their reading: a model's modules share far fewer.
_READINGS_KEPT = 8192


@dataclass(frozen=True, slots=True)
class WrittenTensor:
    """A parameter or buffer as a golden line gives it: `weight f32[64,3,7,7] frozen`.

    `description` is the text after the name; `sizes` is None for a lazy tensor
    (`f32 uninitialized`); `flags` holds `frozen` and `not saved`; `tied_to` the names of
    the tensors it is tied to (`tied to a.weight, b.weight`)."""

    description: str
    dtype: str
    sizes: tuple[int, ...] | None
    flags: frozenset[str]
    tied_to: frozenset[str] = frozenset()

    @property
    def shape(self) -> str:
        """The dtype and shape as written: `f32[64,3,7,7]`, or `f32` for a lazy tensor."""
        return self.description.split(" ", 1)[0]


@dataclass(frozen=True, slots=True)
class LineFacts:
    """A call line's module facts, typed.

    `by_title`: each fact's text after its title (`settings` -> `in_features=4, ...`), in
    the order written; `settings`: the settings by name, or None where one has no name (a
    user module's extra_repr text); `tensors`: `parameters` and `buffers`, each by name."""

    by_title: Mapping[str, str]
    settings: Mapping[str, str] | None
    tensors: Mapping[str, Mapping[str, WrittenTensor]]

    def tensors_of(self, title: str) -> Mapping[str, WrittenTensor]:
        """The parameters or the buffers by name ({} for none)."""
        return self.tensors.get(title, {})


def facts_of(line: GoldenLine) -> LineFacts:
    """The line's facts, read the first time a line with these facts is asked about."""
    return _read_facts(line.facts)


@lru_cache(maxsize=_READINGS_KEPT)
def _read_facts(facts: tuple[str, ...]) -> LineFacts:
    by_title: dict[str, str] = {}
    for fact in facts:
        title, _, text = fact.partition(": ")
        by_title[title] = text
    tensors = {
        title: read_tensor_facts(by_title[title]) for title in TENSOR_TITLES if title in by_title
    }
    return LineFacts(by_title, read_settings(by_title.get("settings", "")), tensors)


def read_settings(text: str) -> dict[str, str] | None:
    """`a=1, b=(3, 3)` as {'a': '1', 'b': '(3, 3)'}; None if some item has no name."""
    items: dict[str, str] = {}
    for item in split_top_level(text):
        name, separator, value = item.partition("=")
        if not separator or not name.isidentifier():
            return None
        items[name] = value
    return items


def read_tensor_facts(text: str) -> dict[str, WrittenTensor]:
    """`weight f32[8,3] frozen, bias f32[8]` as each tensor by name, typed."""
    descriptions: dict[str, str] = {}
    last = ""
    for piece in split_top_level(text):
        if last and not _TENSOR_ITEM.match(piece):
            descriptions[last] += f", {piece}"
            continue
        last, _, description = piece.partition(" ")
        descriptions[last] = description
    return {name: _read_tensor(description) for name, description in descriptions.items()}


def _read_tensor(description: str) -> WrittenTensor:
    shape, _, rest = description.partition(" ")
    match = TENSOR_PATTERN.fullmatch(shape)
    if match is None:  # a lazy tensor, `f32 uninitialized`
        dtype, sizes = shape, None
    else:
        dtype, sizes = (
            match.group(1),
            tuple(int(size) for size in match.group(2).split(",") if size),
        )
    rest, tied, names = rest.partition(TIED_FLAG)
    flags = frozenset(flag for flag in _FLAGS if re.search(rf"(^| ){flag}( |$)", rest))
    tied_to = frozenset(names.split(", ")) if tied else frozenset()
    return WrittenTensor(description, dtype, sizes, flags, tied_to)
