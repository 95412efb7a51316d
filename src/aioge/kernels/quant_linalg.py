"""Integer matrix products and convolutions: MatMulInteger, QLinearMatMul, QGemm, ConvInteger,
QLinearConv and DynamicQuantizeMatMul (float in and out, its product in int8).

Zero points are subtracted in int32 and the product or convolution (im2col, its padding the
input's zero point) accumulates in int32 through one GEMM, ``qgemm``: the C tier's
(``csrc/qgemm.c``: B packed once per constant weight, int16 pairs and ``madd``, exact) or numpy's.
The QLinear forms requantise as onnxruntime's MLAS does, which the ONNX spec leaves to "higher
precision": the multiplier ``x_scale * w_scale / y_scale`` and ``float(acc) * multiplier`` in
float32, clamped, rounded half to even, plus the zero point; both tiers compute exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from aioge.kernels import native
from aioge.kernels.contract import RunFn, is_constant
from aioge.kernels.conv import _padded, _window_attrs, window_geometry
from aioge.kernels.convert import dynamic_quantize_linear, dynamic_quantize_params
from aioge.kernels.parallel import par_matmul, split_native

__all__ = [
    "build_qlinear",
    "matmul_integer",
    "pack",
    "qdq_add",
    "qgemm",
    "qlinear_add",
    "qlinear_global_average_pool",
    "qlinear_matmul",
    "requantise",
]

_MODES = {np.dtype(np.int32): 0, np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.float32): 3}


def requantise(acc: np.ndarray, mult: np.ndarray, zero: int, dtype: Any, lo: int | None = None) -> np.ndarray:
    """MLAS's requantisation of int32 ``acc``: float32 ``acc * mult`` clamped to the type's range
    less ``zero`` (from ``lo`` rather than the type's least value when given), rounded to
    nearest even, plus ``zero``."""
    info = np.iinfo(dtype)
    low = info.min if lo is None else max(info.min, lo)
    f = acc.astype(np.float32) * np.asarray(mult, np.float32)
    f = np.clip(f, np.float32(low - zero), np.float32(info.max - zero))
    return (np.rint(f).astype(np.int32) + zero).astype(dtype)


def multiplier(*scales: Any, y_scale: Any = None) -> np.ndarray:
    """The float32 product of ``scales`` (each a scalar or per column), over ``y_scale``."""
    m: Any = np.float32(1)
    for s in scales:
        s = np.asarray(s, np.float32)
        m = m * (s.reshape(()) if s.size == 1 else s.reshape(-1))
    if y_scale is not None:
        m = m / np.asarray(y_scale, np.float32).reshape(())
    return np.asarray(m, np.float32)


@dataclass(frozen=True, slots=True)
class Packed:
    """B (K x N) less its zero points: the C tier's int16 panels (``fmt`` 0) or u8 x s8 quads
    with B's column sums (``fmt`` 1: where vpmaddubsw is exact, the rest of B in ``residual``:
    offsets per column, rows, values), or an int32 matrix for numpy."""

    k: int
    n: int
    data: np.ndarray
    native: bool
    fmt: int = 0
    colsum: np.ndarray | None = None
    residual: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


# The most of B the u8 x s8 form leaves to its sparse residual (each value of it costs about as
# much as a hundred of the tile's products), else B takes the int16 form.
RESIDUAL_SHARE = 1 / 512


def pack(b: np.ndarray, zero: np.ndarray | None, *, use_native: bool = True) -> Packed:
    """B (K x N, any strides, u8 or s8) less ``zero`` (one value or one a column), packed."""
    k, n = b.shape
    zb = np.zeros(1, np.int32) if zero is None else np.ascontiguousarray(np.asarray(zero).reshape(-1), np.int32)
    fn = native.function("aioge_qgemm_pack") if use_native else None
    if fn is None or b.dtype.itemsize != 1:
        return Packed(k, n, b.astype(np.int32) - (zb if zb.size > 1 else zb[0]), False)
    sk, sn = b.strides
    size8 = int(native.function("aioge_qgemm_packed8")(k, n))
    out8 = native.aligned_empty((max(size8, 1),), np.int8)
    colsum = np.zeros(max(n, 1), np.int32)
    cap = int(k * n * RESIDUAL_SHARE)
    rptr, ridx, rval = np.zeros(n + 1, np.int32), np.zeros(max(cap, 1), np.int32), np.zeros(max(cap, 1), np.int16)
    signed = int(b.dtype == np.int8)
    args8 = (signed, k, n, sk, sn, native.ptr(zb), zb.size, native.ptr(out8), size8, native.ptr(colsum))
    got = native.check(
        native.function("aioge_qgemm_pack8")(_addr(b), *args8, *map(native.ptr, (rptr, ridx, rval)), cap), "qgemm pack"
    )
    if got >= 1:
        residual = None if got == 1 else (rptr, ridx[: got - 1].copy(), rval[: got - 1].copy())
        return Packed(k, n, out8[:size8], True, 1, colsum, residual)
    size = int(native.function("aioge_qgemm_packed")(k, n))
    out = native.aligned_empty((max(size, 1),), np.int16)
    native.check(
        fn(_addr(b), int(b.dtype == np.int8), k, n, sk, sn, native.ptr(zb), zb.size, native.ptr(out), size), "qgemm pack"
    )
    return Packed(k, n, out[:size], True)


def _addr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def qgemm(
    a: np.ndarray,
    za: int,
    b: Packed,
    y: np.ndarray,
    bias: np.ndarray | None = None,
    mult: np.ndarray | None = None,
    zy: int = 0,
    lo: int | None = None,
    fbias: np.ndarray | None = None,
) -> None:
    """``y = (a - za) @ B (+ bias)``: int32 into an int32 ``y``, requantised by ``mult`` and
    ``zy`` into a u8/s8 ``y`` (``lo``: a least value, Relu's ``zy``), or into a float32 ``y`` as
    ``float32(acc) * mult (+ fbias)`` (two roundings). ``a`` is (M, K) with unit stride along K,
    ``y`` (M, N) with unit stride along N; both may be views of wider rows."""
    m = a.shape[0]
    bias32 = None if bias is None else np.ascontiguousarray(bias.reshape(-1), np.int32)
    fb = None if fbias is None else np.ascontiguousarray(np.broadcast_to(fbias.reshape(-1), (b.n,)), np.float32)
    if not b.native:
        acc = (a.astype(np.int32) - za) @ b.data
        if bias32 is not None:
            acc += bias32
        if y.dtype == np.float32:
            f = acc.astype(np.float32) * np.asarray(mult, np.float32)
            y[...] = f if fb is None else f + fb
            return
        y[...] = acc if mult is None else requantise(acc, mult, zy, y.dtype, lo)
        return
    scale = None if mult is None else np.ascontiguousarray(np.asarray(mult, np.float32).reshape(-1))
    lda = a.strides[0] // a.itemsize if m > 1 else b.k
    ldy = y.strides[0] // y.itemsize if m > 1 else b.n
    # qgemm.c's QG_* slots, in order
    geo = np.array([
        _addr(a), _addr(b.data), 0 if bias32 is None else native.ptr(bias32), 0 if scale is None else native.ptr(scale),
        _addr(y), m, b.k, b.n, lda, ldy, int(a.dtype == np.int8), za, _MODES[y.dtype], zy,
        1 if scale is None else scale.size, b.data.size, (m - 1) * lda + b.k if m else 0, (m - 1) * ldy + b.n if m else 0,
        -128 if lo is None else lo, b.fmt, 0 if b.colsum is None else native.ptr(b.colsum),
        *((0, 0, 0) if b.residual is None else map(native.ptr, b.residual)), 0 if fb is None else native.ptr(fb),
    ], np.int64)  # fmt: skip
    blocks = (m + 3) // 4
    split_native(native.par_run(), native.JOB_QGEMM, native.ptr(geo), blocks, worth=m * b.k * b.n >= 1 << 18)


def _scalar(v: np.ndarray | None) -> int | None:
    """A zero point's one value, or None when it holds more (per row or channel)."""
    if v is None:
        return 0
    v = np.asarray(v)
    return int(v.reshape(-1)[0]) if v.size == 1 else None


class _Weights:
    """B packed once per constant weight array (a fed weight is packed every run)."""

    __slots__ = ("_key", "_packed")

    def __init__(self) -> None:
        self._key: tuple[Any, ...] = ()
        self._packed: Any = None

    def get(self, w: np.ndarray, zero: Any, make: Any) -> Any:
        key = (id(w), id(zero))
        if self._key == key and self._packed is not None and is_constant(w):
            return self._packed
        packed = make()
        if is_constant(w):
            self._key, self._packed = key, packed
        return packed


def _matmul(
    a: np.ndarray,
    b: np.ndarray,
    za: Any,
    zb: Any,
    out_dtype: Any,
    mult: Any,
    zy: int,
    cache: _Weights,
    use: bool,
    fbias: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> Any:
    """(..., M, K) @ (K, N) by qgemm (into ``out`` when it is a contiguous array of the result's
    size and dtype), or None for what it does not take (batched or 1-D B, per-row zero points
    of A)."""
    za_v = _scalar(za)
    if b.ndim != 2 or a.ndim < 2 or za_v is None or (zb is not None and np.asarray(zb).size not in (1, b.shape[1])):
        return None
    packed = cache.get(b, zb, lambda: pack(b, zb, use_native=use))
    a2 = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))
    size = a2.shape[0] * b.shape[1]
    fits = out is not None and out.dtype == out_dtype and out.flags.c_contiguous and out.size == size
    y = out.reshape(a2.shape[0], b.shape[1]) if fits else np.empty((a2.shape[0], b.shape[1]), out_dtype)  # type: ignore[union-attr]
    qgemm(a2, za_v, packed, y, None, mult, zy, None, fbias)
    return y.reshape(*a.shape[:-1], b.shape[1])


