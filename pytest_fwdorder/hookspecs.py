"""Hook specifications, and the plugin manager that calls them inside and outside pytest.

Four hooks let a project fix what pytest-fwdorder cannot know about its types, and add
facets of its own, without forking it. Implement them in a `conftest.py` or an installed plugin, with or without the
`hookimpl` marker (`pytest.hookimpl` is the same marker):

    import pytest

    @pytest.hookimpl
    def pytest_fwdorder_describe_value(value, describe):
        if isinstance(value, QuantizedTensor):
            return describe.fields("QuantizedTensor", {"data": value.data, "scale": value.scale})
        return None

Inside pytest the specifications are added to pytest's own plugin manager
(`pytest_addhooks`), so conftest files and `pytest11` plugins implement them. Library calls
and the `fwdorder` command use a `FwdOrderPluginManager` that loads the plugins installed
under the entry-point group `pytest_fwdorder`; pytest loads that group too, so a plugin
registered there works in both. The built-in describers
(`pytest_fwdorder.recording.builtin_describers`) and the built-in facets
(`pytest_fwdorder.facets.values`, `...backward`, `...costs`, `...graph_breaks`, ...) are the
first plugins of either manager.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import pluggy

if TYPE_CHECKING:
    from pluggy import HookImpl
    from torch import nn

    from pytest_fwdorder.calls.call_line_facets import CallLineWriter
    from pytest_fwdorder.calls.facet_records import Facet, TensorAnnotation, TraceFacet
    from pytest_fwdorder.calls.value_descriptions import (
        LiteralDescription,
        ObjectDescription,
        ValueDescription,
    )

# pytest's own marker names: one marker serves pytest's plugin manager and ours.
PROJECT_NAME = "pytest"
ENTRY_POINT_GROUP = "pytest_fwdorder"
HOOK_PREFIX = "pytest_fwdorder_"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

CallView = Literal["fold", "hide"]
CALL_VIEWS: tuple[str, ...] = ("fold", "hide")
# Our own plugins, imported by name as pytest imports its default plugins: the first
# answers to the hooks are ours, written as any plugin's are.
BUILTIN_PLUGINS = (
    "pytest_fwdorder.recording.builtin_describers",
    # First of the facets with one value per trace: its header line comes before the others'
    # (`summary_lines`), and its function mode sees the model's own tensors (before costs').
    "pytest_fwdorder.facets.operations",
    "pytest_fwdorder.facets.values",
    "pytest_fwdorder.facets.initialization",
    "pytest_fwdorder.facets.backward",
    # After backward: its header lines follow backward's (`summary_lines`).
    "pytest_fwdorder.facets.costs",
    "pytest_fwdorder.facets.graph_breaks",
    "pytest_fwdorder.facets.devices",
    "pytest_fwdorder.facets.local_shapes",
)
# The built-in plugins that implement the facets hook alone: each is registered at start-up
# as a `_FacetsModule` under its own name, and imported when its facets are first asked for
# (a trace, a golden read), so a pytest run that never traces pays neither their import nor
# that of the golden format they write: about half of the plugin's start-up.
_FACETS_ONLY = tuple(name for name in BUILTIN_PLUGINS if name.startswith("pytest_fwdorder.facets."))


class Describer(Protocol):
    """The `describe` a `pytest_fwdorder_describe_value` hook gets (`describe.Describer`)."""

    def __call__(self, value: object) -> ValueDescription:
        """Any value as the golden shows it: `f32[1,8]`, `(i64[], 3)`."""
        ...

    def fields(self, type_name: str, fields: Mapping[str, object]) -> ObjectDescription:
        """`TypeName(name=description, ...)`, fields in the mapping's order."""
        ...

    def literal(self, text: str) -> LiteralDescription:
        """Fixed text, shown as it is."""
        ...


