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

import functools
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

__all__ = [
    "ConvertedGraph",
    "Converters",
    "InputSlot",
    "convert_fx",
    "decompositions",
    "is_supported",
    "numpy_dtype_of",
    "unsupported_nodes",
]

_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class InputSlot:
    """One placeholder of the FX graph: fed as ``name`` (a tensor or a SymInt), or baked in as a constant."""

    index: int
    name: str
    kind: str  # "tensor", "symint" (fed as a 1-element int64 tensor), "computed" (a SymInt derived from a shape), "constant"
    axis: int = -1  # kind "size" (``padded`` graphs): fed as the size of dim ``axis`` of argument ``index``


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


Converters = Mapping[Any, Callable[..., Any]]
"""User converters: an ATen op (``torch.ops.aten.cumsum`` or one overload, ``.default``) ->
a function of the op's arguments (aioge values for tensors, Python values for the rest)
returning an aioge value, or a tuple of them for an op with several outputs."""


def unsupported_nodes(gm: torch.fx.GraphModule, converters: Converters | None = None) -> list[tuple[str, str]]:
    """(op name, node name) of every call in ``gm`` that the table has no converter for."""
    return [
        (_op_name(n.target), n.name)
        for n in gm.graph.nodes
        if n.op == "call_function" and _converter(n.target, converters) is None
    ]


def is_supported(node: torch.fx.Node, converters: Converters | None = None) -> bool:
    """Whether ``node`` has a converter (the partitioner's question); ``getitem`` follows its source."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return is_supported(node.args[0], converters)
    return _converter(node.target, converters) is not None


def decompositions(converters: Converters | None = None) -> dict[Any, Callable[..., Any]]:
    """torch's core ATen decomposition table minus the ops converted whole (as inductor does: composite ops arrive
    decomposed into ones the table maps, mapped ones stay whole), built once per set of user-converted ops (``_table``)."""
    return dict(_table(frozenset(converters or ())))


@functools.cache
def _table(user_ops: frozenset[Any]) -> dict[Any, Callable[..., Any]]:
    from torch._decomp import core_aten_decompositions

    users = dict.fromkeys(user_ops, _table)  # _converter asks only whether an op has a user converter
    return {op: fn for op, fn in core_aten_decompositions().items() if _converter(op, users) is None}


def convert_fx(
    gm: torch.fx.GraphModule,
    *,
    name: str,
    constants: Mapping[str, torch.Tensor] | None = None,
    input_names: Mapping[str, str] | None = None,
    converters: Converters | None = None,
    padded: bool = False,
) -> ConvertedGraph:
    """Convert an ATen-level FX graph to an aioge Graph.

    ``constants`` maps placeholder names to tensors baked into the graph (weights);
    ``input_names`` renames placeholders for the aioge graph (``x`` rather than ``arg3_1``);
    ``converters`` add to or override the table (see ``Converters``). ``padded``: every symbolic
    dim of a tensor input may be fed padded; its true size is fed as well (an ``InputSlot`` of
    kind "size") and the graph slices the input back to it first, so one compile (for the
    padded shapes) serves every size up to them.

    Raises:
        UnsupportedOpError: calls with no converter, listed with their FX node names.
        GraphError: a call whose arguments aioge cannot express (naming the node).
    """
    missing = unsupported_nodes(gm, converters)
    if missing:
        raise UnsupportedOpError([("aten", op) for op, _ in missing], graph=name, nodes=[node for _, node in missing])
    return _Converter(gm, name, constants or {}, input_names or {}, converters or {}, padded).run()


class _Converter:
    def __init__(
        self,
        gm: torch.fx.GraphModule,
        name: str,
        constants: Mapping[str, torch.Tensor],
        input_names: Mapping[str, str],
        converters: Converters,
        padded: bool = False,
    ) -> None:
        self.padded = padded
        self.gm = gm
        self.converters = converters
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
        sizes: list[InputSlot] = []  # padded: the true sizes fed
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
                slots.append(InputSlot(i, name, "tensor"))
                for axis, d in enumerate(dims):
                    if self.padded and d is None:
                        raise self.fail(f"input {name} has a derived dynamic size: it cannot be padded")
                    if isinstance(d, str) and d not in self.symbols:
                        if self.padded:
                            self.symbols[d] = self.graph.input(f"size_{d}", [1], "int64")
                            sizes.append(InputSlot(i, f"size_{d}", "size", axis))
                        else:
                            self.symbols[d] = ops.gather(ops.shape(v), np.array([axis], np.int64), axis=0)
                axes = [a for a, d in enumerate(dims) if isinstance(d, str)]
                if self.padded and axes:  # the true sizes of the padded dims
                    ends = ops.concat(*[self.symbols[dims[a]] for a in axes], axis=0)  # type: ignore[index]
                    self.env[node] = ops.slice(v, np.zeros(len(axes), np.int64), ends, np.array(axes, np.int64))
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
        return slots + sizes

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
        fn = _converter(node.target, self.converters)
        if fn is None:  # checked up front; kept for a graph edited since
            raise UnsupportedOpError([("aten", _op_name(node.target))], graph=self.graph.name, nodes=[node.name])
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        try:
            return self._fill_outputs(node, fn(self, node, *args, **kwargs))
        except GraphError as exc:
            if exc.node == node.name:
                raise
            # an aioge node's name means nothing to the caller: name the FX node (the partitioner reads it)
            raise GraphError(f"{_op_name(node.target)}: {exc}", graph=self.graph.name, node=node.name) from None
        except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as exc:
            raise GraphError(f"{_op_name(node.target)}: cannot convert ({exc})", graph=self.graph.name, node=node.name) from None

    def _fill_outputs(self, node: torch.fx.Node, result: Any) -> Any:
        """Outputs a converter left out (None: unused in inference) but that the graph reads,
        as autograd's saved tensors are: zeros of the traced shape when it is static."""
        if not isinstance(result, tuple) or all(r is not None for r in result):
            return result
        used = {int(u.args[1]) for u in node.users if u.target is operator.getitem}
        vals = node.meta.get("val")
        out = list(result)
        for i in used:
            if out[i] is None:
                val = vals[i] if isinstance(vals, (list, tuple)) else None
                shape = [_dim(d) for d in val.shape] if isinstance(val, torch.Tensor) else [None]
                if not all(isinstance(d, int) for d in shape):
                    raise self.fail(f"output {i} is used but not computed by the converter")
                out[i] = self.graph.constant(np.zeros(shape, numpy_dtype_of(val.dtype)))
        return tuple(out)

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

    def rank_of(self, node: torch.fx.Node) -> int:
        """The rank PyTorch traced for the node's own (first) result."""
        val = node.meta.get("val")
        val = val[0] if isinstance(val, (list, tuple)) else val
        if isinstance(val, torch.Tensor):
            return val.dim()
        raise self.fail("the node carries no traced value (meta['val']) to read its rank from")

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


