"""Pooling and reduction algorithms the tuner chooses among: layouts and separability.

The references are ``conv.build_max_pool`` / ``build_average_pool`` / ``build_global_pool``
and ``reduce.build_reduce``.

- ``maxpool_taps`` / ``avgpool_taps``: one pass per kernel tap (k_h·k_w of them) reduced
  into the output; the references pass over rows then columns (k_h + k_w passes, one
  temporary), which small windows may not repay.
- ``pool_native`` (MaxPool with Indices too, AveragePool): float32 in C (``csrc/pool.c``),
  over the (image, channel) planes in two halves on an idle core; offered only with the
  compiled tier loaded (a stored choice without it binds the numpy kernels).
- ``globalmax_native``: GlobalMaxPool as ``pool_native`` with the plane as the window.
- ``globalpool_rows``: global pooling as a reduction over contiguous rows (N·C, H·W).
- ``globalavg_gemv``: global average pooling as one matrix-vector product (BLAS).
- ``reduce_rows``: the reduced axes moved last in one contiguous copy, then a row reduction.
- ``reduce_stepwise``: one axis at a time, innermost first.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import native
from aioge.kernels.contract import KernelImpl, RunFn, is_constant
from aioge.kernels.conv import build_max_pool, window_geometry
from aioge.kernels.parallel import split_native
from aioge.kernels.reduce import REDUCERS, build_reduce, reduce_axes

__all__ = ["GLOBAL_AVG_ALGOS", "GLOBAL_MAX_ALGOS", "POOL_AVG_ALGOS", "POOL_MAX_ALGOS", "reduce_algos"]

Descs = Sequence[TensorDesc | None]
_FLOATS = ("float16", "float32", "float64")


class _PoolGeometry:
    __slots__ = ("kernel", "strides", "dilations", "begin", "end", "pad_end", "out", "spatial")

    def __init__(self, attrs: Mapping[str, Any], shape: Sequence[int]) -> None:
        self.kernel = [int(k) for k in attrs["kernel_shape"]]
        n = len(self.kernel)
        self.strides = list(attrs.get("strides") or [1] * n)
        self.dilations = list(attrs.get("dilations") or [1] * n)
        pads = list(attrs.get("pads") or [0] * (2 * n))
        self.spatial = [int(d) for d in shape[2:]]
        self.begin, self.pad_end, self.out = window_geometry(
            self.spatial,
            self.kernel,
            self.strides,
            self.dilations,
            pads,
            attrs.get("auto_pad", "NOTSET"),
            bool(attrs.get("ceil_mode", 0)),
        )
        # ceil_mode windows may overhang the end padding: grow it so every window fits.
        self.end = [
            max(
                self.pad_end[i],
                (self.out[i] - 1) * self.strides[i]
                + self.dilations[i] * (self.kernel[i] - 1)
                + 1
                - self.spatial[i]
                - self.begin[i],
            )
            for i in range(n)
        ]

    def counts(self, include_pad: bool) -> np.ndarray:
        """Cells of each window inside the input (or input + pads) as an (OH, OW) array."""
        count = np.ones((), dtype=np.int64)
        for i in range(len(self.spatial)):
            lo, hi = (-self.begin[i], self.spatial[i] + self.pad_end[i]) if include_pad else (0, self.spatial[i])
            pos = (
                np.arange(self.out[i])[:, None] * self.strides[i]
                - self.begin[i]
                + np.arange(self.kernel[i])[None, :] * self.dilations[i]
            )
            count = np.multiply.outer(count, ((pos >= lo) & (pos < hi)).sum(axis=1))
        return np.maximum(count, 1)


def _pool2d(descs: Descs, attrs: Mapping[str, Any], storage: bool = False) -> _PoolGeometry | None:
    if not descs or descs[0] is None or not descs[0].static or descs[0].rank != 4 or descs[0].dtype not in _FLOATS:
        return None
    if (
        "kernel_shape" not in attrs
        or len(attrs["kernel_shape"]) != 2
        or (int(attrs.get("storage_order", 0) or 0) and not storage)
    ):
        return None
    try:
        return _PoolGeometry(attrs, descs[0].shape)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None


def _padded(x: np.ndarray, g: _PoolGeometry, fill: float) -> np.ndarray:
    if not any(g.begin) and not any(g.end):
        return x
    return np.pad(x, ((0, 0), (0, 0), (g.begin[0], g.end[0]), (g.begin[1], g.end[1])), constant_values=fill)


def _with_indices(outs: Any) -> bool:
    # ``applies`` cannot see how many outputs a node has: with MaxPool's Indices output these
    # variants are the reference kernel (which tracks where each maximum came from).
    return outs is not None and len(outs) > 1


def _taps(reduce: Callable[..., Any], fill_of: Callable[[np.dtype], float], average: bool) -> Callable[..., RunFn]:
    """A pool as one pass per kernel tap over strided views, reduced into the output (the
    reference passes over rows, then columns; for small windows one pass per tap may win)."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
        if _with_indices(outs):
            return build_max_pool(attrs, params, ins, outs)
        g = _pool2d(ins, attrs)
        if g is None:
            raise ValueError("a tap-loop pool needs a static 2-D float input")
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = g.kernel, g.strides, g.dilations, g.out
        counts = g.counts(bool(attrs.get("count_include_pad", 0))) if average else None

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            xp = _padded(x, g, fill_of(x.dtype))
            y = np.empty((*x.shape[:2], oh, ow), x.dtype) if outputs is None else outputs[0]
            for i in range(kh):
                for j in range(kw):
                    r0, c0 = i * dh, j * dw
                    tap = xp[:, :, r0 : r0 + (oh - 1) * sh + 1 : sh, c0 : c0 + (ow - 1) * sw + 1 : sw]
                    if i == j == 0:
                        np.copyto(y, tap)
                    else:
                        reduce(y, tap, out=y)
            if counts is not None:
                np.divide(y, counts.astype(x.dtype), out=y)
            return (y,)

        return run

    return build


