"""PyTorch ATen FX graphs -> ``aioge.Graph``.

Both PyTorch paths end here: ``torch.export`` (``aioge.torch.from_module``) and the
forward graphs that AOTAutograd hands a ``torch.compile`` backend (``aioge.torch.backend``).
Each ATen call becomes aioge ops (which are ONNX-shaped) through the table ``_ATEN`` at
the bottom of this module; one function per ATen op family, read by op name.

Dimensions that PyTorch traced symbolically (``dynamic=True``, ``mark_dynamic``,
``torch.export.Dim``) stay symbolic: a plain symbol ``s0`` becomes the aioge dim ``"s0"``,
and a size that the graph computes from it (``sym_size``, ``s0 * 12``) becomes a small
int64 value computed from the ``Shape`` of an input, which aioge's specialisation evaluates
once the feeds fix the shapes.

The mapping is direct (no ONNX export in between): it needs no onnxscript, keeps the graph
in the ops PyTorch traced (``linear``, ``layer_norm``, ``scaled_dot_product_attention``
before decomposition), and the same table serves ``torch.export`` and ``torch.compile``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.fx

from aioge import ops
from aioge.errors import GraphError, UnsupportedOpError
from aioge.ir.graph import Graph, Value

__all__ = ["ConvertedGraph", "InputSlot", "convert_fx", "numpy_dtype_of", "unsupported_nodes"]

_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class InputSlot:
    """One placeholder of the FX graph: fed as ``name`` (a tensor or a SymInt), or baked in as a constant."""

    index: int
    name: str
    kind: str  # "tensor", "symint" (fed as a 1-element int64 tensor), "computed" (a SymInt derived from a shape), "constant"


@dataclass(frozen=True, slots=True)
class ConvertedGraph:
    """The aioge graph of one FX graph, with how to feed it and how to read its outputs back.

    ``outputs`` has one entry per FX output: the aioge output name, or ``None`` for an
    output that is not a tensor (kept in ``literals`` at the same index). ``symints``
    marks outputs that PyTorch expects as ints (sizes saved for backward): the graph
    computes them as 1-element int64 tensors.
    """

    graph: Graph
    inputs: tuple[InputSlot, ...]
    outputs: tuple[str | None, ...]
    literals: tuple[Any, ...]
    symints: tuple[bool, ...]


def numpy_dtype_of(dtype: torch.dtype) -> str:
    """The aioge dtype name of a torch dtype.

    Raises:
        GraphError: a dtype aioge lacks (bfloat16, quantised, complex32).
    """
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise GraphError(f"torch dtype {dtype} has no aioge equivalent; supported: {', '.join(sorted(_DTYPES))}")
    return name


_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"})


def unsupported_nodes(gm: torch.fx.GraphModule) -> list[tuple[str, str]]:
    """(op name, node name) of every call in ``gm`` that the table has no converter for."""
    missing = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and _converter(node.target) is None:
            missing.append((_op_name(node.target), node.name))
    return missing


def convert_fx(
    gm: torch.fx.GraphModule,
    *,
    name: str,
    constants: Mapping[str, torch.Tensor] | None = None,
    input_names: Mapping[str, str] | None = None,
) -> ConvertedGraph:
    """Convert an ATen-level FX graph to an aioge Graph.

    ``constants`` maps placeholder names to tensors baked into the graph (weights);
    ``input_names`` renames placeholders for the aioge graph (``x`` rather than ``arg3_1``).

    Raises:
        UnsupportedOpError: calls with no converter, listed with their FX node names.
        GraphError: a call whose arguments aioge cannot express (naming the node).
    """
    missing = unsupported_nodes(gm)
    if missing:
        raise UnsupportedOpError([("aten", op) for op, _ in missing], graph=name, nodes=[node for _, node in missing])
    return _Converter(gm, name, constants or {}, input_names or {}).run()


class _Converter:
    def __init__(
        self, gm: torch.fx.GraphModule, name: str, constants: Mapping[str, torch.Tensor], input_names: Mapping[str, str]
    ) -> None:
        self.gm = gm
        self.graph = Graph(name)
        self.constants = constants
        self.input_names = input_names
        self.env: dict[torch.fx.Node, Any] = {}
        self.symbols: dict[str, Value] = {}  # symbol name -> 1-element int64 value
        self.node: torch.fx.Node | None = None

    def run(self) -> ConvertedGraph:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        slots = self._placeholders(placeholders)
        out_names: list[str | None] = []
        literals: list[Any] = []
        symints: list[bool] = []
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "get_attr":
                self.env[node] = self.graph.constant(_to_numpy(_attr(self.gm, node.target)), _clean(node.name))
            elif node.op == "output":
                out_names, literals = self._outputs(node.args[0])
                flat = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
                symints = [isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.SymInt) for x in flat]
            elif node.op != "placeholder":
                raise GraphError(
                    f"FX node kind {node.op!r} is not expected in an ATen graph", graph=self.graph.name, node=node.name
                )
        return ConvertedGraph(self.graph, tuple(slots), tuple(out_names), tuple(literals), tuple(symints))

    # -- placeholders and outputs -------------------------------------------------------

    def _placeholders(self, placeholders: Sequence[torch.fx.Node]) -> list[InputSlot]:
        slots: list[InputSlot] = []
        pending_syms: list[tuple[int, torch.fx.Node]] = []
        for i, node in enumerate(placeholders):
            self.node = node
            val = node.meta.get("val")
            name = self.input_names.get(node.name, _clean(node.name))
            if node.name in self.constants:
                self.env[node] = self.graph.constant(_to_numpy(self.constants[node.name]), name)
                slots.append(InputSlot(i, name, "constant"))
            elif isinstance(val, torch.Tensor):
                dims = [_dim(d) for d in val.shape]
                self.env[node] = v = self.graph.input(name, dims, numpy_dtype_of(val.dtype))
                for axis, d in enumerate(dims):
                    if isinstance(d, str) and d not in self.symbols:
                        self.symbols[d] = ops.gather(ops.shape(v), np.array([axis], np.int64), axis=0)
                slots.append(InputSlot(i, name, "tensor"))
            elif isinstance(val, (torch.SymInt, int)):
                pending_syms.append((i, node))
                slots.append(InputSlot(i, name, "computed"))
            else:
                raise GraphError(
                    f"placeholder of type {type(val).__name__} is not supported (tensors and ints are)",
                    graph=self.graph.name,
                    node=node.name,
                )
        # SymInt inputs are computed from the shapes of tensor inputs when one carries the
        # symbol, so the graph depends on shapes only; otherwise they are fed.
        for i, node in pending_syms:
            val = node.meta.get("val")
            sym = _dim(val) if isinstance(val, torch.SymInt) else None
            if isinstance(val, int):
                self.env[node] = np.array([val], np.int64)
            elif isinstance(sym, str) and sym in self.symbols:
                self.env[node] = self.symbols[sym]
            else:
                name = slots[i].name
                self.env[node] = self.graph.input(name, [1], "int64")
                slots[i] = InputSlot(i, name, "symint")
        return slots

    def _outputs(self, result: Any) -> tuple[list[str | None], list[Any]]:
        flat = list(result) if isinstance(result, (list, tuple)) else [result]
        names: list[str | None] = []
        literals: list[Any] = []
        values: list[Value] = []
        for i, item in enumerate(flat):
            value = self.env.get(item) if isinstance(item, torch.fx.Node) else None
            if isinstance(value, Value):
                if value.producer is None or any(value is v for v in values):  # an input or constant returned as is, or twice
                    value = ops.identity(value)
                names.append(f"output_{i}")
                values.append(value)
                literals.append(None)
            else:
                names.append(None)
                literals.append(_literal(value if isinstance(item, torch.fx.Node) else item))
        if values:
            self.graph.output(*values, names=[n for n in names if n is not None])
        return names, literals

    # -- calls ---------------------------------------------------------------------------

    def _call(self, node: torch.fx.Node) -> Any:
        fn = _converter(node.target)
        if fn is None:  # checked up front; kept for a graph edited since
            raise UnsupportedOpError([("aten", _op_name(node.target))], graph=self.graph.name, nodes=[node.name])
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        try:
            return fn(self, node, *args, **kwargs)
        except GraphError as exc:
            if exc.node is not None:
                raise
            raise GraphError(f"{_op_name(node.target)}: {exc}", graph=self.graph.name, node=node.name) from None
        except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as exc:
            raise GraphError(f"{_op_name(node.target)}: cannot convert ({exc})", graph=self.graph.name, node=node.name) from None

    def arg(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def fail(self, message: str) -> GraphError:
        return GraphError(
            f"{_op_name(self.node.target) if self.node is not None else ''}: {message}",
            graph=self.graph.name,
            node=self.node.name if self.node is not None else None,
        )

    def ints(self, seq: Sequence[Any]) -> np.ndarray | Value:
        """A list of sizes as an int64 vector: a constant, or a value when some sizes are computed."""
        if all(isinstance(x, (int, np.integer)) for x in seq):
            return np.array([int(x) for x in seq], np.int64)
        parts = [x if isinstance(x, Value) else np.array([int(x)], np.int64) for x in seq]
        anchor = next(x for x in parts if isinstance(x, Value))
        return ops.concat(*[p if isinstance(p, Value) else anchor.graph.constant(p) for p in parts], axis=0)

    def rank(self, node: torch.fx.Node, arg: int = 0) -> int:
        """The rank PyTorch traced for a tensor argument (aioge's inference may not know it for dynamic shapes)."""
        val = node.args[arg].meta.get("val") if isinstance(node.args[arg], torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            return val.dim()
        raise self.fail(f"argument {arg} carries no traced value (meta['val']) to read its rank from")

    def out_dtype(self, node: torch.fx.Node) -> str:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return numpy_dtype_of(val.dtype)
        raise self.fail("the node carries no traced value (meta['val']) to read its dtype from")

    def const(self, x: Any, dtype: str) -> Value | np.ndarray:
        return x if isinstance(x, Value) else np.asarray(x, dtype=dtype)


def _attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _to_numpy(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        numpy_dtype_of(t.dtype)
        # A backend may be called while the tracer's fake-tensor mode is active: these are real tensors.
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            return t.detach().cpu().contiguous().numpy().copy()
    return np.asarray(t)


def _literal(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return int(value.reshape(-1)[0]) if value.size == 1 else value
    return value


def _dim(d: Any) -> int | str | None:
    """A traced size as an aioge dim: an int, a symbol's name, or None for a derived size."""
    if not isinstance(d, torch.SymInt):
        return int(d)
    # Never int() a SymInt: that would specialise it (a guard, and a recompile per size).
    expr = d.node.expr
    if getattr(expr, "is_number", False):
        return int(expr)
    return str(expr) if getattr(expr, "is_Symbol", False) else None


def _clean(name: str) -> str:
    return name.replace(".", "_")


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return target.name().replace("aten::", "")
    return getattr(target, "__name__", str(target))


def _converter(target: Any) -> Callable[..., Any] | None:
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace != "aten":
            return None
        return _ATEN.get(target.name().removeprefix("aten::")) or _ATEN.get(target.overloadpacket.__name__)
    return _PYTHON.get(target)


# -- converters, by family ------------------------------------------------------------------
# Each takes (converter, fx node, *args, **kwargs) with args already mapped: FX nodes to
# aioge values (or tuples of them), the rest as PyTorch gave them.


def _promote(c: _Converter, node: torch.fx.Node, *xs: Any) -> list[Any]:
    """Cast values to the node's result dtype (PyTorch promotes types; ONNX-shaped ops do not)."""
    dtype = c.out_dtype(node)
    out = []
    for x in xs:
        if isinstance(x, Value):
            out.append(x if x.dtype == dtype else ops.cast(x, to=dtype))
        else:
            out.append(np.asarray(x, dtype=dtype))
    return out


def _compare_operands(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, Value) and isinstance(b, Value):
        if a.dtype != b.dtype:
            common = numpy_dtype_of(torch.promote_types(_torch_dtype(a.dtype), _torch_dtype(b.dtype)))
            a = a if a.dtype == common else ops.cast(a, to=common)
            b = b if b.dtype == common else ops.cast(b, to=common)
        return a, b
    if isinstance(a, Value):
        return a, np.asarray(b, dtype=a.dtype if not isinstance(b, float) or a.dtype.startswith("float") else "float32")
    return np.asarray(a, dtype=b.dtype), b


def _not(x: Value) -> Value:
    return getattr(ops, "not")(x)


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _binary(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1, rounding_mode: str | None = None) -> Value:
        if alpha != 1:
            b = ops.mul(*_promote(c, node, b, alpha))
        x, y = _promote(c, node, a, b)
        out = op(x, y)
        if rounding_mode == "floor":
            out = ops.floor(out)
        elif rounding_mode == "trunc":
            out = ops.mul(ops.sign(out), ops.floor(ops.abs(out)))
        return out

    return convert


def _rsub(c: _Converter, node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1) -> Value:
    return (
        _binary(ops.sub)(c, node, b, a, alpha=1)
        if alpha == 1
        else _binary(ops.sub)(c, node, b, ops.mul(*_promote(c, node, a, alpha)))
    )


def _compare(op: Callable[..., Value], negate: bool = False) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, a: Any, b: Any) -> Value:
        out = op(*_compare_operands(a, b))
        return _not(out) if negate else out

    return convert


def _unary(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, *rest: Any, **kwargs: Any) -> Value:
        return op(x)

    return convert


def _identity(c: _Converter, node: torch.fx.Node, x: Value, *rest: Any, **kwargs: Any) -> Value:
    return x


def _to_dtype(c: _Converter, node: torch.fx.Node, x: Value, *rest: Any, **kwargs: Any) -> Value:
    dtype = c.out_dtype(node)
    return x if x.dtype == dtype else ops.cast(x, to=dtype)


def _dropout(c: _Converter, node: torch.fx.Node, x: Value, p: float = 0.5, train: bool | None = False) -> Any:
    if train:
        raise c.fail("dropout in training mode is random; call module.eval() first")
    return x if node.target.overloadpacket.__name__ != "native_dropout" else (x, None)


def _gelu(c: _Converter, node: torch.fx.Node, x: Value, approximate: str = "none") -> Value:
    return ops.gelu(x, approximate=approximate)


def _silu(c: _Converter, node: torch.fx.Node, x: Value) -> Value:
    return ops.mul(x, ops.sigmoid(x))


def _hardsigmoid(c: _Converter, node: torch.fx.Node, x: Value) -> Value:
    return ops.hard_sigmoid(x, alpha=1.0 / 6.0, beta=0.5)


def _clamp(c: _Converter, node: torch.fx.Node, x: Value, lo: Any = None, hi: Any = None) -> Value:
    dtype = c.out_dtype(node)
    return ops.clip(x, None if lo is None else c.const(lo, dtype), None if hi is None else c.const(hi, dtype))


def _hardtanh(c: _Converter, node: torch.fx.Node, x: Value, lo: float = -1.0, hi: float = 1.0) -> Value:
    return _clamp(c, node, x, lo, hi)


def _rsqrt(c: _Converter, node: torch.fx.Node, x: Value) -> Value:
    return ops.reciprocal(ops.sqrt(x))


def _pow(c: _Converter, node: torch.fx.Node, x: Any, e: Any) -> Value:
    x, e = _promote(c, node, x, e)
    return ops.pow(x, e)


def _where(c: _Converter, node: torch.fx.Node, cond: Value, a: Any, b: Any) -> Value:
    a, b = _promote(c, node, a, b)
    return ops.where(cond, a, b)


def _masked_fill(c: _Converter, node: torch.fx.Node, x: Value, mask: Value, value: Any) -> Value:
    return ops.where(mask, c.const(value, x.dtype), x)


def _logical_not(c: _Converter, node: torch.fx.Node, x: Value) -> Value:
    return _not(x if x.dtype == "bool" else ops.cast(x, to="bool"))


# -- linear algebra and nn -----------------------------------------------------------------


def _linear(c: _Converter, node: torch.fx.Node, x: Value, w: Value, b: Value | None = None) -> Value:
    if c.rank(node) == 2:
        return ops.gemm(x, w, b, transB=1)
    out = ops.matmul(x, ops.transpose(w, perm=[1, 0]))
    return out if b is None else ops.add(out, b)


def _addmm(c: _Converter, node: torch.fx.Node, b: Value, x: Value, w: Value, *, beta: float = 1, alpha: float = 1) -> Value:
    return ops.gemm(x, w, b, alpha=float(alpha), beta=float(beta))


def _matmul(c: _Converter, node: torch.fx.Node, a: Value, b: Value) -> Value:
    return ops.matmul(a, b)


def _t(c: _Converter, node: torch.fx.Node, x: Value) -> Value:
    return x if c.rank(node) < 2 else ops.transpose(x, perm=[1, 0])


def _conv(
    c: _Converter,
    node: torch.fx.Node,
    x: Value,
    w: Value,
    b: Value | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    *rest: Any,
) -> Value:
    # conv{1,2,3}d(x, w, b, stride, padding, dilation, groups); convolution(..., transposed, output_padding, groups)
    spatial = len(w.shape or ()) - 2
    name = node.target.overloadpacket.__name__
    if name == "convolution":
        transposed, _, groups = rest
        if transposed:
            raise c.fail("transposed convolution is not mapped yet")
    else:
        groups = rest[0] if rest else 1
    attrs: dict[str, Any] = {"strides": _spatial(stride, spatial), "dilations": _spatial(dilation, spatial), "group": int(groups)}
    if isinstance(padding, str):
        attrs["auto_pad"] = {"same": "SAME_UPPER", "valid": "VALID"}[padding]
    else:
        pads = _spatial(padding, spatial)
        attrs["pads"] = pads + pads
    return ops.conv(x, w, b, **attrs)


def _spatial(v: Any, n: int) -> list[int]:
    vals = [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]
    return vals * n if len(vals) == 1 else vals


def _batch_norm_eval(
    c: _Converter,
    node: torch.fx.Node,
    x: Value,
    w: Value | None,
    b: Value | None,
    mean: Value,
    var: Value,
    momentum: float,
    eps: float,
) -> tuple[Value, None, None]:
    return _bn(x, w, b, mean, var, eps), None, None


def _batch_norm(
    c: _Converter,
    node: torch.fx.Node,
    x: Value,
    w: Value | None,
    b: Value | None,
    mean: Value | None,
    var: Value | None,
    training: bool,
    momentum: float,
    eps: float,
    *rest: Any,
) -> Value:
    if training or mean is None or var is None:
        raise c.fail("batch norm in training mode updates its statistics; call module.eval() first")
    return _bn(x, w, b, mean, var, eps)


def _bn(x: Value, w: Value | None, b: Value | None, mean: Value, var: Value, eps: float) -> Value:
    channels = (mean.shape or (None,))[0]
    if w is None:
        w = np.ones(channels, x.dtype)
    if b is None:
        b = np.zeros(channels, x.dtype)
    return ops.batch_normalization(x, w, b, mean, var, epsilon=float(eps))


def _batch_norm_training(c: _Converter, node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
    raise c.fail("batch norm in training mode updates its statistics; call module.eval() first")


def _layer_norm(
    c: _Converter,
    node: torch.fx.Node,
    x: Value,
    shape: Sequence[int],
    w: Value | None = None,
    b: Value | None = None,
    eps: float = 1e-5,
    *rest: Any,
) -> Any:
    w = w if w is not None else np.ones(list(shape), x.dtype)
    out = ops.layer_normalization(x, w, b, axis=-len(shape), epsilon=float(eps))
    return (out, None, None) if node.target.overloadpacket.__name__ == "native_layer_norm" else out


def _softmax(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, dim: int, *rest: Any, **kwargs: Any) -> Value:
        return _to_dtype(c, node, op(x, axis=int(dim)))

    return convert


def _max_pool(
    c: _Converter,
    node: torch.fx.Node,
    x: Value,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Any:
    n = len(kernel)
    pads = _spatial(padding, n)
    out = ops.max_pool(
        x,
        kernel_shape=list(kernel),
        strides=_spatial(stride or kernel, n),
        pads=pads + pads,
        dilations=_spatial(dilation, n),
        ceil_mode=int(ceil_mode),
    )
    return (out, None) if node.target.overloadpacket.__name__.endswith("with_indices") else out


def _avg_pool(
    c: _Converter,
    node: torch.fx.Node,
    x: Value,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Value:
    if divisor_override is not None:
        raise c.fail("avg_pool with divisor_override is not mapped")
    n = len(kernel)
    pads = _spatial(padding, n)
    return ops.average_pool(
        x,
        kernel_shape=list(kernel),
        strides=_spatial(stride or kernel, n),
        pads=pads + pads,
        ceil_mode=int(ceil_mode),
        count_include_pad=int(count_include_pad),
    )


def _adaptive_avg_pool(c: _Converter, node: torch.fx.Node, x: Value, size: Sequence[int]) -> Value:
    if all(int(s) == 1 for s in size):
        return ops.global_average_pool(x)
    spatial = (x.shape or ())[-len(size) :]
    if not all(isinstance(d, int) and d % int(s) == 0 for d, s in zip(spatial, size)):
        raise c.fail(f"adaptive average pooling from {tuple(spatial)} to {tuple(size)} needs static sizes that divide evenly")
    kernel = [int(d) // int(s) for d, s in zip(spatial, size)]
    return ops.average_pool(x, kernel_shape=kernel, strides=kernel)


def _sdpa(
    c: _Converter,
    node: torch.fx.Node,
    q: Value,
    k: Value,
    v: Value,
    attn_mask: Value | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Value:
    if dropout_p:
        raise c.fail("attention dropout is random; call module.eval() first")
    head = (q.shape or (None,))[-1]
    if scale is None:
        if not isinstance(head, int):
            raise c.fail("attention needs a static head size to compute its scale")
        scale = 1.0 / math.sqrt(head)
    scores = ops.mul(ops.matmul(q, ops.transpose(k, perm=_swap_last(c.rank(node, 1)))), np.asarray(scale, q.dtype))
    if is_causal:
        sq, sk = ops.shape(scores, start=-2, end=-1), ops.shape(scores, start=-1)
        ones = ops.constant_of_shape(ops.concat(sq, sk, axis=0), value=np.array([1], np.uint8))
        keep = ops.cast(ops.trilu(ops.cast(ones, to="int64"), upper=0), to="bool")
        scores = ops.where(keep, scores, np.asarray(-np.inf, q.dtype))
    if attn_mask is not None:
        if attn_mask.dtype == "bool":
            scores = ops.where(attn_mask, scores, np.asarray(-np.inf, q.dtype))
        else:
            scores = ops.add(scores, attn_mask)
    return ops.matmul(ops.softmax(scores, axis=-1), v)


def _sdpa_cpu(
    c: _Converter,
    node: torch.fx.Node,
    q: Value,
    k: Value,
    v: Value,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: Value | None = None,
    scale: float | None = None,
) -> tuple[Value, None]:
    # AOTAutograd's CPU lowering of scaled_dot_product_attention: (output, logsumexp)
    return _sdpa(c, node, q, k, v, attn_mask, dropout_p, is_causal, scale=scale), None


def _swap_last(rank: int) -> list[int]:
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


def _embedding(c: _Converter, node: torch.fx.Node, weight: Value, indices: Value, *rest: Any) -> Value:
    return ops.gather(weight, indices, axis=0)


def _gather(c: _Converter, node: torch.fx.Node, x: Value, dim: int, index: Value, *, sparse_grad: bool = False) -> Value:
    return ops.gather_elements(x, index, axis=int(dim))


def _index_select(c: _Converter, node: torch.fx.Node, x: Value, dim: int, index: Value) -> Value:
    return ops.gather(x, index, axis=int(dim))


# -- reductions ----------------------------------------------------------------------------------


def _reduce(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(
        c: _Converter, node: torch.fx.Node, x: Value, dims: Any = None, keepdim: bool = False, *, dtype: Any = None
    ) -> Value:
        if dims is None or (isinstance(dims, (list, tuple)) and not dims):
            out = op(x, keepdims=0)
        else:
            axes = [int(dims)] if isinstance(dims, int) else [int(d) for d in dims]
            out = op(x, np.array(axes, np.int64), keepdims=int(bool(keepdim)))
        return _to_dtype(c, node, out)

    return convert


# -- shapes --------------------------------------------------------------------------------------


def _view(c: _Converter, node: torch.fx.Node, x: Value, size: Sequence[Any]) -> Value:
    return ops.reshape(x, c.ints(size))


def _flatten(c: _Converter, node: torch.fx.Node, x: Value, start: int = 0, end: int = -1) -> Value:
    rank = c.rank(node)
    start, end = start % max(rank, 1), end % max(rank, 1)
    if rank == 0:
        return ops.reshape(x, np.array([1], np.int64))
    return ops.reshape(x, np.array([0] * start + [-1] + [0] * (rank - 1 - end), np.int64))


def _permute(c: _Converter, node: torch.fx.Node, x: Value, dims: Sequence[int]) -> Value:
    return ops.transpose(x, perm=[int(d) % len(dims) for d in dims])


def _transpose(c: _Converter, node: torch.fx.Node, x: Value, d0: int, d1: int) -> Value:
    rank = c.rank(node)
    perm = list(range(rank))
    perm[d0 % rank], perm[d1 % rank] = perm[d1 % rank], perm[d0 % rank]
    return ops.transpose(x, perm=perm)


def _unsqueeze(c: _Converter, node: torch.fx.Node, x: Value, dim: int) -> Value:
    return ops.unsqueeze(x, np.array([int(dim)], np.int64))


def _squeeze(c: _Converter, node: torch.fx.Node, x: Value, dims: Any = None) -> Value:
    if dims is None:
        return ops.squeeze(x)
    axes = [int(dims)] if isinstance(dims, int) else [int(d) for d in dims]
    shape = x.shape or ()
    axes = [a for a in axes if shape and shape[a] == 1]  # torch ignores squeezing a dim that is not 1
    return ops.squeeze(x, np.array(axes, np.int64)) if axes else x


def _expand(c: _Converter, node: torch.fx.Node, x: Value, size: Sequence[Any], *, implicit: bool = False) -> Value:
    # -1 keeps a dim; Expand broadcasts, so 1 does the same there.
    return ops.expand(x, c.ints([1 if isinstance(s, int) and s == -1 else s for s in size]))


def _slice(
    c: _Converter, node: torch.fx.Node, x: Value, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Value:
    start = 0 if start is None else start
    end = _INT64_MAX if end is None else end
    if isinstance(start, int) and isinstance(end, int) and start == 0 and end >= _INT64_MAX and step == 1:
        return x
    return ops.slice(
        x,
        c.ints([start]),
        c.ints([min(end, _INT64_MAX) if isinstance(end, int) else end]),
        np.array([int(dim)], np.int64),
        np.array([int(step)], np.int64),
    )


def _select(c: _Converter, node: torch.fx.Node, x: Value, dim: int, index: Any) -> Value:
    idx = np.asarray(index, np.int64) if isinstance(index, int) else ops.squeeze(index, np.array([0], np.int64))
    return ops.gather(x, idx, axis=int(dim))


def _cat(c: _Converter, node: torch.fx.Node, tensors: Sequence[Value], dim: int = 0) -> Value:
    dtype = c.out_dtype(node)
    parts = [t if t.dtype == dtype else ops.cast(t, to=dtype) for t in tensors]
    return ops.concat(*parts, axis=int(dim))


def _split(c: _Converter, node: torch.fx.Node, x: Value, size: Any, dim: int = 0) -> tuple[Value, ...]:
    outs = node.meta.get("val")
    if not isinstance(outs, (list, tuple)):
        raise c.fail("split carries no traced outputs")
    axis = int(dim)
    sizes = [int(size)] * len(outs) if isinstance(size, int) else [int(s) for s in size]
    if isinstance(size, int):
        total = x.shape[axis] if x.shape else None
        if isinstance(total, int):
            sizes[-1] = total - size * (len(outs) - 1)
        else:
            sizes = [_dim(o.shape[axis]) for o in outs]  # type: ignore[misc]
            if not all(isinstance(s, int) for s in sizes):
                raise c.fail("split of a dynamic dim into fixed-size chunks is not mapped")
    result = ops.split(x, np.array(sizes, np.int64), axis=axis, num_outputs=len(outs))
    return result if isinstance(result, tuple) else (result,)


# -- constructors ----------------------------------------------------------------------------


def _arange(c: _Converter, node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
    dtype = c.out_dtype(node)
    if all(isinstance(a, (int, float)) for a in (start, end, step)):
        return c.graph.constant(np.arange(start, end, step, dtype=dtype))
    parts = [a if isinstance(a, Value) else np.array([a], np.int64) for a in (start, end, step)]
    scalars = [
        ops.squeeze(ops.cast(p, to=dtype) if isinstance(p, Value) else p.astype(dtype), np.array([0], np.int64)) for p in parts
    ]
    return ops.range(*scalars)


def _full(c: _Converter, node: torch.fx.Node, size: Sequence[Any], value: Any, **kwargs: Any) -> Any:
    dtype = c.out_dtype(node)
    shape = c.ints(size)
    if isinstance(shape, np.ndarray):
        return c.graph.constant(np.full(shape.tolist(), value, dtype=dtype))
    return ops.constant_of_shape(shape, value=np.array([value], dtype=dtype))


def _filled(value: float) -> Callable[..., Any]:
    def convert(c: _Converter, node: torch.fx.Node, size: Sequence[Any], **kwargs: Any) -> Any:
        return _full(c, node, size, value)

    return convert


def _full_like(c: _Converter, node: torch.fx.Node, x: Value, value: Any, **kwargs: Any) -> Value:
    dtype = c.out_dtype(node)
    return ops.constant_of_shape(ops.shape(x), value=np.array([value], dtype=dtype))


def _like(value: float) -> Callable[..., Any]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, **kwargs: Any) -> Any:
        return _full_like(c, node, x, value)

    return convert


def _scalar_tensor(c: _Converter, node: torch.fx.Node, value: Any, **kwargs: Any) -> Any:
    return c.graph.constant(np.asarray(value, dtype=c.out_dtype(node)))


# -- SymInt arithmetic and Python built-ins --------------------------------------------------


def _sym_size(c: _Converter, node: torch.fx.Node, x: Value, dim: int) -> Any:
    d = x.shape[dim] if x.shape is not None else None
    if isinstance(d, int):
        return np.array([d], np.int64)
    return ops.gather(ops.shape(x), np.array([int(dim)], np.int64), axis=0)


def _sym_binary(op: Callable[..., Value], py: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def convert(c: _Converter, node: torch.fx.Node, a: Any, b: Any) -> Any:
        if not isinstance(a, Value) and not isinstance(b, Value):
            return py(_literal(a), _literal(b))
        return op(*(x if isinstance(x, Value) else np.array([int(_literal(x))], np.int64) for x in (a, b)))

    return convert


def _getitem(c: _Converter, node: torch.fx.Node, seq: Any, index: int) -> Any:
    if isinstance(seq, Value):
        raise c.fail("indexing a tensor with [] is not expected in an ATen graph")
    return seq[index]


_ATEN: dict[str, Callable[..., Any]] = {
    # elementwise
    "add": _binary(ops.add),
    "sub": _binary(ops.sub),
    "mul": _binary(ops.mul),
    "div": _binary(ops.div),
    "rsub": _rsub,
    "pow": _pow,
    "neg": _unary(ops.neg),
    "abs": _unary(ops.abs),
    "exp": _unary(ops.exp),
    "log": _unary(ops.log),
    "sqrt": _unary(ops.sqrt),
    "rsqrt": _rsqrt,
    "reciprocal": _unary(ops.reciprocal),
    "sin": _unary(ops.sin),
    "cos": _unary(ops.cos),
    "tanh": _unary(ops.tanh),
    "sigmoid": _unary(ops.sigmoid),
    "erf": _unary(ops.erf),
    "floor": _unary(ops.floor),
    "ceil": _unary(ops.ceil),
    "relu": _unary(ops.relu),
    "relu_": _unary(ops.relu),
    "gelu": _gelu,
    "silu": _silu,
    "hardswish": _unary(ops.hard_swish),
    "hardsigmoid": _hardsigmoid,
    "hardtanh": _hardtanh,
    "clamp": _clamp,
    "clamp_min": _clamp,
    "clamp_max": lambda c, n, x, hi: _clamp(c, n, x, None, hi),
    "eq": _compare(ops.equal),
    "ne": _compare(ops.equal, negate=True),
    "lt": _compare(ops.less),
    "le": _compare(ops.less_or_equal),
    "gt": _compare(ops.greater),
    "ge": _compare(ops.greater_or_equal),
    "logical_not": _logical_not,
    "bitwise_not": _logical_not,
    "where": _where,
    "masked_fill": _masked_fill,
    # copies and casts
    "clone": _identity,
    "contiguous": _identity,
    "alias": _identity,
    "detach": _identity,
    "lift_fresh_copy": _identity,
    "_to_copy": _to_dtype,
    "to": _to_dtype,
    "type_as": _to_dtype,
    "dropout": _dropout,
    "native_dropout": _dropout,
    "_assert_tensor_metadata": lambda *a, **k: None,
    # nn
    "linear": _linear,
    "addmm": _addmm,
    "mm": _matmul,
    "bmm": _matmul,
    "matmul": _matmul,
    "t": _t,
    "conv1d": _conv,
    "conv2d": _conv,
    "conv3d": _conv,
    "convolution": _conv,
    "_native_batch_norm_legit_no_training": _batch_norm_eval,
    "batch_norm": _batch_norm,
    "_native_batch_norm_legit_functional": _batch_norm_training,
    "_native_batch_norm_legit": _batch_norm_training,
    "layer_norm": _layer_norm,
    "native_layer_norm": _layer_norm,
    "_softmax": _softmax(ops.softmax),
    "softmax": _softmax(ops.softmax),
    "_log_softmax": _softmax(ops.log_softmax),
    "log_softmax": _softmax(ops.log_softmax),
    "max_pool2d": _max_pool,
    "max_pool2d_with_indices": _max_pool,
    "avg_pool2d": _avg_pool,
    "adaptive_avg_pool2d": _adaptive_avg_pool,
    "_adaptive_avg_pool2d": _adaptive_avg_pool,
    "scaled_dot_product_attention": _sdpa,
    "embedding": _embedding,
    "index_select": _index_select,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_cpu,
    "gather": _gather,
    # reductions
    "mean": _reduce(ops.reduce_mean),
    "sum": _reduce(ops.reduce_sum),
    "amax": _reduce(ops.reduce_max),
    "amin": _reduce(ops.reduce_min),
    # shapes
    "view": _view,
    "reshape": _view,
    "_unsafe_view": _view,
    "flatten": _flatten,
    "permute": _permute,
    "transpose": _transpose,
    "unsqueeze": _unsqueeze,
    "squeeze": _squeeze,
    "expand": _expand,
    "slice": _slice,
    "select": _select,
    "cat": _cat,
    "split": _split,
    "split_with_sizes": _split,
    # constructors
    "arange": _arange,
    "full": _full,
    "zeros": _filled(0),
    "ones": _filled(1),
    "full_like": _full_like,
    "zeros_like": _like(0),
    "ones_like": _like(1),
    "scalar_tensor": _scalar_tensor,
    # SymInts
    "sym_size.int": _sym_size,
    "sym_size": _sym_size,
}

_PYTHON: dict[Any, Callable[..., Any]] = {
    operator.getitem: _getitem,
    operator.mul: _sym_binary(ops.mul, operator.mul),
    operator.add: _sym_binary(ops.add, operator.add),
    operator.sub: _sym_binary(ops.sub, operator.sub),
    operator.floordiv: _sym_binary(ops.div, operator.floordiv),
}
