"""The values-stability check: the zoo's output fingerprints (`values=True`) rendered in fresh
processes under each CPU kernel set and thread count, measured against the default tolerance.

    python benchmarks/values_stability.py [--models N | --only NAME...] [--configurations N]
        [--keep FOLDER]

Each configuration is a fresh process of this interpreter with `ATEN_CPU_CAPABILITY` and the
thread count set, as benchmarks/cpu_stability.py runs them (its configurations, its model
sample), every kernel set with one and with two threads. There each zoo model is traced as
tests/zoo/test_zoo_values.py traces it: the builder and the seeded inputs from
tests/zoo/catalogue.py, `values=True`, under `torch.no_grad()`. A kernel set torch does not
accept on this CPU (it runs another one instead) is reported and left out.

Every configuration's text is compared with the first configuration's, fact by fact: for each
statistic, the ratio |difference| / allowed, allowed being `absolute + relative x scale`
(the default tolerance of pytest_fwdorder/options.py, `scale` the larger largest absolute
value, as pytest_fwdorder/facets/values.py compares). A ratio below 1 matches; the margin a default
needs shows in how far below. The table shows the 10 models with the worst ratio and, per
model, how many values facts differ at all in text; then the models x configurations the
snapshot extension does not match (exit status 1 if any), the zoo-wide worst ratio against
the first configuration, and the worst over every pair of configurations (a golden written
under one is compared under any other). `--keep FOLDER` keeps the texts there and reuses them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_stability import (
    Configuration,
    configurations,
    is_quantized,
    render_in_fresh_process,
    selected_models,
)
from version_matrix import REPOSITORY, quiet_warnings

from pytest_fwdorder.facets.values import VALUES
from pytest_fwdorder.golden.format import FACT_PREFIX
from pytest_fwdorder.options import VALUES_ABSOLUTE_TOLERANCE, VALUES_RELATIVE_TOLERANCE

_VALUES_FACT_START = f"{FACT_PREFIX}{VALUES.title}: "
_STATISTICS = ("mean", "std", "absmax")
_COUNTS = ("nan", "inf")
_SHOWN = 10


@dataclass(frozen=True)
class Movement:
    """How far one model's fingerprints moved between two configurations' texts."""

    worst_ratio: float  # |difference| / allowed, over every statistic; inf: cannot match
    where: str  # the call and statistic of the worst ratio, or why nothing compares
    facts: int  # values facts in the text
    differing_facts: int  # of them, how many differ at all in text


def fingerprint_ratio(
    old: str,
    new: str,
    relative: float = VALUES_RELATIVE_TOLERANCE,
    absolute: float = VALUES_ABSOLUTE_TOLERANCE,
) -> tuple[float, str]:
    """The worst |difference| / allowed between two values facts' texts (after `values: `)
    and the statistic it is in (`[1] std` for a second tensor); inf where no tolerance can
    make them match (another tensor count, another NaN or Inf count)."""
    if old == new:
        return 0.0, ""
    old_tensors, new_tensors = VALUES.parse(old), VALUES.parse(new)
    if len(old_tensors) != len(new_tensors):
        return math.inf, f"{len(old_tensors)} tensors -> {len(new_tensors)}"
    worst, where = 0.0, ""
    several = len(new_tensors) > 1
    for number, (before, after) in enumerate(zip(old_tensors, new_tensors, strict=True)):
        prefix = f"[{number}] " if several else ""
        for name in _COUNTS:
            if getattr(before, name) != getattr(after, name):
                return math.inf, f"{prefix}{name} count"
        if (before.absmax is None) != (after.absmax is None):
            return math.inf, f"{prefix}finite values"
        if before.absmax is None or after.absmax is None:
            continue
        allowed = absolute + relative * max(abs(before.absmax), abs(after.absmax))
        for name in _STATISTICS:
            ratio = abs((getattr(before, name) or 0.0) - (getattr(after, name) or 0.0)) / allowed
            if ratio > worst:
                worst, where = ratio, f"{prefix}{name}"
    return worst, where


def movement(old_text: str, new_text: str) -> Movement:
    """How far `new_text`'s fingerprints moved from `old_text`'s; everything else in the two
    texts must be equal, or the move is infinite (a fingerprint stability run only)."""
    old_lines, new_lines = old_text.splitlines(), new_text.splitlines()
    facts = sum(map(_is_values_fact, new_lines))
    if len(old_lines) != len(new_lines):
        return Movement(math.inf, f"{len(old_lines)} lines -> {len(new_lines)}", facts, facts)
    worst, where, differing = 0.0, "", 0
    call = ""
    for number, (old_line, new_line) in enumerate(zip(old_lines, new_lines, strict=True)):
        if old_line.strip() and not old_line.lstrip().startswith(("|", "#", "~")):
            call = old_line.strip().split(": ", 1)[0]  # a call line: `path: Type (...) -> ...`
        if old_line == new_line:
            continue
        if not (_is_values_fact(old_line) and _is_values_fact(new_line)):
            return Movement(math.inf, f"line {number + 1} differs beyond values", facts, facts)
        differing += 1
        ratio, statistic = fingerprint_ratio(_fact_text(old_line), _fact_text(new_line))
        if ratio > worst:
            worst, where = ratio, f"{call}: {statistic}"
    return Movement(worst, where, facts, differing)


def trace_with_values(name: str) -> str:
    """The zoo model's text with fingerprints, as tests/zoo/test_zoo_values.py traces it."""
    import torch

    sys.path.insert(0, str(REPOSITORY / "tests" / "zoo"))
    from catalogue import case

    from pytest_fwdorder import trace_forward

    zoo_case = case(name)
    with torch.no_grad():
        return trace_forward(zoo_case.build, *zoo_case.real_inputs(), values=True).render()


