"""A dict with a bound, for caches read on every module of every trace.

Clearing a cache when it is full forgets everything at once: a model with more modules
than the bound clears it during every trace and never finds what the last trace kept.
A `BoundedCache` forgets its oldest half instead, and its bound can be raised to fit the
largest model traced, so memory stays bounded by what the user's model holds anyway.
"""

from __future__ import annotations

from itertools import islice
from typing import TypeVar

KeyT = TypeVar("KeyT")
ValueT = TypeVar("ValueT")


class BoundedCache(dict[KeyT, ValueT]):
    """A dict that forgets its oldest half when it holds `most` entries and gets another.

    A key kept again counts as the newest.

    Reads are plain dict reads (`get`, `in`, `[]`), done in C; only `keep` checks the
    bound, so callers store through `keep`, never through `[]=`.
    """

    __slots__ = ("most",)

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most

    def keep(self, key: KeyT, value: ValueT) -> ValueT:
        """Store `value` under `key`, forgetting the oldest half first when full; give `value`."""
        if key in self:
            # Kept again: the newest now. Keys are module ids, and a new module often gets a
            # dead one's id; keeping the dead one's old place would forget the new one first.
            del self[key]
        elif len(self) >= self.most:
            # Oldest first: dicts keep insertion order. Amortized, one deletion per keep.
            for old_key in list(islice(self, len(self) // 2 or 1)):
                del self[old_key]
        self[key] = value
        return value

    def hold_at_least(self, count: int) -> None:
        """Raise the bound so `count` entries (one model's) fit twice over; never lowers it."""
        if 2 * count > self.most:
            self.most = 2 * count