def _activation_matmul(
    a: np.ndarray, za: Any, b: np.ndarray, zb: Any, mult: np.ndarray, zy: int, dtype: Any, out: np.ndarray | None = None
) -> Any:
    """QLinearMatMul of two activations (attention's Q·K^T and P·V; nothing to pack once): (A -
    za) @ (B - zb) by a float32 GEMM, exact when every partial sum is an integer below 2**24
    (K * max|a - za| * max|b - zb| under it: K <= 258 for any 8-bit operands), requantised as
    ``requantise`` does; None where that does not hold (per-row or per-column zero points or
    scales, 1-D operands, a longer K). Written into ``out`` where it fits."""
    za_v, zb_v = _scalar(za), _scalar(zb)
    if za_v is None or zb_v is None or mult.size != 1 or a.ndim < 2 or b.ndim < 2:
        return None
    ia, ib = np.iinfo(a.dtype), np.iinfo(b.dtype)
    if a.shape[-1] * max(za_v - ia.min, ia.max - za_v) * max(zb_v - ib.min, ib.max - zb_v) >= 1 << 24:
        return None
    af, bf = _centred_f32(a, za_v), _centred_f32(b, zb_v)
    acc = np.empty((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]), np.float32)
    (par_matmul if a.ndim == b.ndim == acc.ndim and a.shape[:-2] == b.shape[:-2] else np.matmul)(af, bf, acc)
    acc *= mult.reshape(())
    np.clip(acc, np.float32(np.iinfo(dtype).min - zy), np.float32(np.iinfo(dtype).max - zy), out=acc)
    np.rint(acc, out=acc)
    fits = out is not None and out.dtype == dtype and out.flags.c_contiguous and out.size == acc.size
    y = out.reshape(acc.shape) if fits else np.empty(acc.shape, dtype)  # type: ignore[union-attr]
    np.add(acc, np.float32(zy), out=y, casting="unsafe")  # integers in the type's range: exact
    return y


