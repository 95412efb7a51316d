"""Adding op nodes to a graph: ``apply``, the general form that every builder calls.

``apply`` validates the attributes against the op's schema, infers the output descs and adds
a node to the graph its inputs belong to. Inputs that are not graph values (numbers, lists,
numpy arrays) become constants of that graph. ``call_builder`` is what each typed builder of
``aioge.ops.builders`` runs; ``apply_one`` is what Value arithmetic runs (installed into
``aioge.ir`` with ``set_op_builder``, since ir sits below the registry).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.errors import GraphError, UnsupportedOpError
from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.ir.graph import Graph, Value, ValueKind, set_op_builder
from aioge.ops.registry import REGISTRY, get_schema
from aioge.ops.schema import InferContext, InferError, OpSchema

__all__ = ["Operand", "apply", "apply_one", "call_builder", "infer_node", "schemas"]

# What a builder takes as an input: a value of the graph, or data that becomes its constant
# (a number, a nested list, a numpy array), or None for an omitted optional input.
Operand = Value | np.ndarray | int | float | bool | Sequence[Any] | None


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
    descs = infer_node(
        schema,
        [None if v is None else v.desc for v in values],
        [_known(v) for v in values],
        norm,
        num_outputs,
        graph.name,
        node_name,
    )
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
    if not schema.containers:
        for i, d in enumerate(in_descs):
            if d is not None and d.container != "tensor":
                raise GraphError(f"{schema.name}: input {i} must be a tensor, got a {d}", graph=graph, node=node)
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


def apply_one(op_type: str, inputs: Sequence[object], /) -> Value:
    """Add one ``op_type`` node with default attributes and return its first output (Value arithmetic).

    Raises:
        GraphError: as ``apply``.
    """
    return apply(op_type, inputs)[0]


def call_builder(
    op_type: str,
    domain: str,
    inputs: Sequence[object],
    attrs: Mapping[str, Any],
    *,
    variadic: bool,
    name: str | None,
    num_outputs: int | None,
    graph: Graph | None = None,
) -> Any:
    """The body of every builder: ``apply``, then the one output, or a tuple of several.

    A variadic op (Concat, Sum, ...) also takes its inputs as one list or tuple; an op without
    inputs is told its ``graph``.

    Raises:
        GraphError: as ``apply``.
    """
    args: Sequence[object] = inputs
    if variadic and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        args = inputs[0]
    outs = apply(op_type, args, attrs, num_outputs=num_outputs, name=name, domain=domain, graph=graph)
    return outs[0] if len(outs) == 1 else tuple(outs)


set_op_builder(apply_one)