def _converter(target: Any, converters: Converters | None = None) -> Callable[..., Any] | None:
    if isinstance(target, torch._ops.OpOverload):
        if converters:
            user = converters.get(target) or converters.get(target.overloadpacket)
            if user is not None:
                return lambda c, node, *args, **kwargs: user(*args, **kwargs)
        if target.namespace == "prims":
            return _ATEN.get(target.name())
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
        if isinstance(b, float) and not a.dtype.startswith("float"):  # torch compares an int with 0.5 in float
            return ops.cast(a, to="float32"), np.asarray(b, "float32")
        return a, np.asarray(b, dtype=a.dtype)
    b, a = _compare_operands(b, a)
    return a, b


def _not(x: Value) -> Value:
    return ops.not_(x)


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _binary(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1, rounding_mode: str | None = None) -> Value:
        if alpha != 1:
            b = ops.mul(*_promote(c, node, b, alpha))
        x, y = _promote(c, node, a, b)
        dtype = c.out_dtype(node)
        if dtype == "bool" and op in _BOOL_ARITH:
            return _BOOL_ARITH[op](x, y)
        if rounding_mode is not None and not dtype.startswith("float"):
            # Div truncates integers; round the exact quotient instead (float64 holds int32 exactly)
            x, y = (
                ops.cast(x, to="float64") if isinstance(x, Value) else x.astype("float64"),
                (ops.cast(y, to="float64") if isinstance(y, Value) else y.astype("float64")),
            )
            q = op(x, y)
            q = ops.floor(q) if rounding_mode == "floor" else ops.mul(ops.sign(q), ops.floor(ops.abs(q)))
            return ops.cast(q, to=dtype)
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


def _unary(op: Callable[..., Value], integral: bool = False) -> Callable[..., Value]:
    """An elementwise op in the result's dtype (``sin`` of an int is float32); ``integral`` ops
    (floor, ceil, round, trunc) leave integers as they are."""

    def convert(c: _Converter, node: torch.fx.Node, x: Value, *rest: Any, **kwargs: Any) -> Value:
        if integral and not x.dtype.startswith("float"):
            return x
        return op(_to_dtype(c, node, x))

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
    return ops.reciprocal(ops.sqrt(_to_dtype(c, node, x)))


def _pow(c: _Converter, node: torch.fx.Node, x: Any, e: Any) -> Value:
    x, e = _promote(c, node, x, e)
    if isinstance(x, Value) and x.dtype.startswith("float") and isinstance(node.args[1], (int, float)) and node.args[1] == 2:
        return ops.mul(x, x)  # x ** 2 as torch computes it (RMSNorm's): a Mul, which the C tier runs
    return ops.pow(x, e)


def _neg(c: _Converter, node: torch.fx.Node, x: Value) -> Value:
    x = _to_dtype(c, node, x)  # a float's -x is x * -1 to the bit (signed zeros too): a Mul, which the C tier runs
    return ops.mul(x, c.const(-1, x.dtype)) if x.dtype.startswith("float") else ops.neg(x)


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
    transposed, output_padding = False, 0
    if name == "convolution":
        transposed, output_padding, groups = rest
    else:
        groups = rest[0] if rest else 1
    attrs: dict[str, Any] = {"strides": _spatial(stride, spatial), "dilations": _spatial(dilation, spatial), "group": int(groups)}
    if transposed:  # torch's weight is (in, out / groups, *kernel), as ConvTranspose's
        pads = _spatial(padding, spatial)
        return ops.conv_transpose(x, w, b, pads=pads + pads, output_padding=_spatial(output_padding, spatial), **attrs)
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
    if node.target.overloadpacket.__name__ != "native_layer_norm":
        return out
    if not _uses_outputs(node):
        return out, None, None
    # Grad mode: autograd saves the mean and 1/std (keepdim over the normalised dims).
    axes = np.arange(-len(shape), 0, dtype=np.int64)
    mean = ops.reduce_mean(x, axes, keepdims=1)
    centred = ops.sub(x, mean)
    var = ops.reduce_mean(ops.mul(centred, centred), axes, keepdims=1)
    return out, mean, ops.reciprocal(ops.sqrt(ops.add(var, np.asarray(eps, x.dtype))))


