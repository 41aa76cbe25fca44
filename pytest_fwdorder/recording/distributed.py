"""Models that outgrow plain eager modules: DTensors, class-swapping wrappers, torch.compile.

The one owner of how these are seen by a trace:

- a `DTensor` (tensor parallelism, FSDP2) is described by its global shape and its
  placements (`Shard(1)`, `Replicate()`, `Partial(sum)`), with its local shard's shape kept
  for `show_local_shapes` (which facets/local_shapes.py writes);
- FSDP2's `fully_shard` (and torch's composable `replicate`) swap a module's class for a
  generated subclass, `FSDPLinear` for `Linear`: the golden names the user's class;
- compiled modules run eagerly for the length of a trace, so hooks see every call and the
  golden equals the eager model's.

Nothing here imports `torch.distributed` or `torch._dynamo`: a DTensor can only exist, and
code can only be compiled, once the user has imported them, so their modules are looked up
in `sys.modules`. `describe_value` calls in here for every tensor subclass it meets, so the
checks are a dictionary lookup and an `isinstance`.
"""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from itertools import chain, compress

import torch
from torch import nn

from pytest_fwdorder.recording.bounded_cache import BoundedCache

# The module that defines `DTensor`, imported by every use of it.
_DTENSOR_MODULE = "torch.distributed.tensor"
# Wrappers that swap a module's class for `type(f"{prefix}{name}", (wrapper, cls), ...)`
# live in these packages (FSDP2's `FSDPModule`, composable `replicate`'s classes).
_CLASS_SWAPPING_PACKAGES = ("torch.distributed.",)


def dtensor_layout(tensor: torch.Tensor) -> tuple[str, tuple[int, ...]] | None:
    """The placements text and local shape of a DTensor; None for any other tensor.

    Placements are written one per mesh dimension, comma-separated and with shard
    dimensions counted from the front: `Shard(1)`, `Shard(0),Replicate()`, `Partial(sum)`.
    """
    module = sys.modules.get(_DTENSOR_MODULE)
    dtensor_class = getattr(module, "DTensor", None) if module is not None else None
    if dtensor_class is None or not isinstance(tensor, dtensor_class):
        return None
    dimensions = tensor.dim()
    placements = ",".join(placement_text(placement, dimensions) for placement in tensor.placements)
    # The local tensor as DTensor holds it; `to_local()` would add an autograd node.
    local = getattr(tensor, "_local_tensor", None)
    if not isinstance(local, torch.Tensor):
        local = tensor.to_local()
    return placements, tuple(local.shape)


def placement_text(placement: object, dimensions: int) -> str:
    """`Shard(1)`, `Replicate()`, `Partial(sum)`; any other placement by its repr.

    A shard dimension counted from the back (`Shard(-1)`, as ColwiseParallel asks for) is
    written counted from the front, so equal layouts read the same.
    """
    kind = type(placement).__name__
    if kind == "Shard":
        dimension = getattr(placement, "dim", None)
        if isinstance(dimension, int):
            if dimension < 0:
                dimension += dimensions
            return f"Shard({dimension})"
    if kind == "Replicate":
        return "Replicate()"
    if kind == "Partial":
        return f"Partial({getattr(placement, 'reduce_op', '?')})"
    return " ".join(repr(placement).split())


def user_class(module_class: type) -> type:
    """The class a user wrote, for a class a distributed wrapper generated from it.

    `fully_shard` turns a `Linear` into an instance of `FSDPLinear(FSDPModule, Linear)`;
    the user's class is the generated class's second base. Any other class is its own.
    """
    bases = module_class.__bases__
    if len(bases) != 2:
        return module_class
    wrapper, original = bases
    if (
        wrapper.__module__.startswith(_CLASS_SWAPPING_PACKAGES)
        and module_class.__name__ != original.__name__
        and module_class.__name__.endswith(original.__name__)
    ):
        return original
    return module_class


def qualified_class_name(module: nn.Module) -> str:
    """The module's own class with its Python module: `peft.tuners.lora.layer.Linear`."""
    own_class = type(module)
    name = _QUALIFIED_NAMES.get(own_class)
    if name is None:
        module_class = user_class(own_class)
        # A trace keeps one per module (`Trace.module_classes`): interned, the modules of
        # one class share one string instead of 80 bytes each.
        name = _QUALIFIED_NAMES.keep(
            own_class, sys.intern(f"{module_class.__module__}.{module_class.__qualname__}")
        )
    return name


# Per class, as the model index keeps its class names: asked for every module of every trace.
_QUALIFIED_NAMES: BoundedCache[type, str] = BoundedCache(10_000)


def user_class_name(module: nn.Module) -> str:
    """The name of the module's class as the user wrote it: `Linear`, not `FSDPLinear`."""
    return user_class(type(module)).__name__


def class_swapped_modules(root: nn.Module) -> dict[str, str]:
    """Each generated class name under `root` -> the user's class name, in model order."""
    if not _generated_classes_exist():
        return {}
    swapped: dict[str, str] = {}
    for module in root.modules():
        module_class = type(module)
        original = user_class(module_class)
        if original is not module_class:
            swapped.setdefault(module_class.__name__, original.__name__)
    return swapped


