"""Will a checkpoint load into a model? Missing, unexpected, resized and retyped keys, with
near matches and a key map that renames the checkpoint's keys to the model's."""

from __future__ import annotations

import difflib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from typing import NamedTuple, TypeVar

import torch
from torch import nn

from pytest_fwdorder.checks.checkpoint_reference import (
    UNKNOWN_DTYPE,
    KeySignature,
    ReferenceKeys,
    read_reference,
    state_dict_keys,
)
from pytest_fwdorder.errors import CheckpointMismatchError

Value = TypeVar("Value")
# The prefixes a wrapper puts before every key, and who puts them there.
WRAPPER_PREFIXES = {
    "_orig_mod.": "torch.compile",
    "module.": "DataParallel or DistributedDataParallel",
}
# Below this name similarity two keys of one shape and dtype are not suggested as a rename
# unless their last parts (`weight`, `bias`) are the same.
_RENAME_SIMILARITY = 0.6
# How many keys a list of the report shows before "... and N more keys".
_LONGEST_LIST = 10
# How many prefix renames the report's first line names.
_MOST_RULES = 4


@dataclass(frozen=True)
class KeyProblem:
    """One key that stops a strict `load_state_dict`, and the nearest key on the other side.

    `shape` is None for a value that is not a tensor (`dtype` None too) or whose shape the
    reference does not give (a lazy module's tensor).
    """

    key: str
    shape: tuple[int, ...] | None
    nearest: str | None = None
    nearest_shape: tuple[int, ...] | None = None
    dtype: str | None = None
    nearest_dtype: str | None = None

    def __str__(self) -> str:
        text = f"{self.key} {_shape(self.shape, self.dtype)}"
        if self.nearest is not None:
            text += f" (nearest: {self.nearest} {_shape(self.nearest_shape, self.nearest_dtype)})"
        return text


class DtypeChange(NamedTuple):
    """A key of equal shape on both sides whose dtype differs: `load_state_dict` copies it."""

    key: str
    model_dtype: str
    checkpoint_dtype: str

    def __str__(self) -> str:
        return f"{self.key} {self.model_dtype} <- {self.checkpoint_dtype}"


@dataclass(frozen=True)
class CheckpointReport:
    """What `model.load_state_dict(checkpoint)` would complain about, key by key.

    `key_map` renames checkpoint keys to model keys (`{'cv1.weight': 'conv1.weight'}`),
    paired by equal shape and dtype in state_dict order, closest names first: apply it with
    `remap_state_dict(checkpoint, report.key_map)`. `dtype_changes` and `notes` (a wrapper
    prefix compared without, where the reference was read from) never make it fail.
    """

    missing: list[KeyProblem] = field(default_factory=list)
    unexpected: list[KeyProblem] = field(default_factory=list)
    mismatched: list[KeyProblem] = field(default_factory=list)
    # Keys whose checkpoint value is not a tensor: (key, the model's shape, the value's type).
    not_tensors: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    dtype_changes: list[DtypeChange] = field(default_factory=list)
    key_map: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        """True when `load_state_dict(checkpoint, strict=True)` would succeed (after
        stripping the wrapper prefixes the notes name, for `assert_checkpoint_compatible`)."""
        return not (self.missing or self.unexpected or self.mismatched or self.not_tensors)

    @property
    def resized(self) -> list[KeyProblem]:
        """The keys on both sides whose shapes differ (model's shape <- checkpoint's)."""
        return self.mismatched

    def __str__(self) -> str:
        lines = [self._first_line()]
        for title, entries in (
            ("missing from the checkpoint", list(map(str, self.missing))),
            ("unexpected in the checkpoint", list(map(str, self.unexpected))),
            ("shape differs (model <- checkpoint)", list(map(str, self.mismatched))),
            (
                "not a tensor in the checkpoint",
                [f"{key} {shape} <- {type_name}" for key, shape, type_name in self.not_tensors],
            ),
            (
                "dtype differs (model <- checkpoint), converted on load",
                list(map(str, self.dtype_changes)),
            ),
        ):
            if entries:
                lines.append(f"  {title} ({len(entries)}):")
                lines.extend(f"    {entry}" for entry in _capped(entries))
        if self.key_map:
            lines.append(
                f"  suggested key map, checkpoint key -> model key ({len(self.key_map)}); "
                "apply it with remap_state_dict(state_dict, key_map):"
            )
            rendered = render_key_map(self.key_map, longest=_LONGEST_LIST)
            lines.extend(f"    {line}" for line in rendered.split("\n"))
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def _first_line(self) -> str:
        """The summary: how many keys stop the load, and the renames the key map makes."""
        if self.loads:
            return "the checkpoint loads: every key present, none unexpected, all shapes equal"
        counts = [
            f"{len(keys)} {what}"
            for what, keys in (
                ("missing", self.missing),
                ("unexpected", self.unexpected),
                ("resized", self.mismatched),
                ("not a tensor" if len(self.not_tensors) == 1 else "not tensors", self.not_tensors),
            )
            if keys
        ]
        number, _, what = counts[0].partition(" ")
        counts[0] = f"{number} {'key' if number == '1' else 'keys'} {what}"
        line = f"the checkpoint does not load into the model: {', '.join(counts)}"
        if not self.key_map:
            return line
        renamed = len(self.key_map)
        share = f"all {renamed}" if renamed == len(self.unexpected) else f"{renamed} of the"
        rules = rename_rules(self.key_map)
        shown = ", ".join(
            f"{rule} ({count} {'key' if count == 1 else 'keys'})"
            for rule, count in rules[:_MOST_RULES]
        )
        if len(rules) > _MOST_RULES:
            shown += f" and {len(rules) - _MOST_RULES} other renames"
        return f"{line}; the key map below renames {share} unexpected onto missing ones: {shown}"


