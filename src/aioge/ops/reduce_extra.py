"""More reductions: ReduceProd, ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare,
ReduceLogSum and ReduceLogSumExp (opset 18 form: the axes are an optional int64 input).

Reductions run on the vector engine or AiCpu; integer data goes to AiCpu.
"""

from __future__ import annotations

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import reduce_extra as k
from aioge.kernels.reduce import reduce_axes
from aioge.ops.schema import VECTOR_ENGINES, Attr, InferContext, InferError, KernelImpl, OpSchema

__all__ = ["SCHEMAS"]

_ATTRS = {"keepdims": Attr("int", 1, (0, 1)), "noop_with_empty_axes": Attr("int", 0, (0, 1))}


def _infer_reduce(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    dtype = ctx.dtype(0)
    given = None
    if ctx.has(1):
        if ctx.dtype(1) != "int64":
            raise InferError(f"axes must be int64, got {ctx.dtype(1)}")
        value = ctx.value(1)
        if value is None:
            return [TensorDesc(None, dtype)]  # which axes go is only known at run time
        given = [int(a) for a in np.asarray(value).reshape(-1)]
    if shape is None:
        return [TensorDesc(None, dtype)]
    try:
        axes = reduce_axes(len(shape), given, bool(ctx.attrs["noop_with_empty_axes"]))
    except ValueError as exc:
        raise InferError(str(exc)) from None
    if axes is None:
        return [TensorDesc(tuple(shape), dtype)]
    keep = ctx.attrs["keepdims"]
    return [TensorDesc(tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes), dtype)]


def _reduce(name: str, kind: str, doc: str) -> OpSchema:
    return OpSchema(
        name, _infer_reduce, (KernelImpl("numpy", k.build_reduction(kind)),), VECTOR_ENGINES, _ATTRS, (1, 2),
        family="reduce", doc=doc,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _reduce("ReduceProd", "prod", "product over the axes"),
    _reduce("ReduceMin", "min", "minimum over the axes"),
    _reduce("ReduceL1", "l1", "sum of |x| over the axes"),
    _reduce("ReduceL2", "l2", "sqrt of the sum of x * x over the axes"),
    _reduce("ReduceSumSquare", "sum_square", "sum of x * x over the axes"),
    _reduce("ReduceLogSum", "log_sum", "log of the sum over the axes"),
    _reduce("ReduceLogSumExp", "log_sum_exp", "log of the sum of e^x over the axes, overflow-free"),
)
