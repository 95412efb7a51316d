"""A cross-section of the nn, conv, shape and reduce ops run through ``aioge.Session`` (the real
compiler and runtime, not conftest's evaluator) and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, compare, ort_run, rand, session_run

pytestmark = pytest.mark.anyio

I64 = np.int64
_rng = np.random.default_rng(7)

CASES = {
    "Conv": (
        [rand(_rng, 2, 4, 9, 9), rand(_rng, 6, 2, 3, 3), rand(_rng, 6)],
        {"group": 2, "strides": (2, 2), "pads": (1, 1, 1, 1)},
        (),
        1,
    ),
    "MaxPool": ([rand(_rng, 1, 3, 7, 7)], {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": 1}, (), 1),
    "AveragePool": ([rand(_rng, 1, 3, 6, 6)], {"kernel_shape": (2, 2), "pads": (1, 1, 0, 0)}, (), 1),
    "Softmax": ([rand(_rng, 3, 10, low=-5, high=5)], {"axis": -1}, (), 1),
    "Gemm": ([rand(_rng, 4, 3), rand(_rng, 5, 4), rand(_rng, 5)], {"transA": 1, "transB": 1, "alpha": 0.5}, (), 1),
    "MatMul": ([rand(_rng, 2, 3, 4), rand(_rng, 4, 5)], {}, (), 1),
    "LayerNormalization": ([rand(_rng, 2, 3, 8), rand(_rng, 8), rand(_rng, 8)], {"epsilon": 1e-5}, (), 3),
    "BatchNormalization": (
        [rand(_rng, 2, 3, 4, 4), rand(_rng, 3), rand(_rng, 3), rand(_rng, 3), rand(_rng, 3, low=0.5, high=1.5)],
        {},
        (),
        1,
    ),
    "Reshape": ([rand(_rng, 2, 3, 4), np.array([0, -1], I64)], {}, (1,), 1),
    "Transpose": ([rand(_rng, 2, 3, 4)], {"perm": (2, 0, 1)}, (), 1),
    "Split": ([rand(_rng, 6, 4), np.array([1, 5], I64)], {"axis": 0}, (1,), 2),
    "Slice": (
        [rand(_rng, 6, 5), np.array([5, 1], I64), np.array([0, 4], I64), np.array([0, 1], I64), np.array([-2, 1], I64)],
        {},
        (1, 2, 3, 4),
        1,
    ),
    "Gather": ([rand(_rng, 5, 3), np.array([[4, -1], [0, 2]], I64)], {"axis": 0}, (1,), 1),
    "Concat": ([rand(_rng, 2, 3), rand(_rng, 2, 1)], {"axis": 1}, (), 1),
    "ReduceMean": ([rand(_rng, 3, 4, 5), np.array([0, 2], I64)], {"keepdims": 0}, (1,), 1),
    "ReduceMax": ([rand(_rng, 3, 4, 5)], {}, (), 1),
}


@pytest.mark.parametrize("op", sorted(CASES))
async def test_op_through_session(op):
    inputs, attrs, const, n = CASES[op]
    expected = ort_run(op, inputs, attrs, n)
    graph, feeds = aioge_graph(op, inputs, attrs, const=const, num_outputs=n)
    got = await session_run(graph, feeds)
    for i, (e, g) in enumerate(zip(expected, got)):
        compare(e, g, f"{op} output {i} via Session")
