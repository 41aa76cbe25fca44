"""The odd block out: positions where one repeated block differs from its siblings, and
modules whose dtypes differ from the rest of their class. Pure functions of a trace, no torch.

Adapters and quantization are applied by pattern, and a pattern that misses one layer is
one line among thousands in a golden. Two rules find it (docs/adapters-and-quantization.md):

**Sibling blocks.** Siblings are the called modules of one class under one parent whose
names are numbers (`layers.0` ... `layers.31`, a stage's blocks, a list of experts), three
or more. Each block is described at each position inside it (its own path relative to the
block) by the treatment the module there got, read from its first call: its class (by
qualified name: PEFT's `lora.Linear` and torch's `Linear` share the name `Linear`), the
dtypes of its own tensors, frozen or not, its mode. Settings, shapes and calls a block has
in addition or lacks are left out: blocks differ in those on purpose (a stage's first block
downsamples, MViT's pool at stage changes, MobileNetV3's squeeze-excitation in some blocks).
At each position the description at least three quarters of the blocks share is the norm
(no such norm: the blocks vary by design, nothing is reported):

- a block that differs from the norm with blocks of the norm before and after it is
  reported, unless three or more blocks differ alike at an even spacing (a pattern, such as
  a mixture-of-experts layer every fourth layer);
- a block in the leading or trailing run of blocks that differ (a decoder's dense first
  layers, a ViT's last block) is reported only when an adapter or a quantized class is
  missing or added there: a class of the same name but another class, or its own tensors
  of other dtypes.

Only the outermost differing position of a block is reported: a missing adapter is one
line, not one per call inside it.

**Class members.** Called modules of one class (four or more) whose dtypes (their own
tensors', and a `dtype` setting) differ from those of at least three quarters of that
class's modules, when at most two do: the head a quantization config skipped.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from itertools import islice, pairwise
from operator import itemgetter, le
from typing import NamedTuple, TypeVar

from pytest_fwdorder.calls.facet_records import OddBlock
from pytest_fwdorder.calls.records import Call, ModuleFacts, TraceRecords
from pytest_fwdorder.golden.format import render_settings

__all__ = ["OddBlock", "odd_blocks", "odd_class_members"]

_FEWEST_SIBLINGS = 3
_FEWEST_CLASS_MEMBERS = 4
_MOST_ODD_CLASS_MEMBERS = 2
_DTYPE_SETTING = re.compile(r"(?:^|, )dtype=([^,]+)")
_Value = TypeVar("_Value")
_Key = TypeVar("_Key")


class _Position(NamedTuple):
    """What a block has at one position inside it, by the first call there: the treatment,
    not the architecture (settings, shapes and calls differ between stages on purpose)."""

    module_type: str
    class_name: str  # qualified where the trace knows it: `peft.tuners.lora.layer.Linear`
    dtypes: frozenset[str]  # of its own tensors
    frozen: bool
    training: bool | None


def odd_blocks(trace: TraceRecords) -> list[OddBlock]:
    """The positions where a block differs from its siblings, by the rule above, in the
    order the blocks were first called."""
    first_calls = [call for call in trace.calls if call.nth == 1]
    groups = _sibling_groups(first_calls)
    if not groups:
        return []
    describe = _describer(trace.options.hidden, trace.module_classes)
    inside = _calls_inside({block.path for blocks in groups for block in blocks}, first_calls)
    found: list[OddBlock] = []
    for blocks in groups:
        found += _odd_positions(
            [block.path for block in blocks], _columns(blocks, inside, describe)
        )
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
    kind_of = _dtype_kinds(hidden)
    for module_type, calls in by_class.items():
        if len(calls) < _FEWEST_CLASS_MEMBERS:
            continue
        tally = _tally([call.facts for call in calls], kind_of)
        norm, agreeing = tally.most_common(1)[0]
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
            for call in calls
            if (kind := kind_of(call.facts)) != norm
        ]
    return found


_DtypeKind = tuple[str, tuple[str, ...]]


def _dtype_kinds(hidden: frozenset[str]) -> Callable[[ModuleFacts | None], _DtypeKind]:
    """A module's dtypes, from its facts: its `dtype` setting (a quantized class's), its own
    tensors'. Read once per facts object (modules alike share one), kept by id."""
    kinds_by_facts: dict[int, _DtypeKind] = {}

    def kind_of(facts: ModuleFacts | None) -> _DtypeKind:
        if facts is None:
            return ("", ())
        kind = kinds_by_facts.get(id(facts))
        if kind is None:
            kind = kinds_by_facts[id(facts)] = _facts_dtype_kind(facts, hidden)
        return kind

    return kind_of


