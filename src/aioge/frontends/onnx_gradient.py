"""ai.onnx.preview.training Gradient: reverse-mode differentiation at load time.

``Gradient(xs=[...], y=...)`` gives dy/dx for each named x, where y is a tensor the model
computes from them: the sum over y's elements, so the seed is a tensor of ones shaped like
y (as onnx.reference's and onnxruntime-training's Gradient do). The frontend walks the
aioge nodes between the xs and y backwards and emits each node's gradient rule as ordinary
ops, so the gradient is a part of the graph like any other (planned, fused, cached). Ops
without a rule on that path are refused with an UnsupportedOpError naming them.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from aioge.errors import UnsupportedOpError
from aioge.frontends.onnx_context import NodeContext
from aioge.ir.desc import is_static
from aioge.ir.graph import Node, Value

__all__ = ["GRADIENT_DOMAIN", "GRADIENT_RULES", "convert_gradient"]

GRADIENT_DOMAIN = "ai.onnx.preview.training"

# Rule: (ctx, node, gradient of its output 0) -> gradient of each input (None: not needed).
Rule = Callable[[NodeContext, Node, Value], Sequence["Value | None"]]


def convert_gradient(ctx: NodeContext) -> Sequence[Value]:
    """The gradients of y with respect to each x, in the order of attribute ``xs``.

    Raises:
        GraphError: y or an x is not a tensor of the model computed before this node.
        UnsupportedOpError: an op between the xs and y has no gradient rule here.
    """
    names, y_name = ctx.attrs.get("xs"), ctx.attrs.get("y")
    if not isinstance(names, list) or not names or not isinstance(y_name, str) or ctx.lookup is None:
        raise ctx.fail("needs attributes xs (names) and y (a name)")
    y = ctx.lookup(y_name)
    xs = [ctx.lookup(n) for n in names]
    for name, v in [(y_name, y), *zip(names, xs)]:
        if not isinstance(v, Value) or not v.desc.is_tensor:
            raise ctx.fail(f"{name!r} must be a tensor computed before this node")
    assert isinstance(y, Value)
    targets = {id(x) for x in xs if isinstance(x, Value)}
    path = _path(ctx, targets, y)
    missing = sorted({(n.domain, n.op_type) for n in path if n.op_type not in GRADIENT_RULES})
    if missing:
        raise UnsupportedOpError([(d, f"{t} (no gradient rule)") for d, t in missing], graph=ctx.graph.name, nodes=[ctx.name])
    grads: dict[int, Value] = {id(y): _ones_like(ctx, y)}
    for node in reversed(path):
        g = grads.get(id(node.outputs[0]))
        if g is None:
            continue
        for x, gx in zip(node.inputs, GRADIENT_RULES[node.op_type](ctx, node, g)):
            if x is None or gx is None:
                continue
            prev = grads.get(id(x))
            grads[id(x)] = gx if prev is None else ctx.emit("Add", [prev, gx])[0]
    out = []
    for x in xs:
        assert isinstance(x, Value)
        g = grads.get(id(x))
        if g is None:  # y does not depend on x
            g = ctx.emit("Mul", [_ones_like(ctx, x), ctx.const(np.zeros((), x.dtype), "zero")])[0]
        out.append(g)
    return out


def _path(ctx: NodeContext, targets: set[int], y: Value) -> list[Node]:
    """The nodes y depends on that depend on some x, in topological order."""
    ancestors: set[int] = set()
    stack = [y]
    while stack:
        v = stack.pop()
        if v.producer is not None and id(v.producer) not in ancestors and id(v) not in targets:
            ancestors.add(id(v.producer))
            stack.extend(x for x in v.producer.inputs if x is not None)
    live = set(targets)
    path = []
    for node in ctx.graph.topological_order():
        if id(node) in ancestors and any(x is not None and id(x) in live for x in node.inputs):
            path.append(node)
            live.update(id(o) for o in node.outputs)
    return path


def _ones_like(ctx: NodeContext, v: Value) -> Value:
    shape = ctx.emit("Shape", [v])[0]
    return ctx.emit("ConstantOfShape", [shape], {"value": np.ones((1,), v.dtype)})[0]


def _unbroadcast(ctx: NodeContext, g: Value, like: Value, out: Value) -> Value:
    """``g`` (shaped like the broadcast output) summed back to the shape of input ``like``.

    Raises:
        GraphError: the shapes are not static where they differ.
    """
    a, o = like.shape, out.shape
    if a == o and a is not None:
        return g
    if not is_static(a) or not is_static(o):
        raise ctx.fail(f"a gradient through broadcasting needs static shapes, got {like.desc} and {out.desc}")
    assert a is not None and o is not None
    lead = len(o) - len(a)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(a) if d == 1 and o[lead + i] != 1]
    if axes:
        g = ctx.emit("ReduceSum", [g, ctx.const(np.asarray(axes, np.int64), "axes")], {"keepdims": 1})[0]
    return ctx.emit("Reshape", [g, ctx.const(np.asarray(a, np.int64), "shape")])[0]


def _binary(ctx: NodeContext, node: Node, ga: Value | None, gb: Value | None) -> list[Value | None]:
    a, b = node.inputs[0], node.inputs[1]
    assert a is not None and b is not None
    out = node.outputs[0]
    return [None if ga is None else _unbroadcast(ctx, ga, a, out), None if gb is None else _unbroadcast(ctx, gb, b, out)]


def _add(ctx: NodeContext, node: Node, g: Value) -> list[Value | None]:
    return _binary(ctx, node, g, g)


def _sub(ctx: NodeContext, node: Node, g: Value) -> list[Value | None]:
    return _binary(ctx, node, g, ctx.emit("Neg", [g])[0])


def _mul(ctx: NodeContext, node: Node, g: Value) -> list[Value | None]:
    a, b = node.inputs[0], node.inputs[1]
    return _binary(ctx, node, ctx.emit("Mul", [g, b])[0], ctx.emit("Mul", [g, a])[0])


def _div(ctx: NodeContext, node: Node, g: Value) -> list[Value | None]:
    a, b = node.inputs[0], node.inputs[1]
    ga = ctx.emit("Div", [g, b])[0]
    gb = ctx.emit("Neg", [ctx.emit("Div", [ctx.emit("Mul", [ga, a])[0], b])[0]])[0]  # -g a / b^2
    return _binary(ctx, node, ga, gb)


def _neg(ctx: NodeContext, node: Node, g: Value) -> list[Value | None]:
    return [ctx.emit("Neg", [g])[0]]


def _identity(ctx: NodeContext, node: Node, g: Value) -> list[Value | None]:
    return [g]


def _matmul(ctx: NodeContext, node: Node, g: Value) -> list[Value | None]:
    a, b = node.inputs[0], node.inputs[1]
    assert a is not None and b is not None
    if a.desc.rank != 2 or b.desc.rank != 2:
        raise ctx.fail(f"the MatMul gradient rule covers 2-D operands, got {a.desc} and {b.desc}")
    ga = ctx.emit("MatMul", [g, ctx.emit("Transpose", [b], {"perm": [1, 0]})[0]])[0]
    gb = ctx.emit("MatMul", [ctx.emit("Transpose", [a], {"perm": [1, 0]})[0], g])[0]
    return [ga, gb]


GRADIENT_RULES: dict[str, Rule] = {
    "Add": _add,
    "Sub": _sub,
    "Mul": _mul,
    "Div": _div,
    "Neg": _neg,
    "Identity": _identity,
    "MatMul": _matmul,
}
