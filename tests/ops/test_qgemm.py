"""The int8 GEMM (``kernels/csrc/qgemm.c`` through ``kernels.quant_linalg.qgemm``) against an
int64 numpy reference and MLAS's float32 requantisation written out here, over shapes,
dtypes and zero points drawn by hypothesis, on the AVX2 tile and the scalar one; its checked
boundary; and the numpy tier that runs without the C build."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioge.kernels import native
from aioge.kernels import quant_linalg as q

needs_tier = pytest.mark.skipif(native.function("aioge_qgemm_rows") is None, reason="the compiled tier is not built")
_DT = {"u8": np.uint8, "s8": np.int8}


def _ints(rng: np.random.Generator, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def _reference(a, za, b, zb, bias, mult, zy, dtype, lo, fbias=None):  # type: ignore[no-untyped-def]
    """Exact int64 product; then float32 acc * mult, clamp, round half to even, + zy (MLAS), or
    for a float32 result float32 acc * mult (+ fbias)."""
    acc = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb.astype(np.int64))
    acc = acc + (0 if bias is None else bias.astype(np.int64))
    if mult is None:
        return acc.astype(np.int32)
    if dtype == np.float32:
        f = acc.astype(np.int32).astype(np.float32) * mult
        return f if fbias is None else f + fbias
    info = np.iinfo(dtype)
    f = acc.astype(np.float32) * mult
    f = np.clip(f, np.float32(max(info.min, lo) - zy), np.float32(info.max - zy))
    return (np.rint(f).astype(np.int64) + zy).astype(dtype)


@pytest.fixture(params=[1, 0], ids=["avx2", "scalar"])
def tile(request):  # type: ignore[no-untyped-def]
    fn = native.function("aioge_qgemm_path")
    if fn is None:
        pytest.skip("the compiled tier is not built")
    best = fn(9)
    if request.param > best:
        pytest.skip("this CPU has no AVX2")
    fn(request.param)
    yield request.param
    fn(best)


@needs_tier
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # the tile is the same for every example
@given(
    m=st.integers(1, 19),
    k=st.integers(1, 70),
    n=st.integers(1, 40),
    a_t=st.sampled_from(["u8", "s8"]),
    b_t=st.sampled_from(["u8", "s8"]),
    out=st.sampled_from(["i32", "u8", "s8", "f32"]),
    per_col=st.booleans(),
    with_bias=st.booleans(),
    relu=st.booleans(),
    weights=st.sampled_from(["full", "narrow", "outliers"]),
    seed=st.integers(0, 2**31),
)
def test_qgemm_equals_the_integer_reference(tile, m, k, n, a_t, b_t, out, per_col, with_bias, relu, weights, seed) -> None:  # type: ignore[no-untyped-def]
    """``narrow``: 7-bit weights about their zero points, which take the u8 x s8 form (vpmaddubsw);
    ``outliers``: the same with a few full-range values, which go to the form's sparse residual."""
    rng = np.random.default_rng(seed)
    adt, bdt = _DT[a_t], _DT[b_t]
    a, b = _ints(rng, adt, (m, k)), _ints(rng, bdt, (k, n))
    za = int(_ints(rng, adt, ()))
    zb = _ints(rng, bdt, (n,) if per_col else (1,))
    outliers = int(k * n * q.RESIDUAL_SHARE) // 2 if weights == "outliers" else 0
    if weights != "full":
        zb = (zb // 2).astype(bdt) if bdt == np.int8 else (zb // 2 + 64).astype(bdt)
        b = (zb.astype(np.int32) + rng.integers(-64, 64, (k, n))).astype(bdt)
        info = np.iinfo(bdt)
        for i in rng.choice(k * n, outliers, replace=False):
            b[i // n, i % n] = rng.choice([info.min, info.max])
    bias = rng.integers(-(2**20), 2**20, n).astype(np.int32) if with_bias else None
    odt = {"i32": np.int32, "u8": np.uint8, "s8": np.int8, "f32": np.float32}[out]
    mult = None if out == "i32" else (rng.random(n if per_col else 1) * 2e-4).astype(np.float32)
    fbias = rng.standard_normal(n).astype(np.float32) if out == "f32" and relu else None
    zy = 0 if out in ("i32", "f32") else int(_ints(rng, odt, ()))
    lo = zy if relu else -128
    packed = q.pack(b, zb)
    assert packed.native and (packed.fmt == 1 or weights == "full")
    assert packed.residual is None or weights != "narrow"  # an outlier may land within the bound: no assertion then
    y = np.empty((m, n), odt)
    q.qgemm(a, za, packed, y, bias, mult, zy, lo if relu and out != "f32" else None, fbias)
    np.testing.assert_array_equal(y, _reference(a, za, b, zb, bias, mult, zy, odt, lo, fbias))


@needs_tier
def test_full_range_weights_take_the_u8s8_form_with_their_few_outliers_as_a_residual(tile) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(3)
    b = np.clip(rng.normal(0, 25, (300, 70)), -127, 127).round().astype(np.int8)  # as a full-range quantizer writes
    b[0, :3], b[1, :3] = 127, [127, -128, 2]  # pairs of k past the bound
    packed = q.pack(b, np.zeros(1, np.int8))
    assert packed.fmt == 1 and packed.residual is not None
    rptr, ridx, rval = packed.residual
    assert 3 <= ridx.size <= b.size * q.RESIDUAL_SHARE and rptr[-1] == ridx.size
    a = _ints(rng, np.uint8, (9, 300))
    a[:, :2] = 255
    y = np.empty((9, 70), np.int32)
    q.qgemm(a, 0, packed, y)
    np.testing.assert_array_equal(y, a.astype(np.int64) @ b.astype(np.int64))
    dense = np.clip(rng.normal(0, 60, (300, 70)), -127, 127).round().astype(np.int8)  # too many large pairs
    assert q.pack(dense, None).fmt == 0


@needs_tier
@pytest.mark.parametrize("k", [27, 28])  # 28, u8 x s8 form: full blocks of A's rows read in place
@pytest.mark.parametrize("narrow", [False, True])
def test_qgemm_reads_strided_rows_and_writes_into_wider_rows(tile, k, narrow) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    a = _ints(rng, np.uint8, (9, 40))[:, 3 : 3 + k]  # rows 40 apart
    b = _ints(rng, np.int8, (60, 11)).T[:, :k].T  # B (k, 11) read through strides
    if narrow:
        b = b // 2
    y = np.zeros((9, 20), np.int32)
    packed = q.pack(b, None)
    assert packed.fmt == int(narrow)
    q.qgemm(a, 7, packed, y[:, 4:15])
    np.testing.assert_array_equal(y[:, 4:15], _reference(a, 7, b, np.zeros(1, np.int8), None, None, 0, np.int32, 0))
    assert not y[:, :4].any() and not y[:, 15:].any()


@needs_tier
def test_the_u8s8_form_is_taken_only_where_no_int16_sum_can_saturate() -> None:
    ok = np.array([[64, -64, 0], [64, -64, 0]], np.int8)  # per column, |b0| + |b1| <= 128
    assert q.pack(ok, None).fmt == 1
    assert q.pack(np.array([[64], [65]], np.int8), None).fmt == 0  # 255 * 129 > 32767
    assert q.pack(np.array([[200], [0]], np.uint8), np.array([0], np.uint8)).fmt == 0  # not an int8
    a = np.full((1, 2), 255, np.uint8)
    for b in (np.array([[64], [64]], np.int8), np.array([[127], [127]], np.int8)):
        y = np.empty((1, 1), np.int32)
        q.qgemm(a, 0, q.pack(b, None), y)
        assert y[0, 0] == 255 * int(b.astype(np.int32).sum())  # exact on either form


@needs_tier
def test_ties_round_half_to_even() -> None:
    a = np.array([[1], [3], [5], [-1], [-3]], np.int8)
    b = np.array([[1]], np.int8)
    y = np.empty((5, 1), np.int8)
    q.qgemm(a, 0, q.pack(b, None), y, None, np.array([0.5], np.float32), 0)
    assert y.reshape(-1).tolist() == [0, 2, 2, 0, -2]


@needs_tier
def test_the_boundary_refuses_a_geometry_its_buffers_do_not_hold() -> None:
    packed = q.pack(np.ones((4, 4), np.int8), None)
    a, y = np.ones((4, 4), np.uint8), np.empty((4, 4), np.int32)
    geo = np.array(
        [
            native.ptr(a),
            native.ptr(packed.data),
            0,
            0,
            native.ptr(y),
            4,
            4,
            4,
            4,
            4,
            0,
            0,
            0,
            0,
            1,
            packed.data.size - 1,
            16,
            16,
            -128,
            packed.fmt,
            native.ptr(packed.colsum),
            0,
            0,
            0,
            0,
        ],
        np.int64,
    )
    assert native.function("aioge_qgemm_rows")(native.ptr(geo), 0, 1) == -2  # a short packed B
    geo[15] = packed.data.size
    geo[17] = 15  # y one value short
    assert native.function("aioge_qgemm_rows")(native.ptr(geo), 0, 1) == -2
    geo[17] = 16
    assert native.function("aioge_qgemm_rows")(native.ptr(geo), 0, 1) == 0
    np.testing.assert_array_equal(y, np.full((4, 4), 4))


@needs_tier
def test_the_vnni_tile_is_chosen_only_where_the_cpu_has_it() -> None:
    fn = native.function("aioge_qgemm_path")
    flags = native.cpu_flags() or frozenset()
    best = fn(9)
    assert best == (2 if {"avx512_vnni", "avx512vl"} <= flags else 1 if "avx2" in flags else 0)
    assert fn(0) == 0 and fn(best) == best


def test_without_the_tier_qgemm_and_the_ops_run_numpy(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(native, "function", lambda *a, **k: None)
    monkeypatch.setattr(native, "par_run", lambda: None)
    rng = np.random.default_rng(4)
    a, b = _ints(rng, np.uint8, (5, 13)), _ints(rng, np.int8, (13, 6))
    zb = _ints(rng, np.int8, (6,))
    packed = q.pack(b, zb)
    assert not packed.native
    mult = np.full(6, 3e-3, np.float32)
    y = np.empty((5, 6), np.uint8)
    q.qgemm(a, 9, packed, y, None, mult, 100)
    np.testing.assert_array_equal(y, _reference(a, 9, b, zb, None, mult, 100, np.uint8, -128))
    run = q.build_qlinear("QLinearMatMul")({}, {}, None, None)
    args = [a, np.float32(0.1), np.uint8(9), b, np.full(6, 0.03, np.float32), zb, np.float32(0.5), np.uint8(100)]
    (got,) = run(args, None)
    np.testing.assert_array_equal(got, q.qlinear_matmul(*[np.asarray(x) for x in args]))


@needs_tier
@pytest.mark.parametrize("case", ["random", "ties", "zeros", "positive"])
def test_the_c_quantisation_of_a_equals_dynamic_quantize_linear(tile, case) -> None:  # type: ignore[no-untyped-def]
    """DynamicQuantizeMatMul's A through C (range, then rint(x / scale) + zero, saturated) equals
    DynamicQuantizeLinear's numpy kernel bit for bit: ties to even, both ends, a tail past 8."""
    from aioge.kernels.convert import dynamic_quantize_linear

    rng = np.random.default_rng(5)
    x = {
        "random": rng.standard_normal((3, 37)) * 4,
        "ties": np.arange(-256, 255).reshape(1, -1) * 0.0625,  # scale 0.125: every odd x / scale a half
        "zeros": np.zeros((2, 9)),
        "positive": rng.random((5, 13)) + 1,  # the range's low end is 0, not min(x)
    }[case].astype(np.float32)
    got, want = q._quantize_a(x, True), dynamic_quantize_linear(x)
    assert case != "ties" or (float(got[1]), int(got[2])) == (0.125, 128)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@settings(max_examples=40, deadline=None)
@given(
    batch=st.sampled_from([(), (1,), (3,), (2, 2)]),
    m=st.integers(1, 9),
    k=st.sampled_from([1, 5, 64, 258, 259, 300]),
    n=st.integers(1, 9),
    a_t=st.sampled_from(["u8", "s8"]),
    b_t=st.sampled_from(["u8", "s8"]),
    y_t=st.sampled_from(["u8", "s8"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_a_product_of_two_activations_equals_the_integer_reference(batch, m, k, n, a_t, b_t, y_t, seed) -> None:  # type: ignore[no-untyped-def]
    """QLinearMatMul with a fed (not constant) B, batched as attention's Q·K^T and P·V: the
    float32 GEMM of the centred integers where every partial sum is exact (K up to 258 at
    any zero points, further when they sit mid-range), the integer path past it; both equal
    the int64 reference requantised as MLAS does, extreme operands and zero points included."""
    rng = np.random.default_rng(seed)
    da, db, dy = _DT[a_t], _DT[b_t], _DT[y_t]
    a, b = _ints(rng, da, (*batch, m, k)), _ints(rng, db, (*batch, k, n))
    if seed % 3 == 0:  # every operand at its extreme: the largest partial sums
        a[...], b[...] = np.iinfo(da).max, np.iinfo(db).min
    za, zb, zy = (_ints(rng, d, ()) for d in (da, db, dy))
    if seed % 3 == 0:
        za, zb = np.asarray(np.iinfo(da).min, da), np.asarray(np.iinfo(db).max, db)
    sa, sb, sy = (np.float32(rng.uniform(1e-3, 0.1)) for _ in range(3))
    mult = q.multiplier(sa, sb, y_scale=sy)
    want = np.stack([
        _reference(a2, int(za), b2, zb, None, mult, int(zy), dy, -128)
        for a2, b2 in zip(a.reshape(-1, m, k), b.reshape(-1, k, n))
    ]).reshape(*batch, m, n)  # fmt: skip
    run = q.build_qlinear("QLinearMatMul")({}, {}, None, None)
    (got,) = run([a, sa, za, b, sb, zb, sy, zy], None)
    assert got.dtype == dy
    np.testing.assert_array_equal(got, want)
    fast = q._activation_matmul(a, za, b, zb, mult, int(zy), dy)
    ra, rb = (max(int(z) - np.iinfo(d).min, np.iinfo(d).max - int(z)) for z, d in ((za, da), (zb, db)))
    assert (fast is None) == (k * ra * rb >= 1 << 24)
    if fast is not None:
        np.testing.assert_array_equal(fast, want)


@needs_tier
@pytest.mark.parametrize("shape", [(2, 37, 5, 7), (1, 16, 4, 8), (3, 64, 33), (1, 5, 2, 2, 3), (1, 1, 1)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_the_c_channel_transpose_equals_numpys(shape, dtype) -> None:  # type: ignore[no-untyped-def]
    """QLinearConv's NCHW -> NHWC and back by the C tier's 16 x 16 byte blocks (and the scalar
    edges): numpy's moveaxis, into a given output buffer too."""
    x = _ints(np.random.default_rng(len(shape)), dtype, shape)
    last = q._swap_channels(x, True, last=True)
    np.testing.assert_array_equal(last, np.moveaxis(x, 1, -1))
    dst = np.empty(shape, dtype)
    back = q._swap_channels(last, True, last=False, dst=dst)
    assert back is dst
    np.testing.assert_array_equal(back, x)
    assert native.function("aioge_transpose8")(native.ptr(x), -1, 1, 1, native.ptr(dst)) < 0


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(1,), (3, 5), (2, 3, 7, 9), (1, 40)]),
    dt=st.sampled_from(["u8", "s8"]),
    broadcast=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_qdq_add_rounds_as_the_three_nodes_it_stands_for(shape, dt, broadcast, seed) -> None:  # type: ignore[no-untyped-def]
    """QdqAdd (C for equal shapes, numpy when broadcasting or without the tier) equals
    DequantizeLinear, Add, QuantizeLinear in float32 step by step: (x - z) * s, the sum,
    rint(v / sc) + zc saturated; ties and saturation included (the scales are drawn small and large)."""
    rng = np.random.default_rng(seed)
    d = _DT[dt]
    a = _ints(rng, d, shape)
    b = _ints(rng, d, (1,) * (len(shape) - 1) + (shape[-1],) if broadcast else shape)
    za, zb, zc = (_ints(rng, d, ()) for _ in range(3))
    sa, sb, sc = (np.float32(v) for v in rng.choice([0.5, 0.25, 0.01, 0.37, 2.0], 3))
    dq = [(x.astype(np.float32) - np.float32(z)) * s for x, z, s in ((a, za, sa), (b, zb, sb))]
    info = np.iinfo(d)
    want = np.clip(np.rint((dq[0] + dq[1]) / sc) + np.float32(zc), info.min, info.max).astype(d)
    got = q.qdq_add(a, sa, za, b, sb, zb, sc, zc)
    assert got.dtype == d and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