def _uses_outputs(node: torch.fx.Node) -> bool:
    """Whether the graph reads outputs after the first of a multi-output node."""
    return any(u.target is operator.getitem and u.args[1] != 0 for u in node.users)


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
    if len(x.shape or ()) == n + 1:  # unbatched (C, H, W)
        batched = _max_pool(c, node, ops.unsqueeze(x, np.array([0], np.int64)), kernel, stride, padding, dilation, ceil_mode)
        out = batched[0] if isinstance(batched, tuple) else batched
        out = ops.squeeze(out, np.array([0], np.int64))
        return (out, None) if isinstance(batched, tuple) else out
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
    if len(x.shape or ()) == n + 1:  # unbatched (C, H, W)
        x1 = ops.unsqueeze(x, np.array([0], np.int64))
        out = _avg_pool(c, node, x1, kernel, stride, padding, ceil_mode, count_include_pad)
        return ops.squeeze(out, np.array([0], np.int64))
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
    traced = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    head = _dim(traced.shape[-1]) if isinstance(traced, torch.Tensor) else (q.shape or (None,))[-1]
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
    out = ops.matmul(ops.softmax(scores, axis=-1), v)
    if node.target.overloadpacket.__name__ == "_scaled_dot_product_flash_attention_for_cpu":
        # (output, logsumexp): autograd saves the second in grad mode
        lse = ops.reduce_log_sum_exp(scores, np.array([-1], np.int64), keepdims=0) if _uses_outputs(node) else None
        return out, lse  # type: ignore[return-value]
    return out


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
    return _sdpa(c, node, q, k, v, attn_mask, dropout_p, is_causal, scale=scale)  # type: ignore[return-value]


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


