"""The trace options: one declaration per option, and every entry point derived from it."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pytest_fwdorder.options import (
    OPERATION_GROUPS,
    OPTION_NAMES,
    OPTIONS,
    TraceOptions,
    check_option_values,
    device_problem,
    take_options,
)
from pytest_fwdorder.tracing.forward import Tracer, record, trace_forward

# What TakesAnything's forward got, kept outside the model: a trace puts the model's own
# attributes back as they were.
KEYWORDS_SEEN: list[dict[str, Any]] = []


class TakesAnything(nn.Module):
    """A model whose forward takes any keyword argument, as many transformers models do."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        KEYWORDS_SEEN.append(kwargs)
        return self.linear(x)


def test_the_entry_points_declare_no_option_of_their_own() -> None:
    # The options are TraceOptions' fields, taken through TraceOptions.updated: an entry
    # point that spelled one out again could drift from the declaration.
    keywords = {
        name
        for entry_point in (trace_forward, record, Tracer.__call__, Tracer.record)
        for name in inspect.signature(entry_point).parameters
    }
    assert keywords & set(OPTION_NAMES) == set()


def test_every_option_given_to_trace_forward_is_taken_out_of_the_model_keywords() -> None:
    keywords = {"hide": "mode", "ops": True, "mask": 1}

    assert take_options(keywords) == {"hide": "mode", "ops": True}
    assert keywords == {"mask": 1}


def test_a_misspelt_option_of_trace_forward_is_a_type_error_naming_the_option() -> None:
    with pytest.raises(
        TypeError,
        match=r"^trace_forward got the keyword argument 'hidde', which is no trace option and "
        r"which Linear\.forward does not take: did you mean 'hide'\? The options are device, ",
    ):
        trace_forward(nn.Linear(2, 2), torch.ones(1, 2), hidde="mode")


def test_a_model_that_takes_any_keyword_gets_a_name_close_to_an_option() -> None:
    # The oracle of the test above can fail: the keyword is the model's when it can take it.
    KEYWORDS_SEEN.clear()

    trace_forward(TakesAnything(), torch.ones(1, 2), value=3)

    assert KEYWORDS_SEEN == [{"value": 3}]


def test_a_model_keyword_far_from_every_option_fails_in_the_model_itself() -> None:
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'mask'"):
        trace_forward(nn.Linear(2, 2), torch.ones(1, 2), mask=1)


@pytest.mark.parametrize(
    ("call", "source"),
    [
        (lambda: record(nn.Linear(2, 2), hidde="mode"), "record"),
        (lambda: Tracer().record(nn.Linear(2, 2), hidde="mode"), "forward_trace.record"),
    ],
    ids=["record", "fixture-record"],
)
def test_a_misspelt_option_of_record_is_a_type_error_with_a_did_you_mean(
    call: Callable[[], object], source: str
) -> None:
    with pytest.raises(
        TypeError,
        match=rf"^{re.escape(source)} got unknown option\(s\) 'hidde': the options are device, "
        r".*, direct_forwards; did you mean 'hide'\?$",
    ):
        call()


def test_an_option_of_the_fixture_wins_over_its_defaults_and_reaches_the_trace() -> None:
    tracer = Tracer(TraceOptions(hide=("mode",)))

    text = tracer(nn.Linear(2, 2), torch.ones(1, 2), hide="settings").render()

    assert "# hidden: settings" in text


@pytest.mark.parametrize("entry_point", ["trace_forward", "forward_trace"])
def test_a_bad_device_is_refused_by_the_one_device_check(entry_point: str) -> None:
    trace = trace_forward if entry_point == "trace_forward" else Tracer()
    with pytest.raises(
        ValueError,
        match=rf"^{entry_point}: device 'gpu0' is not a torch device \(.*\): use 'cpu', 'meta' "
        "or 'cuda'$",
    ):
        trace(nn.Linear(2, 2), torch.ones(1, 2), device="gpu0")


def test_the_device_check_passes_every_torch_device_name() -> None:
    assert [device_problem(name) for name in ("cpu", "meta", "cuda", "cuda:1")] == [None] * 4


