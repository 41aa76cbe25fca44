"""Distributed and compiled models: DTensors, DDP, FSDP2, tensor parallelism, torch.compile.

The `distributed` tests run `distributed_worker.py`: two CPU processes in a real gloo
process group on 127.0.0.1, each tracing DDP, FSDP2 and tensor-parallel versions of one
MLP and writing its goldens. The MLP's plain golden is traced here, in this process, as
the independent reference. The other tests need no process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from distributed_worker import SCENARIOS, WORLD_SIZE, build_mlp, mlp_inputs
from filelock import FileLock  # a dependency of torch's
from torch import nn
from torch.distributed.tensor import Partial, Replicate, Shard

from pytest_fwdorder import trace_forward
from pytest_fwdorder.calls.records import Call
from pytest_fwdorder.calls.value_descriptions import TensorDescription
from pytest_fwdorder.golden.format import split_top_level
from pytest_fwdorder.golden.parse import parse_call_line
from pytest_fwdorder.recording.distributed import placement_text, user_class_name
from pytest_fwdorder.trace import Trace

WORKER = Path(__file__).with_name("distributed_worker.py")
# The worker gives up after 60 s itself; this bounds it if even that hangs.
WORKER_TIMEOUT_SECONDS = 90

TENSOR_PARALLEL_CALLS = """\
<root>: Sequential (f32[2,8]) -> f32[2,4]
  0: Linear (f32[2,8]) -> f32[2,16]{Shard(1)}
    | settings: in_features=8, out_features=16, bias=True
    | parameters: weight f32[16,8], bias f32[16]
  1: ReLU (f32[2,8]) -> f32[2,8]
    | settings: inplace=False
  2: Linear (f32[2,8]) -> f32[2,4]{Partial(sum)}
    | settings: in_features=16, out_features=4, bias=True
    | parameters: weight f32[4,16], bias f32[4]
"""


@pytest.fixture(scope="module")
def distributed_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The directory where both ranks wrote their goldens and warnings, per scenario.

    Under pytest-xdist the workers share one run: the first to get here runs it, the others
    wait on the lock and read its files (two runs at once on two cores take three times as
    long).
    """
    worker_input = getattr(request.config, "workerinput", None)
    if worker_input is None:
        output = tmp_path_factory.mktemp("distributed")
        _run_worker(output)
        return output
    shared = tmp_path_factory.getbasetemp().parent / f"distributed-{worker_input['testrunuid']}"
    with FileLock(f"{shared}.lock"):
        if not (shared / "done").exists():
            shared.mkdir(exist_ok=True)
            _run_worker(shared)
            (shared / "done").touch()
    return shared


