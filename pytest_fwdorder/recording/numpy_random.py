"""numpy's global random generator: saved before a trace, set again only if forward moved it.

Models draw from it too (Wav2Vec2's SpecAugment masks), so a trace puts it back. Reading
and setting its state costs about 35 us each (numpy copies the 624-word key item by item),
so the state is set again only when forward moved it: the key and position are read as
the generator holds them (one copy of 2,500 bytes) before and after, and compared.
numpy is never imported here: a forward that imports `numpy.random` first gets a generator
seeded afresh, whatever a trace would do.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from types import ModuleType

# MT19937's state as numpy's C code holds it: 624 32-bit words, then the position (an int).
_KEY_WORDS = 624
_STATE_BYTES = _KEY_WORDS * 4 + 4


@dataclass(frozen=True, slots=True)
class SavedNumpyRandom:
    """numpy's global generator as a trace found it."""

    module: ModuleType  # numpy.random
    state: object  # numpy.random.get_state()
    # What tells whether forward moved it; None where only setting the state back is sure.
    raw_copy: _RawState | None


@dataclass(frozen=True, slots=True)
class _RawState:
    bit_generator: object
    address: int
    raw_state: bytes


def save_numpy_random() -> SavedNumpyRandom | None:
    """numpy's global generator state, or None where `numpy.random` is not imported."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is None:
        return None
    state = numpy_random.get_state()
    return SavedNumpyRandom(numpy_random, state, _raw_copy(numpy_random, state))


def restore_numpy_random(saved: SavedNumpyRandom | None) -> None:
    """Set numpy's global generator back to `saved`, unless forward left it as it was."""
    if saved is None:
        return
    raw_copy = saved.raw_copy
    if (
        raw_copy is not None
        and saved.module.get_bit_generator() is raw_copy.bit_generator
        and ctypes.string_at(raw_copy.address, _STATE_BYTES) == raw_copy.raw_state
    ):
        return
    saved.module.set_state(saved.state)


def _raw_copy(numpy_random: ModuleType, state: object) -> _RawState | None:
    """The generator's raw key and position, where they are the whole of `state`.

    None, so the state is always set back, where that cannot be told cheaply: a numpy
    without `get_bit_generator` (before 1.25), a generator other than MT19937, a cached
    normal (taking it moves neither key nor position), or raw bytes that do not read as the
    state numpy reported (another layout).
    """
    get_bit_generator = getattr(numpy_random, "get_bit_generator", None)
    if get_bit_generator is None or not isinstance(state, tuple) or len(state) != 5:
        return None
    name, key, position, has_gauss, _ = state
    if name != "MT19937" or has_gauss:
        return None
    bit_generator = get_bit_generator()
    address = bit_generator.ctypes.state_address
    raw_state = ctypes.string_at(address, _STATE_BYTES)
    expected = key.tobytes() + int(position).to_bytes(4, sys.byteorder, signed=True)
    if raw_state != expected:
        return None
    return _RawState(bit_generator, address, raw_state)
