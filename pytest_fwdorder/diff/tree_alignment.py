"""Old and new call trees -> which call became which, following the nesting. Pure, no torch.

The pairing follows GumTree (Falleri et al., ASE 2014) on the call tree:

1. top-down: subtrees of two calls or more that are identical without their paths (same
   classes, shapes, facts, in the same nesting) pair whole, the largest first; among
   look-alikes, the same path first, then in order, kept to what the siblings show
   (sibling_slots.py), one more on one side leaving out the one whose absence moves the
   others least (look_alike_order.py). The old `layer2`, now `layer2.0` in a new wrapper,
   pairs here.
2. bottom-up: a call with nested calls pairs with the call of the same class whose nested
   calls hold most of its own nested calls' partners (Dice share at least one half): a
   stage changed inside and wrapped still pairs with the old stage; the call around it
   that shares more takes the pair (container_pairs.py).
3. recovery, within paired parents: their children left over pair in order, by path and
   class, then by class and shapes (a rename), then by class alone where a child went or
   came, then by path (a type change), each a longest increasing pairing; then their
   children in turn. A subtree left alone on each side pairs across parents in pass 1 only
   where the two did not both keep a namesake (namesakes.py).
4. across parents, only what nothing above explains: a call left over on both sides with
   the same path and class (a reused module's call made elsewhere), the one call on each
   side with the same class, shapes and facts (`enc.2`, now `dec.0`), or, named, with the
   same last name and facts, or with the same class and facts, moved to a stage that stays
   (across_parents.py); then a block whose layers paired so, with
   the block of its layout that holds them (kept_layouts.py); then the calls left between
   wrapped or unwrapped ones, by place (wrapper_pairs.py).

A caller may pair some calls before the first pass: a second reading of the same diff,
from the calls that kept their paths or places (readings.py). Pairs out of the execution
order are *moved*; the rest are shown in order. Every step is a pass over the calls or a
longest increasing subsequence, so 100,000 calls pair in a second.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from operator import itemgetter

from pytest_fwdorder.diff import call_keys
from pytest_fwdorder.diff.across_parents import contents_elsewhere, pair_across_parents
from pytest_fwdorder.diff.call_tree import NO_PARENT, CallTree
from pytest_fwdorder.diff.child_passes import child_passes
from pytest_fwdorder.diff.container_pairs import pair_containers
from pytest_fwdorder.diff.flattened_pairs import flattened_pairs
from pytest_fwdorder.diff.kept_layouts import pair_kept_layouts
from pytest_fwdorder.diff.look_alike_order import (
    least_displaced,
    one_at_its_depth,
    pair_look_alikes_in_order,
    pairs_by_gaps,
)
from pytest_fwdorder.diff.look_alikes import (
    first_alike,
    held_by_a_renumbered_sibling,
    lone_look_alike,
    replaced_beside,
    swapped,
    with_layers_moved,
    wrapped_partner,
)
from pytest_fwdorder.diff.namesakes import Namesakes
from pytest_fwdorder.diff.ordered_pairing import (
    AlignedPair,
    crossing,
    interleave,
    longest_increasing,
    pairs_around_held,
    pairs_between,
    pairs_by_key,
    without,
)
from pytest_fwdorder.diff.sibling_slots import children_in_place, siblings_in_place
from pytest_fwdorder.diff.sibling_swaps import far_swaps
from pytest_fwdorder.diff.wrapper_pairs import pair_left_in_wrappers
from pytest_fwdorder.golden.format import GoldenLine

_SMALLEST_SUBTREE = 2  # a single call pairs only inside a paired parent or by its path


@dataclass(frozen=True, slots=True)
class TreeAlignment:
    """Which old call became which new call, and the rows a diff shows them in.

    `partners` maps every paired old call to its new call; `moved` the pairs shown out of
    order (old -> new); `rows` the display order, where a moved call shows twice, as
    `(old, None)` where it was and `(None, new)` where it is now.
    """

    old_tree: CallTree
    new_tree: CallTree
    partners: dict[int, int]
    moved: dict[int, int]
    rows: list[AlignedPair]


def align_trees(
    old_tree: CallTree,
    new_tree: CallTree,
    *,
    match_paths: bool = True,
    anchors: Iterable[tuple[int, int]] = (),
) -> TreeAlignment:
    """Pair the calls of two call trees; `match_paths=False` pairs by structure only (a
    name-free comparison, whose lines have no paths). `anchors` are pairs made before any
    pass, each (old index, new index): another reading of the same diff (readings.py)."""
    matcher = _Matcher(old_tree, new_tree, match_paths)
    for old_index, new_index in anchors:
        matcher.pair(old_index, new_index)
    matcher.match_identical_subtrees()
    matcher.keep_siblings_in_place()
    matcher.match_containers()
    matcher.recover()
    matcher.match_across_parents()
    matcher.pair_kept_layouts()
    matcher.pair_lone_in_wrappers()
    matcher.recover()
    matcher.out_of_order -= pair_look_alikes_in_order(
        old_tree, new_tree, matcher.old_to_new, matcher.new_to_old
    )
    matcher.leave_moves_out_of_order()
    matcher.out_of_order |= far_swaps(old_tree, new_tree, matcher.old_to_new)
    partners = matcher.old_to_new
    # Pairs the matcher found out of order stay out, so a tie cannot keep them in order
    # and push out the calls around them instead.
    candidates = [(o, n) for o, n in partners.items() if o not in matcher.out_of_order]
    in_order = longest_increasing(sorted(candidates, key=itemgetter(1)))
    kept = set(in_order)
    moved = {o: n for o, n in partners.items() if (o, n) not in kept}
    rows = interleave(len(old_tree.lines), len(new_tree.lines), in_order)
    return TreeAlignment(old_tree, new_tree, partners, moved, rows)


class _Matcher:
    """The pairing as it grows, pass by pass."""

    def __init__(self, old_tree: CallTree, new_tree: CallTree, match_paths: bool) -> None:
        self.old_tree = old_tree
        self.new_tree = new_tree
        self.match_paths = match_paths
        self.old_to_new: dict[int, int] = {}
        self.new_to_old: dict[int, int] = {}
        self.recovered: set[int] = set()  # old calls whose children were aligned
        self.out_of_order: set[int] = set()  # old calls paired against the order
        self.paired: list[int] = []  # old calls in the order they were paired
        self.trees = (old_tree, new_tree)
        self.maps = (self.old_to_new, self.new_to_old)  # the partners of old calls, of new ones
        self.namesakes = Namesakes(self.trees, match_paths)

    def pair(self, old_index: int, new_index: int) -> None:
        self.old_to_new[old_index] = new_index
        self.new_to_old[new_index] = old_index
        self.paired.append(old_index)

    def pair_subtrees(self, old_index: int, new_index: int) -> None:
        """Pair two identical subtrees call by call (they have the same shape, so the same
        number of calls in the same order)."""
        old_lines, new_lines = self.old_tree.lines, self.new_tree.lines
        old_root, new_root = old_lines[old_index].path, new_lines[new_index].path
        same_root = old_root == new_root
        for offset in range(self.old_tree.size(old_index)):
            old_path = old_lines[old_index + offset].path
            new_path = new_lines[new_index + offset].path
            if (
                self.match_paths
                and offset
                and (
                    old_path != new_path
                    if same_root
                    else not call_keys.same_rewrite(old_root, new_root, old_path, new_path)
                )
            ):
                continue  # two look-alike children that swapped names: paired by name later
            self.pair(old_index + offset, new_index + offset)

    def match_identical_subtrees(self) -> None:
        old_tree, new_tree = self.old_tree, self.new_tree
        new_by_shape: dict[int, list[int]] = defaultdict(list)
        for index in range(len(new_tree.lines)):
            if new_tree.size(index) >= _SMALLEST_SUBTREE:
                new_by_shape[new_tree.shapes[index]].append(index)
        old_by_shape: dict[int, list[int]] = defaultdict(list)
        for index in range(len(old_tree.lines)):
            if old_tree.size(index) >= _SMALLEST_SUBTREE:
                old_by_shape[old_tree.shapes[index]].append(index)
        order = sorted(old_by_shape, key=lambda shape: -old_tree.size(old_by_shape[shape][0]))
        for shape in order:
            if shape not in new_by_shape:
                continue
            olds = [i for i in old_by_shape[shape] if i not in self.old_to_new]
            news = [j for j in new_by_shape[shape] if j not in self.new_to_old]
            for old_index, new_index in self._look_alike_pairs(olds, news):
                self.pair_subtrees(old_index, new_index)

    def keep_siblings_in_place(self) -> None:
        """Look-alike siblings' pairs checked against their siblings (diff/sibling_slots.py)."""
        for pair in siblings_in_place(*self.trees, *self.maps, match_paths=self.match_paths):
            self.pair_subtrees(*pair)

    def _look_alike_pairs(self, olds: list[int], news: list[int]) -> list[tuple[int, int]]:
        """Pairs among identical subtrees: the same path first, then the same parent path
        in order (`features.12`, now `features.11`: a block before it was deleted), then
        the one left on each side; more on one side, those whose places the ones left out
        explain (`pairs_by_gaps`), named or not (a block changed and copied before itself:
        the blocks after it are one place on), and without names the one at its depth.
        Look-alikes left several to a side pair later, inside their parents, or not at all."""
        if not olds or not news:
            return []
        if not self.match_paths:
            if len(olds) == len(news) == 1 and self.namesakes.kept(olds[0], news[0], self.maps):
                return []
            if len(olds) == len(news):
                return list(zip(olds, news, strict=True))
            return (
                self._in_order_with_the_changed(olds, news)
                or pairs_by_gaps([], olds, news, *self.trees)
                or one_at_its_depth(olds, news, *self.trees)
            )
        by_path = self._look_alikes_by(
            olds, news, (call_keys.path_and_number, call_keys.parent_path)
        )
        old_lines, new_lines = self.old_tree.lines, self.new_tree.lines
        kept_paths = all(old_lines[i].path == new_lines[j].path for i, j in by_path)
        if crossing(by_path) and not kept_paths:
            # Same-path pairs that cross the others: a layer inserted or deleted before
            # look-alike blocks renumbered them all (`features.5`, now `features.6`, and
            # `features.6`, now `features.7`), so the old `features.6` is not the new one.
            # As many on each side, paired in order, they read as renumbered with the rest,
            # not as swapped. With more on one side (one of them changed too), which went
            # where cannot be told unless the ones left out explain every other's place
            # (stages flattened among them): else none pairs here, and the later passes
            # pair by name (saying less, never a swap). Only look-alikes that all kept
            # their names were called in another order.
            if len(olds) != len(news):
                return self._in_order_with_the_changed(olds, news) or pairs_by_gaps(
                    by_path, olds, news, self.old_tree, self.new_tree
                )
            in_order = self._look_alikes_by(olds, news, (call_keys.parent_path,))
            return [] if crossing(in_order) else in_order
        if len(olds) != len(news):
            # Stages flattened among look-alikes renumber those between them: the names pair
            # the wrong ones where the places jump without a call left out.
            return pairs_by_gaps(by_path, olds, news, self.old_tree, self.new_tree) or by_path
        return by_path

    def _in_order_with_the_changed(self, olds: list[int], news: list[int]) -> list[tuple[int, int]]:
        """Look-alike blocks renumbered, one of them changed inside (a layer inserted before
        four blocks, one block's activation replaced): with their siblings of the same class
        and shapes they are as many on each side, under one parent each, and pair in order.
        The changed one's call pairs here (its calls pair inside it later); the identical
        pairs are returned. Else none pairs: which went where cannot be told."""
        if not self._one_parent_each(olds, news):
            return []
        old_lines, new_lines = self.old_tree.lines, self.new_tree.lines
        key = call_keys.structure(old_lines[olds[0]])
        old_alikes = [
            i
            for i in self.old_tree.siblings(olds[0])
            if i not in self.old_to_new and call_keys.structure(old_lines[i]) == key
        ]
        new_alikes = [
            j
            for j in self.new_tree.siblings(news[0])
            if j not in self.new_to_old and call_keys.structure(new_lines[j]) == key
        ]
        if len(old_alikes) != len(new_alikes):
            return []
        identical_old, identical_new = set(olds), set(news)
        pairs = []
        for i, j in zip(old_alikes, new_alikes, strict=True):
            if i in identical_old and j in identical_new:
                pairs.append((i, j))
            else:
                self.pair(i, j)
        return pairs

    def _look_alikes_by(
        self, olds: list[int], news: list[int], keys: tuple[Callable[[GoldenLine], Hashable], ...]
    ) -> list[tuple[int, int]]:
        """Look-alikes paired by each key in turn, then the one left on each side."""
        pairs: list[tuple[int, int]] = []
        for key in keys:
            found = pairs_by_key(self.old_tree.lines, self.new_tree.lines, olds, news, key)
            taken_old = {i for i, _ in found}
            taken_new = {j for _, j in found}
            olds = [i for i in olds if i not in taken_old]
            news = [j for j in news if j not in taken_new]
            pairs += found
        if len(olds) == len(news) == 1:
            if not self.namesakes.kept(olds[0], news[0], self.maps):
                pairs.append((olds[0], news[0]))
        elif olds and len(olds) == len(news) and self._one_parent_each(olds, news):
            # As many left on each side, all under one parent on each side: blocks moved
            # together into a new parent (a stage grouped into a `Sequential`), in order.
            pairs += zip(olds, news, strict=True)
        elif olds and news and self._one_pair_of_parents(olds, news):
            pairs += least_displaced(olds, news, self.old_tree, self.new_tree)
        return pairs

    def _one_pair_of_parents(self, olds: list[int], news: list[int]) -> bool:
        """Whether the old calls' one parent is paired with the new calls' one parent."""
        if not self._one_parent_each(olds, news):
            return False
        old_parent, new_parent = self.old_tree.parents[olds[0]], self.new_tree.parents[news[0]]
        return old_parent != NO_PARENT and self.old_to_new.get(old_parent) == new_parent

    def _one_parent_each(self, olds: list[int], news: list[int]) -> bool:
        old_parents = {self.old_tree.parents[i] for i in olds}
        new_parents = {self.new_tree.parents[j] for j in news}
        return len(old_parents) == 1 and len(new_parents) == 1

    def match_containers(self) -> None:
        """Bottom-up: unpaired calls with nested calls (diff/container_pairs.py)."""
        pair_containers(*self.trees, *self.maps, match_paths=self.match_paths)

    def recover(self) -> None:
        """Align the children of every paired parent (and the top-level calls), top-down."""
        queue = [(NO_PARENT, NO_PARENT), *sorted(self.old_to_new.items())]
        while queue:
            old_parent, new_parent = queue.pop()
            if old_parent in self.recovered:
                continue
            self.recovered.add(old_parent)
            paired_before = len(self.paired)
            old_children = (
                self.old_tree.children[old_parent]
                if old_parent != NO_PARENT
                else self.old_tree.roots
            )
            new_children = (
                self.new_tree.children[new_parent]
                if new_parent != NO_PARENT
                else self.new_tree.roots
            )
            olds = [i for i in old_children if i not in self.old_to_new]
            news = [j for j in new_children if j not in self.new_to_old]
            if olds and news:
                in_place, held = children_in_place(
                    (self.old_tree, self.new_tree), (old_children, new_children),
                    self.old_to_new, self.new_to_old, match_paths=self.match_paths,
                )  # fmt: skip
                for pair in in_place:
                    self.pair(*pair)
                if old_parent != NO_PARENT:
                    self._pair_flattened(olds, news)
                olds = [i for i in olds if i not in self.old_to_new]
                news = [j for j in news if j not in self.new_to_old]
                if olds and news:  # else all kept their places (`children_in_place`)
                    in_order, crossed = self._align_children(old_parent, olds, news, held)
                    for old_index, new_index in [*in_order, *crossed]:
                        self.pair(old_index, new_index)
                    self.out_of_order.update(old_index for old_index, _ in crossed)
            # A wrapper's or an unwrapped call's inner call paired here (the model in the
            # old wrapper, now the model): its children align before any pass across parents.
            fresh = self.paired[paired_before:]
            queue += [
                (i, self.old_to_new[i])
                for i in [*old_children, *fresh]
                if i in self.old_to_new and i not in self.recovered
            ]

    def _pair_flattened(self, olds: list[int], news: list[int]) -> None:
        """Stages flattened into their parent, paired in order (diff/flattened_pairs.py)."""
        olds = [i for i in olds if i not in self.old_to_new]
        news = [j for j in news if j not in self.new_to_old]
        for pair in flattened_pairs(self.trees, olds, news, self.old_to_new, call_keys.structure):
            self.pair(*pair)

    def pair_kept_layouts(self) -> None:
        """Calls whose layers were paired across parents, paired by their layout
        (diff/kept_layouts.py); their layers are no longer out of order for that."""
        for old_index in pair_kept_layouts(
            self.old_tree, self.new_tree, self.old_to_new, self.new_to_old
        ):
            self.out_of_order.difference_update(self.old_tree.children[old_index])

    def pair_lone_in_wrappers(self) -> None:
        """Calls left between wrapped or unwrapped ones, paired by place (wrapper_pairs.py)."""
        pair_left_in_wrappers(self.old_tree, self.new_tree, self.old_to_new, self.new_to_old)

    def _align_children(
        self, old_parent: int, olds: list[int], news: list[int], held: list[tuple[int, int]]
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Pairs among the unpaired children of two paired calls, in order: by path and
        class, then by class and shapes between those, then by path (or, name-free, in
        order) between all of those, a new wrapper left out; `held`: children paired already,
        which the others pair around (name-free)."""
        lines = (self.old_tree.lines, self.new_tree.lines)
        pairs: list[tuple[int, int]] = []
        crossed: list[tuple[int, int]] = []
        old_prefix, new_prefix = self._renamed_prefixes(old_parent)
        # Name-free, a namesake is a call of the same class and shapes, in order.
        namesake = call_keys.identity if self.match_paths else call_keys.structure
        namesakes = (call_keys.within(namesake, old_prefix), call_keys.within(namesake, new_prefix))
        olds, news = self._pair_wrapped_namesakes(olds, news, *namesakes)
        passes = child_passes(
            self.trees, self.match_paths, (olds, news), held, (old_prefix, new_prefix)
        )
        for key, unique_only, near, wrapped_first in passes:
            # Children of a renamed parent are named within it (`layer4.0`, now `layer4.m.0`).
            old_key, new_key = call_keys.within(key, old_prefix), call_keys.within(key, new_prefix)
            if wrapped_first:
                # Before look-alikes pair in order or a same-path pairing reads as a type
                # change: a wrapped or unwrapped single call, which then bounds the others'
                # stretches as the calls paired before do.
                prefixes = (old_prefix, new_prefix)
                olds, news, held = self._pair_wrapped_calls(olds, news, pairs, held, prefixes)
            if key is call_keys.path:
                # Look-alikes that swapped places anywhere in the parent.
                out_of_order = swapped(*self.trees, olds, news, pairs, self._contents_elsewhere)
                crossed += out_of_order
                olds, news = without(olds, news, out_of_order)
                news = [j for j in news if not self._wraps_a_sibling(old_parent, j)]
                # A call come beside one replaced: the replaced pairs by its role.
                pairs = replaced_beside(
                    self.old_tree, self.new_tree, olds, news, pairs, named=self.match_paths
                )
            pairs, out_of_order = pairs_around_held(
                held,
                *lines,
                olds,
                news,
                pairs,
                old_key,
                new_key,
                unique_only=unique_only,
                near_key=near,
            )
            if key is call_keys.path:
                pairs = self._same_nesting(pairs, olds)
            if out_of_order:  # two swapped layers: each pairs with its look-alike
                crossed += out_of_order
                olds, news = without(olds, news, out_of_order)
        return with_layers_moved(
            self.old_tree, self.new_tree, olds, news, pairs, crossed, named=self.match_paths
        )

    def _same_nesting(self, pairs: list[tuple[int, int]], olds: list[int]) -> list[tuple[int, int]]:
        """The pairs made in order among `olds` without a call with nested calls paired
        with one without: a stage unwrapped (`0`, whose calls are now its parent's) is no
        type change of the first call after it. Named, only a numbered path is let go: a
        number says where a call is, and stages flattened renumber what follows them. Nor
        two calls of which one's nested calls are all paired outside the other
        (`_contents_elsewhere`)."""
        children = (self.old_tree.children, self.new_tree.children)
        left = set(olds)
        lines = self.old_tree.lines
        return [
            (i, j)
            for i, j in pairs
            if i not in left
            or (
                (
                    bool(children[0][i]) == bool(children[1][j])
                    or (self.match_paths and not call_keys.numbered(lines[i].path))
                )
                and not self._contents_elsewhere(i, j)
            )
        ]

    def _contents_elsewhere(self, old_index: int, new_index: int) -> bool:
        """Whether every call nested in either call has a partner, none of them in the
        other (`across_parents.contents_elsewhere`)."""
        return contents_elsewhere(self.trees, self.maps, old_index, new_index)

    def _renamed_prefixes(self, old_parent: int) -> tuple[str, str]:
        """The paths of a paired parent and its partner with a `.` (the model's: none) where
        they differ, children then named within them (`encoder` now `model.encoder`)."""
        if not self.match_paths or old_parent == NO_PARENT:
            return "", ""
        new_parent = self.old_to_new[old_parent]
        paths = (self.old_tree.lines[old_parent].path, self.new_tree.lines[new_parent].path)
        if paths[0] == paths[1] or not all(paths):
            return "", ""
        old_prefix, new_prefix = ("" if path == "<root>" else f"{path}." for path in paths)
        return old_prefix, new_prefix

    def _wraps_a_sibling(self, old_parent: int, new_index: int) -> bool:
        """Whether a new call holds the partner of a child of `old_parent`: a wrapper around
        that child (`2 (Sequential)` around the old `2`, now `2.0`). In order, or beside a
        sibling replaced, it would pair with another old child as a type change (named, a
        Tanh removed after the calls now wrapped); that child is left for a later pass."""
        for nested in range(new_index + 1, self.new_tree.ends[new_index]):
            partner = self.new_to_old.get(nested)
            if partner is not None and self.old_tree.parents[partner] == old_parent:
                return True
        return False

    def _pair_wrapped_calls(
        self,
        olds: list[int],
        news: list[int],
        pairs: list[tuple[int, int]],
        held: list[tuple[int, int]],
        prefixes: tuple[str, str],
    ) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """Pair a call with the call of its class and input inside the new call that would
        otherwise pair with it as a type change (an adapter around a projection: `q`, now
        `q.base` inside `q (LoRA)`), or the mirror image; returns the children unpaired,
        and `held` (name-free, with each call wrapped alone and as it was, and its wrapper)."""
        old_lines, new_lines = self.old_tree.lines, self.new_tree.lines
        paths = (call_keys.within(call_keys.path, prefix) for prefix in prefixes)
        candidates, _ = pairs_between(
            old_lines, new_lines, olds, news, pairs, *paths, unique_only=False
        )
        taken = set(pairs)
        wrapped: list[tuple[int, int]] = []
        for i, j in candidates:
            if (i, j) in taken or old_lines[i].module_type == new_lines[j].module_type:
                continue
            inner = first_alike(self.new_tree, j, old_lines[i], self.new_to_old)
            if inner is not None and not held_by_a_renumbered_sibling(self.trees, olds, i, j):
                self.pair(i, inner)
                if lone_look_alike(self.new_tree, j, inner, self.old_tree.shapes[i]):
                    wrapped.append((i, j))
                continue
            inner = first_alike(self.old_tree, i, new_lines[j], self.old_to_new)
            if inner is not None:
                self.pair(inner, j)
                if lone_look_alike(self.old_tree, i, inner, self.new_tree.shapes[j]):
                    wrapped.append((i, j))
        return (
            [i for i in olds if i not in self.old_to_new],
            [j for j in news if j not in self.new_to_old],
            held if self.match_paths else [*held, *wrapped],
        )

    def _pair_wrapped_namesakes(
        self,
        olds: list[int],
        news: list[int],
        old_identity: Callable[[GoldenLine], Hashable],
        new_identity: Callable[[GoldenLine], Hashable],
    ) -> tuple[list[int], list[int]]:
        """Pair a call without nested calls with its exact look-alike inside the new call of
        its path and class name (peft's `lora.Linear`, also a `Linear`, around the old `q`,
        now `q.base_layer`: a wrap, not calls inserted and the weight removed), or the
        mirror image (an adapter merged away); returns the children still unpaired."""
        old_lines, new_lines = self.old_tree.lines, self.new_tree.lines
        namesakes = pairs_by_key(old_lines, new_lines, olds, news, old_identity, new_identity)
        if not self.match_paths:
            # Name-free, look-alikes pair in order only as many on each side.
            old_count = Counter(old_identity(old_lines[i]) for i in olds)
            new_count = Counter(new_identity(new_lines[j]) for j in news)
            namesakes = [
                (i, j)
                for i, j in namesakes
                if old_count[old_identity(old_lines[i])] == new_count[new_identity(new_lines[j])]
            ]
        wraps = [
            (
                i,
                j,
                wrapped_partner(
                    self.old_tree, self.new_tree, i, j, self.old_to_new, self.new_to_old
                ),
            )
            for i, j in namesakes
        ]
        if not any(partner for _, _, partner in wraps):
            return olds, news  # no wrap among them: the passes below pair them
        for i, j, partner in wraps:
            if partner is not None:
                self.pair(*partner)
            elif not self.match_paths:
                # The wrapper's siblings pair with theirs in order, changed or not (a layer
                # frozen with it), or they would pair with the wrapper later.
                self.pair(i, j)
        return (
            [i for i in olds if i not in self.old_to_new],
            [j for j in news if j not in self.new_to_old],
        )

    def match_across_parents(self) -> None:
        """Calls left over that only one explanation fits (diff/across_parents.py)."""
        across = pair_across_parents(self.trees, *self.maps, match_paths=self.match_paths)
        self.out_of_order.update(across)

    def leave_moves_out_of_order(self) -> None:
        """Mark each subtree paired into another parent out of order, whole.

        A block moved from the end of `enc` to the start of `dec` is a move, explained as
        one; left among the calls kept in order, its nested calls would outnumber `dec`'s
        own call and push it out as a second, false move. Parents without a partner are
        passed over: a call whose nearest paired ancestors are partners was wrapped or
        unwrapped, not moved (`layer1`'s blocks, now `layer2`'s first, moved all the same).
        """
        old_tree, new_tree = self.old_tree, self.new_tree
        for old_index, new_index in list(self.old_to_new.items()):
            old_parent = old_tree.paired_ancestor(old_index, self.old_to_new)
            new_parent = new_tree.paired_ancestor(new_index, self.new_to_old)
            if self.old_to_new.get(old_parent, NO_PARENT) != new_parent:
                self.out_of_order.update(range(old_index, old_tree.ends[old_index]))
