"""Sequence and optional ops: values that are lists of tensors, or a tensor or sequence that may be absent.

A sequence desc is ``TensorDesc(element shape, element dtype, container="sequence")``; the
element shape keeps the dimensions every element shares (``"?"`` where they differ, None
when even the rank is unknown). An optional is ``container="optional"`` (of a tensor) or
``"optional_sequence"``. At run time a sequence is a Python list of arrays and an empty
optional is None; the memory planner leaves them to the runtime (``plan.memory.plannable``).
AiCpu only: the work is bookkeeping, not arithmetic.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import sequence as k
from aioge.ops.schema import CPU_ONLY, REQUIRED, Attr, InferContext, InferError, KernelImpl, OpSchema, RunFn

__all__ = ["SCHEMAS", "optional_of", "sequence_of"]


def sequence_of(d: TensorDesc) -> TensorDesc:
    """The desc of a sequence of tensors like ``d``."""
    return TensorDesc(d.shape, d.dtype, "ND", "sequence")


def optional_of(d: TensorDesc) -> TensorDesc:
    """The desc of an optional holding a value like ``d`` (a tensor or a sequence); an optional
    stays itself (ONNX has no optional of an optional: the frontend refuses one, and the
    Optional op over an optional is its copy)."""
    if d.container.startswith("optional"):
        return d
    return TensorDesc(d.shape, d.dtype, "ND", "optional" if d.is_tensor else "optional_sequence")


def _container_impl(fn: Callable[..., Any]) -> KernelImpl:
    """``fn(*inputs, **attrs)``; tensor results go into preallocated outputs when the planner made some."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        kw = dict(attrs)

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[Any]:
            res = fn(*inputs, **kw)
            if outputs is None:
                return (res,)
            if np.shape(res) != outputs[0].shape:  # never broadcast an element into a planned buffer
                raise ValueError(f"the result has shape {list(np.shape(res))}, its desc says {list(outputs[0].shape)}")
            np.copyto(outputs[0], res, casting="unsafe")
            return outputs

        return run

    return KernelImpl("numpy", build)


def _merge(shapes: Sequence[tuple[Dim, ...] | None]) -> tuple[Dim, ...] | None:
    """The element shape several tensors share: None unless one rank, ``"?"`` where dims differ."""
    if not shapes or any(s is None for s in shapes) or len({len(s) for s in shapes if s is not None}) != 1:
        return None
    first = shapes[0]
    assert first is not None
    return tuple(d if all(s[i] == d for s in shapes if s is not None) else "?" for i, d in enumerate(first))


def _want(ctx: InferContext, i: int, *containers: str) -> TensorDesc:
    d = ctx.inputs[i] if i < len(ctx.inputs) else None
    if d is None:
        raise InferError(f"input {i} is required")
    if d.container not in containers:
        raise InferError(f"input {i} must be a {' or '.join(containers)}, got {d}")
    return d


def _infer_construct(ctx: InferContext) -> list[TensorDesc]:
    descs = [_want(ctx, i, "tensor") for i in range(len(ctx.inputs))]
    if len({d.dtype for d in descs}) != 1:
        raise InferError(f"tensors of one dtype, got {sorted({d.dtype for d in descs})}")
    return [TensorDesc(_merge([d.shape for d in descs]), descs[0].dtype, "ND", "sequence")]


def _infer_empty(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(None, str(ctx.attrs.get("dtype", "float32")), "ND", "sequence")]


def _infer_at(ctx: InferContext) -> list[TensorDesc]:
    return [_want(ctx, 0, "sequence").element]


def _infer_insert(ctx: InferContext) -> list[TensorDesc]:
    s, t = _want(ctx, 0, "sequence"), _want(ctx, 1, "tensor")
    if s.dtype != t.dtype:
        raise InferError(f"inserts a tensor of the sequence's dtype {s.dtype}, got {t.dtype}")
    return [TensorDesc(_merge([s.shape, t.shape]), s.dtype, "ND", "sequence")]


def _infer_erase(ctx: InferContext) -> list[TensorDesc]:
    return [_want(ctx, 0, "sequence")]


def _infer_length(ctx: InferContext) -> list[TensorDesc]:
    _want(ctx, 0, "sequence")
    return [TensorDesc((), "int64")]