def _lowest(dtype: np.dtype) -> float:
    return -np.inf


def _zero(dtype: np.dtype) -> float:
    return 0.0


def _applies_pool(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _pool2d(descs, attrs) is not None


# A compiled pool over fewer input values than this runs whole: the C helper takes a job in
# about a microsecond while it spins, and a 2x2 max pool reads about 5 values a nanosecond.
_NATIVE_SPLIT_VALUES = 1 << 16


def _native_pool(average: bool) -> Callable[..., RunFn]:
    fallback = _taps(np.add, _zero, True) if average else _taps(np.maximum, _lowest, False)

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
        """A 2-D pool in C (``csrc/pool.c``) over the planes, separably per output row (the
        window's rows, then its columns; AVX2 where the CPU has it), MaxPool's Indices window by
        window; the planes shared with the C helper on an idle core. The numpy kernels without
        the compiled tier."""
        par, g = native.par_run(), _pool2d(ins, attrs, storage=True)
        if par is None or g is None or ins[0].dtype != "float32":  # type: ignore[union-attr]
            return build_max_pool(attrs, params, ins, outs) if _with_indices(outs) else fallback(attrs, params, ins, outs)
        n, c, h, w = (int(d) for d in ins[0].shape)  # type: ignore[union-attr]
        flags = (int(average), int(bool(attrs.get("count_include_pad", 0))), int(attrs.get("storage_order", 0) or 0))
        geometry = np.array([h, w, *g.kernel, *g.strides, *g.dilations, *g.begin, *g.pad_end, *g.out, *flags], np.int64)
        return _pool_job(par, geometry, n * c, (n, c, *g.out), _with_indices(outs))

    return build


def _pool_job(par: Any, geometry: np.ndarray, planes: int, out_shape: tuple[int, ...], indices: bool) -> RunFn:
    """The run (and native form) of JOB_POOL over ``planes`` planes with ``geometry``."""
    geo = native.ptr(geometry)  # the array is kept alive by the closures
    worth = planes * int(geometry[0] * geometry[1]) >= _NATIVE_SPLIT_VALUES

    def args(x: np.ndarray, y: np.ndarray, ind: np.ndarray | None) -> np.ndarray:
        return np.array(
            [native.ptr(x), native.ptr(y), geo, 0 if ind is None else native.ptr(ind), planes, x.size, y.size], np.int64
        )

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = np.ascontiguousarray(inputs[0], np.float32)
        fresh: list[np.ndarray] = [np.empty(out_shape, np.float32), np.empty(out_shape, np.int64)]
        given: list[np.ndarray] = list(outputs or ())[: 1 + indices] or fresh[: 1 + indices]
        # the outputs themselves when the C job can write them in place, else a buffer copied out
        work = [
            a if a.flags.c_contiguous and a.dtype == t else np.empty(out_shape, t) for a, t in zip(given, (np.float32, np.int64))
        ]
        block = args(x, work[0], work[1] if indices else None)  # held: the C job reads it (a temporary was freed first)
        split_native(par, native.JOB_POOL, native.ptr(block), planes, worth=worth)
        for a, w in zip(given, work):
            if a is not w:
                np.copyto(a, w)
        return tuple(given)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x, y = inputs[0], outputs[0]
        if indices or not native.f32c(x, y):
            return None
        return [native.NativeCall(native.JOB_POOL, args(x, y, None), planes, worth, (x, y, geometry))]

    return native.with_native(run, form)


def _applies_native_pool(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _pool2d(descs, attrs, storage=True) is not None and descs[0].dtype == "float32"  # type: ignore[union-attr]


# The compiled kernels first: tried (and preferred within the tuner's margin) before the numpy ones.
POOL_MAX_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl(
        "pool_native",
        _native_pool(False),
        _applies_native_pool,
        offered=native.available,
        eager=True,
        native=True,
    ),
    KernelImpl("maxpool_taps", _taps(np.maximum, _lowest, False), _applies_pool),
)
POOL_AVG_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl(
        "pool_native",
        _native_pool(True),
        _applies_native_pool,
        offered=native.available,
        eager=True,
        native=True,
    ),
    KernelImpl("avgpool_taps", _taps(np.add, _zero, True), _applies_pool),
)


