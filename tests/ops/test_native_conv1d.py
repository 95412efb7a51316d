"""1-D convolutions in the compiled tier: a Conv over (N, C, L) is the 2-D one of height 1, so
every C conv (direct, direct_t, depthwise, grouped) takes it, with a fused bias and activation,
and carries a native form (Whisper's Conv1d + GELU had only numpy's im2col, no form: its model
ran step by step). Against onnxruntime over strides, dilations, pads, groups and odd lengths;
each native form bit-equal to its kernel's run; the numpy im2col without the tier."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.ir.desc import TensorDesc
from aioge.kernels import native
from aioge.ops.registry import get_schema
from tests.ops.conftest import ort_run, rand

NATIVE = ["conv_direct_native", "conv_direct_t_native", "conv_depthwise_native", "conv_grouped_native"]
# (activation, its params, onnxruntime's op after the Conv)
ACTS = [
    ("", (), None),
    ("Gelu", (0.0,), ("Gelu", {})),
    ("Gelu", (1.0,), ("Gelu", {"approximate": "tanh"})),
    ("Relu", (), ("Relu", {})),
]


def _case(
    impl: str, seed: int, n: int, cg: int, length: int, k: int, stride: int, dilation: int, pads, bias: bool, rank: int = 1
):  # type: ignore[no-untyped-def]
    """Inputs and attributes of a Conv ``impl`` takes: group 1 (direct), C (depthwise, 1-2
    outputs a channel) or 2-3 groups of ``cg`` channels (grouped)."""
    rng = np.random.default_rng(seed)
    group = {"conv_depthwise_native": cg + 1, "conv_grouped_native": 2 + seed % 2}.get(impl, 1)
    cg = max(cg, 2) if impl == "conv_grouped_native" else cg  # 1 < group < C
    c = group if impl == "conv_depthwise_native" else group * cg
    m = group * (1 + seed % 2) if impl == "conv_depthwise_native" else group * (cg + seed % 3)
    spatial = (length,) if rank == 1 else (length, length + 2)
    inputs = [rand(rng, n, c, *spatial) * 2, rand(rng, m, c // group, *([k] * rank))] + ([rand(rng, m)] if bias else [])
    inputs[1].setflags(write=False)  # a constant: packed once
    attrs = {"kernel_shape": [k] * rank, "strides": [stride] * rank, "dilations": [dilation] * rank, "group": group}
    attrs["pads"] = list(pads) * rank if rank == 2 else list(pads)
    return inputs, attrs


def _fits(length: int, k: int, dilation: int, pads) -> bool:  # type: ignore[no-untyped-def]
    return length + sum(pads) >= (k - 1) * dilation + 1


def _reference(inputs, attrs, act):  # type: ignore[no-untyped-def]
    (conv,) = ort_run("Conv", inputs, attrs)
    return conv if act[2] is None else ort_run(act[2][0], [conv], act[2][1])[0]


def _check(impl: str, inputs, attrs, act) -> None:  # type: ignore[no-untyped-def]
    """``impl`` as a FusedConv against onnxruntime, into a fresh and a reused output, and its
    native form's jobs bit-equal to the run."""
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    kernel = next(i for i in get_schema("FusedConv", "aioge").impls if i.name == impl)
    assert kernel.applies(descs, attrs), (impl, attrs)
    want = _reference(inputs, attrs, act)
    for params in kernel.candidates(descs, attrs):
        run = kernel.build(
            {**attrs, "activation": act[0], "activation_params": act[1]}, params, descs, [TensorDesc(want.shape, "float32")]
        )
        (got,) = run(inputs, None)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
        out = np.full(want.shape, np.nan, np.float32)
        run(inputs, [out])
        np.testing.assert_array_equal(out, got)
        form = native.native_form(run)
        assert form is not None, impl
        y = np.full(want.shape, np.nan, np.float32)
        calls = form(inputs, [y])
        assert calls is not None
        par = native.par_run()
        for c in calls:
            assert par(c.job, native.ptr(c.args), c.total, 0) >= 0
        np.testing.assert_array_equal(y, got)


native_only = pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")


@native_only
@pytest.mark.parametrize("impl", NATIVE)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 3),
    cg=st.integers(1, 9),
    length=st.integers(1, 41),  # past a 16- or 64-position panel, odd
    k=st.sampled_from([1, 2, 3, 5]),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 3),
    pads=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    bias=st.booleans(),
    act=st.sampled_from(ACTS),
)
@settings(max_examples=25, deadline=None)
def test_a_1d_conv_in_each_c_conv_matches_onnxruntime_and_its_form(
    impl, seed, n, cg, length, k, stride, dilation, pads, bias, act
) -> None:
    if not _fits(length, k, dilation, pads):
        return  # no output: not a valid Conv
    inputs, attrs = _case(impl, seed, n, cg, length, k, stride, dilation, pads, bias)
    _check(impl, inputs, attrs, act)


