"""Fusions around the linear ops (Conv, Gemm, MatMul): transposes folded into operands,
MatMul + Add into Gemm (or a FusedMatMul with a bias, over a batch of rows), a bias Add
into Conv/Gemm, a residual Add into the Conv (FusedConv's Z), and an activation into the
producer.

Each pass walks the graph in topological order from the consumer side (the Add, the
activation, the MatMul reading a Transpose) and looks at its producer, so a rewrite made
earlier in the same sweep is seen by the nodes after it.
"""

from __future__ import annotations

import numpy as np

from aioge.ir.graph import Graph, Node, Value
from aioge.ops.fused import ACTIVATIONS, rows_shapes
from aioge.passes.elementwise import node_steps
from aioge.passes.rewrite import add_op, const_array, only_use, other_input, static_shape, substitute

__all__ = ["dedup_filters", "fold_transposes", "fuse_activation", "fuse_bias_add", "fuse_matmul_add", "fuse_residual"]

_FLOATS = frozenset({"float16", "float32", "float64"})


def _is(node: Node | None, op: str, domain: str = "") -> bool:
    return node is not None and node.op_type == op and node.domain in ((domain, "ai.onnx") if domain == "" else (domain,))


def _producer(graph: Graph, value: Value | None, consumer: Node) -> Node | None:
    """The node producing ``value`` when ``consumer`` is the value's only reader."""
    if value is None or value.producer is None or only_use(graph, value) is not consumer:
        return None
    return value.producer


# -- transposes -------------------------------------------------------------------------


def _swaps_last_two(node: Node) -> bool:
    shape = static_shape(node.inputs[0].desc if node.inputs[0] is not None else None)
    if shape is None or len(shape) < 2:
        return False
    rank = len(shape)
    perm = node.attrs.get("perm")
    perm = tuple(range(rank))[::-1] if perm is None else tuple(int(p) % rank for p in perm)
    return perm == (*range(rank - 2), rank - 1, rank - 2)


def _unfold_rows(graph: Graph) -> bool:
    """Tensordot's ``Reshape(x, (rows, K)) -> MatMul(., B) -> Reshape(., (*x.shape[:-1], N))``
    as ``MatMul(x, B)`` (a batch of rows by a matrix, which a bias and activation then join)."""
    changed = False
    for mm in graph.topological_order():
        r1 = _producer(graph, mm.inputs[0], mm) if _is(mm, "MatMul") else None
        r2 = only_use(graph, mm.outputs[0]) if r1 is not None else None
        if r1 is None or r2 is None or not (_is(r1, "Reshape") and _is(r2, "Reshape")) or r1.inputs[0] is None:
            continue
        xs, bs = static_shape(r1.inputs[0].desc), static_shape(mm.inputs[1].desc if mm.inputs[1] is not None else None)
        rows = (int(np.prod(xs[:-1])), xs[-1]) if xs is not None and len(xs) >= 3 else None
        if rows is None or bs is None or len(bs) != 2 or static_shape(r1.outputs[0].desc) != rows:
            continue
        if xs is not None and static_shape(r2.outputs[0].desc) == (*xs[:-1], bs[1]):
            changed |= substitute(graph, r2, "MatMul", [r1.inputs[0], mm.inputs[1]], {}, [r2, mm, r1]) is not None
    return changed


def fold_transposes(graph: Graph) -> bool:
    """Fold a Transpose that swaps the last two axes into the MatMul or Gemm reading it
    (as transA/transB); a MatMul becomes FusedMatMul. Tensordot's reshapes around a MatMul go
    first (``_unfold_rows``). Returns True if it folded any."""
    changed = _unfold_rows(graph)
    for node in graph.topological_order():
        if _is(node, "MatMul"):
            attrs = {"transA": 0, "transB": 0, "alpha": 1.0}
            op, domain = "FusedMatMul", "aioge"
        elif _is(node, "FusedMatMul", "aioge"):
            attrs = dict(node.attrs)
            op, domain = "FusedMatMul", "aioge"
        elif _is(node, "Gemm") or _is(node, "FusedGemm", "aioge"):
            attrs = dict(node.attrs)
            op, domain = node.op_type, node.domain
        else:
            continue
        inputs = list(node.inputs)
        removed: list[Node] = []
        for i, flag in ((0, "transA"), (1, "transB")):
            t = _producer(graph, inputs[i], node)
            if _is(t, "Transpose") and t is not None and _swaps_last_two(t):
                inputs[i] = t.inputs[0]
                attrs[flag] = 1 - int(attrs[flag])
                removed.append(t)
        if removed and substitute(graph, node, op, inputs, attrs, [node, *removed], domain=domain) is not None:
            changed = True
    return changed


# -- MatMul + Add -> Gemm ---------------------------------------------------------------


def _fits(c: Value, out: Value) -> bool:
    """``c`` broadcasts onto ``out`` without enlarging it (Gemm's C rule)."""
    cs, os_ = static_shape(c.desc), static_shape(out.desc)
    if cs is None or os_ is None or len(cs) > len(os_) or c.desc.dtype != out.desc.dtype:
        return False
    return all(d in (1, o) for d, o in zip(reversed(cs), reversed(os_)))