# -- global pooling ------------------------------------------------------------------------------


def _global(reduce: str) -> Callable[..., RunFn]:
    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            rows = x.reshape(x.shape[0] * x.shape[1], -1)
            y = np.empty((*x.shape[:2], *([1] * (x.ndim - 2))), x.dtype) if outputs is None else outputs[0]
            flat = y.reshape(-1)
            if reduce == "mean":
                np.mean(rows, axis=1, out=flat)
            else:
                np.max(rows, axis=1, out=flat)
            return (y,)

        return run

    return build


def build_globalavg_gemv(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """GlobalAveragePool as (N·C, H·W) @ ones(H·W) / (H·W)."""
    x_desc = ins[0]
    assert x_desc is not None and x_desc.shape is not None  # this algo applies to static shapes only
    hw = int(np.prod([int(d) for d in x_desc.shape[2:]]))
    ones = np.full(hw, 1.0 / hw, dtype=np.dtype(x_desc.dtype))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        y = np.empty((*x.shape[:2], *([1] * (x.ndim - 2))), x.dtype) if outputs is None else outputs[0]
        np.matmul(x.reshape(x.shape[0] * x.shape[1], hw), ones, out=y.reshape(-1))
        return (y,)

    return run


def _applies_global(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    d = descs[0] if descs else None
    return d is not None and d.static and (d.rank or 0) >= 3 and d.dtype in _FLOATS


def build_globalavg_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """float32 GlobalAveragePool in C: each plane summed in order over eight accumulators,
    times 1/(H·W); planes shared with the C helper on an idle core from
    ``_NATIVE_SPLIT_VALUES``. A native program's step too (``native.with_native``). Without
    the compiled tier, ``globalpool_rows``."""
    x_desc = ins[0]
    assert x_desc is not None and x_desc.shape is not None  # static shapes only
    shape = tuple(int(d) for d in x_desc.shape)
    planes, hw = shape[0] * shape[1], int(np.prod(shape[2:], dtype=np.int64))
    out_shape = (*shape[:2], *([1] * (len(shape) - 2)))
    par, worth = native.par_run(), planes * hw >= _NATIVE_SPLIT_VALUES
    if par is None:  # a choice stored where the compiled tier was, read where it is not
        return _global("mean")(attrs, params, ins, outs)

    def call(x: np.ndarray, y: np.ndarray) -> native.NativeCall:
        return native.NativeCall(
            native.JOB_GLOBAL_MEAN, np.array([native.ptr(x), native.ptr(y), hw], np.int64), planes, worth, (x, y)
        )

    # id(y) -> (x, y, the call): a context's arena views are found once. Entries are replaced
    # whole, so concurrent runs never see another's.
    bound: dict[int, tuple[Any, ...]] = {}

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        y = np.empty(out_shape, np.float32) if outputs is None else outputs[0]
        e = bound.get(id(y))
        if e is None or e[0] is not x or e[1] is not y:
            if not native.f32c(x, y):
                yc = y if native.f32c(y) else np.empty(out_shape, np.float32)
                once = call(np.ascontiguousarray(x, np.float32), yc)  # held: the job reads its block
                split_native(par, once.job, once.addr, planes, worth=worth)
                if yc is not y:
                    np.copyto(y, yc)
                return (y,)
            if len(bound) >= 8:
                bound.clear()
            e = bound[id(y)] = (x, y, call(x, y))
        split_native(par, native.JOB_GLOBAL_MEAN, e[2].addr, planes, worth=worth)
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x, y = inputs[0], outputs[0]
        return [call(x, y)] if native.f32c(x, y) else None

    return native.with_native(run, form)


def _applies_global_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _applies_global(descs, attrs) and descs[0].dtype == "float32"  # type: ignore[union-attr]


GLOBAL_AVG_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl(
        "globalavg_native", build_globalavg_native, _applies_global_native, offered=native.available, eager=True, native=True
    ),
    KernelImpl("globalpool_rows", _global("mean"), _applies_global),
    KernelImpl("globalavg_gemv", build_globalavg_gemv, _applies_global),
)


def build_globalmax_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """float32 GlobalMaxPool of (N, C, H, W) in C: JOB_POOL with the plane as its window
    (the rows maxed into one, then its columns). ``globalpool_rows`` without the tier."""
    if (par := native.par_run()) is None:
        return _global("max")(attrs, params, ins, outs)
    n, c, h, w = (int(d) for d in ins[0].shape)  # type: ignore[union-attr]
    return _pool_job(par, np.array([h, w, h, w, *[1] * 4, *[0] * 4, 1, 1, 0, 0, 0], np.int64), n * c, (n, c, 1, 1), False)


GLOBAL_MAX_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl(
        "globalmax_native",
        build_globalmax_native,
        lambda d, a: _applies_global(d, a) and d[0].rank == 4 and d[0].dtype == "float32" and all(d[0].shape[2:]),  # type: ignore[union-attr, index]
        offered=native.available,
        eager=True,
        native=True,
    ),
    KernelImpl("globalpool_rows", _global("max"), _applies_global),
)


