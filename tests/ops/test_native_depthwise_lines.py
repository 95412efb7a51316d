"""dwconv.c's line form (rows of the output plane from the stride phases, four at a time) and the
AVX-512 direct form (rows straight from the input plane): forced (``aioge_simd_avx2(5)``, ``(6)``) and as chosen, against onnxruntime's Conv and activation nodes
over random geometries; split over the C helper thread equal to whole; without the C tier."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import native

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the C tier")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper = onnx.helper

# aioge's activation name -> (its two parameters, the onnx nodes after the Conv's output "c")
ACTS: dict[str, tuple[float, float, list]] = {
    "": (0.0, 0.0, [("Identity", ["c"], {})]),
    "Relu": (0.0, 0.0, [("Relu", ["c"], {})]),
    "Clip": (0.0, 6.0, [("Clip", ["c", "lo", "hi"], {})]),  # ReLU6
    "HardSwish": (0.0, 0.0, [("HardSwish", ["c"], {})]),
    "HardSigmoid": (0.2, 0.5, [("HardSigmoid", ["c"], {"alpha": 0.2, "beta": 0.5})]),
    "Sigmoid": (0.0, 0.0, [("Sigmoid", ["c"], {})]),
    "Swish": (1.0, 0.0, [("Sigmoid", ["c"], {}, "s"), ("Mul", ["c", "s"], {})]),
    "LeakyRelu": (0.1, 0.0, [("LeakyRelu", ["c"], {"alpha": 0.1})]),
    "Tanh": (0.0, 0.0, [("Tanh", ["c"], {})]),
}


def _bits(f: float) -> int:
    return int(np.array(f, np.float32).view(np.int32))


def _ort(x, w, b, act, k, s, d, pads):  # type: ignore[no-untyped-def]
    """onnxruntime's Conv (group = channels) then the activation's nodes."""
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["c"], group=w.shape[0] // (w.shape[0] // x.shape[1]), kernel_shape=k, strides=s,
        dilations=d, pads=pads,
    )  # fmt: skip
    nodes = [conv]
    for i, (op, ins, attrs, *out) in enumerate(ACTS[act][2]):
        last = i == len(ACTS[act][2]) - 1
        nodes.append(helper.make_node(op, ins, ["y" if last else out[0]], **attrs))
    f = onnx.TensorProto.FLOAT
    inits = [helper.make_tensor("lo", f, [], [0.0]), helper.make_tensor("hi", f, [], [6.0])]
    ins = [helper.make_tensor_value_info(n, f, a.shape) for n, a in (("x", x), ("w", w), ("b", b))]
    graph = helper.make_graph(nodes, "dw", ins, [helper.make_tensor_value_info("y", f, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "w": w, "b": b})[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(1, 11),
    mult=st.sampled_from([1, 1, 2]),
    h=st.integers(1, 29),
    wd=st.integers(1, 41),
    k=st.sampled_from([(3, 3), (5, 5), (3, 5)]),
    s=st.sampled_from([1, 2]),
    d=st.sampled_from([(1, 1), (1, 1), (2, 1), (1, 2)]),
    pads=st.tuples(*[st.integers(0, 4)] * 4),
    act=st.sampled_from(sorted(ACTS)),
    seed=st.integers(0, 2**16),
)
def test_line_form_matches_onnxruntime(c, mult, h, wd, k, s, d, pads, act, seed) -> None:
    """Odd and even plane sizes, rows narrower than a vector, stride 1 and 2, any pads and
    dilation, every fused activation; forced, as chosen and split at every few planes."""
    kh, kw = k
    oh, ow = (h + pads[0] + pads[2] - (kh - 1) * d[0] - 1) // s + 1, (wd + pads[1] + pads[3] - (kw - 1) * d[1] - 1) // s + 1
    assume(oh >= 1 and ow >= 1)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, (1, c, h, wd)).astype(np.float32)
    w = rng.uniform(-1, 1, (c * mult, 1, kh, kw)).astype(np.float32)
    b = rng.uniform(-1, 1, c * mult).astype(np.float32)
    want = _ort(x, w, b, act, k, (s, s), d, pads)
    a0, a1, _ = ACTS[act]
    g = [c, h, wd, mult, kh, kw, s, s, d[0], d[1], pads[0], pads[1], oh, ow, native.ACT[act], _bits(a0), _bits(a1), 0]
    geo = np.array(g, np.int64)
    fn = native.lib().aioge_conv_depthwise_f32
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
    planes = c * mult
    ys: dict[int, np.ndarray] = {}
    try:
        for simd, cuts in (
            (5, [0, planes]),
            (5, [0, 3, 5, planes]),
            (6, [0, planes]),
            (6, [0, 2, planes]),
            (1, [0, planes]),
            (1, [0, 1, planes]),
            (11, [0, planes]),  # as chosen, the direct form's last 2 or 3 rows one at a time (the former blocks)
        ):
            native.function("aioge_simd_avx2")(simd)
            y = np.full(want.shape, np.nan, np.float32)
            cuts = sorted({min(cut, planes) for cut in cuts})
            for p0, p1 in zip(cuts, cuts[1:]):
                assert fn(native.ptr(x), native.ptr(w), native.ptr(b), native.ptr(y), native.ptr(geo), p0, p1) == 0
            np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5, err_msg=f"simd {simd} cuts {cuts}")
            ys[simd] = ys.get(simd, y)
    finally:
        native.function("aioge_simd_avx2")(1)
    # a row's sums the same operations in the same order, however many rows a block
    np.testing.assert_array_equal(ys[1].view(np.int32), ys[11].view(np.int32))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(16, 41),
    mult=st.sampled_from([1, 1, 1, 2]),
    n=st.sampled_from([1, 1, 2]),
    h=st.integers(1, 17),
    wd=st.integers(1, 20),
    k=st.sampled_from([(3, 3), (5, 5), (3, 5), (1, 1)]),
    s=st.sampled_from([1, 2]),
    d=st.sampled_from([(1, 1), (1, 1), (2, 1), (1, 2)]),
    pads=st.tuples(*[st.integers(0, 3)] * 4),
    act=st.sampled_from(sorted(ACTS)),
    seed=st.integers(0, 2**16),
)
def test_plane_group_forms_match_onnxruntime_and_their_former_copies_in(c, mult, n, h, wd, k, s, d, pads, act, seed) -> None:
    """The 16-plane form (``aioge_simd_avx2(3)``; the 8-plane one on AVX2): a group of 16 (8)
    channels of one image takes its filters by transposes and, rows under 16, its planes as one
    flat run; ``(10)`` the former copies in (a division and scalar copies a plane, a transpose a
    row). Planes past one image and two filters a channel take the former path: the same bits
    either way, whole or split at any plane (mid-group, at an image's boundary), and
    onnxruntime's values."""
    kh, kw = k
    oh, ow = (h + pads[0] + pads[2] - (kh - 1) * d[0] - 1) // s + 1, (wd + pads[1] + pads[3] - (kw - 1) * d[1] - 1) // s + 1
    assume(oh >= 1 and ow >= 1)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, (n, c, h, wd)).astype(np.float32)
    w = rng.uniform(-1, 1, (c * mult, 1, kh, kw)).astype(np.float32)
    b = rng.uniform(-1, 1, c * mult).astype(np.float32)
    want = _ort(x, w, b, act, k, (s, s), d, pads)
    a0, a1, _ = ACTS[act]
    g = [c, h, wd, mult, kh, kw, s, s, d[0], d[1], pads[0], pads[1], oh, ow, native.ACT[act], _bits(a0), _bits(a1), 0]
    geo = np.array(g, np.int64)
    fn = native.lib().aioge_conv_depthwise_f32
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
    planes = n * c * mult
    ys = []
    try:
        for simd, cuts in (
            (3, [0, planes]),
            (3, [0, 7, c * mult, c * mult + 3, planes]),
            (10, [0, planes]),
            (10, [0, 9, planes]),
        ):
            native.function("aioge_simd_avx2")(simd)
            y = np.full(want.shape, np.nan, np.float32)
            cuts = sorted({min(cut, planes) for cut in cuts})
            for p0, p1 in zip(cuts, cuts[1:]):
                assert fn(native.ptr(x), native.ptr(w), native.ptr(b), native.ptr(y), native.ptr(geo), p0, p1) == 0
            np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5, err_msg=f"simd {simd} cuts {cuts}")
            ys.append(y)
    finally:
        native.function("aioge_simd_avx2")(1)
    for y in ys[1:]:
        np.testing.assert_array_equal(y.view(np.int32), ys[0].view(np.int32))