def test_the_fixture_tracer_starts_from_the_declared_defaults() -> None:
    assert Tracer().options == TraceOptions()


def test_the_option_names_are_the_fields_in_declaration_order() -> None:
    assert OPTION_NAMES == (
        "device",
        "show_devices",
        "hide",
        "unregistered",
        "show_local_shapes",
        "fold",
        "ops",
        "ops_skip",
        "backward",
        "costs",
        "initialization",
        "values",
        "graph_breaks",
        "values_relative_tolerance",
        "values_absolute_tolerance",
        "direct_forwards",
    )


def test_every_option_has_an_ini_help_and_a_flag_help() -> None:
    missing = [option.name for option in OPTIONS if not option.ini_help or not option.flag_help]
    assert missing == []


def test_the_options_docstring_describes_every_option() -> None:
    documented = TraceOptions.__doc__ or ""
    assert [name for name in OPTION_NAMES if f"`{name}`:" not in documented] == []


def test_the_ini_defaults_are_the_declared_defaults_in_ini_form() -> None:
    ini_defaults = {option.name: (option.ini_type, option.ini_default) for option in OPTIONS}
    assert ini_defaults == {
        "device": ("string", ""),
        "show_devices": ("bool", False),
        "hide": ("args", []),
        "unregistered": ("string", "warn"),
        "show_local_shapes": ("bool", False),
        "fold": ("args", []),
        "ops": ("bool", False),
        "ops_skip": ("args", list(OPERATION_GROUPS)),
        "backward": ("bool", False),
        "costs": ("bool", False),
        "initialization": ("bool", False),
        "values": ("bool", False),
        "graph_breaks": ("bool", False),
        "values_relative_tolerance": ("string", "0.001"),
        "values_absolute_tolerance": ("string", "1e-06"),
        "direct_forwards": ("string", "watch"),
    }


