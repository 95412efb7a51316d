"""RNN, GRU and LSTM against onnxruntime; LinearAttention and CausalConvWithState (opset 27,
which onnxruntime does not run) against onnx.reference (aioge.ops.recurrent)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, rand
from tests.ops.onnx_reference import check_ref

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_OUTPUTS = {"RNN": 2, "GRU": 2, "LSTM": 3}


def _inputs(rng, op, seq, batch, inp, hidden, dirs, *, bias=True, lens=None, initial=False, layout=0, peep=False):
    g = _GATES[op]
    x = rand(rng, *((batch, seq, inp) if layout else (seq, batch, inp)))
    args = [x, rand(rng, dirs, g * hidden, inp), rand(rng, dirs, g * hidden, hidden)]
    args.append(rand(rng, dirs, 2 * g * hidden) if bias else None)
    args.append(None if lens is None else np.array(lens, np.int32))
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    args.append(rand(rng, *state) if initial else None)
    if op == "LSTM":
        args.append(rand(rng, *state) if initial else None)
        args.append(rand(rng, dirs, 3 * hidden) if peep else None)
    while args and args[-1] is None:
        args.pop()
    return args


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent(rng, op, direction, layout):
    dirs = 2 if direction == "bidirectional" else 1
    args = _inputs(rng, op, 4, 3, 5, 6, dirs, initial=True, layout=layout, peep=True)
    attrs = {"hidden_size": 6, "direction": direction, "layout": layout}
    if layout:  # onnxruntime refuses batch-major recurrences
        check_ref(op, args, attrs, opset=22, num_outputs=_OUTPUTS[op])
    else:
        check_op(op, args, attrs, num_outputs=_OUTPUTS[op], static=True)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_sequence_lengths(rng, op, direction):
    dirs = 2 if direction == "bidirectional" else 1
    args = _inputs(rng, op, 5, 3, 2, 4, dirs, lens=[5, 2, 3])
    check_op(op, args, {"hidden_size": 4, "direction": direction}, num_outputs=_OUTPUTS[op], static=True)


def test_recurrent_activations_clip_and_variants(rng):
    args = _inputs(rng, "RNN", 3, 2, 3, 4, 1, bias=False)
    check_op("RNN", args, {"hidden_size": 4, "activations": ["Relu"], "clip": 0.5}, num_outputs=2)
    args = _inputs(rng, "GRU", 3, 2, 3, 4, 1)
    check_op("GRU", args, {"hidden_size": 4, "linear_before_reset": 1}, num_outputs=2)
    check_op(
        "GRU",
        args,
        {"hidden_size": 4, "activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4]},
        num_outputs=2,
    )
    args = _inputs(rng, "LSTM", 3, 2, 3, 4, 1, peep=True, initial=True)
    check_op("LSTM", args, {"hidden_size": 4, "input_forget": 1}, num_outputs=3)
    check_op("LSTM", args, {"hidden_size": 4}, num_outputs=1)  # Y only


def test_recurrent_errors(rng):
    args = _inputs(rng, "GRU", 3, 2, 3, 4, 1)
    expect_graph_error("GRU", args, {"hidden_size": 5}, match="hidden_size=5")
    expect_graph_error("GRU", args, {"direction": "bidirectional"}, match="needs 2 weight sets")


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_linear_attention(rng, rule, heads):
    hq, hkv = heads
    b, t, dk, dv = 2, 5, 3, 4
    q, k, v = rand(rng, b, t, hq * dk), rand(rng, b, t, hkv * dk), rand(rng, b, t, hkv * dv)
    past = rand(rng, b, hkv, dk, dv)
    decay = rand(rng, b, t, hkv, low=-1, high=0) if rule in ("gated", "gated_delta") else None
    beta = rand(rng, b, t, hkv, low=0, high=1) if rule in ("delta", "gated_delta") else None
    check_ref(
        "LinearAttention",
        [q, k, v, past, decay, beta],
        {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule},
        opset=27,
        num_outputs=2,
    )


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv_with_state(rng, activation, with_state):
    x, w = rand(rng, 2, 3, 6), rand(rng, 3, 1, 4)
    args = [x, w, rand(rng, 3)] + ([rand(rng, 2, 3, 3)] if with_state else [])
    check_ref("CausalConvWithState", args, {"activation": activation}, opset=27, num_outputs=2)


def test_stateful_errors(rng):
    q = rand(rng, 1, 2, 6)
    expect_graph_error("LinearAttention", [q, q, q], {"q_num_heads": 3, "kv_num_heads": 2}, match="multiple")
    expect_graph_error("LinearAttention", [q, q, q], {"q_num_heads": 2, "kv_num_heads": 2}, match="decay")
    expect_graph_error("CausalConvWithState", [rand(rng, 2, 3, 6), rand(rng, 3, 2, 4)], match="weight")