def fuse_matmul_add(graph: Graph) -> bool:
    """Rewrite Add(MatMul(A, B), C) on matrices as Gemm(A, B, C) (also FusedMatMul without
    an activation, keeping its transposes and alpha), and on a batch of rows by a matrix
    (A of rank 3 or more, not transposed; B 2-D; C one value per column: a transformer's
    projection and its bias) as FusedMatMul(A, B, C), where ``ops.fused.rows_shapes`` says
    its Gemm kernels run over A's rows. Returns True if it rewrote any."""
    changed = False
    for add in graph.topological_order():
        if not _is(add, "Add"):
            continue
        for mm_out in add.inputs:
            mm = _producer(graph, mm_out, add)
            c = other_input(add, mm_out) if mm_out is not None else None
            if mm is None or c is None or not (_is(mm, "MatMul") or _is(mm, "FusedMatMul", "aioge")):
                continue
            if mm.attrs.get("activation") or len(mm.inputs) > 2:
                continue
            a, b = mm.inputs
            if a is None or b is None or b.desc.rank != 2 or not _fits(c, mm.outputs[0]):
                continue
            attrs = {
                "transA": int(mm.attrs.get("transA", 0)),
                "transB": int(mm.attrs.get("transB", 0)),
                "alpha": float(mm.attrs.get("alpha", 1.0)),
            }
            if a.desc.rank == 2:
                rewritten = substitute(graph, add, "Gemm", [a, b, c], {**attrs, "beta": 1.0}, [add, mm])
            elif (a.desc.rank or 0) > 2 and rows_shapes([a.desc, b.desc, c.desc], attrs) is not None:
                rewritten = substitute(graph, add, "FusedMatMul", [a, b, c], attrs, [add, mm], domain="aioge")
            else:
                continue
            if rewritten is not None:
                changed = True
                break
    return changed


# -- bias Add -> Conv / Gemm ------------------------------------------------------------


def _channel_vector(c: np.ndarray, out_rank: int, channels: int, axis: int = 1) -> np.ndarray | None:
    """``c`` as a per-channel vector when it broadcasts along ``axis`` only, else None."""
    if c.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(-1), (channels,)) if c.size == 1 else c.reshape(channels)


def fuse_bias_add(graph: Graph) -> bool:
    """Fold Add(Conv(x, W[, b]), c) with a per-channel constant c into Conv's bias, and
    Add(Gemm(A, B), C) into Gemm's C (any C that fits; with a constant C already there, a
    constant c adds to it when beta is 1). Returns True if it folded any."""
    changed = False
    for add in graph.topological_order():
        if not _is(add, "Add"):
            continue
        for y in add.inputs:
            p = _producer(graph, y, add)
            c = other_input(add, y) if y is not None else None
            if p is None or c is None or c.desc.dtype != y.desc.dtype:  # type: ignore[union-attr]
                continue
            if _is(p, "Conv") and _fold_conv_bias(graph, add, p, c):
                changed = True
                break
            if _is(p, "Gemm") and _fold_gemm_bias(graph, add, p, c):
                changed = True
                break
    return changed


def _fold_conv_bias(graph: Graph, add: Node, conv: Node, c: Value) -> bool:
    data, w = conv.inputs[0], conv.inputs[1]
    cv = const_array(c)
    out_shape = static_shape(conv.outputs[0].desc)
    if cv is None or w is None or out_shape is None:
        return False
    vec = _channel_vector(cv, len(out_shape), out_shape[1])
    if vec is None:
        return False
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    if b is not None and const_array(b) is None:
        return False
    old = const_array(b)
    bias = vec.astype(cv.dtype) if old is None else (old + vec).astype(old.dtype)
    if substitute(graph, add, "Conv", [data, w, graph.constant(bias)], dict(conv.attrs), [add, conv]) is None:
        graph.remove_unused_values()  # the bias constant made for it
        return False
    return True


def _fold_gemm_bias(graph: Graph, add: Node, gemm: Node, c: Value) -> bool:
    a, b = gemm.inputs[0], gemm.inputs[1]
    old = gemm.inputs[2] if len(gemm.inputs) > 2 else None
    attrs = dict(gemm.attrs)
    if not _fits(c, gemm.outputs[0]):
        return False
    if old is None:
        new_c = c
        attrs["beta"] = 1.0
    else:
        cv, ov = const_array(c), const_array(old)
        if cv is None or ov is None or float(attrs["beta"]) != 1.0:
            return False
        total = (ov + cv).astype(ov.dtype)
        out_shape = static_shape(gemm.outputs[0].desc)
        if out_shape is None or np.broadcast_shapes(total.shape, out_shape) != out_shape:
            return False
        new_c = graph.constant(total)
    if substitute(graph, add, "Gemm", [a, b, new_c], attrs, [add, gemm]) is None:
        graph.remove_unused_values()
        return False
    return True


# -- activations ------------------------------------------------------------------------

_FUSED = {"Conv": ("FusedConv", ""), "Gemm": ("FusedGemm", ""), "MatMul": ("FusedMatMul", "")}