class HookSpecifications:
    """The hooks pytest-fwdorder calls; each one's docstring says when and shows an example."""

    @hookspec(firstresult=True)
    def pytest_fwdorder_describe_value(
        self, value: object, describe: Describer
    ) -> ValueDescription | str | None:
        """Describe a value of a type no built-in rule knows; None leaves it to others.

        Called only for values that would otherwise show as `<TypeName>`, never for a plain
        tensor. Return a description (`describe.fields(...)`, `describe(item)`), a string
        shown as it is, or None. The first answer that is not None wins; yours come before
        the built-in ones. A description must be stable: shapes, dtypes, sizes, names;
        never ids, addresses, timings or values computed from data.

            @pytest.hookimpl
            def pytest_fwdorder_describe_value(value, describe):
                if isinstance(value, Boxes):
                    return describe.fields("Boxes", {"tensor": value.tensor, "size": value.size})
                return None

        shows `Boxes(tensor=f32[3,4], size=(32, 32))` where `<Boxes>` stood.
        """
        raise NotImplementedError

    @hookspec
    def pytest_fwdorder_module_facts(self, module: nn.Module) -> Mapping[str, str] | None:
        """Extra facts of a module, written under its first call as `| name: text` lines.

        Called once per module per trace, before the model runs. Return a mapping of fact
        name to one line of text, or None; every plugin's facts are written, in the order
        the plugins answer.

            @pytest.hookimpl
            def pytest_fwdorder_module_facts(module):
                scheme = getattr(module, "quantization_scheme", None)
                return {"quantization": str(scheme)} if scheme is not None else None

        adds `| quantization: int8 per-channel` under each quantized module's first call.
        """
        raise NotImplementedError

    @hookspec
    def pytest_fwdorder_facets(self) -> Sequence[Facet | TraceFacet | TensorAnnotation] | None:
        """Facets every trace records (`pytest_fwdorder.Facet`); the built-in ones answer too.

        Called when a trace, diff or golden comparison first needs the facets, and again
        only when the plugins implementing it change: until then its answer serves them
        all, so return the same facets each time. Return facets or None; every
        plugin's facets are recorded, after the built-in ones and in the order the plugins
        answer (a built-in facet with an `option` only when the option is on), and each writes a
        `| title: text` fact under the calls it has a value for. A golden written without a
        facet differs from one written with it, as with any option. A facet with one value
        per trace (`MeasuredTraceFacet` or `WatchedTraceFacet`, calls/facet_records.py) is
        offered the same way, and recorded when its `option` is on; so is a
        `TensorAnnotation`, written onto each tensor's text (`f32[2,4]@cuda:0`).

            @pytest.hookimpl
            def pytest_fwdorder_facets():
                return [OutputElements()]

        adds `| output elements: 4,096` under each call whose output holds tensors, and a
        diff that says `output elements changed at 1 call: fc (Linear): 40 -> 80`. Each
        implementation is asked on its own (the built-in ones first), so a hook wrapper on
        this hook is not run.
        """
        raise NotImplementedError

    @hookspec(firstresult=True)
    def pytest_fwdorder_call_view(self, path: str, module_type: str) -> CallView | None:
        """How the calls of one module are shown: "fold", "hide", or None (shown in full).

        Called once per module path in a trace, after it was recorded. "fold" writes each
        of its calls as one line ending `[+N calls folded]`, as the `fold` option does;
        "hide" leaves its calls and the calls inside them out. The header still counts
        every call and names what was folded or hidden.

            @pytest.hookimpl
            def pytest_fwdorder_call_view(path, module_type):
                return "fold" if module_type == "Bottleneck" else None
        """
        raise NotImplementedError


