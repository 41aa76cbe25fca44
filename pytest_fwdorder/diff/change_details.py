"""Changed facts -> words: what changed in a call's inputs, outputs, settings, parameters
and FLOPs, each as the detail of one change. Pure, no torch.

`classification` writes these details as it finds the changes; `explanation` puts the
changes together into a summary.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from pytest_fwdorder.diff.ordered_pairing import changed_runs
from pytest_fwdorder.golden.format import TIED_FLAG
from pytest_fwdorder.golden.line_facts import LineFacts, WrittenTensor
from pytest_fwdorder.golden.line_values import WrittenValues, values_of

# A dict's entry (`'a': f32[2]`) or a keyword's value (`flag=True`): the key and its separator.
_KEYED_VALUE = re.compile(r"^('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[A-Za-z_][A-Za-z0-9_]*)(: |=)")


def describe_value_change(old_text: str, new_text: str) -> str:
    """What changed in inputs or outputs: shapes, dtypes, then other values that differ.

    `(1, 4) -> (2, 4)`, `dtype f32 -> f64`, `flag=True -> flag=False`, or both texts whole
    when no shorter account is exact.
    """
    old, new = values_of(old_text), values_of(new_text)
    reordered = _reordered(old.values, new.values)
    if reordered is None and any(map(_KEYED_VALUE.match, (*old.values, *new.values))):
        reordered = _values_reordered(old.values, new.values)  # a dict that nests
    if reordered is not None:
        return reordered
    old_tensors, new_tensors = old.tensors, new.tensors
    parts: list[str] = []
    if old_tensors != new_tensors:
        tensor_change = _tensor_change(old_tensors, new_tensors)
        if tensor_change is None:
            return f"{old_text} -> {new_text}"
        parts.append(tensor_change)
    parts += _other_value_changes(old, new)
    return " and ".join(parts) if parts else f"{old_text} -> {new_text}"


def _reordered(old_values: tuple[str, ...], new_values: tuple[str, ...]) -> str | None:
    """Where every value on both sides is keyed (a dict's `'a': ...`, a keyword's `a=...`)
    and the keys both hold come in another order: that order, then each key's value that
    changed and the keys added or dropped; else None. Values without keys are compared by
    place: a tuple's shapes swapped may as well be each value changed (a GRU's outputs), so
    no reorder is said of them."""
    old, new = _keyed(old_values), _keyed(new_values)
    if old is None or new is None:
        return None
    old_keys = [key for key in old if key in new]
    new_keys = [key for key in new if key in old]
    if old_keys == new_keys:
        return None
    parts = [f"keys reordered: {', '.join(old_keys)} -> {', '.join(new_keys)}"]
    parts += [
        f"{old[key][0]} -> {new[key][0][len(key) + len(new[key][1]) :]}"
        for key in new_keys
        if old[key][0] != new[key][0]
    ]
    parts += [f"added {value}" for key, (value, _) in new.items() if key not in old]
    parts += [f"dropped {value}" for key, (value, _) in old.items() if key not in new]
    return " and ".join(parts)


def _values_reordered(old_values: tuple[str, ...], new_values: tuple[str, ...]) -> str | None:
    """For a dict that nests (its values flattened, not all keyed): where the values both
    sides hold come in another order, that order and the values added or dropped besides;
    else None."""
    common = Counter(old_values) & Counter(new_values)
    old_common, new_common = _kept_in_order(old_values, common), _kept_in_order(new_values, common)
    if old_common == new_common:
        return None
    parts = [f"reordered: {', '.join(old_common)} -> {', '.join(new_common)}"]
    parts += [f"added {value}" for value in (Counter(new_values) - common).elements()]
    parts += [f"dropped {value}" for value in (Counter(old_values) - common).elements()]
    return " and ".join(parts)


def _kept_in_order(values: tuple[str, ...], common: Counter[str]) -> list[str]:
    """`values` in order, each only as many times as `common` holds it."""
    left = Counter(common)
    kept = []
    for value in values:
        if left[value] > 0:
            left[value] -= 1
            kept.append(value)
    return kept


def _keyed(values: tuple[str, ...]) -> dict[str, tuple[str, str]] | None:
    """Each value by its key (`'a'`, `flag`): its text and the key's separator (`: `, `=`);
    None where a value has no key or a key comes twice."""
    keyed: dict[str, tuple[str, str]] = {}
    for value in values:
        match = _KEYED_VALUE.match(value)
        if match is None or match.group(1) in keyed:
            return None
        keyed[match.group(1)] = (value, match.group(2))
    return keyed


def _tensor_change(
    old_tensors: Sequence[tuple[str, tuple[int, ...]]],
    new_tensors: Sequence[tuple[str, tuple[int, ...]]],
) -> str | None:
    """Shapes or dtypes that changed, when the tensors line up one for one; else None."""
    if not old_tensors or len(old_tensors) != len(new_tensors):
        return None
    old_dtypes = [dtype for dtype, _ in old_tensors]
    new_dtypes = [dtype for dtype, _ in new_tensors]
    old_shapes = [shape for _, shape in old_tensors]
    new_shapes = [shape for _, shape in new_tensors]
    if old_dtypes == new_dtypes:
        return f"{_join_shapes(old_shapes)} -> {_join_shapes(new_shapes)}"
    if old_shapes == new_shapes:
        return f"dtype {', '.join(old_dtypes)} -> {', '.join(new_dtypes)}"
    return None


def _other_value_changes(old: WrittenValues, new: WrittenValues) -> list[str]:
    """The values other than tensors that differ: `flag=True -> flag=False`, `added x=1`."""
    old_values, new_values = old.values, new.values
    changes = []
    for tag, old_start, old_end, new_start, new_end in changed_runs(old.blanked, new.blanked):
        before = ", ".join(old_values[old_start:old_end])
        after = ", ".join(new_values[new_start:new_end])
        if tag == "replace":
            changes.append(f"{before} -> {after}")
        elif tag == "insert":
            changes.append(f"added {after}")
        else:
            changes.append(f"dropped {before}")
    return changes


def _join_shapes(shapes: list[tuple[int, ...]]) -> str:
    return ", ".join(str(shape) for shape in shapes)


def describe_settings_change(old: LineFacts, new: LineFacts) -> str:
    """`kernel_size (3, 3) -> (5, 5), bias True -> False`, or both texts whole."""
    old_settings, new_settings = old.settings, new.settings
    if old_settings is None or new_settings is None:
        old_text, new_text = old.by_title.get("settings"), new.by_title.get("settings")
        return f"{old_text or '(none)'} -> {new_text or '(none)'}"
    parts = []
    for name, value in new_settings.items():
        before = old_settings.get(name)
        if before is None:
            parts.append(f"added {name}={value}")
        elif before != value:
            parts.append(f"{name} {before} -> {value}")
    parts += [
        f"dropped {name}={value}"
        for name, value in old_settings.items()
        if name not in new_settings
    ]
    return ", ".join(parts)


def describe_tensor_fact_changes(
    old_items: Mapping[str, WrittenTensor],
    new_items: Mapping[str, WrittenTensor],
    path: str,
    *,
    whole_module_frozen: bool = False,
) -> list[str]:
    """`renamed block.w -> block.weight (f32[64,64])`, `now frozen: 4.weight`, shape changes."""
    prefix = f"{path}." if path and path != "<root>" else ""
    changes: list[str] = []
    removed = [name for name in old_items if name not in new_items]
    added = [name for name in new_items if name not in old_items]
    for name in list(removed):
        old_shape = old_items[name].shape
        partner = next((other for other in added if new_items[other].shape == old_shape), None)
        if partner is not None:
            changes.append(f"renamed {prefix}{name} -> {prefix}{partner} ({old_shape})")
            removed.remove(name)
            added.remove(partner)
    changes += [f"removed {prefix}{name} ({old_items[name].description})" for name in removed]
    changes += [f"added {prefix}{name} ({new_items[name].description})" for name in added]
    for name, new_tensor in new_items.items():
        before = old_items.get(name)
        if before is None or before.description == new_tensor.description:
            continue
        if before.shape != new_tensor.shape:
            changes.append(f"{prefix}{name} {before.shape} -> {new_tensor.shape}")
        old_flags, new_flags = set(before.flags), set(new_tensor.flags)
        if whole_module_frozen:  # the module's own frozen change says it
            old_flags.discard("frozen")
            new_flags.discard("frozen")
        old_ties, new_ties = before.tied_to, new_tensor.tied_to
        for flag in sorted(new_flags - old_flags):
            changes.append(f"now {flag}: {prefix}{name}")
        for flag in sorted(old_flags - new_flags):
            changes.append(f"no longer {flag}: {prefix}{name}")
        # A tie by the names it adds or drops: one more tensor tied is not the others untied.
        if new_ties - old_ties:
            changes.append(
                f"{prefix}{name} now {TIED_FLAG}{', '.join(sorted(new_ties - old_ties))}"
            )
        if old_ties - new_ties:
            dropped = ", ".join(sorted(old_ties - new_ties))
            changes.append(f"{prefix}{name} no longer {TIED_FLAG}{dropped}")
    return changes


def renamed_ties(
    tensors: Mapping[str, WrittenTensor], rewrite: tuple[str, str]
) -> Mapping[str, WrittenTensor]:
    """The tensors with the names they are tied to renamed by the prefix `rewrite` (old,
    new): a model wrapped whole (`emb` now `model.emb`) keeps its ties, now to
    `model.head.weight`, and no tie is said to change."""
    old_prefix, new_prefix = rewrite
    if old_prefix == new_prefix:
        return tensors
    return {
        name: replace(
            tensor,
            tied_to=frozenset(
                new_prefix + tied[len(old_prefix) :] if tied.startswith(old_prefix) else tied
                for tied in tensor.tied_to
            ),
        )
        if tensor.tied_to
        else tensor
        for name, tensor in tensors.items()
    }
