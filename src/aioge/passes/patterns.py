"""Pattern fusions that recover one op from the decomposed form exporters write.

- Gelu, as torch exports ``nn.GELU()``: ``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5``
  (also ``Mul(x, 1/sqrt 2)`` for the Div, and the 0.5 applied to x or to the sum first).
- LayerNormalization, as torch exports it before opset 17:
  ``m = ReduceMean(x); d = x - m; v = ReduceMean(d ** 2); y = d / Sqrt(v + eps)``, then
  optionally ``* gamma`` and ``+ beta``, over trailing axes.

Every intermediate must be read only inside the pattern, and every value must have x's
shape, so the fused op computes exactly what the pattern did.
"""

from __future__ import annotations

import math

import numpy as np

from aioge.ir.graph import Graph, Node, Value
from aioge.passes.rewrite import const_array, const_scalar, is_close, only_use, other_input, static_shape, substitute

__all__ = ["fuse_gelu", "fuse_layer_norm"]


def _op(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _next(graph: Graph, value: Value, op: str) -> Node | None:
    """The only reader of ``value`` when it is an ``op`` node."""
    node = only_use(graph, value)
    return node if _op(node, op) else None


def _scalar_operand(node: Node, value: Value, target: float) -> bool:
    """``node`` is binary, reading ``value`` and a constant close to ``target``."""
    return is_close(const_scalar(other_input(node, value)), target)


# -- Gelu -------------------------------------------------------------------------------


def fuse_gelu(graph: Graph) -> bool:
    """Replace the erf form of Gelu by one Gelu node; returns True if it replaced any."""
    changed = False
    for erf in graph.topological_order():
        if _op(erf, "Erf") and erf.inputs[0] is not None:
            match = _match_gelu(graph, erf)
            if match is not None:
                x, nodes = match
                if substitute(graph, nodes[-1], "Gelu", [x], {"approximate": "none"}, list(reversed(nodes))) is not None:
                    changed = True
    return changed


def _match_gelu(graph: Graph, erf: Node) -> tuple[Value, list[Node]] | None:
    """(x, the pattern's nodes from first to last) when ``erf`` sits in a Gelu pattern."""
    scaled = erf.inputs[0]
    pre = scaled.producer if scaled is not None else None
    if pre is None or only_use(graph, scaled) is not erf:  # type: ignore[arg-type]
        return None
    x = None
    for v in pre.inputs:
        if v is None:
            continue
        if _op(pre, "Div") and v is pre.inputs[0] and is_close(const_scalar(pre.inputs[1]), math.sqrt(2.0)):
            x = v
        elif _op(pre, "Mul") and _scalar_operand(pre, v, 1.0 / math.sqrt(2.0)):
            x = v
    if x is None or static_shape(x.desc) is None:
        return None
    add = _next(graph, erf.outputs[0], "Add")
    if add is None or not _scalar_operand(add, erf.outputs[0], 1.0):
        return None
    mul = _next(graph, add.outputs[0], "Mul")
    if mul is None:
        return None
    other = other_input(mul, add.outputs[0])
    nodes: list[Node]
    if other is x:  # (x * (1 + erf)) * 0.5
        last = _next(graph, mul.outputs[0], "Mul")
        if last is None or not _scalar_operand(last, mul.outputs[0], 0.5):
            return None
        nodes = [pre, erf, add, mul, last]
    elif (
        other is not None
        and other.producer is not None
        and _op(other.producer, "Mul")
        and only_use(graph, other) is mul
        and _scalar_operand(other.producer, x, 0.5)
    ):
        nodes = [other.producer, pre, erf, add, mul]
    elif other is not None and is_close(const_scalar(other), 0.5):  # ((1 + erf) * 0.5) * x
        last = _next(graph, mul.outputs[0], "Mul")
        if last is None or other_input(last, mul.outputs[0]) is not x:
            return None
        nodes = [pre, erf, add, mul, last]
    else:
        return None
    if any(n.outputs[0].desc != x.desc for n in nodes):
        return None  # something broadcast x to a bigger shape
    return x, nodes


# -- LayerNormalization -----------------------------------------------------------------


def fuse_layer_norm(graph: Graph) -> bool:
    """Replace the decomposed LayerNorm by one LayerNormalization; returns True if it did."""
    changed = False
    for mean in graph.topological_order():
        if not _op(mean, "ReduceMean"):
            continue
        match = _match_layer_norm(graph, mean)
        if match is None:
            continue
        x, scale, bias, axis, eps, nodes = match
        if scale is None:
            shape = static_shape(x.desc)
            scale = graph.constant(np.ones(shape[axis:], dtype=x.desc.dtype))  # type: ignore[index]
        attrs = {"axis": axis, "epsilon": eps, "stash_type": 1}
        inputs = [x, scale] + ([bias] if bias is not None else [])
        if substitute(graph, nodes[-1], "LayerNormalization", inputs, attrs, list(reversed(nodes))) is not None:
            changed = True
        else:
            graph.remove_unused_values()
    return changed


def _tail_axes(node: Node, rank: int) -> int | None:
    """The first axis when ``node`` (a ReduceMean with keepdims) reduces axes [k, rank)."""
    if not int(node.attrs.get("keepdims", 1)):
        return None
    axes_in = node.inputs[1] if len(node.inputs) > 1 else None
    if axes_in is None:
        axes = list(range(rank))
    else:
        data = const_array(axes_in)
        if data is None:
            return None
        axes = sorted(int(a) % rank for a in data.reshape(-1))
    if not axes or axes != list(range(axes[0], rank)):
        return None
    return axes[0]


def _match_layer_norm(graph: Graph, mean: Node) -> tuple[Value, Value | None, Value | None, int, float, list[Node]] | None:
    x = mean.inputs[0]
    shape = static_shape(x.desc) if x is not None else None
    if x is None or shape is None or not shape or x.desc.dtype not in ("float16", "float32", "float64"):
        return None
    axis = _tail_axes(mean, len(shape))
    sub = _next(graph, mean.outputs[0], "Sub")
    if axis is None or sub is None or sub.inputs[0] is not x or sub.inputs[1] is not mean.outputs[0]:
        return None
    d = sub.outputs[0]
    readers = [n for n, _ in d.uses]
    if any(o is d for o in graph.outputs):
        return None
    sq = next((n for n in readers if _op(n, "Pow") and n.inputs[0] is d and is_close(const_scalar(n.inputs[1]), 2.0)), None)
    if sq is None:
        sq = next((n for n in readers if _op(n, "Mul") and n.inputs[0] is d and n.inputs[1] is d), None)
    div = next((n for n in readers if _op(n, "Div") and n.inputs[0] is d), None)
    # d is read by the square (once as Pow, twice as Mul(d, d)) and the Div, nothing else.
    if (
        sq is None
        or div is None
        or len(d.uses) != (3 if sq.op_type == "Mul" else 2)
        or {id(n) for n in readers} != {id(sq), id(div)}
    ):
        return None
    var = _next(graph, sq.outputs[0], "ReduceMean")
    if var is None or _tail_axes(var, len(shape)) != axis:
        return None
    add = _next(graph, var.outputs[0], "Add")
    eps = const_scalar(other_input(add, var.outputs[0])) if add is not None else None
    if add is None or eps is None or eps < 0:
        return None
    root = _next(graph, add.outputs[0], "Sqrt")
    if root is None or only_use(graph, root.outputs[0]) is not div or div.inputs[1] is not root.outputs[0]:
        return None
    nodes = [mean, sub, sq, var, add, root, div]
    last = div
    scale = bias = None
    normalised = shape[axis:]
    mul = _next(graph, last.outputs[0], "Mul")
    if mul is not None:
        gamma = other_input(mul, last.outputs[0])
        if gamma is not None and _fits_normalised(gamma, normalised, x):
            scale, last = gamma, mul
            nodes.append(mul)
    add2 = _next(graph, last.outputs[0], "Add")
    if add2 is not None:
        beta = other_input(add2, last.outputs[0])
        if beta is not None and _fits_normalised(beta, normalised, x):
            bias, last = beta, add2
            nodes.append(add2)
    if any(n.outputs[0].desc.dtype != x.desc.dtype for n in nodes) or last.outputs[0].desc != x.desc:
        return None
    return x, scale, bias, axis, float(eps), nodes


def _fits_normalised(v: Value, normalised: tuple[int, ...], x: Value) -> bool:
    """``v`` broadcasts onto the normalised axes alone (LayerNormalization's Scale/B rule)."""
    s = static_shape(v.desc)
    if s is None or v.desc.dtype != x.desc.dtype or len(s) > len(normalised):
        return False
    return all(d in (1, n) for d, n in zip(reversed(s), reversed(normalised)))
