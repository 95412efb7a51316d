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

from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Graph, Node, Value, ValueKind
from aioge.ops.registry import get_schema
from aioge.passes.rewrite import RANDOM_OPS, is_graph_output, replace_node

__all__ = ["FOLD_MAX_BYTES", "constant_folding"]

log = logging.getLogger(__name__)

FOLD_MAX_BYTES = 1 << 30
# Ops whose output depends only on the shape of their input.
_SHAPE_ONLY = frozenset({"Shape", "Size"})


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
    if node.op_type in RANDOM_OPS or not node.outputs:
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
    args: list[np.ndarray | None] = []
    for v in node.inputs:
        if v is None:
            args.append(None)
        elif v.kind is ValueKind.CONSTANT:
            args.append(v.data)
        elif node.op_type in _SHAPE_ONLY and v.desc.static:
            # Only the shape is read: a zero-stride view stands in for the data.
            args.append(np.broadcast_to(np.zeros((), numpy_dtype(v.desc.dtype)), v.desc.shape))  # type: ignore[arg-type]
        else:
            return None
    schema = get_schema(node.op_type, node.domain)
    in_descs = [None if v is None else v.desc for v in node.inputs]
    impl = next((i for i in schema.impls if i.applies(in_descs, node.attrs)), schema.impls[0])
    try:
        with np.errstate(all="ignore"):
            run = impl.build(node.attrs, {}, in_descs, [o.desc for o in node.outputs])
            raw = run(args, None)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - it fails again at run time, with the node named
        log.debug("not folding %s (%s): %s: %s", node.name, node.op_type, type(exc).__name__, exc)
        return None
    results = []
    for o, r in zip(node.outputs, raw):
        a = np.asarray(r)
        if a.shape != tuple(o.desc.shape) or a.dtype != numpy_dtype(o.desc.dtype):  # type: ignore[arg-type]
            log.debug("not folding %s: kernel gave %s %s, inference %s", node.name, a.dtype, a.shape, o.desc)
            return None
        results.append(a)
    return results if len(results) == len(node.outputs) else None