def _centred_f32(x: np.ndarray, zero: int) -> np.ndarray:
    """x - zero as float32 (exact), by the C tier's DequantizeLinear at scale 1 where built."""
    fn = native.function("aioge_qgemm_dequantize")
    if fn is None:
        return np.subtract(x, np.float32(zero), dtype=np.float32)
    x, y = np.ascontiguousarray(x), np.empty(x.shape, np.float32)
    native.check(fn(native.ptr(x), int(x.dtype == np.int8), x.size, 1.0, float(zero), native.ptr(y)), "QLinearMatMul")
    return y


def _quantize_a(a: np.ndarray, use: bool) -> tuple[np.ndarray, Any, Any]:
    """DynamicQuantizeLinear of A, by the C tier's two passes for a contiguous float32 A."""
    if not use or a.dtype != np.float32 or not a.flags.c_contiguous or native.function("aioge_qgemm_range") is None:
        return dynamic_quantize_linear(a)
    lohi = np.zeros(2, np.float32)
    native.check(native.function("aioge_qgemm_range")(native.ptr(a), a.size, native.ptr(lohi)), "DynamicQuantizeMatMul")
    params = dynamic_quantize_params(float(lohi[0]), float(lohi[1]))
    if params is None:
        return dynamic_quantize_linear(a)
    scale, zero = params
    aq = np.empty(a.shape, np.uint8)
    fn = native.function("aioge_qgemm_quantize")
    native.check(fn(native.ptr(a), a.size, float(scale), float(zero), 0, native.ptr(aq)), "DynamicQuantizeMatMul")
    return aq, scale, zero


