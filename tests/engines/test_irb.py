"""JOB_IRB (csrc/irblock.c): an inverted-residual block in bands of output rows or in channel
halves, against onnxruntime over random geometries (odd sizes, strides 1 and 2, 3x3 and 5x5,
every band size, whole and split), and a native program's blocks fused into it (runtime.irb_fuse),
run split and whole, the numpy kernels' run of the same graph agreeing."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import aioge
from aioge.kernels import native, native_rows
from aioge.kernels.matmul_algos import pack_columns

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(ops: tuple[np.ndarray, ...], stride: int, k: int, residual: bool = False) -> bytes:
    x, we, be, wd, bd, wp, bp = ops
    e = we.shape[0]
    init = [numpy_helper.from_array(a, n) for a, n in zip(ops[1:], ["we", "be", "wd", "bd", "wp", "bp"])]
    init += [numpy_helper.from_array(np.float32(v), n) for v, n in ((0.0, "lo"), (6.0, "hi"))]
    nodes = [
        helper.make_node("Conv", ["x", "we", "be"], ["a"]),
        helper.make_node("Clip", ["a", "lo", "hi"], ["a6"]),
        helper.make_node("Conv", ["a6", "wd", "bd"], ["d"], group=e, strides=[stride] * 2, pads=[k // 2] * 4),
        helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
        helper.make_node("Conv", ["d6", "wp", "bp"], ["p" if residual else "y"]),
    ]
    if residual:
        nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "irb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _ops(c: int, e: int, m: int, h: int, w: int, k: int, seed: int) -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(seed)

    def f(*s: int) -> np.ndarray:
        return (r.standard_normal(s) * 0.3).astype(np.float32)

    return f(1, c, h, w), f(e, c, 1, 1), f(e), f(e, 1, k, k), f(e), f(m, e, 1, 1), f(m)


def _ort(model: bytes, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _geo(c: int, h: int, w: int, m: int, a: tuple[int, ...]) -> np.ndarray:  # a 1x1 conv's conv_t geometry
    return np.array([c, h, w, m, 1, 1, 1, 1, 1, 1, 0, 0, h, w, 1, h, w, c * h * w, *a, 0, 0, 0], np.int64)


def _pack(a: np.ndarray) -> np.ndarray:  # a 1x1 conv's weight as conv_t's packed columns
    return pack_columns(np.ascontiguousarray(a.reshape(a.shape[0], -1).T), native.gemm_tile()[1])  # type: ignore[index]


def _irb(ops: tuple[np.ndarray, ...], stride: int, k: int, band: int, split: int, short: int = 0) -> tuple[int, np.ndarray]:
    """JOB_IRB's result code and output (``short``: the block tells x is that many floats less)."""
    x, we, be, wd, bd, wp, bp = ops
    (c, h, w), e, m = x.shape[1:], we.shape[0], wp.shape[0]
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    act = native_rows.epilogue("Clip", (0.0, 6.0))

    ge, gp = _geo(c, h, w, e, act), _geo(e, oh, ow, m, (0, 0, 0))
    gd = np.array([e, h, w, 1, k, k, stride, stride, 1, 1, k // 2, k // 2, oh, ow, *act, 0], np.int64)
    wep, wpp = _pack(we), _pack(wp)
    koff = np.arange(c, dtype=np.int64) * h * w
    y = np.full((1, m, oh, ow), np.nan, np.float32)
    keep = (x, wep, koff, be, ge, wd, bd, gd, wpp, bp, gp, y)
    args = np.array([native.ptr(a) for a in keep] + [band, x.size - short, y.size] + [0] * 15, np.int64)  # no own jobs
    return native.par_run()(native.JOB_IRB, native.ptr(args), -(-oh // band), split), y


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(1, 40),
    e=st.integers(1, 100),
    m=st.integers(1, 70),
    h=st.integers(1, 23),
    w=st.integers(1, 23),
    stride=st.sampled_from([1, 2]),
    k=st.sampled_from([3, 5]),
    band=st.integers(1, 13),
    split=st.sampled_from([0, 1]),
)
def test_irb_bands_match_onnxruntime(c: int, e: int, m: int, h: int, w: int, stride: int, k: int, band: int, split: int) -> None:
    ops = _ops(c, e, m, h, w, k, seed=c * 7 + e + h)
    want = _ort(_model(ops, stride, k), ops[0])
    code, got = _irb(ops, stride, k, band, split)
    assert code > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def _irb_channels(ops: tuple[np.ndarray, ...], stride: int, k: int, k0: int, split: int, residual: bool = False) -> np.ndarray:
    """The channel form: parts [0, k0) and [k0, E) of the expanded channels, then the partial sums
    added; ``residual``: the parts add x too, half each."""
    x, we, be, wd, bd, wp, bp = ops
    (c, h, w), e, m = x.shape[1:], we.shape[0], wp.shape[0]
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    act = native_rows.epilogue("Clip", (0.0, 6.0))

    gd = np.array([e, h, w, 1, k, k, stride, stride, 1, 1, k // 2, k // 2, oh, ow, *act, 0], np.int64)
    ge0, ge1, gp0, gp1 = (
        _geo(c, h, w, k0, act),
        _geo(c, h, w, e - k0, act),
        _geo(k0, oh, ow, m, (0,) * 3),
        _geo(e - k0, oh, ow, m, (0,) * 3),
    )
    we0, we1, wp0, wp1 = _pack(we[:k0]), _pack(we[k0:]), _pack(wp[:, :k0]), _pack(wp[:, k0:])
    koff = np.arange(c, dtype=np.int64) * h * w
    y, part = np.full((1, m, oh, ow), np.nan, np.float32), np.full((1, m, oh, ow), np.nan, np.float32)
    mid, dwo = np.full((e, h, w), np.nan, np.float32), np.full((e, oh, ow), np.nan, np.float32)
    keep = (x, we0, koff, be, ge0, wd, bd, gd, wp0, bp, gp0, y)
    P = native.ptr
    args = [P(a) for a in keep] + [0, x.size, y.size, P(mid), P(dwo), k0, P(wp1), P(gp1), P(part), mid.size, dwo.size, y.size]
    args += [P(we1), P(be) + 4 * k0, P(ge1), 0, P(x) if residual else 0, 0]
    block = np.array(args, np.int64)
    assert native.par_run()(native.JOB_IRB, P(block), 2, split) > 0
    return y + part


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(1, 40),
    e=st.integers(2, 150),
    m=st.integers(1, 70),
    h=st.integers(1, 17),
    w=st.integers(1, 17),
    stride=st.sampled_from([1, 2]),
    k=st.sampled_from([3, 5]),
    cut=st.floats(0, 1),
    split=st.sampled_from([0, 1]),
    residual=st.booleans(),
)
def test_irb_channel_halves_match_onnxruntime(
    c: int, e: int, m: int, h: int, w: int, stride: int, k: int, cut: float, split: int, residual: bool
) -> None:
    if residual:  # y += x: y of x's shape
        m, stride = c, 1
    ops = _ops(c, e, m, h, w, k, seed=c + e * 3 + w)
    want = _ort(_model(ops, stride, k, residual), ops[0])
    got = _irb_channels(ops, stride, k, min(max(int(cut * e), 1), e - 1), split, residual)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def test_irb_refuses_a_geometry_past_its_buffers() -> None:
    ops = _ops(8, 24, 8, 14, 14, 3, 0)
    code, y = _irb(ops, 1, 3, 7, 1, short=1)  # x one float short of what the geometry reads
    assert code == -2  # AIOGE_EGEOMETRY
    assert np.isnan(y).all()  # nothing written
    code, y = _irb(ops, 1, 3, 7, 1)
    assert code > 0 and np.isfinite(y).all()


async def _run(model: bytes, x: np.ndarray, runs: list[np.ndarray] | None = None) -> tuple[np.ndarray, list[int]]:
    """The graph's output and its native program's jobs (JOB_IRB's sum of the parts written to
    a y apart from theirs: -JOB_RESIDUAL); ``runs`` gets the program's output after its jobs ran
    again one by one, whole and then split."""
    import gc

    from aioge.runtime.native_program import NativeProgram

    async with aioge.Session() as s:
        await s.add_graph(1, aioge.load_onnx(model))
        for _ in range(3):
            y = (await s.run_graph(1, {"x": x}))["y"]
        progs = [o for o in gc.get_objects() if type(o) is NativeProgram]
        jobs = [
            -c.job if c.job == native.JOB_RESIDUAL and len(c.keep) == 3 and c.keep[0] is not c.keep[2] else c.job
            for o in progs
            for c in o._keep[1]
        ]
        assert all(len(o._nodes) == len(o._keep[1]) for o in progs), "a step for every job (an error's node)"
        for split in (0, 1) if progs and runs is not None else ():
            for c in progs[0]._keep[1]:
                assert native.par_run()(c.job, c.addr, c.total, split and int(c.worth)) > 0
            runs.append(progs[0]._outputs[0][1].copy())
    return y, jobs


@pytest.mark.parametrize(
    ("shape", "residual", "over"),  # a residual block keeps its shape; over: y as if laid over x
    [
        *(((16, 128, 16, 14, 14, 1), r, False) for r in (False, True)),
        ((24, 128, 40, 15, 13, 1), False, False),
        *(((8, 256, 8, 11, 17, 1), r, False) for r in (False, True)),
        ((5, 256, 7, 7, 7, 1), False, False),
        ((24, 96, 40, 9, 13, 1), False, True),
        ((40, 160, 40, 7, 7, 1), True, True),
    ],
)
def test_a_programs_blocks_run_fused_as_onnxruntime_and_the_numpy_kernels(shape, residual, over, monkeypatch, request) -> None:
    c, e, m, h, w, stride = shape
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))
    if over:  # the parts write a y of the job's own, their sum the planned y (the own jobs' whole run: copied back)
        monkeypatch.setattr("aioge.runtime.irb_fuse._overlap", lambda x, y: True)
    ops = _ops(c, e, m, h, w, 3, seed=h)
    model = _model(ops, stride, 3, residual)
    want = _ort(model, ops[0])
    runs: list[np.ndarray] = []
    got, jobs = asyncio.run(_run(model, ops[0], runs))
    assert native.JOB_IRB in jobs and len(runs) == 2 and (-native.JOB_RESIDUAL in jobs) == over
    assert [abs(j) for j in jobs].count(native.JOB_RESIDUAL) == 1  # the partial sums' (a residual's y += x: in the parts)
    for y in (got, *runs):  # as run, then its jobs whole (the block's own jobs) and split
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    request.getfixturevalue("numpy_kernels")  # the same graph without the compiled tier
    plain, _ = asyncio.run(_run(model, ops[0]))
    np.testing.assert_allclose(plain, want, rtol=1e-4, atol=1e-4)


def _stream_run(model: bytes, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], int]:
    """The graph's output, its program's jobs rerun split and whole, and its streaming-form blocks.
    The 1x1 convs get conv_direct (its row panels where offered) and the depthwise its C form,
    which the streaming form reads:
    the tuner's usual pick, but on a loaded machine it timed another kernel faster now and then
    (1 run in 5), and then nothing streamed."""
    import gc

    from aioge.compiler import tuning
    from aioge.runtime.native_program import NativeProgram

    tune = tuning.tune

    def pinned(schema, cands, *args, **kwargs):  # type: ignore[no-untyped-def]
        direct = [(i, p) for i, p in cands if i.name in ("conv_direct_native", "conv_depthwise_native")]
        direct = [(i, p) for i, p in direct if p.get("rows")] or direct  # row panels where offered (not the baseline's)
        return (
            tuning.Choice(direct[0][0].name, direct[0][1], True)
            if schema.name == "Conv" and direct
            else tune(schema, cands, *args, **kwargs)
        )

    async def go() -> tuple[np.ndarray, list[np.ndarray], int]:
        gc.collect()
        before = {id(o) for o in gc.get_objects() if type(o) is NativeProgram}
        async with aioge.Session() as s:
            await s.add_graph(1, aioge.load_onnx(model))
            for _ in range(2):
                y = (await s.run_graph(1, {"x": x}))["y"]
            prog = next(o for o in gc.get_objects() if type(o) is NativeProgram and id(o) not in before)
            calls = prog._keep[1]
            streams = sum(c.job == native.JOB_IRB and c.args[12] < 0 for c in calls)
            runs = []
            for split in (1, 0):
                for c in calls:
                    assert native.par_run()(c.job, c.addr, c.total, split and int(c.worth)) > 0
                runs.append(prog._outputs[0][1].copy())
            return y, runs, streams

    tuning.tune = pinned
    try:
        return asyncio.run(go())
    finally:
        tuning.tune = tune


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    c=st.integers(3, 24),
    e=st.integers(16, 48),
    h=st.integers(21, 33),
    w=st.integers(5, 35),
    stride=st.sampled_from([1, 2]),
    k=st.sampled_from([3, 5]),
    band=st.integers(1, 9),
    residual=st.booleans(),
)
def test_irb_streaming_form_matches_onnxruntime(c, e, h, w, stride, k, band, residual, monkeypatch) -> None:
    """Blocks over 20 rows: JOB_IRB's streaming form (bands of output rows, the expanded rows in a
    window), against onnxruntime; split and whole (its own segments both in one call) the same bits."""
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))
    monkeypatch.setattr("aioge.runtime.irb_fuse.BAND", band)
    monkeypatch.setattr("aioge.runtime.irb_fuse.WHOLE_OWN", False)
    monkeypatch.setattr("aioge.runtime.irb_fuse.MIN_OW", 1)
    m = c if residual else c + 3
    if residual:
        stride = 1
    ops = _ops(c, e, m, h, w, k, seed=h * 31 + w)
    model = _model(ops, stride, k, residual)
    want = _ort(model, ops[0])
    got, (split, whole), streams = _stream_run(model, ops[0])
    for y in (got, split):
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    np.testing.assert_array_equal(split, whole)
    # the tuner may give a narrow block's 1x1 convs a kernel without row panels (CI: 3-16 at 21x5):
    # then nothing streams, and the example says nothing about the streaming form
    assume(streams == 1)


