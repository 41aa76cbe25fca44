"""The pytest plugin: the `forward_trace` fixture, its marker and ini options, and messages.

Read top to bottom: options -> configure -> report header -> fixture -> assertion messages
-> session end (reports, the goldens an update accepted or kept).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_fwdorder.errors import ReferenceMismatchError
from pytest_fwdorder.options import OPTION_NAMES, OPTIONS, TraceOptions, check_option_values
from pytest_fwdorder.snapshot.extension import (
    explain_snapshot_assertion,
    headline,
    make_trace_aware,
)
from pytest_fwdorder.snapshot.held_goldens import (
    HeldGoldens,
    held_goldens_message,
    hold_unfinished_goldens,
    put_back_held_goldens,
    receive_held_goldens,
    send_held_goldens,
    unsafe_session_reason,
)
from pytest_fwdorder.snapshot.kept_comparisons import (
    COMPARISONS_KEY,
    KEEP_PER_TEST_KEY,
    PARITY_FAILURES_KEY,
    PARITY_WORKER_OUTPUT_KEY,
    WORKER_OUTPUT_KEY,
    WORKER_WARNINGS_KEY,
    ParityFailure,
    from_worker_output,
    save_failed,
    to_worker_output,
    warn_of_facets,
)
from pytest_fwdorder.snapshot.update_summary import (
    UpdateReview,
    configure_update_only,
    obsolete_goldens_message,
    receive_seen_goldens,
    send_seen_goldens,
)

_MARKER = "fwdorder"


@dataclass(frozen=True)
class _Outputs:
    """Where `--fwdorder-report` and `--fwdorder-save-failed` write, and what to say after."""

    report: Path | None
    save_directory: Path | None
    messages: list[str]
    # The facets' warnings from xdist workers, given once the reports are written.
    facet_warnings: list[str] = field(default_factory=list)


_OUTPUTS_KEY = pytest.StashKey[_Outputs]()
_HELD_MESSAGE_KEY = pytest.StashKey[str]()
_UPDATE_REVIEW_KEY = pytest.StashKey[UpdateReview]()
_GOLDEN_SUFFIX = ".fwdorder.txt"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    # The hooks a conftest.py or a plugin implements (pytest_fwdorder_describe_value, ...).
    from pytest_fwdorder.hookspecs import HookSpecifications

    pluginmanager.add_hookspecs(HookSpecifications)


def pytest_addoption(parser: pytest.Parser) -> None:
    for option in OPTIONS:  # one ini option per trace option, `fwdorder_<name>`
        parser.addini(
            f"fwdorder_{option.name}",
            option.ini_help,
            type=option.ini_type,
            default=option.ini_default,
        )
    group = parser.getgroup("fwdorder", "forward traces (pytest-fwdorder)")
    group.addoption(
        "--fwdorder-report",
        metavar="PATH",
        default=None,
        help="write one self-contained HTML page of every trace compared with a golden "
        "file: call trees, search, and a side-by-side diff of each failed or updated golden",
    )
    group.addoption(
        "--fwdorder-save-failed",
        metavar="DIR",
        default=None,
        help="write the new trace of every failed golden under DIR at the golden's own "
        "relative path, for `fwdorder diff GOLDEN DIR/GOLDEN`",
    )
    group.addoption(
        "--fwdorder-update-only",
        metavar="PATTERN",
        action="append",
        default=None,
        help="with --snapshot-update, write only the goldens whose path relative to the "
        "rootdir matches this glob (`*` also matches `/`; one without `/` matches the file "
        "or test name, `test_net`; repeatable); a golden left out "
        "that differs still fails its test",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}({', '.join(f'{name}=...' for name in OPTION_NAMES)}): trace options for "
        "the forward_trace fixture in this test",
    )
    try:
        check_option_values(_ini_options(config), source="ini", spelling=_ini_name)
    except (TypeError, ValueError) as error:
        raise pytest.UsageError(str(error)) from None
    _configure_outputs(config)
    _configure_ci_reports(config)
    _use_plugins(config)


def _configure_ci_reports(config: pytest.Config) -> None:
    """Show failed and accepted goldens in the reports this run writes, if any."""
    from pytest_fwdorder.report.ci_targets import ci_targets

    configure_update_only(config)
    targets = ci_targets(config)
    if not targets:
        return
    from pytest_fwdorder.report.ci import CiReports  # holds the diff: only when a report shows it

    config.stash[KEEP_PER_TEST_KEY] = True
    config.pluginmanager.register(CiReports(targets), "fwdorder-ci-reports")
    if targets.update:
        review = config.stash[_UPDATE_REVIEW_KEY] = UpdateReview()
        config.pluginmanager.register(review, "fwdorder-update-review")


def _use_plugins(config: pytest.Config) -> None:
    """Traces in this session call pytest's plugin manager: conftest files and plugins,
    with the built-in describers and the `pytest_fwdorder` entry points registered in it."""
    from pytest_fwdorder.hookspecs import register_builtin_plugins, use_plugin_manager

    try:
        register_builtin_plugins(config.pluginmanager)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from error
    use_plugin_manager(config.pluginmanager)


def pytest_unconfigure(config: pytest.Config) -> None:
    from pytest_fwdorder.hookspecs import stop_using_plugin_manager

    stop_using_plugin_manager(config.pluginmanager)


def _configure_outputs(config: pytest.Config) -> None:
    """Check the report paths, and start keeping comparisons when one is asked for."""
    report, save_failed = (
        config.getoption("fwdorder_report"),
        config.getoption("fwdorder_save_failed"),
    )
    if report is None and save_failed is None:
        return
    base = config.invocation_params.dir
    report_path = base / report if report is not None else None
    save_directory = base / save_failed if save_failed is not None else None
    if report_path is not None and report_path.is_dir():
        raise pytest.UsageError(
            f"--fwdorder-report names a file to write, got the directory {report!r}: "
            f"write --fwdorder-report={report.rstrip('/')}/fwdorder-report.html"
        )
    if report_path is not None:
        _check_writable(report_path, report, base)
    if save_directory is not None and save_directory.is_file():
        raise pytest.UsageError(
            f"--fwdorder-save-failed names a directory, got the file {save_failed!r}: "
            "give a directory (it is created if missing)"
        )
    config.stash[_OUTPUTS_KEY] = _Outputs(report_path, save_directory, [])
    config.stash[COMPARISONS_KEY] = []
    config.stash[PARITY_FAILURES_KEY] = []


def _check_writable(report_path: Path, report: str, base: Path) -> None:
    """A usage error now where the report could not be written at the end of the run."""
    parent = report_path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    shown = os.path.relpath(parent, base) if parent.is_relative_to(base) else str(parent)
    if not parent.is_dir():
        problem = f"{shown!r} is a file, not a directory"
    elif not os.access(parent, os.W_OK | os.X_OK):
        problem = f"the directory {shown!r} is not writable"
    else:
        return
    raise pytest.UsageError(
        f"--fwdorder-report cannot be written at {report!r}: {problem}: give a path in a "
        "directory you can write"
    )


def _ini_options(config: pytest.Config) -> dict[str, Any]:
    """The trace options the ini gives; a value pytest cannot read (`fwdorder_costs = maybe`)
    is a usage error that names the option and the value."""
    values = {}
    for option in OPTIONS:
        try:
            value = config.getini(_ini_name(option.name))
        except pytest.UsageError as error:  # pytest's own says neither: "invalid truth value 'x'"
            wanted = (
                "true or false" if option.ini_type == "bool" else f"of ini type {option.ini_type}"
            )
            raise pytest.UsageError(
                f"ini: {_ini_name(option.name)} must be {wanted}: {error}"
            ) from None
        values[option.name] = option.from_ini(value)
    return values


def _ini_name(name: str) -> str:
    return f"fwdorder_{name}"


def pytest_report_header(config: pytest.Config) -> str:
    # Read from the installed metadata: importing torch here would cost every run seconds,
    # also runs that never trace.
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"fwdorder: torch {torch_version}"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # Golden names match the doctest plugin's default glob `test*.txt`: keep every plugin
    # away from them, whatever the user's --doctest-glob.
    return True if collection_path.name.endswith(_GOLDEN_SUFFIX) else None


@pytest.fixture
def forward_trace(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Trace a model: `forward_trace(model, *inputs)` or `with forward_trace.record(model)`.

    Options come from the call, then the `fwdorder` markers (the closest first), then the
    `fwdorder_*` ini options. The test runs with torch seeded with 0 (its random states are
    put back after it), so the inputs and weights it makes are the same on every run: output
    fingerprints (`values=True`) depend on them.
    """
    from pytest_fwdorder.recording.seeding import seeded
    from pytest_fwdorder.tracing.forward import Tracer

    values = _ini_options(request.config)
    # Outermost first (module, class, function), so the closest marker's options win while
    # a class-level device and a test-level hide both apply.
    for marker in reversed(list(request.node.iter_markers(_MARKER))):
        values.update(_marker_options(marker))
    tracer = Tracer(TraceOptions().updated(values, source=f"@pytest.mark.{_MARKER}"))
    with seeded():
        yield tracer


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    # `assert snapshot == trace` must compare as `trace == snapshot` does.
    value = yield
    if fixturedef.argname == "snapshot":
        make_trace_aware(value)
    return value


