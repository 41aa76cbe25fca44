"""Where a call is, and how many, in words: `after layer3.2.bn2 (BatchNorm2d)`, `in
layer3.2 after bn2`, `3 calls`, and which of its siblings it cannot be told apart from.
Pure, no torch.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_fwdorder.diff.call_keys import numbered
from pytest_fwdorder.golden.format import GoldenLine

_MOST_NAMED = 8  # look-alikes named one by one; more are named by their count and ends


def plural(count: int, noun: str) -> str:
    """`1 call`, `3 calls`: a count and its noun, made plural by an `s`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def by_module(changed: list[GoldenLine]) -> bool:
    """Whether changes to the facts of the modules first called at `changed` are counted by
    module: where one ran more than once, since a module's facts (settings, parameters) are
    written once, under its first call, and are not that call's."""
    return any(line.reused for line in changed)


def at_modules(lines: list[GoldenLine], changed: list[GoldenLine]) -> str:
    """`3 calls` for changes at modules each called once; `9 modules (17 calls)` where one
    ran more than once (`by_module`), its calls said beside."""
    if not by_module(changed):
        return plural(len(changed), "call")
    paths = {line.path for line in changed}
    calls = sum(line.path in paths for line in lines) if all(paths) else 0
    runs = f" ({plural(calls, 'call')})" if calls else ""  # no paths to count them by
    return f"{plural(len(changed), 'module')}{runs}"


def module_name(line: GoldenLine) -> str:
    """A module as a sentence about its facts names it: `layer1.0.relu`, not the name of its
    first call, `layer1.0.relu #1`."""
    return line.path or line.module_type


def called(line: GoldenLine) -> str:
    """A call as summaries name it: its golden name and its class, `layer1.0.relu #2 (ReLU)`."""
    return f"{line.name} ({line.module_type})"


def describe_where(lines: list[GoldenLine], index: int) -> str:
    """`after X (Type)` (previous sibling) or `at the start of X (Type)` (parent) for the line
    at `index`."""
    depth = lines[index].depth
    for earlier in range(index - 1, -1, -1):
        if lines[earlier].depth == depth:
            return f"after {called(lines[earlier])}"
        if lines[earlier].depth < depth:
            return f"at the start of {called(lines[earlier])}"
    return "at the start"


def describe_place(lines: list[GoldenLine], index: int) -> str:
    """Where the line at `index` is, in words a reader finds in the model's tree: `in
    layer3.2 after bn2` (its parent, then the sibling before it, named within the parent),
    or `at the start of layer3.2`; a name-free comparison says this, having no classes to
    tell its blank-named calls apart."""
    depth = lines[index].depth
    sibling: GoldenLine | None = None
    for earlier in range(index - 1, -1, -1):
        if lines[earlier].depth == depth and sibling is None:
            sibling = lines[earlier]
        elif lines[earlier].depth < depth:
            parent = lines[earlier]
            if sibling is None:
                return f"at the start of {_place_name(parent)}"
            inside = "" if parent.path == "<root>" else f"in {parent.name} "
            return f"{inside}after {_within(sibling, parent)}"
    return f"after {sibling.name}" if sibling is not None else "at the start"


def place_describer(lines: list[GoldenLine]) -> Callable[[int], str]:
    """`describe_place` for many lines of one list: each line's parent and the sibling
    before it found in one pass, so that saying where each of 10,000 calls is does not
    walk back through the list for each."""
    parents, siblings = [-1] * len(lines), [-1] * len(lines)
    latest: list[int] = []  # the latest line at each depth, deeper ones dropped
    for index, line in enumerate(lines):
        depth = line.depth
        if depth < len(latest):
            siblings[index] = latest[depth]
        if 0 < depth <= len(latest):
            parents[index] = latest[depth - 1]
        del latest[depth:]
        latest.append(index)

    def describe(index: int) -> str:
        sibling = lines[siblings[index]] if siblings[index] >= 0 else None
        if parents[index] < 0:
            return f"after {sibling.name}" if sibling is not None else "at the start"
        parent = lines[parents[index]]
        if sibling is None:
            return f"at the start of {_place_name(parent)}"
        inside = "" if parent.path == "<root>" else f"in {parent.name} "
        return f"{inside}after {_within(sibling, parent)}"

    return describe


def describe_run_place(lines: list[GoldenLine], first: int, *, name_free: bool) -> str:
    """Where a run of look-alike siblings starting at `first` is, in words true of each of
    them: `after embed (Embedding)` (each runs after it), or `in <root> (Sequential)` where
    the run starts its parent (only the first is at its start); name-free, `in the model`.
    """
    where = (describe_place if name_free else describe_where)(lines, first)
    at_the_start = "at the start of "
    return f"in {where.removeprefix(at_the_start)}" if where.startswith(at_the_start) else where


def _place_name(line: GoldenLine) -> str:
    return "the model" if line.path == "<root>" else line.name


def _within(line: GoldenLine, parent: GoldenLine) -> str:
    """`bn2` for `layer3.2.bn2` inside `layer3.2`; the whole name where it is not inside, or
    where within it it is a bare number (`in blocks after blocks.0`, not `after 0`)."""
    prefix = "" if parent.path == "<root>" else f"{parent.path}."
    if prefix and line.name.startswith(prefix):
        inside = line.name[len(prefix) :]
        if not inside.partition(" ")[0].isdigit():
            return inside
    return line.name


