"""Windowed ops beyond Conv and the basic pools: ConvTranspose, DeformConv, LpPool,
GlobalMaxPool and MaxUnpool.

ConvTranspose is a matrix product plus a scatter-add, so every engine takes it (float
inputs); the pools are vector work; MaxUnpool scatters by index on AiCpu.
"""

from __future__ import annotations

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import window as k
from aioge.kernels.base import returning
from aioge.kernels.conv import build_global_pool, window_geometry
from aioge.kernels.pool_algos import GLOBAL_MAX_ALGOS
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
    low_precision,
)

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_AUTO_PAD = Attr("string", "NOTSET", ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"))


def _spatial(ctx: InferContext) -> list[int] | None:
    """The input's static spatial dims (all but N and C), or None when not all known."""
    shape = ctx.shape(0)
    if shape is None:
        return None
    if len(shape) < 3:
        raise InferError(f"input must have rank >= 3 (N, C, spatial...), got shape {shape}")
    if not all(isinstance(d, int) for d in shape[2:]):
        return None
    return [int(d) for d in shape[2:]]


def _infer_conv_transpose(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS or ctx.dtype(1) != dtype:
        raise InferError(f"X and W must be float tensors of one dtype, got {dtype} and {ctx.dtype(1)}")
    x, w = ctx.shape(0), ctx.shape(1)
    spatial = _spatial(ctx)
    if x is None or w is None or spatial is None or not all(isinstance(d, int) for d in w):
        return [TensorDesc(None, dtype)]
    group = ctx.attrs["group"]
    if len(w) != len(x) or (isinstance(x[1], int) and x[1] != w[0]) or w[0] % group:
        raise InferError(f"W of shape {w} does not fit X of shape {x} with group={group}")
    nd = len(spatial)
    kernel = list(ctx.attrs.get("kernel_shape") or w[2:])
    a = ctx.attrs
    try:
        _, out = k.conv_transpose_geometry(
            spatial,
            kernel,
            list(a.get("strides") or [1] * nd),
            list(a.get("dilations") or [1] * nd),
            a.get("pads"),
            list(a.get("output_padding") or [0] * nd),
            a.get("output_shape"),
            a["auto_pad"],
        )
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return [TensorDesc((x[0], int(w[1]) * group, *out), dtype)]


def _infer_deform_conv(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS:
        raise InferError(f"X must be a float tensor, got {dtype}")
    x, w, off = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if x is None or w is None or off is None:
        return [TensorDesc(None, dtype)]
    if len(x) != 4 or len(w) != 4 or len(off) != 4:
        raise InferError(f"DeformConv supports 2-D inputs: X, W and offset must be 4-D, got {x}, {w}, {off}")
    return [TensorDesc((x[0], w[0], off[2], off[3]), dtype)]


def _infer_lp_pool(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {ctx.dtype(0)}")
    shape, spatial = ctx.shape(0), _spatial(ctx)
    if shape is None or spatial is None:
        return [TensorDesc(None, ctx.dtype(0))]
    a = ctx.attrs
    nd = len(spatial)
    kernel = list(a["kernel_shape"])
    if len(kernel) != nd:
        raise InferError(f"kernel_shape {kernel} does not fit {nd} spatial axes")
    try:
        _, _, out = window_geometry(
            spatial,
            kernel,
            list(a.get("strides") or [1] * nd),
            list(a.get("dilations") or [1] * nd),
            list(a.get("pads") or [0] * (2 * nd)),
            a["auto_pad"],
            bool(a["ceil_mode"]),
        )
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return [TensorDesc((shape[0], shape[1], *out), ctx.dtype(0))]


def _infer_global_max_pool(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    if shape is None:
        return [TensorDesc(None, ctx.dtype(0))]
    if len(shape) < 3:
        raise InferError(f"input must have rank >= 3 (N, C, spatial...), got shape {shape}")
    return [TensorDesc((shape[0], shape[1], *([1] * (len(shape) - 2))), ctx.dtype(0))]


def _infer_max_unpool(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != "int64":
        raise InferError(f"I must be int64, got {ctx.dtype(1)}")
    shape = ctx.shape(0)
    if ctx.has(2):
        value = ctx.value(2)
        if value is None:
            return [TensorDesc(None, ctx.dtype(0))]
        return [TensorDesc(tuple(int(v) for v in np.asarray(value).reshape(-1)), ctx.dtype(0))]
    spatial = _spatial(ctx)
    if shape is None or spatial is None:
        return [TensorDesc(None, ctx.dtype(0))]
    a = ctx.attrs
    nd = len(spatial)
    full = k.unpool_shape(
        [0, 0, *spatial], list(a["kernel_shape"]), list(a.get("strides") or [1] * nd), list(a.get("pads") or [0] * (2 * nd))
    )
    return [TensorDesc((shape[0], shape[1], *full[2:]), ctx.dtype(0))]


_WINDOW = {"dilations": Attr("ints"), "pads": Attr("ints"), "strides": Attr("ints"), "auto_pad": _AUTO_PAD}

SCHEMAS: tuple[OpSchema, ...] = (
    low_precision(
        OpSchema(
            "ConvTranspose",
            _infer_conv_transpose,
            (returning("numpy", k.conv_transpose),),
            ALL_ENGINES,
            {
                **_WINDOW,
                "group": Attr("int", 1),
                "kernel_shape": Attr("ints"),
                "output_padding": Attr("ints"),
                "output_shape": Attr("ints"),
            },
            (2, 3),
            family="window",
            cost="conv",
            doc="transposed convolution (any spatial rank; groups, strides, dilations, pads)",
        ),
    ),
    OpSchema(
        "DeformConv",
        _infer_deform_conv,
        (returning("numpy", k.deform_conv),),
        ALL_ENGINES,
        {
            "dilations": Attr("ints"),
            "group": Attr("int", 1),
            "kernel_shape": Attr("ints"),
            "offset_group": Attr("int", 1),
            "pads": Attr("ints"),
            "strides": Attr("ints"),
        },
        (3, 5),
        family="window",
        doc="deformable 2-D convolution: kernel taps at learned offsets, optionally masked",
    ),
    OpSchema(
        "LpPool",
        _infer_lp_pool,
        (returning("numpy", k.lp_pool),),
        VECTOR_ENGINES,
        {**_WINDOW, "kernel_shape": Attr("ints", REQUIRED), "p": Attr("int", 2), "ceil_mode": Attr("int", 0, (0, 1))},
        family="window",
        doc="the Lp norm of every window",
    ),
    OpSchema(
        "GlobalMaxPool",
        _infer_global_max_pool,
        (KernelImpl("numpy", build_global_pool("max")), *GLOBAL_MAX_ALGOS),
        VECTOR_ENGINES,
        family="window",
        doc="the maximum over all spatial axes, kept as size 1",
    ),
    OpSchema(
        "MaxUnpool",
        _infer_max_unpool,
        (returning("numpy", k.max_unpool),),
        CPU_ONLY,
        {"kernel_shape": Attr("ints", REQUIRED), "pads": Attr("ints"), "strides": Attr("ints")},
        (2, 3),
        family="window",
        doc="scatter pooled maxima back to their positions in a zero tensor",
        float_only=False,
    ),
)
