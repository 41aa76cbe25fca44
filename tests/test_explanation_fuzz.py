"""Random refactors of nested Sequentials, each diff's pairs checked against the modules'
identity: a pair the diff makes (`TraceDiff.pairs`, what every sentence of the summary is
built on) must join an old call to the call its very module (or a deep copy of it) makes in
the new model, or to a call no trace can tell from that one: a container of its class that
holds only it, or that it holds only, or a look-alike sibling next to it (which of two
Linear layers side by side was removed, or which a moved Linear now runs before).

Refactors: a stage flattened into its parent, siblings wrapped, a child removed, duplicated
(a deep copy beside it) or moved to another container, a stage made a subclass, the whole
model wrapped; one or two of them per case. Each refactor is compared named and name-free
(`structure_diff` ignoring paths, its pairs by the paths its summary names calls by). The
seeds whose diff still pairs against the identity are listed below as strict expected
failures: each is a reading still false, and one made true fails the run until it leaves
the list.

A second oracle counts: no diff may state more changes than the refactor's own reading of
it, the diff aligned from the identity's pairs (identity_reading.py). Where two readings
fit, the issue asks for the smaller; the seeds that still give the larger are listed the
same way.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
from identity_reading import stated_beside_identity
from torch import nn

from pytest_fwdorder import Trace, structure_diff, trace_forward

pytestmark = pytest.mark.slow

_ACTIVATIONS = [
    nn.ReLU, nn.Tanh, nn.GELU, nn.Sigmoid, nn.SiLU, nn.ELU, nn.Softsign, nn.Hardtanh, nn.Mish,
    nn.LeakyReLU, nn.Softplus, nn.Tanhshrink, nn.SELU, nn.CELU, nn.Hardswish, nn.Hardsigmoid,
    nn.ReLU6, nn.LogSigmoid,
]  # fmt: skip
_SEEDS = range(1000)
# Seeds whose refactor draws nothing to change (a flatten where no stage is nested).
_NO_REFACTOR = frozenset({
    13, 21, 36, 70, 72, 92, 94, 159, 165, 179, 193, 208, 210, 237, 250, 255, 268, 273, 316,
    335, 357, 366, 402, 405, 412, 414, 415, 416, 417, 431, 432, 436, 447, 457, 463, 464, 520,
    530, 556, 558, 596, 613, 614, 621, 628, 632, 687, 707, 753, 758, 770, 787, 793, 794, 820,
    828, 830, 831, 834, 836, 845, 854, 856, 863, 892, 907, 911, 923, 926, 942, 982, 991,
})  # fmt: skip
# Known false pairings, 13 of the 928 refactors, with their steps. All are readings that
# state no more changes than the refactor made (`stated_changes`), where no trace tells the
# two apart: a stage flattened as the whole model is wrapped, read as the stage beside it
# moved into the other (167, 655, 783); a stage flattened into a container that lost its
# other layers, read as the container unwrapped (314, 499); a layer duplicated beside a
# removal, read as the removed layer's type changed (590, 893: a tie on every count); a ReLU
# removed before a stage copied, read as the ReLU wrapped with the copy's layers (59); which
# of two Linears apart moved (68). (353, a layer moved into a stage renumbered by a
# flatten, read as the Linear that had the stage's path wrapped into it, reads true since a
# call is not read as wrapped in a call an old sibling can be: test_walk_explanations.py.)
_STILL_FALSE = {
    59: "remove, duplicate", 66: "wrap, move", 68: "move, move", 167: "flatten, wrap whole",
    235: "remove, duplicate", 314: "flatten, remove", 327: "flatten, move",
    499: "remove, flatten",
    590: "duplicate, remove", 655: "flatten, wrap whole", 783: "wrap whole, flatten",
    840: "duplicate, remove", 893: "remove, duplicate",
}  # fmt: skip
# Known false pairings of the name-free comparison, 17 of the 928: those above, and four
# that names decide: a stage moved and copied, read as a
# wrap and type changes (324); a stage flattened as a layer moved into its biggest block,
# read as that block unwrapped (350); a stage moved into the model as it is wrapped whole,
# read as four moves (654); a stage copied beside one flattened, read as the copy paired with
# the flattened stage, one change fewer on the first count (660).
_STILL_FALSE_NAME_FREE = {
    **_STILL_FALSE,
    324: "move, duplicate", 350: "flatten, move", 654: "move, wrap whole",
    660: "flatten, duplicate",
}  # fmt: skip
# Seeds whose diff states more changes than the refactor's own reading of it (the diff
# aligned from each module's calls to its very module's: identity_reading.py), 5 of the
# 928 named. Each reads true, call by call, and longer: a layer or a stage moved where a
# look-alike went too, or into a stage copied, read as removed and inserted (143, 324, 570,
# 792; 184 and 301 read true since the one of look-alikes that went from a stage that
# stays is the one that moved); a stage moved into another that gained a layer moved in from elsewhere
# (45: a stage that differs by a call moved is not read as moved). (630, a stage made a
# subclass beside a flatten, read as removed and inserted, reads as its class changed since
# two calls of other classes holding the same calls, none paired yet, pair.)
_STATES_MORE = {
    45: "move, move", 143: "duplicate, move", 324: "move, duplicate", 570: "move, remove",
    792: "move, move",
}  # fmt: skip
# The same of the name-free comparison, 8: those above, and three that names decide.
_STATES_MORE_NAME_FREE = {
    **_STATES_MORE,
    350: "flatten, move", 654: "move, wrap whole", 660: "flatten, duplicate",
}  # fmt: skip


class Stage(nn.Sequential):
    """A stage's own class, holding the same children."""


