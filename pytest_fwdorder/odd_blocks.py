"""The odd block out: positions where one repeated block differs from its siblings, and
modules whose dtypes differ from the rest of their class. Pure functions of a trace, no torch.

Adapters and quantization are applied by pattern, and a pattern that misses one layer is
one line among thousands in a golden. Two rules find it (docs/adapters-and-quantization.md):

**Sibling blocks.** Siblings are the called modules of one class under one parent whose
names are numbers (`layers.0` ... `layers.31`, a stage's blocks, a list of experts), three
or more. Each block is described at each position inside it (its own path relative to the
block) by the first call there: class, settings, its own tensors, frozen, mode, or no call.
At each position the description most blocks share (more than half of them) is the norm:

- a block with a majority block before and after it that differs from the norm is reported,
  unless three or more blocks differ alike at an even spacing (a pattern such as global
  attention every sixth layer, made on purpose);
- a block in the leading or trailing run of blocks that differ (ResNet's first block with
  its `downsample`, a decoder's dense first layers, a ViT's last block) is reported only
  when, at the same position, both have a call and the class is of one kind with the norm's
  (one name contains the other: `LoraLinear` / `Linear`) or its own tensors' dtypes differ
  (an adapter or a quantized class missing or added); never for calls it has in addition
  or lacks.

Only the outermost differing position of a block is reported: a missing adapter is one
line, not one per call of the adapter.

**Class members.** Called modules of one class (four or more) whose dtypes (their own
tensors', and a `dtype` setting) differ from those of at least three quarters of that
class's modules, when at most two do: the head a quantization config skipped.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from pytest_fwdorder.golden_format import render_settings, render_tensor_fact
from pytest_fwdorder.record_types import Call, OddBlock, TraceRecords

__all__ = ["OddBlock", "odd_blocks", "odd_class_members"]

_FEWEST_SIBLINGS = 3
_FEWEST_CLASS_MEMBERS = 4
_MOST_ODD_CLASS_MEMBERS = 2
_CHILDREN_NAMED = 4
_DTYPE_SETTING = re.compile(r"(?:^|, )dtype=([^,]+)")


class _Position(NamedTuple):
    """What a block has at one position inside it: the first call there, described."""

    module_type: str
    settings: str
    tensors: str
    dtypes: tuple[str, ...]
    frozen: bool
    training: bool | None
    children: tuple[str, ...]


def odd_blocks(trace: TraceRecords) -> list[OddBlock]:
    """The positions where a block differs from its siblings, by the rule above, in the
    order the blocks were first called."""
    first_calls = [call for call in trace.calls if call.nth == 1]
    groups = _sibling_groups(first_calls)
    if not groups:
        return []
    hidden = trace.options.hidden
    inside = _calls_inside({block.path for blocks in groups for block in blocks}, first_calls)
    found: list[OddBlock] = []
    for blocks in groups:
        positions = [_positions(block, inside.get(block.path, []), hidden) for block in blocks]
        found += _odd_positions([block.path for block in blocks], positions)
    return found


def _calls_inside(block_paths: set[str], first_calls: list[Call]) -> dict[str, list[Call]]:
    """Each block's path -> the first calls of the modules under it, in call order: one pass,
    each call looked up under each of its path's prefixes."""
    inside: dict[str, list[Call]] = {}
    for call in first_calls:
        path = call.path
        end = path.rfind(".")
        while end > 0:
            prefix = path[:end]
            if prefix in block_paths:
                inside.setdefault(prefix, []).append(call)
            end = path.rfind(".", 0, end)
    return inside


def odd_class_members(trace: TraceRecords) -> list[OddBlock]:
    """Called modules whose dtypes differ from those of most modules of their class."""
    hidden = trace.options.hidden
    if "parameters" in hidden and "settings" in hidden:
        return []
    by_class: dict[str, list[Call]] = {}
    for call in trace.calls:
        if call.nth == 1 and call.facts is not None:
            by_class.setdefault(call.module_type, []).append(call)
    found: list[OddBlock] = []
    for module_type, calls in by_class.items():
        if len(calls) < _FEWEST_CLASS_MEMBERS:
            continue
        kinds = [_dtype_kind(call, hidden) for call in calls]
        norm, agreeing = Counter(kinds).most_common(1)[0]
        odd = len(calls) - agreeing
        if not 0 < odd <= _MOST_ODD_CLASS_MEMBERS or agreeing * 4 < len(calls) * 3:
            continue
        found += [
            OddBlock(
                call.display_path,
                f"{module_type} {_dtype_label(kind)}",
                agreeing,
                len(calls),
                f"{module_type} {_dtype_label(norm)}",
                peers=f"{module_type} modules",
            )
            for call, kind in zip(calls, kinds, strict=True)
            if kind != norm
        ]
    return found


