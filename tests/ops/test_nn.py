"""Softmax, MatMul, Gemm, normalisation and Dropout against onnxruntime (tolerances in conftest)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error, rand

FAST = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("shape", "axis"), [((7,), -1), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4, 5), 1), ((2, 3, 4), -2)])
def test_softmax(rng, op, shape, axis):
    x = rand(rng, *shape, low=-20, high=20)
    check_op(op, [x], {"axis": axis}, static=True)


def test_softmax_default_axis_float64(rng):
    check_op("Softmax", [rand(rng, 4, 6, dtype=np.float64)])


def test_softmax_bad_axis(rng):
    expect_graph_error("Softmax", [rand(rng, 2, 3)], {"axis": 2}, match="axis 2")


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (4, 5)),
        ((4,), (4, 5)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 3, 4), (4, 5)),
        ((4,), (2, 4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((1, 3, 4), (6, 4, 2)),
    ],
)
def test_matmul(rng, sa, sb):
    check_op("MatMul", [rand(rng, *sa), rand(rng, *sb)], static=True)


def test_matmul_int64(rng):
    check_op("MatMul", [rand(rng, 3, 4, dtype=np.int64, low=-9, high=9), rand(rng, 4, 2, dtype=np.int64, low=-9, high=9)])


def test_matmul_symbolic_batch_keeps_symbol(rng):
    from aioge.ir.graph import Graph
    from aioge.ops import matmul

    g = Graph()
    y = matmul(g.input("a", ("N", 3, 4)), rand(rng, 4, 5))
    assert y.shape == ("N", 3, 5)


@pytest.mark.parametrize(
    ("sa", "sb", "match"), [((3, 4), (5, 6), "inner dimensions"), ((2, 3, 4), (3, 4, 5), "batch"), ((), (3,), "rank")]
)
def test_matmul_bad_shapes(rng, sa, sb, match):
    expect_graph_error("MatMul", [rand(rng, *sa), rand(rng, *sb)], match=match)


@given(
    m=st.integers(1, 5),
    k=st.integers(1, 5),
    n=st.integers(1, 5),
    trans_a=st.integers(0, 1),
    trans_b=st.integers(0, 1),
    alpha=st.sampled_from([1.0, 0.5, -2.0]),
    beta=st.sampled_from([1.0, 0.0, 3.0]),
    c=st.sampled_from(["none", "full", "row", "col", "scalar", "vector"]),
)
@FAST
def test_gemm(m, k, n, trans_a, trans_b, alpha, beta, c):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rand(rng, *((k, m) if trans_a else (m, k)))
    b = rand(rng, *((n, k) if trans_b else (k, n)))
    cs = {"none": None, "full": (m, n), "row": (1, n), "col": (m, 1), "scalar": (), "vector": (n,)}[c]
    inputs = [a, b] + ([] if cs is None else [rand(rng, *cs)])
    check_op("Gemm", inputs, {"alpha": alpha, "beta": beta, "transA": trans_a, "transB": trans_b}, static=True)


def test_gemm_errors(rng):
    expect_graph_error("Gemm", [rand(rng, 3, 4), rand(rng, 3, 5)], match="inner dimensions")
    expect_graph_error("Gemm", [rand(rng, 3, 4), rand(rng, 4, 5), rand(rng, 2, 5)], match="broadcast")
    expect_graph_error("Gemm", [rand(rng, 3, 4), rand(rng, 4, 5)], {"transA": 2}, match="transA")
    expect_graph_error("Gemm", [rand(rng, 3, 4), rand(rng, 4, 5)], {"bogus": 1}, match="unknown attribute")


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 4, 2, 3, 2)])
def test_batch_norm(rng, shape):
    c = shape[1]
    x = rand(rng, *shape)
    params = [rand(rng, c), rand(rng, c), rand(rng, c), rand(rng, c, low=0.1, high=2.0)]
    check_op("BatchNormalization", [x, *params], {"epsilon": 1e-3}, static=True)


def test_batch_norm_errors(rng):
    x = rand(rng, 2, 3, 4)
    good = [rand(rng, 3) for _ in range(4)]
    expect_graph_error("BatchNormalization", [x, rand(rng, 4), *good[1:]], match="scale must have shape")
    expect_graph_error("BatchNormalization", [x, *good], {"training_mode": 1}, match="training_mode")


@pytest.mark.parametrize(("shape", "axis"), [((4, 6), -1), ((2, 3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4, 5), -2)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("outputs", [1, 3])
def test_layer_norm(rng, shape, axis, bias, outputs):
    x = rand(rng, *shape, low=-3, high=3)
    norm_shape = shape[axis:]
    inputs = [x, rand(rng, *norm_shape)] + ([rand(rng, *norm_shape)] if bias else [])
    check_op("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-4}, num_outputs=outputs, static=True)


def test_layer_norm_broadcast_scale(rng):
    check_op("LayerNormalization", [rand(rng, 2, 3, 4), rand(rng, 1, 4), rand(rng, 4)], {"axis": 1})


def test_layer_norm_errors(rng):
    expect_graph_error("LayerNormalization", [rand(rng, 2, 3), rand(rng, 4)], match="Scale of shape")
    expect_graph_error("LayerNormalization", [rand(rng, 2, 3), rand(rng, 3)], {"axis": 3}, match="out of range")


@pytest.mark.parametrize("size", [1, 3, 5])
@pytest.mark.parametrize("shape", [(2, 6, 3, 3), (1, 4, 5, 2)])  # onnxruntime: 4-D only
def test_lrn(rng, size, shape):
    check_op("LRN", [rand(rng, *shape)], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0}, static=True)


def test_lrn_even_size_matches_spec(rng):
    # onnxruntime only takes odd sizes; the spec's window is [c - floor((s-1)/2), c + ceil((s-1)/2)]
    x = rand(rng, 2, 6, 3)
    size, alpha, beta, bias = 4, 0.02, 0.75, 1.5
    g, feeds = aioge_graph("LRN", [x], {"size": size, "alpha": alpha, "beta": beta, "bias": bias})
    (got,) = evaluate(g, feeds)
    want = np.empty_like(x)
    for c in range(6):
        lo, hi = max(0, c - (size - 1) // 2), min(5, c + (size - 1 - (size - 1) // 2))
        sq = np.square(x[:, lo : hi + 1]).sum(axis=1)
        want[:, c] = x[:, c] / (bias + alpha / size * sq) ** beta
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lrn_requires_size(rng):
    expect_graph_error("LRN", [rand(rng, 1, 3, 4, 4)], match="size")


@pytest.mark.parametrize("outputs", [1, 2])
@pytest.mark.parametrize("extra", ["none", "ratio", "both"])
def test_dropout_is_identity(rng, outputs, extra):
    x = rand(rng, 3, 4)
    inputs = [x]
    if extra in ("ratio", "both"):
        inputs.append(np.array(0.3, np.float32))
    if extra == "both":
        inputs.append(np.array(False))
    got = check_op("Dropout", inputs, num_outputs=outputs, const=(1, 2))
    np.testing.assert_array_equal(got[0], x)
    if outputs == 2:
        assert got[1].dtype == np.bool_ and got[1].all()


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.75])
def test_dropout_training_mode_matches_reference(rng, ratio):
    """Seeded training-mode Dropout: onnx.reference's mask (numpy RandomState(seed)), scaled by 1/(1-ratio)."""
    from tests.ops.onnx_reference import check_ref

    x = rand(rng, 4, 5)
    check_ref("Dropout", [x, np.array(ratio, np.float32), np.array(True)], {"seed": 7}, opset=22, num_outputs=2)
    y, mask = check_ref("Dropout", [x, np.array(ratio, np.float32), np.array(False)], {"seed": 7}, opset=22, num_outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.all()


@pytest.mark.anyio
async def test_dropout_training_mode_unseeded_draws_afresh(rng):
    from tests.ops.onnx_reference import run_session

    x = np.ones((64, 64), np.float32)
    g, feeds = aioge_graph("Dropout", [x, np.array(0.5, np.float32), np.array(True)], num_outputs=2)
    names = [v.name for v in g.outputs]
    r1, r2 = await run_session(g, feeds), await run_session(g, feeds)
    (y1, m1), m2 = (r1[n] for n in names), r2[names[1]]
    assert not np.array_equal(m1, m2)  # 4,096 fair draws: equal masks have probability 2**-4096
    np.testing.assert_array_equal(y1, np.where(m1, 2.0, 0.0).astype(np.float32))
    assert 0.4 < m1.mean() < 0.6