def _run_worker(output: Path) -> None:
    # A session of its own, so a hung run is ended with every rank it spawned.
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = worker.communicate(timeout=WORKER_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        log, _ = worker.communicate()
        pytest.fail(f"the two-rank run took over {WORKER_TIMEOUT_SECONDS} s:\n{log}")
    if worker.returncode != 0:
        pytest.fail(f"the two-rank run failed with exit code {worker.returncode}:\n{log}")


def golden(run: Path, scenario: str, rank: int = 0) -> str:
    return (run / f"{scenario}.rank{rank}.txt").read_text()


def warnings_of(run: Path, scenario: str, rank: int = 0) -> list[dict[str, str]]:
    found: list[dict[str, str]] = json.loads((run / f"{scenario}.rank{rank}.json").read_text())
    return found


def plain_golden() -> str:
    return trace_forward(build_mlp(), mlp_inputs()).render()


@pytest.mark.distributed
@pytest.mark.parametrize("scenario", list(SCENARIOS)[:3])
def test_goldens_are_identical_on_every_rank(distributed_run: Path, scenario: str) -> None:
    goldens = {golden(distributed_run, scenario, rank) for rank in range(WORLD_SIZE)}

    assert len(goldens) == 1


@pytest.mark.distributed
def test_a_dtensor_buffer_a_forward_updates_is_put_back(distributed_run: Path) -> None:
    # The worker checks the buffer's value after the trace; the golden shows it replicated.
    assert "  | buffers: steps f32[1]" in golden(distributed_run, "dtensor_buffer")


@pytest.mark.distributed
def test_a_ddp_golden_equals_the_plain_models(distributed_run: Path) -> None:
    assert golden(distributed_run, "ddp") == plain_golden()


@pytest.mark.distributed
def test_ddp_is_unwrapped_with_a_warning_naming_it(distributed_run: Path) -> None:
    assert warnings_of(distributed_run, "ddp") == [
        {
            "category": "UnwrappedModelWarning",
            "message": "trace_forward traced the module inside DistributedDataParallel "
            "(Sequential); paths are relative to it and the wrapper's own machinery "
            "(compiled graphs, replicas) is not part of the trace",
        }
    ]


@pytest.mark.distributed
def test_an_fsdp2_golden_equals_the_plain_models(distributed_run: Path) -> None:
    # The worker also checks that the model trains after the trace and traces the same.
    assert golden(distributed_run, "fsdp") == plain_golden()


@pytest.mark.distributed
def test_fsdp2_classes_are_named_in_a_warning(distributed_run: Path) -> None:
    messages = {warning["message"] for warning in warnings_of(distributed_run, "fsdp")}

    assert messages == {
        "trace_forward traced Sequential with module classes generated by a distributed "
        "wrapper (FSDPSequential -> Sequential, FSDPLinear -> Linear); the golden names the "
        "classes they wrap, and the wrapper's own machinery (all-gathers, reshards) is not "
        "part of the trace"
    }


@pytest.mark.distributed
def test_a_tensor_parallel_golden_shows_global_shapes_and_placements(
    distributed_run: Path,
) -> None:
    text = golden(distributed_run, "tensor_parallel")

    assert text.endswith(TENSOR_PARALLEL_CALLS)


@pytest.mark.distributed
def test_a_tensor_parallel_header_equals_the_plain_models(distributed_run: Path) -> None:
    def header(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("#")]

    assert header(golden(distributed_run, "tensor_parallel")) == header(plain_golden())


@pytest.mark.distributed
def test_local_shapes_are_shown_after_the_placements(distributed_run: Path) -> None:
    text = golden(distributed_run, "tensor_parallel_local_shapes")

    assert "  0: Linear (f32[2,8]) -> f32[2,16]{Shard(1) local=[2,8]}\n" in text


@pytest.mark.distributed
def test_local_shapes_name_the_rank_in_the_header(distributed_run: Path) -> None:
    headers = [
        next(
            line
            for line in golden(distributed_run, "tensor_parallel_local_shapes", rank).splitlines()
            if line.startswith("# local shapes:")
        )
        for rank in range(WORLD_SIZE)
    ]

    assert headers == ["# local shapes: shown (rank 0 of 2)", "# local shapes: shown (rank 1 of 2)"]


def test_shard_dimensions_are_counted_from_the_front() -> None:
    assert placement_text(Shard(-1), 2) == "Shard(1)"


@pytest.mark.parametrize(
    ("placement", "text"),
    [(Shard(0), "Shard(0)"), (Replicate(), "Replicate()"), (Partial(), "Partial(sum)")],
    ids=["shard", "replicate", "partial"],
)
def test_placements_are_written_as_torch_names_them(placement: object, text: str) -> None:
    assert placement_text(placement, 2) == text


def one_call_trace(output: TensorDescription) -> Trace:
    trace = Trace(root_type="Linear", callable_paths=("",))
    trace.calls.append(
        Call(
            path="",
            module_type="Linear",
            nth=1,
            depth=0,
            parent=None,
            registered=True,
            index=0,
            args=(TensorDescription((2, 8), "f32", "cpu"),),
            output=output,
        )
    )
    return trace


SHARDED = TensorDescription((2, 16), "f32", "cpu", "Shard(1)", (2, 8))


def test_a_plain_tensor_is_written_as_before() -> None:
    text = one_call_trace(TensorDescription((2, 16), "f32", "cpu")).render()

    assert text.endswith("<root>: Linear (f32[2,8]) -> f32[2,16]\n")


def test_a_dtensor_line_parses_back_into_its_parts() -> None:
    line = one_call_trace(SHARDED).render().splitlines()[-1]

    parsed = parse_call_line(line)

    assert (parsed.inputs, parsed.outputs) == ("(f32[2,8])", "f32[2,16]{Shard(1)}")


def test_placements_of_several_mesh_dimensions_stay_one_item() -> None:
    assert split_top_level("f32[4,16]{Shard(0),Replicate()}, None") == [
        "f32[4,16]{Shard(0),Replicate()}",
        "None",
    ]


def test_a_change_of_placement_is_a_difference() -> None:
    before = one_call_trace(SHARDED)
    after = one_call_trace(TensorDescription((2, 16), "f32", "cpu", "Replicate()", (2, 16)))

    assert before != after
    assert "output changed" in before.diff(after).summary()


def test_show_local_shapes_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match=r"show_local_shapes must be True or False, got 'yes'"):
        trace_forward(nn.ReLU(), torch.randn(2), show_local_shapes="yes")  # type: ignore[arg-type]