def _marker_options(marker: pytest.Mark) -> dict[str, Any]:
    """The marker's options, or a one-line failure naming what is wrong and what is valid."""
    problem = _marker_problem(marker)
    if problem is not None:
        pytest.fail(problem, pytrace=False)  # outside `except`: the message shows once
    return dict(marker.kwargs)


def _marker_problem(marker: pytest.Mark) -> str | None:
    if marker.args:
        return (
            f"@pytest.mark.{_MARKER} takes keyword arguments only, got {marker.args!r}: "
            f"write @pytest.mark.{_MARKER}(device='meta'); the options are "
            f"{', '.join(OPTION_NAMES)}"
        )
    try:
        check_option_values(dict(marker.kwargs), source=f"@pytest.mark.{_MARKER}")
    except (TypeError, ValueError) as error:
        return str(error)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> Generator[None, list[list[str] | None], list[list[str] | None]]:
    # Not a firstresult hook: every implementation's explanation comes back in a list, and
    # pytest shows the first non-empty one. Ours goes first, ahead of syrupy's generic diff.
    explanations = yield
    if op != "==" or "pytest_fwdorder.trace" not in sys.modules:
        return explanations  # no trace was ever made: the diff is not even imported
    from pytest_fwdorder.calls.records import TraceRecords
    from pytest_fwdorder.diff.diffing import diff_traces
    from pytest_fwdorder.trace import Trace

    if isinstance(right, Trace) and not isinstance(left, TraceRecords):
        left, right = right, left  # `snapshot == trace` is explained as `trace == snapshot`
    if not isinstance(left, Trace):
        return explanations
    if isinstance(right, TraceRecords):
        ours: list[str] | None = [
            f"{headline(left)} == {headline(right)}",
            "traces differ (- right, + left):",
            *diff_traces(right, left).explanation(),
        ]
    else:
        ours = explain_snapshot_assertion(left, right, config.rootpath)
    return [ours, *explanations] if ours else explanations


