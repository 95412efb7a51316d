"""Normalisation ops (aioge.ops.norm) against onnxruntime (RMSNormalization at opset 23)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset, check_ref


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 4, 5), (1, 2, 3, 2, 2)])
def test_instance_norm(rng, shape):
    c = shape[1]
    check_op(
        "InstanceNormalization", [rand(rng, *shape, low=-3, high=5), rand(rng, c), rand(rng, c)], {"epsilon": 1e-3}, static=True
    )


def test_instance_norm_float64(rng):  # onnxruntime has no float64 kernel
    args = [rand(rng, 2, 3, 4, dtype=np.float64), rand(rng, 3, dtype=np.float64), rand(rng, 3, dtype=np.float64)]
    check_ref("InstanceNormalization", args, {"epsilon": 1e-3}, opset=22)


@pytest.mark.parametrize(("shape", "groups"), [((2, 4, 3), 2), ((2, 6, 2, 2), 3), ((1, 4, 2, 2), 4), ((2, 3, 5), 1)])
def test_group_norm(rng, shape, groups):
    c = shape[1]
    check_op(
        "GroupNormalization",
        [rand(rng, *shape, low=-2, high=4), rand(rng, c), rand(rng, c)],
        {"num_groups": groups, "epsilon": 1e-4},
        static=True,
    )


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3], [-1]])
def test_mean_variance_norm(rng, axes):
    attrs = {} if axes is None else {"axes": axes}
    check_op("MeanVarianceNormalization", [rand(rng, 2, 3, 4, 5, low=-3, high=3)], attrs, static=True)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_lp_norm(rng, p, axis):
    x = rand(rng, 3, 4, 2, low=-2, high=2)
    x[0] = 0  # a zero norm along some axes gives 0, not NaN
    check_op("LpNormalization", [x], {"p": p, "axis": axis}, static=True)


@pytest.mark.parametrize(
    ("shape", "axis", "scale_shape"),
    [((2, 3, 4), -1, (4,)), ((2, 3, 4), 1, (3, 4)), ((4, 6), 0, (4, 6)), ((2, 3, 4), -1, (1, 4))],
)
def test_rms_norm(rng, shape, axis, scale_shape):
    with at_opset(23):
        check_op(
            "RMSNormalization",
            [rand(rng, *shape, low=-3, high=3), rand(rng, *scale_shape)],
            {"axis": axis, "epsilon": 1e-4},
            static=True,
        )


def test_norm_errors(rng):
    expect_graph_error(
        "GroupNormalization", [rand(rng, 2, 4, 3), rand(rng, 4), rand(rng, 4)], {"num_groups": 3}, match="divide into"
    )
    expect_graph_error("InstanceNormalization", [rand(rng, 2, 3, 4), rand(rng, 2), rand(rng, 3)], match="scale must have shape")
    expect_graph_error("LpNormalization", [rand(rng, 3)], {"p": 3}, match="p")
    expect_graph_error("RMSNormalization", [rand(rng, 3, 2, dtype=np.int32, low=0, high=2), rand(rng, 2)], match="float")
