"""The command line's TARGETs: golden files read, and models loaded, built and traced.

A TARGET is a golden file or `package.module:factory`; every problem is a `CommandError`
said in one line, which `main` prints before it exits with 2.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.golden.format import FORMAT_VERSION
from pytest_fwdorder.golden.parse import format_problem, format_version
from pytest_fwdorder.options import OPTIONS, TraceOptions

if TYPE_CHECKING:
    from torch import nn

    from pytest_fwdorder.trace import Trace

# `1x3x224x224`: the sizes of one input tensor joined by `x`; `0` and a lone size are fine.
_INPUT_SPEC = re.compile(r"[0-9]+(?:x[0-9]+)*")


class CommandError(Exception):
    """A problem the user can fix, said in one line: the command prints it and exits with 2."""


class ModelBuildError(Exception):
    """The factory raised or returned something other than a model."""


def parse_input_spec(text: str) -> tuple[int, ...]:
    """`1x3x224x224` as (1, 3, 224, 224); raises CommandError for anything else."""
    if not _INPUT_SPEC.fullmatch(text):
        raise CommandError(
            f"bad --input {text!r}: write the sizes of one tensor joined by 'x', such as "
            "--input 1x3x224x224 (repeat --input for each input the model takes)"
        )
    return tuple(int(size) for size in text.split("x"))


def golden_text(target: str, arguments: argparse.Namespace) -> str:
    """The golden text of a TARGET: read from a golden file, or traced from a model."""
    path = Path(target)
    if path.is_file():
        return read_golden(path)
    if ":" not in target or target.endswith(".txt"):
        raise CommandError(
            f"TARGET {target!r} is neither a file nor package.module:factory: give the path "
            "of a golden file (*.fwdorder.txt), or a model such as torchvision.models:resnet50"
        )
    return trace_text(target, load_factory(target), arguments)


def read_golden(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"cannot read the golden file {str(path)!r}: {error}") from None
    from pytest_fwdorder.snapshot.policy import conflict_problem

    problem = conflict_problem(text) or (format_problem(text) if not text.strip() else None)
    if problem is not None:
        raise CommandError(f"{str(path)!r} {problem}")
    version = format_version(text)
    if version is None:
        first_line = text.split("\n", 1)[0][:80]
        raise CommandError(
            f"{str(path)!r} is not a pytest-fwdorder golden file: its first line is "
            f"{first_line!r}, not '# pytest-fwdorder trace (format {FORMAT_VERSION})'"
        )
    problem = format_problem(text)
    if problem is not None:
        raise CommandError(f"{str(path)!r} {problem}")
    return text


@contextlib.contextmanager
def _current_folder_importable() -> Iterator[None]:
    """Let `mymodels:build` import from the current folder, as `python -m` would."""
    folder = os.getcwd()
    added = folder not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added:
            sys.path.remove(folder)


def load_factory(target: str) -> Any:
    """The object `package.module:factory` names; CommandError when it cannot be found."""
    module_name, _, attribute_path = target.partition(":")
    if not module_name or not attribute_path:
        raise CommandError(
            f"TARGET {target!r} must be package.module:factory, such as torchvision.models:resnet50"
        )
    try:
        with _current_folder_importable():
            value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise CommandError(
            f"cannot import {module_name!r} for TARGET {target!r}: {error}; check the name, "
            "and run from the folder that holds it or put that folder on PYTHONPATH"
        ) from None
    except Exception as error:
        raise CommandError(
            f"importing {module_name!r} for TARGET {target!r} failed: "
            f"{type(error).__name__}: {first_line(error)}"
        ) from None
    owner = module_name
    for name in attribute_path.split("."):
        if not hasattr(value, name):
            close = difflib.get_close_matches(name, dir(value), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise CommandError(f"{owner!r} has no attribute {name!r} (TARGET {target!r}){hint}")
        value, owner = getattr(value, name), f"{owner}.{name}"
    return value


def trace_text(target: str, factory: Any, arguments: argparse.Namespace) -> str:
    """Build the model `factory` makes, trace it on the `--input` tensors, render the trace."""
    return traced_target(target, factory, arguments).render()


def traced_target(target: str, factory: Any, arguments: argparse.Namespace) -> Trace:
    """Build the model `factory` makes and trace it on the `--input` tensors."""
    from pytest_fwdorder.errors import MetaTraceError
    from pytest_fwdorder.tracing.forward import TensorSpec, trace_model

    options = trace_options(arguments)
    inputs = tuple(TensorSpec(shape, dtype) for shape, dtype in input_specs(target, arguments))
    builder = model_builder(target, factory, train=arguments.train)
    described = ", ".join(arguments.input)
    try:
        trace = trace_model(builder, inputs, {}, options)
    except ModelBuildError as error:
        raise CommandError(str(error)) from None
    except MetaTraceError as error:
        if isinstance(error.__cause__, ModelBuildError):
            raise CommandError(str(error.__cause__)) from None
        raise CommandError(
            f"tracing {target} on the meta device failed: {one_line(error)}"
        ) from None
    except Exception as error:  # the model's own failure, said in one line
        raise CommandError(
            f"running {target} on inputs {described} failed: {type(error).__name__}: "
            f"{one_line(error)}"
        ) from None
    return trace


def trace_options(arguments: argparse.Namespace) -> TraceOptions:
    """The trace options the flags give; CommandError names a bad one as its flag."""
    values = {option.name: option.from_flags(getattr(arguments, option.name)) for option in OPTIONS}
    try:
        return TraceOptions().updated(values, source="", spelling=_flag)
    except (TypeError, ValueError) as error:
        raise CommandError(str(error)) from None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def input_specs(target: str, arguments: argparse.Namespace) -> list[tuple[tuple[int, ...], Any]]:
    """Each --input's sizes with its dtype."""
    import torch

    if not arguments.input:
        raise CommandError(
            f"TARGET {target!r} is a model: give its input sizes, such as --input 1x3x224x224"
        )
    shapes = [parse_input_spec(text) for text in arguments.input]
    names = arguments.input_dtype or ["float32"]
    if len(names) == 1:
        names = names * len(shapes)
    if len(names) != len(shapes):
        raise CommandError(
            f"{len(arguments.input_dtype)} --input-dtype for {len(shapes)} --input: give one "
            "dtype for every input, or one per --input in order"
        )
    dtypes = []
    for name in names:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise CommandError(
                f"bad --input-dtype {name!r}: use a torch dtype name such as float32, "
                "float16, bfloat16 or int64"
            )
        dtypes.append(dtype)
    return list(zip(shapes, dtypes, strict=True))


