"""Windowed ops: Conv, MaxPool, AveragePool and GlobalAveragePool (NCHW, any spatial rank).

ConvTranspose, LpPool, GlobalMaxPool and MaxUnpool are in ``aioge.ops.window``.

Output shapes come from ``aioge.kernels.conv.window_geometry``, the function the kernels
use, so inference and execution agree by construction.
"""

from __future__ import annotations

from typing import Any, Sequence

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import conv as k
from aioge.kernels.conv_algos import CONV_ALGOS, NATIVE_CONV_ALGOS
from aioge.kernels.pool_algos import GLOBAL_AVG_ALGOS, POOL_AVG_ALGOS, POOL_MAX_ALGOS
from aioge.ops.schema import (
    ALL_ENGINES,
    FLOAT_DTYPES,
    REQUIRED,
    Attr,
    InferContext,
    InferError,
    KernelImpl,
    OpSchema,
    low_precision,
)

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _positive(what: str) -> Any:
    def check(v: Sequence[int]) -> str | None:
        return None if all(x >= 1 for x in v) else f"{what} must all be >= 1, got {list(v)}"

    return check


def _non_negative(v: Sequence[int]) -> str | None:
    return None if all(x >= 0 for x in v) else f"pads must all be >= 0, got {list(v)}"


def _window_attrs(extra: dict[str, Attr] | None = None, kernel_required: bool = False) -> dict[str, Attr]:
    attrs = {
        "auto_pad": Attr("string", "NOTSET", _AUTO_PAD),
        "kernel_shape": Attr("ints", REQUIRED if kernel_required else None, check=_positive("kernel_shape")),
        "pads": Attr("ints", None, check=_non_negative),
        "strides": Attr("ints", None, check=_positive("strides")),
        "dilations": Attr("ints", None, check=_positive("dilations")),
    }
    attrs.update(extra or {})
    return attrs


def _check_lengths(ctx: InferContext, spatial: int) -> None:
    for key, want in (("kernel_shape", spatial), ("strides", spatial), ("dilations", spatial), ("pads", 2 * spatial)):
        v = ctx.attrs.get(key)
        if v is not None and len(v) != want:
            raise InferError(f"{key} {list(v)} must have {want} values for {spatial} spatial axes")


def _data_desc(ctx: InferContext, what: str = "X", dtypes: Sequence[str] = _FLOATS) -> TensorDesc:
    d = ctx.inputs[0]
    if d is None:
        raise InferError(f"input {what} is required")
    if d.dtype not in dtypes:
        raise InferError(f"{what} must be one of {', '.join(dtypes)}, got {d.dtype}")
    if d.shape is not None and len(d.shape) < 3:
        raise InferError(f"{what} must be N x C x D1 x ... (rank >= 3), got shape {d.shape}")
    return d


def _spatial_out(ctx: InferContext, spatial: Sequence[Dim], kernel: Sequence[Dim], ceil_mode: bool = False) -> list[int] | None:
    """The output spatial dims, or None when a symbol makes them unknowable."""
    if not all(isinstance(d, int) for d in (*spatial, *kernel)):
        return None
    n = len(spatial)
    attrs = ctx.attrs
    try:
        _, _, out = k.window_geometry(
            [int(d) for d in spatial],
            [int(d) for d in kernel],
            attrs.get("strides") or [1] * n,
            attrs.get("dilations") or [1] * n,
            attrs.get("pads") or [0] * (2 * n),
            attrs.get("auto_pad", "NOTSET"),
            ceil_mode,
        )
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return out