def _leaf(rng: random.Random) -> nn.Module:
    return nn.Linear(8, 8) if rng.random() < 0.4 else rng.choice(_ACTIVATIONS)()


def _tree(rng: random.Random, depth: int) -> nn.Sequential:
    children = [
        _tree(rng, depth - 1) if depth > 0 and rng.random() < 0.5 else _leaf(rng)
        for _ in range(rng.randint(2, 4))
    ]
    return nn.Sequential(*children)


def _nested_stages(model: nn.Sequential) -> list[tuple[nn.Sequential, int]]:
    found = []
    for index, child in enumerate(model):
        if isinstance(child, nn.Sequential):
            found.append((model, index))
            found += _nested_stages(child)
    return found


def _set_children(parent: nn.Sequential, children: list[nn.Module]) -> None:
    for name in list(parent._modules):
        del parent._modules[name]
    for index, child in enumerate(children):
        parent.add_module(str(index), child)


class _Refactor:
    """One random refactor of a deep copy, remembering which new module is which old one."""

    def __init__(self, rng: random.Random, old: nn.Sequential) -> None:
        self.copies: dict[int, nn.Module] = {}  # id(new module) -> the old module it copies
        memo: dict[int, object] = {}
        self.new: nn.Sequential = copy.deepcopy(old, memo)
        for module in old.modules():
            self.copies[id(memo[id(module)])] = module
        # Every module the refactor makes stays alive: `copies` is keyed by id, and a module
        # made later could take the id of one a step dropped and pass for its copy.
        self.alive: list[object] = [memo]
        self.steps: list[str | None] = []
        for _ in range(rng.randint(1, 2)):
            self.steps.append(self._step(rng))
            self.alive.extend(self.new.modules())

    def _step(self, rng: random.Random) -> str | None:
        step = rng.choice(
            ["flatten", "wrap", "remove", "flatten", "wrap whole", "duplicate", "move",
             "subclass", "flatten"]
        )  # fmt: skip
        containers = [self.new, *(m for m in self.new.modules() if isinstance(m, nn.Sequential))]
        containers = list(dict.fromkeys(containers))
        if step in ("flatten", "subclass"):
            stages = _nested_stages(self.new)
            if not stages:
                return None
            parent, index = rng.choice(stages)
            children = list(parent)
            stage = children[index]
            children[index : index + 1] = [Stage(*stage)] if step == "subclass" else list(stage)
            _set_children(parent, children)
        elif step == "wrap whole":
            self.new = nn.Sequential(self.new)
        else:
            return self._step_in(rng, step, containers)
        return step

    def _step_in(
        self, rng: random.Random, step: str, containers: list[nn.Sequential]
    ) -> str | None:
        parent = rng.choice(containers)
        children = list(parent)
        if step == "duplicate":
            index = rng.randrange(len(children))
            twin = copy.deepcopy(children[index])
            for original, copied in zip(children[index].modules(), twin.modules(), strict=True):
                self.copies[id(copied)] = self.copies.get(id(original), original)
            children.insert(index, twin)
            _set_children(parent, children)
            return step
        if len(children) < 2:
            return None
        if step == "wrap":
            start = rng.randrange(len(children) - 1)
            stop = rng.randint(start + 1, len(children))
            children[start:stop] = [nn.Sequential(*children[start:stop])]
        elif step == "remove":
            del children[rng.randrange(len(children))]
        else:  # move
            child = children.pop(rng.randrange(len(children)))
            targets = [
                c for c in containers
                if c is not parent and child not in list(c.modules())
                and c not in list(child.modules())
            ]  # fmt: skip
            if not targets:
                return None
            target = rng.choice(targets)
            moved_into = list(target)
            moved_into.insert(rng.randint(0, len(moved_into)), child)
            _set_children(target, moved_into)
        _set_children(parent, children)
        return step

    def true_paths(self, old: nn.Module) -> tuple[dict[str, set[str]], dict[str, str | None]]:
        """The oracle: each old path -> the new paths of its module or of copies of it, and
        each new path -> the old path of the module it is (None for a new module)."""
        old_paths = {id(module): _named(path) for path, module in old.named_modules()}
        now: dict[str, set[str]] = {path: set() for path in old_paths.values()}
        was: dict[str, str | None] = {}
        for path, module in self.new.named_modules():
            original = self.copies.get(id(module))
            old_path = old_paths.get(id(original)) if original is not None else None
            was[_named(path)] = old_path
            if old_path is not None:
                now[old_path].add(_named(path))
        return now, was


