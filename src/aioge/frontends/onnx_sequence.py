"""ONNX sequence and optional values: unrolled into their tensors where the model fixes them, else first-class.

aioge graphs carry sequences and optionals as values of their own (``TensorDesc.container``;
the ops in ``aioge.ops.sequence``): a run-time list of arrays, or None or the value. As an
optimisation, a sequence whose length follows from the model (and, for a sequence graph
input, from ``load_onnx(..., lengths=)``) is held by the frontend as the tuple of its tensor
values (``SequenceValue``), and an optional as the value it holds or nothing
(``OptionalValue``): every tensor inside is then an ordinary graph value, planned, fused and
placed in the arena like any other. Where that stops (a position or split known only at run
time, a sequence input without ``lengths=``, a run-time Loop or If carrying one, a graph
output) the held tensors become a first-class value (``materialise``) and the sequence ops
run as ops. SequenceMap runs its body once per element of an unrolled sequence only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import onnx

from aioge.frontends.onnx_context import NodeContext
from aioge.ir.graph import Value

__all__ = [
    "SEQUENCE_CONVERTERS",
    "SEQUENCE_EMITS",
    "OptionalValue",
    "SequenceValue",
    "container_of",
    "element_name",
    "elem_dtype",
    "is_structured",
    "materialise",
]


@dataclass(frozen=True, slots=True)
class SequenceValue:
    """An ONNX sequence of known length: its tensors in order, and the element dtype."""

    items: tuple[Value, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class OptionalValue:
    """An ONNX optional: the tensor or sequence it holds, or None when it is empty (then
    ``dtype`` and ``sequence`` say what it would hold)."""

    value: Value | SequenceValue | None
    dtype: str = "float32"
    sequence: bool = False


def is_structured(v: object) -> bool:
    """True for a sequence or optional held unrolled by the frontend."""
    return isinstance(v, (SequenceValue, OptionalValue))


def _first_class(v: object, *containers: str) -> bool:
    return isinstance(v, Value) and v.desc.container in containers


def materialise(ctx: NodeContext, v: Any) -> Value | None:
    """A graph value for ``v``: a held sequence or optional becomes a first-class one
    (SequenceConstruct / SequenceEmpty / Optional); a Value or None stays as it is."""
    if isinstance(v, SequenceValue):
        if not v.items:
            return ctx.emit("SequenceEmpty", [], {"dtype": v.dtype})[0]
        return ctx.emit("SequenceConstruct", list(v.items))[0]
    if isinstance(v, OptionalValue):
        inner = materialise(ctx, v.value)
        if inner is None:
            return ctx.emit("Optional", [], {"elem_dtype": v.dtype, "sequence": int(v.sequence)})[0]
        return ctx.emit("Optional", [inner])[0]
    return v


def container_of(t: onnx.TypeProto) -> str:
    """The aioge container of an ONNX type: tensor, sequence, optional or optional_sequence.

    Raises:
        ValueError: a map, a sequence of sequences or another type aioge does not hold.
    """
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        return "tensor"
    if kind == "sequence_type" and t.sequence_type.elem_type.WhichOneof("value") in ("tensor_type", None):
        return "sequence"
    if kind == "optional_type":
        inner = container_of(t.optional_type.elem_type)
        if inner in ("tensor", "sequence"):
            return "optional" if inner == "tensor" else "optional_sequence"
    raise ValueError(f"a value of type {kind} ({str(t).strip()[:60]!r}) is not one aioge holds")


def element_name(name: str, i: int) -> str:
    """The graph input or output name of element ``i`` of sequence ``name``."""
    return f"{name}[{i}]"


def _seq(ctx: NodeContext, i: int) -> SequenceValue | Value:
    """Input ``i`` as a held sequence, or as a first-class sequence value."""
    v: Any = ctx.input(i)
    if isinstance(v, OptionalValue):
        v = v.value
    if _first_class(v, "optional_sequence"):
        v = ctx.emit("OptionalGetElement", [v])[0]
    if not isinstance(v, SequenceValue) and not _first_class(v, "sequence"):
        raise ctx.fail(f"input {i} must be a sequence, got {'nothing' if v is None else getattr(v, 'desc', type(v).__name__)}")
    return v


def _known_position(ctx: NodeContext, i: int) -> bool:
    """Whether position input ``i`` is absent or follows from the constants (a scalar)."""
    if ctx.input(i) is None:
        return True
    known = ctx.computable(i)
    return known is not None and known.size == 1


def _run_time(ctx: NodeContext, op: str, seq: SequenceValue | Value, rest: Sequence[Any], attrs: Any = None) -> Sequence[Any]:
    """``op`` as a first-class op over the (materialised) sequence and the other inputs."""
    return ctx.emit(op, [materialise(ctx, seq), *rest], attrs, outputs=ctx.outputs[:1])


def _position(ctx: NodeContext, i: int, n: int, default: int, *, insert: bool = False) -> int:
    """The load-time value of position input ``i`` (negative counts from the end), checked in range."""
    if ctx.input(i) is None:
        return default
    known = ctx.computable(i)
    if known is None or known.size != 1:
        raise ctx.fail(
            "the position must be a scalar that follows from the model's constants: aioge holds "
            "sequences as their tensors, resolved at load time"
        )
    pos = int(known.reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= pos <= hi:
        raise ctx.fail(f"position {pos} is out of range for a sequence of {n} tensors")
    return pos + n if pos < 0 else pos


def _dtype_attr(ctx: NodeContext, key: str, default: str) -> str:
    from aioge.frontends.onnx_model import dtype_of_enum

    code = ctx.attrs.get(key)
    return default if code is None else dtype_of_enum(int(code), f"node {ctx.name!r} attribute {key!r}")


def _construct(ctx: NodeContext) -> Sequence[Any]:
    items = tuple(v for v in ctx.inputs if isinstance(v, Value))
    if len(items) != len(ctx.inputs) or not items:
        raise ctx.fail("takes one or more tensors")
    if len({v.dtype for v in items}) != 1:
        raise ctx.fail(f"tensors of one dtype, got {sorted({v.dtype for v in items})}")
    return [SequenceValue(items, items[0].dtype)]


def _empty(ctx: NodeContext) -> Sequence[Any]:
    return [SequenceValue((), _dtype_attr(ctx, "dtype", "float32"))]


def _at(ctx: NodeContext) -> Sequence[Any]:
    seq = _seq(ctx, 0)
    if ctx.input(1) is None:
        raise ctx.fail("needs a position")
    if isinstance(seq, Value) or not _known_position(ctx, 1):
        return _run_time(ctx, "SequenceAt", seq, [ctx.input(1)])
    return [seq.items[_position(ctx, 1, len(seq.items), 0)]]


def _insert(ctx: NodeContext) -> Sequence[Any]:
    seq, x = _seq(ctx, 0), ctx.input(1)
    if not isinstance(x, Value) or not x.desc.is_tensor or (isinstance(seq, Value) or seq.items) and x.dtype != seq.dtype:
        raise ctx.fail(f"inserts a tensor of the sequence's dtype {seq.dtype}")
    if isinstance(seq, Value) or not _known_position(ctx, 2):
        return _run_time(ctx, "SequenceInsert", seq, [x, ctx.input(2)] if ctx.input(2) is not None else [x])
    pos = _position(ctx, 2, len(seq.items), len(seq.items), insert=True)
    return [SequenceValue((*seq.items[:pos], x, *seq.items[pos:]), x.dtype)]


def _erase(ctx: NodeContext) -> Sequence[Any]:
    seq = _seq(ctx, 0)
    if isinstance(seq, Value) or not _known_position(ctx, 1):
        return _run_time(ctx, "SequenceErase", seq, [ctx.input(1)] if ctx.input(1) is not None else [])
    if not seq.items:
        raise ctx.fail("cannot erase from an empty sequence")
    pos = _position(ctx, 1, len(seq.items), len(seq.items) - 1)
    return [SequenceValue((*seq.items[:pos], *seq.items[pos + 1 :]), seq.dtype)]


def _length(ctx: NodeContext) -> Sequence[Any]:
    seq = _seq(ctx, 0)
    if isinstance(seq, Value):
        return _run_time(ctx, "SequenceLength", seq, [])
    return [ctx.const(np.asarray(len(seq.items), np.int64), "length")]


def _split_to_sequence(ctx: NodeContext) -> Sequence[Any]:
    x = ctx.input(0)
    shape = ctx.sharp_shape(0)
    axis = int(ctx.attrs.get("axis", 0))
    if not isinstance(x, Value) or not x.desc.is_tensor:
        raise ctx.fail("splits a tensor")
    split = ctx.computable(1) if ctx.input(1) is not None else None
    count = ctx.shape(1) if ctx.input(1) is not None and split is None else None
    by_count = count is not None and len(count) == 1 and isinstance(count[0], int)
    if shape is not None and axis < 0:
        axis += len(shape)
    static_axis = shape is not None and 0 <= axis < len(shape) and isinstance(shape[axis], int)
    if shape is None or not by_count and (not static_axis or ctx.input(1) is not None and split is None):
        # The sequence's length follows from the data: a first-class SplitToSequence.
        attrs = {"axis": axis, "keepdims": int(ctx.attrs.get("keepdims", 1))}
        return ctx.emit("SplitToSequence", [x, ctx.input(1)] if ctx.input(1) is not None else [x], attrs, outputs=ctx.outputs)
    if by_count:
        assert count is not None
        # Run-time sizes, a load-time count: one Split output per entry of split.
        names = [ctx.names.fresh(f"{ctx.name}/part") for _ in range(int(count[0]))]
        return [SequenceValue(tuple(ctx.emit("Split", [x, ctx.input(1)], {"axis": axis}, outputs=names)), x.dtype)]
    assert shape is not None
    total = int(shape[axis])
    if split is None:
        sizes = [1] * total
    elif split.ndim == 0:
        step = int(split)
        if step <= 0:
            raise ctx.fail(f"a scalar split must be positive, got {step}")
        sizes = [min(step, total - s) for s in range(0, total, step)]
    else:
        sizes = [int(s) for s in split.reshape(-1)]
        if sum(sizes) != total or min(sizes, default=0) < 0:
            raise ctx.fail(f"split {sizes} does not add up to the axis length {total}")
    if not sizes:
        return [SequenceValue((), x.dtype)]
    names = [ctx.names.fresh(f"{ctx.name}/part") for _ in sizes]
    parts = ctx.emit("Split", [x, ctx.const(np.asarray(sizes, np.int64), "split")], {"axis": axis}, outputs=names)
    if split is None and not int(ctx.attrs.get("keepdims", 1)):
        axes = ctx.const(np.asarray([axis], np.int64), "axes")
        parts = [ctx.emit("Squeeze", [p, axes])[0] for p in parts]
    return [SequenceValue(tuple(parts), x.dtype)]


def _concat_from_sequence(ctx: NodeContext) -> Sequence[Any]:
    seq = _seq(ctx, 0)
    if isinstance(seq, Value):
        attrs = {"axis": int(ctx.attrs.get("axis", 0)), "new_axis": int(ctx.attrs.get("new_axis", 0))}
        return _run_time(ctx, "ConcatFromSequence", seq, [], attrs)
    if not seq.items:
        raise ctx.fail("cannot concatenate an empty sequence")
    axis, new_axis = int(ctx.attrs.get("axis", 0)), int(ctx.attrs.get("new_axis", 0))
    items = list(seq.items)
    if new_axis:
        rank = items[0].shape
        if axis < 0:
            if rank is None:
                raise ctx.fail("a negative axis with new_axis=1 needs tensors of known rank")
            axis += len(rank) + 1
        axes = ctx.const(np.asarray([axis], np.int64), "axes")
        items = [ctx.emit("Unsqueeze", [v, axes])[0] for v in items]
    return ctx.emit("Concat", items, {"axis": axis}, outputs=ctx.outputs)


def _sequence_map(ctx: NodeContext) -> Sequence[Any]:
    body = ctx.attrs.get("body")
    if not isinstance(body, onnx.GraphProto) or ctx.inline is None:
        raise ctx.fail("has no body subgraph")
    first = _seq(ctx, 0)
    if isinstance(first, Value) or any(_first_class(v, "sequence", "optional_sequence") for v in ctx.inputs):
        from aioge.frontends.onnx_control import runtime_sequence_map

        return runtime_sequence_map(ctx, body, [materialise(ctx, v) for v in ctx.inputs])
    n = len(first.items)
    args: list[Any] = list(ctx.inputs)
    for v in args:
        if isinstance(v, SequenceValue) and len(v.items) != n:
            raise ctx.fail(f"sequences of different lengths ({n} and {len(v.items)})")
    per_step = [ctx.inline(body, [v.items[i] if isinstance(v, SequenceValue) else v for v in args], f"map{i}") for i in range(n)]
    outs = []
    for j, vi in enumerate(body.output):
        items = tuple(step[j] for step in per_step)
        outs.append(SequenceValue(items, items[0].dtype if items else elem_dtype(vi.type)))
    return outs


def elem_dtype(t: onnx.TypeProto) -> str:
    """The tensor element dtype inside a (sequence or optional of) tensor type; float32 when untyped."""
    from aioge.frontends.onnx_model import dtype_of_enum

    while t.WhichOneof("value") in ("sequence_type", "optional_type"):
        t = t.sequence_type.elem_type if t.HasField("sequence_type") else t.optional_type.elem_type
    code = t.tensor_type.elem_type if t.HasField("tensor_type") else 0
    return dtype_of_enum(code, "sequence element") if code else "float32"


def _optional(ctx: NodeContext) -> Sequence[Any]:
    v: Any = ctx.input(0)
    if _first_class(v, "optional", "optional_sequence"):
        raise ctx.fail("an optional of an optional is not a value ONNX has")
    if v is not None:
        return [OptionalValue(v)]
    t = ctx.attrs.get("type")
    if not isinstance(t, onnx.TypeProto):
        raise ctx.fail("an empty Optional needs its type attribute")
    kind = container_of(t)
    return [OptionalValue(None, elem_dtype(t), kind == "sequence")]


def _has_element(ctx: NodeContext) -> Sequence[Any]:
    v: Any = ctx.input(0)
    if _first_class(v, "optional", "optional_sequence"):
        return ctx.emit("OptionalHasElement", [v], outputs=ctx.outputs)
    present = v is not None and not (isinstance(v, OptionalValue) and v.value is None)
    return [ctx.const(np.asarray(present), "has_element")]


def _get_element(ctx: NodeContext) -> Sequence[Any]:
    v: Any = ctx.input(0)
    if _first_class(v, "optional", "optional_sequence"):
        return ctx.emit("OptionalGetElement", [v], outputs=ctx.outputs)
    if isinstance(v, OptionalValue):
        v = v.value
    if v is None:
        raise ctx.fail("the optional is empty")
    return [v]


SEQUENCE_CONVERTERS = {
    "SequenceConstruct": _construct,
    "SequenceEmpty": _empty,
    "SequenceAt": _at,
    "SequenceInsert": _insert,
    "SequenceErase": _erase,
    "SequenceLength": _length,
    "SplitToSequence": _split_to_sequence,
    "ConcatFromSequence": _concat_from_sequence,
    "SequenceMap": _sequence_map,
    "Optional": _optional,
    "OptionalHasElement": _has_element,
    "OptionalGetElement": _get_element,
}

# The aioge ops each converter may emit (for the frontend's support check).
SEQUENCE_EMITS: dict[str, tuple[str, ...]] = {
    "SplitToSequence": ("Split", "Squeeze", "SplitToSequence"),
    "ConcatFromSequence": ("Unsqueeze", "Concat", "ConcatFromSequence"),
}
