"""The compiled windowed kernels (``kernels/csrc/dwconv.c``, ``pool.c``): depthwise Conv, MaxPool and
AveragePool against onnxruntime and the numpy kernels, their numpy fallback without the tier,
kernel-cache entries that name them read by a process without it, and whole models."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.compiler import tuning
from aioge.ir.desc import TensorDesc
from aioge.kernels import conv as kconv
from aioge.kernels import native
from aioge.kernels.conv_algos import build_conv_depthwise_native, build_conv_depthwise_planes
from aioge.ops.registry import get_schema
from aioge.plan.kernel import candidates_of
from tests.ops.conftest import ort_run, rand

needs_tier = pytest.mark.skipif(
    not native.available(), reason="needs the compiled kernels (their numpy fallback has its own tests here)"
)


def _has_output(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int) -> bool:
    return size + begin + end - (kernel - 1) * dilation - 1 >= 0


@needs_tier
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.integers(1, 21),
    mult=st.integers(1, 2),
    h=st.integers(1, 17),
    w=st.integers(1, 41),  # past the stride-2 split's vectors
    kernel=st.tuples(st.sampled_from([1, 3, 5, 7]), st.sampled_from([1, 3, 5, 7])),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 4)] * 4),
    auto_pad=st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER"]),
    bias=st.booleans(),
)
@settings(max_examples=80, deadline=None)
def test_depthwise_native_matches_onnxruntime_and_numpy(
    seed, n, c, mult, h, w, kernel, strides, dilations, pads, auto_pad, bias
) -> None:
    if auto_pad == "NOTSET" and not (
        _has_output(h, kernel[0], strides[0], dilations[0], pads[0], pads[2])
        and _has_output(w, kernel[1], strides[1], dilations[1], pads[1], pads[3])
    ):
        return  # no output: not a valid Conv
    rng = np.random.default_rng(seed)
    inputs = [rand(rng, n, c, h, w), rand(rng, c * mult, 1, *kernel)] + ([rand(rng, c * mult)] if bias else [])
    attrs = {"group": c, "kernel_shape": kernel, "strides": strides}
    # onnxruntime takes no dilation with SAME padding
    attrs.update({"pads": pads, "dilations": dilations} if auto_pad == "NOTSET" else {"auto_pad": auto_pad})
    (want,) = ort_run("Conv", inputs, attrs)
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    (numpy_path,) = build_conv_depthwise_planes(attrs, {}, descs, None)(inputs, None)
    np.testing.assert_allclose(numpy_path, want, rtol=1e-4, atol=1e-5)
    run = build_conv_depthwise_native(attrs, {}, descs, None)
    (got,) = run(inputs, None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the plain loops (a CPU without AVX2): the same multiply-adds in the same order, up to FMA's
    # rounding; 2: AVX2's flat-phase form only (1 takes eight planes at a time on small planes)
    for simd in (0, 2):
        native.function("aioge_simd_avx2")(simd)
        try:
            (plain,) = build_conv_depthwise_native(attrs, {}, descs, None)(inputs, None)
        finally:
            native.function("aioge_simd_avx2")(1)
        np.testing.assert_allclose(plain, want, rtol=1e-4, atol=1e-5, err_msg=f"simd {simd}")
    out = np.full(want.shape, np.nan, np.float32)
    run(inputs, [out])  # into a preallocated (garbage-filled) output, twice
    (again,) = run(inputs, [out])
    np.testing.assert_allclose(again, want, rtol=1e-4, atol=1e-5)
    if len(inputs) == 2:  # a non-contiguous input and output (copied in and out)
        wide = np.zeros((n, c, h, w + 3), np.float32)
        wide[..., :w] = inputs[0]
        tall = np.full((*want.shape[:3], want.shape[3] + 2), np.nan, np.float32)
        (view,) = run([wide[..., :w], inputs[1]], [tall[..., : want.shape[3]]])
        np.testing.assert_allclose(view, want, rtol=1e-4, atol=1e-5)


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.integers(1, 5),
    h=st.integers(1, 15),
    w=st.integers(1, 40),
    kernel=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    ceil_mode=st.integers(0, 1),
    include_pad=st.integers(0, 1),
)
@settings(max_examples=80, deadline=None)
# an average over a window whose dilated taps all fall in the padding: 0, as onnxruntime's (was 0 / 0)
@needs_tier
@example(
    seed=0, n=1, c=1, h=1, w=1, kernel=(1, 2), strides=(1, 1), dilations=(1, 2), pads=(0, 1, 0, 1), ceil_mode=0, include_pad=0
)
def test_native_pools_match_onnxruntime_and_numpy(
    seed, n, c, h, w, kernel, strides, dilations, pads, ceil_mode, include_pad
) -> None:
    # ONNX: pads must be smaller than the kernel
    if any(p >= k for p, k in zip(pads, kernel + kernel)):
        return
    if not (
        _has_output(h, kernel[0], strides[0], dilations[0], pads[0], pads[2])
        and _has_output(w, kernel[1], strides[1], dilations[1], pads[1], pads[3])
    ):
        return
    x = rand(np.random.default_rng(seed), n, c, h, w)
    base = {"kernel_shape": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode}
    cases = [
        ("MaxPool", {**base, "dilations": dilations}, kconv.build_max_pool),
        ("AveragePool", {**base, "dilations": dilations, "count_include_pad": include_pad}, kconv.build_average_pool),
    ]
    for op, attrs, reference in cases:
        (want,) = ort_run(op, [x], attrs)
        # a max over a window wholly in the padding: onnxruntime gives the lowest float, aioge's
        # kernels (the numpy reference too) -inf
        want = np.where(want == np.finfo(np.float32).min, -np.inf, want)
        descs = [TensorDesc(x.shape, "float32")]
        (numpy_path,) = reference(attrs, {}, descs, [None])([x], None)
        np.testing.assert_allclose(numpy_path, want, rtol=1e-5, atol=1e-6, err_msg=op)
        impl = get_schema(op).impl("pool_native")
        assert impl.applies(descs, attrs)
        tiers = []
        for simd in _SIMD:  # AVX2 where the CPU has it, and the plain loops
            native.function("aioge_simd_avx2")(simd)
            run = impl.build(attrs, {}, descs, [TensorDesc(want.shape, "float32")])
            out = np.full(want.shape, np.nan, np.float32)
            (got,) = run([x], [out])
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op} simd {simd} {attrs}")
            tiers.append(got)
        for got in tiers[1:]:  # AVX2's reductions in registers take the plain loops' order: the same bits
            np.testing.assert_array_equal(got, tiers[0], err_msg=f"{op} {attrs}")
        native.function("aioge_simd_avx2")(1)
    # MaxPool's Indices (row-major and storage_order 1), in C: the first maximum in the window's
    # row-major order, as onnxruntime names it
    for order in (0, 1):
        attrs = {**base, "dilations": dilations, "storage_order": order}
        want, want_at = ort_run("MaxPool", [x], attrs, num_outputs=2)
        real = want != np.finfo(np.float32).min
        descs, outs = [TensorDesc(x.shape, "float32")], [TensorDesc(want.shape, "float32"), TensorDesc(want.shape, "int64")]
        for simd in _SIMD:
            native.function("aioge_simd_avx2")(simd)
            given = [np.full(want.shape, np.nan, np.float32), np.full(want.shape, -7, np.int64)]
            got, got_at = get_schema("MaxPool").impl("pool_native").build(attrs, {}, descs, outs)([x], given)
            np.testing.assert_array_equal(got[real], want[real])
            np.testing.assert_array_equal(got_at[real], want_at[real], err_msg=f"simd {simd} {attrs}")
        native.function("aioge_simd_avx2")(1)


# the pools' two C paths: plain loops (0) and AVX2 (1) when this CPU has it
_SIMD = (0, 1) if native.available() else ()


@needs_tier
@given(seed=st.integers(0, 2**16), c=st.integers(1, 9), h=st.integers(1, 40), w=st.integers(1, 40))
@settings(max_examples=30, deadline=None)
def test_native_global_max_pool_matches_onnxruntime(seed, c, h, w) -> None:
    x = rand(np.random.default_rng(seed), 2, c, h, w)
    (want,) = ort_run("GlobalMaxPool", [x], {})
    impl = get_schema("GlobalMaxPool").impl("globalmax_native")
    descs = [TensorDesc(x.shape, "float32")]
    assert impl.applies(descs, {})
    for simd in _SIMD:
        native.function("aioge_simd_avx2")(simd)
        (got,) = impl.build({}, {}, descs, None)([x], None)
        np.testing.assert_array_equal(got, want)
    native.function("aioge_simd_avx2")(1)


def test_without_the_tier_the_native_kernels_are_not_offered_but_stored_ones_bind_to_numpy(numpy_kernels) -> None:
    rng = np.random.default_rng(1)
    inputs = [rand(rng, 2, 18, 9, 9), rand(rng, 18, 1, 3, 3), rand(rng, 18)]
    attrs = get_schema("Conv").normalise_attrs({"group": 18, "pads": (1, 1, 1, 1), "strides": (2, 2)})
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    schema = get_schema("Conv")
    assert "conv_depthwise_native" not in {impl.name for impl, _ in candidates_of(schema, descs, attrs)}
    assert "conv_depthwise_native" in {impl.name for impl, _ in candidates_of(schema, descs, attrs, stored=True)}
    (want,) = ort_run("Conv", inputs, attrs)
    (got,) = schema.impl("conv_depthwise_native").build(attrs, {}, descs, None)(inputs, None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    pool = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}
    (want,) = ort_run("AveragePool", inputs[:1], pool)
    (got,) = get_schema("AveragePool").impl("pool_native").build(pool, {}, descs[:1], None)(inputs[:1], None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    want = ort_run("MaxPool", inputs[:1], pool, num_outputs=2)
    outs = [TensorDesc(want[0].shape, "float32"), TensorDesc(want[1].shape, "int64")]
    got = get_schema("MaxPool").impl("pool_native").build(pool, {}, descs[:1], outs)(inputs[:1], None)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    (want,) = ort_run("GlobalMaxPool", inputs[:1], {})
    (got,) = get_schema("GlobalMaxPool").impl("globalmax_native").build({}, {}, descs[:1], None)(inputs[:1], None)
    np.testing.assert_array_equal(got, want)


def _depthwise_graph() -> tuple[aioge.Graph, dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(2)
    w, b = rand(rng, 24, 1, 5, 5), rand(rng, 24)
    pool = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}
    g = aioge.Graph("depthwise")
    x = g.input("x", (1, 24, 112, 112), "float32")
    h = ops.max_pool(x, **pool)
    # Conv + Relu: a FusedConv, whose kernels are the Conv's wrapped
    g.output(ops.relu(ops.conv2d(h, g.constant(w, "w"), g.constant(b, "b"), group=24, pads=(2, 2, 2, 2))), names=["y"])
    feeds = {"x": rand(rng, 1, 24, 112, 112)}
    (pooled,) = ort_run("MaxPool", [feeds["x"]], pool)
    (conv,) = ort_run("Conv", [pooled, w, b], {"group": 24, "pads": (2, 2, 2, 2)})
    return g, feeds, np.maximum(conv, 0)


async def _compile_and_run(cache: Path) -> tuple[dict[str, str], np.ndarray, int]:
    g, feeds, _ = _depthwise_graph()
    async with aioge.Session({"ge.op_compiler_cache_dir": str(cache)}) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1)
        y = (await s.run_graph(1, feeds))["y"]
    return {n.op_type: n.kernel.impl for n in model.nodes}, y, model.stats.kernel_cache_hits


@needs_tier
@pytest.mark.anyio
async def test_the_tuner_picks_the_native_kernels_and_a_process_without_the_tier_runs_their_cache_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    *_, want = _depthwise_graph()
    # The tuner chooses among the C kernels only: whether they beat the numpy candidates is the
    # machine's (on Zen 4 about 2x for MaxPool and 4x for the Conv; on an AVX2-only core the
    # separable MaxPool won), and this test is about their cache entries in a process without them.
    with monkeypatch.context() as m:
        m.setattr(tuning, "candidates_of", lambda *a, **k: [c for c in candidates_of(*a, **k) if c[0].name.endswith("_native")])
        impls, y, _ = await _compile_and_run(tmp_path)
    assert impls == {"FusedConv": "conv_depthwise_native", "MaxPool": "pool_native"}
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    monkeypatch.setenv("AIOGE_NATIVE", "0")  # as the numpy_kernels fixture does, for this second "process"
    native.lib.cache_clear()
    native.function.cache_clear()
    try:
        impls, y, hits = await _compile_and_run(tmp_path)
    finally:
        monkeypatch.undo()
        native.lib.cache_clear()
        native.function.cache_clear()
    assert impls == {"FusedConv": "conv_depthwise_native", "MaxPool": "pool_native"} and hits == 2  # served, not recompiled
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def _run_workload(name: str, cache: Path) -> tuple[float, set[str]]:
    from aioge.benchmarks.workloads import load_workloads

    (w,) = load_workloads([name])

    async def run() -> tuple[dict[str, np.ndarray], set[str]]:
        async with aioge.Session({"ge.op_compiler_cache_dir": str(cache), **w.options}) as s:
            await s.add_graph(1, w.graph)
            model = await s.build_graph(1)
            return await s.run_graph(1, w.feeds), {n.kernel.impl for n in model.nodes}

    out, impls = anyio.run(run)
    return w.check(out), impls  # check raises beyond the workload's tolerance


@needs_tier
@pytest.mark.timeout(300)
def test_light_shufflenet_runs_the_native_kernels_and_matches(tmp_path: Path) -> None:
    err, impls = _run_workload("shufflenet", tmp_path)
    assert err < 1e-4
    assert {"conv_depthwise_native", "pool_native"} <= impls


@needs_tier
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["mobilenet_v3_small", "efficientnet_b0", "shufflenet_v2_x1_0"])
def test_real_weights_models_run_the_native_depthwise_kernel_and_match_torch(name: str, tmp_path: Path) -> None:
    pytest.importorskip("torchvision")  # the models are exported from torchvision on first use
    _, impls = _run_workload(name, tmp_path)  # against torch's outputs, stored at export
    assert "conv_depthwise_native" in impls


@pytest.mark.parametrize(
    ("size", "kernel", "stride", "pad"),
    [(37, 3, 2, 1), (40, 3, 1, 1), (33, 2, 2, 0), (70, 2, 2, 0), (9, 2, 2, 0), (112, 3, 2, 1)],  # 2x2 / 2: vectors and tails
)
def test_native_max_pool_propagates_nan_as_numpy_does_and_matches_onnxruntime_without(size, kernel, stride, pad) -> None:
    """The max taps run LANES at a time (a vector select with a NaN test); at stride 2 over the
    reduced row's even and odd columns. A NaN anywhere in a window gives NaN, as np.maximum
    gives (onnxruntime's MaxPool drops some: the NaN-free input is checked against it)."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = np.nan
    attrs = {"kernel_shape": [kernel, kernel], "strides": [stride, stride], "pads": [pad] * 4}
    impl = next(i for i in get_schema("MaxPool").impls if i.name == "pool_native")
    (got,) = impl.build(attrs, {}, [TensorDesc(x.shape, "float32")], None)([x], None)
    o = (size + 2 * pad - kernel) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    want = np.full((1, 3, o, o), -np.inf, np.float32)
    for i in range(kernel):
        for j in range(kernel):
            want = np.maximum(want, xp[:, :, i : i + stride * (o - 1) + 1 : stride, j : j + stride * (o - 1) + 1 : stride])
    assert np.isnan(want).any()
    np.testing.assert_array_equal(got, want)
    clean = np.nan_to_num(x, nan=0.5)
    (got_clean,) = impl.build(attrs, {}, [TensorDesc(x.shape, "float32")], None)([clean], None)
    np.testing.assert_array_equal(got_clean, ort_run("MaxPool", [clean], attrs)[0])


@needs_tier
@given(
    seed=st.integers(0, 2**16),
    h=st.integers(1, 20),
    w=st.integers(1, 45),
    kernel=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    ceil_mode=st.integers(0, 1),
    special=st.sampled_from([np.nan, -np.inf, np.inf]),
)
@settings(max_examples=60, deadline=None)
def test_native_max_pool_keeps_nan_and_infinities_as_numpy_in_every_pass(
    seed, h, w, kernel, strides, dilations, pads, ceil_mode, special
) -> None:
    """The vector passes (AVX-512's 16 columns in registers and its small-plane permutes, AVX2's
    rows) and the plain loops over random geometries with NaN or infinities in the input: what
    numpy's np.maximum taps give, bit for bit."""
    if any(p >= k for p, k in zip(pads, kernel + kernel)) or not (
        _has_output(h, kernel[0], strides[0], dilations[0], pads[0], pads[2])
        and _has_output(w, kernel[1], strides[1], dilations[1], pads[1], pads[3])
    ):
        return
    rng = np.random.default_rng(seed)
    x = rand(rng, 1, 3, h, w)
    x[rng.random(x.shape) < 0.05] = special
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode, "dilations": dilations}
    descs = [TensorDesc(x.shape, "float32")]
    (want,) = kconv.build_max_pool(attrs, {}, descs, [None])([x], None)
    impl = get_schema("MaxPool").impl("pool_native")
    for simd in _SIMD:
        native.function("aioge_simd_avx2")(simd)
        (got,) = impl.build(attrs, {}, descs, [TensorDesc(want.shape, "float32")])([x], None)
        np.testing.assert_array_equal(got, want, err_msg=f"simd {simd} {attrs}")
    native.function("aioge_simd_avx2")(1)


