"""JOB_PHASES (a direct conv's stride-phase image in a native program) over channel planes: any
split of the batch's planes builds the image the whole job builds, bit for bit, its zero tail
included, and the conv after it matches onnxruntime."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import conv_algos, native
from aioge.kernels.conv_algos import build_conv_direct_native
from tests.ops.conftest import ort_run, rand

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the compiled tier (pip install builds it)")


@given(
    seed=st.integers(0, 2**16),
    n=st.sampled_from([1, 3]),  # one image or an odd few: not split by whole images
    c=st.integers(1, 7),
    size=st.integers(3, 17),
    stride=st.integers(1, 3),
    pad=st.integers(0, 2),
    cuts=st.lists(st.floats(0, 1), max_size=4),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # one constant patched
def test_the_phase_image_split_by_channel_planes_is_the_whole_ones(seed, n, c, size, stride, pad, cuts, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(conv_algos, "LOCAL_PHASES_MACS", -1)  # the phase image in a job of its own
    rng = np.random.default_rng(seed)
    x, w, b = rand(rng, n, c, size, size), rand(rng, 5, c, 3, 3), rand(rng, 5)
    w.setflags(write=False)
    attrs = {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": [pad] * 4}
    (want,) = ort_run("Conv", [x, w, b], attrs)
    descs = [TensorDesc(a.shape, "float32") for a in (x, w, b)]
    form = native.native_form(build_conv_direct_native(attrs, {}, descs, None))
    assert form is not None
    y = np.empty(want.shape, np.float32)
    calls = form([x, w, b], [y])
    assert calls is not None and calls[0].job == native.JOB_PHASES and calls[0].total == n * c
    src = calls[0].keep[-1]
    job = native.lib().aioge_job
    job.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    assert job(native.JOB_PHASES, calls[0].addr, 0, n * c) == 0
    whole = src.copy()
    src.fill(np.nan)
    edges = sorted({0, n * c, *(int(f * n * c) for f in cuts)})
    for lo, hi in zip(edges, edges[1:]):
        assert job(native.JOB_PHASES, calls[0].addr, lo, hi) == 0
    np.testing.assert_array_equal(src, whole)
    assert job(native.JOB_PHASES, calls[0].addr, 0, n * c + 1) < 0  # past the planes: refused
    par = native.par_run()
    for call in calls:
        native.check(par(call.job, call.addr, call.total, 1), "conv")
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [5, 7, 14, 17])
@pytest.mark.parametrize("k", [1, 3])
def test_a_local_phases_conv_splits_by_its_panels_else_the_phases_are_a_job(size: int, k: int) -> None:
    # JOB_CONV_LOCAL only where it splits by position panels (4 and up): cut by weight blocks,
    # each of its chunks built every phase row (MobileNetV3's 576 -> 96 1x1 at 7x7: 72 us
    # whole, 143 split in a run), so there the phases are a split job of their own. Whole and
    # split, the same bits, and onnxruntime's Conv.
    rng = np.random.default_rng(size * 10 + k)
    x, w, b = rand(rng, 1, 24, size, size), rand(rng, 40, 24, k, k), rand(rng, 40)
    w.setflags(write=False)
    attrs = {"kernel_shape": [k, k], "pads": [k // 2] * 4}
    (want,) = ort_run("Conv", [x, w, b], attrs)
    descs = [TensorDesc(a.shape, "float32") for a in (x, w, b)]
    form = native.native_form(build_conv_direct_native(attrs, {}, descs, None))
    assert form is not None
    got = []
    for split in (0, 1):
        y = np.full(want.shape, np.nan, np.float32)
        calls = form([x, w, b], [y])
        assert calls is not None
        for call in calls:
            if call.job == native.JOB_CONV_LOCAL:
                assert call.total >= 4 and call.args[8] == 0, "a local job cut by panels"
            native.check(native.par_run()(call.job, call.addr, call.total, split), "conv")
        got.append(y)
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