class FwdOrderPluginManager(pluggy.PluginManager):
    """A plugin manager for use outside pytest, with the built-in describers registered.

    Like pytest's, it takes a `pytest_fwdorder_*` function without the `hookimpl` marker
    for an implementation.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(HookSpecifications)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        options = super().parse_hookimpl_opts(plugin, name)
        if options is None and name.startswith(HOOK_PREFIX) and callable(getattr(plugin, name)):
            return pluggy.HookimplOpts(
                wrapper=False,
                hookwrapper=False,
                optionalhook=False,
                tryfirst=False,
                trylast=False,
                specname=None,
            )
        return options


class _FacetsModule:
    """A built-in facets module as a plugin that imports it when its facets are first asked for.

    Registered under the module's own name, in the module's place among the built-in plugins:
    `-p no:` and the facets' order read it as the module.
    """

    def __init__(self, module_name: str) -> None:
        self.module_name = module_name

    def __repr__(self) -> str:
        return f"<facets of {self.module_name}>"

    @hookimpl
    def pytest_fwdorder_facets(self) -> Sequence[Facet | TraceFacet | TensorAnnotation] | None:
        facets: Sequence[Facet | TraceFacet | TensorAnnotation] | None
        facets = importlib.import_module(self.module_name).pytest_fwdorder_facets()
        return facets


# One for each module, so that a second plugin manager (pytester's, the library's) registers
# the same plugins.
_FACETS_MODULES = {module_name: _FacetsModule(module_name) for module_name in _FACETS_ONLY}


def register_builtin_plugins(manager: pluggy.PluginManager) -> None:
    """Register the built-in plugins and the `pytest_fwdorder` entry points, once each.

    Raises ValueError when a built-in plugin was blocked (`-p no:...`): its options would
    then do nothing, silently.
    """
    blocked = [name for name in BUILTIN_PLUGINS if manager.is_blocked(name)]
    if blocked:
        raise ValueError(
            f"{', '.join(blocked)} cannot be disabled: it is part of pytest-fwdorder (the "
            "built-in facets and describers), and the options it serves, such as values=True, "
            "would silently do nothing; remove the `-p no:` option and leave those options off "
            "instead"
        )
    for module_name in BUILTIN_PLUGINS:
        plugin = _FACETS_MODULES.get(module_name) or importlib.import_module(module_name)
        if not manager.is_registered(plugin):
            manager.register(plugin, name=module_name)
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if manager.get_plugin(entry_point.name) is not None or manager.is_blocked(entry_point.name):
            continue
        plugin = entry_point.load()
        if not manager.is_registered(plugin):
            manager.register(plugin, name=entry_point.name)


_STANDALONE: list[FwdOrderPluginManager] = []
# Plugin managers of running pytest sessions, innermost last (pytester runs nest them).
_ACTIVE: list[pluggy.PluginManager] = []


def plugin_manager() -> pluggy.PluginManager:
    """The plugin manager whose hooks a trace calls now.

    Inside a pytest session, pytest's own; elsewhere a `FwdOrderPluginManager` made on
    first use, with the built-in describers and installed plugins registered. Register a
    plugin of your own with `plugin_manager().register(my_plugin)`.
    """
    if _ACTIVE:
        return _ACTIVE[-1]
    if not _STANDALONE:
        manager = FwdOrderPluginManager()
        register_builtin_plugins(manager)
        _STANDALONE.append(manager)
    return _STANDALONE[0]


def use_plugin_manager(manager: pluggy.PluginManager) -> None:
    """Make `manager` the one traces call until `stop_using_plugin_manager(manager)`."""
    _ACTIVE.append(manager)


def stop_using_plugin_manager(manager: pluggy.PluginManager) -> None:
    if manager in _ACTIVE:
        _ACTIVE.remove(manager)
    # A finished session's plugins are not kept alive by the facets resolved for them.
    _RESOLVED_FACETS[:] = [
        resolved for resolved in _RESOLVED_FACETS if resolved.manager is not manager
    ]


def describe_with_plugins(value: object, describe: Describer) -> ValueDescription | str | None:
    """The first plugin's description of `value`, or None when no plugin knows it."""
    result: ValueDescription | str | None = plugin_manager().hook.pytest_fwdorder_describe_value(
        value=value, describe=describe
    )
    return result


def module_facts_from_plugins(module: nn.Module) -> tuple[tuple[str, str], ...]:
    """Every plugin's extra facts of `module` as (name, text) pairs; () when none has any.

    Costs one look-up when no plugin implements the hook, as is usual.
    """
    caller = plugin_manager().hook.pytest_fwdorder_module_facts
    if not caller.get_hookimpls():
        return ()
    facts: list[tuple[str, str]] = []
    answers: list[Mapping[str, str] | None] = caller(module=module)
    for answer in reversed(answers):  # pluggy answers last-registered first
        if answer is None:
            continue
        if not isinstance(answer, Mapping):
            raise TypeError(
                f"pytest_fwdorder_module_facts returned {type(answer).__name__!r} for "
                f"{type(module).__name__}: return a dict of fact name to text, or None"
            )
        facts.extend((str(name), " ".join(str(text).split())) for name, text in answer.items())
    return tuple(facts)


def module_facts_hooks_exist() -> bool:
    """Whether any plugin implements `pytest_fwdorder_module_facts`."""
    return bool(plugin_manager().hook.pytest_fwdorder_module_facts.get_hookimpls())


def call_view_hooks_exist() -> bool:
    """Whether any plugin implements `pytest_fwdorder_call_view`."""
    return bool(plugin_manager().hook.pytest_fwdorder_call_view.get_hookimpls())


def call_views_from_plugins(
    calls: Mapping[str, str],
) -> tuple[tuple[str, str], ...]:
    """(path, "fold" or "hide") for each module path a plugin chose a view for.

    `calls` maps each called module's path to its type name. () when no plugin
    implements the hook.
    """
    caller = plugin_manager().hook.pytest_fwdorder_call_view
    if not caller.get_hookimpls():
        return ()
    views: list[tuple[str, str]] = []
    for path, module_type in calls.items():
        view: Any = caller(path=path, module_type=module_type)
        if view is None:
            continue
        if view not in CALL_VIEWS:
            raise ValueError(
                f"pytest_fwdorder_call_view returned {view!r} for {path or '<root>'!r} "
                f"({module_type}): return 'fold', 'hide' or None"
            )
        views.append((path, view))
    return tuple(views)


@dataclass(frozen=True)
class _ResolvedFacets:
    """The facets checked for one manager's implementations of `pytest_fwdorder_facets`."""

    manager: pluggy.PluginManager
    # Held, not just their ids: an id cannot be reused while the record lives.
    implementations: tuple[HookImpl, ...]
    taken_titles: tuple[str, ...]
    facets: tuple[Facet, ...]
    trace_facets: tuple[TraceFacet, ...]
    annotations: tuple[TensorAnnotation, ...]


