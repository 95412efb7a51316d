"""Softmax and normalisation algorithms the tuner chooses among: fused (in place, ``out=``)
against unfused (temporaries), and row layouts. The references are ``nn.build_softmax``,
``nn.build_layer_norm`` and ``nn.build_batch_norm``.

- ``softmax_unfused``: ``exp(x - max) / sum`` with temporaries.
- ``softmax_rows``: the softmax axis made the last, contiguous one; in place in 2-D rows,
  multiplying by the reciprocal of the row sums instead of dividing.
- ``layernorm_fused``: statistics over contiguous rows, centring, scaling and shifting in the
  output buffer, the variance as a row dot product (no squared temporary).
- ``batchnorm_folded``: the per-channel scale and shift folded once for constant statistics.
- ``softmax_native``, ``logsoftmax_native``, ``layernorm_native``: float32 rows in one C loop
  each (``native_rows``); built in a process without the compiled tier (a kernel-cache entry
  from another machine), they run the numpy algorithm instead.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, native_rows
from aioge.kernels.contract import KernelImpl, RunFn, is_constant
from aioge.kernels.nn import build_batch_norm, build_layer_norm, build_log_softmax

__all__ = ["BATCHNORM_ALGOS", "LAYERNORM_ALGOS", "LOGSOFTMAX_ALGOS", "SOFTMAX_ALGOS"]

Descs = Sequence[TensorDesc | None]
_FLOATS = ("float16", "float32", "float64")


def _out(outputs: Sequence[np.ndarray] | None, shape: Sequence[int], dtype: Any) -> np.ndarray:
    return np.empty(tuple(shape), dtype) if outputs is None else outputs[0]


def _float_static(descs: Descs, rank: int = 1) -> bool:
    d = descs[0] if descs else None
    return d is not None and d.static and (d.rank or 0) >= rank and d.dtype in _FLOATS


# -- Softmax -------------------------------------------------------------------------------------


def build_softmax_unfused(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """Softmax the textbook way, with temporaries."""
    axis = int(attrs.get("axis", -1))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        y = _out(outputs, x.shape, x.dtype)
        np.copyto(y, e / e.sum(axis=axis, keepdims=True))
        return (y,)

    return run


def build_softmax_rows(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """Softmax over contiguous rows, in place, multiplying by reciprocal row sums."""
    shape = tuple(int(d) for d in ins[0].shape)  # type: ignore[union-attr]
    axis = int(attrs.get("axis", -1)) % len(shape)
    last = axis == len(shape) - 1

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        y = _out(outputs, shape, x.dtype)
        work = y if last and y.flags.c_contiguous else np.empty(np.moveaxis(x, axis, -1).shape, x.dtype)
        rows = work.reshape(-1, shape[axis])
        src = x.reshape(-1, shape[axis]) if last else np.moveaxis(x, axis, -1).reshape(-1, shape[axis])
        np.subtract(src, src.max(axis=1, keepdims=True), out=rows)
        np.exp(rows, out=rows)
        rows *= np.reciprocal(rows.sum(axis=1, keepdims=True))
        if work is not y:
            np.copyto(y, np.moveaxis(work, -1, axis))
        return (y,)

    return run


def _native_softmax(log: bool) -> Any:
    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
        """Softmax (LogSoftmax) over contiguous float32 last-axis rows in C; numpy otherwise.

        Below ``native_rows.SPLIT_ELEMENTS`` (no split over an idle core) the C function is
        called directly, with the operands' addresses kept per input: a classifier's
        (1, 10) Softmax took 5.4 us in numpy's kernel and 3.2 us through the general path,
        most of it finding the function and the addresses again."""
        fallback = (build_log_softmax if log else build_softmax_rows)(attrs, params, ins, outs)
        shape = tuple(int(d) for d in ins[0].shape)  # type: ignore[union-attr]
        width, rows = shape[-1], int(np.prod(shape[:-1], dtype=np.int64))
        fn = native_rows.softmax_function() if rows * width < native_rows.SPLIT_ELEMENTS else None

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            y = _out(outputs, shape, x.dtype)
            if y.flags.c_contiguous and native_rows.softmax(x.reshape(-1, width), y.reshape(-1, width), log):
                return (y,)
            return fallback(inputs, [y])

        def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
            x, y = inputs[0], outputs[0]
            if not native.f32c(x, y):
                return None
            args = np.array([native.ptr(x), native.ptr(y), width, int(log)], np.int64)
            worth = rows >= 2 and rows * width >= native_rows.SPLIT_ACTIVATION  # a program's split: par.c's helper
            return [native.NativeCall(native.JOB_SOFTMAX, args, rows, worth, (x, y))]

        if fn is None:
            return native.with_native(run, form) if native.available() else run
        # id(x) -> (x, y, their addresses): an arena view's address is found once; a fresh
        # output's (a graph output) each run. Entries are replaced whole, never changed, so
        # concurrent runs never see another's; holding the arrays keeps their ids.
        bound: dict[int, tuple[Any, ...]] = {}

        def direct(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            y = _out(outputs, shape, x.dtype)
            e = bound.get(id(x))
            if e is None or e[0] is not x or e[1] is not y:
                if not (x.dtype == np.float32 and x.flags.c_contiguous and y.flags.c_contiguous):
                    return run(inputs, [y])
                if len(bound) >= 8:
                    bound.clear()
                e = bound[id(x)] = (x, y, e[2] if e is not None and e[0] is x else native.ptr(x), native.ptr(y))
            fn(e[2], e[3], width, int(log), 0, rows)
            return (y,)

        return native.with_native(direct, form)

    return build


def _applies_softmax(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _float_static(descs) and descs[0].size > 0  # type: ignore[union-attr]


def _applies_native_softmax(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    # other axes, and other dtypes, are left to the numpy algorithms
    if not _applies_softmax(descs, attrs) or descs[0].dtype != "float32":  # type: ignore[union-attr]
        return False
    rank = descs[0].rank or 0  # type: ignore[union-attr]
    return int(attrs.get("axis", -1)) % rank == rank - 1


SOFTMAX_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl("softmax_unfused", build_softmax_unfused, _applies_softmax),
    KernelImpl("softmax_rows", build_softmax_rows, _applies_softmax),
    KernelImpl("softmax_native", _native_softmax(False), _applies_native_softmax, eager=True, native=True),
)
LOGSOFTMAX_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl("logsoftmax_native", _native_softmax(True), _applies_native_softmax, eager=True, native=True),
)


# -- LayerNormalization --------------------------------------------------------------------------


def build_layernorm_fused(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """LayerNorm over rows (prod(shape[:axis]), prod(shape[axis:])) in the output buffer."""
    if outs is not None and len(outs) > 1:
        return build_layer_norm(attrs, params, ins, outs)  # Mean and InvStdDev wanted: the reference computes them
    shape = tuple(int(d) for d in ins[0].shape)  # type: ignore[union-attr]
    axis = int(attrs.get("axis", -1)) % len(shape)
    eps = float(attrs.get("epsilon", 1e-5))
    width = int(np.prod(shape[axis:]))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        y = _out(outputs, shape, x.dtype)
        work = y if y.flags.c_contiguous else np.empty(shape, x.dtype)
        rows = work.reshape(-1, width)
        xr = x.reshape(-1, width)
        np.subtract(xr, xr.mean(axis=1, keepdims=True), out=rows)
        var = np.einsum("ij,ij->i", rows, rows) / width
        rows *= (1.0 / np.sqrt(var + eps)).astype(x.dtype, copy=False)[:, None]
        work *= scale
        if bias is not None:
            work += bias
        if work is not y:
            np.copyto(y, work)
        return (y,)

    return run


def _applies_layernorm(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    # float16 keeps its statistics in float32 (stash_type 1): the reference's way, not this one.
    return _float_static(descs) and descs[0].dtype in ("float32", "float64") and descs[0].size > 0  # type: ignore[union-attr]


def build_layernorm_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """LayerNorm of contiguous float32 rows in C, Mean and InvStdDev included; numpy when the
    compiled tier, the layout or the scale's shape does not allow it."""
    fallback = build_layernorm_fused(attrs, params, ins, outs)  # the reference's, with Mean and InvStdDev
    shape = tuple(int(d) for d in ins[0].shape)  # type: ignore[union-attr]
    axis = int(attrs.get("axis", -1)) % len(shape)
    eps = float(attrs.get("epsilon", 1e-5))
    stats = int(attrs.get("stash_type", 1)) == 1  # float32 statistics, as the C kernel keeps them
    width = int(np.prod(shape[axis:]))
    stat_shape = (*shape[:axis], *(1,) * (len(shape) - axis))
    n_out = 1 if outs is None else len(outs)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        ys = [_out(outputs, shape, x.dtype)]
        ys += [outputs[i] if outputs is not None else np.empty(stat_shape, np.float32) for i in range(1, n_out)]
        extra = [y.reshape(-1) for y in ys[1:]] + [None] * (3 - n_out)
        # a non-contiguous output would reshape to a copy: numpy writes through the view instead
        if (
            (n_out == 1 or stats)
            and all(y.flags.c_contiguous for y in ys)
            and native_rows.layer_norm(
                x.reshape(-1, width),
                scale.reshape(-1),
                None if bias is None else bias.reshape(-1),
                ys[0].reshape(-1, width),
                eps,
                *extra,
            )
        ):
            return ys
        return fallback(inputs, ys)

    rows = int(np.prod(shape[:axis], dtype=np.int64))
    eps_bits = int(np.array([eps], np.float32).view(np.int32)[0])

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        ops = [x, scale, outputs[0], *([] if bias is None else [bias])]
        if n_out != 1 or not native.f32c(*ops):
            return None
        if scale.size != width or (bias is not None and bias.size != width):
            return None
        bp = 0 if bias is None else native.ptr(bias)
        args = np.array([native.ptr(x), native.ptr(scale), bp, native.ptr(outputs[0]), 0, 0, width, eps_bits], np.int64)
        worth = rows >= 2 and rows * width >= native_rows.SPLIT_ACTIVATION  # a program's split: par.c's helper
        return [native.NativeCall(native.JOB_LAYERNORM, args, rows, worth, (x, scale, bias, outputs[0]))]

    fn = native_rows.layer_norm_function() if n_out == 1 and rows * width < native_rows.SPLIT_ELEMENTS else None
    if fn is None:
        return native.with_native(run, form) if native.available() else run
    # As the small Softmax: the C function called directly, the addresses kept per input (a
    # transformer's 32x128 LayerNorm at batch 1: 10 us through the general path); entries
    # replaced whole, holding their arrays.
    bound: dict[int, tuple[Any, ...]] = {}

    def direct(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        y = _out(outputs, shape, x.dtype)
        e = bound.get(id(x))
        if e is None or e[0] is not x or e[1] is not y or e[2] is not scale or e[3] is not bias:
            if not (
                all(a.dtype == np.float32 and a.flags.c_contiguous for a in (x, y, scale))
                and scale.size == width
                and (bias is None or (bias.dtype == np.float32 and bias.flags.c_contiguous and bias.size == width))
            ):
                return run(inputs, [y])
            if len(bound) >= 8:
                bound.clear()
            ptrs = (native.ptr(x), native.ptr(scale), 0 if bias is None else native.ptr(bias), native.ptr(y))
            e = bound[id(x)] = (x, y, scale, bias, ptrs)
        fn(*e[4], None, None, width, eps, 0, rows)
        return (y,)

    return native.with_native(direct, form)


def _applies_native_layernorm(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _applies_layernorm(descs, attrs) and descs[0].dtype == "float32"  # type: ignore[union-attr]


LAYERNORM_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl("layernorm_fused", build_layernorm_fused, _applies_layernorm),
    KernelImpl("layernorm_native", build_layernorm_native, _applies_native_layernorm, eager=True, native=True),
)


# -- BatchNormalization (inference) ----------------------------------------------------------------


def build_batchnorm_folded(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """y = x·a + b per channel, with (a, b) folded from the statistics once when they are constants."""
    if outs is not None and len(outs) > 1:
        return build_batch_norm(attrs, params, ins, outs)  # training outputs: the reference's job
    eps = float(attrs.get("epsilon", 1e-5))
    # The statistics of a graph are read-only constants: the same objects are the same values.
    folded: dict[str, Any] = {"key": None, "value": None, "refs": None}

    def fold(inputs: Sequence[np.ndarray], dtype: np.dtype, rank: int) -> tuple[np.ndarray, np.ndarray]:
        stats = inputs[1:5]
        key = tuple(id(s) for s in stats)
        if folded["key"] == key and all(is_constant(s) for s in stats):
            return folded["value"]
        scale, bias, mean, var = stats
        a = (scale / np.sqrt(var + np.asarray(eps, var.dtype))).astype(dtype, copy=False)
        b = (bias - mean * a).astype(dtype, copy=False)
        shape = (-1, *([1] * (rank - 2)))
        value = (a.reshape(shape), b.reshape(shape))
        folded["key"], folded["value"], folded["refs"] = key, value, stats
        return value

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        a, b = fold(inputs, x.dtype, x.ndim)
        y = _out(outputs, x.shape, x.dtype)
        np.multiply(x, a, out=y)
        y += b
        return (y,)

    return run


def _applies_batchnorm(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _float_static(descs, rank=2) and len(descs) >= 5 and not int(attrs.get("training_mode", 0) or 0)


BATCHNORM_ALGOS: tuple[KernelImpl, ...] = (KernelImpl("batchnorm_folded", build_batchnorm_folded, _applies_batchnorm),)