@given(
    seed=st.integers(0, 2**16),
    c=st.integers(1, 9),
    h=st.integers(1, 12),
    w=st.integers(1, 40),
    nan=st.booleans(),
    average=st.booleans(),
    start=st.integers(0, 8),
)
@settings(max_examples=60, deadline=None)
def test_native_2x2_stride_2_pool_over_even_planes_matches_onnxruntime_whole_and_in_pieces(
    seed, c, h, w, nan, average, start
) -> None:
    """pool.c's pair2 forms (2x2 stride 2, no pads, even planes: a row pair at a time, every width
    on AVX2, past 16 wide on AVX-512): against onnxruntime and the plain loops, whole and from a
    plane range's start (a split's second piece: its masked tail at the end of x)."""
    if not native.available():
        pytest.skip("the compiled tier is not built")
    h, w = 2 * h, 2 * w
    x = rand(np.random.default_rng(seed), 1, c, h, w)
    if nan:
        x[np.random.default_rng(seed + 1).random(x.shape) < 0.05] = np.nan
    op = "AveragePool" if average else "MaxPool"
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    want = kconv.build_average_pool(attrs, {}, [TensorDesc(x.shape, "float32")], [None])([x], None)[0] if average else None
    if not nan:
        want = ort_run(op, [x], attrs)[0]
    elif not average:
        want = kconv.build_max_pool(attrs, {}, [TensorDesc(x.shape, "float32")], [None])([x], None)[0]
    geometry = np.array([h, w, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, h // 2, w // 2, int(average), 0, 0], np.int64)
    import ctypes

    pool = native.lib().aioge_pool_f32  # type: ignore[union-attr]
    pool.restype, pool.argtypes = ctypes.c_int, [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2
    p0 = min(start, c - 1)
    outs = []
    for simd in _SIMD:
        native.function("aioge_simd_avx2")(simd)
        y = np.full(want.shape, 7.0, np.float32)
        assert pool(native.ptr(x), native.ptr(y), 0, native.ptr(geometry), 0, p0) == 0
        assert pool(native.ptr(x), native.ptr(y), 0, native.ptr(geometry), p0, c) == 0
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6, err_msg=f"simd {simd}")
        outs.append(y)
    native.function("aioge_simd_avx2")(1)
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


@needs_tier
@pytest.mark.parametrize("kernel", [2, 3])
def test_native_pool_shares_its_planes_with_the_helper_and_splits_bit_equal(kernel, monkeypatch) -> None:
    import threading

    from aioge.kernels import parallel

    rng = np.random.default_rng(kernel)
    x = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)  # 131,072 values: worth a split
    attrs = {"kernel_shape": [kernel, kernel], "strides": [2, 2]}
    impl = next(i for i in get_schema("MaxPool").impls if i.name == "pool_native")
    run = impl.build(attrs, {}, [TensorDesc(x.shape, "float32")], None)
    pieces: list[int] = []
    real = parallel.split_native

    def counted(par, job, args, total, *, worth=True):  # type: ignore[no-untyped-def]
        pieces.append(real(par, job, args, total, worth=worth))
        return pieces[-1]

    monkeypatch.setattr("aioge.kernels.pool_algos.split_native", counted)
    (whole,) = run([x], None)
    with parallel.cpu_tokens(threading.Semaphore(1)):
        (split,) = run([x], None)
    assert pieces == [1, 2]
    np.testing.assert_array_equal(split, whole)
    np.testing.assert_array_equal(whole, ort_run("MaxPool", [x], attrs)[0])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "Conv"])