# The last facets resolved. Every trace, diff and golden comparison asks; the answer stays
# the same until a plugin that offers facets is registered or unregistered.
_RESOLVED_FACETS: list[_ResolvedFacets] = []


def plugin_facets(taken_titles: Sequence[str]) -> tuple[Facet, ...]:
    """The facets with a value per call the plugins offer now (`pytest_fwdorder_facets`, the
    built-in ones first), checked, in their order.

    `taken_titles` are the fact titles the golden's own facts use. Raises TypeError or
    ValueError for an offered object that is not a facet or whose title is taken.

    The hook is called again only when the plugins implementing it changed since the last
    call (a conftest loaded, `plugin_manager().register(...)`); a refusal is not kept, so a
    bad facet raises every time.
    """
    return _resolved_facets(taken_titles).facets


def trace_facets(taken_titles: Sequence[str]) -> tuple[TraceFacet, ...]:
    """The facets with one value per trace, written in the header, offered now (the
    built-in backward and graph breaks facets), checked, in their order."""
    return _resolved_facets(taken_titles).trace_facets


def call_line_writers(taken_titles: Sequence[str]) -> tuple[CallLineWriter, ...]:
    """The facets with one value per trace offered now that write lines under the calls
    (`line_mark`: the built-in operations first), in their order: how a golden's reader knows
    their lines without a trace."""
    from pytest_fwdorder.calls.call_line_facets import writes_call_lines

    return tuple(facet for facet in trace_facets(taken_titles) if writes_call_lines(facet))


def tensor_annotations(taken_titles: Sequence[str]) -> tuple[TensorAnnotation, ...]:
    """The annotations of each tensor's text offered now (the built-in devices and local
    shapes first), checked, in their order."""
    return _resolved_facets(taken_titles).annotations


def _built_in_first(implementations: Sequence[HookImpl]) -> list[HookImpl]:
    """The facets hook's implementations in the order they answer: the built-in plugins
    first, in their declared order, so that their facts come first in every golden whatever
    a plugin's hook priority, then the others in pluggy's order (the last registered first,
    `tryfirst` ones before)."""
    in_call_order = [
        implementation
        for implementation in reversed(implementations)
        if not (implementation.hookwrapper or implementation.wrapper)
    ]
    built_in = sorted(
        (one for one in in_call_order if one.plugin_name in BUILTIN_PLUGINS),
        key=lambda one: BUILTIN_PLUGINS.index(one.plugin_name),
    )
    return built_in + [one for one in in_call_order if one.plugin_name not in BUILTIN_PLUGINS]


def _answered_by(implementation: HookImpl) -> str:
    """`from the pytest_fwdorder_facets hook of the plugin 'name' (module.function)`."""
    function = implementation.function
    where = f"{function.__module__}.{function.__qualname__}"
    return (
        f"from the pytest_fwdorder_facets hook of the plugin {implementation.plugin_name!r} "
        f"({where})"
    )


def _resolved_facets(taken_titles: Sequence[str]) -> _ResolvedFacets:
    """Every facet offered now, checked once and kept until the plugins offering them change."""
    from pytest_fwdorder.calls.facet_records import (
        MeasuredTraceFacet,
        TensorAnnotation,
        WatchedTraceFacet,
        checked_facets,
    )

    manager = plugin_manager()
    caller = manager.hook.pytest_fwdorder_facets
    implementations, titles = tuple(caller.get_hookimpls()), tuple(taken_titles)
    for resolved in _RESOLVED_FACETS:
        if (
            resolved.manager is manager
            and resolved.implementations == implementations
            and resolved.taken_titles == titles
        ):
            return resolved
    answering: list[HookImpl] = []

    def offered() -> Iterator[object]:
        for implementation in _built_in_first(implementations):
            answering[:] = [implementation]
            yield from cast("Iterable[object] | None", implementation.function()) or ()

    try:
        checked = checked_facets(offered(), titles)
    except Exception as error:
        # Which plugin's hook raised, or offered what is refused, said where it is known.
        if answering:
            error.add_note(_answered_by(answering[0]))
        raise
    per_call: list[Facet] = []
    per_trace: list[TraceFacet] = []
    annotations: list[TensorAnnotation] = []
    for facet in checked:
        if isinstance(facet, (MeasuredTraceFacet, WatchedTraceFacet)):
            per_trace.append(facet)
        elif isinstance(facet, TensorAnnotation):
            annotations.append(facet)
        else:
            per_call.append(facet)
    resolved = _ResolvedFacets(
        manager, implementations, titles, (*per_call,), (*per_trace,), (*annotations,)
    )
    _RESOLVED_FACETS[:] = [resolved]
    return resolved
