"""Windowed kernels: convolution (im2col + one batched matmul, or a loop over kernel taps)
and max / average pooling (separable: one strided pass per kernel row, column, ...).

The loops here run over kernel taps (at most a few dozen) or never; each step is one numpy
call over whole tensors. ``window_geometry`` is shared with shape inference, so the shapes a
kernel produces are the shapes inference promised.
"""

from __future__ import annotations

import itertools
from functools import partial
from typing import Any, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from aioge.kernels.contract import RunFn
from aioge.kernels.parallel import SPLIT_MACS, split_range

__all__ = [
    "build_average_pool",
    "build_conv_im2col",
    "build_conv_taps",
    "build_global_pool",
    "build_max_pool",
    "window_geometry",
]


def window_geometry(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    auto_pad: str,
    ceil_mode: bool = False,
) -> tuple[list[int], list[int], list[int]]:
    """Return ``(pads_begin, pads_end, out_spatial)`` of a sliding window, as ONNX defines it.

    ``pads`` is ONNX's ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`` (used for NOTSET).
    With ``ceil_mode`` a last window that would start in the end padding is dropped. As in
    the spec's formula, an input one stride short of the dilated kernel gives size 0.

    Raises:
        ValueError: the (padded) input is smaller than the dilated kernel by a stride or more.
    """
    n = len(spatial)
    begin: list[int] = []
    end: list[int] = []
    out: list[int] = []
    for i in range(n):
        size, s = spatial[i], strides[i]
        span = dilations[i] * (kernel[i] - 1) + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = max(0, (o - 1) * s + span - size)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            e = total - b
        else:
            b, e = (pads[i], pads[i + n]) if auto_pad == "NOTSET" else (0, 0)
            room = size + b + e - span
            o = (-(-room // s) if ceil_mode else room // s) + 1
            if ceil_mode and o > 0 and (o - 1) * s >= size + b:
                o -= 1
            if o < 0:
                raise ValueError(f"spatial axis {i}: input {size} + pads ({b}, {e}) is smaller than the dilated kernel {span}")
        begin.append(b)
        end.append(e)
        out.append(o)
    return begin, end, out


def _window_attrs(attrs: Mapping[str, Any], kernel: Sequence[int]) -> tuple[list[int], list[int], list[int], str]:
    n = len(kernel)
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    pads = list(attrs.get("pads") or [0] * (2 * n))
    return strides, dilations, pads, attrs.get("auto_pad", "NOTSET")


def _padded(x: np.ndarray, begin: Sequence[int], end: Sequence[int], fill: Any) -> np.ndarray:
    """x with its spatial axes (all but the first two) padded by ``fill``, or x itself."""
    if not any(begin) and not any(end):
        return x
    # np.pad is several times slower than filling a new array and copying the interior in
    shape = (*x.shape[:2], *(n + b + e for n, b, e in zip(x.shape[2:], begin, end)))
    xp = np.full(shape, fill, dtype=x.dtype)
    xp[(slice(None), slice(None), *(slice(b, b + n) for b, n in zip(begin, x.shape[2:])))] = x
    return xp


def _extend(
    begin: Sequence[int],
    end: Sequence[int],
    spatial: Sequence[int],
    out: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """End padding grown so every output window fits (ceil_mode windows may overhang it)."""
    grown = []
    for i in range(len(spatial)):
        need = (out[i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1
        grown.append(max(end[i], need - spatial[i] - begin[i]))
    return grown


def _tap(xp: np.ndarray, offset: Sequence[int], strides: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """The strided view of xp that one kernel tap reads for every output position."""
    index = (slice(None), slice(None), *(slice(o, o + (n - 1) * s + 1, s) for o, s, n in zip(offset, strides, out)))
    return xp[index]


def _taps(kernel: Sequence[int], dilations: Sequence[int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(kernel index, input offset) of every kernel tap."""
    return [(idx, tuple(i * d for i, d in zip(idx, dilations))) for idx in itertools.product(*(range(k) for k in kernel))]


# -- convolution ----------------------------------------------------------------------------


class _ConvPlan:
    """The geometry of one Conv call, computed from the input shapes at run time."""

    __slots__ = ("n", "c", "m", "group", "kernel", "strides", "dilations", "begin", "end", "out")

    def __init__(self, attrs: Mapping[str, Any], x: np.ndarray, w: np.ndarray) -> None:
        self.n, self.c = x.shape[0], x.shape[1]
        self.m = w.shape[0]
        self.group = int(attrs.get("group", 1))
        self.kernel = list(w.shape[2:])
        self.strides, self.dilations, pads, auto_pad = _window_attrs(attrs, self.kernel)
        self.begin, self.end, self.out = window_geometry(x.shape[2:], self.kernel, self.strides, self.dilations, pads, auto_pad)


def _conv_output(plan: _ConvPlan, outputs: Sequence[np.ndarray] | None, dtype: np.dtype) -> np.ndarray:
    if outputs is not None:
        return outputs[0]
    return np.empty((plan.n, plan.m, *plan.out), dtype=dtype)


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> None:
    if b is not None:
        y += b.reshape(-1, *([1] * (y.ndim - 2)))


def build_conv_im2col(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Conv as one batched matmul over all groups: W (G, M/G, C/G*k) @ cols (N, G, C/G*k, O).

    The im2col matrix is a copy of a strided window view; a 1x1 kernel with unit strides and
    no padding needs no copy at all.
    """

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        plan = _ConvPlan(attrs, x, w)
        y = _conv_output(plan, outputs, x.dtype)
        if y.size == 0:
            return (y,)
        g = plan.group
        cg, mg = plan.c // g, plan.m // g
        taps = int(np.prod(plan.kernel, dtype=np.int64))
        opos = int(np.prod(plan.out, dtype=np.int64))
        xp = _padded(x, plan.begin, plan.end, 0)
        if g == 1 and len(plan.kernel) == 2 and y.flags.c_contiguous and opos * plan.m * plan.c * taps >= SPLIT_MACS:
            wm2 = w.reshape(plan.m, plan.c * taps)
            for i in range(plan.n):
                split_range(plan.out[0], partial(_im2col_rows_gemm, xp[i], wm2, plan, y[i]))
            _add_bias(y, b)
            return (y,)
        cols = _im2col(xp, plan)  # (N, C, k..., O...)
        cols = cols.reshape(plan.n, g, cg * taps, opos)
        wm = w.reshape(g, mg, cg * taps)
        if y.flags.c_contiguous:
            np.matmul(wm, cols, out=y.reshape(plan.n, g, mg, opos))
        else:
            np.copyto(y, np.matmul(wm, cols).reshape(y.shape))
        _add_bias(y, b)
        return (y,)

    return run


def _im2col_rows_gemm(xp: np.ndarray, wm: np.ndarray, plan: _ConvPlan, y: np.ndarray, r0: int, r1: int) -> None:
    """Output rows [r0, r1) of one image of a 2-D, 1-group conv: their own im2col and GEMM.

    ``xp`` (C, H, W) is the padded image, ``wm`` (M, C·kh·kw), ``y`` (M, OH, OW) contiguous.
    """
    (kh, kw), (sh, sw), (dh, dw), ow = plan.kernel, plan.strides, plan.dilations, plan.out[1]
    rows = r1 - r0
    st = xp.strides
    sub = xp[:, r0 * sh :]
    view = as_strided(sub, (plan.c, kh, kw, rows, ow), (st[0], st[1] * dh, st[2] * dw, st[1] * sh, st[2] * sw), writeable=False)
    cols = np.ascontiguousarray(view).reshape(plan.c * kh * kw, rows * ow)
    if rows == plan.out[0]:
        np.matmul(wm, cols, out=y.reshape(plan.m, rows * ow))
    else:
        np.copyto(y[:, r0:r1], np.matmul(wm, cols).reshape(plan.m, rows, ow))


def _im2col(xp: np.ndarray, plan: _ConvPlan) -> np.ndarray:
    """(N, C, k1.., O1..): the window view, copied to a contiguous array unless it is one already."""
    d = len(plan.kernel)
    if all(k == 1 for k in plan.kernel) and all(s == 1 for s in plan.strides):
        return xp.reshape(plan.n, plan.c, *([1] * d), *plan.out)
    st = xp.strides
    shape = (plan.n, plan.c, *plan.kernel, *plan.out)
    strides = (
        st[0],
        st[1],
        *(st[2 + i] * plan.dilations[i] for i in range(d)),
        *(st[2 + i] * plan.strides[i] for i in range(d)),
    )
    view = as_strided(xp, shape=shape, strides=strides, writeable=False)
    return np.ascontiguousarray(view)


def build_conv_taps(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Conv as a sum over kernel taps: no im2col workspace; depthwise convs become
    elementwise multiply-adds, other groups one batched matmul per tap."""

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        plan = _ConvPlan(attrs, x, w)
        y = _conv_output(plan, outputs, x.dtype)
        if y.size == 0:
            return (y,)
        g = plan.group
        cg, mg = plan.c // g, plan.m // g
        d = len(plan.kernel)
        xp = _padded(x, plan.begin, plan.end, 0)
        acc = y if y.flags.c_contiguous else np.empty(y.shape, y.dtype)
        yg = acc.reshape(plan.n, g, mg, *plan.out)
        acc.fill(0)
        ones = [1] * d
        scratch = np.empty_like(yg) if cg == 1 else None
        for idx, offset in _taps(plan.kernel, plan.dilations):
            xt = _tap(xp, offset, plan.strides, plan.out).reshape(plan.n, g, cg, *plan.out)
            wt = w[(slice(None), slice(None)) + idx].reshape(g, mg, cg)
            if cg == 1:
                # depthwise: y[n, g, j] += x[n, g] * w[g, j]
                np.multiply(xt, wt.reshape(g, mg, *ones), out=scratch)
                yg += scratch
            else:
                xt = np.ascontiguousarray(xt).reshape(plan.n, g, cg, -1)
                yg += np.matmul(wt, xt).reshape(yg.shape)
        if acc is not y:
            np.copyto(y, acc)
        _add_bias(y, b)
        return (y,)

    return run


# -- pooling --------------------------------------------------------------------------------


def _pool_plan(
    attrs: Mapping[str, Any], x: np.ndarray
) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
    kernel = list(attrs["kernel_shape"])
    strides, dilations, pads, auto_pad = _window_attrs(attrs, kernel)
    begin, end, out = window_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad, bool(attrs.get("ceil_mode", 0)))
    return kernel, strides, dilations, begin, end, out


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def build_max_pool(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """MaxPool: the maximum over each window of a -inf padded input, axis by axis; with a
    second output, a loop over kernel taps that also tracks where each maximum came from."""
    with_indices = len(outs) > 1
    column_major = bool(attrs.get("storage_order", 0))

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        kernel, strides, dilations, begin, end, out = _pool_plan(attrs, x)
        end = _extend(begin, end, x.shape[2:], out, kernel, strides, dilations)
        xp = _padded(x, begin, end, _lowest(x.dtype))
        y = np.empty((*x.shape[:2], *out), x.dtype) if outputs is None else outputs[0]
        if not with_indices:
            if y.size:
                _separable(np.maximum, xp, kernel, strides, dilations, out, y)
            return (y,)
        idx = np.empty(y.shape, np.int64) if outputs is None else outputs[1]
        if y.size:
            _max_and_argmax(x, xp, kernel, strides, dilations, begin, out, y, idx, column_major)
        return (y, idx)

    return run


def _max_and_argmax(
    x: np.ndarray,
    xp: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    out: Sequence[int],
    y: np.ndarray,
    idx: np.ndarray,
    column_major: bool,
) -> None:
    """y = window maxima, idx = ONNX's flat index of each into x (the first one on ties):
    (n * C + c) * prod(spatial) + the spatial offset, row-major or (storage_order 1) column-major."""
    spatial = x.shape[2:]
    d = len(spatial)
    size = int(np.prod(spatial, dtype=np.int64))
    order = list(reversed(range(d))) if column_major else list(range(d))
    elem = [0] * d
    step = 1
    for a in reversed(order):
        elem[a] = step
        step *= spatial[a]
    base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * size).reshape(x.shape[0], x.shape[1], *([1] * d))
    coords = [np.arange(out[a], dtype=np.int64) * strides[a] - begin[a] for a in range(d)]
    better = np.empty(y.shape, np.bool_)
    for t, (_, offset) in enumerate(_taps(kernel, dilations)):
        v = _tap(xp, offset, strides, out)
        flat = base
        for a in range(d):
            shape = [1] * (d + 2)
            shape[2 + a] = out[a]
            flat = flat + ((coords[a] + offset[a]) * elem[a]).reshape(shape)
        if t == 0:
            np.copyto(y, v)
            np.copyto(idx, flat)
            continue
        np.greater(v, y, out=better)
        np.copyto(y, v, where=better)
        np.copyto(idx, np.broadcast_to(flat, idx.shape), where=better)


def build_average_pool(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """AveragePool: the window sums of a zero padded input (axis by axis), divided by the number of
    window cells inside the input (or inside input + pads with ``count_include_pad``)."""
    include_pad = bool(attrs.get("count_include_pad", 0))

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        kernel, strides, dilations, begin, end, out = _pool_plan(attrs, x)
        spatial = x.shape[2:]
        grown = _extend(begin, end, spatial, out, kernel, strides, dilations)
        xp = _padded(x, begin, grown, 0)
        y = np.empty((*x.shape[:2], *out), x.dtype) if outputs is None else outputs[0]
        if y.size == 0:
            return (y,)
        _separable(np.add, xp, kernel, strides, dilations, out, y)
        count = _window_counts(spatial, kernel, strides, dilations, begin, end, out, include_pad)
        np.divide(y, count.astype(x.dtype), out=y)
        return (y,)

    return run


def _separable(
    ufunc: np.ufunc,
    xp: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
    y: np.ndarray,
) -> None:
    """Reduce every window of xp into y, one spatial axis at a time.

    Max and sum over a box are separable, so this costs sum(kernel) passes instead of
    prod(kernel), and the first passes step over whole rows (contiguous runs).
    """
    r = xp
    d = len(kernel)
    for ax in range(d):
        axis = 2 + ax
        shape = list(r.shape)
        shape[axis] = out[ax]
        target = y if ax == d - 1 else np.empty(shape, r.dtype)
        for j in range(kernel[ax]):
            index = [slice(None)] * r.ndim
            start = j * dilations[ax]
            index[axis] = slice(start, start + (out[ax] - 1) * strides[ax] + 1, strides[ax])
            part = r[tuple(index)]
            if j == 0:
                np.copyto(target, part)
            else:
                ufunc(target, part, out=target)
        r = target


def _window_counts(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    out: Sequence[int],
    include_pad: bool,
) -> np.ndarray:
    """How many cells of each output window are counted, as an array of shape ``out``."""
    count = np.ones((), dtype=np.int64)
    for i in range(len(spatial)):
        lo, hi = (-begin[i], spatial[i] + end[i]) if include_pad else (0, spatial[i])
        pos = np.arange(out[i])[:, None] * strides[i] - begin[i] + np.arange(kernel[i])[None, :] * dilations[i]
        axis = ((pos >= lo) & (pos < hi)).sum(axis=1)
        count = np.multiply.outer(count, axis)
    return np.maximum(count, 1)


def build_global_pool(reduce: str) -> Any:
    """GlobalAveragePool / GlobalMaxPool: a reduction over all spatial axes, keeping them as 1."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            axes = tuple(range(2, x.ndim))
            out = None if outputs is None else outputs[0]
            if reduce == "mean":
                y = np.mean(x, axis=axes, keepdims=True, out=out)
            else:
                y = np.max(x, axis=axes, keepdims=True, out=out)
            return (y,)

        return run

    return build
