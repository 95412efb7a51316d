"""QDQ fusion: a float Conv, MatMul or Gemm between DequantizeLinear and QuantizeLinear nodes
(as ``onnxruntime.quantization.quantize_static`` writes a QDQ model) becomes one integer op.

``DQ(x) -> Conv(DQ(w), DQ(bias)) [-> Relu] -> Q`` becomes QLinearConv, ``DQ(a) -> MatMul(DQ(w))
[-> Relu] -> Q`` QLinearMatMul (also ``DQ(a) -> MatMul(DQ(b)) -> Q`` of two activations per
tensor, attention's Q·K^T and P·V, as onnxruntime fuses them) and ``DQ(a) -> Gemm(DQ(w), DQ(bias)) [-> Relu] -> Q``
onnxruntime's QGemm (com.microsoft), which int8 kernels run (``kernels.quant_linalg``). What the
fused op computes is what onnxruntime computes for the same model (it fuses the same patterns):

- the weight is a constant 8-bit tensor, per tensor or per output channel (axis 0 of a Conv's
  weight, the column axis of a MatMul's or Gemm's B); x, y and their zero points per tensor;
- a bias is a constant int32 tensor dequantised with zero point 0 and scale ``x_scale *
  w_scale`` (float32, as the quantizer wrote it), so it adds into the int32 accumulator;
- a Relu is taken only when y's zero point is the type's least value: saturation then does
  what the Relu did, exactly (round(max(v, 0) / s) + z = max(round(v / s) + z, z)).

``DQ(a) + DQ(b) -> Q`` (a residual Add) becomes aioge's QdqAdd (the same float32 roundings in
one pass), and data movement or a MaxPool between a DQ and a Q of one scale runs on the integers.
Anything else keeps the float path. The pass runs before constant folding, which would
otherwise turn the weights' DequantizeLinear into float constants.
"""

from __future__ import annotations

import numpy as np

from aioge.ir.desc import canonical_dtype
from aioge.ir.graph import Graph, Node, Value
from aioge.passes.rewrite import const_array, only_use, other_input, substitute

__all__ = ["fuse_dynamic_matmul", "fuse_qdq"]

