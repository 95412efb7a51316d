"""Windowed ops (aioge.ops.window) against onnxruntime: ConvTranspose, LpPool, GlobalMaxPool and
MaxUnpool (fed by onnxruntime's own MaxPool indices)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, ort_run, rand
from tests.ops.onnx_reference import check_ref

_CONV_T = [
    ((1, 2, 3, 3), (2, 3, 3, 3), {}),
    ((2, 2, 3, 4), (2, 2, 2, 3), {"strides": [2, 3]}),
    ((1, 4, 3, 3), (4, 1, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 4, 3, 3), (4, 3, 2, 2), {"group": 4}),
    ((1, 2, 4, 4), (2, 1, 3, 3), {"dilations": [2, 1], "strides": [1, 2]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_padding": [1, 1]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 1, 5), (1, 2, 3), {"strides": [2]}),
    ((1, 2, 2, 3, 2), (2, 1, 2, 2, 2), {"strides": [1, 2, 1]}),
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), _CONV_T)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(rng, xs, ws, attrs, bias):
    m = ws[1] * attrs.get("group", 1)
    inputs = [rand(rng, *xs), rand(rng, *ws)] + ([rand(rng, m)] if bias else [])
    check_op("ConvTranspose", inputs, attrs, static=True)


def test_conv_transpose_float64(rng):  # onnxruntime has no float64 kernel
    check_ref(
        "ConvTranspose",
        [rand(rng, 1, 2, 3, 3, dtype=np.float64), rand(rng, 2, 2, 2, 2, dtype=np.float64)],
        {"strides": [2, 2]},
        opset=22,
    )


def test_conv_transpose_errors(rng):
    expect_graph_error("ConvTranspose", [rand(rng, 1, 3, 3, 3), rand(rng, 2, 1, 3, 3)], match="does not fit")
    expect_graph_error("ConvTranspose", [rand(rng, 1, 2, 3, 3), rand(rng, 2, 1, 3, 3)], {"pads": [3, 3, 3, 3]}, match="empty")


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((1, 2, 6), {"kernel_shape": [3]}),
        ((1, 2, 5, 5), {"kernel_shape": [2, 2]}),
        ((1, 2, 5, 5), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ((1, 1, 6, 5), {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER"}),
        ((1, 1, 6, 6), {"kernel_shape": [2, 2], "dilations": [2, 2]}),
        ((1, 1, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ((1, 1, 3, 4, 4), {"kernel_shape": [2, 2, 2]}),
    ],
)
def test_lp_pool(rng, p, shape, attrs):
    check_op("LpPool", [rand(rng, *shape)], {"p": p, **attrs}, static=True)


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 2, 3, 4), (1, 2, 2, 3, 2)])
def test_global_max_pool(rng, shape):
    check_op("GlobalMaxPool", [rand(rng, *shape)], static=True)


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((1, 2, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ((2, 1, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ],
)
@pytest.mark.parametrize("with_shape", [False, True])
def test_max_unpool(rng, shape, attrs, with_shape):
    x = rand(rng, *shape)
    pooled, indices = ort_run("MaxPool", [x], attrs, num_outputs=2)
    if not with_shape:
        check_op("MaxUnpool", [pooled, indices], attrs, static=True)
        return
    # A larger output_shape holds the unpooled tensor in its leading corner, as the ONNX
    # reference and the node suite have it (onnxruntime re-reads the indices in the larger
    # shape and fails test_maxunpool_export_with_output_shape).
    shape = np.array(x.shape[:2] + tuple(d + 1 for d in x.shape[2:]), np.int64)
    check_ref("MaxUnpool", [pooled, indices, shape], attrs, opset=22, const=(2,))


@pytest.mark.parametrize(
    "attrs",
    [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"dilations": [2, 1]}, {"group": 2, "offset_group": 2}],
)
@pytest.mark.parametrize("masked", [False, True])
def test_deform_conv(rng, attrs, masked):
    x = rand(rng, 2, 4, 6, 6)
    w = rand(rng, 4, 4 // attrs.get("group", 1), 3, 3)
    pads, strides, dil = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    out = [(6 + pads[i] + pads[i + 2] - dil[i] * 2 - 1) // strides[i] + 1 for i in range(2)]
    og = attrs.get("offset_group", 1)
    offset = rand(rng, 2, og * 2 * 9, *out, low=-1.5, high=1.5)
    inputs = [x, w, offset, rand(rng, 4)] + ([rand(rng, 2, og * 9, *out, low=0, high=1)] if masked else [])
    check_ref("DeformConv", inputs, attrs, opset=22)