def _reduce(op: Callable[..., Value], accumulate: bool = False) -> Callable[..., Value]:
    """A reduction; ``accumulate`` (sum, mean, prod) computes in the result's dtype, as torch
    does (``int8.sum()`` is int64, ``x.mean(dtype=torch.float32)`` divides in float)."""

    def convert(
        c: _Converter, node: torch.fx.Node, x: Value, dims: Any = None, keepdim: bool = False, *, dtype: Any = None
    ) -> Value:
        if accumulate:
            x = _to_dtype(c, node, x)
        elif x.dtype == "bool":
            x = ops.cast(x, to="uint8")
        if dims is None or (isinstance(dims, (list, tuple)) and not dims):
            out = op(x, keepdims=int(bool(keepdim)))
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
    val = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    shape = tuple(_dim(d) for d in val.shape) if isinstance(val, torch.Tensor) else (x.shape or ())
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
    # torch.cat skips 1-d empty tensors whatever the others' rank (an empty cache, as in GPT-2)
    rank = c.rank_of(node)
    parts = [t for t in tensors if not (rank != 1 and t.shape is not None and tuple(t.shape) == (0,))] or list(tensors)
    parts = [t if t.dtype == dtype else ops.cast(t, to=dtype) for t in parts]
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
    start, end, step = (
        _literal(a) if isinstance(a, np.ndarray) else a for a in ((0, args[0], 1) if len(args) == 1 else (args + (1,))[:3])
    )
    dtype = c.out_dtype(node)
    if all(isinstance(a, (int, float)) for a in (start, end, step)):
        return c.graph.constant(np.arange(start, end, step, dtype=dtype))
    parts = [a if isinstance(a, Value) else np.array([a], np.int64) for a in (start, end, step)]
    scalars = [
        ops.squeeze(ops.cast(p, to=dtype), np.array([0], np.int64)) if isinstance(p, Value) else p.astype(dtype).reshape(())
        for p in parts
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


# -- masks, indexing and the ops that transformers and torchvision models use --------------------

_BOOL_ARITH: dict[Callable[..., Value], Callable[..., Value]] = {
    ops.mul: ops.and_,
    ops.add: ops.or_,
    ops.max: ops.or_,
    ops.min: ops.and_,
}


def _bitwise(logical: Callable[..., Value], bitwise: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, a: Any, b: Any) -> Value:
        x, y = _promote(c, node, a, b)
        return (logical if c.out_dtype(node) == "bool" else bitwise)(x, y)

    return convert


def _logical(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, a: Any, b: Any) -> Value:
        return op(*(x if isinstance(x, Value) and x.dtype == "bool" else _bool(x) for x in (a, b)))

    return convert


def _bool(x: Any) -> Any:
    return ops.cast(x, to="bool") if isinstance(x, Value) else np.asarray(x).astype(bool)


def _remainder(c: _Converter, node: torch.fx.Node, a: Any, b: Any) -> Value:
    x, y = _promote(c, node, a, b)
    if c.out_dtype(node).startswith("float"):  # the divisor's sign: a - floor(a / b) * b
        return ops.sub(x, ops.mul(ops.floor(ops.div(x, y)), y))
    return ops.mod(x, y)


def _fmod(c: _Converter, node: torch.fx.Node, a: Any, b: Any) -> Value:
    return ops.mod(*_promote(c, node, a, b), fmod=1)


def _round(c: _Converter, node: torch.fx.Node, x: Value, decimals: int = 0) -> Value:
    if not x.dtype.startswith("float"):
        return x
    if not decimals:
        return ops.round(x)
    scale = np.asarray(10.0**decimals, x.dtype)
    return ops.div(ops.round(ops.mul(x, scale)), scale)


def _elu(c: _Converter, node: torch.fx.Node, x: Value, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Value:
    if scale == 1 and input_scale == 1:
        return ops.elu(x, alpha=float(alpha))
    neg = ops.mul(
        ops.sub(ops.exp(ops.mul(x, np.asarray(input_scale, x.dtype))), np.asarray(1, x.dtype)), np.asarray(alpha, x.dtype)
    )
    return ops.mul(ops.where(ops.greater(x, np.asarray(0, x.dtype)), x, neg), np.asarray(scale, x.dtype))


def _softplus(c: _Converter, node: torch.fx.Node, x: Value, beta: float = 1.0, threshold: float = 20.0) -> Value:
    bx = ops.mul(x, np.asarray(beta, x.dtype))
    soft = ops.div(ops.softplus(bx), np.asarray(beta, x.dtype))
    return ops.where(ops.greater(bx, np.asarray(threshold, x.dtype)), x, soft)


def _trilu(upper: int) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, diagonal: int = 0) -> Value:
        if x.dtype == "bool":  # Trilu keeps to numbers
            return ops.cast(ops.trilu(ops.cast(x, to="uint8"), np.asarray(int(diagonal), np.int64), upper=upper), to="bool")
        return ops.trilu(x, np.asarray(int(diagonal), np.int64), upper=upper)

    return convert


def _index(c: _Converter, node: torch.fx.Node, x: Value, indices: Sequence[Value | None]) -> Value:
    """``x[i0, i1, ...]`` with index tensors (advanced indexing): Gather for one, GatherND for several."""
    rank = c.rank(node)
    dims = [d for d, i in enumerate(indices) if i is not None]
    for d in dims:
        if indices[d].dtype == "bool":
            raise c.fail("indexing with a boolean mask has a data-dependent shape; it is not mapped")
    if len(dims) == 1:
        return ops.gather(x, indices[dims[0]], axis=dims[0])
    rest = [d for d in range(rank) if d not in dims]
    moved = x if dims == list(range(len(dims))) else ops.transpose(x, perm=dims + rest)
    idx = [ops.cast(i, to="int64") if i.dtype != "int64" else i for i in (indices[d] for d in dims)]
    shape = idx[0]
    for i in idx[1:]:  # broadcast the index tensors together
        shape = ops.add(ops.mul(shape, np.asarray(0, np.int64)), ops.mul(i, np.asarray(0, np.int64)))
    stacked = ops.concat(*[ops.unsqueeze(ops.add(i, shape), np.array([-1], np.int64)) for i in idx], axis=-1)
    out = ops.gather_nd(moved, stacked)
    if dims == list(range(dims[0], dims[-1] + 1)) and dims[0] > 0:
        # adjacent index dims keep their place: torch puts the broadcast dims at the first one
        nb = c.rank_of(node) - len(rest)
        perm = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], nb + len(rest)))
        out = ops.transpose(out, perm=perm)
    return out


