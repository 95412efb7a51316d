"""ONNX sequence and optional values, resolved at load time into the tensors they hold.

aioge graphs carry tensors only, so a sequence whose length follows from the model (and, for
a sequence graph input, from ``load_onnx(..., lengths=)``) is held by the frontend as the
tuple of its tensor values (``SequenceValue``), and an optional as the value it holds or
nothing (``OptionalValue``). Every tensor inside is an ordinary graph value: planned,
fused and placed in the arena like any other. Positions (SequenceAt, SequenceInsert,
SequenceErase) and split sizes must follow from the constants; SequenceMap runs its body
once per element. A graph input ``s`` that is a sequence of n tensors becomes inputs
``s[0]`` ... ``s[n-1]``; a sequence output ``y`` becomes outputs ``y[0]`` ... (none when
empty), an optional output its tensor(s) or nothing.
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
    "element_name",
    "elem_dtype",
    "is_structured",
]


@dataclass(frozen=True, slots=True)
class SequenceValue:
    """An ONNX sequence of known length: its tensors in order, and the element dtype."""

    items: tuple[Value, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class OptionalValue:
    """An ONNX optional: the tensor or sequence it holds, or None when it is empty."""

    value: Value | SequenceValue | None


def is_structured(v: object) -> bool:
    return isinstance(v, (SequenceValue, OptionalValue))


def element_name(name: str, i: int) -> str:
    """The graph input or output name of element ``i`` of sequence ``name``."""
    return f"{name}[{i}]"


def _seq(ctx: NodeContext, i: int) -> SequenceValue:
    v: Any = ctx.input(i)
    if isinstance(v, OptionalValue):
        v = v.value
    if not isinstance(v, SequenceValue):
        raise ctx.fail(f"input {i} must be a sequence, got {'nothing' if v is None else type(v).__name__}")
    return v


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
    return [seq.items[_position(ctx, 1, len(seq.items), 0)]]


def _insert(ctx: NodeContext) -> Sequence[Any]:
    seq, x = _seq(ctx, 0), ctx.input(1)
    if not isinstance(x, Value) or (seq.items and x.dtype != seq.dtype):
        raise ctx.fail(f"inserts a tensor of the sequence's dtype {seq.dtype}")
    pos = _position(ctx, 2, len(seq.items), len(seq.items), insert=True)
    return [SequenceValue((*seq.items[:pos], x, *seq.items[pos:]), x.dtype)]


def _erase(ctx: NodeContext) -> Sequence[Any]:
    seq = _seq(ctx, 0)
    if not seq.items:
        raise ctx.fail("cannot erase from an empty sequence")
    pos = _position(ctx, 1, len(seq.items), len(seq.items) - 1)
    return [SequenceValue((*seq.items[:pos], *seq.items[pos + 1 :]), seq.dtype)]


def _length(ctx: NodeContext) -> Sequence[Any]:
    return [ctx.const(np.asarray(len(_seq(ctx, 0).items), np.int64), "length")]


def _split_to_sequence(ctx: NodeContext) -> Sequence[Any]:
    x = ctx.input(0)
    shape = ctx.sharp_shape(0)
    axis = int(ctx.attrs.get("axis", 0))
    if not isinstance(x, Value) or shape is None:
        raise ctx.fail("needs a tensor of known rank")
    axis += len(shape) if axis < 0 else 0
    if not 0 <= axis < len(shape) or not isinstance(shape[axis], int):
        raise ctx.fail(f"the split axis must have a static length to make a sequence, got shape {list(shape)}")
    total = int(shape[axis])
    split = ctx.computable(1) if ctx.input(1) is not None else None
    if ctx.input(1) is not None and split is None:
        count = ctx.shape(1)
        if count is None or len(count) != 1 or not isinstance(count[0], int):
            raise ctx.fail("split must follow from the model's constants, or be 1-D of static length (the sequence's)")
        # Run-time sizes, a load-time count: one Split output per entry of split.
        names = [ctx.names.fresh(f"{ctx.name}/part") for _ in range(count[0])]
        return [SequenceValue(tuple(ctx.emit("Split", [x, ctx.input(1)], {"axis": axis}, outputs=names)), x.dtype)]
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
    return [OptionalValue(ctx.input(0))]


def _has_element(ctx: NodeContext) -> Sequence[Any]:
    v: Any = ctx.input(0)
    present = v is not None and not (isinstance(v, OptionalValue) and v.value is None)
    return [ctx.const(np.asarray(present), "has_element")]


def _get_element(ctx: NodeContext) -> Sequence[Any]:
    v: Any = ctx.input(0)
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
    "SplitToSequence": ("Split", "Squeeze"),
    "ConcatFromSequence": ("Unsqueeze", "Concat"),
}
