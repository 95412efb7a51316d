"""Windowed kernels beyond Conv and the basic pools: ConvTranspose, DeformConv, LpPool and
MaxUnpool.

ConvTranspose is one matrix product per group (every input pixel times every kernel tap)
followed by one strided add per kernel tap into the output canvas (col2im). LpPool sums
|x|**p over kernel taps of a zero-padded input. The loops run over kernel taps (a few
dozen at most) or groups, never over elements. DeformConv samples every kernel tap
bilinearly at its learned offset (zero outside the image), then contracts like im2col. ``conv_transpose_geometry`` and
``unpool_shape`` are shared with shape inference.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np

from aioge.kernels.conv import window_geometry

__all__ = ["conv_transpose", "conv_transpose_geometry", "deform_conv", "lp_pool", "max_unpool", "unpool_shape"]


def conv_transpose_geometry(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int] | None,
    output_padding: Sequence[int],
    output_shape: Sequence[int] | None,
    auto_pad: str,
) -> tuple[list[int], list[int]]:
    """``(pads_begin, out_spatial)`` of a ConvTranspose, as the ONNX reference computes them.

    Explicit pads (or none, under NOTSET) are used as given, the output size following from
    them unless ``output_shape`` fixes it. Under SAME_UPPER/SAME_LOWER the output size is
    ``output_shape`` (or input * stride) and the pads are derived from it, the odd one at the
    end (SAME_UPPER) or the beginning (SAME_LOWER).

    Raises:
        ValueError: lengths that do not match the spatial rank, or an empty output.
    """
    n = len(spatial)
    for name, v, want in (
        ("kernel", kernel, n),
        ("strides", strides, n),
        ("dilations", dilations, n),
        ("output_padding", output_padding, n),
    ):
        if len(v) != want:
            raise ValueError(f"{name} has {len(v)} values for {n} spatial axes")
    if output_shape is not None:
        output_shape = list(output_shape)[-n:]
    full = [strides[i] * (spatial[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and not pads:
        out = list(output_shape) if output_shape is not None else [spatial[i] * strides[i] for i in range(n)]
        begin = []
        for i in range(n):
            total = full[i] - out[i]
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begin, out
    p = list(pads) if pads else [0] * (2 * n)
    if len(p) != 2 * n:
        raise ValueError(f"pads has {len(p)} values for {n} spatial axes")
    out = list(output_shape) if output_shape is not None else [full[i] - p[i] - p[i + n] for i in range(n)]
    if any(o <= 0 for o in out):
        raise ValueError(f"output spatial shape {out} is empty")
    return p[:n], out


def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, **attrs: Any) -> np.ndarray:
    """ONNX ConvTranspose of x (N, C, *D) with w (C, M / group, *K), any spatial rank."""
    group = int(attrs.get("group", 1))
    n, c = x.shape[:2]
    spatial = list(x.shape[2:])
    kernel = list(w.shape[2:])
    nd = len(spatial)
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    output_padding = list(attrs.get("output_padding") or [0] * nd)
    begin, out = conv_transpose_geometry(
        spatial,
        kernel,
        strides,
        dilations,
        attrs.get("pads"),
        output_padding,
        attrs.get("output_shape"),
        attrs.get("auto_pad", "NOTSET"),
    )
    cg, mg = c // group, w.shape[1]
    # The canvas holds every tap's contribution; shift it so negative begin pads fit too.
    shift = [max(0, -b_) for b_ in begin]
    reach = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    size = [shift[i] + max(reach[i], begin[i] + out[i]) for i in range(nd)]
    acc = np.promote_types(x.dtype, np.float32)
    canvas = np.zeros((n, group * mg, *size), acc)
    kk = int(np.prod(kernel))
    pixels = int(np.prod(spatial))
    for g in range(group):
        xg = x[:, g * cg : (g + 1) * cg].reshape(n, cg, pixels).astype(acc, copy=False)
        wg = w[g * cg : (g + 1) * cg].reshape(cg, mg * kk).astype(acc, copy=False)
        cols = np.matmul(wg.T, xg).reshape(n, mg, *kernel, *spatial)  # one product for all taps
        for tap in itertools.product(*(range(k) for k in kernel)):
            where = tuple(
                slice(
                    shift[i] + tap[i] * dilations[i],
                    shift[i] + tap[i] * dilations[i] + (spatial[i] - 1) * strides[i] + 1,
                    strides[i],
                )
                for i in range(nd)
            )
            canvas[(slice(None), slice(g * mg, (g + 1) * mg), *where)] += cols[(slice(None), slice(None), *tap)]
    crop = tuple(slice(shift[i] + begin[i], shift[i] + begin[i] + out[i]) for i in range(nd))
    y = canvas[(slice(None), slice(None), *crop)]
    if b is not None:
        y = y + b.reshape((-1,) + (1,) * nd)
    return y.astype(x.dtype)


def _pool_attrs(attrs: Mapping[str, Any], nd: int) -> tuple[list[int], list[int], list[int], list[int], str]:
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    pads = list(attrs.get("pads") or [0] * (2 * nd))
    return kernel, strides, dilations, pads, attrs.get("auto_pad", "NOTSET")


def lp_pool(x: np.ndarray, **attrs: Any) -> np.ndarray:
    """(sum of |x|**p over each window) ** (1 / p); padding contributes zeros."""
    nd = x.ndim - 2
    p = int(attrs.get("p", 2))
    kernel, strides, dilations, pads, auto_pad = _pool_attrs(attrs, nd)
    begin, end, out = window_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad, bool(attrs.get("ceil_mode", 0)))
    # ceil_mode windows may overhang the end padding: grow it with more zeros.
    end = [
        max(end[i], (out[i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - x.shape[2 + i] - begin[i]) for i in range(nd)
    ]
    powered = np.abs(x.astype(np.promote_types(x.dtype, np.float32))) ** p
    xp = np.pad(powered, [(0, 0), (0, 0), *zip(begin, end)])
    total = np.zeros((*x.shape[:2], *out), powered.dtype)
    for tap in itertools.product(*(range(k) for k in kernel)):
        index = tuple(
            slice(tap[i] * dilations[i], tap[i] * dilations[i] + (out[i] - 1) * strides[i] + 1, strides[i]) for i in range(nd)
        )
        total += xp[(slice(None), slice(None), *index)]
    return (total ** (1.0 / p)).astype(x.dtype)


def unpool_shape(in_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int]) -> list[int]:
    """The shape MaxPool was applied to, recovered from its output shape (MaxUnpool's default)."""
    nd = len(kernel)
    out = list(in_shape[:2])
    for i in range(nd):
        out.append((in_shape[2 + i] - 1) * strides[i] - (pads[i] + pads[nd + i]) + kernel[i])
    return out


def max_unpool(x: np.ndarray, indices: np.ndarray, output_shape: np.ndarray | None = None, **attrs: Any) -> np.ndarray:
    """Scatter x to the flat positions in ``indices`` of a zero tensor of the pre-pool shape.

    The indices address the shape MaxPool saw (recovered from the attributes); a larger
    ``output_shape`` holds that tensor in its leading corner, as in the ONNX reference.

    Raises:
        ValueError: an index outside the pre-pool tensor, or an output_shape smaller than it.
    """
    nd = x.ndim - 2
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides") or [1] * nd)
    pads = list(attrs.get("pads") or [0] * (2 * nd))
    inferred = unpool_shape(x.shape, kernel, strides, pads)
    total = int(np.prod(inferred))
    flat = np.zeros(total, x.dtype)
    idx = indices.astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= total):
        raise ValueError(f"indices address positions outside the pre-pool shape {inferred}")
    flat[idx] = x.reshape(-1)
    y = flat.reshape(inferred)
    if output_shape is None or np.asarray(output_shape).size == 0:
        return y
    shape = [int(v) for v in np.asarray(output_shape).reshape(-1)]
    if len(shape) != len(inferred) or any(s < i for s, i in zip(shape, inferred)):
        raise ValueError(f"output_shape {shape} is smaller than the pre-pool shape {inferred}")
    res = np.zeros(shape, x.dtype)
    res[tuple(slice(0, i) for i in inferred)] = y
    return res


