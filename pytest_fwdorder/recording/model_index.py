"""The model index: one walk over a model before it runs, and each module's entry.

An entry is what the recorder knows of a module (its path, class name, facts, mode) for the
length of a trace; the index adds the model's other names, callables and tied tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import nn

from pytest_fwdorder.calls.records import ModuleFacts, ModuleTensors
from pytest_fwdorder.hookspecs import module_facts_hooks_exist
from pytest_fwdorder.recording.attribute_layout import KeptLayout
from pytest_fwdorder.recording.bounded_cache import BoundedCache
from pytest_fwdorder.recording.distributed import qualified_class_name, user_class
from pytest_fwdorder.recording.index_cache import KeptIndexes, ModelReading
from pytest_fwdorder.recording.module_facts import (
    TensorIndex,
    index_tensors,
    module_facts,
    reads_training,
    remember_modules,
)
from pytest_fwdorder.recording.module_settings import MOST_CACHED_CLASSES


@dataclass(slots=True)
class ModuleEntry:
    """What the recorder knows of one module, worked out once per trace, before it runs.

    Facts come from the user's module as it was, never from stand-ins swapped in for a
    device: a meta trace and a CPU trace see the same module.
    """

    path: str
    registered: bool
    module_type: str
    scripted: bool
    facts: ModuleFacts
    # The module's mode, or None where its class computes the same in both (facts.reads_training).
    training: bool | None


_OPAQUE = ModuleFacts((), ModuleTensors(()), None)  # what Python cannot read in TorchScript


def module_entry(
    module: nn.Module,
    path: str,
    *,
    registered: bool,
    inside_script: bool = False,
    ask_plugins: bool = True,
) -> ModuleEntry:
    """The entry of one module: a registered one as the index meets it, or one met in forward."""
    module_type, scripted, mode_matters = _class_facts(type(module))
    if scripted:
        original_name = getattr(module, "original_name", None)
        module_type = original_name if isinstance(original_name, str) else module_type
        return ModuleEntry(path, registered, module_type, True, _OPAQUE, module.training)
    facts = _OPAQUE if inside_script else module_facts(module, ask_plugins=ask_plugins)
    training = module.training if mode_matters else None
    # Positional: this runs for every module of every trace.
    return ModuleEntry(path, registered, module_type, False, facts, training)


def typed_facts(entry: ModuleEntry) -> tuple[str, ModuleFacts]:
    """An entry's (class name, facts): one shared pair for modules of one class and facts.

    A trace keeps one per module; most modules repeat a few pairs.
    """
    key = (entry.module_type, id(entry.facts))  # the pair kept holds the facts alive
    pair = _TYPED_FACTS.get(key)
    if pair is None or pair[1] is not entry.facts:
        pair = _TYPED_FACTS.keep(key, (entry.module_type, entry.facts))
    return pair


_TYPED_FACTS: BoundedCache[tuple[str, int], tuple[str, ModuleFacts]] = BoundedCache(100_000)


# Per class: the name the user wrote it under, whether it is TorchScript's, and whether its
# code reads the mode. Asked for every module of every trace; a plain dict, as for facts'
# settings plans (why is there).
_CLASS_FACTS: BoundedCache[type, tuple[str, bool, bool]] = BoundedCache(MOST_CACHED_CLASSES)


def _class_facts(module_class: type) -> tuple[str, bool, bool]:
    found = _CLASS_FACTS.get(module_class)
    if found is None:
        found = _CLASS_FACTS.keep(
            module_class,
            (
                user_class(module_class).__name__,
                issubclass(module_class, torch.jit.ScriptModule),
                reads_training(module_class),
            ),
        )
    return found


@dataclass
class ModelIndex:
    """One walk over the model: its modules, their entries, other names and callables."""

    modules: list[nn.Module]
    entries: dict[int, ModuleEntry]
    aliases: dict[str, tuple[str, ...]]
    callable_paths: tuple[str, ...]
    # The modules whose state Python owns: not TorchScript ones, nor anything inside them.
    python_modules: list[nn.Module]
    python_paths: list[str]  # their paths, in their order: a kept index keeps these too
    tensors: TensorIndex
    # What a trace records of every module, by path: (class name, facts) and the qualified
    # class. Made once per walk, as a kept index is traced many times.
    facts_by_path: dict[str, tuple[str, ModuleFacts]]
    classes_by_path: dict[str, str]
    # The plan of where its modules' containers are (attribute_layout.py): one object that
    # every copy of a kept index shares, so the model's next traces find it planned.
    kept_layout: KeptLayout = field(default_factory=KeptLayout)
    # What checking a kept index read of the model, for the state capture right after it
    # (model_state.capture_state takes it, once); None for a model walked afresh.
    reading: ModelReading | None = None


def index_model(root: nn.Module) -> ModelIndex:
    """The index of `root`: kept from its last walk if nothing it was made from changed
    (index_cache.py), else walked again."""
    found = _KEPT_INDEXES.find(root)
    if found is not None:
        reading, kept = found
        # Fresh lists and the trace's own aliases; entries are only read (the recorder copies).
        return replace(
            kept,
            modules=reading.modules,
            python_modules=list(reading.modules),
            aliases=dict(kept.aliases),
            reading=reading,
        )
    ask_plugins = module_facts_hooks_exist()
    index = _walk_model(root, ask_plugins=ask_plugins)
    if not ask_plugins and len(index.python_modules) == len(index.modules):  # no TorchScript
        _KEPT_INDEXES.keep(
            root,
            index.modules,
            lambda: [index.entries[id(module)].facts for module in index.modules],
            replace(index, modules=[], python_modules=[]),  # the kept index holds no module
        )
    return index


# The indexes of the models walked last (plugins' facts and TorchScript: walked every time).
_KEPT_INDEXES: KeptIndexes[ModelIndex] = KeptIndexes(8)


def _walk_model(root: nn.Module, *, ask_plugins: bool) -> ModelIndex:
    """Walk `root` once: an entry for each module, its other names, callables and tensors."""
    modules: list[nn.Module] = []
    entries: dict[int, ModuleEntry] = {}
    other_names: dict[int, list[str]] = {}
    scripted_prefixes: list[str] = []
    callable_paths: list[str] = []
    python_modules: list[nn.Module] = []
    python_paths: list[str] = []
    named_modules = list(root.named_modules(remove_duplicate=False))
    remember_modules(len(named_modules))
    for path, module in named_modules:
        module_id = id(module)
        if module_id in entries:
            other_names.setdefault(module_id, []).append(path)
            continue
        inside_script = bool(scripted_prefixes) and path.startswith(tuple(scripted_prefixes))
        entry = module_entry(
            module, path, registered=True, inside_script=inside_script, ask_plugins=ask_plugins
        )
        entries[module_id] = entry
        modules.append(module)
        if inside_script:
            continue  # its calls never reach Python hooks
        if entry.scripted:
            scripted_prefixes.append(f"{path}.")
            callable_paths.append(path)
            continue
        python_modules.append(module)
        python_paths.append(path)
        if type(module).forward is not nn.Module.forward:
            callable_paths.append(path)
    return ModelIndex(
        modules=modules,
        entries=entries,
        aliases={entries[module_id].path: tuple(names) for module_id, names in other_names.items()},
        callable_paths=tuple(callable_paths),
        python_modules=python_modules,
        python_paths=python_paths,
        tensors=index_tensors(root, named_modules, with_keys=False),
        facts_by_path={entry.path: typed_facts(entry) for entry in entries.values()},
        classes_by_path={
            entries[id(module)].path: qualified_class_name(module) for module in modules
        },
    )


def attribute_path(owner: nn.Module, module: nn.Module, prefix: str) -> str | None:
    """Name an unregistered module by where its owner keeps it: `blocks[0]`, `heads['a']`."""
    for name, value in vars(owner).items():
        if value is module:
            return f"{prefix}{name}"
        if isinstance(value, (list, tuple)):
            for position, item in enumerate(value):
                if item is module:
                    return f"{prefix}{name}[{position}]"
        elif isinstance(value, dict):
            for key, item in value.items():
                if item is module:
                    return f"{prefix}{name}[{key!r}]"
    return None