def test_every_option_is_an_ini_option_of_the_plugin(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    values = {name: config.getini(f"fwdorder_{name}") for name in OPTION_NAMES}
    assert values == {option.name: option.ini_default for option in OPTIONS}


def test_an_empty_device_in_the_ini_is_no_device() -> None:
    device = next(option for option in OPTIONS if option.name == "device")
    assert (device.from_ini(""), device.from_ini("meta")) == (None, "meta")


@pytest.mark.parametrize(
    "value",
    [
        "settings mode",
        "settings,mode",
        "settings, mode",
        ["settings", "mode"],
        ("settings", "mode"),
    ],
)
def test_names_are_parsed_from_text_or_any_sequence(value: object) -> None:
    assert TraceOptions(hide=value).hide == ("settings", "mode")  # type: ignore[arg-type]


def test_names_are_parsed_from_any_iterable() -> None:
    assert TraceOptions(fold=(name for name in ["layer1", "layer2"])).fold == ("layer1", "layer2")


def test_hide_given_as_a_string_names_facets_everywhere() -> None:
    """Found reviewing 0.2.0: `trace_forward` did not take `hide` as one string."""
    text = trace_forward(nn.Linear(2, 2), torch.ones(1, 2), hide="settings mode").render()

    assert "# hidden: mode, settings" in text


def test_none_alone_skips_no_operation() -> None:
    assert TraceOptions(ops_skip="none").ops_skip == ()


def test_none_among_other_names_is_an_operation_name() -> None:
    assert TraceOptions(ops_skip=("none", "views")).ops_skip == ("none", "views")


def test_none_is_not_a_facet_to_hide() -> None:
    with pytest.raises(ValueError, match=r"^TraceOptions: cannot hide 'none': the facets are"):
        TraceOptions(hide="none")


def test_a_torch_device_is_kept_as_its_name() -> None:
    assert TraceOptions(device=torch.device("meta")).device == "meta"  # type: ignore[arg-type]


def test_a_repeated_names_flag_joins_its_values() -> None:
    hide = next(option for option in OPTIONS if option.name == "hide")
    assert TraceOptions(hide=hide.from_flags(["settings,parameters", "mode"])).hide == (
        "settings",
        "parameters",
        "mode",
    )


def test_a_names_flag_not_given_keeps_the_default() -> None:
    ops_skip = next(option for option in OPTIONS if option.name == "ops_skip")
    assert ops_skip.from_flags([]) == OPERATION_GROUPS


def test_an_unknown_option_is_named_with_the_known_ones_and_the_closest() -> None:
    with pytest.raises(
        TypeError,
        match=r"^the marker got unknown option\(s\) 'devce': the options are device, "
        r"show_devices, hide, unregistered, show_local_shapes, fold, ops, ops_skip, backward, costs, "
        r"initialization, values, graph_breaks, values_relative_tolerance, "
        r"values_absolute_tolerance, direct_forwards; did you mean 'device'\?$",
    ):
        check_option_values({"devce": "meta"}, source="the marker")


def test_an_option_is_named_as_the_caller_spells_it() -> None:
    with pytest.raises(TypeError, match=r"^ini: fwdorder_show_devices must be True or False"):
        check_option_values({"show_devices": "no"}, source="ini", spelling="fwdorder_{}".format)


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ({"device": 3}, TypeError, "device must be a string such as 'cpu' or 'meta', got 3"),
        ({"show_devices": "no"}, TypeError, "show_devices must be True or False, got 'no'"),
        ({"ops": 1}, TypeError, "ops must be True or False, got 1"),
        ({"hide": 5}, TypeError, "hide must name facets, got 5: write hide=('settings', 'mode')"),
        ({"fold": ("a", 3)}, TypeError, "fold must name module paths or types, got ('a', 3)"),
        ({"ops_skip": ("",)}, TypeError, "ops_skip must name operation groups (views, "),
        ({"backward": 3}, TypeError, "backward must be True, False or a function of the"),
        ({"unregistered": "ignore"}, ValueError, "unregistered must be 'warn' or 'error'"),
    ],
    ids=["device", "flag", "int-flag", "hide", "fold", "ops-skip", "backward", "choice"],
)
def test_a_value_of_the_wrong_kind_is_refused_with_what_to_write(
    values: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match="^the marker: " + re.escape(message)):
        check_option_values(values, source="the marker")


def test_show_devices_that_is_not_a_bool_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="show_devices must be True or False, got 'no'"):
        trace_forward(nn.Linear(2, 2), torch.ones(1, 2), show_devices="no")  # type: ignore[arg-type]


def test_a_one_shot_iterator_is_refused_by_the_check_rather_than_used_up() -> None:
    names = (name for name in ["layer1"])
    with pytest.raises(TypeError, match=r"^forward_trace: fold must name module paths or types"):
        check_option_values({"fold": names}, source="forward_trace")
    assert list(names) == ["layer1"]


def build_with_width(*, width: int) -> nn.Module:
    return nn.Linear(width, 2)


def test_a_builder_that_needs_a_keyword_only_argument_is_refused_before_it_runs() -> None:
    # The oracle: Python cannot call it with no arguments either.
    with pytest.raises(TypeError, match=r"missing 1 required keyword-only argument: 'width'"):
        build_with_width()  # type: ignore[call-arg]
    with pytest.raises(
        TypeError,
        match=r"^trace_forward expected an nn\.Module or a zero-argument function that builds "
        r"one, got 'build_with_width', which requires 'width': ",
    ):
        trace_forward(build_with_width, torch.ones(1, 2))


def test_the_command_line_refuses_the_same_builder_with_the_same_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_fwdorder.cli.main import EXIT_ERROR, main

    status = main(["show", "test_options:build_with_width", "--input", "1x2"])

    assert status == EXIT_ERROR
    assert "needs arguments to build the model (width)" in capsys.readouterr().err


def test_no_module_collects_options_through_locals() -> None:
    # Options read out of a function's locals() silently take any local of an option's name.
    package = Path(__file__).resolve().parents[1] / "pytest_fwdorder"
    offenders = [
        path.name for path in package.rglob("*.py") if "locals()" in path.read_text("utf-8")
    ]
    assert offenders == []