def _bilinear_zero(xg: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Sample xg (N, G, C, H, W) at float positions y, x (N, G, ...) -> (N, G, ..., C); 0 outside."""
    n, g, _, h, w = xg.shape
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    ly, lx = y - y0, x - x0
    bi = np.arange(n).reshape((n,) + (1,) * (y.ndim - 1))
    gi = np.arange(g).reshape((1, g) + (1,) * (y.ndim - 2))
    out = 0.0
    for dy, wy in ((0, 1 - ly), (1, ly)):
        for dx, wx in ((0, 1 - lx), (1, lx)):
            yy, xx = y0 + dy, x0 + dx
            ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            vals = xg[bi, gi, :, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
            out = out + vals * (wy * wx * ok)[..., None]
    return np.asarray(out)


def deform_conv(
    x: np.ndarray,
    w: np.ndarray,
    offset: np.ndarray,
    b: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    """ONNX DeformConv (2-D): each kernel tap reads the input at its position plus a learned
    offset (bilinearly, zero outside), scaled by the mask, then a grouped convolution sum.

    Raises:
        ValueError: shapes inconsistent with the groups, offset groups or output size.
    """
    if x.ndim != 4:
        raise ValueError(f"DeformConv supports 2-D inputs (N, C, H, W), got shape {x.shape}")
    n, c, h, wd = x.shape
    oc, cg = w.shape[:2]
    kh, kw = list(attrs.get("kernel_shape") or w.shape[2:])
    group, og = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    sh, sw = list(attrs.get("strides") or [1, 1])
    dh, dw = list(attrs.get("dilations") or [1, 1])
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    oh, ow = offset.shape[2:]
    if c != cg * group or oc % group or c % og or offset.shape[1] != og * kh * kw * 2:
        raise ValueError(
            f"DeformConv shapes do not fit: X {x.shape}, W {w.shape}, offset {offset.shape}, group={group}, offset_group={og}"
        )
    off = offset.astype(np.float64).reshape(n, og, kh, kw, 2, oh, ow)
    m = np.ones((n, og, kh, kw, oh, ow)) if mask is None else mask.astype(np.float64).reshape(n, og, kh, kw, oh, ow)
    xg = x.astype(np.float64).reshape(n, og, c // og, h, wd)
    base_h = (-pads[0] + sh * np.arange(oh))[:, None]  # (oh, 1)
    base_w = (-pads[1] + sw * np.arange(ow))[None, :]  # (1, ow)
    cols = np.empty((n, c, kh * kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            ys = base_h + i * dh + off[:, :, i, j, 0]  # (N, og, oh, ow)
            xs = base_w + j * dw + off[:, :, i, j, 1]
            sampled = _bilinear_zero(xg, ys, xs) * m[:, :, i, j][..., None]  # (N, og, oh, ow, C/og)
            cols[:, :, i * kw + j] = np.moveaxis(sampled, -1, 2).reshape(n, c, oh, ow)
    cols = cols.reshape(n, group, cg * kh * kw, oh * ow)
    y = np.matmul(w.astype(np.float64).reshape(group, oc // group, cg * kh * kw), cols).reshape(n, oc, oh, ow)
    if b is not None:
        y = y + b.astype(np.float64).reshape(1, -1, 1, 1)
    return y.astype(x.dtype)