def _dtype_kind(call: Call, hidden: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """A module's dtypes: its `dtype` setting (a quantized class's), its own tensors'."""
    facts = call.facts
    if facts is None:
        return ("", ())
    setting = ""
    if "settings" not in hidden and facts.settings:
        match = _DTYPE_SETTING.search(render_settings(facts.settings))
        setting = match.group(1) if match else ""
    dtypes = () if "parameters" in hidden else tuple(sorted({t.dtype for t in facts.tensors.tensors}))
    return (setting, dtypes)


def _dtype_label(kind: tuple[str, tuple[str, ...]]) -> str:
    """`dtype=torch.qint8, no tensors of its own` or `f32 tensors`."""
    setting, dtypes = kind
    tensors = f"{'/'.join(dtypes)} tensors" if dtypes else "no tensors of its own"
    return f"dtype={setting}, {tensors}" if setting else tensors


def _sibling_groups(first_calls: list[Call]) -> list[list[Call]]:
    """First calls of modules of one class under one parent, named by numbers, three or
    more, sorted by number; groups in the order their first block was called."""
    groups: dict[tuple[str, str], list[Call]] = {}
    for call in first_calls:
        parent, _, name = call.path.rpartition(".")
        if name.isdigit() and call.path:
            groups.setdefault((parent, call.module_type), []).append(call)
    return [
        sorted(blocks, key=lambda call: int(call.path.rpartition(".")[2]))
        for blocks in groups.values()
        if len(blocks) >= _FEWEST_SIBLINGS
    ]


def _positions(block: Call, inside: list[Call], hidden: frozenset[str]) -> dict[str, _Position]:
    """Each position inside a block (`""`, `self_attn.q_proj`) and its first call there."""
    prefix = f"{block.path}."
    relatives = [call.path[len(prefix) :] for call in inside]
    # A position's children are the calls whose nearest called position above is it: a
    # LoRA wrapper's are `base_layer`, `lora_A.default`, ... (a ModuleDict is never called).
    children: dict[str, list[str]] = {}
    called = {""}
    for relative in relatives:
        above = relative
        while above:
            above = above.rpartition(".")[0]
            if above in called:
                break
        children.setdefault(above, []).append(relative[len(above) + 1 :] if above else relative)
        called.add(relative)
    positions = {"": _describe(block, tuple(children.get("", ())), hidden)}
    for call, relative in zip(inside, relatives, strict=True):
        positions[relative] = _describe(call, tuple(children.get(relative, ())), hidden)
    return positions


def _describe(call: Call, children: tuple[str, ...], hidden: frozenset[str]) -> _Position:
    facts = call.facts
    settings = tensors = ""
    dtypes: tuple[str, ...] = ()
    if facts is not None:
        if "settings" not in hidden:
            settings = render_settings(facts.settings)
        if "parameters" not in hidden:
            tensors = ", ".join(render_tensor_fact(fact, None) for fact in facts.tensors.tensors)
            dtypes = tuple(fact.dtype for fact in facts.tensors.tensors)
    return _Position(
        module_type=call.module_type,
        settings=settings,
        tensors=tensors,
        dtypes=dtypes,
        frozen=call.frozen and "parameters" not in hidden,
        training=None if "mode" in hidden else call.training,
        children=children,
    )


def _odd_positions(paths: list[str], inside: list[dict[str, _Position]]) -> list[OddBlock]:
    """The reported positions of one sibling group, block by block, outermost first."""
    order = list(dict.fromkeys(relative for positions in inside for relative in positions))
    count = len(paths)
    reported: dict[int, list[OddBlock]] = {}
    reported_at: dict[int, list[str]] = {}
    for relative in order:
        values = [positions.get(relative) for positions in inside]
        norm, agreeing = Counter(values).most_common(1)[0]
        if agreeing * 2 <= count:
            continue  # no majority: nothing to differ from
        usual = [index for index, value in enumerate(values) if value == norm]
        first_usual, last_usual = usual[0], usual[-1]
        odd_values: dict[_Position | None, list[int]] = {}
        for index, value in enumerate(values):
            if value != norm:
                odd_values.setdefault(value, []).append(index)
        for value, indices in odd_values.items():
            if _a_pattern(indices):
                continue
            for index in indices:
                inner = first_usual < index < last_usual
                if not inner and not _edge_difference(value, norm):
                    continue
                if any(_inside(relative, done) for done in reported_at.get(index, [])):
                    continue
                path = f"{paths[index]}.{relative}" if relative else paths[index]
                reported_at.setdefault(index, []).append(relative)
                reported.setdefault(index, []).append(
                    OddBlock(path, _label(value, norm), agreeing, count, _label(norm, value))
                )
    return [item for index in sorted(reported) for item in reported[index]]


def _a_pattern(indices: list[int]) -> bool:
    """Three or more blocks at an even spacing: made so on purpose (every sixth layer)."""
    if len(indices) < 3:
        return False
    steps = {later - earlier for earlier, later in zip(indices, indices[1:], strict=False)}
    return len(steps) == 1


def _edge_difference(value: _Position | None, norm: _Position | None) -> bool:
    """Whether a first or last block's difference is reported: both have a call there, of
    one kind of class (one name contains the other) or with other dtypes."""
    if value is None or norm is None:
        return False
    if value.dtypes != norm.dtypes:
        return True
    if value.module_type == norm.module_type:
        return False
    one, other = value.module_type.lower(), norm.module_type.lower()
    return one in other or other in one


def _inside(relative: str, outer: str) -> bool:
    return outer == "" or relative.startswith(f"{outer}.")


def _label(value: _Position | None, other: _Position | None) -> str:
    """What a block has at a position, with the first thing that tells it from `other`."""
    if value is None:
        return "no call"
    label = value.module_type
    if other is None or other.module_type != value.module_type:
        return label
    if value.children != other.children:
        if not value.children:
            return label
        named = ", ".join(value.children[:_CHILDREN_NAMED])
        more = ", ..." if len(value.children) > _CHILDREN_NAMED else ""
        return f"{label} calling {named}{more}"
    if value.tensors != other.tensors:
        return f"{label} with {value.tensors or 'no tensors of its own'}"
    if value.settings != other.settings:
        return f"{label} with {value.settings or 'default settings'}"
    if value.frozen != other.frozen:
        return f"{label} {'frozen' if value.frozen else 'trainable'}"
    if value.training != other.training:
        return f"{label} in {'train' if value.training else 'eval'} mode"
    return label
