"""Clean-up passes: Identity/Dropout removal and dead-code elimination."""

from __future__ import annotations

from aioge.ir.graph import Graph, ValueKind

__all__ = ["dead_code", "remove_identity"]


def remove_identity(graph: Graph) -> bool:
    """Bypass Identity nodes and inference Dropout (first output only, no mask used)."""
    changed = False
    for node in list(graph.nodes):
        if node.op_type == "Identity" or (node.op_type == "Dropout" and _dropout_is_identity(node)):
            src, out = node.inputs[0], node.outputs[0]
            if src is None or any(o is out for o in graph.outputs) and src.kind is not ValueKind.INTERMEDIATE:
                continue  # a graph output that is a graph input or constant keeps its node
            if any(o is out for o in graph.outputs) and any(o is src for o in graph.outputs):
                continue
            if any(o is out for o in graph.outputs):
                # Keep the output's name: the producer of src now produces the graph output.
                if len(src.uses) != 1 or src.producer is None:
                    continue
                graph.replace_all_uses(out, src)
                graph.remove_node(node)
                graph.rename(src, out.name)
            else:
                graph.replace_all_uses(out, src)
                graph.remove_node(node)
            changed = True
    return changed


def _dropout_is_identity(node) -> bool:  # type: ignore[no-untyped-def]
    if len(node.outputs) > 1 and node.outputs[1].uses:
        return False
    training = node.inputs[2] if len(node.inputs) > 2 else None
    if training is None:
        return True
    return training.kind is ValueKind.CONSTANT and not bool(training.data)


def dead_code(graph: Graph) -> bool:
    """Remove nodes none of whose outputs reach a graph output, then unused constants."""
    live: set[int] = set()
    stack = [v for v in graph.outputs]
    while stack:
        v = stack.pop()
        node = v.producer
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        stack.extend(x for x in node.inputs if x is not None)
    dead = [n for n in reversed(graph.topological_order()) if id(n) not in live]
    for node in dead:
        for out in node.outputs:
            for consumer, i in list(out.uses):
                consumer.set_input(i, None)
        graph.remove_node(node)
    before = len(graph.constants) + len(graph.variables)
    graph.remove_unused_values()
    return bool(dead) or before != len(graph.constants) + len(graph.variables)