def model_builder(target: str, factory: Any, *, train: bool) -> Callable[[], nn.Module]:
    """A zero-argument function that builds the model with `factory` and sets its mode."""
    from torch import nn

    if not isinstance(factory, nn.Module):
        if not callable(factory):
            raise CommandError(
                f"TARGET {target!r} is a {type(factory).__name__}, not a model class, a "
                "zero-argument function that builds a model, or a model"
            )
        from pytest_fwdorder.tracing.building import required_parameters

        required = required_parameters(factory)
        if required:
            raise CommandError(
                f"TARGET {target!r} needs arguments to build the model "
                f"({', '.join(required)}): point TARGET at a zero-argument function that "
                "builds it, such as def build(): return Net(num_classes=10)"
            )

    def build() -> nn.Module:
        if isinstance(factory, nn.Module):
            model = factory
        else:
            try:
                model = factory()
            except Exception as error:
                raise ModelBuildError(
                    f"building the model with {target}() failed: {type(error).__name__}: "
                    f"{first_line(error)}"
                ) from error
            except SystemExit as exit_request:  # sys.exit(0) must not read as "no differences"
                raise ModelBuildError(
                    f"building the model with {target}() failed: it called sys.exit() "
                    "instead of returning a model: point TARGET at a function that returns "
                    "the model"
                ) from exit_request
        if not isinstance(model, nn.Module):
            raise ModelBuildError(
                f"{target}() returned {type(model).__name__!r}, not an nn.Module: point "
                "TARGET at a function that returns the model"
            )
        return model.train(train)

    build.__qualname__ = target
    return build


def first_line(error: BaseException) -> str:
    return str(error).strip().split("\n", 1)[0]


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
