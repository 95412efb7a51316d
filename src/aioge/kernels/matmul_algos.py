"""MatMul and Gemm algorithms the tuner chooses among (the references are
``nn.build_matmul`` and ``nn.build_gemm``): layouts and batching strategies.

- ``matmul_fold_2d``: batched A with a 2-D B (shared weights): one GEMM over the folded
  batch, (B·M, K) @ (K, N), instead of B small ones.
- ``matmul_packed_bt``: B kept transposed and contiguous (packed once for a constant), so
  BLAS reads it as a transposed operand.
- ``matmul_batch_loop``: equal batch shapes: one ``np.dot`` per batch matrix into the output.
- ``matmul_einsum``: ``np.einsum`` with path optimisation (tensordot/BLAS where it can).
- ``gemm_dot``: Gemm through ``np.dot`` into the output.
- ``matmul_native`` and ``gemm_native``: float32 with a 2-D B, in C (``csrc/gemm.c``): B
  packed once into panels of NR columns, a 6 x NR register-tiled micro-kernel (``csrc/tile.h``:
  NR 64 on AVX-512, 16 on AVX2, 8 on SSE2) reading A in
  place; panels (or row blocks) in two halves over an idle core. Every column goes through
  the same operations, so equal weight columns give equal outputs.
- ``gemv_native``: Gemm at one row with a row-major B (an MLP's layers at batch 1), in C: B
  read in place, the row bias and a fused producer's activation applied in the same call.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, native_rows
from aioge.kernels.contract import KernelImpl, RunFn
from aioge.kernels.conv_algos import DIRECT_SPLIT_MACS, NativeOperand, WeightDerived
from aioge.kernels.fused import activation_runner, build_then_activation
from aioge.kernels.nn import build_matmul, gemm_epilogue
from aioge.kernels.parallel import BATCH_SPLIT_MACS, matmul_2d, par_matmul, split_matmul, split_native

__all__ = [
    "GEMM_ALGOS",
    "MATMUL_ALGOS",
    "MATMUL_BLAS",
    "NATIVE_GEMM_ALGOS",
    "NATIVE_MATMUL_ALGOS",
    "blas_shapes",
    "build_fused_matmul",
    "build_matmul_blas",
    "pack_columns",
]

Descs = Sequence[TensorDesc | None]
_FLOATS = ("float16", "float32", "float64")


def _static2(descs: Descs) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    if len(descs) < 2 or descs[0] is None or descs[1] is None:
        return None
    a, b = descs[0], descs[1]
    if not (a.static and b.static) or a.dtype not in _FLOATS or a.dtype != b.dtype or a.rank < 2 or b.rank < 2:  # type: ignore[operator]
        return None
    return tuple(int(d) for d in a.shape), tuple(int(d) for d in b.shape)  # type: ignore[union-attr]


def _out(outputs: Sequence[np.ndarray] | None, shape: Sequence[int], dtype: Any) -> np.ndarray:
    return np.empty(tuple(shape), dtype) if outputs is None else outputs[0]


def _result_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    return (*np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])), a[-2], b[-1])


# -- MatMul ------------------------------------------------------------------------------------


def build_matmul_fold_2d(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """(..., M, K) @ (K, N) as one (prod(...)·M, K) @ (K, N) GEMM."""
    sa, sb = _static2(ins)  # type: ignore[misc]
    k, n = sb
    shape = _result_shape(sa, sb)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        y = _out(outputs, shape, a.dtype)
        a2 = a.reshape(-1, k)
        if y.flags.c_contiguous:
            matmul_2d(a2, b, y.reshape(-1, n))
        else:
            np.copyto(y, np.matmul(a2, b).reshape(shape))
        return (y,)

    return run


def _applies_fold(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    s = _static2(descs)
    return s is not None and len(s[0]) >= 3 and len(s[1]) == 2


def build_matmul_packed_bt(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """A @ B with B stored as a contiguous B^T (BLAS's transposed operand)."""
    sa, sb = _static2(ins)  # type: ignore[misc]
    shape = _result_shape(sa, sb)
    packed = WeightDerived(lambda b: np.ascontiguousarray(np.swapaxes(b, -1, -2)))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        y = _out(outputs, shape, a.dtype)
        par_matmul(a, np.swapaxes(packed.get(b), -1, -2), y)
        return (y,)

    return run


def _applies_packed(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _static2(descs) is not None


def build_matmul_batch_loop(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """Equal batch shapes: np.dot per batch matrix, straight into the output."""
    sa, sb = _static2(ins)  # type: ignore[misc]
    shape = _result_shape(sa, sb)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        y = _out(outputs, shape, a.dtype)
        a3, b3 = a.reshape(-1, *sa[-2:]), b.reshape(-1, *sb[-2:])
        y3 = y.reshape(-1, *shape[-2:])
        for i in range(a3.shape[0]):
            np.dot(a3[i], b3[i], out=y3[i])
        return (y,)

    return run


def _applies_loop(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    s = _static2(descs)
    return s is not None and len(s[0]) >= 3 and s[0][:-2] == s[1][:-2]


def build_matmul_einsum(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """np.einsum('...ij,...jk->...ik') with path optimisation."""
    sa, sb = _static2(ins)  # type: ignore[misc]
    shape = _result_shape(sa, sb)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        y = _out(outputs, shape, a.dtype)
        np.copyto(y, np.einsum("...ij,...jk->...ik", a, b, optimize=True))
        return (y,)

    return run


# -- a packed constant B in C ------------------------------------------------------------------

# Packing a weight of this many values or more splits over the idle cores (about 50 us).
PACK_SPLIT_VALUES = 1 << 16


def pack_columns(b: np.ndarray, cols: int) -> np.ndarray:
    """(K, N) in panels of ``cols`` columns, k-major: (ceil(N / cols), K, cols), zero past N,
    64-byte aligned. A float32 B that is row-major, or the transpose of a row-major W (a conv's
    weight, Gemm's transB), goes through C (``aioge_pack_columns_f32``, over an idle core when
    big: BERT-base's 340 MB of weights took 0.44 s through numpy's strided copy on the first
    run after a graph-cache load, resnet18's transposed ones 45 ms); the rest through numpy."""
    k, n = b.shape
    full, panels = n // cols, -(-n // cols)
    out = native.aligned_empty((panels, k, cols))
    par, tile = native.par_run(), native.gemm_tile()
    sk, sn = b.strides
    if (
        par is not None
        and tile is not None
        and tile[1] == cols
        and b.dtype == np.float32
        and (sn == 4 or sk == 4)
        and sk % 4 == 0
        and sn % 4 == 0
        and out.size
    ):
        args = np.array([native.ptr(b), sk // 4, k, n, native.ptr(out), sn // 4], np.int64)
        split_native(par, native.JOB_PACK, native.ptr(args), panels, worth=b.size >= PACK_SPLIT_VALUES)
        return out
    out[:full] = b[:, : full * cols].reshape(k, full, cols).transpose(1, 0, 2)
    if full < panels:
        out[full] = 0
        out[full, :, : n - full * cols] = b[:, full * cols :]
    return out


# A product with a B of this many values shares its panels with the C helper, however few rows
# a has: MobileNetV3's 1024x1000 classifier at batch 1 (4 MB of weights, cold in the cache after
# the convs) read at 14 GB/s on one core.
GEMV_SPLIT_VALUES = 1 << 18
# gemv_native's row-major B splits from a quarter of that: the MLP's 784x256 layer, in the
# cache, 5.7 us split against 10.3 whole (256x128: 1.7 against 1.9, so no lower).
GEMV_N_SPLIT_VALUES = 1 << 16


class _PackedGemm:
    """``y = a @ B (+ bias)`` for a 2-D float32 ``a`` (unit stride along K) and the packed B,
    over an idle core (``parallel.split_native``) when the product is big enough."""

    __slots__ = ("par", "mr", "nr", "k", "n")

    def __init__(self, k: int, n: int) -> None:
        self.par = native.par_run()
        self.mr, self.nr = native.gemm_tile() or (0, 0)
        self.k, self.n = k, n

    @property
    def ready(self) -> bool:
        return self.par is not None and self.nr > 0

    def __call__(self, a: np.ndarray, bp: np.ndarray, bias: np.ndarray | None, y: np.ndarray) -> int:
        """Returns the pieces the product ran in."""
        m, (k, n) = a.shape[0], (self.k, self.n)
        if m == 0 or n == 0:
            return 1
        if k == 0:
            y[...] = 0 if bias is None else bias
            return 1
        call = self.call(a, bp, bias, y)
        return split_native(self.par, call.job, call.addr, call.total, worth=call.worth)

    def call(self, a: np.ndarray, bp: np.ndarray, bias: np.ndarray | None, y: np.ndarray) -> native.NativeCall:
        """The product's C job (at least one row, column and term)."""
        m, (k, n) = a.shape[0], (self.k, self.n)
        panels, blocks = bp.shape[0], -(-m // self.mr)
        by_rows = panels < 2 and blocks >= 2
        args = np.array(
            [
                native.ptr(a),
                a.strides[0] // 4,
                native.ptr(bp),
                0 if bias is None else native.ptr(bias),
                native.ptr(y),
                n,
                n,
                k,
                m,
                panels,
                by_rows,
                self.mr,
            ],
            np.int64,
        )
        # a product of few rows is bound by reading B: two cores read it faster than one
        worth = m * k * n >= DIRECT_SPLIT_MACS or k * n >= GEMV_SPLIT_VALUES
        return native.NativeCall(native.JOB_GEMM, args, blocks if by_rows else panels, worth, (a, bp, bias, y))


def _rows(a: np.ndarray, k: int) -> np.ndarray:
    """``a`` as float32 rows of ``k`` with unit stride along them (a view when it can be)."""
    a2 = a.reshape(-1, k) if a.flags.c_contiguous else np.ascontiguousarray(a, np.float32).reshape(-1, k)
    return a2 if a2.dtype == np.float32 else a2.astype(np.float32)


def build_matmul_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """float32 (..., M, K) @ (K, N) in C (``csrc/gemm.c``): B packed once (a constant) into
    panels of NR (``csrc/tile.h``) columns; the folded rows of A read in place. Without the compiled tier (a
    desc stored by a process that had it) ``matmul_fold_2d``'s numpy."""
    sa, sb = _static2(ins)  # type: ignore[misc]
    k, n = sb
    shape = _result_shape(sa, sb)
    gemm = _PackedGemm(k, n)
    if not gemm.ready:
        return build_matmul_fold_2d(attrs, params, ins, outs)
    packed = WeightDerived(lambda b: pack_columns(np.asarray(b, np.float32), gemm.nr), f"cols{gemm.nr}")

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        y = _out(outputs, shape, np.float32)
        yc = y if y.flags.c_contiguous else np.empty(shape, np.float32)
        gemm(_rows(inputs[0], k), packed.get(inputs[1]), None, yc.reshape(-1, n))
        if yc is not y:
            np.copyto(y, yc)
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        # the C product in place (gpt2_small's 768x8192 head ran as matmul_blas: 22 ms of CPU, not 12)
        a, y, bp = inputs[0], outputs[0], packed.fixed(inputs[1])
        if bp is None or not native.f32c(a, y) or a.size == 0:
            return None
        return [gemm.call(a.reshape(-1, k), bp, None, y.reshape(-1, n))]

    return native.with_native(run, form)


def _applies_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    s = _static2(descs)  # an empty B (K or N zero) is the numpy kernels': nothing to pack
    return s is not None and len(s[1]) == 2 and min(s[1]) > 0 and descs[0].dtype == "float32"  # type: ignore[union-attr]


# -- through numpy's own BLAS, from C ---------------------------------------------------------------


def blas_shapes(descs: Descs, attrs: Mapping[str, Any]) -> tuple[int, int, int, int, int, int] | None:
    """(batch, M, K, N, A's and B's element strides between matrices) of float32 static
    ``op(A) @ op(B)`` (transA/transB) whose batches are equal or one side a single matrix, the
    output (..., M, N); None otherwise."""
    s = _static2(descs)
    if s is None or descs[0].dtype != "float32":  # type: ignore[union-attr]
        return None
    (sa, sb), ta, tb = s, bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))
    m, ka = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    kb, n = (sb[-1], sb[-2]) if tb else (sb[-2], sb[-1])
    ba, bb = sa[:-2], sb[:-2]
    if ka != kb or min(m, n, ka) < 1:
        return None
    if ba == bb or not bb:
        batch = int(np.prod(ba, dtype=np.int64))
    elif not ba:
        batch = int(np.prod(bb, dtype=np.int64))
    else:
        return None
    return batch, m, ka, n, (m * ka if ba else 0), (ka * n if bb else 0)


# The pieces of rows a single BLAS product is run in (each one sgemm: the same sums split or not)
ROW_PIECES = 2


def build_matmul_blas(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """float32 (batched) ``act(alpha * op(A) @ op(B) + C)`` through the BLAS numpy links, from
    C (``JOB_SGEMM``: one sgemm per matrix, beta 0; a batch over one B folds into the rows of a
    single one), then C and the activation as C jobs: what numpy's matmul computes, as steps a
    native program runs without the GIL. MatMul, and FusedMatMul's C (a value, a row or the
    output's shape) and activation (``native_rows.ACTIVATIONS``). Non-contiguous operands are
    copied; without the BLAS, the reference."""
    batch, m, k, n, stride_a, stride_b = blas_shapes(ins, attrs)  # type: ignore[misc]
    ta, tb = bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))
    alpha = float(attrs.get("alpha", 1.0))
    act, act_params = attrs.get("activation", ""), attrs.get("activation_params", ())
    shape = tuple(int(d) for d in outs[0].shape)
    found = native.sgemm()
    fallback = _reference(attrs, params, ins, outs)
    if found is None or native.par_run() is None:  # no BLAS to call, or a stored choice read without the tier
        return fallback
    fn, wide = found
    alpha_bits = int(np.array([alpha], np.float32).view(np.int32)[0])
    # One B for the whole batch, A not transposed: the batch's rows are one product's.
    fold = stride_b == 0 and stride_a != 0 and not ta
    rows, count = (batch * m, 1) if fold else (m, batch)
    # one big matrix: its rows in pieces (ConvNeXt's (784, 192) @ (192, 768) ran on one core)
    pieces = ROW_PIECES if count == 1 and not ta and rows >= 64 and rows * k * n >= BATCH_SPLIT_MACS else 0
    count = pieces or count
    worth = count >= 2 and batch * m * k * n >= BATCH_SPLIT_MACS

    def make(a: np.ndarray, b: np.ndarray, c: Any, y: np.ndarray) -> list[native.NativeCall] | None:
        if not native.f32c(a, b, y):
            return None
        lda, ldb = (rows if fold else m) if ta else k, k if tb else n
        args = np.array(
            [
                fn,
                wide,
                ta,
                tb,
                rows,
                n,
                k,
                native.ptr(a),
                lda,
                native.ptr(b),
                ldb,
                native.ptr(y),
                n,
                stride_a,
                stride_b,
                m * n,
                alpha_bits,
                pieces,
            ],
            np.int64,
        )
        calls = [native.NativeCall(native.JOB_SGEMM, args, count, worth, (a, b, y))]
        if c is not None:
            add = native.binary("Add", y, c, y)
            if add is None:
                return None
            calls.append(add)
        if act:
            flat = y.reshape(-1)
            after = native_rows.activation_call(act, flat, flat, act_params)
            if after is None:
                return None
            calls.append(after)
        return calls

    bound = native.BoundCalls(make)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        y = _out(outputs, shape, np.float32)
        calls = bound.get(a, b, c, y)
        if calls is None:
            yc = y if y.flags.c_contiguous else np.empty(shape, np.float32)
            ac, bc = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
            cc = None if c is None else np.ascontiguousarray(c, np.float32)
            calls = make(ac, bc, cc, yc)
            if calls is None:
                return fallback(inputs, outputs)
            native.run_calls(calls)
            if yc is not y:
                np.copyto(y, yc)
            return (y,)
        native.run_calls(calls)
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        return make(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, outputs[0])

    return native.with_native(run, form)


def _reference(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    # numpy's kernel of the op (MatMul's, or FusedMatMul's when it has FusedMatMul's attributes)
    if "transA" in attrs:
        return build_fused_matmul(attrs, params, ins, outs)
    return build_matmul(attrs, params, ins, outs)


def build_fused_matmul(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """matmul of the (transposed) operands straight into the output, scaled, the bias added, activated."""
    trans_a, trans_b = bool(attrs["transA"]), bool(attrs["transB"])
    alpha = float(attrs["alpha"])
    act = activation_runner(attrs.get("activation", ""), attrs.get("activation_params", ()), outs[0].dtype)

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        a = np.swapaxes(a, -1, -2) if trans_a else a
        b = np.swapaxes(b, -1, -2) if trans_b else b
        if outputs is None:
            y = np.matmul(a, b)
        else:
            y = outputs[0]
            np.matmul(a, b, out=y)
        if alpha != 1.0:
            np.multiply(y, alpha, out=y)
        if c is not None:
            np.add(y, c, out=y)
        if act is not None:
            act(y)
        return (y,)

    return run


def _applies_blas(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    shapes = blas_shapes(descs, attrs)
    if shapes is None:
        return False
    c = descs[2] if len(descs) > 2 else None
    if c is not None:
        # C as kernels.native.binary adds it: one value, a row, or the output's shape
        sa, sb = (tuple(int(d) for d in t.shape) for t in descs[:2])  # type: ignore[union-attr]
        out = (*(sa[:-2] or sb[:-2]), shapes[1], shapes[3])
        cs = tuple(int(d) for d in c.shape) if c.static else None  # type: ignore[union-attr]
        n = shapes[3]
        if c.dtype != "float32" or cs is None:
            return False
        if not (int(np.prod(cs)) == 1 or (int(np.prod(cs)) == n and cs[-1:] == (n,)) or cs == out):
            return False
    act = attrs.get("activation", "")
    return not act or act in native_rows.ACTIVATIONS


# MatMul's and FusedMatMul's (ops.fused): one kernel for both schemas.
MATMUL_BLAS = KernelImpl(
    "matmul_blas", build_matmul_blas, _applies_blas, offered=lambda: native.sgemm() is not None, eager=True, native=True
)
NATIVE_MATMUL_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl(
        "matmul_native", build_matmul_native, _applies_native, offered=native.available, eager=True, native=True, packs=(1,)
    ),
    MATMUL_BLAS,
)

MATMUL_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl("matmul_fold_2d", build_matmul_fold_2d, _applies_fold),
    KernelImpl("matmul_packed_bt", build_matmul_packed_bt, _applies_packed),
    KernelImpl("matmul_batch_loop", build_matmul_batch_loop, _applies_loop),
    KernelImpl("matmul_einsum", build_matmul_einsum, _applies_packed),
)


# -- Gemm --------------------------------------------------------------------------------------


def _gemm_shapes(ins: Descs, attrs: Mapping[str, Any]) -> tuple[int, int] | None:
    if len(ins) < 2 or ins[0] is None or ins[1] is None:
        return None
    a, b = ins[0], ins[1]
    if not (a.static and b.static) or a.rank != 2 or b.rank != 2 or a.dtype not in _FLOATS or a.dtype != b.dtype:
        return None
    m = int(a.shape[1] if attrs.get("transA", 0) else a.shape[0])  # type: ignore[index]
    n = int(b.shape[0] if attrs.get("transB", 0) else b.shape[1])  # type: ignore[index]
    return m, n


def build_gemm_dot(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """alpha·A'@B' + beta·C through np.dot into the output."""
    m, n = _gemm_shapes(ins, attrs)  # type: ignore[misc]
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    ta, tb = bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        y = _out(outputs, (m, n), a.dtype)
        if y.flags.c_contiguous:
            split_matmul(a.T if ta else a, b.T if tb else b, y)
        else:
            np.copyto(y, np.dot(a.T if ta else a, b.T if tb else b))
        gemm_epilogue(y, c, alpha, beta)
        return (y,)

    return run


def _applies_gemm(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _gemm_shapes(descs, attrs) is not None


def build_gemm_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """float32 alpha·A'@B' + beta·C in C (``csrc/gemm.c``): B' packed once (a constant), a row
    vector beta·C added by the micro-kernel; other C and alpha by ``gemm_epilogue``. Without
    the compiled tier ``gemm_dot``."""
    m, n = _gemm_shapes(ins, attrs)  # type: ignore[misc]
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    ta, tb = bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))
    k = int(ins[0].shape[0] if ta else ins[0].shape[1])  # type: ignore[union-attr, index]
    gemm = _PackedGemm(k, n)
    if not gemm.ready:
        return build_gemm_dot(attrs, params, ins, outs)
    row_c = len(ins) > 2 and ins[2] is not None and alpha == 1.0 and beta != 0.0 and ins[2].shape in ((n,), (1, n))
    if m == 1 and tb and not ta:
        return _gemm_run(m, n, row_c, alpha, beta, *_gemv_t(k, n, gemm.par))
    packed = WeightDerived(lambda b: pack_columns(np.asarray(b.T if tb else b, np.float32), gemm.nr), f"cols{gemm.nr}{'t' * tb}")

    def product(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, bp: int, yc: np.ndarray) -> None:
        gemm(_rows(a.T if ta else a, k), packed.get(b), bias, yc)

    def product_form(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, yc: np.ndarray) -> list[native.NativeCall] | None:
        ar = a.T if ta else a
        bp = packed.fixed(b)
        if bp is None or m == 0 or n == 0 or k == 0 or ar.dtype != np.float32 or ar.strides[1] != 4 or ar.strides[0] % 4:
            return None
        return [gemm.call(ar, bp, bias, yc)]

    return _gemm_run(m, n, row_c, alpha, beta, product, product_form)


# y = a @ b (+ the row bias, its array and address), written into the C-contiguous yc
_Product = Callable[[np.ndarray, np.ndarray, "np.ndarray | None", int, np.ndarray], None]


def _gemm_run(
    m: int,
    n: int,
    row_c: bool,
    alpha: float,
    beta: float,
    product: _Product,
    product_form: Callable[[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray], list[native.NativeCall] | None] | None = None,
) -> RunFn:
    """gemm_native's run around a C ``product``: a row-vector beta·C given to it as the bias
    (taken once for a constant C), other C and alpha by ``gemm_epilogue``, a non-contiguous
    output written through a contiguous one."""
    bias_of = NativeOperand()

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        y = _out(outputs, (m, n), np.float32)
        yc = y if y.flags.c_contiguous else np.empty((m, n), np.float32)
        bias, bp = bias_of.get(c if beta == 1.0 else beta * c) if row_c and c is not None else (None, 0)
        product(a, b, bias, bp, yc)
        if bias is None:
            gemm_epilogue(yc, c, alpha, beta)
        if yc is not y:
            np.copyto(y, yc)
        return (y,)

    if product_form is None:
        return run

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        # only what the C product computes whole: no alpha, no C but a row bias
        a, b, y = inputs[0], inputs[1], outputs[0]
        c = inputs[2] if len(inputs) > 2 else None
        if alpha != 1.0 or (c is not None and not (row_c and beta == 1.0)) or not isinstance(a, np.ndarray):
            return None
        if (
            not y.flags.c_contiguous
            or y.dtype != np.float32
            or (c is not None and (c.dtype != np.float32 or not c.flags.c_contiguous))
        ):
            return None
        return product_form(a, b, c, y)

    return native.with_native(run, form)


def _gemv_t(k: int, n: int, par: Any) -> tuple[_Product, Callable[..., list[native.NativeCall] | None]]:
    """One row times a transposed (N, K) weight (a classifier at batch 1), in C
    (``aioge_gemv_t_f32``) on the weight as it is, no packed copy: 4 rows of it at a time, the
    rows shared with the C helper on an idle core. MobileNetV3's 1024x1000 classifier, its
    weight out of the cache as in a run: 211 us against numpy's 289 on one core (70 against 168
    in cache)."""
    worth = k * n >= GEMV_SPLIT_VALUES

    def product(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, bp: int, yc: np.ndarray) -> None:
        x = np.ascontiguousarray(a, np.float32)
        w = b if b.dtype == np.float32 and b.strides[1] == 4 and b.strides[0] % 4 == 0 else np.ascontiguousarray(b, np.float32)
        args = np.array([native.ptr(x), native.ptr(w), w.strides[0] // 4, bp, native.ptr(yc), k], np.int64)
        split_native(par, native.JOB_GEMV_T, native.ptr(args), n, worth=worth)

    def form(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, yc: np.ndarray) -> list[native.NativeCall] | None:
        # the same call on the operands in place (a classifier at batch 1 kept its plan off native programs)
        if not (native.f32c(a) and isinstance(b, np.ndarray) and b.dtype == np.float32 and b.strides[1] == 4):
            return None
        if b.strides[0] % 4 or (bias is not None and not native.f32c(bias)):
            return None
        args = np.array(
            [native.ptr(a), native.ptr(b), b.strides[0] // 4, 0 if bias is None else native.ptr(bias), native.ptr(yc), k],
            np.int64,
        )
        return [native.NativeCall(native.JOB_GEMV_T, args, n, worth, (a, b, bias, yc))]

    return product, form


def _applies_gemm_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    if _gemm_shapes(descs, attrs) is None or descs[0].dtype != "float32":  # type: ignore[union-attr]
        return False
    return 0 not in descs[1].shape  # type: ignore[union-attr,operator]  # an empty B is the numpy kernels': nothing to pack


def build_gemv_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """float32 ``act(a @ B + C)`` for one row ``a`` and a row-major (K, N) B, in C
    (``aioge_gemv_n_f32``): B read in place, 128 columns a pass over its rows, the row C and a
    fused producer's activation (``native_rows.EPILOGUES``) applied before the columns leave
    the cache; column groups shared with the C helper on an idle core from
    ``GEMV_N_SPLIT_VALUES`` weights. One call where numpy's kernel made four (product, bias,
    activation, and the activation's own C call): the builder MLP's layers at batch 1, 784x256,
    256x128 and 128x10, took 15.8, 5.7 and 2.7 us in numpy's kernels. Without the compiled tier
    (or for operands it cannot read in place) ``gemm_dot`` and the activation after it."""
    n = int(ins[1].shape[1])  # type: ignore[union-attr, index]
    k = int(ins[0].shape[1])  # type: ignore[union-attr, index]
    fallback = build_then_activation(build_gemm_dot, attrs, params, ins, outs, np.float32)
    par = native.par_run()
    if par is None:
        return fallback
    code, p0, p1 = native_rows.epilogue(attrs.get("activation", ""), attrs.get("activation_params", ()))
    groups = (n + 15) // 16
    # The split's unit: half the groups, at most 8 (128 columns a pass over B's rows); the two
    # halves of the 784x256 MLP layer ran in 5.7 us against 10.3 whole (units of one group, as
    # many as the helper's eight chunks: 8.4, each chunk a thin strided pass over all of B).
    unit = min(8, (groups + 1) // 2)
    units, worth = (groups + unit - 1) // unit, k * n >= GEMV_N_SPLIT_VALUES
    # The call's argument block with the operands whose addresses it holds, per output buffer
    # (a context's arena view) or, for a fresh output, per row: a run whose operands are the
    # objects of the last one's only calls; a new feed row or a fresh output patches a copy.
    # Entries are replaced whole, never changed, so concurrent runs never see another's
    # addresses; holding the arrays keeps their ids (a feed row, 1 x K values, lives until the
    # buffer's next run).
    calls: dict[int, tuple[Any, ...]] = {}

    def block(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, y: np.ndarray) -> np.ndarray:
        cp = 0 if c is None else native.ptr(c)
        return np.array([native.ptr(a), native.ptr(b), b.strides[0] // 4, cp, native.ptr(y), k, n, code, p0, p1, unit], np.int64)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        y = _out(outputs, (1, n), np.float32)
        key = id(a) if outputs is None else id(y)
        e = calls.get(key)
        if e is None or e[0] is not y or e[1] is not a or e[2] is not b or e[3] is not c:
            if not (a.dtype == np.float32 and a.flags.c_contiguous and y.flags.c_contiguous):
                return fallback(inputs, outputs)
            if e is not None and e[2] is b and e[3] is c:  # the weights of the last call: patch a copy
                args = e[4].copy()
                args[0], args[4] = native.ptr(a), native.ptr(y)
            else:
                if not (
                    b.strides[1] == 4
                    and b.strides[0] % 4 == 0
                    and (c is None or (c.dtype == np.float32 and c.flags.c_contiguous))
                ):
                    return fallback(inputs, outputs)
                args = block(a, b, c, y)
            if len(calls) >= 8:
                calls.clear()
            e = calls[key] = (y, a, b, c, args, native.ptr(args))
        split_native(par, native.JOB_GEMV_N, e[5], units, worth=worth)
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        a, b, y = inputs[0], inputs[1], outputs[0]
        c = inputs[2] if len(inputs) > 2 else None
        if not (native.f32c(a, y) and isinstance(b, np.ndarray) and b.dtype == np.float32 and b.strides[1] == 4):
            return None
        if b.strides[0] % 4 or (c is not None and not native.f32c(c)):
            return None
        return [native.NativeCall(native.JOB_GEMV_N, block(a, b, c, y), units, worth, (a, b, c, y))]

    return native.with_native(run, form)


def _applies_gemv_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    """One row, B row-major, float32, alpha 1 and C absent or a row added as it is."""
    shapes = _gemm_shapes(descs, attrs)
    if shapes is None or shapes[0] != 1 or shapes[1] < 1 or attrs.get("transA", 0) or attrs.get("transB", 0):
        return False
    if descs[0].dtype != "float32" or float(attrs.get("alpha", 1.0)) != 1.0:  # type: ignore[union-attr]
        return False
    c = descs[2] if len(descs) > 2 else None
    return c is None or (float(attrs.get("beta", 1.0)) == 1.0 and c.shape in ((shapes[1],), (1, shapes[1])))


NATIVE_GEMM_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl(
        "gemm_native", build_gemm_native, _applies_gemm_native, offered=native.available, eager=True, native=True, packs=(1,)
    ),
    KernelImpl(
        "gemv_native",
        build_gemv_native,
        _applies_gemv_native,
        offered=native.available,
        eager=True,
        activations=native_rows.EPILOGUES,
        native=True,
    ),
)

# No candidate packs a contiguous (K, N) B for BLAS (a gemm_packed kernel was dropped). It was as
# exact as the others, but BLAS blocks the columns of such an operand differently (main blocks
# and tail), so columns with equal weights could differ by a few ulp, where a transposed view of
# the (N, K) weight gives them bit for bit equal. light/ AlexNet's constant weights make every
# fc8 logit equal (about 3.6e12, an ulp of 262144) and its stored output exactly uniform; a few
# ulp between logits turn into probabilities of 0 after Softmax. onnxruntime keeps them equal,
# so the tuner chooses between numpy and gemm_dot, which read the weight as BLAS's transposed operand.
GEMM_ALGOS: tuple[KernelImpl, ...] = (KernelImpl("gemm_dot", build_gemm_dot, _applies_gemm),)