# The report and the saved goldens, at the end of the run. Under pytest-xdist each worker
# keeps its own comparisons and sends them with its output; the controller writes.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # A failed assert_matches_reference keeps its parity report for `--fwdorder-report`.
    report = yield
    kept = item.config.stash.get(PARITY_FAILURES_KEY, None)
    error = call.excinfo.value if call.excinfo is not None else None
    if kept is not None and isinstance(error, ReferenceMismatchError) and error.report:
        from pytest_fwdorder.report.parity_html import parity_report_html

        kept.append(ParityFailure(item.nodeid, parity_report_html(error.report)))  # type: ignore[arg-type]
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    # A worker that crashed has no output: each receiver decides what that means.
    worker_output = getattr(node, "workeroutput", None) or {}
    kept = node.config.stash.get(COMPARISONS_KEY, None)
    sent = worker_output.get(WORKER_OUTPUT_KEY)
    if kept is not None and sent:
        comparisons, problems = from_worker_output(sent)
        kept.extend(comparisons)
        outputs = node.config.stash[_OUTPUTS_KEY]
        outputs.facet_warnings.extend([*worker_output.get(WORKER_WARNINGS_KEY, ()), *problems])
    parity = node.config.stash.get(PARITY_FAILURES_KEY, None)
    sent_parity = worker_output.get(PARITY_WORKER_OUTPUT_KEY)
    if parity is not None and sent_parity:
        parity.extend(ParityFailure(**failure) for failure in sent_parity)
    receive_held_goldens(node.config, worker_output)
    receive_seen_goldens(node.config, worker_output)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None]:
    # Around syrupy's clean-up of unused goldens: hold back those a deletion could lose.
    held = hold_unfinished_goldens(
        session, exitstatus, collection_failed=_collection_failed(session)
    )
    yield
    send_held_goldens(session.config, held)  # in a pytest-xdist worker, to the controller
    send_seen_goldens(session.config)
    message = None
    if held is not None:
        message = held_goldens_message(session, held, put_back_held_goldens(held, session))
    if message is not None:
        session.config.stash[_HELD_MESSAGE_KEY] = message
    _review_obsolete_goldens(session, exitstatus, held)
    _write_outputs(session)


