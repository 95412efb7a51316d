"""The compiled direct and 1x1 convolutions (``kernels/csrc/gemm.c``: ``conv_direct_native``,
``conv_direct_t_native``): group-1 Conv against onnxruntime over strides, dilations, pads, batches,
channel counts past one 6-row block (or one 64-channel panel) and spatial sizes past one
64-position panel, run whole and split over the C helper thread; the numpy fallbacks without
the tier."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, parallel
from aioge.kernels.conv_algos import build_conv_direct_native, build_conv_direct_t_native
from aioge.ops.registry import get_schema
from tests.ops.conftest import count_splits, ort_run, rand

needs_tier = pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 3),  # 2 images: split by whole images, each one's phases built by its thread
    c=st.integers(1, 9),
    m=st.integers(1, 14),  # past two 6-row blocks, with a short last one
    h=st.integers(1, 13),
    w=st.integers(1, 13),
    kernel=st.tuples(st.sampled_from([1, 2, 3, 5]), st.sampled_from([1, 3, 7])),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 3)] * 4),
    bias=st.booleans(),
    rows=st.sampled_from([{}, {"rows": 1}, {"rows": 1, "mr": 8}]),
)
@settings(max_examples=120, deadline=None)
def test_direct_conv_matches_onnxruntime(seed, n, c, m, h, w, kernel, strides, dilations, pads, bias, rows) -> None:
    """Flattened panels, and row panels (``rows``: tiles within one output row, stored straight
    when K fits one block; ``mr`` 8: the weight in blocks of 8 rows, any M, a short last
    block), bit-equal to each other: the same sums in the same order."""
    got = _matches_onnxruntime(build_conv_direct_native, seed, n, c, m, h, w, kernel, strides, dilations, pads, bias, rows)
    if got is not None and rows:
        flat = _matches_onnxruntime(build_conv_direct_native, seed, n, c, m, h, w, kernel, strides, dilations, pads, bias)
        np.testing.assert_array_equal(got, flat)


@given(
    seed=st.integers(0, 2**16),
    h=st.integers(1, 9),
    w=st.integers(14, 45),  # rows of 7 to 23 columns a phase: 8 at a time, then one by one
    kw=st.sampled_from([1, 2, 3, 5, 7]),  # a width of 1, or dilated 2 with 3: one column phase read
    sh=st.integers(1, 2),
    dw=st.integers(1, 2),
    pads=st.tuples(*[st.integers(0, 3)] * 4),
    t=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_stride_2_column_phases_match_onnxruntime(seed, h, w, kw, sh, dw, pads, t) -> None:
    """At a column stride of 2 both column phases of a row are built in one pass over it
    (csrc/conv_direct.c's pair_rows), the borders each phase reads zeros at apart: any pads,
    odd widths, either conv."""
    build = build_conv_direct_t_native if t else build_conv_direct_native
    _matches_onnxruntime(build, seed, 1, 3, 10, h, w, (3, kw), (sh, 2), (1, dw), pads, True)


def _matches_onnxruntime(build, seed, n, c, m, h, w, kernel, strides, dilations, pads, bias, params=None):  # type: ignore[no-untyped-def]
    """``build``'s conv against onnxruntime: into a fresh output, then twice into a NaN-filled
    one (the packed weight and phase image reused), bit for bit the same. Returns the output
    (None for a geometry with no output)."""
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if h + pads[0] + pads[2] < span[0] or w + pads[1] + pads[3] < span[1]:
        return  # no output: not a valid Conv
    rng = np.random.default_rng(seed)
    inputs = [rand(rng, n, c, h, w), rand(rng, m, c, *kernel)] + ([rand(rng, m)] if bias else [])
    inputs[1].setflags(write=False)  # a constant: packed once
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations}
    (want,) = ort_run("Conv", inputs, attrs)
    run = build(attrs, params or {}, [TensorDesc(a.shape, "float32") for a in inputs], None)
    (got,) = run(inputs, None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    out = np.full(want.shape, np.nan, np.float32)
    run(inputs, [out])
    (again,) = run(inputs, [out])
    np.testing.assert_allclose(again, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(again, got)
    return got


@needs_tier
@pytest.mark.parametrize(
    ("c", "m", "k", "stride", "pad", "size"),
    [(16, 70, 3, 1, 1, 40), (24, 13, 3, 2, 1, 33), (32, 64, 1, 1, 0, 16), (8, 20, 7, 2, 3, 50), (48, 130, 3, 1, 1, 5)]
    + [(5, 14, 1, 1, 0, 13)]  # 1x1: groups of 16 panels cut by a short panel, an image and a share
    # an image's phases past 1 MB: row panels whole take an output row's blocks at a time, each
    # half (and the 3x3s above) a block of rows over its whole range (the same sums either way)
    + [(16, 20, 3, 1, 1, 130)],
)
@pytest.mark.parametrize("rows", [{}, {"rows": 1}, {"rows": 1, "mr": 8}], ids=["flat", "rows", "rows8"])
@pytest.mark.parametrize("batch", [1, 2, 3])
def test_direct_conv_split_over_a_helper_thread_matches_whole(c, m, k, stride, pad, size, rows, batch, monkeypatch) -> None:
    """Panels (large images) or 6-row blocks (one panel), flattened or row panels, shared with
    the C helper thread give the same output bit for bit; so do whole images (a batch of 2).
    Each thread builds the phase rows its share reads (a batch of 3: shares that cross an
    image), in a buffer the last conv left NaN in: no output reads a row it did not build."""
    import threading

    rng = np.random.default_rng(c * m)
    x, wt, b = rand(rng, batch, c, size, size), rand(rng, m, c, k, k), rand(rng, m)
    wt.setflags(write=False)
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4}
    (want,) = ort_run("Conv", [x, wt, b], attrs)
    monkeypatch.setattr("aioge.kernels.conv_algos.DIRECT_SPLIT_MACS", 0)
    descs = [TensorDesc(a.shape, "float32") for a in (x, wt, b)]
    run = build_conv_direct_native(attrs, rows, descs, None)
    poison = build_conv_direct_native(attrs, rows, descs, None)
    pieces = count_splits(monkeypatch)
    nan = np.full_like(x, np.nan)
    with parallel.cpu_tokens(threading.Semaphore(2)):
        poison([nan, wt, b], None)  # both threads' phase buffers full of NaN
        (got,) = run([x, wt, b], None)
    assert pieces == [2, 2]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    poison([nan, wt, b], None)
    (whole,) = run([x, wt, b], None)
    np.testing.assert_array_equal(got, whole)


def test_without_the_tier_the_direct_conv_runs_numpy(monkeypatch) -> None:
    monkeypatch.setattr(native, "function", lambda *a, **k: None)
    rng = np.random.default_rng(3)
    x, wt = rand(rng, 1, 4, 9, 9), rand(rng, 5, 4, 3, 3)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    (want,) = ort_run("Conv", [x, wt], attrs)
    (got,) = build_conv_direct_native(attrs, {}, [TensorDesc(a.shape, "float32") for a in (x, wt)], None)([x, wt], None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# -- conv_direct_t_native: the roles swapped, channels in the lanes ------------------------------


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.integers(1, 6),
    m=st.integers(1, 150),  # past two 64-channel panels, with a narrow last one
    h=st.integers(1, 11),
    w=st.integers(1, 11),
    kernel=st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([1, 3, 5])),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 2)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    bias=st.booleans(),
)
@settings(max_examples=120, deadline=None)
def test_direct_t_conv_matches_onnxruntime(seed, n, c, m, h, w, kernel, strides, dilations, pads, bias) -> None:
    _matches_onnxruntime(build_conv_direct_t_native, seed, n, c, m, h, w, kernel, strides, dilations, pads, bias)


@needs_tier
@pytest.mark.parametrize(
    ("n", "c", "m", "k", "stride", "size"),
    [(1, 192, 1152, 1, 1, 7), (2, 80, 40, 1, 1, 14), (1, 64, 300, 3, 1, 7), (2, 16, 20, 3, 2, 9), (1, 96, 40, 2, 2, 13)]
    + [(1, 16, 64, 3, 1, 29), (1, 8, 100, 3, 1, 7)]  # 4 and 7 panels: by 141 and 9 position blocks
    + [(1, 24, 13, 1, 1, 7), (2, 40, 9, 1, 1, 5)],  # blocks of 6 and 5 positions (49, 25), 8 + 5 and 8 + 1 channels
)
def test_direct_t_conv_shared_with_the_c_helper_matches_whole(n, c, m, k, stride, size, monkeypatch) -> None:
    """By channel panels (8 or more) or by position blocks (fewer panels) over the helper thread; K in
    blocks of 128 where each tap has a plane of its own on a small output (1x1, 2x2/2)."""
    rng = np.random.default_rng(c)
    x, wt, b = rand(rng, n, c, size, size), rand(rng, m, c, k, k), rand(rng, m)
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [k // 2] * 4}
    monkeypatch.setattr("aioge.kernels.conv_algos.DIRECT_SPLIT_MACS", 0)
    run = build_conv_direct_t_native(attrs, {}, [TensorDesc(a.shape, "float32") for a in (x, wt, b)], None)
    pieces = count_splits(monkeypatch)
    import threading

    (whole,) = run([x, wt, b], None)
    with parallel.cpu_tokens(threading.Semaphore(1)):
        (split,) = run([x, wt, b], None)
    assert pieces == [1, 2]
    np.testing.assert_array_equal(split, whole)
    (want,) = ort_run("Conv", [x, wt, b], attrs)
    np.testing.assert_allclose(split, want, rtol=1e-4, atol=1e-4)


def test_without_the_tier_the_direct_t_conv_runs_numpy(monkeypatch) -> None:
    monkeypatch.setattr(native, "function", lambda *a, **k: None)
    monkeypatch.setattr(native, "par_run", lambda: None)
    rng = np.random.default_rng(4)
    x, wt = rand(rng, 1, 6, 5, 5), rand(rng, 9, 6, 3, 3)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    (want,) = ort_run("Conv", [x, wt], attrs)
    (got,) = build_conv_direct_t_native(attrs, {}, [TensorDesc(a.shape, "float32") for a in (x, wt)], None)([x, wt], None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("m", "kernel", "pads"), [(6, (1, 1), (0, 0, 0, 0)), (15, (1, 1), (0, 0, 0, 0)), (64, (3, 1), (1, 0, 1, 0))]
)
@pytest.mark.parametrize("activation", ["", "Relu", "Swish"])
def test_full_tiles_of_whole_output_rows_go_straight_to_the_output(m, kernel, pads, activation) -> None:
    """A kernel one column wide leaves no junk columns: a full 64-position tile of a full block
    of 6 channels is stored from the registers with its bias (and activation) added; the
    short last block and panel keep the accumulator. Both against onnxruntime, bias or not."""
    rng = np.random.default_rng(m)
    x, w, b = rand(rng, 2, 16, 16, 20), rand(rng, m, 16, *kernel), rand(rng, m)
    w.setflags(write=False)
    attrs = {"kernel_shape": list(kernel), "pads": list(pads)}
    impl = next(i for i in get_schema("FusedConv", "aioge").impls if i.name == "conv_direct_native")
    for inputs in ([x, w, b], [x, w]):
        (conv,) = ort_run("Conv", inputs, attrs)
        want = conv if not activation else conv * (1 / (1 + np.exp(-conv))) if activation == "Swish" else np.maximum(conv, 0)
        fused = {**attrs, "activation": activation, "activation_params": [1.0] if activation == "Swish" else []}
        descs = [TensorDesc(a.shape, "float32") for a in inputs]
        (got,) = impl.build(fused, {}, descs, [TensorDesc(want.shape, "float32")])(inputs, None)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_tier
def test_row_panels_are_a_candidate_where_the_phase_rows_carry_junk_columns() -> None:
    from aioge.plan.kernel import candidates_of

    def params(kernel: list[int], strides: list[int], pads: list[int], m: int = 12) -> list[dict[str, int]]:
        descs = [TensorDesc((1, 8, 20, 20), "float32"), TensorDesc((m, 8, *kernel), "float32")]
        attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
        return [p for impl, p in candidates_of(get_schema("Conv"), descs, attrs) if impl.name == "conv_direct_native"]

    assert params([3, 3], [1, 1], [1, 1, 1, 1]) == [{}, {"rows": 1}]
    assert params([3, 3], [2, 2], [1, 1, 1, 1]) == [{}, {"rows": 1}]
    # blocks of 8 weight rows where M is a multiple of 8 and not of 6 (16: 18 rows computed in 6s),
    # on the tier whose tile has them (AVX-512's 6 x 64; AVX2's 16 registers hold no 8-row tile)
    mr8 = [{"rows": 1, "mr": 8}] if native.gemm_tile() == (6, 64) else []
    assert params([3, 3], [1, 1], [1, 1, 1, 1], m=16) == [{}, {"rows": 1}, *mr8]
    assert params([3, 3], [1, 1], [1, 1, 1, 1], m=48) == [{}, {"rows": 1}]
    assert params([1, 1], [1, 1], [0, 0, 0, 0], m=16) == [{}]
    assert params([1, 1], [1, 1], [0, 0, 0, 0]) == [{}]  # every phase-image column is an output
    assert params([3, 1], [1, 1], [1, 0, 1, 0]) == [{}]
    assert params([2, 2], [2, 2], [0, 0, 0, 0]) == [{}]  # (2 - 1) // 2 = 0 junk columns
