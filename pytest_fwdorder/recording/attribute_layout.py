"""Where the containers sit among a model's attributes: planned once per layout.

A trace watches every dict, list and set its modules hold (model_state.py). Finding them
means reading the type of every attribute of every module; the plan of where they are
depends only on the attributes' names and value types, so it is made once and used again
while those are the same: by the next trace of the model, or of another built alike.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain, compress, repeat
from typing import Any, NamedTuple

from torch import nn

from pytest_fwdorder.recording.bounded_cache import BoundedCache

# The containers a trace copies (plain lists and sets, dicts of any class) or names.
CONTAINERS = (list, dict, set)
# torch's own bookkeeping in a module's __dict__: parameters, buffers, children and hooks.
MODULE_INTERNALS = frozenset(vars(nn.Module()))


class AttributeLayout(NamedTuple):
    """What the modules' attributes are, by their place in the flat list of all of them.

    Worked out from the attributes' names and value types alone, so a model traced again,
    or another built alike, is read with the same plan: each mask says, for every place,
    whether it holds that kind of value (`compress` applies it in C).
    """

    names: list[str]
    value_types: list[type]
    dict_places: bytes  # of any dict class: each is copied as a plain dict
    # Dicts not named `_parameters` or `_buffers`: where a module's own parameter and buffer
    # dicts are (watched already), if torch's names hold them.
    other_dict_places: bytes
    user_dict_places: bytes | None  # dicts under names not torch's bookkeeping, if any
    list_places: bytes | None  # plain lists and sets only: a subclass may not copy as one
    set_places: bytes | None
    own_container_places: list[int]  # containers (subclasses too) under the user's names


@dataclass(slots=True)
class KeptLayout:
    """The layout planned for one model index, kept as long as the index is.

    A model's kept index (index_cache.py) holds one, so a big model traced again is not
    planned again, though its plan is past the bound on plans kept by size below; an index
    walked afresh holds a new, empty one, gone with it.
    """

    layout: AttributeLayout | None = None


# A plan holds about 21 bytes per attribute (400 per module): a model of more attributes
# (some 6,000 modules) is not kept by size, so that a first trace keeps no more than its
# calls need (issue 37: 421 bytes per call) and the 8 plans kept stay under about 22 MiB.
MOST_KEPT_ATTRIBUTES = 2**17
# The plans kept, by (module count, attribute count): one per model traced lately.
_LAYOUTS: BoundedCache[tuple[int, int], AttributeLayout] = BoundedCache(8)


def attribute_layout(
    module_count: int,
    names: list[str],
    value_types: list[type],
    kept: KeptLayout | None = None,
) -> AttributeLayout:
    """The layout of these modules' attributes, given flat, module after module.

    The one `kept` holds, or else the one planned last for as many modules and attributes,
    if its names and value types are these (two comparisons in C); else a new plan, kept in
    `kept` and (for a model of at most `MOST_KEPT_ATTRIBUTES`) by size.
    """
    if kept is not None and kept.layout is not None and _fits(kept.layout, names, value_types):
        return kept.layout
    if len(names) > MOST_KEPT_ATTRIBUTES:
        layout = _plan_layout(names, value_types)
    else:
        key = (module_count, len(names))
        found = _LAYOUTS.get(key)
        layout = (
            found
            if found is not None and _fits(found, names, value_types)
            else _LAYOUTS.keep(key, _plan_layout(names, value_types))
        )
    if kept is not None:
        kept.layout = layout
    return layout


def _fits(layout: AttributeLayout, names: list[str], value_types: list[type]) -> bool:
    """Whether a plan was made for these names and value types: the plan reads nothing else."""
    return layout.value_types == value_types and layout.names == names


def _plan_layout(names: list[str], value_types: list[type]) -> AttributeLayout:
    """Find the containers among attributes by their types, and torch's own by their names.

    Each attribute gets one code, its name's role or'ed with its value type's (two dict
    look-ups and an `or` per attribute, in C); every mask is then one `bytes.translate` of
    the codes, a copy's cost, rather than a pass of `map`s per mask.
    """
    type_roles = {kind: _type_role(kind) for kind in set(value_types)}
    name_roles = {name: _name_role(name) for name in set(names)}
    codes = bytes(
        map(
            operator.or_,
            map(name_roles.__getitem__, names),
            map(type_roles.__getitem__, value_types),
        )
    )
    roles = set(type_roles.values())
    user_dicts = codes.translate(_USER_DICT)
    return AttributeLayout(
        names,
        value_types,
        codes.translate(_DICT),
        codes.translate(_OTHER_DICT),
        user_dicts if any(user_dicts) else None,
        codes.translate(_PLAIN_LIST) if _PLAIN_LIST_ROLE in roles else None,
        codes.translate(_PLAIN_SET) if _PLAIN_SET_ROLE in roles else None,
        list(compress(range(len(names)), codes.translate(_USER_CONTAINER)))
        if roles != {_NOT_A_CONTAINER}
        else [],
    )


# An attribute's name's role (the low two bits of its code)...
_USER_NAME, _INTERNAL_NAME, _PARAMETERS_NAME, _BUFFERS_NAME = range(4)
# ... and its value type's (the next three): a dict of any class, a plain list or set, or
# another container (a list or set subclass: named, not copied).
_NOT_A_CONTAINER, _DICT_ROLE, _PLAIN_LIST_ROLE, _PLAIN_SET_ROLE, _OTHER_CONTAINER_ROLE = (
    role << 2 for role in range(5)
)


def _name_role(name: str) -> int:
    if name == "_parameters":
        return _PARAMETERS_NAME
    if name == "_buffers":
        return _BUFFERS_NAME
    return _INTERNAL_NAME if name in MODULE_INTERNALS else _USER_NAME


def _type_role(kind: type) -> int:
    if issubclass(kind, dict):
        return _DICT_ROLE
    if kind is list:
        return _PLAIN_LIST_ROLE
    if kind is set:
        return _PLAIN_SET_ROLE
    return _OTHER_CONTAINER_ROLE if issubclass(kind, CONTAINERS) else _NOT_A_CONTAINER


def _mask_table(holds: Callable[[int, int], bool]) -> bytes:
    """A `bytes.translate` table: 1 for the codes whose (name role, type role) `holds`."""
    return bytes(holds(code & 3, code & ~3) for code in range(256))


_DICT = _mask_table(lambda name, kind: kind == _DICT_ROLE)
_OTHER_DICT = _mask_table(
    lambda name, kind: kind == _DICT_ROLE and name not in (_PARAMETERS_NAME, _BUFFERS_NAME)
)
_USER_DICT = _mask_table(lambda name, kind: kind == _DICT_ROLE and name == _USER_NAME)
_PLAIN_LIST = _mask_table(lambda name, kind: kind == _PLAIN_LIST_ROLE)
_PLAIN_SET = _mask_table(lambda name, kind: kind == _PLAIN_SET_ROLE)
_USER_CONTAINER = _mask_table(lambda name, kind: kind != _NOT_A_CONTAINER and name == _USER_NAME)


def other_dicts(
    layout: AttributeLayout,
    attribute_dicts: list[dict[str, Any]],
    values: list[Any],
    parameter_dicts: list[dict[str, Any]],
    buffer_dicts: list[dict[str, Any]],
    *,
    by_name: bool = False,
) -> list[dict[str, Any]]:
    """The dicts among the attributes, but for the modules' parameter and buffer dicts
    (watched already): by place where those sit under torch's names and not under the
    user's, else by identity. `by_name`: the caller read the parameter and buffer dicts
    from the attributes under torch's names (they sit there)."""
    under_torch_names = by_name or (
        _same_objects(map(dict.get, attribute_dicts, repeat("_parameters")), parameter_dicts)
        and _same_objects(map(dict.get, attribute_dicts, repeat("_buffers")), buffer_dicts)
    )
    if under_torch_names and (
        layout.user_dict_places is None
        or _disjoint(compress(values, layout.user_dict_places), parameter_dicts, buffer_dicts)
    ):
        return list(compress(values, layout.other_dict_places))
    watched_already = set(map(id, chain(parameter_dicts, buffer_dicts)))
    return [
        value for value in compress(values, layout.dict_places) if id(value) not in watched_already
    ]


def _disjoint(found: Iterable[Any], *others: list[Any]) -> bool:
    """Whether no object in `found` is one of `others`'."""
    return set(map(id, chain(*others))).isdisjoint(map(id, found))


def _same_objects(found: Iterable[Any], expected: list[Any]) -> bool:
    """Whether `found` holds the very objects of `expected`, in its order."""
    found_list = list(found)
    return len(found_list) == len(expected) and all(map(operator.is_, found_list, expected))
