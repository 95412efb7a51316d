"""TensorFlow frozen GraphDef (``.pb``) -> ``aioge.Graph`` (GE's ATC ``--framework=3``).

``load_tf(path_or_bytes, inputs=None, outputs=None, shapes=None)``: ``Const`` nodes become
constants, ``Placeholder`` nodes become inputs, and every other node becomes aioge ops
(which are ONNX-shaped) through the table ``_TF`` at the bottom. TensorFlow's NHWC
convolutions and pools are wrapped in transposes to aioge's NCHW; their filters are
transposed once, here, when they are constants. Unknown dims (``-1``) stay symbolic, named
``<input>_<axis>``, unless ``shapes=`` fixes them.

The mapping is direct rather than through tf2onnx: tf2onnx pins an old protobuf that
neither ``onnx`` nor current TensorFlow accept in the same environment, and a frozen graph
of inference ops is a small table. TensorFlow itself is needed only to parse the protobuf
and to decode ``TensorProto`` constants.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge import ops
from aioge.errors import GraphError, UnsupportedOpError
from aioge.ir.graph import Graph, Value

__all__ = ["load_tf"]

ShapeSpec = Sequence["int | str | None"]

# Nodes that carry no computation in a frozen inference graph.
_SKIP = frozenset({"NoOp", "Assert"})


def load_tf(
    source: Any,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    shapes: Mapping[str, ShapeSpec] | None = None,
) -> Graph:
    """Load a frozen TensorFlow GraphDef as an aioge Graph.

    ``source`` is a path, the serialised bytes, or a ``GraphDef``. ``inputs`` names the
    ``Placeholder`` nodes to feed (default: all of them); ``outputs`` names the tensors to
    return (``node`` or ``node:1``; default: the nodes nothing else consumes). ``shapes``
    maps an input name to its shape, fixing unknown dims.

    Returns the graph: inputs keep the placeholder names, outputs the names asked for
    (``node`` for ``node:0``). Loading is blocking work: from async code, run it in a
    worker thread.

    Raises:
        GraphError: the file is not a GraphDef; a named input or output does not exist; an
            input is not a Placeholder; a node's inputs cannot be expressed.
        UnsupportedOpError: TensorFlow op types aioge lacks (all listed, with their nodes).
    """
    graph_def, label = _read(source)
    return _Builder(graph_def, label, inputs, outputs, shapes or {}).build()


def _read(source: Any) -> tuple[Any, str]:
    from google.protobuf.message import DecodeError
    from tensorflow.core.framework import graph_pb2

    if isinstance(source, graph_pb2.GraphDef):
        return source, "<GraphDef>"
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, label = bytes(source), "<bytes>"
    elif isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        try:
            with open(label, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise GraphError(f"{label}: cannot read: {exc.strerror or exc}") from None
    else:
        raise GraphError(f"load_tf expects a path, bytes or a GraphDef, got {type(source).__name__}")
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise GraphError(f"{label}: not a TensorFlow GraphDef ({exc})") from None
    if not graph_def.node:
        raise GraphError(f"{label}: not a TensorFlow GraphDef (no nodes)")
    return graph_def, label


class _Builder:
    def __init__(
        self,
        graph_def: Any,
        label: str,
        inputs: Sequence[str] | None,
        outputs: Sequence[str] | None,
        shapes: Mapping[str, ShapeSpec],
    ) -> None:
        self.graph_def = graph_def
        self.label = label
        self.nodes = {n.name: n for n in graph_def.node}
        stem = os.path.splitext(os.path.basename(label))[0] if label[0] != "<" else "tf"
        self.graph = Graph(stem or "tf")
        self.want_inputs = list(inputs) if inputs is not None else None
        self.want_outputs = list(outputs) if outputs is not None else None
        self.shapes = dict(shapes)
        self.env: dict[str, tuple[Any, ...]] = {}
        self.refs: dict[int, str] = {}  # id(value) -> the TF tensor it came from
        self._session: Any = None

    def build(self) -> Graph:
        outputs = self._outputs()
        order = self._order([_tensor(o)[0] for o in outputs])
        missing = [
            (n.op, n.name) for n in order if n.op not in _TF and n.op not in ("Const", "Placeholder") and n.op not in _SKIP
        ]
        if missing:
            raise UnsupportedOpError([("tf", op) for op, _ in missing], graph=self.graph.name, nodes=[n for _, n in missing])
        self._check_inputs(order)
        try:
            for node in order:
                self.env[node.name] = self._convert(node)
        finally:
            if self._session is not None:
                self._session.close()
        values: list[Any] = []
        for out in outputs:
            v = self.value(out, None)
            values.append(ops.identity(v) if v.producer is None or any(v is w for w in values) else v)
        self.graph.output(*values, names=[o[:-2] if o.endswith(":0") else o for o in outputs])
        return self.graph

    # -- which nodes ---------------------------------------------------------------------------

    def _outputs(self) -> list[str]:
        if self.want_outputs is not None:
            for out in self.want_outputs:
                name, _ = _tensor(out)
                if name not in self.nodes:
                    raise GraphError(f"{self.label}: no node {name!r} for output {out!r}", graph=self.graph.name)
            return self.want_outputs
        consumed = {_tensor(i)[0] for n in self.graph_def.node for i in n.input if not i.startswith("^")}
        found = [
            n.name
            for n in self.graph_def.node
            if n.name not in consumed and n.op not in ("Const", "Placeholder") and n.op not in _SKIP
        ]
        if not found:
            raise GraphError(f"{self.label}: the graph has no output nodes; name them with outputs=", graph=self.graph.name)
        return found

    def _order(self, roots: Sequence[str]) -> list[Any]:
        """The nodes the outputs need, inputs first (iterative DFS; control inputs ignored)."""
        order: list[Any] = []
        state: dict[str, int] = {}
        for root in roots:
            stack = [(root, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    state[name] = 2
                    order.append(self.nodes[name])
                    continue
                if state.get(name):
                    if state[name] == 1:
                        raise GraphError(f"{self.label}: the graph has a cycle through {name!r}", graph=self.graph.name)
                    continue
                if name not in self.nodes:
                    raise GraphError(f"{self.label}: a node reads {name!r}, which does not exist", graph=self.graph.name)
                state[name] = 1
                stack.append((name, True))
                for inp in reversed(self.nodes[name].input):
                    if not inp.startswith("^"):
                        dep = _tensor(inp)[0]
                        if state.get(dep) != 2:
                            if state.get(dep) == 1:
                                raise GraphError(f"{self.label}: the graph has a cycle through {dep!r}", graph=self.graph.name)
                            stack.append((dep, False))
        return order

    def _check_inputs(self, order: Sequence[Any]) -> None:
        placeholders = [n.name for n in order if n.op == "Placeholder"]
        if self.want_inputs is None:
            return
        for name in self.want_inputs:
            node = self.nodes.get(name)
            if node is None:
                raise GraphError(f"{self.label}: no node {name!r} for input {name!r}", graph=self.graph.name)
            if node.op != "Placeholder":
                raise GraphError(f"{self.label}: input {name!r} is a {node.op}, not a Placeholder", graph=self.graph.name)
        unfed = sorted(set(placeholders) - set(self.want_inputs))
        if unfed:
            raise GraphError(
                f"{self.label}: the outputs need placeholders {unfed} that are not among inputs={self.want_inputs}",
                graph=self.graph.name,
            )

    # -- conversion --------------------------------------------------------------------------

    def _convert(self, node: Any) -> tuple[Any, ...]:
        if node.op == "Const":
            return (self.graph.constant(_const(node), node.name.replace("/", "_")),)
        if node.op == "Placeholder":
            return (self._placeholder(node),)
        if node.op in _SKIP:
            return ()
        args = [self.value(i, node) for i in node.input if not i.startswith("^")]
        try:
            out = _TF[node.op](_Node(self, node), *args)
        except GraphError as exc:
            if exc.node is not None:
                raise
            raise GraphError(f"{node.op}: {exc}", graph=self.graph.name, node=node.name) from None
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise GraphError(f"{node.op}: cannot convert ({exc})", graph=self.graph.name, node=node.name) from None
        return out if isinstance(out, tuple) else (out,)

    def _placeholder(self, node: Any) -> Value:
        from tensorflow.dtypes import as_dtype

        dtype = np.dtype(as_dtype(node.attr["dtype"].type).as_numpy_dtype).name
        shape_attr = node.attr["shape"].shape
        if shape_attr.unknown_rank and node.name not in self.shapes:
            raise GraphError(
                f"{self.label}: input {node.name!r} has an unknown rank; give its shape with shapes=", graph=self.graph.name
            )
        dims: list[Any] = [d.size for d in shape_attr.dim]
        given = self.shapes.get(node.name)
        if given is not None:
            if not shape_attr.unknown_rank and len(given) != len(dims):
                raise GraphError(
                    f"{self.label}: shapes[{node.name!r}] has {len(given)} dims, the input has {len(dims)}", graph=self.graph.name
                )
            dims = [g if g is not None else (dims[i] if i < len(dims) else -1) for i, g in enumerate(given)]
        dims = [d if isinstance(d, str) or d >= 0 else f"{node.name}_{i}" for i, d in enumerate(dims)]
        return self.graph.input(node.name, dims, dtype)

    def value(self, ref: str, consumer: Any) -> Value:
        name, index = _tensor(ref)
        outs = self.env.get(name, ())
        if index >= len(outs) or outs[index] is None:
            raise GraphError(
                f"{self.label}: tensor {ref!r} is not produced",
                graph=self.graph.name,
                node=consumer.name if consumer is not None else None,
            )
        self.refs.setdefault(id(outs[index]), f"{name}:{index}")
        return outs[index]

    def evaluate(self, value: Value) -> np.ndarray | None:
        """The value of a tensor that depends on constants only (a permutation built by Tensordot),
        computed by TensorFlow; None when it depends on an input."""
        ref = self.refs.get(id(value))
        if ref is None:
            return None
        import tensorflow as tf

        if self._session is None:
            g = tf.Graph()
            with g.as_default():
                tf.graph_util.import_graph_def(self.graph_def, name="")
            self._session = tf.compat.v1.Session(graph=g)
        try:
            return np.asarray(self._session.run(ref))
        except tf.errors.InvalidArgumentError:  # it needs a placeholder's value
            return None


class _Node:
    """What a converter reads: the node's attributes, and its constant inputs."""

    def __init__(self, builder: _Builder, node: Any) -> None:
        self.builder = builder
        self.node = node

    def attr(self, key: str, default: Any = None) -> Any:
        if key not in self.node.attr:
            return default
        a = self.node.attr[key]
        kind = a.WhichOneof("value")
        if kind == "list":
            lst = a.list
            return list(lst.i) if lst.i else list(lst.f) if lst.f else [s.decode() for s in lst.s]
        if kind == "s":
            return a.s.decode()
        if kind == "type":
            from tensorflow.dtypes import as_dtype

            return np.dtype(as_dtype(a.type).as_numpy_dtype).name
        return getattr(a, kind) if kind else default

    def const(self, v: Value, what: str) -> np.ndarray:
        if v.is_const and v.data is not None:
            return v.data
        known = self.builder.evaluate(v)
        if known is not None:
            return known
        raise GraphError(f"{what} must be a constant in a frozen graph", graph=self.builder.graph.name, node=self.node.name)


