"""Adagrad, Momentum and Adam (ai.onnx.preview.training, aioge.ops.training) against onnx.reference
(onnxruntime's CPU build does not run the training domain)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import rand
from tests.ops.onnx_reference import check_against

DOMAIN = "ai.onnx.preview.training"


def _tensors(rng, groups, n):
    return [rand(rng, 3, 2) if (i // n) != groups - 1 else rand(rng, 3, 2, low=0.1, high=1) for i in range(groups * n)]


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("t", [0, 3])
def test_adagrad(rng, n, t):
    args = [np.array(0.1, np.float32), np.array(t, np.int64), *_tensors(rng, 3, n)]
    attrs = {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}
    check_against("Adagrad", args, attrs, opset=1, domain=DOMAIN, runtime="reference", num_outputs=2 * n)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 2])
def test_momentum(rng, mode, t):
    args = [np.array(0.1, np.float32), np.array(t, np.int64), *_tensors(rng, 3, 2)]
    attrs = {"alpha": 0.9, "beta": 0.5, "mode": mode, "norm_coefficient": 0.01}
    check_against("Momentum", args, attrs, opset=1, domain=DOMAIN, runtime="reference", num_outputs=4)


@pytest.mark.parametrize("t", [0, 4])
def test_adam(rng, t):
    args = [np.array(0.1, np.float32), np.array(t, np.int64), *_tensors(rng, 4, 2)]
    attrs = {"alpha": 0.85, "beta": 0.95, "epsilon": 1e-4, "norm_coefficient": 0.01, "norm_coefficient_post": 0.02}
    check_against("Adam", args, attrs, opset=1, domain=DOMAIN, runtime="reference", num_outputs=6)


def test_training_errors(rng):
    from aioge.errors import GraphError
    from tests.ops.onnx_reference import _graph

    args = [np.array(0.1, np.float32), np.array(1, np.int64), *_tensors(rng, 2, 2)]  # 4 tensors, not 3 groups
    with pytest.raises(GraphError, match="3 equal groups"):
        _graph("Adagrad", args, {}, (), 1, DOMAIN)