def _index_put(
    c: _Converter, node: torch.fx.Node, x: Value, indices: Sequence[Value | None], values: Any, accumulate: bool = False
) -> Value:
    """``x[i0, i1, ...] = values`` (``+=`` with ``accumulate``): ScatterND on the indexed dims
    moved to the front; a boolean mask (``x[mask] = v``) is a Where."""
    rank = c.rank(node)
    values = values if isinstance(values, Value) else c.graph.constant(np.asarray(values, x.dtype))
    values = values if values.dtype == x.dtype else ops.cast(values, to=x.dtype)
    dims = [d for d, i in enumerate(indices) if i is not None]
    if len(dims) == 1 and indices[dims[0]].dtype == "bool":
        mask = indices[dims[0]]
        mrank = c.rank(node.args[1][dims[0]])  # type: ignore[index]
        if dims[0] != 0 or c.rank(node, 2) > 1:
            raise c.fail("index_put with a boolean mask and non-scalar values has a data-dependent shape")
        mask = ops.reshape(mask, c.ints([*([-1] if mrank else []), *([1] * (rank - mrank))])) if mrank < rank else mask
        return ops.where(mask, ops.add(x, values) if accumulate else values, x)
    if any(indices[d].dtype == "bool" for d in dims):
        raise c.fail("index_put with boolean masks among several indices is not mapped")
    rest = [d for d in range(rank) if d not in dims]
    perm = dims + rest
    moved = x if perm == list(range(rank)) else ops.transpose(x, perm=perm)
    idx = [ops.cast(i, to="int64") if i.dtype != "int64" else i for i in (indices[d] for d in dims)]
    sizes = ops.shape(x)
    idx = [  # negative indices count from the end
        ops.where(ops.less(i, np.asarray(0, np.int64)), ops.add(i, ops.gather(sizes, np.asarray(d, np.int64), axis=0)), i)
        for i, d in zip(idx, dims)
    ]
    shape = ops.mul(idx[0], np.asarray(0, np.int64))  # zeros of the indices' broadcast shape
    for i in idx[1:]:
        shape = ops.add(shape, ops.mul(i, np.asarray(0, np.int64)))
    stacked = ops.concat(*[ops.unsqueeze(ops.add(i, shape), np.array([-1], np.int64)) for i in idx], axis=-1)
    # values broadcast to x[indices]: the index dims first, or in place of adjacent index dims after the first
    nb = max(c.rank(node.args[1][d]) for d in dims)  # type: ignore[index]
    adjacent = dims == list(range(dims[0], dims[-1] + 1)) and dims[0] > 0
    ishape = ops.shape(stacked, start=0, end=-1)
    rest_shape = ops.gather(sizes, np.array(rest, np.int64), axis=0) if rest else np.zeros(0, np.int64)
    if adjacent:
        target = ops.concat(
            ops.gather(sizes, np.arange(dims[0]), axis=0),
            ishape,
            ops.gather(sizes, np.array(rest[dims[0] :], np.int64), axis=0),
            axis=0,
        )
        vals = ops.expand(values, target)
        vperm = list(range(dims[0], dims[0] + nb)) + list(range(dims[0])) + list(range(dims[0] + nb, nb + len(rest)))
        vals = ops.transpose(vals, perm=vperm)
    else:
        vals = ops.expand(values, ops.concat(ishape, rest_shape, axis=0) if rest else ishape)
    out = ops.scatter_nd(moved, stacked, vals, reduction="add" if accumulate else "none")
    return out if perm == list(range(rank)) else ops.transpose(out, perm=[perm.index(d) for d in range(rank)])


def _copy(c: _Converter, node: torch.fx.Node, x: Value, src: Any, non_blocking: bool = False) -> Value:
    src = src if isinstance(src, Value) else c.graph.constant(np.asarray(src, x.dtype))
    return ops.expand(src if src.dtype == x.dtype else ops.cast(src, to=x.dtype), ops.shape(x))


def _baddbmm(c: _Converter, node: torch.fx.Node, b: Value, x: Value, y: Value, *, beta: float = 1, alpha: float = 1) -> Value:
    prod = ops.matmul(x, y)
    if alpha != 1:
        prod = ops.mul(prod, np.asarray(alpha, prod.dtype))
    if beta == 0:
        return prod
    return ops.add(prod, b if beta == 1 else ops.mul(b, np.asarray(beta, b.dtype)))


def _group_norm(
    c: _Converter,
    node: torch.fx.Node,
    x: Value,
    w: Value | None,
    b: Value | None,
    n: Any,
    ch: Any,
    hw: Any,
    groups: int,
    eps: float,
) -> tuple[Value, Value, Value]:
    grouped = ops.reshape(x, np.array([0, int(groups), -1], np.int64))
    axes = np.array([2], np.int64)
    mean = ops.reduce_mean(grouped, axes, keepdims=1)
    centred = ops.sub(grouped, mean)
    var = ops.reduce_mean(ops.mul(centred, centred), axes, keepdims=1)
    rstd = ops.reciprocal(ops.sqrt(ops.add(var, np.asarray(eps, x.dtype))))
    out = ops.reshape(ops.mul(centred, rstd), ops.shape(x))
    affine = np.array([-1] + [1] * (c.rank(node) - 2), np.int64)
    if w is not None:
        out = ops.mul(out, ops.reshape(w, affine))
    if b is not None:
        out = ops.add(out, ops.reshape(b, affine))
    return out, ops.squeeze(mean, axes), ops.squeeze(rstd, axes)


def _pad(mode: str) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, pad: Sequence[Any], value: Any = 0) -> Value:
        rank = c.rank(node)
        begins: list[Any] = [0] * rank
        ends: list[Any] = [0] * rank
        for i in range(len(pad) // 2):  # torch lists (left, right) pairs from the last dim backwards
            begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
        fill = np.asarray(value, x.dtype) if mode == "constant" else None
        return ops.pad(x, c.ints(begins + ends), fill, mode=mode)

    return convert


def _upsample(mode: str) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, output_size: Any, *rest: Any) -> Value:
        val = node.meta.get("val")
        spatial = [_dim(d) for d in val.shape[2:]] if isinstance(val, torch.Tensor) else [None]
        if not all(isinstance(d, int) for d in spatial):
            raise c.fail("interpolation to a dynamic size is not mapped")
        align = bool(rest[0]) if mode == "linear" and rest and isinstance(rest[0], bool) else False
        sizes = ops.concat(ops.shape(x, start=0, end=2), np.array(spatial, np.int64), axis=0)
        transform = "asymmetric" if mode == "nearest" else "align_corners" if align else "pytorch_half_pixel"
        return ops.resize(x, None, None, sizes, mode=mode, coordinate_transformation_mode=transform, nearest_mode="floor")

    return convert