def fuse_activation(graph: Graph) -> bool:
    """Fold an activation (Relu, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Swish, Clip with
    constant bounds, Tanh, Gelu) into the Conv, Gemm or MatMul (or FusedMatMul) before it, as FusedConv,
    FusedGemm or FusedMatMul. Returns True if it folded any."""
    changed = False
    for act in graph.topological_order():
        if act.domain not in ("", "ai.onnx") or act.op_type not in ACTIVATIONS or not act.inputs:
            continue
        p = _producer(graph, act.inputs[0], act)
        if p is None or p.outputs[0].desc.dtype not in _FLOATS:
            continue
        if p.domain in ("", "ai.onnx") and p.op_type in _FUSED:
            op = _FUSED[p.op_type][0]
            attrs = dict(p.attrs)
            if p.op_type == "MatMul":
                attrs.update(transA=0, transB=0, alpha=1.0)
        elif (_is(p, "FusedMatMul", "aioge") or _is(p, "FusedConv", "aioge")) and not p.attrs.get("activation"):
            op, attrs = p.op_type, dict(p.attrs)
        else:
            continue
        steps = node_steps(act)  # after the cheap checks: most activations follow no matmul
        if steps is None or len(steps) != 1:
            continue  # e.g. a Clip whose bounds are computed at run time
        attrs.update(activation=steps[0].op, activation_params=list(steps[0].params))
        if substitute(graph, act, op, list(p.inputs), attrs, [act, p], domain="aioge") is not None:
            changed = True
    return changed


def fuse_residual(graph: Graph) -> bool:
    """Fold a residual Add into the Conv before it (the Conv's output read by the Add alone, the
    other operand of the output's shape and dtype) as FusedConv with Z: the conv kernel adds Z
    to its output while it is hot, and ActivationFusionPass then takes an activation after the
    Add too (ResNet's Conv, Add, Relu). Returns True if it folded any."""
    changed = False
    for add in graph.topological_order():
        if not _is(add, "Add") or len(add.inputs) != 2 or add.outputs[0].desc.dtype not in _FLOATS:
            continue
        for i in (0, 1):
            p, z = _producer(graph, add.inputs[i], add), add.inputs[1 - i]
            if p is None or z is None or not (_is(p, "Conv") or (_is(p, "FusedConv", "aioge") and not p.attrs.get("activation"))):
                continue
            if z.desc != add.outputs[0].desc or not z.desc.static or len(p.inputs) > 3:
                continue
            ins = [*p.inputs, *[None] * (3 - len(p.inputs)), z]
            if substitute(graph, add, "FusedConv", ins, dict(p.attrs), [add, p], domain="aioge") is not None:
                changed = True
                break
    return changed


# -- duplicate filters ------------------------------------------------------------------

_CONVS = {("Conv", ""): "Conv", ("FusedConv", "aioge"): "FusedConv"}


def _unique_filters(w: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(first row of each distinct (filter, bias) pair, the pair index of every output
    channel), comparing bytes; None when every filter is distinct."""
    m = w.shape[0]
    rows = np.ascontiguousarray(w.reshape(m, -1))
    # Equal filters have equal sums: distinct sums rule repeats out in one pass over the weights
    # (resnet18's convs: 25 ms of CPU a compile, not 270 ms of sorting byte strings).
    if np.unique(rows.sum(axis=1)).size == m:
        return None
    if b is not None:
        rows = np.concatenate([rows, b.reshape(m, 1).astype(rows.dtype)], axis=1)
    keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).reshape(m)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if len(first) == m:
        return None
    return first, inverse.reshape(m)


def dedup_filters(graph: Graph) -> bool:
    """Compute identical output channels of a Conv once: a Conv (or FusedConv) with constant
    weights whose filters (with their biases) repeat becomes a Conv over the distinct filters
    and a Gather that copies each channel where it belongs. Besides the work it saves, the
    repeated channels come out bit-identical, which BLAS does not promise (its edge tiles
    round differently). Returns True if it rewrote any."""
    changed = False
    for conv in graph.topological_order():
        op = _CONVS.get((conv.op_type, conv.domain if conv.domain != "ai.onnx" else ""))
        if op is None or int(conv.attrs.get("group", 1)) != 1 or not 2 <= len(conv.inputs) <= 3:
            continue
        w = const_array(conv.inputs[1])
        b_in = conv.inputs[2] if len(conv.inputs) > 2 else None
        b = const_array(b_in)
        if w is None or w.ndim < 3 or w.shape[0] < 2 or (b_in is not None and b is None):
            continue
        found = _unique_filters(w, b)
        if found is None:
            continue
        first, inverse = found
        inputs = [conv.inputs[0], graph.constant(np.ascontiguousarray(w[first]))]
        if b is not None:
            inputs.append(graph.constant(np.ascontiguousarray(b[first])))
        small = add_op(graph, op, inputs, dict(conv.attrs), domain=conv.domain)
        index = graph.constant(inverse.astype(np.int64))
        if substitute(graph, conv, "Gather", [small.outputs[0], index], {"axis": 1}, [conv]) is None:
            graph.remove_node(small)
            graph.remove_unused_values()
            continue
        changed = True
    return changed