def _wide(stride: int) -> tuple[bytes, np.ndarray, np.ndarray]:  # MobileNetV2's 56x56 block (stride 2: to 28x28)
    ops = _ops(24, 144, 24 if stride == 1 else 32, 56, 56, 3, seed=5)
    model = _model(ops, stride, 3, stride == 1)
    return model, ops[0], _ort(model, ops[0])


@pytest.mark.parametrize("stride", [1, 2])
def test_a_wide_block_streams_whole_and_split_and_without_the_c_tier(stride, monkeypatch, request) -> None:
    """As the compiler lays it out: stride 1 (outputs 56 wide) streams whole too; stride 2 (28 wide)
    streams split, its whole run the block's own jobs; the numpy kernels' run agrees."""
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))
    model, x, want = _wide(stride)
    got, runs, streams = _stream_run(model, x)
    assert streams == 1
    for y in (got, *runs):
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    request.getfixturevalue("numpy_kernels")
    plain, _ = asyncio.run(_run(model, x))
    np.testing.assert_allclose(plain, want, rtol=1e-4, atol=1e-4)


_TIER_CHILD = """
import sys, numpy as np, aioge.compiler.graph as g
from aioge.kernels import native
from tests.engines import test_irb as t
g.NATIVE_SLACK_MS = float("inf")
model, x, want = t._wide(int(sys.argv[1]))
got, runs, streams = t._stream_run(model, x)
assert streams == 1 or sys.argv[1] == "2", streams  # the baseline tier lays stride 2 out otherwise
for y in (got, *runs):
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
print(native.tier())
"""


@pytest.mark.parametrize("tier", ["avx2", "baseline"])
def test_the_streaming_form_in_the_lower_isa_tiers(tier) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "AIOGE_ISA": tier,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")])),
    }
    for stride in ("1", "2"):
        r = subprocess.run(
            [sys.executable, "-c", _TIER_CHILD, stride], env=env, cwd=root, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stderr[-2000:]
