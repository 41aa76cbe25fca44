"""What a checkpoint reference holds, key by key (dtype and shape), read without its values.

A reference is a golden file written by this plugin, a state_dict, another model, a
`torch.save` file (read on the meta device, `weights_only=True`) or a `.safetensors` file
(only its header is read). Each gives the same thing: the state_dict keys in order, each
with a `KeySignature`, and notes on how it was read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from pytest_fwdorder.golden.format import (
    ALIASED_SECTION,
    FORMAT_PATTERN,
    NEVER_CALLED_SECTION,
    NOT_SAVED_FLAG,
    USED_THROUGH_PARAMETERS_SECTION,
    GoldenLine,
    is_first_call,
    split_top_level,
)
from pytest_fwdorder.golden.header import GoldenHeader
from pytest_fwdorder.golden.line_facts import (
    TENSOR_TITLES,
    WrittenTensor,
    facts_of,
    read_tensor_facts,
)
from pytest_fwdorder.golden.parse import format_problem, parse_golden
from pytest_fwdorder.recording.describe import dtype_name

# A tensor a golden names without dtype or shape (an `ops=True` golden's "used through its
# parameters" section lists names only): its key is checked, its dtype and shape are not.
UNKNOWN_DTYPE = "?"
# The root module's path on a golden's call line: its own tensors' keys have no prefix.
_ROOT_PATH = "<root>"
_HIDDEN_PREFIX = "# hidden: "
_VIEW_PREFIXES = ("# folded: ", "# calls hidden: ")
_MORE_ITEM = " more"
_USED_BY = " used by "
# Where a training checkpoint commonly keeps the model's state_dict (PyTorch's tutorial
# "Saving and loading a general checkpoint" uses model_state_dict).
WRAPPING_KEYS = ("state_dict", "model_state_dict", "model")
_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "C64": torch.complex64,
}


class KeySignature(NamedTuple):
    """One state_dict value as far as loading cares: its dtype and shape.

    `dtype` is the golden's short name (`f32`, `bf16`), `UNKNOWN_DTYPE` when the reference
    does not say, and None for a value that is not a tensor. `shape` is None when not
    known (a lazy module's tensor, a name-only golden item) or not a tensor.
    """

    dtype: str | None
    shape: tuple[int, ...] | None

    @property
    def is_tensor(self) -> bool:
        return self.dtype is not None


@dataclass(frozen=True)
class ReferenceKeys:
    """A reference's state_dict keys in order, with each value's signature and type name."""

    signatures: dict[str, KeySignature]
    # Key -> the value's type name, for values that are not tensors (`5` under "weight").
    value_types: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def signature_of(value: object) -> KeySignature:
    """A state_dict value's signature: a tensor's dtype and shape, or a non-tensor's."""
    if isinstance(value, torch.Tensor):
        if nn.parameter.is_lazy(value):
            return KeySignature(dtype_name(value.dtype), None)
        return KeySignature(dtype_name(value.dtype), tuple(value.shape))
    return KeySignature(None, None)


def state_dict_keys(state_dict: Mapping[str, object]) -> ReferenceKeys:
    """A state_dict's keys and signatures, in its order; no value is read."""
    return ReferenceKeys(
        signatures={key: signature_of(value) for key, value in state_dict.items()},
        value_types={
            key: type(value).__name__
            for key, value in state_dict.items()
            if not isinstance(value, torch.Tensor)
        },
    )


def read_reference(reference: object) -> ReferenceKeys:
    """The keys of a golden file's path, a saved state_dict's path, a state_dict or a model.

    Raises TypeError for anything else (golden text rather than its path included),
    FileNotFoundError for a path that is not a file, and ValueError for a golden that cannot
    give the keys (another format, parameters hidden, a folded view).
    """
    if isinstance(reference, nn.Module):
        return state_dict_keys(reference.state_dict())
    if isinstance(reference, Mapping):
        return state_dict_keys(reference)
    if isinstance(reference, str) and FORMAT_PATTERN.match(reference.lstrip()):
        raise TypeError(
            "assert_checkpoint_compatible got a golden's text; pass the path of its "
            "`.fwdorder.txt` file, which names the golden in the messages"
        )
    if not isinstance(reference, (str, os.PathLike)):
        raise TypeError(
            f"assert_checkpoint_compatible expected a golden file's path, a saved "
            f"state_dict's path, a state_dict or a model, got {type(reference).__name__!r}"
        )
    path = Path(reference)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint reference at {str(path)!r}: pass the path of a `.fwdorder.txt` "
            "golden, a torch.save file or a .safetensors file"
        )
    with path.open("rb") as file:
        start = file.read(64)
    if FORMAT_PATTERN.match(start.decode("utf-8", errors="replace").split("\n", 1)[0]):
        return golden_keys(path.read_text(encoding="utf-8"), str(path))
    if path.suffix == ".safetensors":
        return safetensors_keys(path)
    return saved_keys(path)