# -- reductions ----------------------------------------------------------------------------------


def _reduce_build(reducer: str, strategy: str) -> Callable[..., RunFn]:
    fn = REDUCERS[reducer]

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
        keepdims = bool(attrs.get("keepdims", 1))
        noop = bool(attrs.get("noop_with_empty_axes", 0))
        reference = build_reduce(reducer)(attrs, params, ins, outs)  # for no-op and empty reductions

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            given = inputs[1] if len(inputs) > 1 else None
            axes = reduce_axes(x.ndim, None if given is None else [int(a) for a in np.asarray(given).reshape(-1)], noop)
            if axes is None or x.size == 0:
                return reference(inputs, outputs)  # nothing to lay out: no-op or identity fill
            kept = [i for i in range(x.ndim) if i not in axes]
            out_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
            if strategy == "rows":
                moved = np.ascontiguousarray(x.transpose(*kept, *axes)).reshape(-1, int(np.prod([x.shape[a] for a in axes])))
                res = fn(moved, axis=1)
            else:
                res = x
                for a in sorted(axes, reverse=True):
                    res = fn(res, axis=a)
            y = np.empty(out_shape, x.dtype) if outputs is None else outputs[0]
            np.copyto(y, np.asarray(res).reshape(out_shape), casting="unsafe")
            return (y,)

        return run

    return build