def _capped(entries: list[str]) -> list[str]:
    """The first entries of a long list, then how many were left out."""
    if len(entries) <= _LONGEST_LIST:
        return entries
    return [*entries[:_LONGEST_LIST], f"... and {len(entries) - _LONGEST_LIST} more keys"]


def rename_rules(key_map: Mapping[str, str]) -> list[tuple[str, int]]:
    """The key map as renames of key prefixes, most keys first: `('fc.* -> head.*', 2)`.

    A key's rename is the part before the longest dotted ending both names share:
    `conv1.weight -> backbone.conv1.weight` is `* -> backbone.*`.
    """
    counts: dict[str, int] = {}
    for source, target in key_map.items():
        source_parts, target_parts = source.split("."), target.split(".")
        shared = 0
        while shared < min(len(source_parts), len(target_parts)) and (
            source_parts[-1 - shared] == target_parts[-1 - shared]
        ):
            shared += 1
        if shared == 0:
            rule = f"{source} -> {target}"
        else:
            old = "".join(f"{part}." for part in source_parts[: len(source_parts) - shared])
            new = "".join(f"{part}." for part in target_parts[: len(target_parts) - shared])
            rule = f"{old}* -> {new}*"
        counts[rule] = counts.get(rule, 0) + 1
    return sorted(counts.items(), key=lambda item: -item[1])


def render_key_map(key_map: Mapping[str, str], *, longest: int | None = None) -> str:
    """The key map as a Python dict literal to paste, one entry a line.

    With `longest`, a longer map shows that many entries and a comment counting the rest.
    """
    items = list(key_map.items())
    shown = items if longest is None else items[:longest]
    entries = [f"    {source!r}: {target!r}," for source, target in shown]
    if len(shown) < len(items):
        entries.append(
            f"    # ... and {len(items) - len(shown)} more keys: "
            f"check_checkpoint(model, state_dict).key_map holds all {len(items)}"
        )
    return "\n".join(["{", *entries, "}"])