def _any_all(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, dims: Any = None, keepdim: bool = False) -> Value:
        as_int = ops.cast(x if x.dtype == "bool" else ops.not_(ops.equal(x, np.asarray(0, x.dtype))), to="uint8")
        if dims is None or (isinstance(dims, (list, tuple)) and not dims):
            out = op(as_int, keepdims=int(bool(keepdim)))
        else:
            axes = [int(dims)] if isinstance(dims, int) else [int(d) for d in dims]
            out = op(as_int, np.array(axes, np.int64), keepdims=int(bool(keepdim)))
        return _to_dtype(c, node, out)

    return convert


def _extreme(reduce: Callable[..., Value], binary: Callable[..., Value], arg: Callable[..., Value]) -> Callable[..., Any]:
    """max/min: of the whole tensor, of two tensors (``.other``), or along a dim with the indices (``.dim``)."""

    def convert(c: _Converter, node: torch.fx.Node, x: Value, other: Any = None, keepdim: bool = False) -> Any:
        if isinstance(other, Value):
            return _binary(binary)(c, node, x, other)
        data = ops.cast(x, to="uint8") if x.dtype == "bool" else x
        if other is None:
            return _to_dtype(c, node, reduce(data, keepdims=0))
        values = reduce(data, np.array([int(other)], np.int64), keepdims=int(bool(keepdim)))
        values = values if x.dtype != "bool" else ops.cast(values, to="bool")
        return values, arg(data, axis=int(other), keepdims=int(bool(keepdim)))

    return convert


