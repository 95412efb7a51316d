"""Specialisation: a copy of a graph with its symbolic input dims fixed and every desc re-inferred.

Compilation always works on a specialised copy (the user's graph is never edited). Small
values that shape inference needs (``Shape`` of a static tensor, arithmetic on shape
constants) are evaluated on the way, for inference only; folding them into constants is
the ConstantFolding pass's job.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from aioge.errors import FeedError
from aioge.ir.desc import is_static
from aioge.ir.graph import Graph, Node, Value
from aioge.ops import infer_node
from aioge.ops.evaluate import known_outputs
from aioge.ops.registry import get_schema
from aioge.ops.schema import OpSchema

__all__ = ["input_signature", "specialize", "with_static_shapes"]


def input_signature(graph: Graph, shapes: Mapping[str, Sequence[int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The concrete input shapes a compile is specialised for, checked against the graph.

    Raises:
        FeedError: an input is missing, or a shape disagrees with the graph's static dims
            (or binds one symbol to two sizes).
    """
    out: list[tuple[str, tuple[int, ...]]] = []
    symbols: dict[str, int] = {}
    for v in graph.inputs:
        if not v.desc.is_tensor:
            out.append((v.name, ()))  # a sequence or optional: its tensors' shapes are the run's business
            continue
        if v.name not in shapes:
            if not is_static(v.shape):
                raise FeedError(
                    f"input {v.name!r} is {v.desc}: give its shape (shapes= or ge.inputShape; on the command "
                    f"line --input-shape {v.name}:D1,D2,...)",
                    graph=graph.name,
                    input=v.name,
                )
            out.append((v.name, tuple(int(d) for d in v.shape)))  # type: ignore[union-attr]
            continue
        shape = tuple(int(d) for d in shapes[v.name])
        _match(graph.name, v, shape, symbols)
        out.append((v.name, shape))
    return tuple(out)


def _match(graph: str, v: Value, shape: tuple[int, ...], symbols: dict[str, int]) -> None:
    want = v.shape
    if want is None:
        return
    if len(want) != len(shape):
        raise FeedError(f"input {v.name!r} expects {v.desc}, got shape {shape}", graph=graph, input=v.name)
    for w, got in zip(want, shape):
        if isinstance(w, int) and w != got:
            raise FeedError(f"input {v.name!r} expects {v.desc}, got shape {shape}", graph=graph, input=v.name)
        if isinstance(w, str) and w != "?":
            if symbols.setdefault(w, got) != got:
                raise FeedError(
                    f"input {v.name!r}: dimension {w!r} is {symbols[w]} in another input, {got} here",
                    graph=graph,
                    input=v.name,
                )


def with_static_shapes(graph: Graph, shapes: Mapping[str, tuple[int, ...]], option: str) -> Graph:
    """``graph`` with the named inputs fixed to ``shapes`` (ATC's ``--input_shape`` without
    gears: ``ge.inputShape`` alone); ``graph`` itself when ``shapes`` is empty.

    Raises:
        OptionError: ``shapes`` names no input of the graph or disagrees with an input's
            rank or static dims (``option`` is the value given, for the message).
    """
    from aioge.errors import OptionError

    if not shapes:
        return graph
    names = [v.name for v in graph.inputs]
    for name in shapes:
        if name not in names:
            raise OptionError("ge.inputShape", option, f"names no input {name!r} of graph {graph.name!r}; inputs are {names}")
    try:
        signature = input_signature(graph, shapes)
    except FeedError as exc:
        raise OptionError("ge.inputShape", option, f"a shape graph {graph.name!r} accepts: {exc}") from None
    return specialize(graph, signature)


def specialize(graph: Graph, signature: Sequence[tuple[str, tuple[int, ...]]]) -> Graph:
    """Return a copy of ``graph`` with inputs of the given shapes and re-inferred descs.

    Raises:
        GraphError: the graph is malformed, or an op rejects the shapes it now sees.
    """
    graph.validate()
    shapes = dict(signature)
    new = Graph(graph.name)
    mapping: dict[int, Value] = {}
    known: dict[int, np.ndarray] = {}
    for v in graph.inputs:
        if v.desc.is_tensor:
            mapping[id(v)] = new.input(v.name, shapes.get(v.name, v.shape), v.dtype)
        else:
            mapping[id(v)] = new.input(v.name, v.shape, v.dtype, v.desc.container)
    for v in graph.constants.values():
        c = new.constant(v.data, v.name)
        mapping[id(v)] = c
        known[id(c)] = c.data  # type: ignore[assignment]
    for v in graph.variables.values():
        mapping[id(v)] = new.variable(v.name, v.data)
    for node in graph.topological_order():
        schema = get_schema(node.op_type, node.domain)
        inputs = [None if x is None else mapping[id(x)] for x in node.inputs]
        in_descs = [None if x is None else x.desc for x in inputs]
        in_values = [None if x is None else known.get(id(x)) for x in inputs]
        descs = infer_node(schema, in_descs, in_values, node.attrs, len(node.outputs), graph.name, node.name)
        copy = new.add_node(
            node.op_type,
            inputs,
            node.attrs,
            descs,
            name=node.name,
            output_names=[o.name for o in node.outputs],
            domain=node.domain,
        )
        for old, out in zip(node.outputs, copy.outputs):
            mapping[id(old)] = out
        _evaluate_known(copy, schema, inputs, known)
    new.output(*(mapping[id(v)] for v in graph.outputs))
    return new


def _evaluate_known(node: Node, schema: OpSchema, inputs: list[Value | None], known: dict[int, np.ndarray]) -> None:
    """Evaluate a node whose inputs are known and whose outputs are small, for inference.

    Raises:
        GraphError: the node's kernel failed on its constant inputs.
    """
    in_descs = [None if x is None else x.desc for x in inputs]
    in_values = [None if x is None else known.get(id(x)) for x in inputs]
    results = known_outputs(
        schema, node.attrs, in_descs, in_values, [o.desc for o in node.outputs], graph=node.graph.name, node=node.name
    )
    for out, res in zip(node.outputs, results or ()):
        known[id(out)] = res