def _tensor(ref: str) -> tuple[str, int]:
    name, _, index = ref.partition(":")
    return name, int(index) if index else 0


def _const(node: Any) -> np.ndarray:
    from tensorflow import make_ndarray

    return np.asarray(make_ndarray(node.attr["value"].tensor))


# -- converters ---------------------------------------------------------------------------
# Each takes (node, *input values) and returns a value or a tuple of them.

_TO_NCHW = [0, 3, 1, 2]
_TO_NHWC = [0, 2, 3, 1]


def _nhwc(n: _Node) -> bool:
    fmt = n.attr("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise GraphError(f"data_format {fmt!r} is not supported (NHWC, NCHW)")
    return fmt == "NHWC"


def _spatial(n: _Node, key: str, nhwc: bool) -> list[int]:
    vals = n.attr(key, [1, 1, 1, 1])
    return list(vals[1:3] if nhwc else vals[2:4])


def _padding(n: _Node, nhwc: bool) -> dict[str, Any]:
    pad = n.attr("padding")
    if pad == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if pad == "VALID":
        return {"auto_pad": "VALID"}
    if pad == "EXPLICIT":
        flat = n.attr("explicit_paddings")
        pairs = [flat[i : i + 2] for i in range(0, len(flat), 2)]
        hw = pairs[1:3] if nhwc else pairs[2:4]
        return {"pads": [hw[0][0], hw[1][0], hw[0][1], hw[1][1]]}
    raise GraphError(f"padding {pad!r} is not supported (SAME, VALID, EXPLICIT)")


def _in_nchw(n: _Node, x: Value, fn: Callable[[Value], Value]) -> Value:
    if not _nhwc(n):
        return fn(x)
    return ops.transpose(fn(ops.transpose(x, perm=_TO_NCHW)), perm=_TO_NHWC)


def _filter(w: Value, perm: list[int]) -> Value | np.ndarray:
    return np.ascontiguousarray(w.data.transpose(perm)) if w.is_const and w.data is not None else ops.transpose(w, perm=perm)


def _conv2d(n: _Node, x: Value, w: Value) -> Value:
    nhwc = _nhwc(n)
    attrs = {"strides": _spatial(n, "strides", nhwc), "dilations": _spatial(n, "dilations", nhwc), **_padding(n, nhwc)}
    kernel = _filter(w, [3, 2, 0, 1])  # HWIO -> OIHW
    return _in_nchw(n, x, lambda t: ops.conv(t, kernel, **attrs))


def _depthwise(n: _Node, x: Value, w: Value) -> Value:
    nhwc = _nhwc(n)
    wd = n.const(w, "the depthwise filter")  # H W C M -> (C*M) 1 H W, one group per input channel
    h, wid, c, m = wd.shape
    kernel = np.ascontiguousarray(wd.transpose(2, 3, 0, 1).reshape(c * m, 1, h, wid))
    attrs = {
        "strides": _spatial(n, "strides", nhwc),
        "dilations": _spatial(n, "dilations", nhwc),
        "group": int(c),
        **_padding(n, nhwc),
    }
    return _in_nchw(n, x, lambda t: ops.conv(t, kernel, **attrs))


def _pool(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(n: _Node, x: Value) -> Value:
        nhwc = _nhwc(n)
        attrs = {"kernel_shape": _spatial(n, "ksize", nhwc), "strides": _spatial(n, "strides", nhwc), **_padding(n, nhwc)}
        return _in_nchw(n, x, lambda t: op(t, **attrs))

    return convert


def _bias_add(n: _Node, x: Value, b: Value) -> Value:
    if _nhwc(n):
        return ops.add(x, b)
    rank = len(x.shape or ())
    return ops.add(x, ops.reshape(b, np.array([-1] + [1] * (rank - 2), np.int64)))


def _fused_batch_norm(
    n: _Node, x: Value, scale: Value, offset: Value, mean: Value, var: Value, *rest: Value
) -> tuple[Value, ...]:
    if n.attr("is_training", False):
        raise GraphError("FusedBatchNorm in training mode is not an inference graph")
    eps = float(n.attr("epsilon", 1e-3))
    a = ops.mul(scale, ops.reciprocal(ops.sqrt(ops.add(var, np.asarray(eps, var.dtype)))))
    b = ops.sub(offset, ops.mul(mean, a))
    if not _nhwc(n):
        shape = np.array([-1, 1, 1], np.int64)
        a, b = ops.reshape(a, shape), ops.reshape(b, shape)
    return (ops.add(ops.mul(x, a), b),)


def _matmul(n: _Node, a: Value, b: Value) -> Value:
    if n.attr("transpose_a", False) or n.attr("adj_x", False):
        a = ops.transpose(a, perm=_swap_last(len(a.shape or ())))
    if n.attr("transpose_b", False) or n.attr("adj_y", False):
        b = ops.transpose(b, perm=_swap_last(len(b.shape or ())))
    return ops.matmul(a, b)


def _swap_last(rank: int) -> list[int]:
    if rank < 2:
        raise GraphError("a transposed matmul operand needs a known rank of at least 2")
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


def _reduce(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(n: _Node, x: Value, axes: Value) -> Value:
        ax = axes if not axes.is_const else np.asarray(axes.data, np.int64).reshape(-1)
        if not isinstance(ax, np.ndarray):
            ax = ops.cast(ops.reshape(ax, np.array([-1], np.int64)), to="int64")
        return op(x, ax, keepdims=int(bool(n.attr("keep_dims", False))))

    return convert


def _reshape(n: _Node, x: Value, shape: Value) -> Value:
    return ops.reshape(x, shape if shape.dtype == "int64" else ops.cast(shape, to="int64"))


def _squeeze(n: _Node, x: Value) -> Value:
    dims = n.attr("squeeze_dims", [])
    return ops.squeeze(x, np.array(dims, np.int64)) if dims else ops.squeeze(x)


def _expand_dims(n: _Node, x: Value, axis: Value) -> Value:
    return ops.unsqueeze(x, np.asarray(n.const(axis, "the axis"), np.int64).reshape(-1))


def _transpose(n: _Node, x: Value, perm: Value) -> Value:
    return ops.transpose(x, perm=[int(p) for p in n.const(perm, "the permutation").reshape(-1)])


def _concat(n: _Node, *args: Value) -> Value:
    *parts, axis = args
    return ops.concat(*parts, axis=int(n.const(axis, "the axis")))


def _pack(n: _Node, *parts: Value) -> Value:
    axis = np.array([int(n.attr("axis", 0))], np.int64)
    return ops.concat(*[ops.unsqueeze(p, axis) for p in parts], axis=int(axis[0]))


def _gather(n: _Node, x: Value, idx: Value, axis: Value) -> Value:
    if n.attr("batch_dims", 0):
        raise GraphError("GatherV2 with batch_dims is not supported")
    return ops.gather(x, idx, axis=int(n.const(axis, "the axis")))


def _shape(n: _Node, x: Value) -> Value:
    out = ops.shape(x)
    dtype = n.attr("out_type", "int32")
    return out if dtype == "int64" else ops.cast(out, to=dtype)


def _cast(n: _Node, x: Value) -> Value:
    dtype = n.attr("DstT")
    return x if x.dtype == dtype else ops.cast(x, to=dtype)


def _softmax(n: _Node, x: Value) -> Value:
    return ops.softmax(x, axis=-1)


def _einsum(n: _Node, *xs: Value) -> Value:
    return ops.einsum(*xs, equation=n.attr("equation"))


def _unary(op: Callable[..., Value]) -> Callable[..., Value]:
    return lambda n, x: op(x)


def _binary(op: Callable[..., Value]) -> Callable[..., Value]:
    return lambda n, a, b: op(a, b)


def _relu6(n: _Node, x: Value) -> Value:
    return ops.clip(x, np.asarray(0, x.dtype), np.asarray(6, x.dtype))


def _erfc(n: _Node, x: Value) -> Value:
    return ops.sub(np.asarray(1, x.dtype), ops.erf(x))


def _squared_difference(n: _Node, a: Value, b: Value) -> Value:
    d = ops.sub(a, b)
    return ops.mul(d, d)


def _rsqrt(n: _Node, x: Value) -> Value:
    return ops.reciprocal(ops.sqrt(x))


_TF: dict[str, Callable[..., Any]] = {
    "Identity": _unary(lambda x: x),
    "StopGradient": _unary(lambda x: x),
    "Snapshot": _unary(lambda x: x),
    "Add": _binary(ops.add),
    "AddV2": _binary(ops.add),
    "Sub": _binary(ops.sub),
    "Mul": _binary(ops.mul),
    "RealDiv": _binary(ops.div),
    "Maximum": _binary(ops.max),
    "Minimum": _binary(ops.min),
    "Pow": _binary(ops.pow),
    "SquaredDifference": _squared_difference,
    "BiasAdd": _bias_add,
    "Neg": _unary(ops.neg),
    "Abs": _unary(ops.abs),
    "Exp": _unary(ops.exp),
    "Log": _unary(ops.log),
    "Sqrt": _unary(ops.sqrt),
    "Rsqrt": _rsqrt,
    "Square": _unary(lambda x: ops.mul(x, x)),
    "Erf": _unary(ops.erf),
    "Erfc": _erfc,
    "Tanh": _unary(ops.tanh),
    "Sigmoid": _unary(ops.sigmoid),
    "Relu": _unary(ops.relu),
    "Relu6": _relu6,
    "Elu": _unary(ops.elu),
    "Softmax": _softmax,
    "Cast": _cast,
    "Conv2D": _conv2d,
    "DepthwiseConv2dNative": _depthwise,
    "MaxPool": _pool(ops.max_pool),
    "AvgPool": _pool(ops.average_pool),
    "FusedBatchNorm": _fused_batch_norm,
    "FusedBatchNormV3": _fused_batch_norm,
    "MatMul": _matmul,
    "BatchMatMul": _matmul,
    "BatchMatMulV2": _matmul,
    "BatchMatMulV3": _matmul,
    "Einsum": _einsum,
    "Mean": _reduce(ops.reduce_mean),
    "Sum": _reduce(ops.reduce_sum),
    "Max": _reduce(ops.reduce_max),
    "Min": _reduce(ops.reduce_min),
    "Prod": _reduce(ops.reduce_prod),
    "Reshape": _reshape,
    "Squeeze": _squeeze,
    "ExpandDims": _expand_dims,
    "Transpose": _transpose,
    "ConcatV2": _concat,
    "Pack": _pack,
    "GatherV2": _gather,
    "Shape": _shape,
}