@pytest.mark.parametrize("k, s, act", [(3, 1, "Swish"), (5, 2, "HardSwish")])
def test_line_form_split_over_the_helper_equals_whole_and_onnxruntime(k, s, act) -> None:
    """A plane past the eight-plane form's budget (96x97), through the native kernel's program
    form: the C helper's split equals the whole run to the bit, and both onnxruntime."""
    from aioge.kernels.conv_algos import build_conv_depthwise_native

    rng = np.random.default_rng(k)
    c, pad = 20, k // 2
    x = rng.uniform(-2, 2, (1, c, 96, 97)).astype(np.float32)
    w, b = rng.uniform(-1, 1, (c, 1, k, k)).astype(np.float32), rng.uniform(-1, 1, c).astype(np.float32)
    want = _ort(x, w, b, act, (k, k), (s, s), (1, 1), (pad,) * 4)
    attrs = {"group": c, "kernel_shape": (k, k), "pads": (pad,) * 4, "strides": (s, s), "activation": act}
    attrs["activation_params"] = (1.0,) if act == "Swish" else ()
    run = build_conv_depthwise_native(attrs, {}, [TensorDesc(a.shape, "float32") for a in (x, w, b)], None)
    ys = []
    native.function("aioge_par_helpers")()
    for split in (0, 1):
        y = np.full(want.shape, np.nan, np.float32)
        (call,) = native.native_form(run)([x, w, b], [y])
        assert call.worth
        assert native.par_run()(call.job, call.addr, call.total, split) >= 0
        ys.append(y)
    np.testing.assert_array_equal(ys[0].view(np.int32), ys[1].view(np.int32))
    np.testing.assert_allclose(ys[0], want, rtol=2e-5, atol=2e-5)
    (got,) = run([x, w, b], None)  # the step path: the same C job
    np.testing.assert_array_equal(got.view(np.int32), ys[0].view(np.int32))