def run_worker(names: list[str], threads: int, output: Path) -> None:
    """Render the models into `output`, one file each, and what torch chose into run.json."""
    quiet_warnings()
    import torch

    torch.set_num_threads(threads)
    output.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    for name in names:
        start = time.perf_counter()
        (output / f"{name}.txt").write_text(trace_with_values(name))
        seconds[name] = round(time.perf_counter() - start, 2)
    chosen = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "quantized engine": torch.backends.quantized.engine,
        "torch": torch.__version__,
        "seconds": round(sum(seconds.values()), 1),
        "asked": os.environ.get("ATEN_CPU_CAPABILITY", ""),
        "models": list(seconds),
    }
    (output / "run.json").write_text(json.dumps(chosen))
    (output / "seconds.json").write_text(json.dumps(seconds))


def accepted(configuration: Configuration, chosen: dict[str, object]) -> bool:
    """Whether torch ran the kernel set asked for (it falls back where the CPU lacks it)."""
    return str(chosen["capability"]).lower() == configuration.capability.lower()


def chosen_models(arguments: argparse.Namespace) -> list[str]:
    """The models `--only` names, else cpu_stability.py's sample of `--models` (or all)."""
    if arguments.only:
        return list(arguments.only)
    return list(selected_models(arguments.models))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, help="only N models: the quantized first")
    parser.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="only this model (repeat)"
    )
    parser.add_argument("--configurations", type=int, help="only the first N configurations")
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the rendered texts in this folder, and reuse a configuration's texts that "
        "an earlier run of the same models left there",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        run_worker(chosen_models(arguments), arguments.threads, arguments.output)
        return

    from pytest_fwdorder.snapshot.extension import TraceSnapshotExtension

    names = chosen_models(arguments)
    chosen = configurations(cross=True)[: arguments.configurations]
    rendered: dict[Configuration, dict[str, str]] = {}
    slowest: dict[str, float] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        folder = arguments.keep or Path(temporary)
        for number, configuration in enumerate(chosen):
            output = folder / str(number)
            seen = _reused(output, configuration, names) or render_in_fresh_process(
                configuration,
                arguments.models,
                output,
                worker=Path(__file__),
                arguments=tuple(f"--only={name}" for name in arguments.only or ()),
            )
            shown = {key: value for key, value in seen.items() if key != "models"}
            print(f"{configuration.name}: torch chose {shown}", flush=True)
            if not accepted(configuration, seen):
                print(f"  left out: torch ran {seen['capability']} instead", flush=True)
                continue
            rendered[configuration] = {name: (output / f"{name}.txt").read_text() for name in names}
            for name, seconds in json.loads((output / "seconds.json").read_text()).items():
                slowest[name] = max(slowest.get(name, 0.0), seconds)
    compared = list(rendered)
    print(
        f"\n{len(compared)} configurations x {len(names)} models "
        f"({sum(map(is_quantized, names))} quantized), {time.perf_counter() - start:.0f} s; "
        "slowest to trace: "
        + ", ".join(
            f"{name} {seconds:.1f} s"
            for name, seconds in sorted(slowest.items(), key=lambda item: -item[1])[:5]
        )
    )
    if not compared:
        raise SystemExit("no configuration ran the kernel set it asked for: nothing to compare")

    first = compared[0]
    extension = TraceSnapshotExtension()
    worst: dict[str, tuple[Movement, Configuration]] = {}
    differing: dict[str, int] = {}
    unmatched: list[str] = []
    for configuration in compared[1:]:
        for name in names:
            old_text, new_text = rendered[first][name], rendered[configuration][name]
            moved = movement(old_text, new_text)
            differing[name] = max(differing.get(name, 0), moved.differing_facts)
            if name not in worst or moved.worst_ratio > worst[name][0].worst_ratio:
                worst[name] = (moved, configuration)
            if not extension.matches(serialized_data=new_text, snapshot_data=old_text):
                unmatched.append(f"{name} under {configuration.name}")
    if not worst:
        print(f"only {first.name} ran: nothing to compare it with")
        return

    print(
        f"\nworst |difference| / allowed against {first.name}, allowed = "
        f"{VALUES_ABSOLUTE_TOLERANCE:g} + {VALUES_RELATIVE_TOLERANCE:g} x largest absolute value"
    )
    print(f"{'model':<40} {'worst':>8}  {'differing facts':>15}  where, configuration")
    ranked = sorted(worst, key=lambda name: -worst[name][0].worst_ratio)
    for name in ranked[:_SHOWN]:
        moved, configuration = worst[name]
        print(
            f"{name:<40} {moved.worst_ratio:>8.3f}  {differing[name]:>6} of {moved.facts:<6}  "
            f"{moved.where or '-'}, {configuration.name}"
        )
    identical = sum(1 for name in names if differing[name] == 0)
    zoo_worst = worst[ranked[0]][0].worst_ratio
    print(
        f"\n{identical}/{len(names)} models with every fingerprint identical in text in every "
        "configuration"
    )
    print(
        f"{len(unmatched)} model x configuration texts the snapshot extension does not match"
        + "".join(f"\n  does not match: {item}" for item in unmatched)
    )
    print(f"zoo-wide worst ratio: {zoo_worst:.3f} ({ranked[0]}: {worst[ranked[0]][0].where})")
    # A golden written under one configuration is compared under any other: the worst pair.
    pairs = [
        (movement(rendered[one][name], rendered[other][name]).worst_ratio, name, one, other)
        for index, one in enumerate(compared)
        for other in compared[index + 1 :]
        for name in names
    ]
    ratio, name, one, other = max(pairs, key=lambda pair: pair[0])
    print(
        f"worst ratio over every pair of configurations: {ratio:.3f} "
        f"({name}: {one.name} vs {other.name})"
    )
    if unmatched:
        raise SystemExit(1)


def _reused(
    output: Path, configuration: Configuration, names: list[str]
) -> dict[str, object] | None:
    """What an earlier `--keep` run chose for the configuration, if it rendered these models
    under it; None: render them again."""
    record = output / "run.json"
    if not record.exists():
        return None
    chosen: dict[str, object] = json.loads(record.read_text())
    if chosen.get("asked") != configuration.capability or chosen.get("threads") != (
        configuration.threads
    ):
        return None
    if chosen.get("models") != names:
        return None
    chosen["reused from"] = str(output)
    return chosen


def _is_values_fact(line: str) -> bool:
    return line.lstrip(" ").startswith(_VALUES_FACT_START)


def _fact_text(line: str) -> str:
    return line.split(_VALUES_FACT_START, 1)[1]


if __name__ == "__main__":
    main()
