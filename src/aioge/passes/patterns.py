"""Pattern fusions that recover one op from the decomposed form exporters write.

- Gelu, as torch exports ``nn.GELU()``: ``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5``
  (also ``Mul(x, 1/sqrt 2)`` for the Div, and the 0.5 applied to x or to the sum first).
- Gelu's tanh form, as GPT-2 writes it (``NewGELUActivation``): ``Pow(x, 3) -> Mul 0.044715 ->
  Add x -> Mul sqrt(2/pi) -> Tanh`` and the same ``Add 1``, ``Mul x``, ``Mul 0.5`` tail.
- Swish (SiLU), as torch exports ``nn.SiLU()``: ``Mul(x, Sigmoid(x))``, either operand order.
- HardSigmoid(1/h, b/h) as Keras writes it: ``Clip(x + b, 0, h) / h`` (or ``* 1/h``); HardSwish, x times
  that for 1/6, 1/2 (MobileNetV3; the kernels' alpha x + beta is an ulp or so apart).
- LayerNormalization, as torch exports it before opset 17:
  ``m = ReduceMean(x); d = x - m; v = ReduceMean(d ** 2); y = d / Sqrt(v + eps)``, then
  optionally ``* gamma`` and ``+ beta``, over trailing axes; and as Keras writes it:
  ``s = Reciprocal(Sqrt(v + eps)) [* gamma]; y = x * s + (-m * s [+ beta])``.
- ChannelShuffle, as ShuffleNet writes it: ``Reshape (N, g, C/g, ...) -> Transpose`` of those two
  axes ``-> Reshape (N, C, ...)``, with the channel Concat before it when only it reads the join,
  and the Slices after it when they split its channels.

Every intermediate must be read only inside the pattern, and every value must have x's
shape, so the fused op computes exactly what the pattern did.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aioge.ir.graph import Graph, Node, Value
from aioge.passes import rewrite as rw
from aioge.passes.rewrite import const_array, const_scalar, is_close, only_use, other_input, static_shape, substitute

__all__ = ["fuse_channel_shuffle", "fuse_gelu", "fuse_hard_sigmoid", "fuse_layer_norm", "fuse_squeeze_excite", "fuse_swish"]


def _op(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _next(graph: Graph, value: Value, op: str) -> Node | None:
    """The only reader of ``value`` when it is an ``op`` node."""
    node = only_use(graph, value)
    return node if _op(node, op) else None


def _scalar_operand(node: Node, value: Value, target: float) -> bool:
    """``node`` is binary, reading ``value`` and a constant close to ``target``."""
    return is_close(const_scalar(other_input(node, value)), target)


# -- Swish ------------------------------------------------------------------------------


def fuse_swish(graph: Graph) -> bool:
    """Replace ``Mul(x, Sigmoid(x))`` by ``Swish(x, alpha=1)``, one pass over x instead of two
    (and an activation a Conv or Gemm can fuse); returns True if it replaced any."""
    changed = False
    for sig in graph.topological_order():
        if not _op(sig, "Sigmoid") or not sig.inputs or sig.inputs[0] is None:
            continue
        x = sig.inputs[0]
        mul = _next(graph, sig.outputs[0], "Mul")
        if mul is None or len(mul.inputs) != 2 or other_input(mul, sig.outputs[0]) is not x:
            continue
        if static_shape(x.desc) is None or static_shape(x.desc) != static_shape(mul.outputs[0].desc):
            continue
        if substitute(graph, mul, "Swish", [x], {"alpha": 1.0}, [mul, sig]) is not None:
            changed = True
    return changed


def fuse_hard_sigmoid(graph: Graph) -> bool:
    """HardSigmoid and HardSwish for their Keras spellings (one activation a Conv fuses; the chains
    kept MobileNetV3 off native programs); returns True if it replaced any."""
    changed = False
    for clip in graph.topological_order():
        v = clip.inputs[0] if _op(clip, "Clip") and len(clip.inputs) == 3 else None
        add = v.producer if v is not None else None
        scale = _next(graph, clip.outputs[0], "Mul") or _next(graph, clip.outputs[0], "Div")
        if v is None or add is None or scale is None or not _op(add, "Add") or only_use(graph, v) is not clip:
            continue
        lo, hi, s = const_scalar(clip.inputs[1]), const_scalar(clip.inputs[2]), const_scalar(other_input(scale, clip.outputs[0]))
        if scale.op_type == "Div":  # the clip over a constant
            s = 1 / s if s and scale.inputs[0] is clip.outputs[0] else None
        for x in add.inputs if lo == 0 and hi and s is not None and is_close(s * hi, 1.0) else ():
            b = const_scalar(other_input(add, x)) if x is not None else None
            if x is None or b is None or s is None or static_shape(x.desc) != static_shape(scale.outputs[0].desc):
                continue
            nodes, attrs, op, last = [scale, clip, add], {"alpha": s, "beta": b * s}, "HardSigmoid", scale
            mul = _next(graph, scale.outputs[0], "Mul")
            if mul is not None and other_input(mul, scale.outputs[0]) is x and is_close(s, 1 / 6) and is_close(b, 3.0):
                nodes, attrs, op, last = [mul, *nodes], {}, "HardSwish", mul
            changed = substitute(graph, last, op, [x], attrs, nodes) is not None or changed
            break
    return changed


# -- Gelu -------------------------------------------------------------------------------


def fuse_gelu(graph: Graph) -> bool:
    """Replace the erf and tanh forms of Gelu by one Gelu node; returns True if it replaced any."""
    changed = False
    for node in graph.topological_order():
        if node.inputs and node.inputs[0] is not None and (_op(node, "Erf") or _op(node, "Tanh")):
            tanh = node.op_type == "Tanh"
            match = _match_gelu_tanh(graph, node) if tanh else _match_gelu(graph, node)
            if match is not None:
                x, nodes = match
                attrs = {"approximate": "tanh" if tanh else "none"}
                if substitute(graph, nodes[-1], "Gelu", [x], attrs, list(reversed(nodes))) is not None:
                    changed = True
    return changed


def _match_gelu_tanh(graph: Graph, tanh: Node) -> tuple[Value, list[Node]] | None:
    """(x, the pattern's nodes from first to last) when ``tanh`` computes
    tanh(sqrt(2/pi) * (x + 0.044715 * x ** 3)) in a Gelu pattern."""
    pre = _const_mul_producer(graph, tanh.inputs[0], tanh, math.sqrt(2.0 / math.pi))
    if pre is None:
        return None
    pre_node, inner = pre
    add = inner.producer
    if add is None or not _op(add, "Add") or only_use(graph, inner) is not pre_node:
        return None
    for x, cubic in (tuple(add.inputs), tuple(reversed(add.inputs))):
        scaled = _const_mul_producer(graph, cubic, add, 0.044715) if x is not None else None
        if x is None or scaled is None:
            continue
        mul, cube = scaled
        power = cube.producer
        if power is None or not _op(power, "Pow") or power.inputs[0] is not x or only_use(graph, cube) is not mul:
            continue
        if not is_close(const_scalar(power.inputs[1]), 3.0):
            continue
        head = [power, mul, add, pre_node]
        tail = _gelu_tail(graph, tanh, x)
        if tail is None or any(n.outputs[0].desc != x.desc for n in head):
            return None
        return x, [*head, tanh, *tail]
    return None


def _const_mul_producer(graph: Graph, value: Value | None, reader: Node, factor: float) -> tuple[Node, Value] | None:
    """(the Mul producing ``value``, its other operand) when the Mul multiplies by a constant
    close to ``factor`` and ``reader`` is the only reader of ``value``."""
    mul = value.producer if value is not None else None
    if mul is None or not _op(mul, "Mul") or only_use(graph, value) is not reader:  # type: ignore[arg-type]
        return None
    operand = next((v for v in mul.inputs if v is not None and _scalar_operand(mul, v, factor)), None)
    return None if operand is None else (mul, operand)


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
    neg = x.producer if x is not None and _op(x.producer, "Neg") and only_use(graph, x) is pre else None
    x = neg.inputs[0] if neg is not None else x  # Keras: 0.5 * x * erfc(-x / sqrt 2), erfc as 1 - erf
    if x is None or static_shape(x.desc) is None:
        return None
    tail = _gelu_tail(graph, erf, x, erfc=neg is not None)
    return None if tail is None else (x, [*([neg] if neg else []), pre, erf, *tail])


def _gelu_tail(graph: Graph, inner: Node, x: Value, erfc: bool = False) -> list[Node] | None:
    """The nodes computing 0.5 * x * (1 + inner) (``erfc``: 1 - inner) from ``inner`` (erf or tanh), in one of the
    orders exporters write; None when they are not there or broadcast x to a bigger shape."""
    if static_shape(x.desc) is None:
        return None
    add = _next(graph, inner.outputs[0], "Sub" if erfc else "Add")
    if add is None or not _scalar_operand(add, inner.outputs[0], 1.0) or (erfc and add.inputs[1] is not inner.outputs[0]):
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
        nodes = [add, mul, last]
    elif (
        other is not None
        and other.producer is not None
        and _op(other.producer, "Mul")
        and only_use(graph, other) is mul
        and _scalar_operand(other.producer, x, 0.5)
    ):
        nodes = [other.producer, add, mul]
    elif other is not None and is_close(const_scalar(other), 0.5):  # ((1 + erf) * 0.5) * x
        last = _next(graph, mul.outputs[0], "Mul")
        if last is None or other_input(last, mul.outputs[0]) is not x:
            return None
        nodes = [add, mul, last]
    else:
        return None
    if any(n.outputs[0].desc != x.desc for n in (inner, *nodes)):
        return None  # something broadcast x to a bigger shape
    return nodes


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
    if axis is not None and len(mean.outputs[0].uses) == 2:
        return _match_keras_layer_norm(graph, mean, x, axis, shape[axis:])
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


def _match_keras_layer_norm(
    graph: Graph, mean: Node, x: Value, axis: int, normalised: tuple[int, ...]
) -> tuple[Value, Value | None, Value | None, int, float, list[Node]] | None:
    sub, neg = (next((n for n, _ in mean.outputs[0].uses if _op(n, op)), None) for op in ("Sub", "Neg"))
    if sub is None or neg is None or sub.inputs[0] is not x or sub.inputs[1] is not mean.outputs[0]:
        return None
    sq = _next(graph, sub.outputs[0], "Mul")
    if sq is None and len(sub.outputs[0].uses) == 2 and sub.outputs[0].uses[0][0] is sub.outputs[0].uses[1][0]:
        sq = sub.outputs[0].uses[0][0] if _op(sub.outputs[0].uses[0][0], "Mul") else None
    var = _next(graph, sq.outputs[0], "ReduceMean") if sq is not None and sq.inputs[0] is sq.inputs[1] else None
    if var is None or _tail_axes(var, len(x.desc.shape or ())) != axis:
        return None
    add = _next(graph, var.outputs[0], "Add")
    eps = const_scalar(other_input(add, var.outputs[0])) if add is not None else None
    root = _next(graph, add.outputs[0], "Sqrt") if add is not None and eps is not None and eps >= 0 else None
    inv = _next(graph, root.outputs[0], "Reciprocal") if root is not None else None
    if inv is None or sq is None or eps is None or add is None or root is None:
        return None
    nodes: list[Node] = [mean, sub, sq, var, add, root, inv]
    s, scale, bias = inv.outputs[0], None, None
    mul = _next(graph, s, "Mul")
    if mul is not None and (g := _tail_const(graph, other_input(mul, s), normalised, x)) is not None:
        nodes, s, scale = [*nodes, mul], mul.outputs[0], g
    readers = [n for n, _ in s.uses]
    y1 = next((n for n in readers if _op(n, "Mul") and other_input(n, s) is x), None)
    m2 = next((n for n in readers if _op(n, "Mul") and other_input(n, s) is neg.outputs[0]), None)
    if len(readers) != 2 or y1 is None or m2 is None or only_use(graph, neg.outputs[0]) is not m2:
        return None
    nodes, b2 = [*nodes, neg, m2], m2
    add2 = _next(graph, m2.outputs[0], "Add")
    if add2 is not None and (beta := _tail_const(graph, other_input(add2, m2.outputs[0]), normalised, x)) is not None:
        nodes, b2, bias = [*nodes, add2], add2, beta
    y = _next(graph, y1.outputs[0], "Add")
    if y is None or other_input(y, y1.outputs[0]) is not b2.outputs[0] or only_use(graph, b2.outputs[0]) is not y:
        return None
    nodes += [y1, y]
    if any(n.outputs[0].desc.dtype != x.desc.dtype for n in nodes) or y.outputs[0].desc != x.desc:
        return None
    return x, scale, bias, axis, float(eps), nodes


def _tail_const(graph: Graph, v: Value | None, normalised: tuple[int, ...], x: Value) -> Value | None:
    """``v`` as LayerNormalization's Scale/B: as it is when it fits, a constant of the normalised
    shape when it is one with leading 1s (Keras' ``(1, 1, C)`` gamma), else None."""
    if v is None or _fits_normalised(v, normalised, x):
        return v
    data = const_array(v)
    if data is None or data.dtype != x.desc.dtype or data.size != int(np.prod(normalised)):
        return None
    return graph.constant(data.reshape(normalised)) if data.shape[-len(normalised) :] == normalised else None


def _fits_normalised(v: Value, normalised: tuple[int, ...], x: Value) -> bool:
    """``v`` broadcasts onto the normalised axes alone (LayerNormalization's Scale/B rule)."""
    s = static_shape(v.desc)
    if s is None or v.desc.dtype != x.desc.dtype or len(s) > len(normalised):
        return False
    return all(d in (1, n) for d, n in zip(reversed(s), reversed(normalised)))


# -- squeeze-and-excitation ----------------------------------------------------------------


def fuse_squeeze_excite(graph: Graph) -> bool:
    """Replace ``Mul(x, act2(Conv1x1(act1(Conv1x1(GlobalAveragePool(x))))))`` (the convs plain
    or FusedConv, with constant weights and biases) by one SqueezeExcite; returns True if it
    replaced any."""
    changed = False
    for mul in graph.topological_order():
        if not _op(mul, "Mul") or len(mul.inputs) != 2:
            continue
        for x in mul.inputs:
            match = _match_squeeze_excite(graph, mul, x) if x is not None else None
            if match is None:
                continue
            inputs, attrs, nodes = match
            if substitute(graph, mul, "SqueezeExcite", inputs, attrs, nodes, domain="aioge") is not None:
                changed = True
                break
            graph.remove_unused_values()  # zero biases made for it
    return changed


def _match_squeeze_excite(graph: Graph, mul: Node, x: Value) -> tuple[list[Value], dict[str, Any], list[Node]] | None:
    shape = static_shape(x.desc)
    s = other_input(mul, x)
    if shape is None or len(shape) != 4 or s is None or static_shape(mul.outputs[0].desc) != shape:
        return None
    second = _squeezed_conv(graph, s, mul)
    first = _squeezed_conv(graph, second[0].inputs[0], second[0]) if second else None
    gap = first[0].inputs[0].producer if first and first[0].inputs[0] is not None else None
    if second is None or first is None or gap is None or not _global_mean(gap) or gap.inputs[0] is not x:
        return None
    if only_use(graph, gap.outputs[0]) is not first[0] or only_use(graph, first[0].outputs[0]) is not second[0]:
        return None
    (c1, w1, b1, act1), (c2, w2, b2, act2) = first, second
    b1 = b1 if b1 is not None else graph.constant(np.zeros(int(const_array(w1).shape[0]), const_array(w1).dtype))  # type: ignore[union-attr]
    b2 = b2 if b2 is not None else graph.constant(np.zeros(shape[1], const_array(w2).dtype))  # type: ignore[union-attr]
    attrs = {"activation1": act1[0], "activation1_params": act1[1], "activation2": act2[0], "activation2_params": act2[1]}
    return [x, w1, b1, w2, b2], attrs, [mul, c2, c1, gap]


def _global_mean(node: Node) -> bool:
    """A GlobalAveragePool, or a ReduceMean of 4-D over H and W keeping them (Keras' SE blocks)."""
    axes = const_array(node.inputs[1]) if len(node.inputs) > 1 else np.asarray(node.attrs.get("axes", []))
    desc = node.inputs[0].desc if node.inputs and node.inputs[0] is not None else None
    four = desc is not None and desc.shape is not None and len(desc.shape) == 4  # axes 2, 3: H and W
    mean = _op(node, "ReduceMean") and four and int(node.attrs.get("keepdims", 1)) == 1 and axes is not None
    return _op(node, "GlobalAveragePool") or mean and sorted(int(a) % 4 for a in axes.reshape(-1)) == [2, 3]  # type: ignore[union-attr]


def _squeezed_conv(
    graph: Graph, value: Value | None, reader: Node
) -> tuple[Node, Value, Value | None, tuple[str, list[float]]] | None:
    """(the conv, its weight, its bias, its activation) when ``value``, read only by
    ``reader``, is a 1x1 Conv or FusedConv of an (N, C, 1, 1) tensor with constant weights."""
    conv = value.producer if value is not None and only_use(graph, value) is reader else None
    plain = _op(conv, "Conv")
    if conv is None or not (plain or (conv.op_type == "FusedConv" and conv.domain == "aioge")):
        return None
    w = conv.inputs[1] if len(conv.inputs) > 1 else None
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    wv = const_array(w)
    if wv is None or w is None or wv.ndim != 4 or wv.shape[2:] != (1, 1) or int(conv.attrs.get("group", 1)) != 1:
        return None
    if any(int(p) for p in conv.attrs.get("pads") or ()) or (b is not None and const_array(b) is None):
        return None
    out = static_shape(conv.outputs[0].desc)
    if out is None or len(out) != 4 or out[2:] != (1, 1):
        return None
    act = (
        ("", [])
        if plain
        else (str(conv.attrs.get("activation", "")), [float(p) for p in conv.attrs.get("activation_params", ())])
    )
    return conv, w, b, act


# -- channel shuffle -----------------------------------------------------------------------


def fuse_channel_shuffle(graph: Graph) -> bool:
    """Replace ``Reshape(x, (N, g, C/g, *rest)) -> Transpose(0, 2, 1, ...) -> Reshape(x's shape)``
    (and a ``Concat`` on axis 1 making x, read only there) by one ChannelShuffle: one strided
    copy of each input instead of a copy per node; returns True if it replaced any."""
    changed, gone = False, set()
    for first in graph.topological_order():
        if not _op(first, "Reshape") or first.inputs[0] is None or id(first) in gone:
            continue
        x = first.inputs[0]
        shape, split = static_shape(x.desc), static_shape(first.outputs[0].desc)
        tr = _next(graph, first.outputs[0], "Transpose")
        last = _next(graph, tr.outputs[0], "Reshape") if tr is not None else None
        if tr is None or last is None or shape is None or split is None or static_shape(last.outputs[0].desc) != shape:
            continue
        g = split[1] if len(split) == len(shape) + 1 > 2 else 0
        perm = [int(p) for p in tr.attrs.get("perm") or ()]
        if not g or split != (shape[0], g, shape[1] // g, *shape[2:]) or perm != [0, 2, 1, *range(3, len(split))]:
            continue
        inputs: list[Value | None] = [x]
        nodes, cat = [last, tr, first], x.producer
        if cat is not None and _op(cat, "Concat") and only_use(graph, x) is first and int(cat.attrs["axis"]) % len(shape) == 1:
            inputs, nodes = list(cat.inputs), nodes + [cat]
        found = _channel_slices(graph, last.outputs[0], shape[1])  # the Slices after it: outputs of the node
        slices: list[tuple[int, int, Node | None]] = list(found) if found else [(0, shape[1], None)]
        attrs = {"group": g, "splits": [b - a for a, b, _ in slices] if slices[0][2] else []}
        node = rw.add_op(graph, "ChannelShuffle", inputs, attrs, domain="aioge", num_outputs=len(slices))
        pairs = [(sl.outputs[0] if sl else last.outputs[0], new) for (_, _, sl), new in zip(slices, node.outputs)]
        if all(o.desc == n.desc for o, n in pairs) and rw.replace_values(
            graph, pairs, [sl for *_, sl in slices if sl] + nodes, take_names=True
        ):
            changed = True
            gone |= {id(n) for n in nodes}
        else:
            graph.remove_node(node)
    return changed


def _channel_slices(graph: Graph, y: Value, c: int) -> list[tuple[int, int, Node]] | None:
    """(start, stop, node) of the Slices (to become outputs of the ChannelShuffle) along axis 1 (step 1, constant bounds) that alone read
    ``y`` (not a graph output) and split its ``c`` channels, in channel order."""
    out: list[tuple[int, int, Node]] = []
    for node, _ in [] if rw.is_graph_output(graph, y) else y.uses:
        bounds = [const_array(v) for v in node.inputs[1:]] if _op(node, "Slice") and node.inputs[0] is y else [None]
        if len(bounds) < 2 or any(b is None or b.size != 1 for b in bounds):
            return None
        a, b, axis, step = [int(v.reshape(-1)[0]) for v in bounds] + [0, 1][len(bounds) - 2 :]  # type: ignore[union-attr]
        if axis % len(y.desc.shape or (0,)) != 1 or step != 1:
            return None
        lo, hi = (min(max(v + c if v < 0 else v, 0), c) for v in (a, b))
        out.append((lo, hi, node))
    out.sort(key=lambda t: t[0])
    ends = [0] + [b for _, b, _ in out]
    return out if out and all(a == ends[k] < b for k, (a, b, _) in enumerate(out)) and ends[-1] == c else None
