"""What two calls are paired by: the keys of a call line the tree alignment compares (its
path, class, shapes, facts), and keys read within a renamed parent. Pure, no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable

from pytest_fwdorder.golden.format import NOT_SAVED_FLAG, GoldenLine
from pytest_fwdorder.golden.line_facts import facts_of


def within(key: Callable[[GoldenLine], Hashable], prefix: str) -> Callable[[GoldenLine], Hashable]:
    """`key`, with a path that starts with `prefix` read without it (`layer4.m.0` as `0`
    under `layer4.m.`); keys that read no path, and every key without a prefix, as they are."""
    if not prefix or key not in (identity, path):
        return key
    cut = len(prefix)

    def relative(line: GoldenLine) -> str:
        written = line.path
        return written[cut:] if written.startswith(prefix) else f"\0{written}"

    if key is path:
        return relative
    return lambda line: _identity(relative(line), line)


def path_and_number(line: GoldenLine) -> Hashable:
    return (line.path, line.nth)


def parent_path(line: GoldenLine) -> Hashable:
    return line.path.rpartition(".")[0] if line.path != "<root>" else None


def same_rewrite(old_root: str, new_root: str, old_path: str, new_path: str) -> bool:
    """Whether a nested call's paths follow its subtree root's rename (`a.x -> b.x` under
    `a -> b`, `x -> 0.x` under a model now wrapped as `0`)."""
    old_prefix = "" if old_root == "<root>" else f"{old_root}."
    new_prefix = "" if new_root == "<root>" else f"{new_root}."
    return (
        old_path.startswith(old_prefix)
        and new_path.startswith(new_prefix)
        and old_path[len(old_prefix) :] == new_path[len(new_prefix) :]
    )


def identity_and_number(line: GoldenLine) -> tuple[str, str, int]:
    """Which call of which module a line is, by name and class: `enc.0`, Linear, 1."""
    return (line.path, line.module_type, line.nth)


def path_and_class(line: GoldenLine) -> tuple[str, str]:
    return (line.path, line.module_type)


def identity(line: GoldenLine) -> Hashable:
    # The class is part of a call's identity: wrapping a model moves `0` from a Linear to
    # the wrapper, and the two must not pair. The call number follows from the order.
    return _identity(line.path, line)


# A path's last name a number: `blocks.3`, `3`, or `blocks[3]` (a module in a plain list).
_NUMBERED = re.compile(r"(?:^|\.)[0-9]+$|\[[0-9]+\]$")


def numbered(path: str) -> bool:
    """Whether a path ends in a number, which says where a call is, not which: `blocks.3`,
    or `blocks[3]` for a module held in a plain list (unregistered)."""
    return _NUMBERED.search(path) is not None


def last_name(path: str) -> str:
    """A path's last name (`relu` of `0.relu`): which module it is among its siblings."""
    return path.rpartition(".")[2]


def kept_path(old_line: GoldenLine, new_line: GoldenLine) -> bool:
    """Whether a call kept its path: a name, the same on both sides (the lines of a
    name-free comparison have none)."""
    return bool(old_line.path) and old_line.path == new_line.path


def _identity(path: str, line: GoldenLine) -> Hashable:
    if numbered(path):
        # A numbered name says where a call is, not which: the old `3`, a Linear, is the
        # new `2` when a layer before it moved away, and the new `3`, another Linear, is
        # not it. It is the same call only looking the same; else its look pairs it.
        return (path, line.module_type, line.inputs, line.outputs)
    return (path, line.module_type)


def path(line: GoldenLine) -> Hashable:
    return line.path


def structure(line: GoldenLine) -> Hashable:
    # No depth: wrapping shifts every depth by one, and the calls must still pair.
    return (line.module_type, line.inputs, line.outputs)


def module_type(line: GoldenLine) -> Hashable:
    return line.module_type


def kind(line: GoldenLine) -> Hashable:
    """A call's class and facts, not its shapes: the same layer given other inputs."""
    return (line.module_type, line.facts)


def role(line: GoldenLine) -> Hashable:
    """A call's shapes and the kinds of facts it has (settings, parameters, buffers), not
    its class: a ReLU and the GELU that took its place, both without parameters, share it;
    a LayerNorm inserted beside them, with parameters, does not."""
    return (line.inputs, line.outputs, tuple(facts_of(line).by_title))


def look(line: GoldenLine) -> Hashable:
    return (line.module_type, line.inputs, line.outputs, line.facts)


def look_thawed(line: GoldenLine) -> Hashable:
    """`look` with its tensors' frozen flags left out: the layer an adapter wraps is
    frozen by it (peft), and that is its own change, not another layer."""
    return (line.module_type, line.inputs, line.outputs, facts_thawed(line))


def facts_thawed(line: GoldenLine) -> Hashable:
    """A call's facts (settings, parameter shapes, ...) with its tensors' frozen flags and
    ties left out (`look_thawed`): a tie names the other paths of a tensor, which a wrap
    renames (`tied to fc.1.weight` once `fc` runs twice as `fc.0` and `fc.1`)."""
    facts = facts_of(line)
    return tuple(
        (
            title,
            tuple(
                (name, tensor.shape, NOT_SAVED_FLAG in tensor.flags)
                for name, tensor in facts.tensors[title].items()
            ),
        )
        if title in facts.tensors
        else (title, text)
        for title, text in facts.by_title.items()
    )
