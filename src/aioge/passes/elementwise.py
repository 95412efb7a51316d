"""Elementwise-chain fusion: a connected group of elementwise nodes becomes one
``FusedElementwise`` node whose kernel makes one blocked pass over memory.

A group grows upward from its last node (the root, whose output leaves the group) through
producers whose outputs only the group reads and whose shape is the root's — so nothing is
computed twice and no intermediate is needed outside. Every node must be a fusable op (see
``aioge.ops.fused.EW_OPS``) on one float dtype with static shapes; inputs of smaller
shapes broadcast. A group of one node is left alone, unless its op's own kernel makes
several passes over memory (Sigmoid, Erf, Gelu, LeakyRelu, HardSigmoid, HardSwish).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aioge.ir.graph import Graph, Node, Value
from aioge.ops.fused import EW_OPS
from aioge.passes.rewrite import add_op, const_scalar, is_graph_output, replace_values, static_shape

__all__ = ["fuse_elementwise", "node_steps"]

_FLOATS = frozenset({"float16", "float32", "float64"})
_VARIADIC = {"Sum": "Add", "Max": "Max", "Min": "Min"}
# Ops whose own kernel makes several passes over memory (temporaries, np.where, a float64
# series): one of them alone is worth a FusedElementwise node. (Tanh and Relu are one pass
# each, and their ops' own C forms let a plan with one run as a native program.)
_WORTH_ALONE = frozenset({"Erf", "Gelu", "Sigmoid", "LeakyRelu", "HardSigmoid", "HardSwish", "Swish"})


@dataclass(frozen=True, slots=True)
class _Step:
    op: str
    operands: tuple[Value | int, ...]  # a value, or (int) an earlier step of the same node
    params: tuple[float, ...] = ()


def fuse_elementwise(graph: Graph) -> bool:
    """Fuse every group of two or more elementwise nodes; returns True if it fused any."""
    order = graph.topological_order()
    position = {id(n): i for i, n in enumerate(order)}
    claimed: set[int] = set()
    memo: dict[int, list[_Step] | None] = {}  # id(node) -> its steps, worked out once per pass
    changed = False
    for root in reversed(order):
        if id(root) in claimed:
            continue
        if _steps(root, memo) is None:
            continue
        group = _grow(graph, root, claimed, memo)
        if len(group) < 2 and root.op_type not in _WORTH_ALONE:
            continue
        nodes = sorted(group.values(), key=lambda n: position[id(n)])
        if _fuse(graph, nodes, root, memo):
            claimed.update(group)
            changed = True
    return changed


def _steps(node: Node, memo: dict[int, list[_Step] | None]) -> list[_Step] | None:
    key = id(node)  # the pass holds every node of its order alive: ids stay unique
    if key not in memo:
        memo[key] = node_steps(node)
    return memo[key]


def _grow(graph: Graph, root: Node, claimed: set[int], memo: dict[int, list[_Step] | None]) -> dict[int, Node]:
    """The group rooted at ``root``: a worklist closure, so each node is taken once and each
    value is weighed once per reader (re-scanning the group until nothing grew was quadratic
    in a chain's length)."""
    out = root.outputs[0]
    group = {id(root): root}
    inside: dict[int, int] = {}  # id(value) -> how many of its uses the group holds
    work = [root]
    _count_reads(root, inside)
    while work:
        node = work.pop()
        for v in node.inputs:
            p = None if v is None else v.producer
            if p is None or id(p) in group or id(p) in claimed or len(p.outputs) != 1:
                continue
            if v is None or v.desc != out.desc or is_graph_output(graph, v):
                continue
            # Read outside the group (for now): the last of its readers to join tries again.
            if inside.get(id(v), 0) != len(v.uses):
                continue
            if _steps(p, memo) is None:
                continue
            group[id(p)] = p
            _count_reads(p, inside)
            work.append(p)
    return group


def _count_reads(node: Node, inside: dict[int, int]) -> None:
    for v in node.inputs:
        if v is not None:
            inside[id(v)] = inside.get(id(v), 0) + 1


def _fuse(graph: Graph, nodes: list[Node], root: Node, memo: dict[int, list[_Step] | None]) -> bool:
    inputs: list[Value] = []
    index: dict[int, int] = {}
    result: dict[int, int] = {}  # id(value produced in the group) -> step
    ops: list[str] = []
    operands: list[int] = []
    params: list[float] = []
    for node in nodes:
        steps = _steps(node, memo)
        assert steps is not None  # checked when the group grew
        base = len(ops)
        for st in steps:
            for x in st.operands:
                if isinstance(x, int):
                    operands.append(-1 - (base + x))
                elif id(x) in result:
                    operands.append(-1 - result[id(x)])
                else:
                    if id(x) not in index:
                        index[id(x)] = len(inputs)
                        inputs.append(x)
                    operands.append(index[id(x)])
            ops.append(st.op)
            params.extend(st.params)
        result[id(node.outputs[0])] = len(ops) - 1
    attrs = {"ops": ops, "operands": operands, "params": params}
    fused = add_op(graph, "FusedElementwise", inputs, attrs, domain="aioge")
    if fused.outputs[0].desc != root.outputs[0].desc or not replace_values(
        graph, [(root.outputs[0], fused.outputs[0])], list(reversed(nodes)), take_names=True
    ):
        graph.remove_node(fused)
        return False
    return True


def node_steps(node: Node) -> list[_Step] | None:
    """The program steps that compute ``node``, or None when it cannot join a fused group.

    Operands are the node's input values, or ints naming an earlier step of the same list
    (variadic Sum/Max/Min become chains; a FusedElementwise inlines its program).
    """
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if out is None or out.desc.dtype not in _FLOATS or static_shape(out.desc) is None:
        return None
    present = [v for v in node.inputs if v is not None]
    if not present or any(v.desc.dtype != out.desc.dtype or static_shape(v.desc) is None for v in present):
        return None
    if node.domain == "aioge" and node.op_type == "FusedElementwise":
        return _inline(node)
    if node.domain not in ("", "ai.onnx"):
        return None
    op, ins = node.op_type, node.inputs
    if op in _VARIADIC:
        if len(ins) < 2 or any(v is None for v in ins):
            return None
        name = _VARIADIC[op]
        steps = [_Step(name, (ins[0], ins[1]))]  # type: ignore[arg-type]
        steps += [_Step(name, (i, v)) for i, v in enumerate(ins[2:])]  # type: ignore[arg-type]
        return steps
    spec = EW_OPS.get(op)
    if spec is None or len(ins) < spec.arity or (op != "Clip" and len(ins) != spec.arity):
        return None
    if op == "Clip":
        x = ins[0]
        if x is None:
            return None
        bounds = []
        for i, default in ((1, -math.inf), (2, math.inf)):
            b = ins[i] if len(ins) > i else None
            value = default if b is None else const_scalar(b)
            if value is None:
                return None  # a bound computed at run time stays a Clip node
            bounds.append(value)
        return [_Step("Clip", (x,), tuple(bounds))]
    pars: tuple[float, ...] = ()
    if op in ("LeakyRelu", "Swish"):
        pars = (float(node.attrs["alpha"]),)
    elif op == "HardSigmoid":
        pars = (float(node.attrs["alpha"]), float(node.attrs["beta"]))
    elif op == "Gelu":
        pars = (1.0 if node.attrs.get("approximate", "none") == "tanh" else 0.0,)
    elif spec.nparams:
        return None
    return [_Step(op, tuple(ins), pars)]  # type: ignore[arg-type]


def _inline(node: Node) -> list[_Step]:
    steps: list[_Step] = []
    ops, operands, params = node.attrs["ops"], node.attrs["operands"], node.attrs.get("params", ())
    oi = pi = 0
    for name in ops:
        spec = EW_OPS[name]
        refs = operands[oi : oi + spec.arity]
        steps.append(
            _Step(name, tuple(node.inputs[r] if r >= 0 else -1 - r for r in refs), tuple(params[pi : pi + spec.nparams]))
        )
        oi += spec.arity
        pi += spec.nparams
    return steps
