"""Resize (and its predecessor Upsample): nearest, linear and cubic interpolation, separable
per axis.

Each resized axis is done in one step over the whole tensor: the source coordinate of every
output position comes from the coordinate transformation, the taps and their weights from
the interpolation kernel (stretched by 1/scale when antialiasing a downscale), and the axis
is then one ``np.take`` of the taps and a weighted sum. Taps past the edge repeat the edge
value (or are dropped with ``exclude_outside``). Arithmetic is float64, cast back at the end
(rounded and saturated for integer tensors), which is how the ONNX reference computes.

``resize_plan`` is shared with shape inference so the kernel produces the promised shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["ResizePlan", "resize", "resize_plan", "upsample"]


@dataclass(frozen=True, slots=True)
class ResizePlan:
    """Per-axis output sizes, scales and ROI of one Resize (all axes, in input order)."""

    sizes: tuple[int, ...]
    scales: tuple[float, ...]
    roi: tuple[tuple[float, float], ...] | None


def _present(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None or np.asarray(a).size == 0 else np.asarray(a)


def resize_plan(
    shape: Sequence[int],
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    axes: Sequence[int] | None,
    policy: str = "stretch",
) -> ResizePlan:
    """Output sizes and per-axis scales of a Resize, following the ONNX reference.

    Exactly one of ``scales`` and ``sizes`` must be given (empty tensors count as absent);
    both name only ``axes`` when axes are given. With sizes and a keep-aspect-ratio policy
    the resized axes share one scale (the smallest for not_larger, the largest for
    not_smaller) and their sizes are rounded half up.

    Raises:
        ValueError: neither or both of scales and sizes, wrong lengths, or bad values.
    """
    rank = len(shape)
    ax = list(range(rank)) if axes is None else [a % rank for a in axes]
    if len(set(ax)) != len(ax):
        raise ValueError(f"axes {list(axes or [])} repeat an axis")
    scales, sizes, roi = _present(scales), _present(sizes), _present(roi)
    if (scales is None) == (sizes is None):
        raise ValueError("exactly one of scales and sizes must be given")
    out_sizes = list(shape)
    out_scales = [1.0] * rank
    if sizes is not None:
        want = [int(v) for v in sizes.reshape(-1)]
        if len(want) != len(ax) or any(v < 0 for v in want):
            raise ValueError(f"sizes {want} do not fit {len(ax)} resized axes")
        for a, v in zip(ax, want):
            out_sizes[a] = v
            out_scales[a] = v / shape[a] if shape[a] else 1.0
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            scale = pick(out_scales[a] for a in ax)
            for a in ax:
                out_scales[a] = scale
                out_sizes[a] = int(scale * shape[a] + 0.5)
    else:
        assert scales is not None
        got = [float(v) for v in scales.reshape(-1)]
        if len(got) != len(ax) or any(v <= 0 for v in got):
            raise ValueError(f"scales {got} do not fit {len(ax)} resized axes (each must be > 0)")
        for a, s in zip(ax, got):
            out_scales[a] = s
            out_sizes[a] = int(shape[a] * s)
    box: tuple[tuple[float, float], ...] | None = None
    if roi is not None:
        r = [float(v) for v in roi.reshape(-1)]
        if len(r) != 2 * len(ax):
            raise ValueError(f"roi has {len(r)} values for {len(ax)} resized axes")
        full = [(0.0, 1.0)] * rank
        for i, a in enumerate(ax):
            full[a] = (r[i], r[len(ax) + i])
        box = tuple(full)
    return ResizePlan(tuple(out_sizes), tuple(out_scales), box)


def _source_coords(
    mode: str, n_out: int, n_in: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Source coordinate of every output position, and which ones are extrapolated."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # the real-valued output length
    if mode == "align_corners":
        return (np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "pytorch_half_pixel":
        return (np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    start, end = roi if roi is not None else (0.0, 1.0)
    if width == 1:
        x = np.full(n_out, (end - start) * (n_in - 1) / 2)
    else:
        x = y * (end - start) * (n_in - 1) / (width - 1)
    x = x + start * (n_in - 1)
    return x, (x < 0) | (x > n_in - 1)


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    d2, d3 = d * d, d * d * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(
    x: np.ndarray,
    n_in: int,
    scale: float,
    mode: str,
    nearest_mode: str,
    cubic_a: float,
    antialias: bool,
    exclude_outside: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (n_out, n_taps): the input positions each output reads."""
    base = np.ceil(x) - 1  # the tap left of x; x itself when x is an integer
    ratio = x - base  # in (0, 1]
    if mode == "nearest":
        # Two candidate taps (base, base + 1); an integer x always takes itself.
        if nearest_mode == "round_prefer_floor":
            right = ratio > 0.5
        elif nearest_mode == "round_prefer_ceil":
            right = ratio >= 0.5
        elif nearest_mode == "floor":
            right = ratio == 1
        else:
            right = np.ones_like(ratio, dtype=bool)
        idx = (base + right).astype(np.int64)[:, None]
        weights = np.ones_like(idx, dtype=np.float64)
    else:
        support = 1 if mode == "linear" else 2
        s = min(scale, 1.0) if antialias else 1.0
        first = math.floor(-support / s) + 1
        offsets = np.arange(first, 1 - first + 1)  # 2 - 2 * first taps, symmetric about x
        idx = (base[:, None] + offsets[None, :]).astype(np.int64)
        dist = (idx - x[:, None]) * s
        weights = np.clip(1 - np.abs(dist), 0, 1) if mode == "linear" else _cubic(dist, cubic_a)
        if antialias:
            weights = weights / weights.sum(axis=1, keepdims=True)
    if exclude_outside:
        weights = np.where((idx < 0) | (idx >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), weights


def _resize_axis(
    data: np.ndarray, axis: int, n_out: int, scale: float, roi: tuple[float, float] | None, attrs: dict[str, Any]
) -> np.ndarray:
    n_in = data.shape[axis]
    if n_out == 0 or n_in == 0:
        shape = list(data.shape)
        shape[axis] = n_out
        return np.zeros(shape, data.dtype)
    x, outside = _source_coords(attrs["coordinate_transformation_mode"], n_out, n_in, scale, roi)
    idx, w = _taps(
        x,
        n_in,
        scale,
        attrs["mode"],
        attrs["nearest_mode"],
        attrs["cubic_coeff_a"],
        bool(attrs["antialias"]),
        bool(attrs["exclude_outside"]),
    )
    gathered = np.take(data, idx, axis=axis)  # data.shape[:axis] + (n_out, n_taps) + rest
    w_shape = (1,) * axis + w.shape + (1,) * (data.ndim - axis - 1)
    res = np.sum(gathered * w.reshape(w_shape), axis=axis + 1)
    if outside is not None and outside.any():
        mask = outside.reshape((1,) * axis + (n_out,) + (1,) * (data.ndim - axis - 1))
        res = np.where(mask, attrs["extrapolation_value"], res)
    return res


def _cast(res: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(res), info.min, info.max).astype(dtype)
    return res.astype(dtype)


_DEFAULTS: dict[str, Any] = {
    "antialias": 0,
    "axes": None,
    "coordinate_transformation_mode": "half_pixel",
    "cubic_coeff_a": -0.75,
    "exclude_outside": 0,
    "extrapolation_value": 0.0,
    "keep_aspect_ratio_policy": "stretch",
    "mode": "nearest",
    "nearest_mode": "round_prefer_floor",
}


def resize(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    """ONNX Resize (opset 19) of x by scales or to sizes; see ``resize_plan`` and the module doc.

    Raises:
        ValueError: bad scales, sizes or roi.
    """
    opts = {**_DEFAULTS, **attrs}
    plan = resize_plan(x.shape, roi, scales, sizes, opts["axes"], opts["keep_aspect_ratio_policy"])
    res = x.astype(np.float64)
    for axis in range(x.ndim):
        n_out, scale = plan.sizes[axis], plan.scales[axis]
        box = None if plan.roi is None else plan.roi[axis]
        if n_out == x.shape[axis] and math.isclose(scale, 1.0) and (box is None or box == (0.0, 1.0)):
            continue  # every mode maps an unscaled axis onto itself
        res = _resize_axis(res, axis, n_out, scale, box, opts)
    return _cast(res, x.dtype)


def upsample(x: np.ndarray, scales: np.ndarray, mode: str = "nearest") -> np.ndarray:
    """ONNX Upsample (opset 9): Resize with asymmetric coordinates, nearest taps rounding down."""
    return resize(
        x,
        None,
        scales,
        None,
        mode="linear" if mode in ("linear", "bilinear") else "nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