def _named(path: str) -> str:
    return path or "<root>"


def _false_pairs(seed: int, *, named: bool = True) -> tuple[list[str], list[str | None]]:
    old, refactor = _refactored(seed)
    return _pairs_against_identity(old, refactor, named=named), refactor.steps


def _refactored(seed: int) -> tuple[nn.Sequential, _Refactor]:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    old = _tree(rng, rng.choice([2, 3]))
    return old, _Refactor(rng, old)


def _pairs_against_identity(
    old: nn.Module, refactor: _Refactor, *, named: bool = True
) -> list[str]:
    """The diff's pairs that join an old call to a call another module makes, named or
    name-free (`paired_paths`)."""
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before, after = trace_forward(old, inputs), trace_forward(refactor.new, inputs)
    return _false_among(paired_paths(before, after, named=named), old, refactor)


def paired_paths(before: Trace, after: Trace, *, named: bool) -> list[tuple[str, str]]:
    """(old path, new path) of each pair the diff of two traces makes; with `named=False`,
    the name-free comparison's (`structure_diff` ignoring paths), by the paths its summary
    names calls by."""
    if named:
        difference = before.diff(after)
        old_lines, new_lines = difference.old_lines, difference.new_lines
    else:
        difference = structure_diff(before, after, ignore=("paths",))
        old_lines, new_lines = difference.old_names, difference.new_names
    return [(old_lines[i].path, new_lines[j].path) for i, j in difference.pairs]


def _false_among(pairs: list[tuple[str, str]], old: nn.Module, refactor: _Refactor) -> list[str]:
    """Of pairs of (old path, new path), those that join an old module's call to a call that
    a module a trace can tell from it makes."""
    now, was = refactor.true_paths(old)
    alike = _nested_alike(refactor.new, was)
    old_places, new_places = _places(old), _places(refactor.new)
    # Where the old module and its look-alike siblings beside it are now, as a trace sees it.
    now_placed: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    for path, paths in now.items():
        now_placed.setdefault(old_places[path], set()).update(new_places[p] for p in paths)
    false = []
    for old_path, new_path in pairs:
        truly = was.get(new_path)
        if {new_path, *alike.get(new_path, ())} & now[old_path]:
            continue
        if new_places[new_path] in now_placed[old_places[old_path]]:
            continue  # look-alike siblings beside each other, before or after
        if now[old_path] or truly not in (None, old_path):
            false.append(f"{old_path} paired with {new_path}, truly now {sorted(now[old_path])}")
    return false