def _infer_conv(ctx: InferContext) -> list[TensorDesc]:
    x = _data_desc(ctx)
    w = ctx.inputs[1]
    if w is None:
        raise InferError("input W is required")
    if w.dtype != x.dtype:
        raise InferError(f"X and W must share a dtype, got {x.dtype} and {w.dtype}")
    if ctx.has(2) and ctx.dtype(2) != x.dtype:
        raise InferError(f"B must have dtype {x.dtype}, got {ctx.dtype(2)}")
    group = ctx.attrs["group"]
    if x.shape is None or w.shape is None:
        return [TensorDesc(None, x.dtype)]
    if len(w.shape) != len(x.shape):
        raise InferError(f"W must have the rank of X ({len(x.shape)}), got shape {w.shape}")
    spatial = len(x.shape) - 2
    _check_lengths(ctx, spatial)
    n, c = x.shape[0], x.shape[1]
    m, cg = w.shape[0], w.shape[1]
    kernel = ctx.attrs.get("kernel_shape")
    if kernel is not None and all(isinstance(d, int) for d in w.shape[2:]) and tuple(w.shape[2:]) != tuple(kernel):
        raise InferError(f"kernel_shape {list(kernel)} does not match W's spatial shape {w.shape[2:]}")
    if isinstance(c, int) and c % group:
        raise InferError(f"input channels {c} are not divisible by group {group}")
    if isinstance(c, int) and isinstance(cg, int) and c // group != cg:
        raise InferError(
            f"channel mismatch: X has {c} channels, so W (shape {w.shape}) needs {c // group} "
            f"input channels per group for group={group}, not {cg}"
        )
    if isinstance(m, int) and m % group:
        raise InferError(f"output channels {m} (W's first dim) are not divisible by group {group}")
    if ctx.has(2):
        bshape = ctx.shape(2)
        if bshape is not None and (len(bshape) != 1 or (isinstance(m, int) and isinstance(bshape[0], int) and bshape[0] != m)):
            raise InferError(f"B must have shape ({m},), got {bshape}")
    out = _spatial_out(ctx, x.shape[2:], w.shape[2:])
    return [TensorDesc(None if out is None else (n, m, *out), x.dtype)]


def _infer_max_pool(ctx: InferContext) -> list[TensorDesc]:
    return _infer_pool(ctx, (*_FLOATS, "int8", "uint8"))


def _infer_average_pool(ctx: InferContext) -> list[TensorDesc]:
    return _infer_pool(ctx, _FLOATS)


def _infer_pool(ctx: InferContext, dtypes: Sequence[str]) -> list[TensorDesc]:
    x = _data_desc(ctx, dtypes=dtypes)
    kernel = ctx.attrs["kernel_shape"]
    if x.shape is None:
        return [TensorDesc(None, x.dtype), TensorDesc(None, "int64")][: max(1, ctx.num_outputs)]
    spatial = len(x.shape) - 2
    _check_lengths(ctx, spatial)
    out = _spatial_out(ctx, x.shape[2:], kernel, bool(ctx.attrs.get("ceil_mode", 0)))
    shape = None if out is None else (*x.shape[:2], *out)
    return [TensorDesc(shape, x.dtype), TensorDesc(shape, "int64")][: max(1, ctx.num_outputs)]


def _infer_global_pool(ctx: InferContext) -> list[TensorDesc]:
    x = _data_desc(ctx)
    if x.shape is None:
        return [TensorDesc(None, x.dtype)]
    return [TensorDesc((*x.shape[:2], *([1] * (len(x.shape) - 2))), x.dtype)]


_CEIL = {"ceil_mode": Attr("int", 0, (0, 1))}

SCHEMAS: tuple[OpSchema, ...] = (
    low_precision(
        OpSchema(
            "Conv",
            _infer_conv,
            (KernelImpl("im2col", k.build_conv_im2col), *NATIVE_CONV_ALGOS, KernelImpl("taps", k.build_conv_taps), *CONV_ALGOS),
            ALL_ENGINES,
            _window_attrs({"group": Attr("int", 1, check=lambda g: None if g >= 1 else f"group must be >= 1, got {g}")}),
            (2, 3),
            family="nn",
            builder="conv2d",
            cost="conv",
            doc="N-D convolution (NCHW), grouped and depthwise, with optional bias",
        ),
    ),
    OpSchema(
        "MaxPool",
        _infer_max_pool,
        (KernelImpl("separable", k.build_max_pool), *POOL_MAX_ALGOS),
        ALL_ENGINES,
        _window_attrs({**_CEIL, "storage_order": Attr("int", 0, (0, 1))}, kernel_required=True),
        outputs=(1, 2),
        family="nn",
        doc="max over sliding windows (padding never wins); optional Indices output (flat, int64)",
    ),
    OpSchema(
        "AveragePool",
        _infer_average_pool,
        (KernelImpl("separable", k.build_average_pool), *POOL_AVG_ALGOS),
        ALL_ENGINES,
        _window_attrs({**_CEIL, "count_include_pad": Attr("int", 0, (0, 1))}, kernel_required=True),
        family="nn",
        doc="mean over sliding windows, padding counted only with count_include_pad",
    ),
    OpSchema(
        "GlobalAveragePool",
        _infer_global_pool,
        (KernelImpl("numpy", k.build_global_pool("mean")), *GLOBAL_AVG_ALGOS),
        ALL_ENGINES,
        family="nn",
        doc="mean over all spatial axes, kept as size 1",
    ),
)
