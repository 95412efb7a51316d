"""Tensor-algebra ops: Einsum, Det, CumSum, CumProd, Range, Size and EyeLike.

Einsum is a matrix product in general form, so every engine takes it (float inputs);
cumulative scans and determinants are vector/CPU work; Range, Size and EyeLike make index
and shape tensors on AiCpu.
"""

from __future__ import annotations

import numpy as np

from aioge.ir.desc import TensorDesc, canonical_dtype
from aioge.kernels import algebra as k
from aioge.kernels.base import returning
from aioge.ops.infer import infer_like_input, normalise_axis
from aioge.ops.schema import (
    ALL_ENGINES,
    CPU_ONLY,
    FLOAT_DTYPES,
    REQUIRED,
    VECTOR_ENGINES,
    Attr,
    InferContext,
    InferError,
    KernelImpl,
    OpSchema,
)

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES


def _infer_einsum(ctx: InferContext) -> list[TensorDesc]:
    dtypes = {ctx.dtype(i) for i in range(len(ctx.inputs))}
    if len(dtypes) != 1:
        raise InferError(f"inputs must share one dtype, got {sorted(dtypes)}")
    shapes = [ctx.shape(i) for i in range(len(ctx.inputs))]
    dtype = dtypes.pop()
    if any(s is None for s in shapes):
        k.parse_einsum(ctx.attrs["equation"], [None if s is None else len(s) for s in shapes])
        return [TensorDesc(None, dtype)]
    return [TensorDesc(k.einsum_shape(ctx.attrs["equation"], shapes), dtype)]  # type: ignore[arg-type]


def _infer_det(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"Det takes float tensors, got {ctx.dtype(0)}")
    shape = ctx.shape(0)
    if shape is None:
        return [TensorDesc(None, ctx.dtype(0))]
    if len(shape) < 2:
        raise InferError(f"Det needs a tensor of rank >= 2, got shape {shape}")
    m, n = shape[-2], shape[-1]
    if isinstance(m, int) and isinstance(n, int) and m != n:
        raise InferError(f"Det needs square matrices, got shape {shape}")
    return [TensorDesc(tuple(shape[:-2]), ctx.dtype(0))]


def _infer_cumulative(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) not in ("int32", "int64"):
        raise InferError(f"axis must be int32 or int64, got {ctx.dtype(1)}")
    axis_shape = ctx.shape(1)
    if axis_shape is not None and len(axis_shape) > 1:
        raise InferError(f"axis must be a scalar or one-element 1-D tensor, got shape {axis_shape}")
    axis = ctx.value(1)
    shape = ctx.shape(0)
    if axis is not None and shape is not None:
        normalise_axis(int(np.asarray(axis).reshape(-1)[0]), len(shape))
    return infer_like_input(ctx)


def _infer_range(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    for i, what in ((1, "limit"), (2, "delta")):
        if ctx.dtype(i) != dtype:
            raise InferError(f"{what} must have start's dtype {dtype}, got {ctx.dtype(i)}")
        s = ctx.shape(i)
        # a one-element 1-D tensor is taken as the scalar (onnxruntime and the reference accept it)
        if s is not None and not (len(s) == 0 or tuple(s) == (1,)):
            raise InferError(f"{what} must be a scalar, got shape {s}")
    values = [ctx.value(i) for i in range(3)]
    if any(v is None for v in values):
        return [TensorDesc(None, dtype)]  # the length depends on run-time values
    start, limit, delta = (np.asarray(v).reshape(()).item() for v in values)
    try:
        n = k.range_length(start, limit, delta)
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return [TensorDesc((n,), dtype)]


def _infer_size(ctx: InferContext) -> list[TensorDesc]:
    ctx.dtype(0)
    return [TensorDesc((), "int64")]


def _infer_eye_like(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    if shape is not None and len(shape) != 2:
        raise InferError(f"EyeLike takes a 2-D tensor, got shape {shape}")
    dtype = ctx.attrs.get("dtype")
    return [TensorDesc(shape, canonical_dtype(dtype) if dtype is not None else ctx.dtype(0))]


_SCAN_ATTRS = {"exclusive": Attr("int", 0, (0, 1)), "reverse": Attr("int", 0, (0, 1))}

SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "Einsum",
        _infer_einsum,
        (KernelImpl("numpy", k.build_einsum),),
        ALL_ENGINES,
        {"equation": Attr("string", REQUIRED)},
        (1, -1),
        family="algebra",
        doc="Einstein summation over the inputs, contracted in an optimised order",
    ),
    OpSchema(
        "Det",
        _infer_det,
        (returning("numpy", k.det),),
        VECTOR_ENGINES,
        family="algebra",
        doc="determinants of the square matrices in the last two dimensions",
    ),
    OpSchema(
        "CumSum",
        _infer_cumulative,
        (KernelImpl("numpy", k.build_cumulative("sum"), native=True),),
        VECTOR_ENGINES,
        _SCAN_ATTRS,
        (2, 2),
        family="algebra",
        doc="running sum along an axis (exclusive, reverse)",
        float_only=False,
    ),
    OpSchema(
        "CumProd",
        _infer_cumulative,
        (KernelImpl("numpy", k.build_cumulative("prod"), native=True),),
        VECTOR_ENGINES,
        _SCAN_ATTRS,
        (2, 2),
        family="algebra",
        doc="running product along an axis (exclusive, reverse)",
        float_only=False,
    ),
    OpSchema(
        "Range",
        _infer_range,
        (returning("numpy", k.range_),),
        CPU_ONLY,
        {"stash_type": Attr("int", 1)},
        (3, 3),
        family="algebra",
        doc="start, start + delta, ... up to limit (exclusive)",
        float_only=False,
    ),
    OpSchema(
        "Size",
        _infer_size,
        (returning("numpy", k.size),),
        CPU_ONLY,
        family="algebra",
        doc="the number of elements of the input, as an int64 scalar",
        float_only=False,
        shape_only=True,
    ),
    OpSchema(
        "EyeLike",
        _infer_eye_like,
        (returning("numpy", k.eye_like),),
        CPU_ONLY,
        {"dtype": Attr("dtype", None), "k": Attr("int", 0)},
        family="algebra",
        doc="a 2-D tensor shaped like the input with ones on the k-th diagonal",
        float_only=False,
    ),
)
