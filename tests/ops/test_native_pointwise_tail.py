"""1x1 convs at stride 1 read x in place whatever the plane's size (csrc/conv_direct.c's
load_tail): a ragged last panel's last vector is loaded masked, never past the image. Against
onnxruntime over odd planes past several panels, whole and split over the C helper thread, K in
one block and past it; and with x's last float the last of a readable page."""

from __future__ import annotations

import ctypes
import mmap
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, parallel
from aioge.kernels.conv_algos import _layout, build_conv_direct_native, conv_geometry
from tests.ops.conftest import ort_run, rand

needs_tier = pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")


@needs_tier
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 3),
    c=st.sampled_from([1, 3, 16, 37, 200, 1100]),  # 1100: K past one block (the accumulator path)
    m=st.integers(1, 20),
    h=st.integers(1, 40),
    w=st.integers(1, 40),
    act=st.sampled_from(["", "Relu", "Swish"]),
)
@settings(max_examples=50, deadline=None)
def test_pointwise_conv_reads_odd_planes_in_place(seed, n, c, m, h, w, act) -> None:
    """Whole, and split over the C helper thread bit for bit the same."""
    rng = np.random.default_rng(seed)
    x, wt, b = rand(rng, n, c, h, w), rand(rng, m, c, 1, 1), rand(rng, m)
    wt.setflags(write=False)
    (want,) = ort_run("Conv", [x, wt, b], {"kernel_shape": [1, 1]})
    if act == "Relu":
        want = np.maximum(want, 0)
    elif act == "Swish":
        want = want / (1 + np.exp(-want))
    attrs = {"kernel_shape": [1, 1], **({"activation": act, "activation_params": [1.0]} if act else {})}
    descs = [TensorDesc(a.shape, "float32") for a in (x, wt, b)]
    assert _layout(conv_geometry(descs, attrs), native.gemm_tile()).in_place  # type: ignore[arg-type]
    (got,) = build_conv_direct_native(attrs, {}, descs, None)([x, wt, b], None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.MonkeyPatch.context() as mp, parallel.cpu_tokens(threading.Semaphore(2)):
        mp.setattr("aioge.kernels.conv_algos.DIRECT_SPLIT_MACS", 0)
        (split,) = build_conv_direct_native(attrs, {}, descs, None)([x, wt, b], None)
    np.testing.assert_array_equal(split, got)


def test_a_ragged_last_panel_reads_nothing_past_x() -> None:
    """x ends a readable page, an unreadable one after it: a full-vector load of the last
    panel's tail would fault."""
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None)
    assert libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 0) == 0  # PROT_NONE
    try:
        c, h, w = 5, 11, 13  # 143 positions a plane: a tail of 15, 7 or 3 lanes on each tier
        floats = c * h * w
        x = np.frombuffer(buf, np.float32, floats, page - 4 * floats).reshape(1, c, h, w)
        x[...] = rand(np.random.default_rng(1), 1, c, h, w)
        wt = rand(np.random.default_rng(2), 7, c, 1, 1)
        wt.setflags(write=False)
        run = build_conv_direct_native(
            {"kernel_shape": [1, 1]}, {}, [TensorDesc(x.shape, "float32"), TensorDesc(wt.shape, "float32")], None
        )
        (got,) = run([x, wt], None)
        (want,) = ort_run("Conv", [np.array(x), wt], {"kernel_shape": [1, 1]})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    finally:
        libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 3)
        del x


@given(
    seed=st.integers(0, 2**16),
    c=st.integers(1, 5),
    m=st.integers(1, 20),
    h=st.integers(3, 9),
    w=st.integers(49, 140),  # rows of 2 to 3 panels of 48 or 64 outputs, a short last one
    stride=st.integers(1, 2),
    mr=st.sampled_from([0, 8]),
)
@settings(max_examples=30, deadline=None)
def test_row_panels_of_wide_rows_a_block_at_a_time(seed, c, m, h, w, stride, mr) -> None:
    """Row panels with K in one block go through an output row's panels a weight block at a time
    (csrc/conv_direct.c): against onnxruntime, and whole, split and flat bit for bit the same."""
    rng = np.random.default_rng(seed)
    x, wt, b = rand(rng, 1, c, h, w), rand(rng, m, c, 3, 3), rand(rng, m)
    wt.setflags(write=False)
    attrs = {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": [1, 1, 1, 1]}
    (want,) = ort_run("Conv", [x, wt, b], attrs)
    descs = [TensorDesc(a.shape, "float32") for a in (x, wt, b)]
    rows = {"rows": 1, **({"mr": mr} if mr else {})}
    (got,) = build_conv_direct_native(attrs, rows, descs, None)([x, wt, b], None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (flat,) = build_conv_direct_native(attrs, {}, descs, None)([x, wt, b], None)
    np.testing.assert_array_equal(got, flat)
    with pytest.MonkeyPatch.context() as mp, parallel.cpu_tokens(threading.Semaphore(2)):
        mp.setattr("aioge.kernels.conv_algos.DIRECT_SPLIT_MACS", 0)
        mp.setattr("aioge.kernels.conv_algos.LOCAL_PHASES_MACS", 0)  # panels cut across rows, x's phases built first
        (split,) = build_conv_direct_native(attrs, rows, descs, None)([x, wt, b], None)
    np.testing.assert_array_equal(split, got)