def _arg(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(c: _Converter, node: torch.fx.Node, x: Value, dim: int | None = None, keepdim: bool = False) -> Value:
        data = ops.cast(x, to="uint8") if x.dtype == "bool" else x
        if dim is None:
            flat = op(ops.reshape(data, np.array([-1], np.int64)), axis=0, keepdims=0)
            rank = c.rank(node)
            return ops.reshape(flat, np.ones(rank, np.int64)) if keepdim else flat
        return op(data, axis=int(dim), keepdims=int(bool(keepdim)))

    return convert


def _var(root: bool = False, with_mean: bool = False) -> Callable[..., Any]:
    """var/std (``.correction``, ``.dim``, or whole), and var_mean/std_mean."""

    def convert(
        c: _Converter,
        node: torch.fx.Node,
        x: Value,
        dims: Any = None,
        unbiased: Any = None,
        keepdim: bool = False,
        *,
        correction: Any = None,
    ) -> Any:
        if isinstance(dims, bool):
            unbiased, dims = dims, None
        corr = float(correction if correction is not None else (0 if unbiased is False else 1))
        rank = c.rank(node)
        axes = (
            list(range(rank))
            if dims is None or (isinstance(dims, (list, tuple)) and not dims)
            else ([int(dims) % rank] if isinstance(dims, int) else [int(d) % max(rank, 1) for d in dims])
        )
        x = x if x.dtype.startswith("float") else ops.cast(x, to="float32")
        ax = np.array(axes, np.int64)
        mean = ops.reduce_mean(x, ax, keepdims=1)
        centred = ops.sub(x, mean)
        total = ops.reduce_sum(ops.mul(centred, centred), ax, keepdims=int(bool(keepdim)))
        shape = x.shape
        if shape is not None and all(isinstance(shape[a], int) for a in axes):
            count: Any = np.asarray(max(math.prod(int(shape[a]) for a in axes) - corr, 0), x.dtype)
        else:
            n = ops.cast(ops.reduce_prod(ops.gather(ops.shape(x), ax, axis=0), keepdims=0), to=x.dtype)
            count = ops.max(ops.sub(n, np.asarray(corr, x.dtype)), np.asarray(0, x.dtype))
        out = ops.div(total, count)
        out = ops.sqrt(out) if root else out
        if not with_mean:
            return out
        return out, mean if keepdim else ops.squeeze(mean, ax)

    return convert


def _cumsum(c: _Converter, node: torch.fx.Node, x: Value, dim: int, *, dtype: Any = None) -> Value:
    return ops.cum_sum(_to_dtype(c, node, x), np.asarray(int(dim), np.int64))


def _topk(c: _Converter, node: torch.fx.Node, x: Value, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    kk = c.ints([k])
    values, indices = ops.top_k(x, kk, axis=int(dim), largest=int(bool(largest)), sorted=1)
    return values, indices


def _stack(c: _Converter, node: torch.fx.Node, tensors: Sequence[Value], dim: int = 0) -> Value:
    axis = int(dim) % (c.rank_of(node))
    parts = [ops.unsqueeze(t, np.array([axis], np.int64)) for t in tensors]
    return _cat(c, node, parts, axis)


def _roll(
    c: _Converter, node: torch.fx.Node, x: Value, shifts: Sequence[int], dims: Sequence[int] = (), *, flat: bool = False
) -> Value:
    shape = x.shape
    val = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    traced = [_dim(d) for d in val.shape] if isinstance(val, torch.Tensor) else None  # aioge may not infer it
    if not dims:
        rolled = _roll(c, node, ops.reshape(x, np.array([-1], np.int64)), shifts, [0], flat=True) if shape else x
        return ops.reshape(rolled, ops.shape(x))
    if flat and traced is not None:
        traced = [math.prod(traced)] if all(isinstance(d, int) for d in traced) else None
    out = x
    for shift, dim in zip(shifts, dims):
        size = traced[dim] if traced else (out.shape or shape or ())[dim] if out.shape else None
        if not isinstance(size, int) or not isinstance(shift, int):
            raise c.fail("roll needs a static size and shift")
        s = shift % size if size else 0
        if s:
            axis = np.array([int(dim)], np.int64)
            tail = ops.slice(out, np.array([size - s], np.int64), np.array([size], np.int64), axis)
            head = ops.slice(out, np.array([0], np.int64), np.array([size - s], np.int64), axis)
            out = ops.concat(tail, head, axis=int(dim))
    return out


def _slice_scatter(
    c: _Converter, node: torch.fx.Node, x: Value, src: Value, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Value:
    """``x`` with ``x[..., start:end:step, ...]`` (along ``dim``) replaced by ``src``."""
    val = node.args[0].meta.get("val")
    axis = int(dim) % c.rank(node)
    size = _dim(val.shape[axis]) if isinstance(val, torch.Tensor) else None
    src = src if src.dtype == x.dtype else ops.cast(src, to=x.dtype)
    if not isinstance(size, int) or not all(isinstance(a, (int, type(None))) for a in (start, end)):
        if step != 1:
            raise c.fail("a strided slice_scatter on a dynamic dim is not mapped")
        head = _slice(c, node, x, axis, 0, 0 if start is None else start)
        tail = _slice(c, node, x, axis, _INT64_MAX if end is None else end, None)
        return ops.concat(head, src, tail, axis=axis)
    positions = range(size)[slice(start, None if end is None else min(end, _INT64_MAX), step)]
    if not len(positions):
        return x
    index = np.zeros(size, np.int64)
    index[list(positions)] = np.arange(len(positions))
    mask = np.zeros([size] + [1] * (c.rank(node) - axis - 1), bool)
    mask[list(positions)] = True
    return ops.where(mask, ops.gather(src, index, axis=axis), x)


def _select_scatter(c: _Converter, node: torch.fx.Node, x: Value, src: Value, dim: int, index: int) -> Value:
    axis = int(dim) % c.rank(node)
    part = ops.unsqueeze(src, np.array([axis], np.int64))
    if index < 0:
        return _slice_scatter(c, node, x, part, axis, index, index + 1 if index < -1 else None)
    return _slice_scatter(c, node, x, part, axis, index, index + 1)


def _as_strided(
    c: _Converter, node: torch.fx.Node, x: Value, size: Sequence[Any], stride: Sequence[Any], offset: Any = None
) -> Value:
    """``as_strided`` on a tensor that is dense in memory (any dim order): the storage is ``x``
    with its dims in stride order, flattened; the view gathers from it."""
    val = node.args[0].meta.get("val")
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in (*val.shape, *val.stride(), *size, *stride)):
        raise c.fail("as_strided needs static sizes and strides")
    order = sorted(range(val.dim()), key=lambda d: -val.stride()[d])
    dense = 1
    for d in reversed(order):
        if val.shape[d] != 1 and val.stride()[d] != dense:
            raise c.fail("as_strided of a tensor that is not dense in memory is not mapped")
        dense *= val.shape[d]
    base = int(val.storage_offset())
    start = base if offset is None else int(offset)
    index = np.full(tuple(size), start - base, np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        index += (np.arange(n, dtype=np.int64) * st).reshape([-1 if k == d else 1 for k in range(len(size))])
    if index.size and (index.min() < 0 or index.max() >= dense):
        raise c.fail("as_strided reads outside the tensor")
    flat = ops.reshape(x if order == sorted(order) else ops.transpose(x, perm=order), np.array([-1], np.int64))
    if np.array_equal(index.reshape(-1), np.arange(index.size)):
        return ops.reshape(flat, np.array(size, np.int64))
    return ops.gather(flat, index, axis=0)


def _repeat(c: _Converter, node: torch.fx.Node, x: Value, repeats: Sequence[Any]) -> Value:
    extra = len(repeats) - c.rank(node)
    if extra > 0:
        x = ops.reshape(x, ops.concat(np.ones(extra, np.int64), ops.shape(x), axis=0))
    return ops.tile(x, c.ints(repeats))


_ATEN: dict[str, Callable[..., Any]] = {
    # elementwise
    "add": _binary(ops.add),
    "sub": _binary(ops.sub),
    "mul": _binary(ops.mul),
    "div": _binary(ops.div),
    "true_divide": _binary(ops.div),
    "rsub": _rsub,
    "pow": _pow,
    "neg": _neg,
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
    "floor": _unary(ops.floor, integral=True),
    "ceil": _unary(ops.ceil, integral=True),
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
    "bitwise_not": lambda c, n, x: _logical_not(c, n, x) if x.dtype == "bool" else ops.bitwise_not(x),
    "bitwise_and": _bitwise(ops.and_, ops.bitwise_and),
    "bitwise_or": _bitwise(ops.or_, ops.bitwise_or),
    "bitwise_xor": _bitwise(ops.xor, ops.bitwise_xor),
    "__and__": _bitwise(ops.and_, ops.bitwise_and),
    "__or__": _bitwise(ops.or_, ops.bitwise_or),
    "logical_and": _logical(ops.and_),
    "logical_or": _logical(ops.or_),
    "logical_xor": _logical(ops.xor),
    "minimum": _binary(ops.min),
    "maximum": _binary(ops.max),
    "remainder": _remainder,
    "fmod": _fmod,
    "log1p": lambda c, n, x: ops.log(ops.add(*_promote(c, n, x, 1))),
    "expm1": lambda c, n, x: ops.sub(ops.exp(*_promote(c, n, x)), np.asarray(1, c.out_dtype(n))),
    "log2": lambda c, n, x: ops.div(ops.log(*_promote(c, n, x)), np.asarray(math.log(2), c.out_dtype(n))),
    "log10": lambda c, n, x: ops.div(ops.log(*_promote(c, n, x)), np.asarray(math.log(10), c.out_dtype(n))),
    "exp2": lambda c, n, x: ops.pow(np.asarray(2, c.out_dtype(n)), *_promote(c, n, x)),
    "tan": _unary(ops.tan),
    "atan": _unary(ops.atan),
    "asin": _unary(ops.asin),
    "acos": _unary(ops.acos),
    "sinh": _unary(ops.sinh),
    "cosh": _unary(ops.cosh),
    "sign": _unary(ops.sign),
    "round": lambda c, n, x, decimals=0: _round(c, n, x, decimals),
    "trunc": lambda c, n, x: x if not x.dtype.startswith("float") else ops.mul(ops.sign(x), ops.floor(ops.abs(x))),
    "isnan": lambda c, n, x: ops.is_na_n(x),
    "isinf": lambda c, n, x: ops.is_inf(x),
    "leaky_relu": lambda c, n, x, slope=0.01: ops.leaky_relu(x, alpha=float(slope)),
    "elu": _elu,
    "softplus": _softplus,
    "tril": _trilu(0),
    "triu": _trilu(1),
    "where": _where,
    "index": _index,
    "_unsafe_index": _index,
    "masked_fill": _masked_fill,
    # copies and casts
    "clone": _identity,
    "contiguous": _identity,
    "alias": _identity,
    "detach": _identity,
    "lift_fresh_copy": _identity,
    "_to_copy": _to_dtype,
    "prims::convert_element_type": _to_dtype,
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
    "baddbmm": _baddbmm,
    "conv1d": _conv,
    "conv2d": _conv,
    "conv3d": _conv,
    "convolution": _conv,
    "_native_batch_norm_legit_no_training": _batch_norm_eval,
    "batch_norm": _batch_norm,
    "native_batch_norm": lambda c, n, x, w, b, mean, var, training, momentum, eps: (
        _batch_norm(c, n, x, w, b, mean, var, training, momentum, eps),
        None,
        None,
    ),
    "_native_batch_norm_legit_functional": _batch_norm_training,
    "_native_batch_norm_legit": _batch_norm_training,
    "layer_norm": _layer_norm,
    "native_group_norm": _group_norm,
    "constant_pad_nd": _pad("constant"),
    "reflection_pad1d": _pad("reflect"),
    "reflection_pad2d": _pad("reflect"),
    "reflection_pad3d": _pad("reflect"),
    "replication_pad1d": _pad("edge"),
    "replication_pad2d": _pad("edge"),
    "replication_pad3d": _pad("edge"),
    "upsample_nearest1d": _upsample("nearest"),
    "upsample_nearest2d": _upsample("nearest"),
    "upsample_nearest3d": _upsample("nearest"),
    "upsample_linear1d": _upsample("linear"),
    "upsample_bilinear2d": _upsample("linear"),
    "upsample_trilinear3d": _upsample("linear"),
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
    "mean": _reduce(ops.reduce_mean, accumulate=True),
    "sum": _reduce(ops.reduce_sum, accumulate=True),
    "prod": _reduce(ops.reduce_prod, accumulate=True),
    "amax": _reduce(ops.reduce_max),
    "amin": _reduce(ops.reduce_min),
    "any": _any_all(ops.reduce_max),
    "all": _any_all(ops.reduce_min),
    "max": _extreme(ops.reduce_max, ops.max, ops.arg_max),
    "min": _extreme(ops.reduce_min, ops.min, ops.arg_min),
    "argmax": _arg(ops.arg_max),
    "argmin": _arg(ops.arg_min),
    "var": _var(),
    "std": _var(root=True),
    "var_mean": _var(with_mean=True),
    "std_mean": _var(root=True, with_mean=True),
    "cumsum": _cumsum,
    "topk": _topk,
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
    "stack": _stack,
    "roll": _roll,
    "repeat": _repeat,
    "slice_scatter": _slice_scatter,
    "select_scatter": _select_scatter,
    "as_strided": _as_strided,
    "index_put": _index_put,
    "_unsafe_index_put": _index_put,
    "copy": _copy,
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
    "new_ones": lambda c, n, x, size, **k: _full(c, n, size, 1),
    "new_zeros": lambda c, n, x, size, **k: _full(c, n, size, 0),
    "new_empty": lambda c, n, x, size, **k: _full(c, n, size, 0),
    "new_full": lambda c, n, x, size, value, **k: _full(c, n, size, value),
    "empty": lambda c, n, size, **k: _full(c, n, size, 0),
    "empty_like": _like(0),
    "fill": lambda c, n, x, value: (
        _full_like(c, n, x, value) if not isinstance(value, Value) else ops.expand(_to_dtype(c, n, value), ops.shape(x))
    ),
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
