"""The compiled Winograd convolution (``kernels/csrc/conv_direct.c``: ``conv_winograd_native``,
F(2x2, 3x3) and F(4x4, 3x3)): stride-1 3x3 Conv against onnxruntime over pads, batches, odd
output sizes (tiles cut at the edge), channel counts past one 64-channel panel, bias and a fused
ReLU; each stage shared with the C helper thread gives the same output bit for bit."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, parallel
from aioge.kernels.conv_algos import _wino_space, build_conv_winograd_native
from tests.ops.conftest import count_splits, ort_run, rand

pytestmark = pytest.mark.skipif(not native.available(), reason="the compiled tier")


def _case(seed, n, c, m, h, w, pads, bias, relu, r):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    inputs = [rand(rng, n, c, h, w), rand(rng, m, c, 3, 3) / np.float32(3 * np.sqrt(c))] + ([rand(rng, m)] if bias else [])
    inputs[1].setflags(write=False)
    attrs = {"kernel_shape": [3, 3], "pads": list(pads)}
    (want,) = ort_run("Conv", inputs, attrs)
    want = np.maximum(want, 0) if relu else want
    fused = {**attrs, "activation": "Relu", "activation_params": []} if relu else attrs
    run = build_conv_winograd_native(fused, {"r": r}, [TensorDesc(a.shape, "float32") for a in inputs], None)
    return run, inputs, want


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.sampled_from([16, 32, 48]),
    m=st.sampled_from([16, 32, 80, 144]),  # past two 64-channel panels, a narrow last one
    h=st.integers(1, 15),
    w=st.integers(1, 15),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    bias=st.booleans(),
    relu=st.booleans(),
    r=st.sampled_from([2, 4]),
)
@settings(max_examples=80, deadline=None)
def test_winograd_conv_matches_onnxruntime(seed, n, c, m, h, w, pads, bias, relu, r) -> None:
    """Into a fresh output, then into a NaN-filled one (every output written), bit for bit the same."""
    if h + pads[0] + pads[2] < 3 or w + pads[1] + pads[3] < 3:
        return  # no output
    run, inputs, want = _case(seed, n, c, m, h, w, pads, bias, relu, r)
    (got,) = run(inputs, None)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * (1 + float(np.abs(want).max())))
    out = np.full(want.shape, np.nan, np.float32)
    (again,) = run(inputs, [out])
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize(
    ("c", "m", "size", "r"), [(64, 64, 56, 4), (128, 128, 28, 4), (256, 256, 14, 2), (32, 96, 7, 2), (16, 16, 9, 4)]
)
def test_winograd_stages_shared_with_the_c_helper_match_whole(c, m, size, r, monkeypatch) -> None:
    """The input transform and output transform by tile rows, the GEMMs by tile points, each over
    the helper thread: the same output as whole, and ResNet-18's shapes within the tolerances."""
    monkeypatch.setattr("aioge.kernels.conv_algos.DIRECT_SPLIT_MACS", 0)
    run, inputs, want = _case(c + m, 1, c, m, size, size, (1, 1, 1, 1), True, True, r)
    pieces = count_splits(monkeypatch)
    (whole,) = run(inputs, None)
    with parallel.cpu_tokens(threading.Semaphore(1)):
        (split,) = run(inputs, None)
    assert pieces == [1, 1, 1, 2, 2, 2]
    np.testing.assert_array_equal(split, whole)
    np.testing.assert_allclose(split, want, rtol=1e-4, atol=1e-5 * (1 + float(np.abs(want).max())))


def test_winograd_forms_of_one_arena_share_their_transform_buffers() -> None:
    """V and Mo are one pair per arena (the smaller conv takes the bigger's), another arena's its own."""
    arena, other = np.empty(1000, np.float32), np.empty(1000, np.float32)
    v, mo = _wino_space(arena[:10], (100, 200))
    assert all(a is b for a, b in zip(_wino_space(arena[10:20], (50, 200)), (v, mo)))
    assert _wino_space(arena[10:20], (101, 10))[0] is not v  # too small: a bigger pair
    assert _wino_space(other[:10], (10, 10))[0] is not v
