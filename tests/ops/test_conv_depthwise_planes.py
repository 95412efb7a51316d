"""conv_depthwise_planes (each tap a multiply-add over flattened stride-phase planes) against
onnxruntime, at every channel block size the tuner tries."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels.conv_algos import _depthwise_candidates, build_conv_depthwise_planes
from tests.ops.conftest import ort_run, rand


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.integers(1, 9),
    mult=st.integers(1, 2),
    h=st.integers(3, 17),
    w=st.integers(3, 17),
    kernel=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 3)] * 4),
    bias=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_depthwise_planes_matches_onnxruntime(seed, n, c, mult, h, w, kernel, strides, dilations, pads, bias) -> None:
    if (h + pads[0] + pads[2] - (kernel[0] - 1) * dilations[0] - 1) < 0 or (
        w + pads[1] + pads[3] - (kernel[1] - 1) * dilations[1] - 1
    ) < 0:
        return  # no output: not a valid Conv
    rng = np.random.default_rng(seed)
    x, wt = rand(rng, n, c, h, w), rand(rng, c * mult, 1, *kernel)
    inputs = [x, wt] + ([rand(rng, c * mult)] if bias else [])
    attrs = {"group": c, "kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": pads}
    (want,) = ort_run("Conv", inputs, attrs)
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    for params in _depthwise_candidates(descs, attrs) + [{"block_kib": 1}]:  # 1 KiB: a block per channel
        run = build_conv_depthwise_planes(attrs, params, descs, None)
        (got,) = run(inputs, None)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(params))
        out = np.full(want.shape, np.nan, np.float32)
        run(inputs, [out])  # into a preallocated output, twice: nothing left over from the last run
        (again,) = run(inputs, [out])
        np.testing.assert_allclose(again, want, rtol=1e-4, atol=1e-5, err_msg=str(params))


def test_depthwise_planes_reuses_the_packed_constant_weight() -> None:
    rng = np.random.default_rng(0)
    x, wt = rand(rng, 1, 4, 8, 8), rand(rng, 4, 1, 3, 3)
    wt.flags.writeable = False
    attrs = {"group": 4, "pads": (1, 1, 1, 1)}
    run = build_conv_depthwise_planes(attrs, {}, [TensorDesc(x.shape, "float32"), TensorDesc(wt.shape, "float32")], None)
    (first,) = run([x, wt], None)
    other = np.ascontiguousarray(wt * 2)  # a new (writeable) weight array is re-packed, not served stale
    (second,) = run([x, other], None)
    np.testing.assert_allclose(second, 2 * first, rtol=1e-5, atol=1e-6)
    (want,) = ort_run("Conv", [x, wt], attrs)
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-5)
