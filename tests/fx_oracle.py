"""torch.fx as an independent oracle: which leaf modules run, in what order, with what shapes."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from pytest_fwdorder import Trace


def fx_leaf_calls(model: nn.Module, *inputs: Any) -> list[tuple[str, list[tuple[int, ...]]]]:
    """(path, output shapes) of each call_module node of fx's graph, with ShapeProp's shapes."""
    graph_module = fx.symbolic_trace(model)
    ShapeProp(graph_module).propagate(*inputs)
    return [
        (str(node.target), _meta_shapes(node.meta.get("tensor_meta")))
        for node in graph_module.graph.nodes
        if node.op == "call_module"
    ]


def our_leaf_calls(model: nn.Module, trace: Trace) -> list[tuple[str, list[tuple[int, ...]]]]:
    """Our calls of modules fx keeps as leaves, leaving out calls nested inside such a call."""
    tracer = fx.Tracer()
    result = []
    inside_leaf_until_depth: int | None = None
    for call in trace:
        if inside_leaf_until_depth is not None and call.depth > inside_leaf_until_depth:
            continue
        inside_leaf_until_depth = None
        module = model.get_submodule(call.path)
        if call.path and tracer.is_leaf_module(module, call.path):
            result.append((call.path, [tuple(shape) for shape in call.output_shapes]))
            inside_leaf_until_depth = call.depth
    return result


def _meta_shapes(meta: object) -> list[tuple[int, ...]]:
    if meta is None:
        return []
    shape = getattr(meta, "shape", None)
    if isinstance(shape, torch.Size):
        return [tuple(shape)]
    if isinstance(meta, dict):
        return [found for value in meta.values() for found in _meta_shapes(value)]
    if isinstance(meta, (list, tuple)):
        return [found for value in meta for found in _meta_shapes(value)]
    return []