def _dynamic_matmul(inputs: Sequence[Any], cache: _Weights, use: bool, out: np.ndarray | None = None) -> np.ndarray:
    """com.microsoft DynamicQuantizeMatMul: A quantised as DynamicQuantizeLinear does, (Aq - za)
    @ (B - zb) in int32, times float32 a_scale * b_scale, plus bias: the chain
    DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add] it stands for, roundings and all."""
    a, b, b_scale = inputs[:3]
    zb, bias = (list(inputs[3:]) + [None, None])[:2]
    aq, a_scale, za = _quantize_a(a, use)
    mult = np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)
    n = b.shape[-1]
    if a.dtype == np.float32 and mult.size in (1, n) and (bias is None or (bias.dtype == np.float32 and bias.shape == (n,))):
        r = _matmul(aq, b, za, zb, np.float32, mult.reshape(-1), 0, cache, use, bias, out)
        if r is not None:
            return r
    y = matmul_integer(aq, b, za, zb).astype(np.float32) * mult
    return y if bias is None else y + bias


def matmul_integer(
    a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None = None, b_zero_point: np.ndarray | None = None
) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point) in int32 (zero points per tensor, per row of A, per column of B)."""
    a32 = _centred(a, a_zero_point, a.ndim - 2 if a.ndim >= 2 else None)
    b32 = _centred(b, b_zero_point, b.ndim - 1)
    return np.matmul(a32, b32).astype(np.int32)


def _centred(x: np.ndarray, zero: np.ndarray | None, per_axis: int | None = None) -> np.ndarray:
    """x - zero in int32; a 1-D zero point of more than one value applies along ``per_axis``."""
    v = x.astype(np.int32)
    if zero is None:
        return v
    z = np.asarray(zero).astype(np.int32)
    if z.size == 1:
        return v - z.reshape(())
    if per_axis is None:
        return v - z
    shape = [1] * v.ndim
    shape[per_axis] = -1
    return v - z.reshape(shape)


def qlinear_matmul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """Quantised matmul, any shapes: (A - za)(B - zb) requantised by a_scale * b_scale / y_scale."""
    acc = matmul_integer(a, b, a_zero_point, b_zero_point)
    a_s = np.asarray(a_scale, np.float32)
    if a_s.size > 1:  # per row of A: float32 products row by row
        mult = a_s.reshape(-1, 1) * multiplier(b_scale).reshape(1, -1) / np.asarray(y_scale, np.float32).reshape(())
    else:
        mult = multiplier(a_s, b_scale, y_scale=y_scale)
    return requantise(acc, mult, int(np.asarray(y_zero_point).reshape(-1)[0]), y_zero_point.dtype)


def _conv(
    x: np.ndarray,
    w: np.ndarray,
    zx: Any,
    zw: Any,
    bias: np.ndarray | None,
    out_dtype: Any,
    mult: np.ndarray | None,
    zy: int,
    attrs: Mapping[str, Any],
    cache: _Weights,
    use: bool,
    dst: np.ndarray | None = None,
) -> np.ndarray:
    """Any-rank conv (into ``dst`` where it fits) by a channels-last im2col (each tap's channels one contiguous run: ten
    times faster to gather than NCHW windows; the padding is x's zero point) and one qgemm
    per group, B the weight as (taps x channels) rows."""
    n, c = x.shape[:2]
    m, kernel = w.shape[0], list(w.shape[2:])
    group = int(attrs.get("group", 1))
    strides, dilations, pads, auto_pad = _window_attrs(attrs, kernel)
    begin, end, out = window_geometry(list(x.shape[2:]), kernel, strides, dilations, pads, auto_pad)
    zx_v = _scalar(zx)
    if zx_v is None:
        raise ValueError("x_zero_point must be one value")
    d, cg, mg = len(kernel), c // group, m // group
    taps = int(np.prod(kernel, dtype=np.int64))
    opos = int(np.prod(out, dtype=np.int64))
    zw_all = None if zw is None else np.asarray(zw).reshape(-1)

    def make() -> list[Packed]:
        wt = np.moveaxis(w, 1, -1).reshape(m, taps * cg)  # (M, taps..., C/G) rows
        return [
            pack(
                wt[g * mg : (g + 1) * mg].T,
                None if zw_all is None else (zw_all if zw_all.size == 1 else zw_all[g * mg : (g + 1) * mg]),
                use_native=use,
            )
            for g in range(group)
        ]

    packs = cache.get(w, zw, make)
    xp = _padded(x, begin, end, np.asarray(zx_v).astype(x.dtype))
    xh = _swap_channels(xp, use, last=True)  # (N, spatial..., C)
    y = np.empty((n * opos, m), out_dtype)
    m_all = None if mult is None else np.broadcast_to(mult, (m,)) if mult.size == 1 else mult.reshape(-1)
    st = xh.strides
    for g in range(group):
        xg = xh[..., g * cg : (g + 1) * cg]
        if all(k == 1 for k in kernel) and all(s == 1 for s in strides):
            cols = xg.reshape(n * opos, cg)
        else:
            view = as_strided(
                xg,
                (n, *out, *kernel, cg),
                (st[0], *(st[1 + i] * strides[i] for i in range(d)), *(st[1 + i] * dilations[i] for i in range(d)), st[-1]),
                writeable=False,
            )
            cols = np.ascontiguousarray(view).reshape(n * opos, taps * cg)
        sl = slice(g * mg, (g + 1) * mg)
        bg = None if bias is None else bias.reshape(-1)[sl]
        mg_mult = None if m_all is None else np.ascontiguousarray(m_all[sl])
        qgemm(cols, zx_v, packs[g], y[:, sl], bg, mg_mult, zy)
    return _swap_channels(y.reshape(n, *out, m), use, last=False, dst=dst)


def _swap_channels(x: np.ndarray, use: bool, *, last: bool, dst: np.ndarray | None = None) -> np.ndarray:
    """(N, C, spatial...) -> (N, spatial..., C) (``last``) or back, contiguous (into ``dst`` where
    it fits): by the C tier's blocked 8-bit transpose, else numpy's strided copy."""
    fn = native.function("aioge_transpose8") if use else None
    if fn is None or x.dtype.itemsize != 1 or x.ndim < 3:
        return np.ascontiguousarray(np.moveaxis(x, 1, -1) if last else np.moveaxis(x, -1, 1))
    x = np.ascontiguousarray(x)
    c = x.shape[1] if last else x.shape[-1]
    shape = (x.shape[0], *x.shape[2:], c) if last else (x.shape[0], c, *x.shape[1:-1])
    fits = dst is not None and dst.dtype == x.dtype and dst.flags.c_contiguous and dst.shape == shape
    y = dst if fits and dst is not None else np.empty(shape, x.dtype)
    inner = x.size // max(x.shape[0] * c, 1)
    rows, cols = (c, inner) if last else (inner, c)
    native.check(fn(native.ptr(x), x.shape[0], rows, cols, native.ptr(y)), "QLinearConv")
    return y


def build_qlinear(op: str) -> Any:
    """A kernel builder for ``op`` (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) whose
    B is packed once per constant weight, through the C tier when the build has it (decided
    when the kernel is built)."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        use = native.function("aioge_qgemm_rows") is not None and native.par_run() is not None
        cache = _Weights()
        kw = dict(attrs)

        def compute(inputs: Sequence[Any], out: np.ndarray | None = None) -> np.ndarray:
            if op == "MatMulInteger":
                a, b = inputs[0], inputs[1]
                za = inputs[2] if len(inputs) > 2 else None
                zb = inputs[3] if len(inputs) > 3 else None
                r = _matmul(a, b, za, zb, np.int32, None, 0, cache, use)
                return matmul_integer(a, b, za, zb) if r is None else r
            if op == "QLinearMatMul":
                a, sa, za, b, sb, zb, sy, zy = inputs
                r = None
                if np.asarray(sa).size == 1:
                    mult, zy_v = multiplier(sa, sb, y_scale=sy), int(np.asarray(zy).reshape(-1)[0])
                    if not is_constant(b):
                        r = _activation_matmul(a, za, b, zb, mult, zy_v, zy.dtype, out)
                    if r is None:
                        r = _matmul(a, b, za, zb, zy.dtype, mult, zy_v, cache, use)
                return qlinear_matmul(*inputs) if r is None else r
            if op == "QGemm":
                return _qgemm_op(inputs, kw, cache, use)
            if op == "ConvInteger":
                x, w = inputs[0], inputs[1]
                zx = inputs[2] if len(inputs) > 2 else None
                zw = inputs[3] if len(inputs) > 3 else None
                return _conv(x, w, zx, zw, None, np.int32, None, 0, kw, cache, use)
            x, sx, zx, w, sw, zw, sy, zy = inputs[:8]
            bias = inputs[8] if len(inputs) > 8 else None
            mult = multiplier(sx, sw, y_scale=sy)
            return _conv(x, w, zx, zw, bias, zy.dtype, mult, int(np.asarray(zy).reshape(-1)[0]), kw, cache, use, out)

        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            if op == "DynamicQuantizeMatMul":  # written in place where the output buffer fits
                r = _dynamic_matmul(inputs, cache, use, None if outputs is None else outputs[0])
            else:
                r = compute(inputs, None if outputs is None else outputs[0])
            if outputs is None:
                return (r,)
            if not np.may_share_memory(r, outputs[0]):
                np.copyto(outputs[0], r.reshape(outputs[0].shape))
            return outputs

        return run

    return build


def _qgemm_op(inputs: Sequence[Any], attrs: Mapping[str, Any], cache: _Weights, use: bool) -> np.ndarray:
    """com.microsoft QGemm: alpha (A' - za)(B' - zb) + C, requantised by alpha * a_scale *
    b_scale / y_scale, or in float32 (times alpha * a_scale * b_scale) without y_scale."""
    a, sa, za, b, sb, zb = inputs[:6]
    c, sy, zy = (list(inputs[6:]) + [None, None, None])[:3]
    w = b
    a = np.ascontiguousarray(a.T if attrs["transA"] else a)
    b = b.T if attrs["transB"] else b
    n = b.shape[1]
    quantised = sy is not None
    zy_v = _scalar(zy) or 0
    out_dtype = (np.uint8 if zy is None else zy.dtype) if quantised else np.int32
    mult = multiplier(np.float32(attrs["alpha"]), sa, sb, y_scale=sy)
    c32 = None if c is None else np.asarray(c, np.int32)
    za_v = _scalar(za)
    if za_v is not None and (c32 is None or c32.size in (1, n)) and (zb is None or np.asarray(zb).size in (1, n)):
        packed = cache.get(w, zb, lambda: pack(b, zb, use_native=use))
        acc = np.empty((a.shape[0], n), out_dtype)
        bias = None if c32 is None else np.broadcast_to(c32.reshape(-1), (n,))
        qgemm(a, za_v, packed, acc, bias, mult if quantised else None, zy_v)
        if quantised:
            return acc
    else:
        acc = matmul_integer(a, b, za, zb) + (0 if c32 is None else c32)
        if quantised:
            return requantise(acc, mult, zy_v, out_dtype)
    return acc.astype(np.float32) * mult


def qlinear_add(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray | None,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray | None,
    c_scale: np.ndarray,
    c_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """MLAS's QLinearAdd: (a - za) * (sa / sc) + (b - zb) * (sb / sc) in float32, rounded to
    nearest even, plus zc, saturated."""
    sc = np.float32(np.asarray(c_scale).reshape(-1)[0])
    ra = np.float32(np.asarray(a_scale).reshape(-1)[0]) / sc
    rb = np.float32(np.asarray(b_scale).reshape(-1)[0]) / sc
    za, zb, zc = (_scalar(z) or 0 for z in (a_zero_point, b_zero_point, c_zero_point))
    f = (a.astype(np.int32) - za).astype(np.float32) * ra + (b.astype(np.int32) - zb).astype(np.float32) * rb
    info = np.iinfo(a.dtype)
    return np.clip(np.rint(f).astype(np.int32) + zc, info.min, info.max).astype(a.dtype)


def qdq_add(a: np.ndarray, sa: Any, za: Any, b: np.ndarray, sb: Any, zb: Any, sc: Any, zc: np.ndarray) -> np.ndarray:
    """aioge's QdqAdd: DQ(a) + DQ(b) -> Q as those three nodes compute it in float32 ((a - za) *
    sa + (b - zb) * sb, rint(v / sc) + zc, saturated), in one C pass for equal shapes."""
    s = [np.float32(np.asarray(v).reshape(-1)[0]) for v in (sa, za, sb, zb, sc, zc)]
    fn = native.function("aioge_qdq_add")
    if fn is not None and a.shape == b.shape and a.dtype == b.dtype == zc.dtype and s[4] > 0:
        a, b, y = np.ascontiguousarray(a), np.ascontiguousarray(b), np.empty(a.shape, a.dtype)
        args = (native.ptr(b), s[2], s[3], int(a.dtype == np.int8), a.size, s[4], s[5], native.ptr(y))
        native.check(fn(native.ptr(a), s[0], s[1], *args), "QdqAdd")
        return y
    v = (a.astype(np.float32) - s[1]) * s[0] + (b.astype(np.float32) - s[3]) * s[2]
    return np.clip(np.rint(v / s[4]) + s[5], np.iinfo(zc.dtype).min, np.iinfo(zc.dtype).max).astype(zc.dtype)


def qlinear_global_average_pool(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    channels_last: int = 0,
) -> np.ndarray:
    """MLAS's QLinearGlobalAveragePool: the int32 sum less zx per value, times
    x_scale / y_scale / count in float32, rounded to nearest even, plus zy, saturated."""
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[i] for i in axes]))
    zx, zy = _scalar(x_zero_point) or 0, _scalar(y_zero_point) or 0
    acc = x.astype(np.int32).sum(axis=axes, keepdims=True, dtype=np.int32) - np.int32(zx * count)
    scale = np.float32(np.asarray(x_scale).reshape(-1)[0]) / np.float32(np.asarray(y_scale).reshape(-1)[0]) / np.float32(count)
    return requantise(acc, np.asarray(scale), zy, x.dtype)
