"""What an ONNX op converter sees and uses: the node, its opset, its inputs, and ``emit``.

A converter (``aioge.frontends.onnx_ops``) turns one ONNX node of one opset into aioge ops in
their canonical (newest-opset) form. It reads the node through a ``NodeContext`` and adds
nodes only through ``NodeContext.emit`` and constants through ``NodeContext.const``, which
name everything so that no generated name can collide with a name of the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
import onnx.defs

from aioge.errors import GraphError
from aioge.ir.desc import ML_DTYPES, Dim, TensorDesc
from aioge.ir.graph import Graph, Node, Value
from aioge.ops import apply
from aioge.ops.evaluate import evaluate_node
from aioge.ops.registry import get_schema

__all__ = ["DTYPE_ATTRS", "NARROW_FLOATS", "KnownValues", "NodeContext", "Names", "onnx_default"]

# Attributes that hold a TensorProto.DataType enum in ONNX. When the aioge schema declares
# them as dtypes they are handed over as dtype names ("float32"), never as ONNX enums.
DTYPE_ATTRS: frozenset[tuple[str, str]] = frozenset(
    {
        ("Cast", "to"),
        ("EyeLike", "dtype"),
        ("RandomNormal", "dtype"),
        ("RandomUniform", "dtype"),
        ("RandomNormalLike", "dtype"),
        ("RandomUniformLike", "dtype"),
        ("Multinomial", "dtype"),
        ("Bernoulli", "dtype"),
        ("QuantizeLinear", "output_dtype"),
        ("DequantizeLinear", "output_dtype"),
        ("TreeEnsemble", "dtype"),
    }
)


# The ml_dtypes float types. aioge's kernels compute in float16/32/64, so an op that reads one
# of these reads it widened to float32 and its float32 outputs are rounded back, which is
# what ONNX specifies for them (bfloat16 and float8 arithmetic happens in float32).
NARROW_FLOATS: frozenset[str] = frozenset(name for name in ML_DTYPES if not name.startswith(("int", "uint")))
# Ops that only move, select or convert elements: they take the narrow types as they are.
_MOVES_DATA: frozenset[str] = frozenset(
    {
        "Cast",
        "CastLike",
        "BitCast",
        "QuantizeLinear",
        "DequantizeLinear",
        "Identity",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Expand",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Tile",
        "Shape",
        "Size",
        "Where",
        "Compress",
        "ReverseSequence",
        "DepthToSpace",
        "SpaceToDepth",
        "OneHot",
        # Sequences and optionals hold tensors; ConcatFromSequence and SplitToSequence copy.
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceAt",
        "SequenceInsert",
        "SequenceErase",
        "SequenceLength",
        "SplitToSequence",
        "ConcatFromSequence",
        "Optional",
        "OptionalHasElement",
        "OptionalGetElement",
        "If",
        "Loop",
    }
)


class Names:
    """Fresh value and node names that avoid every name the model uses, now or later."""

    def __init__(self, reserved: set[str]) -> None:
        self._reserved = set(reserved)  # the model's own names: each may be claimed once
        self._taken: set[str] = set()
        self._counter = 0

    def fresh(self, stem: str) -> str:
        while True:
            self._counter += 1
            name = f"{stem}__{self._counter}"
            if name not in self._taken and name not in self._reserved:
                self._taken.add(name)
                return name

    def claim(self, name: str, *, generated: bool = False) -> str:
        """A node name: the model's ``name`` itself the first time, else a fresh variant of it.

        A ``generated`` name (made up for an unnamed node) never takes one of the model's names.
        """
        if name and name not in self._taken and not (generated and name in self._reserved):
            self._taken.add(name)
            return name
        return self.fresh(name or "node")


@dataclass(slots=True)
class NodeContext:
    """One ONNX node being converted."""

    graph: Graph
    op_type: str
    domain: str
    opset: int
    name: str  # the aioge name of the node that carries the ONNX node's outputs
    inputs: list[Value | None]
    attrs: dict[str, Any]
    outputs: list[str]  # the ONNX output names, "" where an optional output is omitted
    needed: frozenset[str]  # ONNX value names that some node or graph output reads
    names: Names
    # inline(body, bound inputs, tag) converts a subgraph into the graph and returns its outputs.
    inline: Callable[[onnx.GraphProto, Sequence[Value], str], list[Value]] | None = None
    facts: KnownValues | None = None  # what follows from the constants, for load-time decisions
    lookup: Callable[[str], Any] | None = None  # an outer-scope value by its ONNX name (subgraph free names)
    _named: bool = field(default=False)

    # -- reading ----------------------------------------------------------------------

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def rank(self, i: int) -> int | None:
        v = self.input(i)
        return None if v is None or v.shape is None else len(v.shape)

    def shape(self, i: int) -> tuple[Dim, ...] | None:
        v = self.input(i)
        return None if v is None else v.shape

    def known(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` when it is a constant, else None."""
        v = self.input(i)
        return v.data if v is not None and v.is_const else None

    def computable(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` when it follows from constants alone (small values only), else None."""
        v = self.input(i)
        if v is None:
            return None
        return self.facts.value(v) if self.facts is not None else self.known(i)

    def sharp_shape(self, i: int) -> tuple[Dim, ...] | None:
        """The shape of input ``i`` as sharp as the constants make it (see KnownValues)."""
        v = self.input(i)
        if v is None:
            return None
        return self.facts.desc(v).shape if self.facts is not None else v.shape

    def wants(self, k: int) -> bool:
        """True when output ``k`` is named and read by something."""
        return k < len(self.outputs) and bool(self.outputs[k]) and self.outputs[k] in self.needed

    def fail(self, message: str) -> GraphError:
        return GraphError(f"{self.op_type} (opset {self.opset}): {message}", graph=self.graph.name, node=self.name)

    # -- building ---------------------------------------------------------------------

    def const(self, data: Any, stem: str = "const", dtype: Any = None) -> Value:
        """A new constant of the graph, named after this node."""
        array = np.asarray(data, dtype=dtype)
        return self.graph.constant(array, self.names.fresh(f"{self.name}/{stem}"))

    def emit(
        self,
        op_type: str,
        inputs: Sequence[Value | None],
        attrs: Mapping[str, Any] | None = None,
        *,
        outputs: int | Sequence[str] = 1,
        domain: str = "",
    ) -> list[Value]:
        """Add one canonical aioge op and return its outputs.

        ``outputs`` is a count (fresh names) or a list of names ("" for fresh). The first
        emit that carries ONNX output names gets the ONNX node's name. Attributes the aioge
        schema does not know are dropped when they hold the ONNX default; otherwise the node
        is refused, because silently ignoring one would change the result.

        Raises:
            GraphError: an attribute aioge cannot honour, or the op rejects its inputs.
        """
        names = [""] * outputs if isinstance(outputs, int) else list(outputs)
        while len(names) > 1 and not names[-1]:
            names.pop()
        carries = any(n for n in names)
        if carries and not self._named:
            node_name, self._named = self.name, True
        else:
            node_name = self.names.fresh(f"{self.name}/{op_type}")
        final = [n or self.names.fresh(f"{node_name}:{i}") for i, n in enumerate(names)]
        canon = self._canonical_attrs(op_type, domain, attrs or {})
        narrow = {v.dtype for v in inputs if v is not None and v.dtype in NARROW_FLOATS}
        if narrow and op_type not in _MOVES_DATA:
            return self._emit_widened(op_type, inputs, canon, node_name, final, domain, narrow)
        return apply(
            op_type,
            list(inputs),
            canon,
            num_outputs=len(final),
            name=node_name,
            output_names=final,
            domain=domain,
            graph=self.graph,
        )

    def _emit_widened(
        self,
        op_type: str,
        inputs: Sequence[Value | None],
        attrs: dict[str, Any],
        node_name: str,
        final: list[str],
        domain: str,
        narrow: set[str],
    ) -> list[Value]:
        """``op_type`` on float32 copies of its narrow-float inputs; float32 outputs rounded back.

        The outputs go back to the narrow type the inputs had (bfloat16 when they mixed several).
        """
        back = narrow.pop() if len(narrow) == 1 else "bfloat16"

        def cast(v: Value, to: str, out: str) -> Value:
            return apply(
                "Cast", [v], {"to": to}, name=self.names.fresh(f"{node_name}/Cast"), output_names=[out], graph=self.graph
            )[0]

        wide = [
            cast(v, "float32", self.names.fresh(f"{v.name}/float32")) if v is not None and v.dtype in NARROW_FLOATS else v
            for v in inputs
        ]
        inner = [self.names.fresh(f"{n}/float32") for n in final]
        outs = apply(
            op_type, wide, attrs, num_outputs=len(final), name=node_name, output_names=inner, domain=domain, graph=self.graph
        )
        result = []
        for v, n in zip(outs, final):
            if v.dtype == "float32":
                v = cast(v, back, n)
            else:
                self.graph.rename(v, n)
            result.append(v)
        return result

    def _canonical_attrs(self, op_type: str, domain: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
        schema = get_schema(op_type, domain)
        out: dict[str, Any] = {}
        for key, value in attrs.items():
            if value is None:
                continue
            spec = schema.attrs.get(key)
            if spec is None:
                default = onnx_default(domain, op_type, key)
                if default is not _NO_DEFAULT and _same(default, value):
                    continue
                raise self.fail(
                    f"attribute {key}={_show(value)} is not supported by aioge's {op_type} "
                    f"(it supports {sorted(schema.attrs) or 'no attributes'})"
                )
            if (op_type, key) in DTYPE_ATTRS and spec.kind == "dtype" and isinstance(value, int):
                from aioge.frontends.onnx_model import dtype_of_enum

                value = dtype_of_enum(value, f"node {self.name!r} attribute {key!r}")
            out[key] = value
        return out


# Values at most this many elements are computed at load time when a converter needs them.
_KNOWN_LIMIT = 4096


class KnownValues:
    """What follows from a graph's constants: sharper descs and small values, on demand.

    The builders infer shapes from constant inputs only; a converter that must decide at
    load time (which If branch to inline, how many steps a Scan unrolls) asks here, where
    values computed from constants (with aioge's own kernels) feed shape inference further.
    Nothing is folded into the graph: constant folding stays the passes' job.
    """

    def __init__(self) -> None:
        self._desc: dict[int, TensorDesc] = {}
        self._value: dict[int, np.ndarray | None] = {}

    def value(self, v: Value) -> np.ndarray | None:
        """The value of ``v``, or None when it depends on run-time data or is too big."""
        self._resolve(v)
        return self._value[id(v)]

    def desc(self, v: Value) -> TensorDesc:
        """The sharpest desc of ``v`` that the constants give."""
        self._resolve(v)
        return self._desc[id(v)]

    def _resolve(self, v: Value) -> None:
        stack = [v]  # iterative: chains of thousands of nodes must not hit the recursion limit
        while stack:
            x = stack[-1]
            if id(x) in self._desc:
                stack.pop()
                continue
            node = x.producer
            if node is None:
                self._desc[id(x)] = x.desc
                self._value[id(x)] = x.data if x.is_const else None
                stack.pop()
                continue
            pending = [i for i in node.inputs if i is not None and id(i) not in self._desc]
            if pending:
                stack.extend(pending)
                continue
            self._evaluate(node)
            stack.pop()

    def _evaluate(self, node: Node) -> None:
        from aioge.ops import infer_node

        schema = get_schema(node.op_type, node.domain)
        in_descs = [None if x is None else self._desc[id(x)] for x in node.inputs]
        in_values = [None if x is None else self._value[id(x)] for x in node.inputs]
        out_descs = [o.desc for o in node.outputs]
        sharper = any(
            x is not None and (d != x.desc or val is not None and not x.is_const)
            for x, d, val in zip(node.inputs, in_descs, in_values)
        )
        if sharper:
            try:
                out_descs = infer_node(schema, in_descs, in_values, node.attrs, len(node.outputs), node.graph.name, node.name)
            except GraphError:
                out_descs = [o.desc for o in node.outputs]
        for o, d in zip(node.outputs, out_descs):
            self._desc[id(o)] = d
            self._value[id(o)] = None
        if not all(d.static and d.size <= _KNOWN_LIMIT for d in out_descs):
            return
        results = evaluate_node(schema, node.attrs, in_descs, in_values, out_descs, graph=node.graph.name, node=node.name)
        for o, res in zip(node.outputs, results or ()):
            self._value[id(o)] = res


_NO_DEFAULT: Any = object()


@cache  # a pure function of the installed onnx package
def _defaults(domain: str, op_type: str) -> Mapping[str, Any]:
    try:
        schema = onnx.defs.get_schema(op_type, domain)
    except onnx.defs.SchemaError:
        return {}
    out: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        dv = attr.default_value
        if dv.type == onnx.AttributeProto.UNDEFINED:
            continue
        value = onnx.helper.get_attribute_value(dv)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list):
            value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        out[name] = value
    return out


def onnx_default(domain: str, op_type: str, attr: str) -> Any:
    """The default ONNX gives an attribute of the newest version of an op (a sentinel if none)."""
    return _defaults(domain, op_type).get(attr, _NO_DEFAULT)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.all(a == b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _show(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"<{value.dtype} tensor {list(value.shape)}>"
    return repr(value)