def alike_siblings(lines: list[GoldenLine], index: int, *, inputs: bool = True) -> list[int]:
    """The call at `index` and the siblings next to it that are alike to it but for their
    names (same classes, shapes and facts under them; without `inputs`, whatever they are
    given), in order."""
    end = subtree_end(lines, index)
    shape = [_look(line, lines[index].depth, inputs) for line in lines[index:end]]
    size = end - index
    found = [index]
    before = index
    while True:
        sibling = _previous_sibling(lines, before)
        if sibling is None or sibling + size != before:
            break
        if [_look(line, lines[sibling].depth, inputs) for line in lines[sibling:before]] != shape:
            break
        found.insert(0, sibling)
        before = sibling
    after = end
    while after + size <= len(lines) and lines[after].depth == lines[index].depth:
        if subtree_end(lines, after) != after + size:
            break
        after_lines = lines[after : after + size]
        if [_look(line, lines[after].depth, inputs) for line in after_lines] != shape:
            break
        found.append(after)
        after += size
    return found


def look_alikes(
    lines: list[GoldenLine], index: int, name_free: bool, *, inputs: bool = True
) -> list[int]:
    """The calls next to the call at `index` that it cannot be told from, itself among them,
    changed or not; none where its name tells it apart.

    Names are not compared in a name-free comparison. With names, a numbered one
    (`blocks.3`, or `blocks[3]` in a plain list) says only where a call is, so look-alike
    numbered siblings may be any of them; a named one (`attn.v`, beside the kept `attn.o`) is itself, and the smaller
    account is that it came.
    """
    if name_free:
        return alike_siblings(lines, index, inputs=inputs)
    if not numbered(lines[index].path):
        return []
    alike = alike_siblings(lines, index, inputs=inputs)
    return [sibling for sibling in alike if numbered(lines[sibling].path)]


def run_around(alike: list[int], index: int, accounted: frozenset[int]) -> list[int]:
    """Of look-alike siblings in order (`look_alikes`), the unbroken run of those not
    `accounted` for (wrapped, moved: they did not go or come) that holds `index`."""
    run: list[int] = []
    for sibling in alike:
        if sibling in accounted:
            if index in run:
                break
            run = []
        else:
            run.append(sibling)
    return run if index in run else []


def which_of(lines: list[GoldenLine], alike: list[int], changed: set[int | None]) -> str | None:
    """`one of blocks.2, blocks.3` (or `3 of q, k, v, o`) where look-alikes (`look_alikes`)
    outnumber the changed calls among them, so which went or came cannot be told; else
    None."""
    went = sum(index in changed for index in alike)
    if len(alike) <= went:
        return None
    names = [lines[index].name for index in alike]
    return f"{'one' if went == 1 else went} of {named_run(names)}"


def named_run(names: list[str]) -> str:
    """`0, 1, 2`: a run of look-alikes by their names; past eight, by their count and ends
    (`the 400 from 0 to 399`), so a long stack of layers is not a line of 400 names."""
    if len(names) <= _MOST_NAMED:
        return ", ".join(names)
    return f"the {len(names)} from {names[0]} to {names[-1]}"


def _previous_sibling(lines: list[GoldenLine], index: int) -> int | None:
    depth = lines[index].depth
    for earlier in range(index - 1, -1, -1):
        if lines[earlier].depth == depth:
            return earlier
        if lines[earlier].depth < depth:
            return None
    return None


def _look(line: GoldenLine, depth: int, inputs: bool = True) -> tuple[object, ...]:
    """A call as it looks without its name, its depth counted from `depth`; without
    `inputs`, what it is and gives, not what it is given."""
    return (
        line.depth - depth,
        line.module_type,
        line.inputs if inputs else None,
        line.outputs,
        line.facts,
        line.under,
        line.mode,
    )


def subtree_end(lines: list[GoldenLine], index: int) -> int:
    depth = lines[index].depth
    end = index + 1
    while end < len(lines) and lines[end].depth > depth:
        end += 1
    return end


def hedged_look_alikes(
    lines: list[GoldenLine],
    index: int,
    name_free: bool,
    changed: set[int | None],
    given_otherwise: set[str],
) -> list[int]:
    """The look-alikes a call that went or came cannot be told from (`look_alikes`): by what
    they are given too, unless some of the others were given something else as well (their
    paths in `given_otherwise`), as where each is given what the ones before it made (a
    decoder block's cache holds their keys): then what each is given says where it runs,
    not which it is."""
    alike = look_alikes(lines, index, name_free)
    loose = look_alikes(lines, index, name_free, inputs=False)
    if len(loose) <= len(alike):
        return alike
    others = [sibling for sibling in loose if sibling not in changed]
    return loose if any(lines[sibling].path in given_otherwise for sibling in others) else alike


def end_order(lines: list[GoldenLine]) -> list[int]:
    """Each call's place in the order the calls ended (a call ends after its nested calls)."""
    order = [0] * len(lines)
    open_calls: list[int] = []
    ended = 0
    for index, line in enumerate(lines):
        while open_calls and lines[open_calls[-1]].depth >= line.depth:
            order[open_calls.pop()] = ended
            ended += 1
        open_calls.append(index)
    while open_calls:
        order[open_calls.pop()] = ended
        ended += 1
    return order


def named_wrappers(names: list[GoldenLine], chain: list[int], calls: int) -> str:
    """The wrappers of one wrap, outermost first: `layer2 (Sequential)`, or `layer2
    (Sequential) and layer2.0 (Sequential)` for a wrapper inside a wrapper."""
    said = [_called(names[holder], calls) for holder in chain]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"


def _called(line: GoldenLine, calls: int) -> str:
    """A wrapper as its sentence names it: `fc (Linear)` for one call, `fc (Linear, 2
    calls)` for a module wrapped at each of its calls."""
    if calls == 1:
        return called(line)
    return f"{line.path} ({line.module_type}, {plural(calls, 'call')})"
