"""dwconv.c's two AVX2 forms (eight planes at a time, channel-interleaved, and the flat-phase one)
and its plain loops, called directly: every range split of the planes, with the fused activations
MobileNets and EfficientNets carry, against a numpy reference."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioge.kernels import native

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the C tier")

ACTS = {  # aioge.h's code, its two parameters, and numpy's form
    "none": (0, 0.0, 0.0, lambda v: v),
    "relu": (8, 0.0, 0.0, lambda v: np.maximum(v, 0)),
    "hardswish": (7, 0.0, 0.0, lambda v: v * np.clip(v / 6 + 0.5, 0, 1)),
    "hardsigmoid": (6, 0.2, 0.5, lambda v: np.clip(0.2 * v + 0.5, 0, 1)),
    "clip": (10, 0.0, 6.0, lambda v: np.clip(v, 0, 6)),
    "swish": (5, 1.0, 0.0, lambda v: v / (1 + np.exp(-v))),  # in registers too (mathf.h's sigmoid8)
    "sigmoid": (4, 0.0, 0.0, lambda v: 1 / (1 + np.exp(-v))),
}


def _bits(f: float) -> int:
    return int(np.array(f, np.float32).view(np.int32))


def _reference(x, w, b, mult, k, s, d, pad, oh, ow):  # type: ignore[no-untyped-def]
    n, c, h, wd = x.shape
    xp = np.zeros((n, c, h + 2 * k * d + s * oh, wd + 2 * k * d + s * ow), np.float64)
    xp[:, :, pad : pad + h, pad : pad + wd] = x
    xp = np.repeat(xp, mult, axis=1)
    y = np.zeros((n, c * mult, oh, ow)) + b[None, :, None, None]
    for i in range(k):
        for j in range(k):
            win = xp[:, :, i * d : i * d + s * oh : s, j * d : j * d + s * ow : s]
            y += w[None, :, 0, i, j, None, None] * win
    return y


@pytest.mark.parametrize("simd", [0, 1, 2])
@pytest.mark.parametrize(
    "c, mult, h, k, s, d, act",
    [
        (24, 1, 7, 5, 1, 1, "hardswish"),  # a MobileNetV3 tail: 7x7 planes, 5x5 taps
        (19, 1, 14, 3, 2, 1, "relu"),  # eight-plane groups and a tail of three, stride 2
        (11, 2, 9, 3, 1, 2, "hardsigmoid"),  # two filters a channel, dilated
        (8, 1, 5, 5, 3, 1, "clip"),  # a plane narrower than the kernel, stride 3
        (13, 1, 3, 3, 1, 1, "none"),  # outputs fewer than four a row
        (3, 1, 90, 3, 1, 1, "hardswish"),  # a padded image past L2's budget (92 x 93 8-vectors): the flat form
        (19, 1, 13, 3, 2, 1, "swish"),  # 7x7 outputs: rows of 7, two at a time, the last alone
        (10, 1, 13, 5, 1, 1, "clip"),  # 13x14 outputs: rows in blocks of 7
        (9, 1, 27, 5, 1, 1, "sigmoid"),  # 27x28: four blocks of 7 a row
    ],
)
def test_depthwise_forms_match_numpy_over_every_range_split(simd, c, mult, h, k, s, d, act) -> None:
    rng = np.random.default_rng(c * 100 + h)
    n, pad = 2, (k // 2) * d
    x = rng.uniform(-3, 3, (n, c, h, h + 1)).astype(np.float32)
    w = rng.uniform(-1, 1, (c * mult, 1, k, k)).astype(np.float32)
    b = rng.uniform(-1, 1, c * mult).astype(np.float32)
    oh, ow = (h + 2 * pad - (k - 1) * d - 1) // s + 1, (h + 1 + 2 * pad - (k - 1) * d - 1) // s + 1
    code, a0, a1, ref = ACTS[act]
    want = ref(_reference(x, w, b, mult, k, s, d, pad, oh, ow))
    g = np.array([c, h, h + 1, mult, k, k, s, s, d, d, pad, pad, oh, ow, code, _bits(a0), _bits(a1), 0], np.int64)
    fn = native.lib().aioge_conv_depthwise_f32
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
    planes = n * c * mult
    native.function("aioge_simd_avx2")(simd)
    try:
        for cuts in ([0, planes], [0, 5, 13, planes], [0, 7, 8, planes - 1, planes]):
            cuts = sorted({min(cut, planes) for cut in cuts})
            y = np.full((n, c * mult, oh, ow), np.nan, np.float32)
            for p0, p1 in zip(cuts, cuts[1:]):
                assert fn(native.ptr(x), native.ptr(w), native.ptr(b), native.ptr(y), native.ptr(g), p0, p1) == 0
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5, err_msg=f"simd {simd} cuts {cuts}")
    finally:
        native.function("aioge_simd_avx2")(1)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_eight_plane_form_equals_the_flat_form_to_the_bit(act) -> None:
    """The same multiply-adds in the same order and the activation's same operations (taken in
    registers by the eight-plane form): equal outputs, NaN where the flat form has NaN, -0 too."""
    for h in (9, 7, 14):  # rows of 9 (8 and 8 overlapping), 7 (two rows at a time), 14 (two blocks of 7)
        _eight_planes_equal_flat(act, h)


def _eight_planes_equal_flat(act: str, h: int) -> None:
    rng = np.random.default_rng(7)
    c, k = 21, 3
    x = rng.uniform(-8, 8, (1, c, h, h)).astype(np.float32)
    x[0, 3, 4, 4], x[0, 5, 0, 0] = np.nan, -0.0
    w = rng.uniform(-1, 1, (c, 1, k, k)).astype(np.float32)
    w[5] = 0.0  # channel 5: the bias alone (-0 below), and its NaN-free window
    b = rng.uniform(-1, 1, c).astype(np.float32)
    b[5] = -0.0
    code, a0, a1, _ = ACTS[act]
    g = np.array([c, h, h, 1, k, k, 1, 1, 1, 1, 1, 1, h, h, code, _bits(a0), _bits(a1), 0], np.int64)
    fn = native.lib().aioge_conv_depthwise_f32
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
    got = {}
    try:
        for simd in (1, 2):
            native.function("aioge_simd_avx2")(simd)
            y = np.full((1, c, h, h), 7.0, np.float32)
            assert fn(native.ptr(x), native.ptr(w), native.ptr(b), native.ptr(y), native.ptr(g), 0, c) == 0
            got[simd] = y
    finally:
        native.function("aioge_simd_avx2")(1)
    assert np.isnan(got[1][0, 3, 4, 4])  # every one of these keeps NaN
    np.testing.assert_array_equal(got[1].view(np.int32), got[2].view(np.int32))


@pytest.mark.parametrize("c, n", [(13, 2), (9, 1), (40, 1), (57, 1), (24, 2)])
def test_depthwise_job_split_in_eight_plane_units_matches_onnxruntime(c, n) -> None:
    """The native form's range counts eight-plane units, sixteen-plane ones on the AVX-512 tier
    from 32 planes (planes not a multiple: a short last unit); run whole and split over the C
    helper, it equals onnxruntime's Conv, and the two are the same bits."""
    from aioge.ir.desc import TensorDesc
    from aioge.kernels.conv_algos import build_conv_depthwise_native
    from tests.ops.conftest import ort_run

    rng = np.random.default_rng(c)
    x, w, b = rng.uniform(-1, 1, (n, c, 14, 14)), rng.uniform(-1, 1, (c, 1, 5, 5)), rng.uniform(-1, 1, c)
    x, w, b = (a.astype(np.float32) for a in (x, w, b))
    attrs = {"group": c, "kernel_shape": (5, 5), "pads": (2, 2, 2, 2)}
    (want,) = ort_run("Conv", [x, w, b], attrs)
    run = build_conv_depthwise_native(attrs, {}, [TensorDesc(a.shape, "float32") for a in (x, w, b)], None)
    y = np.full(want.shape, np.nan, np.float32)
    (call,) = native.native_form(run)([x, w, b], [y])
    unit = (16 if native.gemm_tile()[1] >= 64 and n * c >= 32 else 8) if n * c >= 16 else 1  # type: ignore[index]
    assert call.total == -(-n * c // unit)
    native.function("aioge_par_helpers")()
    got = []
    for split in (0, 1):
        y[...] = np.nan
        assert native.par_run()(call.job, call.addr, call.total, split) >= 0  # negative: an error
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5, err_msg=f"split {split}")
        got.append(y.copy())
    np.testing.assert_array_equal(got[0].view(np.int32), got[1].view(np.int32))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(17, 100),
    n=st.integers(1, 2),
    h=st.integers(12, 41),
    ks=st.sampled_from([(3, 1), (3, 2), (5, 2)]),
    act=st.sampled_from(["", "Relu", "Sigmoid"]),
)
def test_depthwise_direct_form_split_in_sixteen_units_matches_onnxruntime(c, n, h, ks, act) -> None:
    """Planes the AVX-512 tier runs one at a time (its direct form: 3x3, and 5x5 stride 2 but for
    Sigmoid and Swish, rows of 12 and up) split in 16 units of planes // 16, not 16-plane units
    (48 planes were 3 units: 2 to one thread); any other geometry or tier keeps its units. Whole
    and split over the C helper the same bits, and onnxruntime's Conv (with its activation)."""
    from aioge.ir.desc import TensorDesc
    from aioge.kernels.conv_algos import _direct16, _geometry, build_conv_depthwise_native
    from tests.ops.conftest import ort_run

    k, s = ks
    rng = np.random.default_rng(c * 1000 + h)
    x, w, b = rng.uniform(-1, 1, (n, c, h, h + 3)), rng.uniform(-1, 1, (c, 1, k, k)), rng.uniform(-1, 1, c)
    x, w, b = (a.astype(np.float32) for a in (x, w, b))
    attrs = {"group": c, "kernel_shape": (k, k), "pads": (k // 2,) * 4, "strides": (s, s)}
    (want,) = ort_run("Conv", [x, w, b], attrs)
    want = {"": want, "Relu": np.maximum(want, 0), "Sigmoid": 1 / (1 + np.exp(-want.astype(np.float64)))}[act]
    attrs |= {"activation": act} if act else {}
    descs = [TensorDesc(a.shape, "float32") for a in (x, w, b)]
    run = build_conv_depthwise_native(attrs, {}, descs, None)
    y = np.full(want.shape, np.nan, np.float32)
    (call,) = native.native_form(run)([x, w, b], [y])
    planes, wide = n * c, native.gemm_tile()[1] >= 64  # type: ignore[index]
    unit = (16 if wide and planes >= 32 else 8) if planes >= 16 else 1
    direct = unit == 16 and _direct16(_geometry(attrs, descs), 4 if act == "Sigmoid" else 8 if act else 0)
    ow, sig = -(-(h + 3) // s), act == "Sigmoid"  # dwconv.c's choice: aioge_conv_depthwise_f32
    assert direct == (unit == 16 and ow >= 12 and ((k == 3 and not (sig and s == 1 and ow < 16)) or (s == 2 and not sig)))
    assert call.total == -(-planes // (max(planes // 16, 1) if direct else unit))
    native.function("aioge_par_helpers")()
    got = []
    for split in (0, 1):
        y[...] = np.nan
        assert native.par_run()(call.job, call.addr, call.total, split) >= 0
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5, err_msg=f"split {split}")
        got.append(y.copy())
    np.testing.assert_array_equal(got[0].view(np.int32), got[1].view(np.int32))
