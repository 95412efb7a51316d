"""Low-precision kernels for GE's precision modes: a matrix op whose node carries
``precision="bf16"`` or ``"fp16"`` (``aioge.compiler.precision`` places them) reads its two
matrix operands rounded to that precision (to nearest even) and accumulates in float32; its
bias is added and its output kept in float32 (GE's ``cube_fp16in_fp32out`` rule).

- ``lowp_gemm``: Gemm (and through ``ops.fused`` FusedGemm and FusedMatMul's rows) in C
  (``csrc/lowp.c``): B rounded and packed once as 16-bit values when it is a constant, A's rows
  rounded at the op's input, float32 FMAs (bf16 with AVX512_BF16: K-pairs on AMX tiles or
  vdpbf16ps, bf16 denormals flushed); numpy (ml_dtypes) when the C tier is absent.
- ``lowp_impls(base)``: any matrix op (Conv, ConvTranspose, MatMul, ...): its float32 kernels,
  tuned as ever, run on operands rounded at its input (a constant weight rounded once).

``candidates_of`` (``aioge.plan.kernel``) offers a node with ``precision`` only these kernels
(their names hold ``lowp``) and a node without it never one of them.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import ml_dtypes
import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, native_rows
from aioge.kernels.contract import KernelImpl, RunFn, is_constant
from aioge.kernels.fused import with_activation
from aioge.kernels.parallel import split_range

__all__ = ["KINDS", "LOWP", "PRECISION_ATTR", "lowp_impls", "round_to"]

PRECISION_ATTR = "precision"
LOWP = "lowp"  # in the name of every low-precision kernel
KINDS = {"bf16": 0, "fp16": 1}  # the C tier's kind codes
_NUMPY = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}
_NR = 16  # csrc/lowp.c's LOWP_NR
_SPLIT_MACS = 1 << 21  # a product of at least this many multiply-adds splits its rows over an idle core


def round_to(x: np.ndarray, precision: str) -> np.ndarray:
    """``x`` (float32) rounded to nearest even in ``precision``, as a new float32 array."""
    fn = native.function("aioge_lowp_round_f32")
    x = np.asarray(x, np.float32)
    if fn is None:
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(_NUMPY[precision]).astype(np.float32)
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    fn(KINDS[precision], native.ptr(x), native.ptr(y), x.size)
    return y


def _lowp(attrs: Mapping[str, Any]) -> str:
    return str(attrs.get(PRECISION_ATTR) or "")


def _plain(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k != PRECISION_ATTR}


class _Rounded:
    """A constant operand rounded once (kept while the kernel holds the very array); any
    other operand rounded at every call."""

    __slots__ = ("kept", "precision")

    def __init__(self, precision: str) -> None:
        self.precision = precision
        self.kept: tuple[Any, Any] = (None, None)  # (the constant, rounded), swapped as one (runs may overlap)

    def __call__(self, a: np.ndarray) -> np.ndarray:
        src, value = self.kept
        if a is src:
            return value
        value = round_to(a, self.precision)
        if is_constant(a):
            value.flags.writeable = False  # a constant too: a kernel may pack it
            self.kept = (a, value)
        return value


def lowp_impls(base: Sequence[KernelImpl]) -> tuple[KernelImpl, ...]:
    """``lowp_round``: every float32 kernel of ``base`` as a candidate (parameter ``base``
    names it) over operands 0 and 1 rounded to the node's precision; ``lowp_round_native``
    the same over the native ones (their forms after a C job that rounds each operand), so
    that tuning records a native alternative as for any op; ``lowp_round_packed_native`` over
    the native ones that pack an operand once (a form only where that operand is a constant,
    which its ``packs`` tells the compiler)."""
    plain = tuple(i for i in base if LOWP not in i.name)
    natives = tuple(i for i in plain if i.native)
    return (
        _rounded(tuple(i for i in plain if not i.native), "lowp_round")
        + _rounded(tuple(i for i in natives if not i.packs), "lowp_round_native")
        + _rounded(tuple(i for i in natives if i.packs), "lowp_round_packed_native")
    )


def _rounded(plain: tuple[KernelImpl, ...], name: str) -> tuple[KernelImpl, ...]:
    if not plain:
        return ()

    def applies(descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> bool:
        return bool(_lowp(attrs)) and any(i.applies(descs, _plain(attrs)) for i in plain)

    def candidates(descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
        out = []
        for impl in plain:
            if impl.applies(descs, _plain(attrs)):  # whether a compile may choose it: the group's ``offered``
                out += [{"base": impl.name, **p} for p in impl.candidates(descs, _plain(attrs)) or [{}]]
        return out

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        impl = next(i for i in plain if i.name == params["base"])
        inner = impl.build(_plain(attrs), {k: v for k, v in params.items() if k != "base"}, ins, outs)
        precision = _lowp(attrs)
        first, second = _Rounded(precision), _Rounded(precision)

        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            return inner([first(inputs[0]), second(inputs[1]), *inputs[2:]], outputs)

        inner_form = native.native_form(inner)
        if inner_form is None:
            return run

        def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
            calls: list[native.NativeCall] = []
            ops: list[Any] = []
            for x, rounded in ((inputs[0], first), (inputs[1], second)):
                if is_constant(x):  # rounded once, itself a constant the inner form may pack
                    ops.append(rounded(x))
                    continue
                if not native.f32c(x):
                    return None
                y = native.aligned_empty(x.shape)
                block = np.array([KINDS[precision], native.ptr(x), native.ptr(y)], np.int64)
                calls.append(native.NativeCall(native.JOB_LOWP_ROUND, block, x.size, x.size >= 1 << 16, (x, y)))
                ops.append(y)
            got = inner_form([*ops, *inputs[2:]], outputs)
            return None if got is None else [*calls, *got]

        return native.with_native(run, form)

    native_ = plain[0].native
    offered = lambda: any(i.offered() for i in plain)  # noqa: E731
    packs = tuple(sorted({p for i in plain for p in i.packs}))
    return (KernelImpl(name, build, applies, candidates, offered, eager=native_, native=native_, packs=packs),)


def _gemm_shapes(descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(M, K, N) of a float32 Gemm the C kernel runs: A not transposed, alpha 1, C absent or
    a row added with beta 1."""
    a, b, c = (*descs, None)[:3]
    if not _lowp(attrs) or a is None or b is None or not (a.static and b.static) or a.rank != 2 or b.rank != 2:
        return None
    if a.dtype != "float32" or b.dtype != "float32" or attrs.get("transA", 0) or float(attrs.get("alpha", 1.0)) != 1.0:
        return None
    m, k = (int(d) for d in a.shape or ())
    kb, n = (int(d) for d in (b.shape or ())[:: -1 if attrs.get("transB", 0) else 1])
    if k != kb:
        return None
    if c is not None and not (float(attrs.get("beta", 1.0)) == 1.0 and c.dtype == "float32" and c.shape in ((n,), (1, n))):
        return None
    return m, k, n


