"""Reductions in opset-18 form: ``axes`` is an optional int64 input; ``keepdims`` and
``noop_with_empty_axes`` are attributes."""

from __future__ import annotations

from typing import Callable

import numpy as np

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import reduce as k
from aioge.kernels.pool_algos import reduce_algos
from aioge.ops.schema import VECTOR_ENGINES, Attr, InferContext, InferError, KernelImpl, OpSchema

__all__ = ["REDUCE_ATTRS", "SCHEMAS", "infer_reduce", "infer_reduce_or_bool"]

_NUMBERS = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def infer_reduce(ctx: InferContext, dtypes: tuple[str, ...] = _NUMBERS) -> list[TensorDesc]:
    """The output of an opset-18 reduction: ``axes`` from the optional int64 input, ``keepdims``
    and ``noop_with_empty_axes`` from the attributes; unknown when the axes are computed at run time."""
    x = ctx.inputs[0]
    if x is None:
        raise InferError("input data is required")
    if x.dtype not in dtypes:
        raise InferError(f"cannot reduce a {x.dtype} tensor")
    given = None
    if ctx.has(1):
        if ctx.dtype(1) != "int64":
            raise InferError(f"axes must be int64, got {ctx.dtype(1)}")
        value = ctx.value(1)
        if value is None:
            return [TensorDesc(None, x.dtype)]
        given = [int(a) for a in np.asarray(value).reshape(-1)]
    if x.shape is None:
        return [TensorDesc(None, x.dtype)]
    try:
        axes = k.reduce_axes(len(x.shape), given, bool(ctx.attrs["noop_with_empty_axes"]))
    except ValueError as exc:
        raise InferError(str(exc)) from None
    if axes is None:
        return [TensorDesc(x.shape, x.dtype)]
    keep = bool(ctx.attrs["keepdims"])
    out: list[Dim] = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
    return [TensorDesc(tuple(out), x.dtype)]


def infer_reduce_or_bool(ctx: InferContext) -> list[TensorDesc]:
    """ReduceMax and ReduceMin (opset 20) also take bool tensors: max is any(), min is all()."""
    return infer_reduce(ctx, (*_NUMBERS, "bool"))


REDUCE_ATTRS = {"keepdims": Attr("int", 1, (0, 1)), "noop_with_empty_axes": Attr("int", 0, (0, 1))}


def _reduce(name: str, reducer: str, doc: str, infer: Callable[[InferContext], list[TensorDesc]] = infer_reduce) -> OpSchema:
    return OpSchema(
        name,
        infer,
        (KernelImpl("numpy", k.build_reduce(reducer)), *reduce_algos(reducer)),
        VECTOR_ENGINES,
        REDUCE_ATTRS,
        (1, 2),
        family="reduce",
        doc=doc,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _reduce("ReduceSum", "sum", "sum over axes (all when none are given)"),
    _reduce("ReduceMean", "mean", "mean over axes (all when none are given)"),
    _reduce("ReduceMax", "max", "maximum over axes (all when none are given)", infer_reduce_or_bool),
)