def _places(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Each path -> where its module runs as a trace sees it. Look-alike siblings next to
    each other (same class, settings and children, so the same calls with the same shapes,
    one after the other) share a place: no trace tells which of them runs first. Apart,
    they do not: `Tanh, ReLU, Tanh` swapped by object is a swap, though no trace shows it."""
    places: dict[str, tuple[int, ...]] = {"<root>": ()}
    for path, module in model.named_modules():
        run_start, previous = 0, None
        for position, (name, child) in enumerate(module.named_children()):
            look = repr(child)
            if look != previous:
                run_start, previous = position, look
            places[_named(f"{path}.{name}" if path else name)] = (
                *places[_named(path)],
                run_start,
            )
    return places


def _nested_alike(new: nn.Module, was: dict[str, str | None]) -> dict[str, set[str]]:
    """New containers a trace cannot tell from the one they hold or are held by: a new
    container of the same class whose only child is an old one (`S(old)` or `old(S(...))`,
    the old container's children all wrapped). Paired with either, a call is paired true."""
    alike: dict[str, set[str]] = {}
    for path, module in new.named_modules():
        children = list(module.named_children())
        if len(children) != 1 or type(children[0][1]) is not type(module):
            continue
        outer, inner = _named(path), _named(f"{path}.{children[0][0]}" if path else children[0][0])
        if was.get(outer) is None or was.get(inner) is None:
            alike.setdefault(outer, set()).add(inner)
            alike.setdefault(inner, set()).add(outer)
    return alike


def _cases(
    known: tuple[dict[int, str], dict[int, str]] = (_STILL_FALSE, _STILL_FALSE_NAME_FREE),
    what: str = "a known false pairing",
) -> list[object]:
    """(named, seed) for every refactor, named and name-free, the `known` ones (named, then
    name-free) marked as expected failures."""
    cases: list[object] = []
    for named, still_false in zip((True, False), known, strict=True):
        for seed in _SEEDS:
            if seed in _NO_REFACTOR:
                continue
            reason = f"{what}: {still_false.get(seed)}"
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if seed in still_false else []
            view = "named" if named else "name-free"
            cases.append(pytest.param(named, seed, marks=marks, id=f"{view}-{seed}"))
    return cases


@pytest.mark.parametrize(("named", "seed"), _cases())
def test_every_pair_joins_a_module_to_itself(named: bool, seed: int) -> None:
    false, steps = _false_pairs(seed, named=named)

    assert any(steps), f"seed {seed} made no refactor: list it in _NO_REFACTOR"
    assert false == [], f"seed {seed}, {steps}: {false}"


@pytest.mark.parametrize(
    ("named", "seed"),
    _cases((_STATES_MORE, _STATES_MORE_NAME_FREE), "states more than the refactor"),
)
def test_no_diff_states_more_changes_than_the_refactor(named: bool, seed: int) -> None:
    old, refactor = _refactored(seed)
    inputs = torch.randn(2, 8)
    with torch.no_grad():
        before, after = trace_forward(old, inputs), trace_forward(refactor.new, inputs)

    stated, by_identity = stated_beside_identity(
        before, after, refactor.true_paths(old)[1], named=named
    )

    assert stated <= by_identity, f"seed {seed}, {refactor.steps}: {stated} > {by_identity}"


class _Unchanged(_Refactor):
    """The model itself, each module now itself."""

    def __init__(self, old: nn.Sequential, new: nn.Sequential) -> None:
        self.copies = {id(module): module for module in old.modules()}
        self.new = new
        self.steps = ["none"]


def test_the_identity_oracle_finds_a_pair_joined_to_another_module() -> None:
    # Without this, an oracle that never reports a pair would pass every seed above.
    old = nn.Sequential(nn.Tanh(), nn.ReLU(), nn.Linear(8, 8))
    unchanged = _Unchanged(old, old)

    assert _pairs_against_identity(old, unchanged) == []
    assert _false_among([("0", "1"), ("1", "0"), ("2", "2")], old, unchanged) == [
        "0 paired with 1, truly now ['0']",
        "1 paired with 0, truly now ['1']",
    ]


def test_the_oracle_excuses_only_look_alikes_next_to_each_other() -> None:
    # Two Tanh layers side by side run alike in either order; with a ReLU between them, a
    # diff that pairs each with the other says they did not move where they swapped.
    side_by_side = nn.Sequential(nn.Tanh(), nn.Tanh(), nn.ReLU())
    apart = nn.Sequential(nn.Tanh(), nn.ReLU(), nn.Tanh())
    swapped_side_by_side = _Unchanged(
        side_by_side, nn.Sequential(side_by_side[1], side_by_side[0], side_by_side[2])
    )
    swapped_apart = _Unchanged(apart, nn.Sequential(apart[2], apart[1], apart[0]))

    assert _false_among([("0", "0"), ("1", "1")], side_by_side, swapped_side_by_side) == []
    assert _false_among([("0", "0"), ("2", "2")], apart, swapped_apart) == [
        "0 paired with 0, truly now ['2']",
        "2 paired with 2, truly now ['0']",
    ]


def test_the_count_oracle_finds_a_diff_that_states_more_than_the_refactor() -> None:
    # Without this, an oracle that always counts as the diff does would pass every seed.
    # Of a stage's two Linears, the second moved to the end of the next stage and the first
    # removed (as seed 570): the refactor's reading is one move and one removal; the diff,
    # which cannot tell which of two look-alikes moved, reads a Linear inserted and both
    # removed, one change more. Once it reads `one of` them moved, take another listed
    # seed's refactor here.
    old = nn.Sequential(
        nn.Sequential(nn.Linear(8, 8), nn.Hardtanh(), nn.Linear(8, 8)),
        nn.Sequential(nn.Hardswish(), nn.Linear(8, 8)),
    )
    new = nn.Sequential(nn.Sequential(old[0][1]), nn.Sequential(*old[1], old[0][2]))
    inputs = torch.randn(2, 8)
    before, after = trace_forward(old, inputs), trace_forward(new, inputs)
    was: dict[str, str | None] = {
        "<root>": "<root>", "0": "0", "0.0": "0.1", "1": "1", "1.0": "1.0", "1.1": "1.1",
        "1.2": "0.2",
    }  # fmt: skip

    for named in (True, False):
        assert stated_beside_identity(before, after, was, named=named) == ((3, 3), (2, 2))
