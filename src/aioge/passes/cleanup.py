"""Clean-up passes: no-op removal (Identity, inference Dropout, same-type Cast) and
dead-code elimination."""

from __future__ import annotations

from aioge.ir.desc import canonical_dtype
from aioge.ir.graph import Graph, Node, ValueKind
from aioge.passes.rewrite import replace_node

__all__ = ["dead_code", "remove_identity"]


def remove_identity(graph: Graph) -> bool:
    """Bypass nodes that copy their input: Identity, inference-mode Dropout whose mask is
    unused, and Cast to the dtype the input already has.

    A node whose output is a graph output and whose input is a graph input, variable or
    another output stays: the output needs a value of its own name. Returns True if it
    removed any node.
    """
    changed = False
    for node in list(graph.nodes):
        if not _is_noop(node):
            continue
        src = node.inputs[0]
        if src is None:
            continue
        changed |= replace_node(graph, node, [src, *([None] * (len(node.outputs) - 1))])
    return changed


def _is_noop(node: Node) -> bool:
    if node.domain not in ("", "ai.onnx") or not node.inputs:
        return False
    if node.op_type == "Identity":
        return True
    if node.op_type == "Cast":
        src = node.inputs[0]
        return src is not None and canonical_dtype(node.attrs["to"]) == src.dtype
    if node.op_type == "Dropout":
        if len(node.outputs) > 1 and node.outputs[1].uses:
            return False
        training = node.inputs[2] if len(node.inputs) > 2 else None
        if training is None:
            return True
        return training.kind is ValueKind.CONSTANT and not bool(training.data)
    return False


def dead_code(graph: Graph) -> bool:
    """Remove nodes none of whose outputs reach a graph output, then constants and
    variables nothing reads. Returns True if it removed anything."""
    live: set[int] = set()
    stack = list(graph.outputs)
    while stack:
        v = stack.pop()
        node = v.producer
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        stack.extend(x for x in node.inputs if x is not None)
    dead = [n for n in reversed(graph.topological_order()) if id(n) not in live]
    for node in dead:
        # Every consumer of a dead node is dead too and goes first (reverse order), but a
        # dead node may read another dead node's output through several inputs.
        for out in node.outputs:
            for consumer, i in list(out.uses):
                consumer.set_input(i, None)
        graph.remove_node(node)
    before = len(graph.constants) + len(graph.variables)
    graph.remove_unused_values()
    return bool(dead) or before != len(graph.constants) + len(graph.variables)
