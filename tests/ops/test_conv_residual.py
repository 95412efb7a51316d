"""A conv's residual in its epilogue (``csrc/conv_direct.c``'s G_Z, set by
``runtime.native_program.fold_residuals``): FusedConv's ``y = act(conv(x) + b + z)`` as the conv
job alone in place of the conv job and a JOB_RESIDUAL after it. Over random geometries (odd
sizes, strides, pads, bias or none, Relu or none) for the three conv jobs it folds into
(conv_direct's register, accumulator and row-panel paths, conv_t, Winograd's output stage):
against onnxruntime's Conv + Add (+ Relu), and bit for bit the two jobs', whole and split over
the C helper; not folded where z shares y's bytes or the conv has an activation of its own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.ir.desc import TensorDesc
from aioge.kernels import native
from aioge.kernels.conv_algos import build_conv_direct_native, build_conv_direct_t_native, build_conv_winograd_native
from aioge.kernels.fused import build_then_residual
from aioge.runtime.native_program import fold_residuals
from tests.ops.conftest import ort_run, rand

pytestmark = pytest.mark.skipif(not native.available(), reason="the compiled tier")

BUILDS = {"direct": build_conv_direct_native, "t": build_conv_direct_t_native, "winograd": build_conv_winograd_native}
FOLDS = (native.JOB_CONV_DIRECT, native.JOB_CONV_T, native.JOB_WINOGRAD)


def residual_calls(kind: str, ins: list[np.ndarray], z: np.ndarray, y: np.ndarray, attrs: dict, params: dict) -> list[Any]:
    """FusedConv's native form (the conv's jobs, then JOB_RESIDUAL) into ``y``, z its residual."""
    descs = [TensorDesc(a.shape, "float32") for a in ins]
    run = build_then_residual(BUILDS[kind], attrs, params, descs, [TensorDesc(y.shape, "float32")])
    calls = native.native_form(run)([*ins, z], [y])
    assert calls is not None and calls[-1].job == native.JOB_RESIDUAL
    return calls


def run_jobs(calls: list[Any], split: bool) -> None:
    par = native.par_run()
    for c in calls:
        assert par(c.job, c.addr, c.total, int(split)) > 0  # the threads it ran on, or an error (negative)


def case(
    kind: str, seed: int, n: int, c: int, m: int, h: int, w: int, k: int, s: int, pads: Any, bias: bool, relu: bool, params: dict
) -> None:
    rng = np.random.default_rng(seed)
    ins = [rand(rng, n, c, h, w), rand(rng, m, c, k, k) / np.float32(k * np.sqrt(c))] + ([rand(rng, m)] if bias else [])
    ins[1].setflags(write=False)
    attrs = {"kernel_shape": [k, k], "pads": list(pads), "strides": [s, s]}
    (conv,) = ort_run("Conv", ins, attrs)
    z = rand(rng, *conv.shape)
    want = np.maximum(conv + z, 0) if relu else conv + z
    fused = {**attrs, "activation": "Relu" if relu else "", "activation_params": []}
    y0, y1 = np.full(conv.shape, np.nan, np.float32), np.full(conv.shape, np.nan, np.float32)
    two = residual_calls(kind, ins, z, y0, fused, params)
    run_jobs(two, False)
    np.testing.assert_allclose(y0, want, rtol=1e-4, atol=1e-4 * (1 + float(np.abs(want).max())))
    one, _ = fold_residuals(residual_calls(kind, ins, z, y1, fused, params), [0] * len(two))
    conv_job = two[-2].job
    assert [c.job for c in one] == [c.job for c in two[:-1]] if conv_job in FOLDS else len(one) == len(two)
    for split in (False, True):
        y1[...] = np.nan
        run_jobs(one, split)
        np.testing.assert_array_equal(y1, y0)


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.integers(1, 40),
    m=st.integers(1, 90),
    h=st.integers(1, 23),
    w=st.integers(1, 23),
    k=st.sampled_from([1, 3]),
    s=st.integers(1, 2),
    pads=st.tuples(*[st.integers(0, 1)] * 4),
    bias=st.booleans(),
    relu=st.booleans(),
    rows=st.booleans(),
)
@settings(max_examples=120, deadline=None)
def test_direct_conv_with_its_residual_matches_onnxruntime_and_the_two_jobs(
    seed, n, c, m, h, w, k, s, pads, bias, relu, rows
) -> None:
    if h + pads[0] + pads[2] < k or w + pads[1] + pads[3] < k:
        return
    case("direct", seed, n, c, m, h, w, k, s, pads, bias, relu, {"rows": int(rows)})


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.integers(1, 300),
    m=st.integers(1, 150),
    hw=st.integers(1, 15),
    k=st.sampled_from([1, 3]),
    s=st.integers(1, 2),
    bias=st.booleans(),
    relu=st.booleans(),
)
@settings(max_examples=80, deadline=None)
def test_conv_t_with_its_residual_matches_onnxruntime_and_the_two_jobs(seed, n, c, m, hw, k, s, bias, relu) -> None:
    pads = (k // 2,) * 4
    case("t", seed, n, c, m, hw, hw + 2, k, s, pads, bias, relu, {})


@given(
    seed=st.integers(0, 2**16),
    c=st.sampled_from([16, 32, 48]),
    m=st.sampled_from([16, 48, 80]),
    h=st.integers(2, 15),
    w=st.integers(2, 15),
    bias=st.booleans(),
    relu=st.booleans(),
    r=st.sampled_from([2, 4]),
)
@settings(max_examples=50, deadline=None)
def test_winograd_with_its_residual_matches_onnxruntime_and_the_two_jobs(seed, c, m, h, w, bias, relu, r) -> None:
    case("winograd", seed, 1, c, m, h, w, 3, 1, (1, 1, 1, 1), bias, relu, {"r": r})


def test_no_fold_where_z_is_y_or_the_conv_has_its_own_activation() -> None:
    """z laid over y (each output's z read where y is not yet written: the conv would read what
    it wrote), and a conv job whose geometry applies an activation already: both stay two jobs."""
    rng = np.random.default_rng(1)
    ins = [rand(rng, 1, 8, 9, 9), rand(rng, 16, 8, 1, 1)]
    ins[1].setflags(write=False)
    y = np.zeros((1, 16, 9, 9), np.float32)
    attrs = {"kernel_shape": [1, 1], "activation": "Relu", "activation_params": []}
    calls = residual_calls("direct", ins, y, y, attrs, {})
    assert len(fold_residuals(calls, [0] * len(calls))[0]) == len(calls)
    descs = [TensorDesc(a.shape, "float32") for a in ins]
    conv = native.native_form(build_conv_direct_native(attrs, {}, descs, None))(ins, [y])  # Relu in its geometry
    z = rand(rng, *y.shape)
    tail = residual_calls("direct", ins, z, y, {"kernel_shape": [1, 1]}, {})[-1:]
    assert len(fold_residuals([*conv, *tail], [0] * (len(conv) + 1))[0]) == len(conv) + 1


@pytest.mark.parametrize(("size", "channels"), [(9, 16), (7, 64)])
@pytest.mark.anyio
async def test_a_resnet_block_runs_its_residual_adds_in_the_convs(size, channels, tmp_path, monkeypatch) -> None:
    """A ResNet basic block and a bottleneck's 1x1 expand, each ending in conv + Add(x) + Relu:
    the program has no JOB_RESIDUAL left (the fusion pass folded the Add into the conv, the
    program the residual into its job), equal to numpy in float64 and bit-equal to the steps."""
    from aioge.examples.cnn import _conv_ref
    from tests.runtime.test_native_program import _live_programs, _program_equals_steps

    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))
    rng = np.random.default_rng(size)
    c = channels
    w = {
        k: (rng.standard_normal(s) * 0.3 / np.sqrt(s[1] * s[2] * s[3])).astype(np.float32)
        for k, s in (("a", (c, c, 3, 3)), ("b", (c, c, 3, 3)), ("r", (c // 4, c, 1, 1)), ("e", (c, c // 4, 1, 1)))
    }
    bs = {k: rng.standard_normal(v.shape[0]).astype(np.float32) * 0.1 for k, v in w.items()}
    g = aioge.Graph("block")
    x = g.input("x", (1, c, size, size), "float32")
    conv = lambda h, k, p: ops.conv2d(h, g.constant(w[k]), g.constant(bs[k]), pads=(p,) * 4)  # noqa: E731
    h1 = ops.relu(ops.add(conv(ops.relu(conv(x, "a", 1)), "b", 1), x))
    g.output(ops.relu(ops.add(conv(ops.relu(conv(h1, "r", 0)), "e", 0), h1)), names=["y"])
    feeds = {"x": rng.standard_normal((1, c, size, size)).astype(np.float32)}
    ref = lambda h, k, p: _conv_ref(h, w[k].astype(np.float64), bs[k].astype(np.float64), p)  # noqa: E731
    r = feeds["x"].astype(np.float64)
    r1 = np.maximum(ref(np.maximum(ref(r, "a", 1), 0), "b", 1) + r, 0)
    want = np.maximum(ref(np.maximum(ref(r1, "r", 0), 0), "e", 0) + r1, 0)
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    async with _live_programs(g, feeds) as progs:
        assert progs, impls
        for p in progs:
            jobs = [c.job for c in p._keep[1]]
            assert not any(j == native.JOB_RESIDUAL and jobs[i - 1] in FOLDS for i, j in enumerate(jobs)), (impls, jobs)
            folded = [c for c in p._keep[1] if c.job in FOLDS and any(_z_of(a, c) for a in c.keep)]
            assert folded, (impls, jobs)
            for split in (False, True):
                np.testing.assert_allclose(p.run(feeds, split)["y"], want, rtol=1e-4, atol=1e-4)


def _z_of(a: Any, call: Any) -> bool:  # ``a`` is the call's geometry, with a residual's address
    return isinstance(a, np.ndarray) and a.size == 24 and native.ptr(a) == call.args[5] and bool(a[23])
