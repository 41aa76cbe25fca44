"""The CPU-stability check: the zoo rendered in fresh processes under each CPU kernel set and
thread count, compared byte for byte with each other and with the committed goldens.

    python benchmarks/cpu_stability.py [--models N] [--configurations N] [--cross]

Each configuration is a fresh process of this interpreter with `ATEN_CPU_CAPABILITY` set
(torch chooses its kernels once, at start-up) and `torch.set_num_threads` (and
`OMP_NUM_THREADS`) set, which renders the zoo models as tests/zoo/test_torchvision_zoo.py
traces them. The configurations: the kernel sets `default`, `avx2` and `avx512` with two
threads, and `avx512` with one (`--cross`: every kernel set with one and with two threads).
`--models N` keeps the quantized models first, then a sample spread over the golden sizes,
so even a small run covers what used to differ between machines (the quantized `scale=` floats).
A golden's `# written with:` line is left out of every comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from version_matrix import REPOSITORY, quiet_warnings, trace_zoo_model, zoo_golden_paths

_KERNEL_SETS = ("default", "avx2", "avx512")


@dataclass(frozen=True)
class Configuration:
    """One way torch can run on this CPU: a kernel set chosen at start-up, a thread count."""

    capability: str
    threads: int

    @property
    def name(self) -> str:
        return f"ATEN_CPU_CAPABILITY={self.capability}, {self.threads} thread" + (
            "s" if self.threads > 1 else ""
        )


def configurations(cross: bool) -> list[Configuration]:
    """The kernel sets with two threads and avx512 with one; with `cross`, each with both."""
    if cross:
        return [Configuration(kernels, threads) for kernels in _KERNEL_SETS for threads in (1, 2)]
    return [Configuration(kernels, 2) for kernels in _KERNEL_SETS] + [Configuration("avx512", 1)]


def is_quantized(name: str) -> bool:
    return name.startswith("quantized_")


# The quantized models that quantize fastest (measured: quantizing ResNet-50 is most of a
# two-model run), for smoke runs that take only a few.
_QUICKEST_QUANTIZED = ("quantized_shufflenet_v2_x0_5", "quantized_mobilenet_v2")


def selected_models(limit: int | None) -> dict[str, Path]:
    """{name: golden}: the quantized models first, then the others spread evenly over the
    golden sizes (small to large), `limit` in all."""
    paths = zoo_golden_paths(first=is_quantized)
    if limit is None or limit >= len(paths):
        return paths
    quantized = sorted(
        (name for name in paths if is_quantized(name)),
        key=lambda name: name not in _QUICKEST_QUANTIZED,
    )[:limit]
    others = [name for name in paths if not is_quantized(name)]
    wanted = limit - len(quantized)
    step = len(others) / wanted if wanted else 0
    names = quantized + [others[int(index * step)] for index in range(wanted)]
    return {name: paths[name] for name in names}


def run_worker(limit: int | None, threads: int, output: Path) -> None:
    """Render the models into `output`, one file each, and what torch chose into run.json."""
    quiet_warnings()
    import torch

    torch.set_num_threads(threads)
    output.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for name in selected_models(limit):
        (output / f"{name}.txt").write_text(trace_zoo_model(name))
    chosen = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "quantized engine": torch.backends.quantized.engine,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - start, 1),
    }
    (output / "run.json").write_text(json.dumps(chosen))


def render_in_fresh_process(
    configuration: Configuration,
    limit: int | None,
    output: Path,
    worker: Path = Path(__file__),
    arguments: tuple[str, ...] = (),
) -> dict[str, object]:
    """Run a worker under the configuration; what torch chose there, and its wall time.

    The worker is this file's unless `worker` names another script taking the same
    `--worker --output --threads --models` arguments (values_stability.py), with `arguments`
    added to them.
    """
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPOSITORY), *filter(None, [environment.get("PYTHONPATH")])]
    )
    environment["PYTHONWARNINGS"] = "ignore"
    environment["ATEN_CPU_CAPABILITY"] = configuration.capability
    environment["OMP_NUM_THREADS"] = str(configuration.threads)
    command = [sys.executable, str(worker.resolve()), "--worker", "--output", str(output)]
    command += ["--threads", str(configuration.threads)]
    if limit is not None:
        command += ["--models", str(limit)]
    command += arguments
    start = time.perf_counter()
    finished = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        raise SystemExit(
            f"rendering under {configuration.name} failed with exit status "
            f"{finished.returncode}: {finished.stderr[-2000:]}"
        )
    chosen: dict[str, object] = json.loads((output / "run.json").read_text())
    chosen["wall seconds"] = round(time.perf_counter() - start, 1)
    return chosen


def first_difference(old_text: str, new_text: str) -> str:
    """The first line that differs, both sides, for the report."""
    old_lines, new_lines = old_text.splitlines(), new_text.splitlines()
    for number, (old_line, new_line) in enumerate(zip(old_lines, new_lines, strict=False)):
        if old_line != new_line:
            return f"line {number + 1}: - {old_line.strip()} / + {new_line.strip()}"
    return f"{len(old_lines)} lines vs {len(new_lines)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, help="only N models: the quantized first")
    parser.add_argument("--configurations", type=int, help="only the first N configurations")
    parser.add_argument(
        "--cross", action="store_true", help="every kernel set with 1 and 2 threads"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        run_worker(arguments.models, arguments.threads, arguments.output)
        return

    from pytest_fwdorder.golden.upgrades import without_environment

    goldens = {
        name: without_environment(path.read_text())
        for name, path in selected_models(arguments.models).items()
    }
    chosen = configurations(arguments.cross)[: arguments.configurations]
    rendered: dict[Configuration, dict[str, str]] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for number, configuration in enumerate(chosen):
            output = Path(folder) / str(number)
            seen = render_in_fresh_process(configuration, arguments.models, output)
            rendered[configuration] = {
                name: (output / f"{name}.txt").read_text() for name in goldens
            }
            print(f"{configuration.name}: torch chose {seen}", flush=True)
    print(
        f"\n{len(chosen)} configurations x {len(goldens)} models "
        f"({sum(map(is_quantized, goldens))} quantized), {time.perf_counter() - start:.0f} s"
    )

    first = chosen[0]
    all_identical = True
    for configuration in chosen:
        texts = rendered[configuration]
        off_golden = [name for name in goldens if texts[name] != goldens[name]]
        off_first = [name for name in goldens if texts[name] != rendered[first][name]]
        all_identical &= not off_golden and not off_first
        print(
            f"{configuration.name}: {len(goldens) - len(off_golden)}/{len(goldens)} identical "
            f"to the committed goldens, {len(goldens) - len(off_first)}/{len(goldens)} to "
            f"{first.name}"
        )
        for name in off_golden:
            print(
                f"  differs from its golden: {name}: {first_difference(goldens[name], texts[name])}"
            )
        for name in off_first:
            print(
                f"  differs from {first.name}: {name}: "
                f"{first_difference(rendered[first][name], texts[name])}"
            )
    print("all identical" if all_identical else "NOT all identical")
    if not all_identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
