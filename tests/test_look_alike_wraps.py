"""A wrap or an unwrap among look-alikes, with one of them inserted or removed beside it:
which look-alike was wrapped cannot be told from the goldens, so the summary names all it may
have been, as it does for the one removed. The oracle: the model built from each other
reading (another look-alike wrapped, another removed) traces to the same golden, and one
built from a reading left out does not."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ElementTree
from collections import OrderedDict

import pytest
import torch
from torch import nn

from pytest_fwdorder import Trace, TraceDiff, diff_picture, structure_diff, trace_forward


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(8, 8), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


_INPUTS = torch.randn(2, 8)


def _stages(
    count: int, stage: type[nn.Module] | None = None
) -> tuple[nn.Sequential, list[nn.Module]]:
    """`count` look-alike stages (two blocks each, or `stage`), seeded, and deep copies."""
    torch.manual_seed(0)
    model = nn.Sequential(
        *(stage() if stage else nn.Sequential(Block(), Block()) for _ in range(count))
    )
    return model, list(copy.deepcopy(model))


def _flattened(flattened: int, removed: int) -> nn.Sequential:
    """Six look-alike stages of two blocks, one flattened where it ran and one removed."""
    _, stages = _stages(6)
    children: list[nn.Module] = []
    for at, stage in enumerate(stages):
        if at != removed:
            children += list(stage) if at == flattened else [stage]
    return nn.Sequential(*children)


def _wrapped(wrapped: int, removed: int | None = None, after: int | None = None) -> nn.Sequential:
    """Six look-alike blocks, one wrapped in a Sequential, one removed or a copy of one
    inserted after `after`."""
    _, blocks = _stages(6, Block)
    children: list[nn.Module] = []
    for at, block in enumerate(blocks):
        if at != removed:
            children.append(nn.Sequential(block) if at == wrapped else block)
        if at == after:
            children.append(copy.deepcopy(block))
    return nn.Sequential(*children)


def _readings(before: Trace, after: Trace) -> tuple[TraceDiff, TraceDiff]:
    return before.diff(after), structure_diff(before, after, ignore=("paths",))


def _both_read(before: Trace, after: Trace, counts: dict[str, int], *sentences: str) -> None:
    """The named and the name-free reading state `counts` and each of `sentences`."""
    for difference in _readings(before, after):
        summary = difference.summary()
        assert difference.explained_counts() == counts, summary
        for sentence in sentences:
            assert sentence in summary, summary


def _same_golden(model: nn.Module, after: Trace) -> bool:
    return not trace_forward(model, _INPUTS).diff(after)


@pytest.mark.parametrize(
    ("flattened", "removed", "candidates", "now"),
    [
        (2, 4, (2, 3), "2, 3"),
        (4, 1, (3, 4), "3, 4"),
        (0, 5, (0, 1), "0, 1"),
        (5, 0, (4, 5), "4, 5"),
    ],
)
def test_a_stage_flattened_beside_one_removed_names_every_stage_it_may_be(
    flattened: int, removed: int, candidates: tuple[int, int], now: str
) -> None:
    """Before, the named reading said stage 3 was flattened for stage 2 (and for stage 0,
    that stage 0 was removed `at the start`), and the name-free one said stage 5, whose
    blocks cannot run before the stages left after it; for stage 5, the name-free one said
    two stages each lost a block and kept the other, `2 unwraps, 6 calls removed`."""
    before = trace_forward(_stages(6)[0], _INPUTS)
    after = trace_forward(_flattened(flattened, removed), _INPUTS)

    listed = ", ".join(map(str, candidates))
    unwrap = f"\none of {listed} (Sequential look-alikes) unwrapped: its 2 children are now {now}"
    removal = "7 calls removed: one of 0, 1, 2, 3, 4, 5 (Sequential look-alikes, with 6 nested"
    _both_read(before, after, {"unwrapped": 1, "removed": 7}, unwrap, removal)
    assert flattened in candidates
    # Either stage named may be the one flattened, the other removed; a third may not.
    first, second = candidates
    assert _same_golden(_flattened(first, second), after)
    assert _same_golden(_flattened(second, first), after)
    assert not _same_golden(_flattened((first + 3) % 6, (first + 4) % 6), after)


@pytest.mark.parametrize(("wrapped", "removed", "candidates"), [(4, 1, (3, 4)), (0, 5, (0, 1))])
def test_a_block_wrapped_beside_one_removed_names_every_block_it_may_be(
    wrapped: int, removed: int, candidates: tuple[int, int]
) -> None:
    """Before, a block wrapped as block 1 was removed read as block 3 wrapped and one of
    blocks 4 and 5 removed: the block removed was left out of those named."""
    before = trace_forward(_stages(6, Block)[0], _INPUTS)
    after = trace_forward(_wrapped(wrapped, removed=removed), _INPUTS)

    place = candidates[0]
    listed = ", ".join(map(str, candidates))
    wrap = (
        f"\n{place} (Sequential) wraps one of the old {listed} (Block look-alikes), now {place}.0"
    )
    removal = "3 calls removed: one of 0, 1, 2, 3, 4, 5 (Block look-alikes, with 2 nested calls)"
    _both_read(before, after, {"wrapped": 1, "removed": 3}, wrap, removal)
    assert wrapped in candidates
    first, second = candidates
    assert _same_golden(_wrapped(first, removed=second), after)
    assert _same_golden(_wrapped(second, removed=first), after)
    assert not _same_golden(_wrapped(5, removed=4), after)


def test_a_block_wrapped_beside_one_inserted_names_every_block_it_may_be() -> None:
    """Block 2 wrapped and a copy inserted after block 4: before, the copy was one of the
    blocks after the wrapper, though it may be one before it, block 1 wrapped."""
    before = trace_forward(_stages(6, Block)[0], _INPUTS)
    after = trace_forward(_wrapped(2, after=4), _INPUTS)

    wrap = "\n2 (Sequential) wraps one of the old 1, 2 (Block look-alikes), now 2.0"
    insertion = "3 calls inserted: one of 0, 1, 3, 4, 5, 6 (Block look-alikes, with 2 nested"
    _both_read(before, after, {"wrapped": 1, "inserted": 3}, wrap, insertion)
    assert _same_golden(_wrapped(1, after=0), after)
    assert _same_golden(_wrapped(2, after=5), after)
    assert not _same_golden(_wrapped(3, after=0), after)


@pytest.mark.parametrize("wrapped", [0, 2, 5])
def test_a_block_wrapped_among_look_alikes_with_none_gone_is_named(wrapped: int) -> None:
    """With no look-alike inserted or removed, the place of the wrapper says which block it
    wraps: the summary names that one alone."""
    before = trace_forward(_stages(6, Block)[0], _INPUTS)
    after = trace_forward(_wrapped(wrapped), _INPUTS)

    wrap = f"\n{wrapped} (Sequential) wraps the old {wrapped}, now {wrapped}.0"
    _both_read(before, after, {"wrapped": 1}, wrap)
    for difference in _readings(before, after):
        assert "one of" not in difference.summary(), difference.summary()


def test_named_look_alikes_are_told_apart_by_their_names() -> None:
    """Look-alike blocks with names of their own (`a`, `b`, ...) are themselves: the named
    reading names the block wrapped and the one removed; only the name-free one hedges."""
    torch.manual_seed(0)
    names = "abcdef"
    model = nn.Sequential(OrderedDict((name, Block()) for name in names))
    children = copy.deepcopy(dict(model.named_children()))
    children["e"] = nn.Sequential(children["e"])
    del children["b"]
    before = trace_forward(model, _INPUTS)
    after = trace_forward(nn.Sequential(OrderedDict(children)), _INPUTS)

    named, free = _readings(before, after)

    assert named.explained_counts() == {"wrapped": 1, "removed": 3}, named.summary()
    assert "\ne (Sequential) wraps the old e, now e.0" in named.summary(), named.summary()
    assert "3 calls removed: b (Block, with 2 nested calls)" in named.summary(), named.summary()
    assert "wraps one of the old d, e (Block look-alikes)" in free.summary(), free.summary()


def _box_headers(svg: str) -> list[tuple[str, str]]:
    """Each box's classes and its header's text, in drawing order."""
    namespace = "{http://www.w3.org/2000/svg}"
    found = []
    for group in ElementTree.fromstring(svg).iter(f"{namespace}g"):
        classes = group.get("class", "")
        if "fo-box" in classes.split():
            header = next(
                t for t in group.findall(f"{namespace}text") if t.get("class") == "fo-header"
            )
            found.append((classes, "".join(header.itertext())))
    return found


def test_the_picture_names_the_stage_flattened_as_its_summary_does() -> None:
    """The picture draws one reading, the third stage flattened and the fourth removed (or
    so): each box of a stage it cannot tell is named as the summary names it, not by the
    path of the one it drew."""
    before = trace_forward(_stages(6)[0], _INPUTS)
    after = trace_forward(_flattened(2, 4), _INPUTS)

    for difference in _readings(before, after):
        headers = [header for _, header in _box_headers(diff_picture(difference).svg)]
        assert "one of 2, 3: Sequential" in headers, headers
        assert "one of 0, 1, 2, 3, 4, 5: Sequential" in headers, headers
        assert not {"2: Sequential", "3: Sequential"} & set(headers), headers


def _blocks_wrapped(wrapped: tuple[int, ...], removed: int) -> nn.Sequential:
    """Six look-alike blocks, those at `wrapped` each in a Sequential, one removed."""
    _, blocks = _stages(6, Block)
    return nn.Sequential(
        *(
            nn.Sequential(block) if at in wrapped else block
            for at, block in enumerate(blocks)
            if at != removed
        )
    )


@pytest.mark.parametrize(
    ("wrapped", "removed", "first", "second", "alternatives"),
    [
        ((1, 3), 5, "1, 2", "3, 4", [((2, 4), 0), ((1, 4), 3)]),
        ((1, 3), 0, "0, 1", "2, 3", [((0, 2), 5), ((0, 3), 1)]),
    ],
)
def test_two_blocks_wrapped_beside_one_removed_move_no_block_and_name_each_it_may_be(
    wrapped: tuple[int, int],
    removed: int,
    first: str,
    second: str,
    alternatives: list[tuple[tuple[int, int], int]],
) -> None:
    """Two of six look-alike blocks wrapped, another removed. Before, the name-free reading
    paired the blocks left in their parent around the wrapped ones out of order and said a
    block moved (`3 calls moved: 4 (Block, with 2 nested calls) now after 1`): nothing
    moved. And each wrap named one block where either of two may be it."""
    before = trace_forward(_stages(6, Block)[0], _INPUTS)
    after = trace_forward(_blocks_wrapped(wrapped, removed), _INPUTS)

    sentences = [
        f"\n{listed[0]} (Sequential) wraps one of the old {listed} (Block look-alikes), "
        f"now {listed[0]}.0"
        for listed in (first, second)
    ]
    removal = "3 calls removed: one of 0, 1, 2, 3, 4, 5 (Block look-alikes, with 2 nested calls)"
    _both_read(before, after, {"wrapped": 2, "removed": 3}, *sentences, removal)
    for difference in _readings(before, after):
        assert difference.count("moved") == 0, difference.summary()
    # Other blocks wrapped, another removed: the same golden; the wrappers elsewhere, not.
    for other_wrapped, other_removed in alternatives:
        assert _same_golden(_blocks_wrapped(other_wrapped, other_removed), after)
    assert not _same_golden(_blocks_wrapped((1, 3), 2), after)


def test_a_long_run_of_look_alikes_is_named_by_its_ends() -> None:
    """One of 400 look-alike layers removed: the summary and the picture's box named all
    400 (a 1,955-character line); past eight, the run is named by its count and ends."""
    torch.manual_seed(0)
    layers = [nn.Linear(4, 4) for _ in range(400)]
    inputs = torch.randn(1, 4)
    before = trace_forward(nn.Sequential(*layers), inputs)
    after = trace_forward(nn.Sequential(*layers[:123], *layers[124:]), inputs)

    for difference in _readings(before, after):
        summary = difference.summary()
        removal = summary.splitlines()[1]
        assert removal.startswith(
            "1 call removed: one of the 400 from 0 to 399 (Linear look-alikes"
        )
        assert len(removal) < 100, removal
        headers = [header for _, header in _box_headers(diff_picture(difference).svg)]
        assert "one of the 400 from 0 to 399: Linear" in headers, headers[:5]