def _infer_split(ctx: InferContext) -> list[TensorDesc]:
    x = _want(ctx, 0, "tensor")
    if x.shape is None:
        return [TensorDesc(None, x.dtype, "ND", "sequence")]
    axis = int(ctx.attrs.get("axis", 0))
    axis += len(x.shape) if axis < 0 else 0
    if not 0 <= axis < len(x.shape):
        raise InferError(f"axis {ctx.attrs.get('axis')} is out of range for rank {len(x.shape)}")
    shape: list[Dim] = list(x.shape)
    if not ctx.has(1) and not int(ctx.attrs.get("keepdims", 1)):
        del shape[axis]
    else:
        shape[axis] = 1 if not ctx.has(1) else "?"
    return [TensorDesc(tuple(shape), x.dtype, "ND", "sequence")]


def _infer_concat(ctx: InferContext) -> list[TensorDesc]:
    s = _want(ctx, 0, "sequence")
    rank = None if s.shape is None else len(s.shape) + (1 if int(ctx.attrs.get("new_axis", 0)) else 0)
    return [TensorDesc(None if rank is None else ("?",) * rank, s.dtype)]


def _infer_optional(ctx: InferContext) -> list[TensorDesc]:
    if ctx.has(0):
        d = ctx.inputs[0]
        assert d is not None
        return [optional_of(d)]
    dtype = ctx.attrs.get("elem_dtype")
    if not dtype:
        raise InferError("an empty Optional needs its element type (attribute elem_dtype)")
    return [TensorDesc(None, str(dtype), "ND", "optional_sequence" if int(ctx.attrs.get("sequence", 0)) else "optional")]


def _infer_has(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc((), "bool")]


def _infer_get(ctx: InferContext) -> list[TensorDesc]:
    if not ctx.has(0):
        raise InferError("OptionalGetElement needs a value (the optional input is absent)")
    d = ctx.inputs[0]
    assert d is not None
    if d.container == "optional":
        return [d.element]
    if d.container == "optional_sequence":
        return [sequence_of(d.element)]
    return [d]


def _schema(name: str, infer: Any, fn: Callable[..., Any], ins: tuple[int, int], doc: str, **attrs: Attr) -> OpSchema:
    return OpSchema(
        name,
        infer,
        (_container_impl(fn),),
        CPU_ONLY,
        attrs,
        ins,
        family="sequence",
        doc=doc,
        float_only=False,
        containers=True,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _schema("SequenceConstruct", _infer_construct, k.sequence_construct, (1, -1), "a sequence of the input tensors"),
    _schema("SequenceEmpty", _infer_empty, k.sequence_empty, (0, 0), "an empty sequence", dtype=Attr("dtype", "float32")),
    _schema("SequenceAt", _infer_at, k.sequence_at, (2, 2), "the tensor at a position of a sequence"),
    _schema("SequenceInsert", _infer_insert, k.sequence_insert, (2, 3), "a sequence with a tensor inserted (default: appended)"),
    _schema("SequenceErase", _infer_erase, k.sequence_erase, (1, 2), "a sequence without one tensor (default: the last)"),
    _schema("SequenceLength", _infer_length, k.sequence_length, (1, 1), "the number of tensors in a sequence"),
    _schema(
        "SplitToSequence",
        _infer_split,
        k.split_to_sequence,
        (1, 2),
        "a tensor split along an axis into a sequence",
        axis=Attr("int", 0),
        keepdims=Attr("int", 1),
    ),
    _schema(
        "ConcatFromSequence",
        _infer_concat,
        k.concat_from_sequence,
        (1, 1),
        "a sequence's tensors joined along an axis (or stacked on a new one)",
        axis=Attr("int", REQUIRED),
        new_axis=Attr("int", 0),
    ),
    _schema(
        "Optional",
        _infer_optional,
        k.optional,
        (0, 1),
        "an optional holding the input, or an empty one of elem_dtype (a sequence when sequence=1)",
        elem_dtype=Attr("dtype", None),
        sequence=Attr("int", 0),
    ),
    _schema("OptionalHasElement", _infer_has, k.optional_has_element, (0, 1), "whether the optional input holds a value"),
    _schema("OptionalGetElement", _infer_get, k.optional_get_element, (1, 1), "the value an optional holds"),
)
