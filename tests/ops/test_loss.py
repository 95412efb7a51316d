"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (aioge.ops.loss) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, rand


def _targets(rng, shape, classes, ignore=None):
    t = rng.integers(0, classes, size=shape).astype(np.int64)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    return t


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 4, 2, 3)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -1])
def test_nll_loss(rng, reduction, shape, weighted, ignore):
    n, c, rest = shape[0], shape[1], shape[2:]
    x = rand(rng, *shape, low=-3, high=0)
    inputs = [x, _targets(rng, (n, *rest), c, ignore)] + ([rand(rng, c, low=0.2, high=2)] if weighted else [])
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    check_op("NegativeLogLikelihoodLoss", inputs, attrs, static=True)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("outputs", [1, 2])
def test_softmax_cross_entropy(rng, reduction, shape, weighted, outputs):
    n, c, rest = shape[0], shape[1], shape[2:]
    x = rand(rng, *shape, low=-20, high=20)
    inputs = [x, _targets(rng, (n, *rest), c, 0)] + ([rand(rng, c, low=0.2, high=2)] if weighted else [])
    attrs = {"reduction": reduction, "ignore_index": 0}
    check_op("SoftmaxCrossEntropyLoss", inputs, attrs, num_outputs=outputs, static=True)


def test_all_ignored_mean_is_nan(rng):  # 0 / 0, as onnxruntime and ONNX's function body
    x = rand(rng, 3, 4)
    check_op("NegativeLogLikelihoodLoss", [x, np.full(3, 2, np.int64)], {"ignore_index": 2})


def test_loss_errors(rng):
    expect_graph_error("NegativeLogLikelihoodLoss", [rand(rng, 3, 4), np.zeros((3, 2), np.int64)], match="does not fit")
    expect_graph_error("NegativeLogLikelihoodLoss", [rand(rng, 3, 4), np.zeros(3, np.float32)], match="int32 or int64")
    expect_graph_error(
        "SoftmaxCrossEntropyLoss", [rand(rng, 3, 4), np.zeros(3, np.int64)], {"reduction": "avg"}, match="reduction"
    )
