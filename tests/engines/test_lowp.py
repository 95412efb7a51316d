"""The bf16 / fp16 matrix kernels (csrc/lowp.c, kernels/lowp.py) against a numpy reference that
rounds the operands with ml_dtypes and accumulates exactly: equal up to float32 accumulation
order, for random shapes (odd sizes, tails of the 4-row and 16-column tiles), on the AVX2 path,
the scalar path and without the C tier."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.errors import ExecutionError
from aioge.ir.desc import TensorDesc
from aioge.kernels import lowp, native

_NP = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}
needs_c = pytest.mark.skipif(native.function("aioge_lowp_gemm") is None, reason="the compiled tier is not built")


def _gemm(precision: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_b: bool, act: str = "") -> np.ndarray:
    attrs: dict[str, Any] = {"precision": precision, "transB": int(trans_b)}
    if act:
        attrs.update(activation=act, activation_params=())
    m, n = a.shape[0], b.shape[0] if trans_b else b.shape[1]
    descs = [TensorDesc.of(a.shape, "float32"), TensorDesc.of(b.shape, "float32")]
    if c is not None:
        descs.append(TensorDesc.of(c.shape, "float32"))
    assert lowp.LOWP_GEMM.applies(descs, attrs)
    run = lowp.LOWP_GEMM.build(attrs, {}, descs, [TensorDesc.of((m, n), "float32")])
    b.flags.writeable = False  # a constant weight: packed once
    y = np.full((m, n), np.nan, np.float32)
    run([a, b] + ([c] if c is not None else []), [y])
    again = run([a, b] + ([c] if c is not None else []), None)[0]
    assert np.array_equal(y, again, equal_nan=True), "the packed weight is reused and gives the same result"
    return y


def _check(precision: str, m: int, k: int, n: int, trans_b: bool, bias: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32) if bias else None
    y = _gemm(precision, a, b, c, trans_b)
    r = _NP[precision]
    bb = b.T if trans_b else b
    want = a.astype(r).astype(np.float64) @ bb.astype(r).astype(np.float64) + (0.0 if c is None else c)
    bound = (k + 2) * 2.0**-24 * (np.abs(a) @ np.abs(bb) + (0.0 if c is None else np.abs(c))) + 1e-30
    assert np.all(np.abs(y - want) <= bound), (precision, m, k, n, float(np.max(np.abs(y - want) / bound)))


_SHAPES = dict(
    precision=st.sampled_from(["bf16", "fp16"]),
    m=st.integers(1, 11),
    k=st.integers(1, 70),
    n=st.integers(1, 40),
    trans_b=st.booleans(),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)


@needs_c
@settings(max_examples=60, deadline=None)
@given(**_SHAPES)
def test_c_gemm_equals_the_rounded_reference(
    precision: str, m: int, k: int, n: int, trans_b: bool, bias: bool, seed: int
) -> None:
    _check(precision, m, k, n, trans_b, bias, seed)


@needs_c
@settings(max_examples=25, deadline=None)
@given(**_SHAPES)
def test_scalar_path_equals_the_rounded_reference(
    precision: str, m: int, k: int, n: int, trans_b: bool, bias: bool, seed: int
) -> None:
    native.function("aioge_lowp_force_scalar")(1)
    try:
        _check(precision, m, k, n, trans_b, bias, seed)
    finally:
        native.function("aioge_lowp_force_scalar")(0)


def test_numpy_fallback_equals_the_rounded_reference(numpy_kernels: None) -> None:
    assert native.function("aioge_lowp_gemm") is None
    for i, (m, k, n) in enumerate([(1, 1, 1), (5, 33, 17), (9, 64, 3)]):
        for precision in ("bf16", "fp16"):
            _check(precision, m, k, n, bool(i % 2), bool(i), i)


@needs_c
def test_the_vector_path_is_chosen_here_and_matches_the_scalar_one_with_an_activation() -> None:
    if not {"avx2", "fma", "f16c"} <= (native.cpu_flags() or frozenset()):
        pytest.skip("this CPU has no AVX2+FMA+F16C")
    dot = "avx512_bf16" in (native.cpu_flags() or frozenset()) and native.tier() == "avx512"
    assert native.function("aioge_lowp_isa")() >= 2 if dot else native.function("aioge_lowp_isa")() == 1
    rng = np.random.default_rng(1)
    a, b, c = rng.standard_normal((7, 45)).astype(np.float32), rng.standard_normal((45, 19)).astype(np.float32), None
    vec = _gemm("bf16", a, b, c, False, "Relu")
    native.function("aioge_lowp_force_scalar")(1)
    try:
        scalar = _gemm("bf16", a, b.copy(), c, False, "Relu")
    finally:
        native.function("aioge_lowp_force_scalar")(0)
    assert (vec >= 0).all() and np.allclose(vec, scalar, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_rounding_is_ml_dtypes_round_to_nearest_even_bit_for_bit(precision: str) -> None:
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate(
        [
            bits.view(np.float32),
            np.array(
                [
                    0.0,
                    -0.0,
                    np.inf,
                    -np.inf,
                    65504.0,
                    65519.996,
                    65520.0,
                    1e-8,
                    1 + 2**-8,
                    2**-25,
                    3 * 2**-25,
                    2**-14 * (1 - 2**-12),
                    -(2**-24) * 1.5,
                ],
                np.float32,
            ),
        ]
    )
    got = lowp.round_to(x, precision)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(_NP[precision]).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@needs_c
def test_a_short_packed_weight_is_refused_before_anything_is_written() -> None:
    gemm = native.function("aioge_lowp_gemm")
    a, y = np.ones((4, 8), np.float32), np.full((4, 20), 7.0, np.float32)
    bp = np.zeros(16 * 8, np.uint16)  # one panel: N=20 needs two
    code = gemm(0, native.ptr(a), 8, native.ptr(bp), bp.size, None, native.ptr(y), 20, 4, 8, 20, 0, 0.0, 0.0, 0, 4)
    with pytest.raises(ExecutionError, match="geometry"):
        native.check(code, "aioge_lowp_gemm")
    assert (y == 7.0).all()


@needs_c
def test_no_memory_for_the_rounded_rows_is_an_error_and_nothing_is_written() -> None:
    gemm = native.function("aioge_lowp_gemm")
    a, y = np.ones((4, 8), np.float32), np.full((4, 16), 7.0, np.float32)
    bp = np.zeros(16 * 8, np.uint16)
    native.fail_alloc(1)
    try:
        code = gemm(0, native.ptr(a), 8, native.ptr(bp), bp.size, None, native.ptr(y), 16, 4, 8, 16, 0, 0.0, 0.0, 0, 4)
    finally:
        native.fail_alloc(0)
    with pytest.raises(ExecutionError, match="no memory"):
        native.check(code, "aioge_lowp_gemm")
    assert (y == 7.0).all()


def _dot(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, m0: int, m1: int, y: np.ndarray) -> None:
    """Rows [m0, m1) of kind 2 (bf16 as K-pairs, K padded to 32) into y."""
    (m, k), n = a.shape, b.shape[1]
    bp = np.empty(-(-n // 16) * 16 * -(-k // 32) * 32, np.uint16)
    native.check(native.function("aioge_lowp_pack")(2, native.ptr(b), n, 1, k, n, native.ptr(bp), bp.size), "pack")
    cp = native.ptr(c) if c is not None else None
    code = native.function("aioge_lowp_gemm")(
        2, native.ptr(a), k, native.ptr(bp), bp.size, cp, native.ptr(y), n, m, k, n, 0, 0.0, 0.0, m0, m1
    )
    native.check(code, "aioge_lowp_gemm")


@needs_c
@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.integers(1, 90),
    n=st.integers(1, 70),
    split=st.integers(0, 40),
    bias=st.booleans(),
    tiny=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_bf16_dot_kind_on_amx_avx512_bf16_and_plain_c_whole_and_split(
    m: int, k: int, n: int, split: int, bias: bool, tiny: bool, seed: int
) -> None:
    """Kind 2 (what bf16 runs on where the CPU has AVX512_BF16): AMX tiles (force 0, where the OS
    grants them), vdpbf16ps (force 2), plain C (force 1); odd K (a zero pair), rows past one
    16-row tile pair and the 8-row blocks, a row split anywhere. AMX and vdpbf16ps flush bf16
    denormals: ``tiny`` puts some in A, and the bound allows K of them per output."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    if tiny:
        a[rng.random((m, k)) < 0.2] = 3e-39
    b, c = rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32) if bias else None
    r = ml_dtypes.bfloat16
    want = a.astype(r).astype(np.float64) @ b.astype(r).astype(np.float64) + (0.0 if c is None else c)
    bound = (k + 2) * 2.0**-24 * (np.abs(a) @ np.abs(b) + (0.0 if c is None else np.abs(c))) + k * 2.0**-126 * 4 * np.abs(b).max()
    s = min(split, m)
    force = native.function("aioge_lowp_force_scalar")
    try:
        for f in (0, 2, 1):
            force(f)
            whole, parts = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
            _dot(a, b, c, 0, m, whole)
            _dot(a, b, c, 0, s, parts)
            _dot(a, b, c, s, m, parts)
            for y in (whole, parts):
                assert np.all(np.abs(y - want) <= bound), (f, m, k, n, s, float(np.max(np.abs(y - want) / bound)))
    finally:
        force(0)


@needs_c
def test_bf16_runs_the_dot_kind_where_the_cpu_has_avx512_bf16_and_amx_where_granted() -> None:
    isa, flags = native.function("aioge_lowp_isa"), native.cpu_flags() or frozenset()
    if native.tier() != "avx512" or "avx512_bf16" not in flags:
        assert isa() <= 1
        pytest.skip("no AVX512_BF16 in this tier or CPU")
    assert isa() in (2, 3)  # 3: AMX-BF16, the tile state granted by the OS
    native.function("aioge_lowp_force_scalar")(2)
    try:
        assert isa() == 2
    finally:
        native.function("aioge_lowp_force_scalar")(0)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((33, 65)).astype(np.float32), rng.standard_normal((65, 40)).astype(np.float32)
    y = _gemm("bf16", a, b, None, False, "Relu")  # through the kernel: kind 2, its epilogue
    want = np.maximum(a.astype(ml_dtypes.bfloat16).astype(np.float64) @ b.astype(ml_dtypes.bfloat16).astype(np.float64), 0)
    assert np.allclose(y, want, rtol=1e-5, atol=1e-4)
