"""Graph builders, one per op schema in the registry.

``aioge.ops.matmul(a, b)``, ``aioge.ops.conv2d(x, w, b, strides=(2, 2))`` and so on: each
builder validates the attributes, infers the output descs and adds a node to the graph its
inputs belong to. Inputs that are not graph values (numbers, lists, numpy arrays) become
constants of that graph. ``apply`` is the general form that every builder calls.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.errors import GraphError, UnsupportedOpError
from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.ir.graph import Graph, Value, ValueKind
from aioge.ops.registry import REGISTRY, builder_name, get_schema
from aioge.ops.schema import InferContext, InferError, OpSchema

__all__ = ["apply", "infer_node", "schemas"]


def schemas() -> list[OpSchema]:
    """Every registered op schema, sorted by domain and name."""
    return [REGISTRY[k] for k in sorted(REGISTRY)]


def apply(
    op_type: str,
    inputs: Sequence[object],
    attrs: Mapping[str, Any] | None = None,
    *,
    num_outputs: int | None = None,
    name: str | None = None,
    output_names: Sequence[str] | None = None,
    domain: str = "",
    graph: Graph | None = None,
) -> list[Value]:
    """Add one ``op_type`` node and return its output values.

    Raises:
        UnsupportedOpError: no such op in the registry.
        GraphError: bad attributes, wrong input count, or inputs whose shapes or dtypes the
            op does not accept (the message names the node).
    """
    try:
        schema = get_schema(op_type, domain)
    except KeyError:
        raise UnsupportedOpError([(domain, op_type)], graph=graph.name if graph else None) from None
    graph = graph or _graph_of(inputs, op_type)
    node_name = name or graph._fresh(op_type.lower())
    like = _like_dtype(inputs)
    values = [None if x is None else _to_value(graph, x, like) for x in inputs]
    while values and values[-1] is None:
        values.pop()
    lo, hi = schema.inputs
    if len(values) < lo or (hi >= 0 and len(values) > hi):
        want = f"{lo}" if lo == hi else f"{lo} to {'any number' if hi < 0 else hi}"
        raise GraphError(f"{op_type} takes {want} inputs, got {len(values)}", graph=graph.name, node=node_name)
    try:
        norm = schema.normalise_attrs(attrs or {})
    except ValueError as exc:
        raise GraphError(str(exc), graph=graph.name, node=node_name) from None
    descs = infer_node(schema, [None if v is None else v.desc for v in values], [_known(v) for v in values], norm, num_outputs, graph.name, node_name)
    node = graph.add_node(op_type, values, norm, descs, name=node_name, output_names=output_names, domain=schema.domain)
    return list(node.outputs)


def infer_node(
    schema: OpSchema,
    in_descs: Sequence[TensorDesc | None],
    in_values: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any],
    num_outputs: int | None,
    graph: str,
    node: str,
) -> list[TensorDesc]:
    """Run a schema's shape inference, trimmed to the requested number of outputs.

    Raises:
        GraphError: inference rejected the inputs (naming graph and node).
    """
    ctx = InferContext(in_descs, in_values, attrs, num_outputs or 0)
    try:
        descs = schema.infer(ctx)
    except (InferError, ValueError, IndexError, TypeError) as exc:
        raise GraphError(f"{schema.name}: {exc}", graph=graph, node=node) from None
    lo, hi = schema.outputs
    if num_outputs is not None:
        if num_outputs < lo or (hi >= 0 and num_outputs > hi):
            raise GraphError(f"{schema.name} has {lo} to {hi} outputs, {num_outputs} requested", graph=graph, node=node)
        if len(descs) < num_outputs:
            raise GraphError(f"{schema.name} produces {len(descs)} outputs, {num_outputs} requested", graph=graph, node=node)
        return list(descs[:num_outputs])
    return list(descs) if hi < 0 else list(descs[:lo])


def _known(v: Value | None) -> np.ndarray | None:
    return v.data if v is not None and v.kind is ValueKind.CONSTANT else None


def _graph_of(inputs: Sequence[object], op_type: str) -> Graph:
    for x in inputs:
        if isinstance(x, Value):
            return x.graph
    raise GraphError(f"{op_type}: at least one input must be a value of a graph (got none)")


def _like_dtype(inputs: Sequence[object]) -> str | None:
    dtypes = [x.dtype for x in inputs if isinstance(x, Value)]
    for d in dtypes:
        if d != "bool":
            return d
    return dtypes[0] if dtypes else None


def _to_value(graph: Graph, x: object, like: str | None) -> Value:
    if isinstance(x, Value):
        return x
    if isinstance(x, np.ndarray):
        return graph.constant(x)
    if isinstance(x, bool):
        return graph.constant(np.asarray(x))
    if like is not None and isinstance(x, (int, float, list, tuple)):
        return graph.constant(np.asarray(x, dtype=numpy_dtype(like)))
    return graph.constant(np.asarray(x))


def _make_builder(schema: OpSchema) -> Callable[..., Any]:
    variadic = schema.inputs[1] < 0

    def builder(*inputs: object, name: str | None = None, num_outputs: int | None = None, **attrs: Any) -> Any:
        args: Sequence[object] = inputs
        if variadic and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            args = inputs[0]
        outs = apply(schema.name, args, attrs, num_outputs=num_outputs, name=name, domain=schema.domain)
        return outs[0] if len(outs) == 1 else tuple(outs)

    fname = builder_name(schema)
    builder.__name__ = builder.__qualname__ = fname
    attrs = ", ".join(f"{k}={v.default!r}" for k, v in schema.attrs.items())
    builder.__doc__ = f"{schema.name}: {schema.doc}.\n\nAttributes: {attrs or 'none'}. Returns the output value(s)."
    return builder


_ALIASES = {"conv": "conv2d"}
_BUILDERS: dict[str, Callable[..., Any]] = {builder_name(s): _make_builder(s) for s in REGISTRY.values()}
_BUILDERS.update({alias: _BUILDERS[target] for alias, target in _ALIASES.items() if target in _BUILDERS})
# A family submodule bound on the package (aioge.ops.shape, .conv, .attention) would shadow the
# builder of the same name, and module __getattr__ is never consulted then: the builder wins.
for _name, _builder in _BUILDERS.items():
    if isinstance(globals().get(_name), ModuleType):
        globals()[_name] = _builder


def __getattr__(name: str) -> Callable[..., Any]:
    try:
        return _BUILDERS[name]
    except KeyError:
        raise AttributeError(f"aioge.ops has no builder {name!r}") from None


def __dir__() -> list[str]:
    return sorted([*__all__, *_BUILDERS])
