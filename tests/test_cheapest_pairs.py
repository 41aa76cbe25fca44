"""The cheapest edit of one list of calls into another (diff/ordered_pairing.py), which a
name-free comparison pairs look-alike children by."""

from __future__ import annotations

import itertools

import pytest

from pytest_fwdorder.diff.ordered_pairing import cheapest_pairs, common_subsequence


def edit_cost(
    pairs: list[tuple[int, int]], old: list[str], new: list[str], near: dict[str, str]
) -> int:
    """What a pairing costs: 0 a pair of equal keys, 1 one of near keys, 2 each item left."""
    cost = 2 * (len(old) + len(new) - 2 * len(pairs))
    for i, j in pairs:
        assert old[i] == new[j] or near[old[i]] == near[new[j]], (old[i], new[j])
        cost += 0 if old[i] == new[j] else 1
    return cost


def every_pairing_cost(old: list[str], new: list[str], near: dict[str, str]) -> int:
    """The oracle: the least cost over every pairing in order, by brute force."""
    best = 2 * (len(old) + len(new))
    for size in range(min(len(old), len(new)) + 1):
        for olds in itertools.combinations(range(len(old)), size):
            for news in itertools.combinations(range(len(new)), size):
                pairs = list(zip(olds, news, strict=True))
                if all(old[i] == new[j] or near[old[i]] == near[new[j]] for i, j in pairs):
                    best = min(best, edit_cost(pairs, old, new, near))
    return best


# A block's calls by class and width: `conv64`, `bn48`, ... (the near key is the class).
NEAR = {
    name: name.rstrip("0123456789")
    for name in ("conv64", "conv48", "bn64", "bn48", "relu64", "relu48", "lin16", "lin48")
}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (  # a block's middle narrowed: everything in place
            ["conv64", "bn64", "relu64", "conv64", "bn64", "relu64"],
            ["conv48", "bn48", "relu48", "conv64", "bn64", "relu64"],
        ),
        (["lin16", "relu64", "lin48"], ["lin16", "relu64", "lin16", "lin48"]),  # one inserted
        (["lin48", "lin16"], ["lin16", "lin16", "lin16", "lin16"]),  # qkv split
        ([], ["bn64"]),
        (["bn64", "relu64"], []),
    ],
)
def test_the_pairing_costs_the_least_any_pairing_in_order_does(
    old: list[str], new: list[str]
) -> None:
    pairs = cheapest_pairs(old, new, [NEAR[key] for key in old], [NEAR[key] for key in new])

    assert pairs == sorted(pairs)
    assert edit_cost(pairs, old, new, NEAR) == every_pairing_cost(old, new, NEAR)


def test_a_narrowed_middle_pairs_in_place_where_a_common_subsequence_does_not() -> None:
    old = ["conv64", "bn64", "relu64", "conv64", "bn64", "relu64"]
    new = ["conv48", "bn48", "relu48", "conv64", "bn64", "relu64"]

    pairs = cheapest_pairs(old, new, [NEAR[key] for key in old], [NEAR[key] for key in new])

    assert pairs == [(index, index) for index in range(6)]
    # The oracle can fail: the longest common subsequence of the keys alone pairs fewer,
    # which leaves calls removed and inserted.
    subsequence = common_subsequence(old, new)  # type: ignore[arg-type]
    assert edit_cost(subsequence, old, new, NEAR) > edit_cost(pairs, old, new, NEAR)