def test_native_window_runs_hold_their_argument_block_while_the_job_reads_it(op: str, monkeypatch) -> None:
    """The step path's argument block (addresses, sizes) lives until the C job has read it: a
    temporary freed as ``native.ptr`` returned let the next allocations of its size reuse the
    block (NASNetMobile's pools failed 'a geometry that does not fit' at random nodes)."""
    import ctypes

    from aioge.kernels import parallel

    real = parallel.split_native
    junk: list[np.ndarray] = []

    def reuse(par, job, args, total, *, worth=True):  # type: ignore[no-untyped-def]
        block = (ctypes.c_int64 * 7).from_address(args)  # the block the address names, still readable
        before = list(block)
        # numpy hands a freed small buffer to the next array of its size: pool's block is 7 values, depthwise's 9
        junk.extend(np.full(n, -7, np.int64) for n in (7, 9) for _ in range(8))
        assert list(block) == before, "the argument block was freed before the job ran"
        return real(par, job, args, total, worth=worth)

    monkeypatch.setattr(f"aioge.kernels.{'conv_algos' if op == 'Conv' else 'pool_algos'}.split_native", reuse)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 9, 9)).astype(np.float32)
    attrs: dict = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    inputs = [x]
    if op == "Conv":
        inputs += [rng.standard_normal((6, 1, 3, 3)).astype(np.float32)]
        attrs["group"] = 6
        run = build_conv_depthwise_native(attrs, {}, [TensorDesc(a.shape, "float32") for a in inputs], None)
    else:
        impl = next(i for i in get_schema(op).impls if i.name == "pool_native")
        run = impl.build(attrs, {}, [TensorDesc(x.shape, "float32")], None)
    for _ in range(5):
        (got,) = run(inputs, None)
        np.testing.assert_allclose(got, ort_run(op, inputs, attrs)[0], rtol=1e-5, atol=1e-6)


