"""Index kernels: arg-reductions, TopK, gathers and scatters by index, OneHot, Tile, Trilu,
Compress, NonZero, Unique, ReverseSequence and TensorScatter.

Indices may be negative (counted from the end) wherever ONNX allows it; ``_wrap`` maps them
once, vectorised. No kernel loops over elements: scatters with a reduction use the ufunc's
unbuffered ``at``, which applies duplicates in order.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

__all__ = [
    "arg_reduce",
    "compress",
    "gather_elements",
    "gather_nd",
    "nonzero",
    "one_hot",
    "reverse_sequence",
    "scatter_elements",
    "scatter_nd",
    "tensor_scatter",
    "tile",
    "top_k",
    "trilu",
    "unique",
]

_REDUCTIONS: Mapping[str, np.ufunc] = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _wrap(indices: np.ndarray, size: int | np.ndarray) -> np.ndarray:
    """Indices as int64 with negatives counted from the end (``size`` broadcasts)."""
    idx = indices.astype(np.int64, copy=False)
    return np.where(idx < 0, idx + size, idx)


def _check_range(idx: np.ndarray, size: int | np.ndarray, what: str) -> None:
    if idx.size and (np.any(idx < 0) or np.any(idx >= size)):
        raise IndexError(f"{what} out of range")


def arg_reduce(x: np.ndarray, axis: int = 0, keepdims: int = 1, select_last_index: int = 0, *, largest: bool) -> np.ndarray:
    """ArgMax / ArgMin along ``axis`` as int64: the first extreme, or the last one."""
    axis %= max(x.ndim, 1)
    fn = np.argmax if largest else np.argmin
    if select_last_index:
        idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
    else:
        idx = fn(x, axis=axis)
    idx = np.asarray(idx, dtype=np.int64)
    return np.expand_dims(idx, axis) if keepdims else idx


def top_k(x: np.ndarray, k: np.ndarray, axis: int = -1, largest: int = 1, sorted: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The k largest (or smallest) values along ``axis`` and their int64 indices.

    Equal values keep the lower index first, as ONNX requires; the result is always sorted
    (allowed when ``sorted`` is 0).

    Raises:
        ValueError: k is negative or larger than the axis.
    """
    kk = int(np.asarray(k).reshape(-1)[0])
    axis %= x.ndim
    n = x.shape[axis]
    if not 0 <= kk <= n:
        raise ValueError(f"k={kk} is out of range for an axis of size {n}")
    if largest:
        # A stable ascending sort of the reversed axis, read backwards, is descending with
        # ties in increasing original index.
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(kk), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64, copy=False)


def gather_elements(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    """out[i][j][k] = data[i][indices[i][j][k]][k] (for axis 1), negative indices allowed."""
    axis %= data.ndim
    idx = _wrap(indices, data.shape[axis])
    _check_range(idx, data.shape[axis], "GatherElements index")
    return np.take_along_axis(data, idx, axis=axis)


def _nd_locations(data_shape: tuple[int, ...], indices: np.ndarray, batch_dims: int) -> tuple[np.ndarray, ...]:
    """Index arrays into data reshaped to (B, *data.shape[b:]) for every indexed slice."""
    b = batch_dims
    m = indices.shape[-1]
    batch = int(np.prod(data_shape[:b], dtype=np.int64))
    idx = indices.reshape(batch, -1, m).astype(np.int64)
    dims = np.asarray(data_shape[b : b + m], dtype=np.int64)
    idx = _wrap(idx, dims)
    _check_range(idx, dims, "GatherND/ScatterND index")
    batch_ix = np.broadcast_to(np.arange(batch)[:, None], idx.shape[:2])
    return (batch_ix, *np.moveaxis(idx, -1, 0))


def gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int = 0) -> np.ndarray:
    """Slices of data picked by the index tuples in the last axis of ``indices``."""
    b = batch_dims
    m = indices.shape[-1]
    if b == 0 and 0 < m <= data.ndim and indices.dtype.kind in "iu":
        try:  # numpy wraps negative indices and checks the range itself: 37 us, not 170 (a transformer's mask)
            return data[tuple(np.moveaxis(indices, -1, 0))]
        except IndexError:
            raise IndexError("GatherND/ScatterND index out of range") from None
    out_shape = indices.shape[:-1] + data.shape[b + m :]
    flat = data.reshape((int(np.prod(data.shape[:b], dtype=np.int64)),) + data.shape[b:])
    return flat[_nd_locations(data.shape, indices, b)].reshape(out_shape)


def scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str = "none") -> np.ndarray:
    """A copy of data with the slices at the index tuples replaced (or reduced) by updates."""
    m = indices.shape[-1]
    out = data.copy()
    view = out.reshape((1,) + data.shape)
    loc = _nd_locations(data.shape, indices, 0)
    upd = updates.reshape((1, -1) + data.shape[m:])
    if reduction == "none":
        view[loc] = upd
    else:
        _REDUCTIONS[reduction].at(view, loc, upd)
    return out


