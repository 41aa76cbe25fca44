"""A call line's inputs or outputs read once into typed values (`WrittenValues`): each tensor
as (dtype, sizes), and each innermost value's text. The diff reads these and never the text
again: `values_of(text)` reads a text the first time it is asked about and keeps the reading
for every line with the same text (calls alike share it).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from pytest_fwdorder.golden.format import TENSOR_PATTERN

# Inputs and outputs text, cut into tokens: a tensor, a quoted string, a bracket or comma
# (where one value ends), a lower-case word (so `x=f32[2]` keeps its tensor whole), a char.
_VALUE_TOKEN = re.compile(
    rf"{TENSOR_PATTERN.pattern}|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|[()\[\]{{}},]|[a-z][a-z0-9]*|."
)
_SEPARATORS = frozenset("()[]{},")
# How many distinct texts keep their reading: a model's calls share far fewer.
_READINGS_KEPT = 16384


class WrittenValues(NamedTuple):
    """Inputs or outputs as a golden line gives them: each tensor as (dtype, sizes), in
    order (`f32[2,4]` -> `("f32", (2, 4))`), each innermost value's text (`(f32[2],
    flag=True)` -> `f32[2]`, `flag=True`), and those values with each tensor blanked to `T`
    (what stays the same when only shapes or dtypes change)."""

    tensors: tuple[tuple[str, tuple[int, ...]], ...]
    values: tuple[str, ...]
    blanked: tuple[str, ...]


@lru_cache(maxsize=_READINGS_KEPT)
def values_of(text: str) -> WrittenValues:
    """The inputs or outputs text read, once for every text alike."""
    tensors = tuple(
        (dtype, tuple(int(size) for size in sizes.split(",") if size))
        for dtype, sizes in TENSOR_PATTERN.findall(text)
    )
    values = _innermost(text)
    return WrittenValues(tensors, values, tuple(TENSOR_PATTERN.sub("T", value) for value in values))


def _innermost(text: str) -> tuple[str, ...]:
    values: list[str] = []
    current: list[str] = []
    for token in _VALUE_TOKEN.finditer(text):
        if token.group() in _SEPARATORS:
            if "".join(current).strip():
                values.append("".join(current).strip())
            current = []
        else:
            current.append(token.group())
    if "".join(current).strip():
        values.append("".join(current).strip())
    return tuple(values)