@given(
    seed=st.integers(0, 2**16),
    planes=st.sampled_from([1, 3, 17, 45, 70]),  # 2,048 values a block: 7x7 blocks of 41 planes, a partial last
    hw=st.sampled_from([(7, 7), (8, 8), (14, 14), (17, 17), (9, 23), (3, 5), (1, 1), (2, 40), (28, 28)]),
    window=st.sampled_from(
        [
            ((3, 3), (1, 1, 1, 1), (1, 1)),
            ((2, 2), (0, 0, 1, 1), (1, 1)),
            ((2, 2), (1, 1, 0, 0), (1, 1)),
            ((3, 3), (2, 2, 2, 2), (2, 2)),
            ((5, 3), (4, 1, 0, 1), (1, 1)),
            ((1, 5), (0, 2, 0, 2), (1, 1)),
            ((3, 1), (1, 0, 1, 0), (1, 1)),
        ]
    ),
    include_pad=st.integers(0, 1),
    ceil_mode=st.integers(0, 1),
    special=st.sampled_from([None, np.nan, np.inf, -np.inf]),
)
@settings(max_examples=60, deadline=None)
def test_native_flat_pools_match_numpy_whole_split_and_in_every_pass(
    seed, planes, hw, window, include_pad, ceil_mode, special
) -> None:
    """The flat form (row and column stride 1, output rows as wide as the input's: a block of
    planes reduced over its window rows and then its columns as one masked flat array) on small
    planes of odd sizes, blocks that span planes and end part way, dilations, count_include_pad,
    NaN and infinities: numpy's taps bit for bit (max) or to rounding (average), the same bits in
    the plain loops, whole and split over two threads."""
    _check_pools(seed, planes, hw, window, 1, include_pad, ceil_mode, special)