# The classes whose generated subclasses `(wrapper, user class)` stand in for a user's:
# FSDP2's `FSDPModule` (and replicate_with_fsdp's `ReplicateModule` below it), and
# composable `replicate`'s `DDP`.
_WRAPPER_CLASSES = (
    ("torch.distributed.fsdp", "FSDPModule"),
    ("torch.distributed._composable.replicate", "DDP"),
)


def _generated_classes_exist() -> bool:
    """Whether any wrapper has generated a class in this process.

    torchvision imports FSDP2 and replicate, so that they are imported says nothing; a
    generated class has two bases and hangs under its wrapper class. Asking costs
    microseconds, where looking at every module of every trace costs milliseconds.
    """
    for module_name, class_name in _WRAPPER_CLASSES:
        pending = [getattr(sys.modules.get(module_name), class_name, None)]
        while pending:
            wrapper = pending.pop()
            if not isinstance(wrapper, type):
                continue
            subclass: type
            for subclass in wrapper.__subclasses__():
                if len(subclass.__bases__) == 2:
                    return True
                pending.append(subclass)
    return False


def swapped_classes_message(entry_point: str, root: nn.Module, swapped: dict[str, str]) -> str:
    """The warning for a model whose modules' classes a wrapper swapped."""
    pairs = ", ".join(f"{generated} -> {original}" for generated, original in swapped.items())
    return (
        f"{entry_point} traced {user_class_name(root)} with module classes generated by a "
        f"distributed wrapper ({pairs}); the golden names the classes they wrap, and the "
        "wrapper's own machinery (all-gathers, reshards) is not part of the trace"
    )


@contextmanager
def compiled_code_run_eagerly(root: nn.Module) -> Iterator[None]:
    """For the length of a trace, run compiled code eagerly and look through compiled modules.

    A submodule replaced by `torch.compile(submodule)` is put back for the block (its
    parent's registry holds the `OptimizedModule` again afterwards), so paths and classes
    are the eager model's; `module.compile()` and compiled functions run eagerly
    (`torch.compiler.set_stance("force_eager")`), so hooks fire for every call instead of
    being traced into a graph.
    """
    # torch imports torch._dynamo for its own use; only an OptimizedModule is compiled.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    compiled_class = getattr(eval_frame, "OptimizedModule", None)
    if compiled_class is None:  # nothing can have been compiled
        yield
        return
    replaced: list[tuple[dict[str, nn.Module | None], str, nn.Module]] = []
    with ExitStack() as stack:
        stack.callback(_put_back_compiled, replaced)
        if _holds_compiled_modules(root, compiled_class):
            _replace_compiled_modules(root, compiled_class, replaced)
        # set_stance came with torch 2.6; before it, compiled code runs as it would.
        set_stance = getattr(torch.compiler, "set_stance", None)
        if set_stance is not None:
            stack.enter_context(set_stance("force_eager"))
        yield


def _holds_compiled_modules(root: nn.Module, compiled_class: type) -> bool:
    """Whether a module of this class is anywhere under `root`: the classes of all of them,
    gathered registry level by registry level in C.

    Every trace asks, once torchvision has imported dynamo; the model is rarely compiled,
    and then the walk that replaces (`_replace_compiled_modules`) is not needed.
    """
    seen = {id(root)}
    parents = [root]
    classes: set[type] = set()
    while parents:
        try:
            children = list(
                filter(
                    _IS_NOT_NONE,
                    chain.from_iterable(map(dict.values, map(_MODULES_OF, parents))),
                )
            )
        except TypeError:  # a registry that is not a dict (TorchScript's): the slow walk
            return True
        classes.update(map(type, children))
        # Only modules with children are walked on (most are leaves), each once: a module
        # registered twice, or inside itself, is met again.
        parents = list(compress(children, map(_MODULES_OF, children)))
        unique = dict(zip(map(id, parents), parents, strict=True))
        for met_already in seen.intersection(unique):
            del unique[met_already]
        seen.update(unique)
        parents = list(unique.values())
    return any(issubclass(module_class, compiled_class) for module_class in classes)


def _replace_compiled_modules(
    root: nn.Module,
    compiled_class: type,
    replaced: list[tuple[dict[str, nn.Module | None], str, nn.Module]],
) -> None:
    """Put each compiled module's eager module in its place, noting it in `replaced`."""
    pending = [root]
    seen: set[int] = set()
    while pending:
        registry = pending.pop()._modules
        for name, child in list(registry.items()):
            if child is None or id(child) in seen:
                continue
            seen.add(id(child))
            if isinstance(child, compiled_class):
                inner = _compiled_inner(child)
                if inner is not None:
                    replaced.append((registry, name, child))
                    registry[name] = child = inner
            pending.append(child)


_MODULES_OF = operator.attrgetter("_modules")
_IS_NOT_NONE = functools.partial(operator.is_not, None)


def _compiled_inner(module: nn.Module | None) -> nn.Module | None:
    """The eager module inside a torch.compile wrapper, however deeply wrapped."""
    inner = getattr(module, "_orig_mod", None)
    if not isinstance(inner, nn.Module):
        return None
    deeper = _compiled_inner(inner)
    return inner if deeper is None else deeper


def _put_back_compiled(replaced: list[tuple[dict[str, nn.Module | None], str, nn.Module]]) -> None:
    for registry, name, compiled in reversed(replaced):
        registry[name] = compiled
