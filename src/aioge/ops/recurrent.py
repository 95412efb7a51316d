"""Recurrent ops: RNN, GRU and LSTM, plus the stateful sequence ops of recent opsets
(LinearAttention, CausalConvWithState).

The recurrences loop over time steps around batched matrix products: vector-engine work
(or AiCpu); their int sequence lengths are legitimate inputs, so ``float_only`` is off.
"""

from __future__ import annotations

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import rnn as k
from aioge.kernels import stateful as ks
from aioge.kernels.optional_outputs import returning_some
from aioge.ops.schema import FLOAT_DTYPES, REQUIRED, VECTOR_ENGINES, Attr, InferContext, InferError, InferFn, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_DIRECTION = Attr("string", "forward", ("forward", "reverse", "bidirectional"))


def _rnn_infer(gates: int, outputs: int) -> InferFn:
    def infer(ctx: InferContext) -> list[TensorDesc]:
        dtype = ctx.dtype(0)
        if dtype not in _FLOATS:
            raise InferError(f"X must be a float tensor, got {dtype}")
        for i, name in ((1, "W"), (2, "R")):
            if ctx.dtype(i) != dtype:
                raise InferError(f"{name} must have X's dtype {dtype}, got {ctx.dtype(i)}")
        x, w = ctx.shape(0), ctx.shape(1)
        unknown = [TensorDesc(None, dtype) for _ in range(outputs)]
        if x is None or w is None:
            return unknown
        if len(x) != 3 or len(w) != 3:
            raise InferError(f"X and W must be 3-D, got shapes {x} and {w}")
        dirs = 2 if ctx.attrs["direction"] == "bidirectional" else 1
        if isinstance(w[0], int) and w[0] != dirs:
            raise InferError(f"direction {ctx.attrs['direction']!r} needs {dirs} weight sets, W has {w[0]}")
        rows = w[1]
        if isinstance(rows, int) and rows % gates:
            raise InferError(f"W has {rows} rows, not a multiple of the {gates} gates")
        hidden: Dim = rows // gates if isinstance(rows, int) else "?"
        hs = ctx.attrs.get("hidden_size")
        if hs is not None and isinstance(hidden, int) and hs != hidden:
            raise InferError(f"hidden_size={hs} but W implies {hidden}")
        seq, batch = (x[1], x[0]) if ctx.attrs["layout"] else (x[0], x[1])
        y = (batch, seq, dirs, hidden) if ctx.attrs["layout"] else (seq, dirs, batch, hidden)
        state = (batch, dirs, hidden) if ctx.attrs["layout"] else (dirs, batch, hidden)
        return [TensorDesc(y, dtype)] + [TensorDesc(state, dtype) for _ in range(outputs - 1)]

    return infer


def _common() -> dict[str, Attr]:
    return {
        "activation_alpha": Attr("floats"),
        "activation_beta": Attr("floats"),
        "activations": Attr("strings"),
        "clip": Attr("float"),
        "direction": _DIRECTION,
        "hidden_size": Attr("int"),
        "layout": Attr("int", 0, (0, 1)),
    }


def _infer_linear_attention(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS:
        raise InferError(f"query must be a float tensor, got {dtype}")
    q, v = ctx.shape(0), ctx.shape(2)
    hq, hkv = ctx.attrs["q_num_heads"], ctx.attrs["kv_num_heads"]
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise InferError(f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    rule = ctx.attrs["update_rule"]
    if (rule in ("gated", "gated_delta")) != ctx.has(4):
        raise InferError(f"update_rule {rule!r} {'needs' if rule in ('gated', 'gated_delta') else 'forbids'} the decay input")
    if (rule in ("delta", "gated_delta")) != ctx.has(5):
        raise InferError(f"update_rule {rule!r} {'needs' if rule in ('delta', 'gated_delta') else 'forbids'} the beta input")
    if q is None or v is None or not all(isinstance(d, int) for d in (*q, *v)):
        return [TensorDesc(None, dtype), TensorDesc(None, ctx.dtype(3) if ctx.has(3) else dtype)]
    if len(q) != 3 or len(v) != 3 or q[2] % hq or v[2] % hkv:
        raise InferError(f"query {q} and value {v} must be (B, T, heads * D) for {hq} and {hkv} heads")
    dk, dv = q[2] // hq, v[2] // hkv
    return [TensorDesc((q[0], q[1], hq * dv), dtype), TensorDesc((q[0], hkv, dk, dv), ctx.dtype(3) if ctx.has(3) else dtype)]


def _infer_causal_conv(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {dtype}")
    x, w = ctx.shape(0), ctx.shape(1)
    if x is None or w is None:
        return [TensorDesc(None, dtype), TensorDesc(None, dtype)]
    if len(x) != 3 or len(w) != 3 or (isinstance(w[1], int) and w[1] != 1):
        raise InferError(f"input must be (B, C, L) and weight (C, 1, k), got {x} and {w}")
    kk = w[2]
    return [TensorDesc(tuple(x), dtype), TensorDesc((x[0], x[1], kk - 1 if isinstance(kk, int) else "?"), dtype)]


SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "RNN",
        _rnn_infer(1, 2),
        (k.kernel("RNN"),),
        VECTOR_ENGINES,
        _common(),
        (3, 6),
        (1, 2),
        family="recurrent",
        float_only=False,
        doc="an Elman RNN over a sequence: Y and the last hidden state",
    ),
    OpSchema(
        "GRU",
        _rnn_infer(3, 2),
        (k.kernel("GRU"),),
        VECTOR_ENGINES,
        {**_common(), "linear_before_reset": Attr("int", 0, (0, 1))},
        (3, 6),
        (1, 2),
        family="recurrent",
        float_only=False,
        doc="a GRU over a sequence: Y and the last hidden state",
    ),
    OpSchema(
        "LSTM",
        _rnn_infer(4, 3),
        (k.kernel("LSTM"),),
        VECTOR_ENGINES,
        {**_common(), "input_forget": Attr("int", 0, (0, 1))},
        (3, 8),
        (1, 3),
        family="recurrent",
        float_only=False,
        doc="an LSTM over a sequence: Y and the last hidden and cell states",
    ),
    OpSchema(
        "LinearAttention",
        _infer_linear_attention,
        (returning_some("numpy", ks.linear_attention),),
        VECTOR_ENGINES,
        {
            "chunk_size": Attr("int", 64),
            "kv_num_heads": Attr("int", REQUIRED),
            "q_num_heads": Attr("int", REQUIRED),
            "scale": Attr("float", 0.0),
            "update_rule": Attr("string", "gated_delta", ("linear", "gated", "delta", "gated_delta")),
        },
        (3, 6),
        (1, 2),
        family="recurrent",
        float_only=False,
        doc="linear attention with a recurrent (optionally gated / delta-rule) state",
    ),
    OpSchema(
        "CausalConvWithState",
        _infer_causal_conv,
        (returning_some("numpy", ks.causal_conv_with_state),),
        VECTOR_ENGINES,
        {"activation": Attr("string", "none", ("none", "silu", "swish"))},
        (2, 4),
        (1, 2),
        family="recurrent",
        float_only=False,
        doc="a causal depthwise 1-D convolution carrying its last k - 1 inputs",
    ),
)