@given(
    seed=st.integers(0, 2**16),
    planes=st.sampled_from([1, 2, 3, 17, 45]),
    hw=st.sampled_from([(14, 14), (8, 8), (2, 2), (4, 16), (6, 12), (7, 7), (17, 17), (27, 27), (35, 35), (9, 23), (14, 18)]),
    window=st.sampled_from(
        [
            ((2, 2), (0, 0, 0, 0), (1, 1)),
            ((3, 3), (0, 0, 0, 0), (1, 1)),
            ((3, 3), (1, 1, 1, 1), (1, 1)),
            ((2, 2), (0, 0, 1, 1), (1, 1)),
        ]
    ),
    include_pad=st.integers(0, 1),
    ceil_mode=st.integers(0, 1),
    special=st.sampled_from([None, np.nan, np.inf, -np.inf]),
)
@settings(max_examples=60, deadline=None)
def test_native_stride2_pools_match_numpy_whole_split_and_in_every_pass(
    seed, planes, hw, window, include_pad, ceil_mode, special
) -> None:
    """Stride 2 (2x2 on even planes up to 16 wide: the flat row-pair form; 3x3, pads, ceil mode:
    the other passes), NaN and infinities: numpy's bits (max), rounding (average), every tier,
    whole and split."""
    _check_pools(seed, planes, hw, window, 2, include_pad, ceil_mode, special)


