"""Attention and RotaryEmbedding (aioge.ops.attention) against onnxruntime at opset 23."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset, check_ref


def _qkv(rng, b, hq, hkv, sq, skv, d, dv=None):
    return [rand(rng, b, hq, sq, d), rand(rng, b, hkv, skv, d), rand(rng, b, hkv, skv, dv or d)]


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"is_causal": 1},
        {"scale": 0.3},
        {"softcap": 2.0},
        {"qk_matmul_output_mode": 1},
        {"qk_matmul_output_mode": 2},
        {"qk_matmul_output_mode": 3},
    ],
)
def test_attention_4d(rng, attrs):
    with at_opset(23):
        check_op(
            "Attention", _qkv(rng, 2, 2, 2, 3, 4, 5), attrs, num_outputs=4 if "qk_matmul_output_mode" in attrs else 1, static=True
        )


@pytest.mark.parametrize("mask", ["bool", "float", "short_bool"])
def test_attention_masks(rng, mask):
    q, k, v = _qkv(rng, 2, 2, 2, 3, 4, 4)
    if mask == "bool":
        m = np.asarray(rand(rng, 3, 4, dtype=bool))
        m[:, 0] = True
    elif mask == "float":
        m = rand(rng, 2, 1, 3, 4, low=-2, high=0)
    else:
        # shorter than the keys: the extra keys are masked out (opset 24; onnxruntime refuses it)
        m = np.ones((2, 2, 3, 3), bool)
        check_ref("Attention", [q, k, v, m], {}, opset=24)
        return
    with at_opset(23):
        check_op("Attention", [q, k, v, m], {}, static=True)
        check_op("Attention", [q, k, v, m], {"is_causal": 1}, static=True)


def test_attention_gqa_and_past(rng):
    q, k, v = _qkv(rng, 1, 4, 2, 2, 2, 3, dv=5)
    past_k, past_v = rand(rng, 1, 2, 3, 3), rand(rng, 1, 2, 3, 5)
    with at_opset(23):
        check_op("Attention", [q, k, v, None, past_k, past_v], {"is_causal": 1}, num_outputs=3, static=True)


def test_attention_3d(rng):
    q, k, v = rand(rng, 2, 3, 8), rand(rng, 2, 4, 4), rand(rng, 2, 4, 6)
    with at_opset(23):
        check_op("Attention", [q, k, v], {"q_num_heads": 4, "kv_num_heads": 2}, static=True)


def test_attention_fully_masked_rows_are_zero(rng):
    q, k, v = _qkv(rng, 1, 1, 1, 2, 3, 2)
    mask = np.array([[False, False, False], [True, False, True]])
    with at_opset(23):
        (y,) = check_op("Attention", [q, k, v, mask], {}, static=True)
    assert not np.isnan(y).any() and np.all(y[0, 0, 0] == 0)


def test_attention_windows_and_nonpad(rng):
    # opset 24/25 features that onnxruntime 1.32 does not run: against onnx.reference
    q, k, v = _qkv(rng, 2, 2, 2, 3, 6, 4)
    check_ref("Attention", [q, k, v], {"is_causal": 1, "left_window_size": 2}, opset=25)
    check_ref("Attention", [q, k, v], {"left_window_size": 1, "right_window_size": 2}, opset=25)
    check_ref("Attention", [q, k, v, None, None, None, np.array([4, 6], np.int64)], {"is_causal": 1}, opset=25)


def test_attention_errors(rng):
    q, k, v = _qkv(rng, 1, 3, 2, 2, 2, 4)
    expect_graph_error("Attention", [q, k, v], match="do not divide")
    expect_graph_error("Attention", [rand(rng, 1, 2, 8), rand(rng, 1, 2, 8), rand(rng, 1, 2, 8)], match="q_num_heads")


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding_4d(rng, interleaved, rotary_dim):
    b, h, s, d = 2, 3, 4, 8
    half = (rotary_dim or d) // 2
    x = rand(rng, b, h, s, d)
    cos, sin = rand(rng, 10, half), rand(rng, 10, half)
    pos = rng.integers(0, 10, size=(b, s)).astype(np.int64)
    with at_opset(23):
        check_op(
            "RotaryEmbedding", [x, cos, sin, pos], {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}, static=True
        )


def test_rotary_embedding_3d_without_positions(rng):
    x = rand(rng, 2, 4, 12)  # 3 heads of 4
    cos, sin = rand(rng, 2, 4, 2), rand(rng, 2, 4, 2)
    with at_opset(23):
        check_op("RotaryEmbedding", [x, cos, sin], {"num_heads": 3}, static=True)


@pytest.mark.parametrize("attrs", [{}, {"scale": 0.5}])
@pytest.mark.parametrize(("heads", "dv", "dtype"), [((2, 2), 4, np.float32), ((4, 2), 6, np.float32), ((2, 1), 4, np.float64)])
def test_flex_attention(rng, attrs, heads, dv, dtype):
    from tests.ops.onnx_reference import check_against

    hq, hkv = heads
    q, k, v = rand(rng, 2, hq, 3, 4, dtype=dtype), rand(rng, 2, hkv, 5, 4, dtype=dtype), rand(rng, 2, hkv, 5, dv, dtype=dtype)
    check_against("FlexAttention", [q, k, v], attrs, opset=1, domain="ai.onnx.preview", runtime="reference")
