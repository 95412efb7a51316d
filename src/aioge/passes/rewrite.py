"""Small rewriting tools the passes share: replacing a node's outputs while keeping graph
output names, reading constant operands, and checking single-use chains.

Everything edits through the Graph methods (``add_node``, ``Node.set_input``,
``replace_all_uses``, ``remove_node``, ``rename``), so use lists stay consistent.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.ir.graph import Graph, Node, Value, ValueKind
from aioge.ops import infer_node
from aioge.ops.registry import REGISTRY, get_schema

__all__ = [
    "RANDOM_OPS",
    "add_op",
    "const_array",
    "const_scalar",
    "is_graph_output",
    "only_use",
    "replace_node",
    "replace_values",
    "static_shape",
    "substitute",
]

# Ops whose result is drawn at random: never folded, never merged as common subexpressions.
# Ops whose outputs are not a function of their inputs (OpSchema.random): never merged or folded.
RANDOM_OPS = frozenset(s.name for s in REGISTRY.values() if s.random)


def is_graph_output(graph: Graph, value: Value) -> bool:
    return any(o is value for o in graph.outputs)


def can_stand_in(graph: Graph, old: Value, new: Value) -> bool:
    """True when ``new`` may replace ``old`` everywhere: when ``old`` is a graph output,
    ``new`` must be free to take its name (not an input, a variable or another output)."""
    if not is_graph_output(graph, old):
        return True
    return new.kind in (ValueKind.INTERMEDIATE, ValueKind.CONSTANT) and not is_graph_output(graph, new)


def replace_values(
    graph: Graph, pairs: Sequence[tuple[Value, Value]], remove: Sequence[Node], *, take_names: bool = False
) -> bool:
    """Make every use of each ``old`` read its ``new``, remove the ``remove`` nodes (their
    outputs must then be unused), and give each ``new`` that replaced a graph output the
    output's name, so the graph's outputs keep their names. With ``take_names`` every
    ``new`` (fresh outputs of a fused node) takes its ``old``'s name.

    Returns False, changing nothing, when some replacement cannot keep an output's name.
    """
    renames: list[tuple[Value, str]] = []
    for old, new in pairs:
        if not can_stand_in(graph, old, new):
            return False
        if take_names or is_graph_output(graph, old):
            renames.append((new, old.name))
    if len({id(v) for v, _ in renames}) != len(renames):
        return False  # one value cannot take two output names
    for old, new in pairs:
        graph.replace_all_uses(old, new)
    for node in remove:
        graph.remove_node(node)
    for new, name in renames:
        graph.rename(new, name)
    return True


def replace_node(graph: Graph, node: Node, news: Sequence[Value | None]) -> bool:
    """Replace the used outputs of ``node`` by ``news`` (None where unused) and remove it.

    Returns False, changing nothing, when an output's name cannot be kept.
    """
    pairs = []
    for old, new in zip(node.outputs, news):
        if new is not None:
            pairs.append((old, new))
        elif old.uses or is_graph_output(graph, old):
            return False
    return replace_values(graph, pairs, [node])


def add_op(
    graph: Graph, op_type: str, inputs: Sequence[Value | None], attrs: dict[str, Any], *, domain: str = "", num_outputs: int = 1
) -> Node:
    """Add a node of a registered op: attributes normalised, output descs inferred.

    Raises:
        GraphError: the op rejects the inputs or attributes (a pass bug: it checked first).
    """
    from aioge.errors import GraphError

    schema = get_schema(op_type, domain)
    try:
        norm = schema.normalise_attrs(attrs)
    except ValueError as exc:
        raise GraphError(f"{op_type}: {exc}", graph=graph.name) from None
    values = [const_array(v) if v is not None else None for v in inputs]
    descs = infer_node(
        schema, [v.desc if v is not None else None for v in inputs], values, norm, num_outputs, graph.name, op_type
    )
    return graph.add_node(op_type, inputs, norm, descs, domain=schema.domain)


def const_array(value: Value | None) -> np.ndarray | None:
    """The data of a constant value, or None for anything else."""
    if value is None or value.kind is not ValueKind.CONSTANT:
        return None
    return value.data


def const_scalar(value: Value | None) -> float | None:
    """The one number a constant holds (any shape of size 1), or None."""
    data = const_array(value)
    if data is None or data.size != 1 or data.dtype.kind not in "fiub":
        return None
    return float(data.reshape(-1)[0])


def is_close(value: float | None, target: float, rel: float = 1e-6) -> bool:
    return value is not None and math.isclose(value, target, rel_tol=rel, abs_tol=rel)


def only_use(graph: Graph, value: Value) -> Node | None:
    """The one node reading ``value`` when that is its only use and it is not a graph output."""
    if len(value.uses) != 1 or is_graph_output(graph, value):
        return None
    return value.uses[0][0]


def static_shape(desc: TensorDesc | None) -> tuple[int, ...] | None:
    """The shape as ints when it is fully known, else None."""
    if desc is None or not desc.static:
        return None
    return tuple(int(d) for d in desc.shape)  # type: ignore[union-attr]


def other_input(node: Node, value: Value) -> Value | None:
    """For a binary node reading ``value`` once, its other input."""
    a, b = node.inputs[0], node.inputs[1]
    if a is value and b is not value:
        return b
    if b is value and a is not value:
        return a
    return None


def substitute(
    graph: Graph,
    last: Node,
    op_type: str,
    inputs: Sequence[Value | None],
    attrs: dict[str, Any],
    remove: Sequence[Node],
    *,
    domain: str = "",
) -> Node | None:
    """Put one new ``op_type`` node in place of a matched pattern ending in ``last``.

    The new node's output takes over ``last``'s uses and name; ``remove`` (the pattern's
    nodes, consumers before producers) goes. Returns the new node, or None — changing
    nothing — when the inferred output desc differs from ``last``'s (the pattern did not
    mean what it seemed), the op rejects the inputs, or the output name cannot be kept.
    """
    from aioge.errors import GraphError

    try:
        node = add_op(graph, op_type, inputs, attrs, domain=domain)
    except GraphError:
        return None  # the op rejects what the pattern would give it: leave the pattern be
    old = last.outputs[0]
    if node.outputs[0].desc != old.desc or not replace_values(graph, [(old, node.outputs[0])], remove, take_names=True):
        graph.remove_node(node)
        return None
    return node