def _review_obsolete_goldens(
    session: pytest.Session, exitstatus: int, held: HeldGoldens | None
) -> None:
    """In an update run, list the goldens no test asserted, deleted or kept."""
    review = session.config.stash.get(_UPDATE_REVIEW_KEY, None)
    if review is None or hasattr(session.config, "workerinput"):
        return
    unsafe = unsafe_session_reason(
        session, exitstatus, collection_failed=_collection_failed(session)
    )
    review.obsolete = obsolete_goldens_message(
        session, held.saved if held is not None else (), unsafe=unsafe is not None
    )


def _collection_failed(session: pytest.Session) -> bool:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    errors = getattr(reporter, "stats", {}).get("error", [])
    return any(isinstance(report, pytest.CollectReport) for report in errors)


def _write_outputs(session: pytest.Session) -> None:
    config = session.config
    outputs = config.stash.get(_OUTPUTS_KEY, None)
    if outputs is None:
        return
    comparisons = config.stash[COMPARISONS_KEY]
    parity_failures = config.stash[PARITY_FAILURES_KEY]
    worker_output = getattr(config, "workeroutput", None)
    if worker_output is not None:
        worker_output[WORKER_OUTPUT_KEY], worker_output[WORKER_WARNINGS_KEY] = to_worker_output(
            comparisons
        )
        worker_output[PARITY_WORKER_OUTPUT_KEY] = [vars(failure) for failure in parity_failures]
        return
    if outputs.save_directory is not None:
        written = save_failed(comparisons, outputs.save_directory)
        if written:
            outputs.messages.append(
                f"fwdorder: new traces of {len(written)} failed golden(s) saved under "
                f"{outputs.save_directory}"
            )
    if outputs.report is not None:
        from pytest_fwdorder.report.html import render_report  # the page is built only when asked

        outputs.report.parent.mkdir(parents=True, exist_ok=True)
        page = render_report(comparisons, parity_failures=parity_failures)
        outputs.report.write_text(page, encoding="utf-8")
        parity = f" and {len(parity_failures)} failed parity check(s)" if parity_failures else ""
        outputs.messages.append(
            f"fwdorder: report of {len(comparisons)} trace(s){parity} written to {outputs.report}"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    held = terminalreporter.config.stash.get(_HELD_MESSAGE_KEY, None)
    if held is not None:
        terminalreporter.write_line(held)
    outputs = terminalreporter.config.stash.get(_OUTPUTS_KEY, None)
    for message in outputs.messages if outputs is not None else ():
        terminalreporter.write_line(message)
    if outputs is not None:
        # Here pytest's warnings summary shows them, and the reports are written: an error
        # filter (`filterwarnings = error`) fails the run without losing a comparison.
        warn_of_facets(outputs.facet_warnings)
