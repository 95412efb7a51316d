"""Image and tensor-layout ops: Pad, Resize, Upsample, DepthToSpace, SpaceToDepth,
CenterCropPad, Col2Im, GridSample and AffineGrid.

Resizing, sampling and layout moves are vector-engine work; their shape inputs (pads,
sizes, scales) are small int or float tensors, so ``float_only`` is off and the data dtype
alone decides. Output shapes are static when the shape-determining inputs are constants,
unknown (the kernel's result decides) when they are computed at run time.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import grid as kg
from aioge.kernels import image as k
from aioge.kernels import resize as kr
from aioge.kernels.base import returning
from aioge.kernels.contract import Engine
from aioge.ops.infer import normalise_axis
from aioge.ops.schema import CPU_ONLY, FLOAT_DTYPES, REQUIRED, VECTOR_ENGINES, Attr, InferContext, InferError, InferFn, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES


def _ints(v: np.ndarray) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _static(shape: tuple[Dim, ...] | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _infer_pad(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != "int64":
        raise InferError(f"pads must be int64, got {ctx.dtype(1)}")
    if ctx.has(2) and ctx.dtype(2) != ctx.dtype(0):
        raise InferError(f"constant_value must have data's dtype {ctx.dtype(0)}, got {ctx.dtype(2)}")
    shape, pads = ctx.shape(0), ctx.value(1)
    axes = ctx.value(3) if ctx.has(3) else None
    if shape is None or pads is None or (ctx.has(3) and axes is None):
        return [TensorDesc(None, ctx.dtype(0))]
    try:
        widths = k.pad_widths(len(shape), _ints(pads), None if axes is None else _ints(axes))
    except ValueError as exc:
        raise InferError(str(exc)) from None
    out: list[Dim] = []
    for d, (b, e) in zip(shape, widths):
        if isinstance(d, int):
            if d + b + e < 0:
                raise InferError(f"pads {(b, e)} crop more than the dimension {d}")
            out.append(d + b + e)
        else:
            out.append(d if b == e == 0 else "?")
    return [TensorDesc(tuple(out), ctx.dtype(0))]


def _infer_resize(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    shape = _static(ctx.shape(0))
    for i in (2, 3):
        if ctx.has(i) and ctx.value(i) is None:
            return [TensorDesc(None, dtype)]  # computed at run time
    roi = ctx.value(1) if ctx.has(1) else None
    if shape is None or (ctx.has(1) and roi is None and ctx.attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"):
        return [TensorDesc(None, dtype)]
    try:
        plan = kr.resize_plan(
            shape,
            roi,
            ctx.value(2) if ctx.has(2) else None,
            ctx.value(3) if ctx.has(3) else None,
            ctx.attrs.get("axes"),
            ctx.attrs["keep_aspect_ratio_policy"],
        )
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return [TensorDesc(plan.sizes, dtype)]


def _infer_upsample(ctx: InferContext) -> list[TensorDesc]:
    shape, scales = _static(ctx.shape(0)), ctx.value(1)
    if shape is None or scales is None:
        return [TensorDesc(None, ctx.dtype(0))]
    try:
        plan = kr.resize_plan(shape, None, scales, None, None)
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return [TensorDesc(plan.sizes, ctx.dtype(0))]


def _nchw(ctx: InferContext) -> tuple[Dim, ...] | None:
    shape = ctx.shape(0)
    if shape is not None and len(shape) != 4:
        raise InferError(f"input must be 4-D (N, C, H, W), got shape {shape}")
    return shape


def _infer_depth_to_space(ctx: InferContext) -> list[TensorDesc]:
    shape = _nchw(ctx)
    b = ctx.attrs["blocksize"]
    if shape is None:
        return [TensorDesc(None, ctx.dtype(0))]
    n, c, h, w = shape
    if isinstance(c, int) and c % (b * b):
        raise InferError(f"channels {c} are not divisible by blocksize**2 = {b * b}")
    return [TensorDesc((n, c // (b * b) if isinstance(c, int) else "?", _mul(h, b), _mul(w, b)), ctx.dtype(0))]


def _infer_space_to_depth(ctx: InferContext) -> list[TensorDesc]:
    shape = _nchw(ctx)
    b = ctx.attrs["blocksize"]
    if shape is None:
        return [TensorDesc(None, ctx.dtype(0))]
    n, c, h, w = shape
    for d in (h, w):
        if isinstance(d, int) and d % b:
            raise InferError(f"spatial size {d} is not divisible by blocksize {b}")
    div = [d // b if isinstance(d, int) else "?" for d in (h, w)]
    return [TensorDesc((n, _mul(c, b * b), *div), ctx.dtype(0))]


def _mul(d: Dim, f: int) -> Dim:
    return d * f if isinstance(d, int) else "?"


def _infer_center_crop_pad(ctx: InferContext) -> list[TensorDesc]:
    shape, target = ctx.shape(0), ctx.value(1)
    if shape is None or target is None:
        return [TensorDesc(None, ctx.dtype(0))]
    axes = ctx.attrs.get("axes")
    ax = list(range(len(shape))) if axes is None else [normalise_axis(a, len(shape)) for a in axes]
    want = _ints(target)
    if len(want) != len(ax):
        raise InferError(f"shape has {len(want)} values for {len(ax)} axes")
    out = list(shape)
    for a, v in zip(ax, want):
        out[a] = v
    return [TensorDesc(tuple(out), ctx.dtype(0))]


def _infer_col2im(ctx: InferContext) -> list[TensorDesc]:
    shape, image, block = ctx.shape(0), ctx.value(1), ctx.value(2)
    if shape is None or image is None or block is None:
        return [TensorDesc(None, ctx.dtype(0))]
    if len(shape) != 3:
        raise InferError(f"input must be 3-D (N, C * prod(block), L), got shape {shape}")
    kk = int(np.prod(_ints(block)))
    c = shape[1]
    if isinstance(c, int) and c % kk:
        raise InferError(f"input channels {c} are not divisible by the block size {kk}")
    return [TensorDesc((shape[0], c // kk if isinstance(c, int) else "?", *_ints(image)), ctx.dtype(0))]


def _infer_grid_sample(ctx: InferContext) -> list[TensorDesc]:
    x, grid = ctx.shape(0), ctx.shape(1)
    if x is None or grid is None:
        return [TensorDesc(None, ctx.dtype(0))]
    if len(x) < 3 or len(grid) != len(x) or grid[-1] not in (len(x) - 2, "?") and isinstance(grid[-1], int):
        raise InferError(f"grid of shape {grid} does not fit an input of shape {x}")
    return [TensorDesc((x[0], x[1], *grid[1:-1]), ctx.dtype(0))]


def _infer_affine_grid(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"theta must be float, got {ctx.dtype(0)}")
    size = ctx.value(1)
    if size is None:
        return [TensorDesc(None, ctx.dtype(0))]
    dims = _ints(size)
    if len(dims) not in (4, 5):
        raise InferError(f"size must have 4 or 5 values (N, C, H, W[, D]), got {dims}")
    return [TensorDesc((dims[0], *dims[2:], len(dims) - 2), ctx.dtype(0))]


_RESIZE_ATTRS = {
    "antialias": Attr("int", 0, (0, 1)),
    "axes": Attr("ints"),
    "coordinate_transformation_mode": Attr(
        "string",
        "half_pixel",
        ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"),
    ),
    "cubic_coeff_a": Attr("float", -0.75),
    "exclude_outside": Attr("int", 0, (0, 1)),
    "extrapolation_value": Attr("float", 0.0),
    "keep_aspect_ratio_policy": Attr("string", "stretch", ("stretch", "not_larger", "not_smaller")),
    "mode": Attr("string", "nearest", ("nearest", "linear", "cubic")),
    "nearest_mode": Attr("string", "round_prefer_floor", ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")),
}
_BLOCK_ATTRS = {
    "blocksize": Attr("int", REQUIRED, check=lambda b: None if b > 0 else "must be positive"),
    "mode": Attr("string", "DCR", ("DCR", "CRD")),
}


def _infer_image_decoder(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    if ctx.dtype(0) != "uint8" or (shape is not None and len(shape) != 1):
        raise InferError(f"encoded_stream must be a 1-D uint8 tensor, got {ctx.dtype(0)}{list(shape or [])}")
    channels = 1 if ctx.attrs["pixel_format"] == "Grayscale" else 3
    return [TensorDesc(("?", "?", channels), "uint8")]  # height and width come from the stream at run time


def _op(
    name: str,
    infer: InferFn,
    fn: Callable[..., Any],
    doc: str,
    attrs: Mapping[str, Attr] | None = None,
    inputs: tuple[int, int] = (1, 1),
    engines: frozenset[Engine] = VECTOR_ENGINES,
    form: Any = None,
) -> OpSchema:
    return OpSchema(
        name,
        infer,
        (returning("numpy", fn, form=form),),
        engines,
        attrs or {},
        inputs,
        family="image",
        doc=doc,
        float_only=False,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _op(
        "Pad",
        _infer_pad,
        k.pad,
        "pad (or crop, for negative pads) with a constant, reflection, edge or wrap",
        {"mode": Attr("string", "constant", ("constant", "reflect", "edge", "wrap"))},
        (2, 4),
        form=k.pad_form,
    ),
    _op(
        "Resize",
        _infer_resize,
        kr.resize,
        "resize by scales or to sizes: nearest, linear or cubic, per-axis",
        _RESIZE_ATTRS,
        (1, 4),
    ),
    _op(
        "Upsample",
        _infer_upsample,
        kr.upsample,
        "upsample by scales (nearest or linear, asymmetric coordinates)",
        {"mode": Attr("string", "nearest", ("nearest", "linear", "bilinear"))},
        (2, 2),
    ),
    _op("DepthToSpace", _infer_depth_to_space, k.depth_to_space, "move channel blocks into space (DCR or CRD)", _BLOCK_ATTRS),
    _op("SpaceToDepth", _infer_space_to_depth, k.space_to_depth, "move spatial blocks into channels", _BLOCK_ATTRS),
    _op(
        "CenterCropPad",
        _infer_center_crop_pad,
        k.center_crop_pad,
        "crop or zero-pad about the centre to a shape",
        {"axes": Attr("ints")},
        (2, 2),
        CPU_ONLY,
    ),
    _op(
        "Col2Im",
        _infer_col2im,
        k.col2im,
        "sum columns of sliding blocks back into images",
        {"dilations": Attr("ints"), "pads": Attr("ints"), "strides": Attr("ints")},
        (3, 3),
        CPU_ONLY,
    ),
    _op(
        "GridSample",
        _infer_grid_sample,
        kg.grid_sample,
        "sample the input at a grid of normalised coordinates",
        {
            "align_corners": Attr("int", 0, (0, 1)),
            "mode": Attr("string", "linear", ("nearest", "linear", "cubic", "bilinear", "bicubic")),
            "padding_mode": Attr("string", "zeros", ("zeros", "border", "reflection")),
        },
        (2, 2),
    ),
    _op(
        "AffineGrid",
        _infer_affine_grid,
        kg.affine_grid,
        "the sampling grid of a batch of affine transforms",
        {"align_corners": Attr("int", 0, (0, 1))},
        (2, 2),
    ),
    _op(
        "ImageDecoder",
        _infer_image_decoder,
        k.decode_image,
        "decode a BMP/JPEG/PNG/PNM/TIFF/WebP byte stream to HWC uint8 pixels",
        {"pixel_format": Attr("string", "RGB", ("RGB", "BGR", "Grayscale"))},
        (1, 1),
        CPU_ONLY,
    ),
)
