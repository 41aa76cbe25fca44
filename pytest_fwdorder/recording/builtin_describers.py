"""The built-in describers: the first plugin of `pytest_fwdorder_describe_value`.

They describe values of other libraries' types that would otherwise read `<TypeName>`:
transformers caches, torchvision's `ImageList`, `torch.distributions` distributions, numpy
arrays, sparse and nested tensors. Each one looks at a value only when the value's class
(or a base class) comes from its library, and finds that library in `sys.modules`: a
library that is not imported cannot have made the value, and nothing here imports one.
They run last, so a project's own hook implementation wins over them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_fwdorder.calls.value_descriptions import (
    LiteralDescription,
    ObjectDescription,
    SequenceDescription,
    ValueDescription,
)
from pytest_fwdorder.hookspecs import hookimpl

if TYPE_CHECKING:
    import torch

    from pytest_fwdorder.recording.describe import Describer

# pytest registers this plugin at start-up, before anything imports torch: torch and the
# package's torch-importing modules are looked up when a value is described, by which
# time a model has imported them.
_Describe = Callable[[Any, "Describer"], "ValueDescription | None"]


@hookimpl(trylast=True)
def pytest_fwdorder_describe_value(value: object, describe: Describer) -> ValueDescription | None:
    """The description of the first library that knows the value's class or a base class."""
    for klass in type(value).__mro__[:-1]:
        describer = _BY_PACKAGE.get(klass.__module__.partition(".")[0])
        if describer is not None:
            described = describer(value, describe)
            if described is not None:
                return described
    return None


def describe_torch_value(value: Any, describe: Describer) -> ValueDescription | None:
    """Sparse and nested tensors, and `torch.distributions` distributions."""
    torch = sys.modules["torch"]  # the value's class is torch's: torch is imported
    if isinstance(value, torch.Tensor):
        return _unusual_tensor(value)
    distributions = sys.modules.get("torch.distributions")
    if distributions is not None and isinstance(value, distributions.Distribution):
        return describe.fields(
            type(value).__name__,
            {"batch_shape": _sizes(value.batch_shape), "event_shape": _sizes(value.event_shape)},
        )
    return None


def _unusual_tensor(tensor: torch.Tensor) -> ValueDescription | None:
    """`sparse_coo f32[4,4]`, `nested f32[2,*,3]` (`*`: a size that differs between items)."""
    from pytest_fwdorder.recording.describe import dtype_name

    torch = sys.modules["torch"]
    dtype = dtype_name(tensor.dtype)
    if tensor.is_nested:
        return LiteralDescription(f"nested {dtype}[{','.join(_nested_sizes(tensor))}]")
    if tensor.layout is not torch.strided:
        layout = str(tensor.layout).removeprefix("torch.")
        return LiteralDescription(f"{layout} {dtype}[{','.join(map(str, tensor.shape))}]")
    return None


def _nested_sizes(tensor: torch.Tensor) -> list[str]:
    """A nested tensor's sizes: the number of items, then each dimension's size or `*`."""
    if tensor.layout is sys.modules["torch"].jagged:
        # The ragged dimension is a symbolic size (`j1`, `j2`: numbered per process).
        return [str(size) if isinstance(size, int) else "*" for size in tensor.shape]
    item_sizes = [tuple(item.shape) for item in tensor.unbind()]
    if not item_sizes:
        return ["0"]
    columns = zip(*item_sizes, strict=True)
    return [str(len(item_sizes)), *(str(c[0]) if len(set(c)) == 1 else "*" for c in columns)]


def _sizes(shape: Sequence[int]) -> LiteralDescription:
    return LiteralDescription(f"[{','.join(map(str, shape))}]")


def describe_transformers_value(value: Any, describe: Describer) -> ValueDescription | None:
    """transformers' key/value caches: layers and the key and value shapes of each."""
    cache_utils = sys.modules.get("transformers.cache_utils")
    if cache_utils is None:
        return None
    encoder_decoder = getattr(cache_utils, "EncoderDecoderCache", None)
    if encoder_decoder is not None and isinstance(value, encoder_decoder):
        return ObjectDescription(
            type(value).__name__,
            (
                ("self_attention", describe(value.self_attention_cache)),
                ("cross_attention", describe(value.cross_attention_cache)),
            ),
        )
    cache = getattr(cache_utils, "Cache", None)
    if cache is None or not isinstance(value, cache):
        return None
    layers = getattr(value, "layers", None)
    if isinstance(layers, list):  # transformers 4.54 and later: one object per layer
        pairs = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers]
        kinds = {type(layer).__name__ for layer in layers}
    else:  # older releases kept two lists of tensors
        keys = getattr(value, "key_cache", None) or []
        values = getattr(value, "value_cache", None) or []
        pairs = list(zip(keys, values, strict=False))
        kinds = set()
    return _cache_description(type(value).__name__, pairs, kinds, describe)


def _cache_description(
    type_name: str, pairs: list[tuple[object, object]], kinds: set[str], describe: Describer
) -> ObjectDescription:
    """`DynamicCache(layers=2, keys=f32[1,4,5,8], values=f32[1,4,5,8])` when every layer
    holds alike; each layer's keys and values otherwise."""
    described = [(describe(keys), describe(values)) for keys, values in pairs]
    fields: list[tuple[str, ValueDescription]] = [("layers", LiteralDescription(str(len(pairs))))]
    if len(set(described)) == 1 and len(kinds) <= 1:
        keys, values = described[0]
        fields += [("keys", keys), ("values", values)]
    elif described:
        # One `(keys=..., values=...)` per layer: an empty type name renders as bare fields.
        per_layer = tuple(
            ObjectDescription("", (("keys", keys), ("values", values)))
            for keys, values in described
        )
        fields.append(("per_layer", SequenceDescription("list", per_layer)))
    return ObjectDescription(type_name, tuple(fields))


def describe_torchvision_value(value: Any, describe: Describer) -> ValueDescription | None:
    """torchvision's `ImageList`: the batched tensor and each image's size before padding."""
    image_list = sys.modules.get("torchvision.models.detection.image_list")
    if image_list is not None and isinstance(value, image_list.ImageList):
        return describe.fields(
            "ImageList",
            {"tensors": value.tensors, "image_sizes": [tuple(size) for size in value.image_sizes]},
        )
    return None


def describe_numpy_value(value: Any, describe: Describer) -> ValueDescription | None:
    """A numpy array or scalar: `np.f32[2,3]`, `np.i64[]`."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(value, (numpy.ndarray, numpy.generic)):
        return None
    name = value.dtype.name
    shape = ",".join(map(str, value.shape))
    return LiteralDescription(f"np.{_NUMPY_DTYPES.get(name, name)}[{shape}]")


_NUMPY_DTYPES = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
    "complex64": "c64",
    "complex128": "c128",
}

# A class's top-level package -> its library's describer.
_BY_PACKAGE: dict[str, _Describe] = {
    "torch": describe_torch_value,
    "transformers": describe_transformers_value,
    "torchvision": describe_torchvision_value,
    "numpy": describe_numpy_value,
}