def check_checkpoint(
    model: nn.Module, checkpoint: Mapping[str, torch.Tensor] | nn.Module
) -> CheckpointReport:
    """Compare a model's state_dict keys and shapes with a checkpoint's, without loading it.

    `checkpoint` is a state_dict or another model (its state_dict is used). For a missing
    key the nearest unexpected key is shown, and the other way round, preferring keys of the
    same shape: after a rename (`fc` -> `head`) each side points at the other. Keys are
    compared as they are, as a strict `load_state_dict` does: a `module.` or `_orig_mod.`
    on every key is reported key by key, with a note (`assert_checkpoint_compatible`
    compares without it).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"check_checkpoint expected an nn.Module, got {type(model).__name__!r}")
    if isinstance(checkpoint, nn.Module):
        checkpoint = checkpoint.state_dict()
    if not isinstance(checkpoint, Mapping):
        raise TypeError(
            f"check_checkpoint expected a state_dict (a mapping of names to tensors) or a "
            f"model, got {type(checkpoint).__name__!r}: pass torch.load(path) or the model"
        )
    return compare_keys(
        state_dict_keys(model.state_dict()), state_dict_keys(checkpoint), strip_prefixes=False
    )


def assert_checkpoint_loads(
    model: nn.Module, checkpoint: Mapping[str, torch.Tensor] | nn.Module
) -> CheckpointReport:
    """Fail with every missing, unexpected and mis-shaped key unless the checkpoint loads
    as it is (the strict form of `assert_checkpoint_compatible` for a state_dict or model)."""
    __tracebackhide__ = True  # the message says it all; our frames would only add noise
    report = check_checkpoint(model, checkpoint)
    if not report.loads:
        raise CheckpointMismatchError(str(report))
    return report


def assert_checkpoint_compatible(
    model: nn.Module,
    reference: str | PathLike[str] | Mapping[str, object] | nn.Module,
) -> CheckpointReport:
    """Fail unless a checkpoint of the reference's keys, shapes and dtypes loads into `model`.

    `reference` is the path of a golden file this plugin wrote (`.fwdorder.txt`: its
    parameter and buffer facts give the keys), the path of a `torch.save` state_dict (read
    on the meta device with `weights_only=True`, so no tensor's bytes are read; one kept
    under "state_dict", "model_state_dict" or "model" of a training checkpoint is read
    there, with a note), the path of a `.safetensors` file (its header only), a state_dict,
    or another model.

    A `_orig_mod.` (torch.compile) or `module.` (DataParallel, DDP) prefix on every key of
    one side is compared without, and named in a note. Raises `CheckpointMismatchError`
    listing missing, unexpected and resized keys, with a suggested key map
    (`{'cv1.weight': 'conv1.weight'}`) for `remap_state_dict`. A dtype change is listed but
    does not fail: `load_state_dict` copies values across dtypes. Returns the report.
    """
    __tracebackhide__ = True
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"assert_checkpoint_compatible expected an nn.Module, got {type(model).__name__!r}"
        )
    report = compare_keys(
        state_dict_keys(model.state_dict()), read_reference(reference), strip_prefixes=True
    )
    if not report.loads:
        raise CheckpointMismatchError(str(report))
    return report


def remap_state_dict(
    state_dict: Mapping[str, Value], key_map: Mapping[str, str]
) -> OrderedDict[str, Value]:
    """A new state_dict with keys renamed by `key_map` (old key -> new key), in its order.

    Keys not in the map are kept as they are; nothing is stripped implicitly. The state_dict's
    `_metadata` (module versions) is kept, under the new module path too. Raises KeyError
    for a map entry whose key the state_dict lacks, and ValueError when two keys would end
    under one name.
    """
    if not isinstance(state_dict, Mapping) or not isinstance(key_map, Mapping):
        raise TypeError(
            f"remap_state_dict expected a state_dict and a key map (two mappings), got "
            f"{type(state_dict).__name__!r} and {type(key_map).__name__!r}"
        )
    absent = [key for key in key_map if key not in state_dict]
    if absent:
        close = difflib.get_close_matches(absent[0], list(state_dict), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise KeyError(
            f"the key map renames {len(absent)} key(s) the state_dict does not hold: "
            f"{', '.join(map(repr, absent[:5]))}{hint}; strip a wrapper prefix first or "
            "take the key map from a report on this state_dict"
        )
    renamed: OrderedDict[str, Value] = OrderedDict()
    sources: dict[str, str] = {}
    for key, value in state_dict.items():
        target = key_map.get(key, key)
        if target in sources:
            raise ValueError(
                f"the key map puts {sources[target]!r} and {key!r} both under {target!r}: "
                "map one of them elsewhere, or drop the one the model does not need"
            )
        sources[target] = key
        renamed[target] = value
    metadata = getattr(state_dict, "_metadata", None)
    if isinstance(metadata, Mapping):
        new_metadata = OrderedDict(metadata)
        for source, target in key_map.items():
            old_module, new_module = source.rpartition(".")[0], target.rpartition(".")[0]
            if old_module in metadata and new_module not in new_metadata:
                new_metadata[new_module] = metadata[old_module]
        renamed._metadata = new_metadata  # type: ignore[attr-defined]
    return renamed


def compare_keys(
    model: ReferenceKeys, checkpoint: ReferenceKeys, strip_prefixes: bool
) -> CheckpointReport:
    """The report on loading a checkpoint of `checkpoint`'s keys into a model of `model`'s.

    With `strip_prefixes`, a wrapper prefix on every key of one side is removed first.
    """
    notes = list(checkpoint.notes)
    expected, given = model.signatures, checkpoint.signatures
    value_types = checkpoint.value_types
    for side, name in ((expected, "model"), (given, "checkpoint")):
        for prefix in wrapper_prefixes(side):
            notes.append(_prefix_note(prefix, name, stripped=strip_prefixes))
    if strip_prefixes:
        expected = _strip(expected)
        given, value_types = _strip(given), _strip(value_types)
    missing_keys = [key for key in expected if key not in given]
    unexpected_keys = [key for key in given if key not in expected]
    shared = [key for key in expected if key in given]
    key_map = suggest_key_map(
        {key: expected[key] for key in missing_keys}, {key: given[key] for key in unexpected_keys}
    )
    # A key the map pairs points at its pair; the others at the nearest key left unpaired.
    renamed_from = {target: source for source, target in key_map.items()}
    unpaired_missing = [key for key in missing_keys if key not in renamed_from]
    unpaired_unexpected = [key for key in unexpected_keys if key not in key_map]
    return CheckpointReport(
        missing=[
            _problem(key, expected[key], unpaired_unexpected, given, renamed_from.get(key))
            for key in missing_keys
        ],
        unexpected=[
            _problem(key, given[key], unpaired_missing, expected, key_map.get(key))
            for key in unexpected_keys
        ],
        mismatched=[
            KeyProblem(key, expected[key].shape, key, given[key].shape, expected[key].dtype)
            for key in shared
            if given[key].is_tensor and _shapes_differ(expected[key], given[key])
        ],
        not_tensors=[
            (key, expected[key].shape or (), value_types.get(key, "?"))
            for key in shared
            if not given[key].is_tensor
        ],
        dtype_changes=[
            DtypeChange(key, str(expected[key].dtype), str(given[key].dtype))
            for key in shared
            if given[key].is_tensor
            and expected[key].is_tensor
            and not _shapes_differ(expected[key], given[key])
            and _dtypes_differ(expected[key], given[key])
        ],
        key_map=key_map,
        notes=notes,
    )


def wrapper_prefixes(keys: Mapping[str, object]) -> list[str]:
    """The wrapper prefixes on every key, outermost first: `['module.', '_orig_mod.']`."""
    found: list[str] = []
    names = list(keys)
    while names:
        prefix = next(
            (prefix for prefix in WRAPPER_PREFIXES if all(key.startswith(prefix) for key in names)),
            None,
        )
        if prefix is None:
            break
        found.append(prefix)
        names = [key[len(prefix) :] for key in names]
    return found


def _strip(keys: Mapping[str, Value]) -> dict[str, Value]:
    prefix = "".join(wrapper_prefixes(keys))
    return {key[len(prefix) :]: value for key, value in keys.items()}


def _prefix_note(prefix: str, side: str, stripped: bool) -> str:
    text = f"every key of the {side} starts with {prefix!r} ({WRAPPER_PREFIXES[prefix]})"
    if side == "model":
        fix = f"load into model.{prefix[:-1]} to load without it"
    else:
        fix = (
            "strip it before loading: torch.nn.modules.utils."
            f"consume_prefix_in_state_dict_if_present(state_dict, {prefix!r})"
        )
    if stripped:
        return f"{text}: compared without it; {fix}"
    return f"{text}: {fix}, or check with assert_checkpoint_compatible, which compares without it"


def _shapes_differ(model: KeySignature, checkpoint: KeySignature) -> bool:
    return None not in (model.shape, checkpoint.shape) and model.shape != checkpoint.shape


def _dtypes_differ(model: KeySignature, checkpoint: KeySignature) -> bool:
    return UNKNOWN_DTYPE not in (model.dtype, checkpoint.dtype) and model.dtype != checkpoint.dtype


def suggest_key_map(
    missing: Mapping[str, KeySignature], unexpected: Mapping[str, KeySignature]
) -> dict[str, str]:
    """Checkpoint key -> model key for the unexpected keys that a missing one renames.

    Whole modules first: an unexpected module whose tensors (names, shapes, dtypes) equal a
    missing module's maps all its keys (`cv1.*` -> `conv1.*`), to the closest name of the
    equal ones. Then single keys of equal shape and dtype, in state_dict order, to the
    closest name, when the last parts agree or the names are close.
    """
    key_map: dict[str, str] = {}
    free = dict(missing)
    missing_modules = _by_module(free)
    for module, tensors in _by_module(unexpected).items():
        candidates = [
            other for other, other_tensors in missing_modules.items() if other_tensors == tensors
        ]
        best = _closest(module, candidates)
        if best is None or not tensors:
            continue
        for name in tensors:
            key_map[_join(module, name)] = _join(best, name)
            del free[_join(best, name)]
        del missing_modules[best]
    for key, signature in unexpected.items():
        if key in key_map or not signature.is_tensor:
            continue
        leaf = key.rpartition(".")[2]
        candidates = [
            other
            for other, other_signature in free.items()
            if other_signature == signature
            and (
                other.rpartition(".")[2] == leaf
                or difflib.SequenceMatcher(None, key, other).ratio() >= _RENAME_SIMILARITY
            )
        ]
        best = _closest(key, candidates)
        if best is not None:
            key_map[key] = best
            del free[best]
    return key_map


def _by_module(keys: Mapping[str, KeySignature]) -> dict[str, dict[str, KeySignature]]:
    modules: dict[str, dict[str, KeySignature]] = {}
    for key, signature in keys.items():
        module, _, name = key.rpartition(".")
        modules.setdefault(module, {})[name] = signature
    return modules


def _join(module: str, name: str) -> str:
    return f"{module}.{name}" if module else name


def _closest(name: str, candidates: list[str]) -> str | None:
    """The candidate most like `name`; of equally close ones, the first in order."""
    best, best_ratio = None, -1.0
    for candidate in candidates:
        ratio = difflib.SequenceMatcher(None, name, candidate).ratio()
        if ratio > best_ratio:
            best, best_ratio = candidate, ratio
    return best


def _problem(
    name: str,
    signature: KeySignature,
    candidates: list[str],
    signatures: Mapping[str, KeySignature],
    paired: str | None = None,
) -> KeyProblem:
    """`name`'s problem, pointing at `paired` (its pair in the key map) or else at the
    nearest of `candidates`, of its shape first."""
    same_shape = [
        candidate for candidate in candidates if signatures[candidate].shape == signature.shape
    ]
    nearest = paired or _nearest(name, same_shape) or _nearest(name, candidates)
    other = signatures[nearest] if nearest is not None else KeySignature(None, None)
    return KeyProblem(name, signature.shape, nearest, other.shape, signature.dtype, other.dtype)


def _nearest(name: str, candidates: list[str]) -> str | None:
    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.4)
    return matches[0] if matches else None


def _shape(shape: tuple[int, ...] | None, dtype: str | None) -> str:
    if shape is not None:
        return str(shape)
    return "(not a tensor)" if dtype is None else "(shape not known)"
