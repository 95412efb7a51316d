"""Constant folding: nodes whose inputs are all known are evaluated now, with the op's own
kernel, and replaced by constants.

"Known" covers constants and, for ``Shape`` and ``Size``, any input of static shape — so
shape subgraphs (``Shape -> Gather -> Concat -> Reshape``'s shape input) fold away on a
specialised graph, and ``ConstantOfShape`` weights become constants. Random ops never fold,
and results over ``FOLD_MAX_BYTES`` (1 GiB) stay computed at run time. Below it, folding costs
no memory: unfolded, the arena would hold the same bytes on every run (the light/ models'
``ConstantOfShape`` weights reach 392 MiB, VGG-19's first FC layer, which refilling took 19 ms a
run on AlexNet's 144 MiB). A folded constant does travel in the compiled model and its ``.om``
(``ge.externalWeight`` moves it to ``weight/``).
"""

from __future__ import annotations

import logging

import numpy as np

from aioge.errors import GraphError
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Graph, Node, Value, ValueKind
from aioge.ops.evaluate import evaluate_node
from aioge.ops.registry import get_schema
from aioge.passes.rewrite import is_graph_output, replace_node

__all__ = ["FOLD_MAX_BYTES", "constant_folding"]

log = logging.getLogger(__name__)

FOLD_MAX_BYTES = 1 << 30


def constant_folding(graph: Graph) -> bool:
    """Replace every foldable node by constants; returns True if it folded any."""
    changed = False
    made: list[Value] = []
    for node in graph.topological_order():
        results = _evaluate(graph, node)
        if results is None:
            continue
        consts = [graph.constant(r) for r in results]
        made.extend(consts)
        if replace_node(graph, node, consts):
            changed = True
            log.debug("folded %s (%s) in graph %s", node.name, node.op_type, graph.name)
    if any(not c.uses for c in made):
        graph.remove_unused_values()
    return changed


def _evaluate(graph: Graph, node: Node) -> list[np.ndarray] | None:
    """The node's outputs computed from known inputs, or None when it cannot or should not fold."""
    schema = get_schema(node.op_type, node.domain)
    if schema.random or not node.outputs:
        return None
    if not any(o.uses or is_graph_output(graph, o) for o in node.outputs):
        return None  # dead: dead-code elimination removes it
    total = 0
    for o in node.outputs:
        if not o.desc.static:
            return None
        total += o.desc.size * numpy_dtype(o.desc.dtype).itemsize
    if total > FOLD_MAX_BYTES:
        return None
    in_descs = [None if v is None else v.desc for v in node.inputs]
    in_values = [v.data if v is not None and v.kind is ValueKind.CONSTANT else None for v in node.inputs]
    try:
        results = evaluate_node(
            schema, node.attrs, in_descs, in_values, [o.desc for o in node.outputs], graph=graph.name, node=node.name
        )
    except GraphError as exc:  # it fails again at run time, with the node named
        log.debug("not folding %s (%s): %s", node.name, node.op_type, exc)
        return None
    if results is None:
        log.debug("not folding %s (%s): inputs not known, or the kernel disagreed with inference", node.name, node.op_type)
    return results
