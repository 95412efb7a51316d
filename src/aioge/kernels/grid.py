"""Sampling-grid kernels: AffineGrid builds a grid of normalised coordinates, GridSample
reads an N-D input at them (nearest, linear or cubic; zeros, border or reflection padding).

GridSample is vectorised over every output position: the coordinates are denormalised and
padded per spatial axis at once, then each tap combination (2**d for linear, 4**d for
cubic, at most 64) is one gather over the whole output. Arithmetic is float64.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["affine_grid", "grid_sample"]

_CUBIC_A = -0.75


def affine_grid(theta: np.ndarray, size: np.ndarray, align_corners: int = 0) -> np.ndarray:
    """The (N, *spatial, d) grid of theta applied to the normalised coordinates of ``size``.

    Raises:
        ValueError: theta does not match a 2-D (N, 2, 3) or 3-D (N, 3, 4) size.
    """
    dims = [int(v) for v in np.asarray(size).reshape(-1)]
    n, spatial = dims[0], dims[2:]
    d = len(spatial)
    if theta.shape != (n, d, d + 1):
        raise ValueError(f"theta of shape {theta.shape} does not fit size {dims} (expected {(n, d, d + 1)})")
    axes = []
    for s in spatial:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, s) if s > 1 else np.zeros(s))
        else:
            axes.append((np.arange(s, dtype=np.float64) * 2 + 1) / s - 1)
    mesh = np.meshgrid(*axes, indexing="ij")  # spatial order (D, H, W)
    # Grid coordinates are listed innermost axis first (x, y[, z]), then a 1 for the shift.
    base = np.stack([*reversed(mesh), np.ones(spatial)], axis=-1).reshape(-1, d + 1)
    grid = np.einsum("pk,nik->npi", base, theta.astype(np.float64))
    return grid.reshape(n, *spatial, d).astype(theta.dtype)


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates by the near border until they lie in [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below = lo - x
    above = x - hi
    out = x.copy()
    for dx, inside_from, other in ((below, lo, hi), (above, hi, lo)):
        sel = dx > 0
        flips = np.floor(dx / span)
        rest = dx - flips * span
        even = flips % 2 == 0
        sign = 1 if inside_from == lo else -1
        moved = np.where(even, inside_from + sign * rest, other - sign * rest)
        out = np.where(sel, moved, out)
    return out


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    a = _CUBIC_A
    w0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
    w1 = ((a + 2) * t - (a + 3)) * t * t + 1
    w2 = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1
    w3 = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a
    return [w0, w1, w2, w3]


def grid_sample(
    x: np.ndarray, grid: np.ndarray, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros"
) -> np.ndarray:
    """Sample x (N, C, *D) at grid (N, *O, d) of normalised coordinates -> (N, C, *O).

    Raises:
        ValueError: the grid's last axis does not match the spatial rank.
    """
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # the opset-16 names
    n, c, *dims = x.shape
    d = len(dims)
    if grid.shape[-1] != d or grid.shape[0] != n:
        raise ValueError(f"grid of shape {grid.shape} does not fit an input of shape {x.shape}")
    out_spatial = grid.shape[1:-1]
    lo = [0.0 if align_corners else -0.5 for _ in dims]
    hi = [s - 1.0 if align_corners else s - 0.5 for s in dims]
    coords = []
    for i, s in enumerate(dims):
        g = grid[..., d - 1 - i].astype(np.float64)  # the grid lists the innermost axis first
        v = (g + 1) / 2 * (s - 1) if align_corners else ((g + 1) * s - 1) / 2
        if mode == "nearest":
            v = np.rint(v)
        outside = (v < lo[i]) | (v > hi[i])
        if padding_mode == "border":
            v = np.where(outside, np.clip(v, 0, s - 1), v)
        elif padding_mode == "reflection":
            v = np.where(outside, _reflect(v, lo[i], hi[i]), v)
        coords.append(v)
    # Taps per axis: (index, weight) pairs.
    taps: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for v in coords:
        if mode == "nearest":
            taps.append([(np.trunc(v).astype(np.int64), np.ones_like(v))])
        elif mode == "linear":
            f = np.floor(v)
            t = v - f
            taps.append([(f.astype(np.int64), 1 - t), (f.astype(np.int64) + 1, t)])
        else:
            f = np.floor(v)
            ws = _cubic_weights(v - f)
            taps.append([(f.astype(np.int64) + k - 1, w) for k, w in enumerate(ws)])
    xt = np.moveaxis(x, 1, -1).astype(np.float64)  # (N, *D, C)
    batch = np.arange(n).reshape((n,) + (1,) * len(out_spatial))
    acc = np.zeros((n, *out_spatial, c))
    for combo in itertools.product(*taps):
        weight = np.ones((n, *out_spatial))
        index = []
        valid = np.ones((n, *out_spatial), bool)
        for i, (idx, w) in enumerate(combo):
            weight = weight * w
            if padding_mode == "zeros":
                valid &= (idx >= 0) & (idx < dims[i])
                idx = np.clip(idx, 0, dims[i] - 1)
            elif padding_mode == "border":
                idx = np.clip(idx, 0, dims[i] - 1)
            else:
                idx = np.clip(np.trunc(_reflect(idx.astype(np.float64), lo[i], hi[i])).astype(np.int64), 0, dims[i] - 1)
            index.append(idx)
        vals = xt[(batch, *index)]  # (N, *O, C)
        acc += vals * (weight * valid)[..., None]
    return np.moveaxis(acc, -1, 1).astype(x.dtype)
