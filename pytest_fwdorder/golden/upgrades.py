"""What a torch upgrade may change in a golden while the model stays the same, and the
comparison that leaves it out.

A golden records what the model computes, so it should change on an upgrade only when that
does. Two things in a golden's text can change without it:

- the environment line, `# written with: torch 2.14.1, torchvision 0.29.1`, which says what
  wrote the golden and is never compared;
- a torch.nn module's settings line, when a release adds a constructor argument at the
  default that keeps the old behaviour (torch 2.14 added `BatchNorm2d(..., *, bias=True)`:
  every BatchNorm line written with 2.14 ends `, bias=True`, and none written with 2.8 do).

The rule, applied to both sides of every comparison: a torch.nn module's setting whose value
is this torch's constructor default, or that this torch's constructor does not take, is not
compared. A setting that differs from this torch's default on either side is compared, so a
changed default (a golden that holds `eps=1e-05` traced where the default became `1e-06`)
and a changed explicit value (torchvision's MaxViT `momentum=0.99` -> `0.01`) still fail.
Only settings lines of torch.nn classes are touched: a user module's `extra_repr`, the
parameters, buffers, shapes and the call order are compared as written.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

from pytest_fwdorder.golden.facet_facts import call_line_marks
from pytest_fwdorder.golden.format import (
    ENVIRONMENT_PREFIX,
    FACT_PREFIX,
    FORMAT_LINE,
    split_top_level,
)
from pytest_fwdorder.golden.line_facts import read_settings
from pytest_fwdorder.golden.parse import parse_call_line

_SETTINGS_TITLE = "settings: "
_RECORDED_DISTRIBUTIONS = ("torch", "torchvision")
_NO_DEFAULT = object()
_EXAMPLES = 3


def environment_line() -> str:
    """`# written with: torch 2.14.1, torchvision 0.29.1`: the releases that write a golden.

    Versions are read from the installed distributions (no import), without their local
    part (`+cpu`, `+cu130`): a CPU and a CUDA build of one release write the same goldens.
    """
    return ENVIRONMENT_PREFIX + ", ".join(
        f"{name} {version}" for name, version in installed_versions().items()
    )


@lru_cache(maxsize=1)
def installed_versions() -> dict[str, str]:
    """{'torch': '2.14.1', 'torchvision': '0.29.1'}: the recorded distributions installed."""
    versions: dict[str, str] = {}
    for name in _RECORDED_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name).partition("+")[0]
        except metadata.PackageNotFoundError:
            continue
    return versions


def written_with(text: str) -> dict[str, str] | None:
    """The versions a golden's environment line names, or None when it has none."""
    for line in text.splitlines():
        if line.startswith(ENVIRONMENT_PREFIX):
            versions: dict[str, str] = {}
            for item in line[len(ENVIRONMENT_PREFIX) :].split(", "):
                name, _, version = item.partition(" ")
                if name and version:
                    versions[name] = version
            return versions
        if not line.startswith("#"):
            return None  # the environment line is in the header, above the first call
    return None


def with_environment(text: str) -> str:
    """Golden text with the environment line after its format line; other text as it is."""
    first, newline, rest = text.partition("\n")
    if first != FORMAT_LINE or not newline:
        return text
    return f"{first}{newline}{environment_line()}\n{rest}"


def without_environment(text: str) -> str:
    """Golden text without its environment line, which no comparison reads."""
    if ENVIRONMENT_PREFIX not in text:
        return text
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith(ENVIRONMENT_PREFIX)
    )


def comparable_text(text: str) -> str:
    """The golden text a comparison reads: no environment line, and every torch.nn settings
    line without the settings that are at this torch's defaults or that it does not take."""
    lines = without_environment(text).splitlines(keepends=True)
    owner_type = ""
    marks = call_line_marks()
    for number, line in enumerate(lines):
        stripped = line.lstrip(" ")
        if not stripped or line.startswith("#") or stripped.startswith(marks):
            continue
        if not stripped.startswith(FACT_PREFIX):
            owner_type = parse_call_line(line.rstrip("\n")).module_type
            continue
        if stripped.startswith(FACT_PREFIX + _SETTINGS_TITLE):
            lines[number] = _comparable_settings_line(line, owner_type)
    return "".join(lines)


