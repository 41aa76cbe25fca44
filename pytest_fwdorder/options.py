"""The trace options, each declared once by its `TraceOptions` field. No torch import.

`trace_forward`, `record`, the fixture's `Tracer`, the `fwdorder` marker, the
`fwdorder_*` ini options and the command line's flags all take exactly these names, so a
setting moves between them unchanged. A model keyword argument whose name is an option's
goes in `model_kwargs`.

Each field's metadata declares the rest of the option (a `TraceOption`): its kind, which
says how a value is parsed and checked and what ini type holds it, and its help texts.
The ini options (plugin.py), the marker check, the flags (cli/) and `check_option_values`
are derived from `OPTIONS`, and every entry point takes its options through
`TraceOptions.updated`, the one place they are checked: adding an option means a field here
and its behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Literal

from pytest_fwdorder.errors import did_you_mean

# The facets of a golden file that `hide` can turn off; all are shown by default, because
# a gate should be tight unless someone loosens it on purpose.
FACETS = ("settings", "parameters", "mode", "argument_names")
UNREGISTERED_POLICIES = ("warn", "error")
# How forwards run without a module call are found (direct_forwards.py): "watch" sees
# `module.forward(...)`, "profile" also `super().forward` and unbound runs, at a cost.
DIRECT_FORWARD_MODES = ("watch", "profile", "off")
# What `ops_skip` leaves out of the recorded operations by default (see operations.py);
# besides these groups it takes single operation names.
OPERATION_GROUPS = ("views", "conversions", "torch_modules")
# How far an output fingerprint (`values`) may move and still match its golden, as a
# fraction of the call's largest absolute value plus an absolute amount. Measured on the
# torchvision zoo across 3 CPU kernel sets x 1 and 2 threads (benchmarks/values_stability.py):
# floating-point models move at most 0.39 of it, a changed constant 86 times it; quantized
# models move beyond any useful tolerance (docs/numbers.md says so). A looser default would
# hide bf16 autocast, which moves fingerprints only about twice this.
VALUES_RELATIVE_TOLERANCE = 1e-3
VALUES_ABSOLUTE_TOLERANCE = 1e-6
Tolerance = tuple[float, float]  # (relative, absolute)
DEFAULT_VALUES_TOLERANCE: Tolerance = (VALUES_RELATIVE_TOLERANCE, VALUES_ABSOLUTE_TOLERANCE)

# How an option's value is parsed and checked:
# "device": a device name or None (a torch.device is taken as its name);
# "flag": True or False;
# "flag_or_function": True, False or a function;
# "choice": one of the option's `choices`;
# "names": names as a tuple, from "a b", "a,b" or any iterable (of the `choices`, if any);
# "number": a number at least 0, from an int, a float or its text ("1e-3", as the ini has it).
OptionKind = Literal["device", "flag", "flag_or_function", "choice", "names", "number"]
IniType = Literal["string", "bool", "args"]
_INI_TYPES: dict[OptionKind, IniType] = {
    "device": "string",
    "flag": "bool",
    "flag_or_function": "bool",
    "choice": "string",
    "names": "args",
    "number": "string",
}
# What a value of the wrong kind must be, for the kinds whose requirement is always the same.
_REQUIREMENTS: dict[OptionKind, str] = {
    "device": "be a string such as 'cpu' or 'meta'",
    "flag": "be True or False",
    "number": "be a number of at least 0",
}
_DECLARATION = "fwdorder option"


@dataclass(frozen=True)
class TraceOption:
    """One trace option: its name and default (from its field) and what its metadata declares.

    `ini_help` describes the `fwdorder_<name>` ini option, `flag_help` the `--<name>` flag
    (the ini's text when the declaration gives none).
    `requirement` and `example` make the message for a value of the wrong kind:
    "hide must <requirement>, got 5<example>"; `refused` the one for names outside
    `choices` ("cannot hide {names}: the facets are {choices}"). With `none_means_empty`,
    the single name "none" means no names, as the command line and the ini spell it.
    """

    kind: OptionKind
    ini_help: str
    flag_help: str = ""
    requirement: str = ""
    example: str = ""
    choices: tuple[str, ...] = ()
    refused: str = ""
    none_means_empty: bool = False
    name: str = ""
    default: Any = None

    @property
    def ini_type(self) -> IniType:
        return _INI_TYPES[self.kind]

    @property
    def ini_default(self) -> object:
        """The ini option's default: '' for None, a list for names."""
        if self.default is None:
            return ""
        if self.kind == "number":
            return repr(self.default)
        return list(self.default) if self.kind == "names" else self.default

    def from_ini(self, value: object) -> Any:
        """The value `config.getini` gave, as the option takes it ('' is no device, and a
        number's default)."""
        if self.kind == "device":
            return str(value) or None
        if self.kind == "number" and value == "":
            return self.default
        return value

    def from_flags(self, value: Any) -> Any:
        """The value of the option's flag in parsed command-line arguments: a names flag
        may be repeated, each time with names separated by commas."""
        if self.kind != "names":
            return value
        return ",".join(value) if value else self.default

    def parse(self, value: Any) -> Any:
        """`value` as the option keeps it; a value of the wrong kind as given, to check."""
        if self.kind == "device" and type(value).__name__ == "device":  # a torch.device
            return str(value)
        if self.kind == "number":
            return _number(value)
        if self.kind != "names":
            return value
        if isinstance(value, str):
            value = value.replace(",", " ").split()  # "settings mode", as in the ini
        if not isinstance(value, Iterable):
            return value
        names = tuple(value)
        return () if self.none_means_empty and names == ("none",) else names

    def problem(
        self, value: Any, *, source: str, spelled: str = ""
    ) -> TypeError | ValueError | None:
        """What is wrong with `value` for this option, or None when nothing is.

        The message starts with `source` (`trace_forward: `) and names the option as the
        caller wrote it, `spelled` (`--show-devices`, `fwdorder_show_devices`; default: its name).
        """
        spelled = spelled or self.name
        prefix = f"{source}: " if source else ""
        # A one-shot iterator is refused, not parsed: the check would use it up before
        # `TraceOptions` gets it. Once in `TraceOptions` (trace_forward's way) it is parsed.
        parsed = value if isinstance(value, Iterator) else self.parse(value)
        if not self._fits(parsed):
            wrong = ValueError if self.kind == "choice" else TypeError
            return wrong(
                f"{prefix}{spelled} must {self._requirement()}, got {value!r}{self.example}"
            )
        if self.kind == "device" and isinstance(parsed, str):
            problem = device_problem(parsed)
            if problem is not None:
                return ValueError(f"{prefix}{spelled} {parsed!r} {problem}")
        names_of_choices = self.kind == "names" and self.choices
        unknown = [name for name in parsed if name not in self.choices] if names_of_choices else []
        if unknown:
            names, choices = ", ".join(map(repr, unknown)), ", ".join(self.choices)
            return ValueError(f"{prefix}{self.refused.format(names=names, choices=choices)}")
        return None

    def as_metadata(self) -> dict[str, TraceOption]:
        """The metadata of the `TraceOptions` field this declares."""
        return {_DECLARATION: self}

    def _fits(self, value: Any) -> bool:
        """Whether a parsed value is of the option's kind (names outside `choices` aside)."""
        if self.kind == "device":
            return value is None or isinstance(value, str)
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "flag_or_function":
            return isinstance(value, bool) or callable(value)
        if self.kind == "choice":
            return value in self.choices
        if self.kind == "number":
            return isinstance(value, float) and value >= 0
        # Names of `choices` are each compared with them next; other names must be text.
        return isinstance(value, tuple) and (
            bool(self.choices) or all(isinstance(name, str) and name for name in value)
        )

    def _requirement(self) -> str:
        if self.kind == "choice":
            return "be " + " or ".join(map(repr, self.choices))
        return self.requirement or _REQUIREMENTS[self.kind]


@dataclass(frozen=True)
class TraceOptions:
    """How a trace is taken and what its golden shows.

    `device`: run the model there ('meta' traces without compute; None: where the model is).
    `show_devices`: write each tensor's device in the golden (off: goldens match across
    devices).
    `hide`: facets left out of the golden, any of `FACETS`: module settings, parameters and
    buffers (with the totals), train/eval mode, argument names.
    `unregistered`: what a module that owns parameters but is not registered under the
    model (kept in a plain list: neither trained nor saved) causes: a `FwdOrderWarning`
    ("warn") or an `UnregisteredModuleError` ("error").
    `show_local_shapes`: write each DTensor's local shard shape after its placements
    (`f32[2,16]{Shard(1) local=[2,8]}`; off: goldens match across ranks).
    `fold`: module paths (`layer1`, `<root>`) or type names (`Bottleneck`) whose calls are
    written as one line each, their inside summarized as `[+N calls folded]`; the header
    still counts every call.
    `ops`: record the torch-level operations each module's forward calls directly, as
    `~ relu(f32[2,16]) -> f32[2,16]` lines under its call.
    `ops_skip`: what `ops` leaves out: any of `OPERATION_GROUPS` (`views`, `conversions`,
    `torch_modules`: the operations inside torch.nn's own modules) or operation names.
    `backward`: run backward from the output and record its order as a second section:
    True (from the sum of the output's floating tensors) or a function of the output that
    returns the loss.
    `costs`: count what each call costs, written as a `costs:` fact under it (FLOPs with its
    children's, output bytes, its module's own parameter and buffer bytes at its first call)
    and as totals in the header (FLOPs, parameter bytes with tied tensors once, activations
    saved for backward, operations without a FLOP formula).
    `initialization`: record how the model initializes itself, as a header section: in build
    order, each initialization step of each parameter and buffer (`kaiming_uniform_(a=2.236)`,
    `fill_(1)`, a copy) and the random numbers it drew. Needs the builder form,
    `trace_forward(build, ...)`, so that the build runs under watch.
    `values`: write a fingerprint of each call's output as a `values:` fact (mean, standard
    deviation and largest absolute value of each tensor, NaN and Inf counts), with the
    forward (and a builder's build) run under seed 0; a golden's fingerprints match when each
    statistic is within the absolute tolerance plus the relative tolerance times the call's
    largest absolute value.
    `graph_breaks`: compile the model with torch.compile's dynamo (on a backend that needs
    no C++ compiler), run it on the traced inputs twice, and write a header section: the
    number of graphs, each graph break with its module call, reason and source line, and
    what the second call compiled again, with the guard that failed.
    `values_relative_tolerance`: that fraction (default 1e-3).
    `values_absolute_tolerance`: that amount (default 1e-6).
    `direct_forwards`: how forwards run without a module call (`self.mlp.forward(x)`, which
    module hooks never see) are found and listed in the header: "watch" (default) sees
    `module.forward(...)` and records such runs as `[direct]` calls; "profile" also sees
    forward code run any other way (`super().forward` on another module, `Mlp.forward(m, x)`,
    a bound forward kept from before the trace) through a profile function, at about 1.5-1.9
    times the trace's time, and lists those as not recorded; "off" looks for neither.
    """

    device: str | None = field(
        default=None,
        metadata=TraceOption(
            kind="device",
            ini_help="device forward_trace runs models on by default ('meta' traces without "
            "compute); empty: wherever the model is",
            flag_help="run the model there; 'meta' traces without compute or weights "
            "(default: the CPU, or where the factory builds it)",
        ).as_metadata(),
    )
    show_devices: bool = field(
        default=False,
        metadata=TraceOption(
            kind="flag",
            ini_help="show each tensor's device in golden files (off: goldens match across "
            "devices)",
            flag_help="write each tensor's device in the golden text",
        ).as_metadata(),
    )
    hide: tuple[str, ...] = field(
        default=(),
        metadata=TraceOption(
            kind="names",
            ini_help=f"facets left out of golden files, any of: {', '.join(FACETS)} "
            "(default: none)",
            flag_help=f"leave a facet out of the golden text, any of {', '.join(FACETS)} "
            "(repeat it, or separate with commas)",
            requirement="name facets",
            example=": write hide=('settings', 'mode')",
            choices=FACETS,
            refused="cannot hide {names}: the facets are {choices}",
        ).as_metadata(),
    )
    unregistered: str = field(
        default="warn",
        metadata=TraceOption(
            kind="choice",
            ini_help="a module that owns parameters but is not registered under the model: "
            "'warn' (default) or 'error'",
            flag_help="what a module that owns parameters but is not registered under the "
            f"model causes: {' or '.join(UNREGISTERED_POLICIES)} (default: warn)",
            choices=UNREGISTERED_POLICIES,
        ).as_metadata(),
    )
    show_local_shapes: bool = field(
        default=False,
        metadata=TraceOption(
            kind="flag",
            ini_help="show each DTensor's local shard shape after its placements (off: goldens "
            "match across ranks)",
            flag_help="write each DTensor's local shard shape after its placements",
        ).as_metadata(),
    )
    fold: tuple[str, ...] = field(
        default=(),
        metadata=TraceOption(
            kind="names",
            ini_help="module paths or type names whose calls golden files write as one line "
            "each, their inside summarized (default: none)",
            flag_help="write the calls of this module path or type (layer1, Bottleneck) as one "
            "line each, their inside summarized; repeat it, or separate with commas",
            requirement="name module paths or types",
            example=": write fold=('layer1', 'layer2') or fold=('Bottleneck',)",
        ).as_metadata(),
    )
    ops: bool = field(
        default=False,
        metadata=TraceOption(
            kind="flag",
            ini_help="record the torch-level operations each module's forward calls directly",
        ).as_metadata(),
    )
    ops_skip: tuple[str, ...] = field(
        default=OPERATION_GROUPS,
        metadata=TraceOption(
            kind="names",
            ini_help=f"what ops leaves out: groups ({', '.join(OPERATION_GROUPS)}) or operation "
            "names (default: every group)",
            flag_help=f"what --ops leaves out: a group ({', '.join(OPERATION_GROUPS)}) or an "
            "operation name; repeat it, or separate with commas ('none': record every "
            "operation; default: every group)",
            requirement=f"name operation groups ({', '.join(OPERATION_GROUPS)}) or operations",
            example=": write ops_skip=('views', 'dropout'), or ops_skip=() to record every "
            "operation",
            none_means_empty=True,
        ).as_metadata(),
    )
    backward: Any = field(
        default=False,
        metadata=TraceOption(
            kind="flag_or_function",
            ini_help="run backward from the sum of the output's floating tensors and record "
            "its order",
            requirement="be True, False or a function of the output that returns the loss",
        ).as_metadata(),
    )
    costs: bool = field(
        default=False,
        metadata=TraceOption(
            kind="flag",
            ini_help="write what each call costs (FLOPs, output bytes, parameter bytes) and the "
            "totals in golden files",
            flag_help="write what each call costs: FLOPs with its children's, output bytes and "
            "its module's parameter bytes, with the totals in the header",
        ).as_metadata(),
    )

    initialization: bool = field(
        default=False,
        metadata=TraceOption(
            kind="flag",
            ini_help="record how the model initializes itself in golden files: each "
            "parameter's and buffer's initialization steps in build order, with the random "
            "numbers drawn (needs a builder: trace_forward(build, ...))",
            flag_help="record the model's initialization in build order, with the random "
            "numbers each step drew",
        ).as_metadata(),
    )
    values: bool = field(
        default=False,
        metadata=TraceOption(
            kind="flag",
            ini_help="write a fingerprint of each call's output (mean, std, largest absolute "
            "value) in golden files, with the forward run under seed 0",
            flag_help="write a fingerprint of each call's output: mean, std and largest "
            "absolute value of each tensor, with the forward run under seed 0",
        ).as_metadata(),
    )
    graph_breaks: bool = field(
        default=False,
        metadata=TraceOption(
            kind="flag",
            ini_help="compile the model with torch.compile (dynamo, no C++ compiler) on the "
            "traced inputs and write its graph breaks and recompilations in golden files",
            flag_help="compile the model with dynamo on the traced inputs and write where its "
            "graph breaks (module call, reason, source line) and what recompiles on a second "
            "call",
        ).as_metadata(),
    )
    values_relative_tolerance: float = field(
        default=VALUES_RELATIVE_TOLERANCE,
        metadata=TraceOption(
            kind="number",
            ini_help="how far an output fingerprint may move and still match, as a fraction "
            f"of the call's largest absolute value (default {VALUES_RELATIVE_TOLERANCE})",
            example=": write values_relative_tolerance=1e-2",
        ).as_metadata(),
    )
    values_absolute_tolerance: float = field(
        default=VALUES_ABSOLUTE_TOLERANCE,
        metadata=TraceOption(
            kind="number",
            ini_help="how far an output fingerprint may move and still match, added to the "
            f"relative tolerance (default {VALUES_ABSOLUTE_TOLERANCE})",
            example=": write values_absolute_tolerance=1e-5",
        ).as_metadata(),
    )
    direct_forwards: str = field(
        default="watch",
        metadata=TraceOption(
            kind="choice",
            ini_help="forwards run without a module call (self.mlp.forward(x)): 'watch' "
            "(default) records them as [direct] calls, 'profile' also finds super().forward "
            "and unbound runs (slower), 'off' looks for neither",
            flag_help="how forwards run without a module call are found: "
            f"{' or '.join(DIRECT_FORWARD_MODES)} (default: watch; profile also finds "
            "super().forward and unbound runs, at about 1.5-1.9x the trace's time)",
            choices=DIRECT_FORWARD_MODES,
        ).as_metadata(),
    )

    def __post_init__(self) -> None:
        given: dict[str, Any] = {}
        for option in OPTIONS:
            value = getattr(self, option.name)
            if value is option.default:
                continue  # the declared default, as most traces pass it: nothing to check
            value = option.parse(value)
            object.__setattr__(self, option.name, value)
            given[option.name] = value
        if given:
            check_option_values(given, source="TraceOptions")

    def updated(
        self, values: Mapping[str, Any], *, source: str, spelling: Callable[[str], str] = str
    ) -> TraceOptions:
        """These options with `values` over them: the one way an entry point takes options.

        Raises TypeError for an unknown name (with a "did you mean") or a value of the wrong
        kind, ValueError for a value outside the option's choices or an unknown device;
        messages start with `source`, the entry point as the caller wrote it, and name an
        option as `spelling` writes it (`--show-devices` on the command line).
        """
        if not values:
            return self
        check_option_values(dict(values), source=source, spelling=spelling)
        return replace(self, **values)


def take_options(keywords: dict[str, Any]) -> dict[str, Any]:
    """The trace options among a call's keyword arguments, taken out of `keywords`: what is
    left is the model's (`trace_forward(model, x, device="meta", mask=m)`)."""
    return {name: keywords.pop(name) for name in OPTION_NAMES if name in keywords}


def device_problem(device: str) -> str | None:
    """What is wrong with a device name (`"is not a torch device (...)"`), or None.

    The one device check of the package: the ini, the marker, the command line and
    `trace_forward` all come here. torch is imported only when a device is given, so
    pytest's start-up imports none.
    """
    import torch

    try:
        torch.device(device)
    except (RuntimeError, TypeError) as error:
        return f"is not a torch device ({error}): use 'cpu', 'meta' or 'cuda'"
    return None


def _number(value: Any) -> Any:
    """A number option's value as a float: from an int, a float or text such as "1e-3"; any
    other value as given, for the check to refuse."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _declared(option_field: Field[Any]) -> TraceOption:
    declaration: TraceOption = option_field.metadata[_DECLARATION]
    return replace(
        declaration,
        name=option_field.name,
        default=option_field.default,
        flag_help=declaration.flag_help or declaration.ini_help,
    )


OPTIONS: tuple[TraceOption, ...] = tuple(map(_declared, fields(TraceOptions)))
OPTION_NAMES: tuple[str, ...] = tuple(option.name for option in OPTIONS)


def check_option_values(
    values: dict[str, Any], *, source: str, spelling: Callable[[str], str] = str
) -> None:
    """Raise TypeError for an unknown option name (with a "did you mean") or a value of the
    wrong kind (a one-shot iterator included), ValueError for a value outside the option's
    choices or a device torch does not know.

    `spelling` turns an option's name into the way the caller writes it
    (`fwdorder_{name}` in the ini); `values` are keyed by the names themselves.
    """
    unknown = sorted(set(values) - set(OPTION_NAMES))
    if unknown:
        prefix = f"{source} got" if source else "got"
        hints = "".join(did_you_mean(name, OPTION_NAMES, lead="; ") for name in unknown)
        raise TypeError(
            f"{prefix} unknown option(s) {', '.join(map(repr, unknown))}: "
            f"the options are {', '.join(OPTION_NAMES)}{hints}"
        )
    for option in OPTIONS:
        if option.name not in values:
            continue
        problem = option.problem(values[option.name], source=source, spelled=spelling(option.name))
        if problem is not None:
            raise problem