def scatter_elements(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int = 0, reduction: str = "none"
) -> np.ndarray:
    """A copy of data with data[..., indices[i, j], ...] = updates[i, j] along ``axis``."""
    axis %= data.ndim
    idx = _wrap(indices, data.shape[axis])
    _check_range(idx, data.shape[axis], "ScatterElements index")
    out = data.copy()
    # indices may be smaller than data along the other axes, so index with open grids
    loc: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
    loc[axis] = idx
    if reduction == "none":
        out[tuple(loc)] = updates
    else:
        _REDUCTIONS[reduction].at(out, tuple(loc), updates)
    return out


def one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, axis: int = -1) -> np.ndarray:
    """values[1] where the inserted ``axis`` equals the index, values[0] elsewhere.

    Indices in [-depth, -1] count from the end; others out of range give an all-off row.
    """
    d = int(np.asarray(depth).reshape(-1)[0])
    rank = indices.ndim + 1
    axis %= rank
    idx = indices.astype(np.int64) if indices.dtype.kind in "iub" else np.trunc(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + d, idx)
    shape = [1] * rank
    shape[axis] = d
    hit = np.expand_dims(idx, axis) == np.arange(d).reshape(shape)
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    return np.where(hit, on, off).astype(values.dtype, copy=False)


def tile(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """x repeated ``repeats[i]`` times along each axis i."""
    reps = [int(r) for r in np.asarray(repeats).reshape(-1)]
    if len(reps) != x.ndim:
        raise ValueError(f"repeats has {len(reps)} values for a rank-{x.ndim} input")
    return np.tile(x, reps)


def trilu(x: np.ndarray, k: np.ndarray | None = None, upper: int = 1) -> np.ndarray:
    """The upper (or lower) triangle of the last two dimensions, from diagonal k."""
    kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, kk) if upper else np.tril(x, kk)


def compress(x: np.ndarray, condition: np.ndarray, axis: int | None = None) -> np.ndarray:
    """The slices along ``axis`` (or elements of the flattened input) where condition holds."""
    cond = condition.astype(bool, copy=False).reshape(-1)
    if axis is None:
        return np.compress(cond, x.reshape(-1))
    axis %= x.ndim
    if cond.size > x.shape[axis]:
        raise ValueError(f"condition has {cond.size} values for an axis of size {x.shape[axis]}")
    return np.compress(cond, x, axis=axis)


def nonzero(x: np.ndarray) -> np.ndarray:
    """The indices of the non-zero elements, one row per dimension, as int64."""
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def unique(x: np.ndarray, axis: int | None = None, sorted: int = 1) -> tuple[np.ndarray, ...]:
    """Unique values (or slices along ``axis``), first indices, inverse indices and counts.

    With ``sorted=0`` the unique values come in the order of their first occurrence.
    """
    if axis is not None:
        axis %= x.ndim
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as64 = [a.astype(np.int64, copy=False) for a in (first, inverse, counts)]
    return (y, *as64)


def reverse_sequence(x: np.ndarray, sequence_lens: np.ndarray, batch_axis: int = 1, time_axis: int = 0) -> np.ndarray:
    """Each batch entry b with its first sequence_lens[b] time steps reversed."""
    lens = sequence_lens.astype(np.int64).reshape(-1)
    steps = x.shape[time_axis]
    t = np.arange(steps)[None, :]
    src = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)  # (batch, time)
    if batch_axis > time_axis:
        src = src.T
    shape = [1] * x.ndim
    shape[batch_axis], shape[time_axis] = x.shape[batch_axis], steps
    idx = np.broadcast_to(src.reshape(shape), x.shape)
    return np.take_along_axis(x, idx, axis=time_axis)


def tensor_scatter(
    past: np.ndarray, update: np.ndarray, write_indices: np.ndarray | None = None, mode: str = "linear", axis: int = -2
) -> np.ndarray:
    """The cache with ``update`` written along ``axis`` from each batch entry's write index."""
    axis %= past.ndim
    if axis == 0:
        raise ValueError("TensorScatter axis must not be the batch axis 0")
    max_len, seq = past.shape[axis], update.shape[axis]
    start = np.zeros(past.shape[0], np.int64) if write_indices is None else write_indices.astype(np.int64).reshape(-1)
    pos = start[:, None] + np.arange(seq)[None, :]  # (batch, seq)
    if mode == "circular":
        pos %= max_len
    _check_range(pos, max_len, "TensorScatter write position")
    shape = [1] * past.ndim
    shape[0], shape[axis] = past.shape[0], seq
    idx = np.broadcast_to(pos.reshape(shape), update.shape)
    out = past.copy()
    np.put_along_axis(out, idx, update, axis=axis)
    return out