def golden_keys(text: str, name: str) -> ReferenceKeys:
    """The state_dict keys a golden's parameter and buffer facts give, with dtypes and shapes.

    Each registered module's first call lists its own tensors; never-called modules list
    theirs in the header; a module registered under several names holds its tensors under
    each; `not saved` buffers are in no state_dict.
    """
    problem = format_problem(text)
    if problem is not None:
        raise ValueError(f"the golden file {name!r} {problem}")
    header, lines = parse_golden(text)
    _check_golden_shows_every_tensor(header, name)
    own: dict[str, dict[str, KeySignature]] = {}  # module path -> its own tensors
    for line in lines:
        if is_first_call(line) and line.registered:
            _add_fact_tensors(own, line)
    sections = header.sections
    for title in (NEVER_CALLED_SECTION, USED_THROUGH_PARAMETERS_SECTION):
        for item in sections.get(title, []):
            if item.startswith("... ") and item.endswith(_MORE_ITEM):
                raise ValueError(
                    f"the golden file {name!r} lists only the first modules of its "
                    f"{title!r} section ({item}), so it does not give every checkpoint key: "
                    "pass the model or a saved state_dict as the reference instead"
                )
            path, _, rest = item.partition(": ")
            _, bar, tensors = rest.partition(" | ")
            if bar:
                own.setdefault(_key_prefix(path), {}).update(_header_tensors(tensors))
    for item in sections.get(ALIASED_SECTION, []):
        first, _, others = item.partition(" = ")
        for other in others.split(", "):
            own.setdefault(other, {}).update(own.get(first, {}))
    signatures = {
        f"{path}.{tensor}" if path else tensor: signature
        for path, tensors in own.items()
        for tensor, signature in tensors.items()
    }
    return ReferenceKeys(signatures, notes=(f"read the keys from the golden file {name!r}",))


def _check_golden_shows_every_tensor(header: GoldenHeader, name: str) -> None:
    for line in header:
        if line.startswith(_HIDDEN_PREFIX) and "parameters" in line[len(_HIDDEN_PREFIX) :].split(
            ", "
        ):
            raise ValueError(
                f"the golden file {name!r} was written with hide=('parameters',), so it holds "
                "no checkpoint keys: write it without hiding parameters, or pass the model "
                "or a saved state_dict as the reference"
            )
        if line.startswith(_VIEW_PREFIXES):
            raise ValueError(
                f"the golden file {name!r} is a view ({line.lstrip('# ')}): the modules inside "
                "folded or hidden calls show no tensors, so it does not give every checkpoint "
                "key: write it without fold or call views, or pass the model or a saved "
                "state_dict as the reference"
            )


def _key_prefix(path: str) -> str:
    return "" if path == _ROOT_PATH else path


def _add_fact_tensors(own: dict[str, dict[str, KeySignature]], line: GoldenLine) -> None:
    facts = facts_of(line)
    for title in TENSOR_TITLES:
        if title in facts.tensors:
            own.setdefault(_key_prefix(line.path), {}).update(_saved_tensors(facts.tensors[title]))