@given(
    seed=st.integers(0, 2**16),
    planes=st.sampled_from([1, 2, 3, 5, 33]),
    h=st.integers(1, 40),
    w=st.integers(1, 80),
    rows=st.tuples(st.integers(1, 5), st.integers(1, 3), st.integers(1, 2)),  # kernel rows, row stride, row dilation
    pads=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
    ceil_mode=st.integers(0, 1),
    special=st.sampled_from([None, np.nan, np.inf, -np.inf]),
)
@example(seed=1, planes=33, h=17, w=17, rows=(3, 2, 1), pads=(0, 0, 0, 0), ceil_mode=0, special=None)
@example(seed=2, planes=3, h=27, w=27, rows=(3, 2, 1), pads=(0, 0, 0, 0), ceil_mode=1, special=np.nan)
@example(seed=3, planes=5, h=35, w=71, rows=(3, 2, 1), pads=(1, 1, 1, 1), ceil_mode=0, special=-np.inf)
@example(seed=4, planes=2, h=13, w=14, rows=(3, 2, 1), pads=(0, 0, 0, 0), ceil_mode=1, special=None)
@example(seed=5, planes=5, h=15, w=15, rows=(3, 2, 1), pads=(0, 0, 0, 0), ceil_mode=0, special=np.nan)
@example(seed=6, planes=3, h=28, w=27, rows=(3, 2, 1), pads=(0, 0, 0, 0), ceil_mode=1, special=np.nan)
@settings(max_examples=80, deadline=None)
def test_native_max_pool_three_columns_at_stride_two_matches_numpy_whole_and_split(
    seed, planes, h, w, rows, pads, ceil_mode, special
) -> None:
    """MaxPool with 3 kernel columns at column stride 2 (pool.c's s2x3 forms: two narrow output
    rows a vector, or 16 (AVX2: 8) outputs a step; whole vectors where no pad or overhang needs
    masking, masked near the end of x) over any kernel rows, row stride and dilation, pads, ceil
    mode, NaN and infinities: numpy's taps bit for bit in every pass, whole and split."""
    kh, sh, dh = rows
    if (
        pads[0] >= kh
        or pads[2] >= kh
        or pads[1] >= 3
        or pads[3] >= 3
        or not (_has_output(h, kh, sh, dh, pads[0], pads[2]) and _has_output(w, 3, 2, 1, pads[1], pads[3]))
    ):
        return
    import threading

    from aioge.kernels import parallel, pool_algos

    rng = np.random.default_rng(seed)
    x = rand(rng, 1, planes, h, w)
    if special is not None:
        x[rng.random(x.shape) < 0.03] = special
    attrs = {"kernel_shape": (kh, 3), "strides": (sh, 2), "pads": pads, "dilations": (dh, 1), "ceil_mode": ceil_mode}
    descs = [TensorDesc(x.shape, "float32")]
    (want,) = kconv.build_max_pool(attrs, {}, descs, [None])([x], None)
    impl = get_schema("MaxPool").impl("pool_native")
    for simd in _SIMD:
        native.function("aioge_simd_avx2")(simd)
        worth, pool_algos._NATIVE_SPLIT_VALUES = pool_algos._NATIVE_SPLIT_VALUES, 0  # every size splits
        try:
            run = impl.build(attrs, {}, descs, [TensorDesc(want.shape, "float32")])
            (got,) = run([np.ascontiguousarray(x)], [np.full(want.shape, np.nan, np.float32)])
            with parallel.cpu_tokens(threading.Semaphore(1)):
                (split,) = run([x], None)
        finally:
            native.function("aioge_simd_avx2")(1)
            pool_algos._NATIVE_SPLIT_VALUES = worth
        np.testing.assert_array_equal(got, want, err_msg=f"simd {simd} {attrs}")
        np.testing.assert_array_equal(split, want, err_msg=f"split simd {simd} {attrs}")