def same_model(old_text: str, new_text: str) -> bool:
    """Whether two golden texts differ at most in what an upgrade changes alone.

    Line by line, since leaving settings out never adds or removes a line; torch's
    constructors are asked only about settings lines whose setting names differ (a value
    that changed under the same name is a change, whatever this torch takes).
    """
    if old_text == new_text:
        return True
    old_lines = without_environment(old_text).splitlines()
    new_lines = without_environment(new_text).splitlines()
    if len(old_lines) != len(new_lines):
        return False
    owner_type = ""
    not_calls = (*call_line_marks(), FACT_PREFIX)
    for old_line, new_line in zip(old_lines, new_lines, strict=True):
        if old_line == new_line:
            if _is_call_line(old_line, not_calls):
                owner_type = parse_call_line(old_line).module_type
            continue
        if not (_is_settings_line(old_line) and _is_settings_line(new_line)):
            return False
        if _setting_names(old_line) == _setting_names(new_line):
            return False
        if _comparable_settings_line(old_line, owner_type) != _comparable_settings_line(
            new_line, owner_type
        ):
            return False
    return True


@dataclass(frozen=True)
class UpgradeDifferences:
    """What differs between a golden and a new trace only because of the torch release."""

    written_with: dict[str, str] | None  # the golden's versions, None without the line
    running: dict[str, str]
    settings_lines: int  # settings lines that differ only in settings left out
    examples: tuple[str, ...]  # `BatchNorm2d bias=True`, for the message

    def notes(self) -> list[str]:
        """Lines for a failure message; empty when there is nothing to say."""
        notes = []
        if self.written_with is not None and self.written_with != self.running:
            notes.append(
                f"golden written with {_versions_text(self.written_with)}, this run uses "
                f"{_versions_text(self.running)}"
            )
        if self.settings_lines:
            one = self.settings_lines == 1
            lines = f"{self.settings_lines} settings line{'' if one else 's'} differ{'s' if one else ''}"
            notes.append(
                f"{lines} only in torch.nn constructor arguments at this torch's "
                f"defaults or that it does not take ({', '.join(self.examples)}), the kind of "
                "change a torch upgrade makes alone: not compared, and left out of the settings "
                "lines below"
            )
        return notes


def upgrade_differences(old_text: str, new_text: str) -> UpgradeDifferences:
    """Which differences between two golden texts an upgrade would cause alone."""
    old_settings = _settings_lines(without_environment(old_text))
    new_settings = _settings_lines(without_environment(new_text))
    new_only = [line for line in new_settings if line not in set(old_settings)]
    examples: dict[str, None] = {}
    count = 0
    for owner_type, line in set(old_settings) - set(new_settings):
        names = _setting_names(line)
        candidates = [
            other
            for other_type, other in new_only
            if other_type == owner_type and _setting_names(other) != names
        ]
        if not candidates:
            continue  # no counterpart, or only values changed: a change, not an upgrade
        comparable = _comparable_settings_line(line, owner_type)
        for other in candidates:
            if _comparable_settings_line(other, owner_type) == comparable:
                count += 1
                examples.update(dict.fromkeys(_left_out(owner_type, line, other)))
                break
    return UpgradeDifferences(
        written_with=written_with(old_text),
        running=installed_versions(),
        settings_lines=count,
        examples=tuple(list(examples)[:_EXAMPLES]),
    )


def _settings_lines(text: str) -> list[tuple[str, str]]:
    """(owner's type, line) for each settings line of the text."""
    pairs: list[tuple[str, str]] = []
    owner_type = ""
    not_calls = (*call_line_marks(), FACT_PREFIX)
    for line in text.splitlines():
        if _is_call_line(line, not_calls):
            owner_type = parse_call_line(line).module_type
        elif _is_settings_line(line):
            pairs.append((owner_type, line))
    return pairs


def _is_call_line(line: str, not_calls: tuple[str, ...]) -> bool:
    """Whether `line` is a call line: not a header line, nor under a call (`not_calls`: the
    facts' prefix and the marks of the facets' lines)."""
    stripped = line.lstrip(" ")
    return bool(stripped) and not line.startswith("#") and not stripped.startswith(not_calls)


def _is_settings_line(line: str) -> bool:
    return line.lstrip(" ").startswith(FACT_PREFIX + _SETTINGS_TITLE)


