"""Signal ops (aioge.ops.signal) against onnxruntime: DFT, STFT, the windows and MelWeightMatrix."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset


# (inverse, onesided, complex input): a one-sided forward DFT takes a real signal, a one-sided
# inverse a complex spectrum
@pytest.mark.parametrize(
    ("inverse", "onesided", "complex_in"), [(0, 0, False), (0, 0, True), (0, 1, False), (1, 0, False), (1, 0, True), (1, 1, True)]
)
@pytest.mark.parametrize("axis", [1, 2])
def test_dft(rng, inverse, onesided, axis, complex_in):
    x = rand(rng, 2, 6, 5, 2 if complex_in else 1)
    with at_opset(20):
        check_op("DFT", [x, None, np.array(axis, np.int64)], {"inverse": inverse, "onesided": onesided}, const=(2,), static=True)


def test_dft_length_pads_and_truncates(rng):
    x = rand(rng, 1, 8, 1)
    with at_opset(20):
        for n in (5, 12):
            check_op("DFT", [x, np.array(n, np.int64), np.array(1, np.int64)], const=(1, 2), static=True)


def test_dft_errors(rng):
    with at_opset(20):
        expect_graph_error("DFT", [rand(rng, 2, 4, 3), None, np.array(1, np.int64)], const=(2,), match="1 \\(real\\) or 2")
        expect_graph_error("DFT", [rand(rng, 2, 4, 1), None, np.array(2, np.int64)], const=(2,), match="not a signal axis")


@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft(rng, window, onesided):
    signal = rand(rng, 2, 64, 1)
    inputs = [signal, np.array(8, np.int64), rand(rng, 16) if window else None, np.array(16, np.int64)]
    with at_opset(17):
        check_op("STFT", inputs, {"onesided": onesided}, const=(1, 3), static=True)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    with at_opset(17):
        check_op(op, [np.array(10, np.int64)], {"periodic": periodic}, const=(0,), static=True)


def test_windows_float64():
    # onnxruntime computes double windows in single precision; the formulas are the yardstick
    from tests.ops.conftest import aioge_graph, evaluate

    n = np.arange(7)
    want = {
        "HannWindow": np.sin(np.pi * n / 7) ** 2,
        "HammingWindow": 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / 7),
        "BlackmanWindow": 0.42 - 0.5 * np.cos(2 * np.pi * n / 7) + 0.08 * np.cos(4 * np.pi * n / 7),
    }
    for op, expected in want.items():
        g, feeds = aioge_graph(op, [np.array(7, np.int64)], {"output_datatype": 11}, const=(0,))
        (got,) = evaluate(g, feeds)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def test_mel_weight_matrix():
    args = [
        np.array(8, np.int64),
        np.array(64, np.int64),
        np.array(16000, np.int64),
        np.array(0.0, np.float32),
        np.array(8000.0, np.float32),
    ]
    with at_opset(17):
        check_op("MelWeightMatrix", args, const=(0, 1, 2, 3, 4), static=True)