@given(
    seed=st.integers(0, 2**16),
    planes=st.sampled_from([1, 2, 3, 5, 17]),
    h=st.integers(1, 70),
    w=st.integers(1, 70),
    include_pad=st.integers(0, 1),
    special=st.sampled_from([None, np.nan, np.inf, -np.inf]),
)
@example(seed=1, planes=3, h=17, w=17, include_pad=1, special=None)
@example(seed=2, planes=5, h=8, w=8, include_pad=1, special=np.nan)
@example(seed=3, planes=2, h=35, w=35, include_pad=0, special=-np.inf)
@example(seed=4, planes=3, h=64, w=64, include_pad=0, special=None)  # the largest plane of the one-pass form
@example(seed=5, planes=2, h=65, w=64, include_pad=1, special=None)  # past it: the 16-column pass
@example(seed=6, planes=17, h=7, w=7, include_pad=0, special=np.nan)
@settings(max_examples=60, deadline=None)
def test_native_same_3x3_pools_match_numpy_whole_split_and_in_every_pass(seed, planes, h, w, include_pad, special) -> None:
    """3x3, stride 1, pads 1 (pool.c's same3: each plane a flat run of vectors, the window rows
    reduced down and the kernel columns taken from the neighbouring vectors in registers) on odd
    and small planes (a row shorter than a vector, one row, one column), count_include_pad, NaN
    and infinities: numpy's bits (max), rounding (average), the same bits in every pass, whole
    and split."""
    _check_pools(seed, planes, (h, w), ((3, 3), (1, 1, 1, 1), (1, 1)), 1, include_pad, 0, special)


