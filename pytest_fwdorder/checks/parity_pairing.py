"""Pairing two implementations of one model: a path map with captures, its rules in words,
and copying weights through it.

A path map renames reference module paths to candidate paths, in the key-map style of
`remap_state_dict`, with `{name}` captures that stand for one path part:
`{"model.layers.{i}.self_attn": "layers.{i}.attn", "model.norm": "norm"}`. An entry also
renames what lies below its path (`model.layers.0.mlp.up_proj` under `"model.layers.{i}.mlp":
"layers.{i}.ffn"` is `layers.0.ffn.up_proj`); the longest matching entry wins. A tuple of
reference paths mapped onto one candidate path is a fusion: for weights, the reference's
tensors are concatenated along dim 0 in the tuple's order (a fused `qkv`); for calls, those
reference calls have no partner and are listed as fused.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

# A path map's key: one reference path pattern, or a tuple of them fused into one candidate path.
PathMapKey = str | tuple[str, ...]
PathMap = Mapping[PathMapKey, str]

_CAPTURE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class PathMapEntry:
    """One reference pattern of a path map, compiled: `source` -> `target`.

    `fused` is the position of the pattern in its tuple (with `fused_count` members), or
    None for a plain entry.
    """

    source: str
    target: str
    regex: re.Pattern[str]
    fused: int | None = None
    fused_count: int = 1

    @property
    def rule(self) -> str:
        if self.fused is None:
            return f"{self.source!r} -> {self.target!r}"
        return f"{self.source!r} fused into {self.target!r} (part {self.fused + 1} of {self.fused_count})"

    def rename(self, path: str) -> str | None:
        """The candidate path for `path`, or None when this entry does not match it."""
        match = self.regex.fullmatch(path)
        if match is None:
            return None
        captures = {name: value for name, value in match.groupdict().items() if name != "_rest"}
        return self.target.format(**captures) + (match.group("_rest") or "")


def compile_path_map(path_map: PathMap, *, function: str) -> list[PathMapEntry]:
    """Check and compile a path map; raises TypeError or ValueError naming the bad entry."""
    if not isinstance(path_map, Mapping):
        raise TypeError(
            f"{function} expected path_map as a dict of reference path -> candidate path, got "
            f"{type(path_map).__name__!r}: {path_map!r}"
        )
    entries: list[PathMapEntry] = []
    for key, target in path_map.items():
        sources = key if isinstance(key, tuple) else (key,)
        if not isinstance(target, str) or not all(isinstance(item, str) for item in sources):
            raise TypeError(
                f"{function}'s path_map entry {key!r}: {target!r} is not path -> path: "
                "write module paths as strings, such as 'model.layers.{i}.self_attn'"
            )
        for position, source in enumerate(sources):
            names = _CAPTURE.findall(source)
            missing = set(_CAPTURE.findall(target)) - set(names)
            if missing:
                raise ValueError(
                    f"{function}'s path_map entry {source!r} -> {target!r} uses "
                    f"{', '.join('{' + name + '}' for name in sorted(missing))} in the "
                    "candidate path but not in the reference path: capture it on the left"
                )
            entries.append(
                PathMapEntry(
                    source,
                    target,
                    _pattern(source),
                    fused=position if isinstance(key, tuple) else None,
                    fused_count=len(sources),
                )
            )
    # Longest pattern first: "model.layers.{i}.mlp" before "model.layers.{i}".
    return sorted(entries, key=lambda entry: len(entry.source), reverse=True)


def _pattern(source: str) -> re.Pattern[str]:
    parts = _CAPTURE.split(source)  # literal, name, literal, name, ..., literal
    regex = ""
    for position, part in enumerate(parts):
        regex += f"(?P<{part}>[^.]+)" if position % 2 else re.escape(part)
    if source == "":  # the root renames only itself; everything lies below it
        return re.compile("(?P<_rest>)")
    return re.compile(f"{regex}(?P<_rest>\\..+)?")


def map_path(entries: list[PathMapEntry], path: str) -> tuple[str, PathMapEntry] | None:
    """The candidate path of reference `path` and the entry that renamed it, or None."""
    for entry in entries:
        renamed = entry.rename(path)
        if renamed is not None:
            return renamed, entry
    return None


def partner_path(entries: list[PathMapEntry], path: str) -> tuple[str, str]:
    """The candidate path a reference call at `path` pairs with, and the rule that says so:
    the root with the root (unless an entry maps the root), the longest matching entry,
    else the equal path."""
    mapped = map_path(entries, path)
    if path == "" and (mapped is None or mapped[1].source != ""):
        return "", "the root with the root"
    if mapped is None:
        return path, "equal paths"
    entry = mapped[1]
    if entry.fused is not None:
        return mapped[0], f"fused into {mapped[0]} (part {entry.fused + 1} of {entry.fused_count})"
    return mapped[0], f"path map {mapped[1].rule}"


@dataclass(frozen=True)
class Pairing:
    """Which candidate call each reference call is compared with, and why.

    `pairs` maps a reference call (path, nth) to a candidate call (path, nth); `rules` says
    each rule used and how many calls it paired, in words; `unpaired` gives each reference
    call without a partner and the reason.
    """

    pairs: dict[tuple[str, int], tuple[str, int]]
    rules: list[str]
    unpaired: list[tuple[str, int, str]]


def pair_by_path_map(
    reference_calls: Iterable[tuple[str, int]],
    candidate_calls: Iterable[tuple[str, int]],
    entries: list[PathMapEntry],
) -> Pairing:
    """Pair calls by the path map, then the root with the root, then equal paths.

    A reference call pairs with the candidate's call of the mapped path and the same call
    number (`nth`), so a module called twice pairs call by call.
    """
    candidate = set(candidate_calls)
    pairs: dict[tuple[str, int], tuple[str, int]] = {}
    counts: dict[str, int] = {}
    unpaired: list[tuple[str, int, str]] = []
    for path, nth in reference_calls:
        target, rule = partner_path(entries, path)
        if rule.startswith("fused"):
            unpaired.append((path, nth, f"{rule}: compared only at the boundaries around it"))
            continue
        if (target, nth) not in candidate:
            reason = (
                f"mapped to {target or '<root>'}, which the candidate did not call"
                if target != path
                else "no path map entry, and the candidate has no call at this path"
            )
            if nth > 1 and (target, 1) in candidate:
                reason = f"{target} was called fewer than {nth} times in the candidate"
            unpaired.append((path, nth, reason))
            continue
        pairs[(path, nth)] = (target, nth)
        counts[rule] = counts.get(rule, 0) + 1
    rules = [f"{rule}: {count} call{'s' if count != 1 else ''}" for rule, count in counts.items()]
    return Pairing(pairs, rules, unpaired)


def copy_mapped_weights(
    source: nn.Module | Mapping[str, torch.Tensor] | object,
    target: nn.Module,
    path_map: PathMap | None = None,
) -> list[tuple[tuple[str, ...], str]]:
    """Copy the reference's parameters and persistent buffers into `target` through a path map.

    `source` is the reference model, its state_dict, or a `Reference` recorded with
    `weights=True` (so a port test needs neither the reference's framework nor a
    hand-written conversion). Each source key is renamed by the path map (entries rename
    module paths, and everything below them); a tuple entry concatenates its members'
    tensors along dim 0 into the one candidate tensor. Values are cast to the target's dtype.
    Returns (source keys, target key) for each tensor copied. Raises ValueError listing the
    target keys nothing was mapped onto (with the nearest source key), the source keys that
    went nowhere, and shapes that differ; nothing is copied then.
    """
    import torch
    from torch import nn

    if not isinstance(target, nn.Module):
        raise TypeError(
            f"copy_mapped_weights expected the candidate nn.Module as `target`, got "
            f"{type(target).__name__!r}"
        )
    state = _source_state(source)
    entries = compile_path_map(path_map or {}, function="copy_mapped_weights")
    target_state = target.state_dict()
    gathered, nowhere = _gather_by_target(state, entries, target_state)
    problems = _unmapped_problems(target_state, gathered, nowhere)
    values = _joined_values(state, gathered)
    problems.extend(_shape_problems(values, gathered, target_state))
    if problems:
        raise ValueError(
            f"copy_mapped_weights cannot map the reference's weights onto the candidate "
            f"({len(problems)} problem{'s' if len(problems) != 1 else ''}):\n  "
            + "\n  ".join(problems[:20])
            + "\nadd or correct path_map entries (reference path -> candidate path; a tuple "
            "of reference paths for a fused tensor)"
        )
    with torch.no_grad():
        for target_key, value in values.items():
            target_state[target_key].copy_(value)
    return [(tuple(keys), target_key) for target_key, keys in gathered.items()]


def _gather_by_target(
    state: Mapping[str, torch.Tensor],
    entries: list[PathMapEntry],
    target_state: Mapping[str, torch.Tensor],
) -> tuple[dict[str, list[str]], list[str]]:
    """Each target key with the source keys the path map renames onto it (a fusion's in
    its tuple's order), and the source keys that land on no tensor of the target."""
    gathered: dict[str, list[tuple[int, str]]] = {}
    nowhere: list[str] = []
    for key in state:
        module_path, _, name = key.rpartition(".")
        mapped = map_path(entries, module_path) if module_path else map_path(entries, "")
        target_key = key if mapped is None else _join(mapped[0], name)
        if target_key not in target_state:
            nowhere.append(f"{key} -> {target_key}" if target_key != key else key)
            continue
        position = 0 if mapped is None or mapped[1].fused is None else mapped[1].fused
        gathered.setdefault(target_key, []).append((position, key))
    ordered = {
        target_key: [key for _, key in sorted(members)] for target_key, members in gathered.items()
    }
    return ordered, nowhere


def _unmapped_problems(
    target_state: Mapping[str, torch.Tensor], gathered: Mapping[str, list[str]], nowhere: list[str]
) -> list[str]:
    """The target keys nothing was mapped onto (with the nearest source key that went
    nowhere), then the source keys that went nowhere."""
    problems: list[str] = []
    for key in target_state:
        if key in gathered:
            continue
        close = difflib.get_close_matches(key, nowhere, n=1, cutoff=0.4)
        problems.append(f"nothing mapped onto {key}" + (f" (nearest: {close[0]})" if close else ""))
    problems.extend(f"{key}: the candidate has no such tensor" for key in nowhere)
    return problems


def _joined_values(
    state: Mapping[str, torch.Tensor], gathered: Mapping[str, list[str]]
) -> dict[str, torch.Tensor]:
    """The value for each target key: its one source tensor, or a fusion's concatenated."""
    import torch

    return {
        target_key: torch.cat([state[key] for key in keys]) if len(keys) > 1 else state[keys[0]]
        for target_key, keys in gathered.items()
    }


def _shape_problems(
    values: Mapping[str, torch.Tensor],
    gathered: Mapping[str, list[str]],
    target_state: Mapping[str, torch.Tensor],
) -> list[str]:
    """A problem for each value whose shape is not its target tensor's."""
    return [
        f"{' + '.join(gathered[target_key])} {tuple(value.shape)} cannot go into {target_key} "
        f"{tuple(target_state[target_key].shape)}: shapes differ"
        for target_key, value in values.items()
        if value.shape != target_state[target_key].shape
    ]


def _source_state(source: object) -> Mapping[str, torch.Tensor]:
    from torch import nn

    if isinstance(source, nn.Module):
        return source.state_dict()
    weights = getattr(source, "weights", None)
    if isinstance(weights, Mapping):  # a Reference
        if not weights:
            raise ValueError(
                "copy_mapped_weights was given a reference recorded without weights: "
                "record it with record_reference(..., weights=True)"
            )
        return weights
    if isinstance(source, Mapping):
        return source
    raise TypeError(
        f"copy_mapped_weights expected the reference model, a state_dict or a Reference as "
        f"`source`, got {type(source).__name__!r}"
    )


def _join(module_path: str, name: str) -> str:
    return f"{module_path}.{name}" if module_path else name