def test_without_the_tier_the_depthwise_kernel_runs_numpy(monkeypatch) -> None:
    from aioge.kernels.conv_algos import build_conv_depthwise_native

    monkeypatch.setattr(native, "par_run", lambda: None)
    rng = np.random.default_rng(5)
    c = 6
    x = rng.uniform(-2, 2, (1, c, 33, 35)).astype(np.float32)
    w, b = rng.uniform(-1, 1, (c, 1, 3, 3)).astype(np.float32), rng.uniform(-1, 1, c).astype(np.float32)
    want = _ort(x, w, b, "HardSwish", (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    attrs = {"group": c, "kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "activation": "HardSwish"}
    run = build_conv_depthwise_native(attrs, {}, [TensorDesc(a.shape, "float32") for a in (x, w, b)], None)
    assert native.native_form(run) is None  # no program form without the tier
    (got,) = run([x, w, b], None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("h", "wd", "pads", "act"),
    [(96, 97, (1, 1, 1, 1), "Swish"), (91, 93, (0, 1, 1, 0), "HardSwish"), (113, 90, (1, 0, 0, 1), "")],
)
def test_a_3x3_stride_2_conv_past_the_eight_plane_budget_takes_the_line_form(h, wd, pads, act) -> None:
    """As chosen (``aioge_simd_avx2(1)``), a 3x3 stride-2 plane too big for eight at a time
    (EfficientNet's and MobileNetV3's 112x112 ones) runs the direct form, 16 lanes wide with
    AVX-512, else on rows of 48 and up 8 lanes wide (else the line form): the forced one's bits,
    and onnxruntime's values."""
    rng = np.random.default_rng(h)
    c = 5
    x = rng.uniform(-4, 4, (1, c, h, wd)).astype(np.float32)
    w, b = rng.uniform(-1, 1, (c, 1, 3, 3)).astype(np.float32), rng.uniform(-1, 1, c).astype(np.float32)
    want = _ort(x, w, b, act, (3, 3), (2, 2), (1, 1), pads)
    oh, ow = (h + pads[0] + pads[2] - 3) // 2 + 1, (wd + pads[1] + pads[3] - 3) // 2 + 1
    a0, a1, _ = ACTS[act]
    geo = np.array([c, h, wd, 1, 3, 3, 2, 2, 1, 1, pads[0], pads[1], oh, ow, native.ACT[act], _bits(a0), _bits(a1), 0], np.int64)
    fn = native.lib().aioge_conv_depthwise_f32
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
    ys = []
    try:
        for simd in (5, 1, 6, 14):
            native.function("aioge_simd_avx2")(simd)
            y = np.full(want.shape, np.nan, np.float32)
            assert fn(native.ptr(x), native.ptr(w), native.ptr(b), native.ptr(y), native.ptr(geo), 0, c) == 0
            ys.append(y)
    finally:
        native.function("aioge_simd_avx2")(1)
    # the AVX-512 tier's direct form (6), else on rows of 48 and up the AVX2 direct form (14), else the line form
    forced = ys[2] if (native.gemm_tile() or (0, 0))[1] >= 64 else ys[3] if ow >= 48 else ys[0]
    np.testing.assert_array_equal(ys[1].view(np.int32), forced.view(np.int32))
    np.testing.assert_allclose(ys[1], want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "c,h,k,act", [(9, 56, 3, "Relu"), (5, 56, 5, "Swish"), (4, 33, 5, "HardSwish"), (3, 61, 3, "Clip"), (2, 40, 3, "")]
)
def test_stride_2_rows_of_17_to_32_in_two_vector_blocks_match_onnxruntime(c, h, k, act) -> None:
    """The direct form's stride-2 rows of 17 to 32 (one two-vector block a row, the last block of
    rows overlapping the one before) as chosen, forced (6) and the former blocks (13), whole and split."""
    rng = np.random.default_rng(c * h + k)
    x = rng.uniform(-4, 4, (1, c, h, h)).astype(np.float32)
    w = rng.uniform(-1, 1, (c, 1, k, k)).astype(np.float32)
    b = rng.uniform(-1, 1, c).astype(np.float32)
    p = k // 2
    want = _ort(x, w, b, act, (k, k), (2, 2), (1, 1), (p, p, p, p))
    a0, a1, _ = ACTS[act]
    oh = want.shape[2]
    geo = np.array([c, h, h, 1, k, k, 2, 2, 1, 1, p, p, oh, oh, native.ACT[act], _bits(a0), _bits(a1), 0], np.int64)
    fn = native.lib().aioge_conv_depthwise_f32
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
    try:
        for simd, cuts in ((1, [0, c]), (1, [0, 1, c]), (6, [0, c]), (13, [0, c])):
            native.function("aioge_simd_avx2")(simd)
            y = np.full(want.shape, np.nan, np.float32)
            for p0, p1 in zip(cuts, cuts[1:]):
                assert fn(native.ptr(x), native.ptr(w), native.ptr(b), native.ptr(y), native.ptr(geo), p0, p1) == 0
            np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5, err_msg=f"simd {simd} cuts {cuts}")
    finally:
        native.function("aioge_simd_avx2")(1)


def _tier_fns() -> dict[str, object]:
    """aioge_conv_depthwise_f32 and aioge_simd_avx2 of every built tier this CPU runs (each
    tier's library loaded as it is: the AVX2 tier's forms on an AVX-512 machine too)."""
    import importlib.util

    have = native.cpu_flags(native.lib()) or frozenset()
    out = {}
    for name, module, flags in native.TIERS:
        spec = importlib.util.find_spec(module)
        if spec is None or not str(spec.origin).endswith(".so") or not flags <= have:
            continue
        dll = ctypes.CDLL(str(spec.origin))
        fn, simd = dll.aioge_conv_depthwise_f32, dll.aioge_simd_avx2
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
        simd.restype, simd.argtypes = ctypes.c_int, [ctypes.c_int]
        out[name] = (fn, simd)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(1, 9),
    mult=st.sampled_from([1, 1, 2]),
    h=st.integers(1, 37),
    wd=st.integers(1, 45),
    k=st.sampled_from([3, 5, 7]),
    s=st.sampled_from([1, 2, 3]),
    d=st.sampled_from([(1, 1), (1, 1), (1, 1), (2, 1), (1, 2)]),
    pads=st.tuples(*[st.integers(0, 4)] * 4),
    act=st.sampled_from(sorted(ACTS)),
    seed=st.integers(0, 2**16),
)
def test_every_tier_and_the_avx2_direct_form_match_onnxruntime(c, mult, h, wd, k, s, d, pads, act, seed) -> None:
    """Each built tier's library (baseline, AVX2, AVX-512) as chosen and with the AVX2 direct form
    forced (``aioge_simd_avx2(14)``: 3x3 and 5x5 of stride 1 and 2, rows 8 columns a vector
    straight from the plane, masked at its edges; other geometries as chosen): strides 1-3, 3x3
    to 7x7, any pads and dilation, odd sizes, every fused activation, whole and split at every few
    planes, against onnxruntime; the tiers agree."""
    oh, ow = (h + pads[0] + pads[2] - (k - 1) * d[0] - 1) // s + 1, (wd + pads[1] + pads[3] - (k - 1) * d[1] - 1) // s + 1
    assume(oh >= 1 and ow >= 1)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, (1, c, h, wd)).astype(np.float32)
    w = rng.uniform(-1, 1, (c * mult, 1, k, k)).astype(np.float32)
    b = rng.uniform(-1, 1, c * mult).astype(np.float32)
    want = _ort(x, w, b, act, (k, k), (s, s), d, pads)
    a0, a1, _ = ACTS[act]
    g = [c, h, wd, mult, k, k, s, s, d[0], d[1], pads[0], pads[1], oh, ow, native.ACT[act], _bits(a0), _bits(a1), 0]
    geo = np.array(g, np.int64)
    planes = c * mult
    for tier, (fn, simd) in _tier_fns().items():
        try:
            for mode, cuts in ((1, [0, planes]), (1, [0, 2, planes]), (14, [0, planes]), (14, [0, 1, 4, planes])):
                simd(mode)
                y = np.full(want.shape, np.nan, np.float32)
                cuts = sorted({min(cut, planes) for cut in cuts})
                for p0, p1 in zip(cuts, cuts[1:]):
                    assert fn(native.ptr(x), native.ptr(w), native.ptr(b), native.ptr(y), native.ptr(geo), p0, p1) == 0
                np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5, err_msg=f"{tier} simd {mode} cuts {cuts}")
        finally:
            simd(1)