def _setting_names(line: str) -> set[str]:
    """The names of a settings line's items; an unnamed item (`(96,)`) stands as its text."""
    body = line.lstrip(" ")[len(FACT_PREFIX + _SETTINGS_TITLE) :].rstrip("\n")
    names = set()
    for item in split_top_level(body):
        name, separator, _ = item.partition("=")
        names.add(name if separator and name.isidentifier() else f"({item})")
    return names


def _left_out(owner_type: str, old_line: str, new_line: str) -> list[str]:
    """`BatchNorm2d bias=True`: the settings one side has and the other does not."""
    old_items = read_settings(old_line.lstrip(" ")[len(FACT_PREFIX + _SETTINGS_TITLE) :]) or {}
    new_items = read_settings(new_line.lstrip(" ")[len(FACT_PREFIX + _SETTINGS_TITLE) :]) or {}
    return [
        f"{owner_type} {name}={value}"
        for items, others in ((old_items, new_items), (new_items, old_items))
        for name, value in items.items()
        if others.get(name) != value
    ]


def _comparable_settings_line(line: str, owner_type: str) -> str:
    indent = line[: len(line) - len(line.lstrip(" "))]
    body = line.strip("\n").lstrip(" ")[len(FACT_PREFIX + _SETTINGS_TITLE) :]
    defaults = constructor_defaults(owner_type)
    if defaults is None:
        return line
    kept = []
    for item in split_top_level(body):
        name, separator, value = item.partition("=")
        if not separator or not name.isidentifier():
            kept.append(item)  # an unnamed item of an extra_repr, `(96,)`: compared as it is
        elif name in defaults and defaults[name] != value:
            kept.append(item)
    newline = "\n" if line.endswith("\n") else ""
    return f"{indent}{FACT_PREFIX}{_SETTINGS_TITLE}{', '.join(kept)}{newline}"


@lru_cache(maxsize=256)
def constructor_defaults(type_name: str) -> dict[str, str | None] | None:
    """{argument: repr of its default, or None without one} of the torch.nn constructor that
    makes a module of that type name; None when no such constructor can be found.

    A torch.nn class of that name; else a class of that name in a loaded module (torchvision's
    `LayerNorm2d`) that takes both its constructor and its `extra_repr` from one torch.nn class,
    which then speaks for it. Names that several such classes share with different torch.nn
    bases find none.
    """
    module_class = _settings_class(type_name)
    if module_class is None:
        return None
    try:
        parameters = list(inspect.signature(module_class).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return None  # takes anything: its settings come from elsewhere, compare them all
    return {
        parameter.name: None if parameter.default is parameter.empty else repr(parameter.default)
        for parameter in parameters
        if parameter.kind is not parameter.VAR_POSITIONAL
    }


def _settings_class(type_name: str) -> type | None:
    if not type_name.isidentifier():
        return None
    torch = sys.modules.get("torch")
    if torch is None:
        # Only a comparison outside a trace gets here (`fwdorder review`, `fwdorder diff`):
        # importing torch costs a second there, and without it the rule could not apply.
        try:
            torch = importlib.import_module("torch")
        except ImportError:
            return None
    module_base: type = torch.nn.Module
    candidate = getattr(torch.nn, type_name, None)
    if isinstance(candidate, type) and issubclass(candidate, module_base):
        return candidate
    bases: set[type] = set()
    for module_name, module in list(sys.modules.items()):
        candidate = getattr(module, "__dict__", {}).get(type_name)
        if not (isinstance(candidate, type) and issubclass(candidate, module_base)):
            continue
        if module_name.startswith("torch.nn.modules."):
            return candidate
        base = _torch_nn_constructor_and_repr(candidate)
        if base is not None:
            bases.add(base)
    return bases.pop() if len(bases) == 1 else None


def _torch_nn_constructor_and_repr(module_class: type) -> type | None:
    """The torch.nn class that defines both `__init__` and `extra_repr` for `module_class`,
    or None when they come from elsewhere (then its settings are its own)."""
    owners = [
        next((base for base in module_class.__mro__ if name in vars(base)), None)
        for name in ("__init__", "extra_repr")
    ]
    owner = owners[0]
    if owner is None or owner is not owners[1]:
        return None
    module_name = owner.__module__ or ""
    return owner if module_name == "torch.nn" or module_name.startswith("torch.nn.") else None


def _versions_text(versions: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in versions.items()) or "no torch"