def _build_gemm(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    m, k, n = _gemm_shapes(ins, attrs)  # type: ignore[misc]
    precision, trans_b = _lowp(attrs), bool(attrs.get("transB", 0))
    name, act_params = str(attrs.get("activation", "")), tuple(attrs.get("activation_params", ()))
    gemm, pack, isa = (native.function(f"aioge_lowp_{f}") for f in ("gemm", "pack", "isa"))
    packed: list[Any] = [(None, None)]  # (the B it packed, the panels), swapped as one (runs may overlap)
    kind = 2 if precision == "bf16" and isa is not None and isa() >= 2 else KINDS[precision]  # 2: K-pairs, K to 32s

    def panels(b: np.ndarray) -> np.ndarray:
        src, done = packed[0]
        if src is b:
            return done
        bp = np.empty(((n + _NR - 1) // _NR) * _NR * (-(-k // 32) * 32 if kind == 2 else k), np.uint16)
        sk, sn = (b.strides[1] // 4, b.strides[0] // 4) if trans_b else (b.strides[0] // 4, b.strides[1] // 4)
        native.check(pack(kind, native.ptr(b), sk, sn, k, n, native.ptr(bp), bp.size), "aioge_lowp_pack")
        if is_constant(b):
            packed[0] = (b, bp)
        return bp

    if gemm is None or (name and name not in native_rows.EPILOGUES):
        ra, rb = _Rounded(precision), _Rounded(precision)

        def run_numpy(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            b = rb(inputs[1])
            y = np.matmul(ra(inputs[0]), b.T if trans_b else b)
            if len(inputs) > 2 and inputs[2] is not None:
                y += inputs[2].reshape(n)
            if outputs is not None:
                np.copyto(outputs[0], y)
                return outputs
            return (y,)

        return with_activation(run_numpy, name, act_params, np.float32)
    code, b0, b1 = native_rows.epilogue(name, act_params)
    p0, p1 = (float(v) for v in np.array([b0, b1], np.int32).view(np.float32))

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = np.ascontiguousarray(inputs[0], np.float32), inputs[1]
        if b.strides[0] % 4 or b.strides[1] % 4 or b.dtype != np.float32:
            b = np.ascontiguousarray(b, np.float32)
        c = np.ascontiguousarray(inputs[2], np.float32).reshape(n) if len(inputs) > 2 and inputs[2] is not None else None
        y = outputs[0] if outputs is not None and outputs[0].flags.c_contiguous else np.empty((m, n), np.float32)
        bp = panels(b)
        args = (kind, native.ptr(a), k, native.ptr(bp), bp.size, native.ptr(c) if c is not None else None)
        rest = (native.ptr(y), n, m, k, n, code, p0, p1)

        def rows(lo: int, hi: int) -> None:
            native.check(gemm(*args, *rest, lo, hi), "aioge_lowp_gemm")

        split_range(m, rows, worth=m >= 8 and m * k * n >= _SPLIT_MACS)
        if outputs is not None and y is not outputs[0]:
            np.copyto(outputs[0], y)
            return outputs
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        a, b, y = inputs[0], inputs[1], outputs[0]
        c = inputs[2] if len(inputs) > 2 else None
        if not (native.f32c(a, y) and is_constant(b) and b.dtype == np.float32 and (c is None or native.f32c(c))):
            return None
        if b.strides[0] % 4 or b.strides[1] % 4:
            return None
        bp = panels(b)
        block = [kind, native.ptr(a), k, native.ptr(bp), bp.size, native.ptr(c) if c is not None else 0]
        block += [native.ptr(y), n, m, k, n, code, b0, b1]
        worth = m >= 8 and m * k * n >= _SPLIT_MACS
        return [native.NativeCall(native.JOB_LOWP_GEMM, np.array(block, np.int64), m, worth, (a, bp, c, y))]

    return native.with_native(run, form)


# Gemm's (and FusedGemm's, FusedMatMul's rows') low-precision kernel in C.
LOWP_GEMM = KernelImpl(
    "lowp_gemm",
    _build_gemm,
    lambda descs, attrs: _gemm_shapes(descs, attrs) is not None,
    activations=native_rows.EPILOGUES,
    eager=True,  # packs B on its first call: tuning times a second one
    native=True,
    packs=(1,),
)