def _saved_tensors(tensors: Mapping[str, WrittenTensor]) -> dict[str, KeySignature]:
    """The saved ones' signatures: a lazy tensor's (`weight f32 uninitialized`) has no shape."""
    return {
        name: KeySignature(tensor.dtype, tensor.sizes)
        for name, tensor in tensors.items()
        if NOT_SAVED_FLAG not in tensor.flags
    }


def _header_tensors(text: str) -> dict[str, KeySignature]:
    """A header item's tensors: `weight f32[2,3], bias f32[2]`, maybe `... used by f in m`,
    or names only (`weight, bias used by f in m`, from an `ops=True` golden)."""
    tensors = text.partition(_USED_BY)[0]
    pieces = split_top_level(tensors)
    if pieces and all(" " not in piece for piece in pieces):
        return {piece: KeySignature(UNKNOWN_DTYPE, None) for piece in pieces}
    return _saved_tensors(read_tensor_facts(tensors))


def saved_keys(path: Path) -> ReferenceKeys:
    """A `torch.save` file's keys, loaded on the meta device with `weights_only=True`.

    On meta no tensor's bytes are read. A training checkpoint that keeps the state_dict
    under "state_dict", "model_state_dict" or "model" is read there, with a note.
    """
    try:
        loaded = torch.load(path, map_location="meta", weights_only=True)
    except Exception as error:
        error.add_note(
            f"pytest-fwdorder reads {str(path)!r} with torch.load(weights_only=True): save "
            "the state_dict (torch.save(model.state_dict(), path)), not the model object"
        )
        raise
    if not isinstance(loaded, Mapping):
        raise TypeError(
            f"{str(path)!r} holds a {type(loaded).__name__!r}, not a state_dict: save "
            "torch.save(model.state_dict(), path)"
        )
    if any(isinstance(value, torch.Tensor) for value in loaded.values()) or not loaded:
        keys = state_dict_keys(loaded)
        return ReferenceKeys(keys.signatures, keys.value_types, (f"read {str(path)!r} on meta",))
    for wrapping in WRAPPING_KEYS:
        inner = loaded.get(wrapping)
        if isinstance(inner, Mapping):
            keys = state_dict_keys(inner)
            others = ", ".join(repr(key) for key in loaded if key != wrapping)
            note = (
                f"read the state_dict under {wrapping!r} of {str(path)!r} on meta "
                f"(the file also holds {others or 'nothing else'})"
            )
            return ReferenceKeys(keys.signatures, keys.value_types, (note,))
    raise TypeError(
        f"{str(path)!r} holds no tensors at its top level and none of "
        f"{', '.join(map(repr, WRAPPING_KEYS))}; its keys are "
        f"{', '.join(map(repr, list(loaded)[:10]))}: pass the state_dict inside it, "
        "torch.load(path, weights_only=True)[key]"
    )


def safetensors_keys(path: Path) -> ReferenceKeys:
    """A `.safetensors` file's keys, dtypes and shapes, from its header only."""
    try:
        from safetensors import safe_open
    except ImportError as error:
        error.add_note(
            f"reading {str(path)!r} needs safetensors: pip install safetensors, or pass a "
            "torch.save file or the model"
        )
        raise
    signatures: dict[str, KeySignature] = {}
    with safe_open(str(path), "pt") as file:
        for key in file.keys():  # noqa: SIM118 (safe_open is not iterable)
            tensor = file.get_slice(key)
            dtype = tensor.get_dtype()
            known = _SAFETENSORS_DTYPES.get(dtype)
            signatures[key] = KeySignature(
                dtype_name(known) if known is not None else dtype.lower(),
                tuple(tensor.get_shape()),
            )
    return ReferenceKeys(signatures, notes=(f"read the header of {str(path)!r}",))