def test_local_shapes_outside_a_process_group_say_so_in_the_header() -> None:
    text = trace_forward(nn.ReLU(), torch.randn(2), show_local_shapes=True).render()

    assert "\n# local shapes: shown\n" in text


def test_show_local_shapes_is_read_from_the_command_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_option(forward_trace):
            assert forward_trace.options.show_local_shapes is True
        """
    )

    result = pytester.runpytest("-o", "fwdorder_show_local_shapes=true")

    result.assert_outcomes(passed=1)


def test_show_local_shapes_is_read_from_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.fwdorder(show_local_shapes=True)
        def test_option(forward_trace):
            assert forward_trace.options.show_local_shapes is True
        """
    )

    result = pytester.runpytest()

    result.assert_outcomes(passed=1)


# A stand-in for FSDP2's generated classes, which need a process group to make for real:
# `fully_shard` builds `type(f"FSDP{name}", (FSDPModule, cls), ...)` (tested for real above).
_FakeFSDPModule = type("FSDPModule", (), {"__module__": "torch.distributed.fsdp._fully_shard"})


def test_a_class_swapped_by_a_distributed_wrapper_is_named_as_the_users() -> None:
    swapped = type("FSDPLinear", (_FakeFSDPModule, nn.Linear), {})

    assert user_class_name(swapped(2, 2)) == "Linear"


def test_a_users_own_mixin_class_keeps_its_name() -> None:
    class Mixin:
        pass

    class MixedLinear(Mixin, nn.Linear):
        pass

    assert user_class_name(MixedLinear(2, 2)) == "MixedLinear"


def build_stack() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 4), nn.ReLU()))


# Dynamo reads `.grad` of non-leaf tensors while it captures a graph (torch 2.14), and
# torch warns about its own access; that is torch's internal business, not the test's.
dynamo_reads_grad = pytest.mark.filterwarnings(
    "ignore:The .grad attribute of a Tensor that is not a leaf Tensor:UserWarning"
)


# backend="eager": dynamo captures the graph but nothing is generated or compiled by a C++
# compiler, so these tests are quick and need no toolchain; what the trace does about the
# compiled code does not depend on the backend.
@dynamo_reads_grad
def test_a_compiled_submodule_gives_the_eager_golden() -> None:
    model = build_stack()
    model[2] = torch.compile(model[2], backend="eager")
    model(torch.randn(2, 8))  # compiled for real before the trace

    assert trace_forward(model, torch.randn(2, 8)) == trace_forward(
        build_stack(), torch.randn(2, 8)
    )


@dynamo_reads_grad
def test_a_compiled_submodule_is_put_back_after_the_trace() -> None:
    model = build_stack()
    compiled = model[2] = torch.compile(model[2], backend="eager")

    trace_forward(model, torch.randn(2, 8))

    assert model[2] is compiled


class SharedBlockStack(nn.Module):
    """One block registered twice, its compiled-to-be Linear three registries down."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        block = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.ReLU(), nn.Linear(8, 8)))
        self.first = block
        self.parts = nn.ModuleDict({"act": nn.ReLU()})
        self.second = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.parts["act"](self.first(x)))


@dynamo_reads_grad
def test_a_compiled_module_deep_under_a_shared_block_gives_the_eager_golden() -> None:
    model = SharedBlockStack()
    compiled = model.first[1][1] = torch.compile(model.first[1][1], backend="eager")
    model(torch.randn(2, 8))

    traced = trace_forward(model, torch.randn(2, 8))

    assert traced == trace_forward(SharedBlockStack(), torch.randn(2, 8))
    assert model.second[1][1] is compiled


@dynamo_reads_grad
def test_a_model_compiled_in_place_gives_the_eager_golden() -> None:
    model = build_stack()
    model.compile(backend="eager")
    model(torch.randn(2, 8))

    assert trace_forward(model, torch.randn(2, 8)) == trace_forward(
        build_stack(), torch.randn(2, 8)
    )
