"""Run by tests/engines/test_native_isa.py in a child process (AIOGE_ISA is read once a process):
``python -m tests.engines._isa_child OUT.npz`` runs a few C kernels on fixed inputs and saves
their outputs and the ISA tier that ran them (``native.describe()``) to OUT.npz."""

from __future__ import annotations

import sys

import numpy as np

from aioge.kernels import native
from aioge.kernels import rnn as krnn
from tests.engines._native_child import _rand, kernel

CASES = [
    ("conv", "Conv", "conv_direct_native", [_rand(2, 8, 13, 13), _rand(16, 8, 3, 3), _rand(16)], {"pads": [1, 1, 1, 1]}),
    (  # a column stride of 2: both column phases from one pass over a row (8 columns at a time on AVX2)
        "conv_s2",
        "Conv",
        "conv_direct_native",
        [_rand(1, 3, 9, 37), _rand(8, 3, 3, 3)],
        {"pads": [1, 1, 1, 1], "strides": [2, 2]},
    ),
    (  # Winograd F(2x2, 3x3): the transforms' 8 x 8 transposes on AVX, 16 channels a vector on AVX-512
        "winograd",
        "Conv",
        "conv_winograd_native",
        [_rand(1, 16, 11, 13), _rand(32, 16, 3, 3), _rand(32)],
        {"pads": [1, 1, 1, 1]},
    ),
    (
        "depthwise",
        "Conv",
        "conv_depthwise_native",
        [_rand(1, 8, 17, 17), _rand(8, 1, 3, 3)],
        {"group": 8, "kernel_shape": [3, 3]},
    ),
    (  # a 1x1 conv and its Swish from the tiles' registers: K past KC in one block, a short last panel
        "pointwise",
        "FusedConv",
        "conv_direct_native",
        [_rand(1, 200, 9, 13), _rand(20, 200, 1, 1), _rand(20)],
        {"activation": "Swish", "activation_params": [1.0]},
        "aioge",
    ),
    (  # K past one block on a 5x7 plane read in place: the accumulator path, its ragged panel's loads masked
        "pointwise_deep",
        "Conv",
        "conv_direct_native",
        [_rand(1, 1030, 5, 7), _rand(7, 1030, 1, 1)],
        {},
    ),
    (  # the same with channels in the lanes on a 7x7 plane, stored transposed
        "pointwise_t",
        "FusedConv",
        "conv_direct_t_native",
        [_rand(1, 96, 7, 7), _rand(70, 96, 1, 1), _rand(70)],
        {"activation": "Swish", "activation_params": [1.0]},
        "aioge",
    ),
    (  # AVX-512: the 16-lane line form (rows of 34: a zmm and a masked one) with its Swish in registers
        "depthwise_lines",
        "FusedConv",
        "conv_depthwise_native",
        [_rand(1, 21, 34, 34) * 3, _rand(21, 1, 3, 3)],
        {"group": 21, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "activation": "Swish", "activation_params": [1.0]},
        "aioge",
    ),
    (  # AVX-512: 16 planes a vector (and a last 5 by the 8-plane form), HardSwish after the 16x16 transposes
        "depthwise_planes",
        "FusedConv",
        "conv_depthwise_native",
        [_rand(1, 21, 14, 14) * 3, _rand(21, 1, 5, 5)],
        {"group": 21, "kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "activation": "HardSwish"},
        "aioge",
    ),
    (  # 7x7 planes: two groups of 16 channels (filters by transposes, planes as flat runs), a last 8
        "depthwise_planes7",
        "FusedConv",
        "conv_depthwise_native",
        [_rand(1, 40, 7, 7) * 3, _rand(40, 1, 3, 3), _rand(40)],
        {"group": 40, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "activation": "Relu"},
        "aioge",
    ),
    (  # 3x3 stride 2 on rows past 48: the direct form, 8 lanes on AVX2 (masked at the plane's edges), 16 on AVX-512
        "depthwise_direct_s2",
        "FusedConv",
        "conv_depthwise_native",
        [_rand(1, 3, 113, 100) * 3, _rand(3, 1, 3, 3), _rand(3)],
        {"group": 3, "kernel_shape": [3, 3], "pads": [1, 0, 0, 1], "strides": [2, 2], "activation": "Relu"},
        "aioge",
    ),
    ("gemm", "Gemm", "gemm_native", [_rand(37, 70), _rand(70, 129), _rand(129)], {}),
    # bf16 (GE's precision modes): AMX / vdpbf16ps on K-pairs where the CPU has them, else the 16-bit panels
    ("lowp_bf16", "Gemm", "lowp_gemm", [_rand(37, 69), _rand(69, 129), _rand(129)], {"precision": "bf16"}),
    ("pool", "AveragePool", "pool_native", [_rand(1, 4, 15, 15)], {"kernel_shape": [3, 3], "strides": [2, 2]}),
    # AVX-512: 16 output columns in registers past a small plane's one vector, a ceil-mode overhang
    ("pool_max", "MaxPool", "pool_native", [_rand(1, 3, 20, 45)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    # the flat form (stride 1, output rows as wide as the input's): blocks of planes as one array, masked
    ("pool_flat", "AveragePool", "pool_native", [_rand(1, 45, 7, 7)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("pool_flat_max", "MaxPool", "pool_native", [_rand(2, 9, 17, 17)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    # stride 2: 2x2 on 14x14 planes (AVX-512: two row pairs a step, flat over planes, an odd last pair), 3x3 on 17x17
    ("pool_s2", "MaxPool", "pool_native", [_rand(1, 13, 14, 14)], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("pool_s2_avg", "AveragePool", "pool_native", [_rand(1, 7, 14, 14)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("pool_s2_3x3", "MaxPool", "pool_native", [_rand(1, 6, 17, 17)], {"kernel_shape": [3, 3], "strides": [2, 2]}),
    # 2x2 stride 2 over wider even planes: a row pair at a time, 32 (AVX2: 16) columns a step, the tail masked
    ("pool_pair_wide", "MaxPool", "pool_native", [_rand(1, 5, 6, 46)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("pool_pair_wide_avg", "AveragePool", "pool_native", [_rand(1, 3, 28, 28)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    # 3 columns at stride 2 wider than a vector, pads and a ceil-mode overhang (the masked loads)
    (
        "pool_s2_3x3_wide",
        "MaxPool",
        "pool_native",
        [_rand(1, 5, 35, 71)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    (
        "pool_s2_3x3_ceil",
        "MaxPool",
        "pool_native",
        [_rand(1, 4, 28, 28)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    ),
    ("lstm", "LSTM", "numpy", [_rand(5, 3, 7), _rand(1, 64, 7), _rand(1, 64, 16) / 4], {"hidden_size": 16}),
    # 33 units: three 16-unit blocks, the last one partial; GRU's two panel sets
    (
        "gru_bi",
        "GRU",
        "numpy",
        [_rand(6, 5, 7), _rand(2, 99, 7), _rand(2, 99, 33) / 6],
        {"hidden_size": 33, "direction": "bidirectional"},
    ),
    # batch 13: the step product's eight rows by two panels (AVX-512), then four rows, then one
    (
        "lstm_b13",
        "LSTM",
        "numpy",
        [_rand(4, 13, 7), _rand(2, 132, 7), _rand(2, 132, 33) / 6, _rand(2, 264)],
        {"hidden_size": 33, "direction": "bidirectional"},
    ),
    ("softmax", "Softmax", "softmax_native", [_rand(9, 100) * 5], {}),
]


def residual(kind: str, ins: list[np.ndarray], attrs: dict) -> np.ndarray:
    """FusedConv's conv job with its residual folded in (csrc/conv_direct.c's G_Z), then Relu."""
    from aioge.runtime.native_program import _FOLDS, fold_residuals
    from tests.ops.test_conv_residual import residual_calls, run_jobs

    ins[1].setflags(write=False)  # a constant weight: the native form packs it once
    (n, _, h, w), (m, _, k, _), p = ins[0].shape, ins[1].shape, attrs.get("pads", [0] * 4)
    shape = (n, m, h + p[0] + p[2] - k + 1, w + p[1] + p[3] - k + 1)  # stride 1
    y, z = np.zeros(shape, np.float32), _rand(*shape)
    calls = residual_calls(kind, ins, z, y, {**attrs, "activation": "Relu", "activation_params": []}, {})
    folded, _ = fold_residuals(calls, [0] * len(calls))
    # a tier whose conv is a per-image job (the baseline's 3x3: JOB_CONV_LOCAL) keeps the residual apart
    assert len(folded) == len(calls) - (calls[-2].job in _FOLDS), [c.job for c in calls]
    run_jobs(folded, False)
    return y


# the residual in each conv epilogue: conv_direct's tiles from the registers (1x1 read in place, a
# ragged last panel) and its accumulator path (3x3), conv_t's stored runs, Winograd's output rows
RESIDUALS = [
    ("residual_direct", "direct", [_rand(1, 24, 9, 13), _rand(40, 24, 1, 1), _rand(40)], {"kernel_shape": [1, 1]}),
    ("residual_direct_acc", "direct", [_rand(1, 5, 11, 11), _rand(13, 5, 3, 3)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("residual_t", "t", [_rand(1, 70, 7, 7), _rand(70, 70, 1, 1), _rand(70)], {"kernel_shape": [1, 1]}),
    (
        "residual_winograd",
        "winograd",
        [_rand(1, 16, 11, 9), _rand(32, 16, 3, 3), _rand(32)],
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    ),
]


def main(out: str) -> None:
    assert native.available() and krnn._native() is not None, native.describe()
    arrays = {name: kernel(op, impl, {}, ins, attrs, *domain)()[0] for name, op, impl, ins, attrs, *domain in CASES}
    arrays |= {name: residual(kind, ins, attrs) for name, kind, ins, attrs in RESIDUALS}
    np.savez(out, describe=np.array(native.describe()), **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
