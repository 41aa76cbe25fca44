"""The trace options: one declaration per option, and every entry point derived from it."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
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
)
from pytest_fwdorder.recording.tracing import Tracer, record, trace_forward

# The keyword-only arguments of the entry points that are not trace options.
NOT_OPTIONS = {"model_kwargs", "restore_state", "allow_empty"}


def option_keywords(function: Callable[..., Any]) -> dict[str, object]:
    """The option keyword arguments of an entry point, in order, with their defaults."""
    return {
        parameter.name: parameter.default
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.name not in NOT_OPTIONS
    }


def declared_defaults() -> dict[str, object]:
    return {option.name: option.default for option in OPTIONS}


@pytest.mark.parametrize("entry_point", [trace_forward, record], ids=["trace_forward", "record"])
def test_the_entry_points_take_every_declared_option_with_its_default(
    entry_point: Callable[..., Any],
) -> None:
    # An option added to TraceOptions and forgotten in a signature (or the other way round)
    # fails here, before a user finds it missing.
    assert option_keywords(entry_point) == declared_defaults()


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


def test_an_unknown_option_is_named_with_the_known_ones() -> None:
    with pytest.raises(
        TypeError,
        match=r"^the marker got unknown option\(s\) 'devce': the options are device, "
        r"show_devices, hide, unregistered, show_local_shapes, fold, ops, ops_skip, backward, costs, "
        r"initialization, values, graph_breaks, values_relative_tolerance, "
        r"values_absolute_tolerance, direct_forwards$",
    ):
        check_option_values({"devce": "meta"}, source="the marker")


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