def _facts_dtype_kind(facts: ModuleFacts, hidden: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    setting = ""
    if "settings" not in hidden and facts.settings:
        match = _DTYPE_SETTING.search(render_settings(facts.settings))
        setting = match.group(1) if match else ""
    dtypes = (
        () if "parameters" in hidden else tuple(sorted({t.dtype for t in facts.tensors.tensors}))
    )
    return (setting, dtypes)


def _dtype_label(kind: tuple[str, tuple[str, ...]]) -> str:
    """`dtype=torch.qint8, no tensors of its own` or `f32 tensors`."""
    setting, dtypes = kind
    tensors = f"{'/'.join(dtypes)} tensors" if dtypes else "no tensors of its own"
    return f"dtype={setting}, {tensors}" if setting else tensors


def _sibling_groups(first_calls: list[Call]) -> list[list[Call]]:
    """First calls of modules of one class under one parent, named by numbers, three or
    more, sorted by number; groups in the order their first block was called."""
    groups: defaultdict[tuple[str, str], list[tuple[str, Call]]] = defaultdict(list)
    for call in first_calls:
        path = call.path
        parent, _, name = path.rpartition(".")
        if name.isdigit() and path:
            groups[parent, call.module_type].append((name, call))
    return [_by_number(named) for named in groups.values() if len(named) >= _FEWEST_SIBLINGS]


def _by_number(named: list[tuple[str, Call]]) -> list[Call]:
    """The calls sorted by their names' numbers: most groups are called in order already,
    and then one pass over the numbers says so (C-level maps: a group may be 50,000 long)."""
    numbers = list(map(int, map(itemgetter(0), named)))
    calls = list(map(itemgetter(1), named))
    if all(map(le, numbers, islice(numbers, 1, None))):
        return calls
    return [calls[index] for index in sorted(range(len(calls)), key=numbers.__getitem__)]


_Describe = Callable[[Call], _Position]


def _describer(hidden: frozenset[str], classes: dict[str, str]) -> _Describe:
    """What the module of a call got, as a function; calls alike (class, facts object,
    flags) share one `_Position`, so a 100,001-call trace makes a few, not one per call."""
    described: dict[tuple[str, str, int, bool, bool | None], _Position] = {}
    class_of = classes.get

    def describe(call: Call) -> _Position:
        class_name = class_of(call.path, call.module_type)
        key = (call.module_type, class_name, id(call.facts), call.frozen, call.training)
        position = described.get(key)
        if position is None:
            position = described[key] = _new_position(call, class_name, hidden)
        return position

    return describe


def _columns(
    blocks: list[Call], inside: dict[str, list[Call]], describe: _Describe
) -> dict[str, list[_Position | None]]:
    """Each position inside the blocks (`""`, `self_attn.q_proj`), in the order first met,
    and what each block has there by its first call (None: no call there)."""
    columns: dict[str, list[_Position | None]] = {"": [describe(block) for block in blocks]}
    for index, block in enumerate(blocks):
        calls = inside.get(block.path)
        if not calls:
            continue
        cut = len(block.path) + 1
        for call in calls:
            relative = call.path[cut:]
            column = columns.get(relative)
            if column is None:
                column = columns[relative] = [None] * len(blocks)
            column[index] = describe(call)
    return columns


def _new_position(call: Call, class_name: str, hidden: frozenset[str]) -> _Position:
    facts = call.facts
    dtypes: frozenset[str] = frozenset()
    if facts is not None and "parameters" not in hidden:
        dtypes = frozenset(fact.dtype for fact in facts.tensors.tensors)
    return _Position(
        module_type=call.module_type,
        class_name=class_name,
        dtypes=dtypes,
        frozen=call.frozen and "parameters" not in hidden,
        training=None if "mode" in hidden else call.training,
    )


def _odd_positions(paths: list[str], columns: dict[str, list[_Position | None]]) -> list[OddBlock]:
    """The reported positions of one sibling group, block by block, outermost first."""
    count = len(paths)
    reported: dict[int, list[OddBlock]] = {}
    reported_at: dict[int, list[str]] = {}
    for relative, values in columns.items():
        tally = _tally(values, _same)
        norm, agreeing = tally.most_common(1)[0]
        if norm is None or agreeing * 4 < count * 3:
            continue  # no norm most blocks share: blocks that vary by design
        if len(tally) - (None in tally) == 1:
            continue  # every block with a call there has the norm: the usual case
        usual = [index for index, value in enumerate(values) if value == norm]
        odd_values: dict[_Position, list[int]] = {}
        for index, value in enumerate(values):
            if value is not None and value != norm:  # a call in addition or lacking: design
                odd_values.setdefault(value, []).append(index)
        for value, indices in odd_values.items():
            if _a_pattern(indices):
                continue
            for index in indices:
                inner = usual[0] < index < usual[-1]
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


def _tally(values: list[_Value], key: Callable[[_Value], _Key]) -> Counter[_Key]:
    """`Counter(map(key, values))`, in the same order, with the objects counted by identity
    first: modules alike share one object, so `key` reads, and the tally hashes, a few of
    them rather than one per module."""
    by_object = Counter(map(id, values))
    objects = dict(zip(map(id, values), values, strict=True))
    tally: Counter[_Key] = Counter()
    for object_id, times in by_object.items():
        tally[key(objects[object_id])] += times
    return tally


def _same(value: _Value) -> _Value:
    return value


def _a_pattern(indices: list[int]) -> bool:
    """Three or more blocks at an even spacing: made so on purpose (every sixth layer)."""
    if len(indices) < 3:
        return False
    steps = {later - earlier for earlier, later in pairwise(indices)}
    return len(steps) == 1


def _edge_difference(value: _Position, norm: _Position) -> bool:
    """Whether a first or last block's difference is reported: a module of the same class
    name that is another class (an adapter or a quantized class missing or added) or holds
    tensors of other dtypes."""
    if value.module_type != norm.module_type:
        return False
    if value.class_name != norm.class_name:
        return True
    return bool(value.dtypes and norm.dtypes and value.dtypes != norm.dtypes)


def _inside(relative: str, outer: str) -> bool:
    return outer == "" or relative.startswith(f"{outer}.")


def _label(value: _Position, other: _Position) -> str:
    """What a block has at a position: its class, with what tells it from `other`."""
    if value.class_name != other.class_name:
        # PEFT's wrapper and torch's Linear are both `Linear`: then the qualified names.
        return value.class_name if value.module_type == other.module_type else value.module_type
    label = value.module_type
    if value.dtypes != other.dtypes:
        label += f" {'/'.join(sorted(value.dtypes)) or 'without tensors of its own'}"
    if value.frozen != other.frozen:
        label += " frozen" if value.frozen else " trainable"
    if value.training != other.training and value.training is not None:
        label += " in train mode" if value.training else " in eval mode"
    return label