def _check_pools(seed, planes, hw, window, stride, include_pad, ceil_mode, special) -> None:  # type: ignore[no-untyped-def]
    import threading

    from aioge.kernels import parallel, pool_algos

    kernel, pads, dilations = window
    h, w = hw
    if not (
        _has_output(h, kernel[0], stride, dilations[0], pads[0], pads[2])
        and _has_output(w, kernel[1], stride, dilations[1], pads[1], pads[3])
    ):
        return
    rng = np.random.default_rng(seed)
    x = rand(rng, 1, planes, h, w)
    if special is not None:
        x[rng.random(x.shape) < 0.03] = special
    base = {"kernel_shape": kernel, "strides": (stride, stride), "pads": pads, "dilations": dilations, "ceil_mode": ceil_mode}
    descs = [TensorDesc(x.shape, "float32")]
    cases = [
        ("MaxPool", base, kconv.build_max_pool),
        ("AveragePool", {**base, "count_include_pad": include_pad}, kconv.build_average_pool),
    ]
    for op, attrs, reference in cases:
        (want,) = reference(attrs, {}, descs, [None])([x], None)
        impl = get_schema(op).impl("pool_native")
        tiers = []
        for simd in _SIMD:
            native.function("aioge_simd_avx2")(simd)
            worth, pool_algos._NATIVE_SPLIT_VALUES = pool_algos._NATIVE_SPLIT_VALUES, 0  # every size splits
            try:
                run = impl.build(attrs, {}, descs, [TensorDesc(want.shape, "float32")])
                (got,) = run([x], [np.full(want.shape, np.nan, np.float32)])
                with parallel.cpu_tokens(threading.Semaphore(1)):  # split over the planes when worth it
                    (split,) = run([x], None)
            finally:
                native.function("aioge_simd_avx2")(1)
                pool_algos._NATIVE_SPLIT_VALUES = worth
            if op == "MaxPool":
                np.testing.assert_array_equal(got, want, err_msg=f"simd {simd} {attrs}")
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"simd {simd} {attrs}")
            np.testing.assert_array_equal(split, got, err_msg=f"split simd {simd} {attrs}")
            tiers.append(got)
        for got in tiers[1:]:
            np.testing.assert_array_equal(got, tiers[0], err_msg=f"{op} {attrs}")