@native_only
@given(
    seed=st.integers(0, 2**16),
    cg=st.integers(1, 6),
    length=st.integers(3, 13),
    k=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    pads=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    act=st.sampled_from(ACTS),
)
@settings(max_examples=15, deadline=None)
def test_a_2d_grouped_conv_carries_a_native_form_too(seed, cg, length, k, stride, pads, act) -> None:
    # conv_grouped_native computed through the direct conv's jobs but dropped their form
    inputs, attrs = _case("conv_grouped_native", seed, 2, cg, length, k, stride, 1, pads, True, rank=2)
    _check("conv_grouped_native", inputs, attrs, act)


@native_only
@pytest.mark.parametrize("impl", NATIVE)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_long_1d_conv_split_over_the_helper_thread_matches_whole(impl: str, n: int, monkeypatch) -> None:
    # past many position panels (Whisper's 1500 frames, shortened): the halves bit-equal to one run
    import threading

    from aioge.kernels import parallel

    monkeypatch.setattr("aioge.kernels.conv_algos.DIRECT_SPLIT_MACS", 0)
    monkeypatch.setattr("aioge.kernels.conv_algos.NATIVE_SPLIT_MACS", 0)
    inputs, attrs = _case(impl, 7, n, 6, 301, 3, 2, 1, (1, 1), True)
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    kernel = next(i for i in get_schema("Conv").impls if i.name == impl)
    run = kernel.build(attrs, {}, descs, None)
    pieces: list[int] = []
    real = parallel.split_native
    monkeypatch.setattr("aioge.kernels.conv_algos.split_native", lambda *a, **k: pieces.append(real(*a, **k)) or pieces[-1])
    with parallel.cpu_tokens(threading.Semaphore(2)):
        (split,) = run(inputs, None)
    assert pieces[-1] == 2
    (whole,) = run(inputs, None)
    np.testing.assert_array_equal(split, whole)
    np.testing.assert_allclose(split, ort_run("Conv", inputs, attrs)[0], rtol=1e-4, atol=2e-5)


def test_same_padding_1d_conv_matches_onnxruntime() -> None:
    for impl in NATIVE if native.available() else []:
        for auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
            inputs, attrs = _case(impl, 3, 2, 3, 10, 4, 2, 1, (0, 0), True)
            del attrs["pads"]
            _check(impl, inputs, {**attrs, "auto_pad": auto_pad}, ACTS[1])


def test_without_the_tier_a_1d_conv_runs_numpy_s_im2col(numpy_kernels) -> None:
    assert not native.available()
    for impl in NATIVE:
        inputs, attrs = _case(impl, 11, 2, 3, 17, 3, 2, 2, (1, 2), True)
        descs = [TensorDesc(a.shape, "float32") for a in inputs]
        kernel = next(i for i in get_schema("FusedConv", "aioge").impls if i.name == impl)
        run = kernel.build({**attrs, "activation": "Gelu", "activation_params": (0.0,)}, {}, descs, descs[:1])
        (got,) = run(inputs, None)
        np.testing.assert_allclose(got, _reference(inputs, attrs, ACTS[1]), rtol=1e-4, atol=2e-5)
        assert native.native_form(run) is None


@pytest.mark.anyio
@pytest.mark.parametrize("tier", [True, False], ids=["c-tier", "numpy"])
async def test_whisper_s_conv_stem_runs_as_one_native_program(monkeypatch, tmp_path, request, tier: bool) -> None:
    """Conv1d + GELU, then a stride-2 Conv1d + GELU (Whisper's stem, odd length), as a session
    runs it: one native program where the tier is, bit-equal to its traced steps, and the same
    values as onnxruntime's; step by step in numpy without the tier."""
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))  # tuning noise aside
    if not tier:
        request.getfixturevalue("numpy_kernels")
    rng = np.random.default_rng(5)
    w1, b1, w2, b2 = rand(rng, 12, 5, 3), rand(rng, 12), rand(rng, 12, 12, 3), rand(rng, 12)
    g = aioge.Graph("stem")
    x = g.input("x", (2, 5, 19), "float32")
    h = ops.gelu(ops.conv2d(x, g.constant(w1), g.constant(b1), pads=(1, 1)))
    g.output(ops.gelu(ops.conv2d(h, g.constant(w2), g.constant(b2), pads=(1, 1), strides=(2,))), names=["y"])
    feeds = {"x": rand(rng, 2, 5, 19)}
    (h_ref,) = ort_run("Conv", [feeds["x"], w1, b1], {"pads": [1, 1]})
    (h_ref,) = ort_run("Gelu", [h_ref])
    (y_ref,) = ort_run("Conv", [h_ref, w2, b2], {"pads": [1, 1], "strides": [2]})
    (y_ref,) = ort_run("Gelu", [y_ref])
    async with aioge.Session() as sess:
        await sess.add_graph(1, g)
        for _ in range(3):
            got = (await sess.run_graph(1, feeds))["y"]
        exe = sess.executable(1)
        steps = (await sess.run_graph(1, feeds, trace=tmp_path / "trace.json"))["y"]
    np.testing.assert_allclose(got, y_ref, rtol=1e-4, atol=2e-5)
    assert np.array_equal(got, steps)
    assert (exe.native_runs >= 3) == native.available(), [p.kernel.impl for p in exe.model.nodes]