_INT8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _plain(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _dq(value: Value | None) -> Node | None:
    """The DequantizeLinear producing ``value`` (through Identity nodes: the quantizer shares one
    bias that way) with constant scale and zero point."""
    node = value.producer if value is not None else None
    while _plain(node, "Identity") and node.inputs and node.inputs[0] is not None:  # type: ignore[union-attr]
        node = node.inputs[0].producer  # type: ignore[union-attr]
    if not _plain(node, "DequantizeLinear") or node.attrs.get("block_size") or len(node.inputs) < 3:  # type: ignore[union-attr]
        return None
    x, scale, zero = node.inputs  # type: ignore[union-attr]
    if x is None or const_array(scale) is None or const_array(zero) is None:
        return None
    return node


def _scalar_q(node: Node) -> bool:
    """A (de)quantisation of an 8-bit tensor with one scale and zero point."""
    s, z = const_array(node.inputs[1]), const_array(node.inputs[2])
    return s is not None and z is not None and s.size == 1 and z.size == 1 and z.dtype in _INT8


def _weight(node: Node | None, axis: int) -> bool:
    """A DequantizeLinear of a constant 8-bit weight, per tensor or along ``axis``."""
    if node is None:
        return False
    w, s, z = (const_array(v) for v in node.inputs[:3])
    if w is None or s is None or z is None or w.dtype not in _INT8 or z.dtype != w.dtype or s.size != z.size:
        return False
    if s.size == 1:
        return True
    return s.ndim == 1 and int(node.attrs.get("axis", 1)) % w.ndim == axis % w.ndim and s.size == w.shape[axis]


def _bias(node: Node | None, x_scale: np.ndarray, w_scale: np.ndarray, n: int) -> Value | None | bool:
    """The int32 bias a DequantizeLinear reads, when its scale is x_scale * w_scale (float32)
    and its zero point 0; True for a bias of zeros (whatever its scale: the quantizer shares
    one such bias between convs); else None."""
    if node is None:
        return None
    b, s, z = (const_array(v) for v in node.inputs[:3])
    if b is None or s is None or b.dtype != np.int32 or b.ndim != 1 or b.size != n or (z is not None and np.any(z != 0)):
        return None
    if not b.any():
        return True
    want = np.float32(x_scale.reshape(-1)[0]) * w_scale.astype(np.float32).reshape(-1)
    if not np.array_equal(np.broadcast_to(s.astype(np.float32).reshape(-1), (n,)), np.broadcast_to(want, (n,))):
        return None
    return node.inputs[0]


def _tail(graph: Graph, node: Node) -> tuple[Node, list[Node]] | None:
    """The QuantizeLinear ending the pattern at ``node`` (through one Relu), and the nodes between."""
    nxt = only_use(graph, node.outputs[0])
    between: list[Node] = []
    if nxt is not None and _plain(nxt, "Relu"):
        between.append(nxt)
        nxt = only_use(graph, nxt.outputs[0])
    if nxt is None or not _plain(nxt, "QuantizeLinear") or len(nxt.inputs) < 3 or not _scalar_q(nxt):
        return None
    zero = const_array(nxt.inputs[2])
    if between and (zero is None or int(zero.reshape(-1)[0]) != np.iinfo(zero.dtype).min):
        return None
    return nxt, between


def _only_here(graph: Graph, dq: Node, node: Node) -> list[Node]:
    """[dq] when ``node`` is its only reader (it goes with the fused pattern), else []."""
    return [dq] if only_use(graph, dq.outputs[0]) is node else []


def _fuse(graph: Graph, node: Node) -> bool:
    op = node.op_type
    if op == "Gemm" and (node.attrs.get("beta", 1.0) != 1.0 or node.attrs.get("alpha", 1.0) != 1.0 or node.attrs.get("transA")):
        return False
    xdq = _dq(node.inputs[0])
    wdq = _dq(node.inputs[1]) if len(node.inputs) > 1 else None
    tail = _tail(graph, node)
    if xdq is None or wdq is None or tail is None or not _scalar_q(xdq):
        return False
    q, between = tail
    w = const_array(wdq.inputs[0])
    if w is None and op == "MatMul" and _scalar_q(wdq) and len(node.inputs) == 2:  # two activations (attention's)
        ins = [*xdq.inputs[:3], *wdq.inputs[:3], *q.inputs[1:3]]
        remove = [q, *reversed(between), node, *_only_here(graph, wdq, node)]
        return substitute(graph, q, "QLinearMatMul", ins, {}, remove) is not None
    trans_b = op == "Gemm" and bool(node.attrs.get("transB"))
    axis = 0 if op == "Conv" or trans_b else 1
    if w is None or w.ndim < 2 or (op != "Conv" and w.ndim != 2) or not _weight(wdq, axis):
        return False
    xs, ws = const_array(xdq.inputs[1]), const_array(wdq.inputs[1])
    assert xs is not None and ws is not None
    bias: Value | None = None
    found: Value | None | bool
    remove = [q, *reversed(between), node, *_only_here(graph, wdq, node)]
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        if op == "MatMul":
            return False
        bdq = _dq(node.inputs[2])
        found = _bias(bdq, xs, ws, w.shape[axis])
        if found is None:
            return False
        bias = None if found is True else found  # type: ignore[assignment]
        if bdq.outputs[0] is node.inputs[2]:  # type: ignore[union-attr]
            remove += _only_here(graph, bdq, node)  # type: ignore[arg-type]
    x, w_in = [xdq.inputs[0], xdq.inputs[1], xdq.inputs[2]], [wdq.inputs[0], wdq.inputs[1], wdq.inputs[2]]
    y = [q.inputs[1], q.inputs[2]]
    if op == "Conv":
        attrs = {
            k: v for k, v in node.attrs.items() if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
        }
        return substitute(graph, q, "QLinearConv", [*x, *w_in, *y, bias], attrs, remove) is not None
    if op == "MatMul":
        return substitute(graph, q, "QLinearMatMul", [*x, *w_in, *y], {}, remove) is not None
    attrs = {"transB": int(trans_b)}
    return substitute(graph, q, "QGemm", [*x, *w_in, bias, *y], attrs, remove, domain="com.microsoft") is not None


def _dynamic_matmul(graph: Graph, mm: Node) -> bool:
    """DynamicQuantizeLinear(a) -> MatMulInteger(aq, W, za[, zw]) -> Cast(float) -> Mul(a_scale *
    w_scale) [-> Add(bias)], as ``quantize_dynamic`` writes a MatMul, into DynamicQuantizeMatMul."""
    ins = mm.inputs
    dql = ins[0].producer if ins[0] is not None else None
    if len(ins) < 3 or not _plain(dql, "DynamicQuantizeLinear") or [ins[0], ins[2]] != [dql.outputs[0], dql.outputs[2]]:  # type: ignore[union-attr]
        return False
    w, wz = const_array(ins[1]), ins[3] if len(ins) > 3 else None
    if w is None or w.ndim != 2 or w.dtype not in _INT8 or (wz is not None and const_array(wz) is None):
        return False
    n = w.shape[1]
    cast = only_use(graph, mm.outputs[0])
    mul = only_use(graph, cast.outputs[0]) if _plain(cast, "Cast") and canonical_dtype(cast.attrs["to"]) == "float32" else None  # type: ignore[union-attr]
    scale = other_input(mul, cast.outputs[0]) if _plain(mul, "Mul") else None  # type: ignore[arg-type,union-attr]
    smul = scale.producer if scale is not None else None
    a_scale = dql.outputs[1]  # type: ignore[union-attr]
    ws = other_input(smul, a_scale) if _plain(smul, "Mul") and a_scale in smul.inputs else None  # type: ignore[arg-type,union-attr]
    wsa = const_array(ws)
    if wsa is None or wsa.dtype != np.float32 or wsa.size not in (1, n) or wsa.ndim > 1:
        return False
    assert mul is not None and cast is not None
    last, bias = mul, None
    add = only_use(graph, mul.outputs[0])
    if _plain(add, "Add"):
        b = other_input(add, mul.outputs[0])  # type: ignore[arg-type]
        ba = const_array(b)
        if ba is not None and ba.dtype == np.float32 and ba.shape == (n,):
            last, bias = add, b  # type: ignore[assignment]
    remove = [*([last] if last is not mul else []), mul, cast, mm]
    inputs = [dql.inputs[0], ins[1], ws, wz, bias]  # type: ignore[union-attr]
    return substitute(graph, last, "DynamicQuantizeMatMul", inputs, {}, remove, domain="com.microsoft") is not None


def fuse_dynamic_matmul(graph: Graph) -> bool:
    """Fuse every dynamically quantised MatMul chain into DynamicQuantizeMatMul; True if any."""
    changed = False
    for node in graph.topological_order():
        if _plain(node, "MatMulInteger"):
            changed |= _dynamic_matmul(graph, node)
    return changed


_MOVES = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Gather", "Slice", "Identity", "MaxPool")


def _same_q(a: Node, b: Node) -> bool:
    return all(
        (x := const_array(a.inputs[i])) is not None
        and (y := const_array(b.inputs[i])) is not None
        and x.dtype == y.dtype
        and np.array_equal(x.reshape(-1), y.reshape(-1))
        for i in (1, 2)
    )


def _drop_pair(graph: Graph, dq: Node) -> bool:
    """DQ(x) -> Reshape/Transpose/.../MaxPool -> Q by DQ's own scale and zero point: the op runs
    on x's integers instead (exact: for 8-bit x, Q(DQ(x)) is x, |x - z| <= 255 far inside
    float32, and a max commutes with DQ's increasing map)."""
    op = only_use(graph, dq.outputs[0])
    if op is None or op.op_type not in _MOVES or op.domain not in ("", "ai.onnx") or len(op.outputs) != 1:
        return False
    if op.inputs[0] is not dq.outputs[0] or dq.outputs[0] in op.inputs[1:] or len(dq.inputs) < 3 or not _scalar_q(dq):
        return False
    if op.op_type == "MaxPool" and not float(const_array(dq.inputs[1]).reshape(-1)[0]) > 0:  # type: ignore[union-attr]
        return False  # a max commutes with DQ's increasing map only
    q = only_use(graph, op.outputs[0])
    if q is None or not _plain(q, "QuantizeLinear") or len(q.inputs) < 3 or not _same_q(dq, q):
        return False
    inputs = [dq.inputs[0], *op.inputs[1:]]
    return substitute(graph, q, op.op_type, inputs, dict(op.attrs), [q, op, dq]) is not None


def _add(graph: Graph, add: Node) -> bool:
    """DQ(a) + DQ(b) -> Q, every side 8-bit of one kind per tensor (ResNet's residual Adds), into
    aioge's QdqAdd: the same float32 roundings in one pass over the bytes."""
    dqs = [d for d in (_dq(v) for v in add.inputs[:2]) if d is not None]
    q = only_use(graph, add.outputs[0])
    if len(add.inputs) != 2 or len(dqs) != 2 or q is None or not _plain(q, "QuantizeLinear") or len(q.inputs) < 3:
        return False
    sides = [*dqs, q]
    if not all(_scalar_q(n) for n in sides) or len({const_array(n.inputs[2]).dtype for n in sides}) != 1:  # type: ignore[union-attr]
        return False
    ins = [*dqs[0].inputs[:3], *dqs[1].inputs[:3], *q.inputs[1:3]]
    remove = [q, add, *{id(d): d for d in dqs if only_use(graph, d.outputs[0]) is add}.values()]
    return substitute(graph, q, "QdqAdd", ins, {}, remove, domain="aioge") is not None


def fuse_qdq(graph: Graph) -> bool:
    """Fuse every QDQ Conv, MatMul and Gemm into its integer op, and run data movement between
    a DQ and a Q of one scale on the integers; returns True if it changed anything."""
    changed = False
    for node in graph.topological_order():
        if node.op_type in ("Conv", "MatMul", "Gemm") and node.domain in ("", "ai.onnx") and len(node.inputs) >= 2:
            changed |= _fuse(graph, node)
    for node in graph.topological_order():
        if _plain(node, "DequantizeLinear"):
            changed |= _drop_pair(graph, node)
        elif _plain(node, "Add"):
            changed |= _add(graph, node)
    return changed