def build_reduce_mean_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """float32 ReduceMean (ShuffleNet's head, T5's and Llama's RMSNorm, Keras' NHWC global pool):
    ``globalavg_native``'s C job over (kept, reduced) rows, the reduced axes moved last first by a
    strided copy when they are not. A native program's step too."""
    other = _reduce_build("mean", "stepwise")(attrs, params, ins, outs)
    if native.par_run() is None:  # a choice stored where the compiled tier was, read where it is not
        return other
    x_desc, noop, keep = ins[0], bool(attrs.get("noop_with_empty_axes", 0)), int(attrs.get("keepdims", 1))
    assert x_desc is not None and x_desc.shape is not None  # static shapes only
    shape = tuple(int(d) for d in x_desc.shape)
    pools: dict[tuple[int, ...], tuple[RunFn, tuple[int, ...] | None]] = {}  # axes -> (job, perm moving them last)

    def reduced(inputs: Sequence[Any]) -> tuple[int, ...]:
        given = inputs[1] if len(inputs) > 1 and inputs[1] is not None else attrs.get("axes")
        try:
            axes = reduce_axes(len(shape), None if given is None else [int(a) for a in np.asarray(given).reshape(-1)], noop)
        except ValueError:
            return ()
        return tuple(axes) if axes and len(axes) < len(shape) else ()

    def pool(axes: tuple[int, ...]) -> tuple[RunFn, tuple[int, ...] | None]:
        if axes not in pools:
            perm = tuple(i for i in range(len(shape)) if i not in axes) + axes
            n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
            rows = (int(np.prod(shape, dtype=np.int64)) // n, 1, n)
            job = build_globalavg_native(attrs, params, (replace(x_desc, shape=rows), *ins[1:]), outs)
            pools[axes] = (job, None if perm == tuple(sorted(perm)) else perm)
        return pools[axes]

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        axes = reduced(inputs)
        if not axes or (outputs is not None and not native.f32c(outputs[0])):
            return other(inputs, outputs)
        job, perm = pool(axes)
        x = inputs[0] if perm is None else np.ascontiguousarray(inputs[0].transpose(perm))
        y = job((x, *inputs[1:]), outputs)[0]  # (kept, 1, 1): the output's shape from the axes fed
        out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
        return (y if outputs is not None else y.reshape(out),)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        axes = reduced(inputs) if all(is_constant(a) for a in inputs[1:] if a is not None) else ()
        job, perm = pool(axes) if axes else (None, None)
        pool_form = native.native_form(job) if job is not None else None
        if pool_form is None or perm is None:
            return None if pool_form is None else pool_form(inputs, outputs)
        buf = np.empty([shape[p] for p in perm], np.float32)  # the program's own
        copy = native.strided_copy(inputs[0].transpose(perm), buf)
        calls = pool_form((buf, *inputs[1:]), outputs)
        return None if copy is None or calls is None else [copy, *calls]

    return native.with_native(run, form)


def _applies_reduce_mean_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    d = descs[0] if descs else None
    return (
        d is not None and d.static and (d.rank or 0) >= 2 and d.dtype == "float32" and all(d.shape)  # type: ignore[arg-type]
    )


def _applies_reduce(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    d = descs[0] if descs else None
    return d is not None and d.static and (d.rank or 0) >= 2 and d.dtype in _FLOATS


def reduce_algos(reducer: str) -> tuple[KernelImpl, ...]:
    """The tunable alternatives of one reduction (``REDUCERS`` name: sum, mean, max, min, prod)."""
    return (
        KernelImpl("reduce_rows", _reduce_build(reducer, "rows"), _applies_reduce),
        KernelImpl("reduce_stepwise", _reduce_build(reducer, "stepwise"), _applies_reduce),
        *(
            (
                KernelImpl(
                    "reduce_mean_native",
                    build_reduce_mean_native,
                    _applies_reduce_mean_native,
                    offered=native.available,
                    eager=True,
                    native=True,
                ),
            )
            if reducer == "mean"
            else ()
        ),
    )
