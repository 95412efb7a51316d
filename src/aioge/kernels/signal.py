"""Signal-processing kernels: DFT, STFT, the Hann/Hamming/Blackman windows and
MelWeightMatrix.

Signals carry a trailing axis of 1 (real) or 2 (real, imaginary) values; transforms go
through ``numpy.fft`` (single precision for float16/float32 signals) and come back as (..., bins, 2) in the input's dtype.
"""

from __future__ import annotations

import numpy as np

from aioge.ir.desc import numpy_dtype
from aioge.kernels.convert import dtype_of_code

__all__ = ["blackman_window", "dft", "dft_bins", "hamming_window", "hann_window", "mel_weight_matrix", "stft"]


def _complex(x: np.ndarray) -> np.ndarray:
    """(..., 1) real or (..., 2) real/imaginary -> complex (...), in single precision for
    float16/float32 input (numpy's FFT keeps it), as onnxruntime and the reference compute."""
    real = np.float64 if x.dtype == np.float64 else np.float32
    if x.shape[-1] == 1:
        return x[..., 0].astype(real)
    if x.shape[-1] != 2:
        raise ValueError(f"the last axis must hold 1 (real) or 2 (complex) values, got {x.shape[-1]}")
    return x[..., 0].astype(real) + np.asarray(1j, np.complex64 if real == np.float32 else np.complex128) * x[..., 1].astype(real)


def _split(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack((np.real(z), np.imag(z)), axis=-1).astype(dtype)


def dft_bins(length: int, inverse: bool, onesided: bool) -> int:
    """How many output values a DFT of ``length`` samples has along its axis."""
    if onesided and not inverse:
        return length // 2 + 1
    return length


def dft(
    x: np.ndarray,
    dft_length: np.ndarray | None = None,
    axis_input: np.ndarray | None = None,
    inverse: int = 0,
    onesided: int = 0,
    axis: int | None = None,
) -> np.ndarray:
    """ONNX DFT along one signal axis (the input, the opset-17 attribute, or -2).

    Raises:
        ValueError: the axis is the trailing real/imaginary axis or out of range.
    """
    if axis_input is not None:
        ax = int(np.asarray(axis_input).reshape(-1)[0])
    else:
        ax = -2 if axis is None else axis
    if not -x.ndim <= ax < x.ndim or ax % x.ndim == x.ndim - 1:
        raise ValueError(f"axis {ax} is not a signal axis of an input of rank {x.ndim}")
    ax %= x.ndim
    z = _complex(x)
    if dft_length is not None:
        n = int(np.asarray(dft_length).reshape(-1)[0])
    else:
        n = 2 * (x.shape[ax] - 1) if inverse and onesided else x.shape[ax]
    if inverse:
        if onesided:
            return np.fft.irfft(z, n=n, axis=ax)[..., None].astype(x.dtype)
        return _split(np.fft.ifft(z, n=n, axis=ax), x.dtype)
    res = np.fft.fft(z, n=n, axis=ax)
    if onesided:
        res = np.take(res, np.arange(n // 2 + 1), axis=ax)
    return _split(res, x.dtype)


def stft(
    signal: np.ndarray,
    frame_step: np.ndarray,
    window: np.ndarray | None = None,
    frame_length: np.ndarray | None = None,
    onesided: int = 1,
) -> np.ndarray:
    """Windowed DFTs of the frames of (batch, length, 1 or 2) -> (batch, frames, bins, 2).

    Raises:
        ValueError: the frame is longer than the signal, or the window and frame length differ.
    """
    step = int(np.asarray(frame_step).reshape(-1)[0])
    if frame_length is not None:
        length = int(np.asarray(frame_length).reshape(-1)[0])
    else:
        length = window.shape[0] if window is not None else signal.shape[-2]
    w = np.ones(length) if window is None else window.astype(np.float64)
    if w.shape[0] != length:
        raise ValueError(f"window of length {w.shape[0]} does not match frame_length {length}")
    total = signal.shape[1]
    if length > total or step <= 0:
        raise ValueError(f"frames of {length} samples every {step} do not fit a signal of {total}")
    frames = 1 + (total - length) // step
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]  # (frames, length)
    zc = _complex(signal)
    z = zc[:, idx] * w.astype(zc.real.dtype)  # (batch, frames, length)
    res = np.fft.fft(z, n=length, axis=-1)
    if onesided:
        res = res[..., : length // 2 + 1]
    return _split(res, signal.dtype)


def _window_positions(size: np.ndarray, periodic: int) -> tuple[np.ndarray, int]:
    n = int(np.asarray(size).reshape(-1)[0])
    return np.arange(n, dtype=np.float64), n if periodic else n - 1


def hann_window(size: np.ndarray, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    """sin(pi n / N)**2 (N = size, or size - 1 when symmetric)."""
    n, den = _window_positions(size, periodic)
    return (np.sin(np.pi * n / den) ** 2).astype(numpy_dtype(dtype_of_code(output_datatype, "output_datatype")))


def hamming_window(size: np.ndarray, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    """25/46 - 21/46 cos(2 pi n / N)."""
    n, den = _window_positions(size, periodic)
    alpha = 25.0 / 46.0
    res = alpha - (1 - alpha) * np.cos(2 * np.pi * n / den)
    return res.astype(numpy_dtype(dtype_of_code(output_datatype, "output_datatype")))


def blackman_window(size: np.ndarray, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    """0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)."""
    n, den = _window_positions(size, periodic)
    res = 0.42 - 0.5 * np.cos(2 * np.pi * n / den) + 0.08 * np.cos(4 * np.pi * n / den)
    return res.astype(numpy_dtype(dtype_of_code(output_datatype, "output_datatype")))


def mel_weight_matrix(
    num_mel_bins: np.ndarray,
    dft_length: np.ndarray,
    sample_rate: np.ndarray,
    lower_edge_hertz: np.ndarray,
    upper_edge_hertz: np.ndarray,
    output_datatype: int = 1,
) -> np.ndarray:
    """Triangular mel filters: (dft_length // 2 + 1, num_mel_bins) weights of linear bins."""
    mels, length, rate = (int(np.asarray(v).reshape(-1)[0]) for v in (num_mel_bins, dft_length, sample_rate))
    lo, hi = (float(np.asarray(v).reshape(-1)[0]) for v in (lower_edge_hertz, upper_edge_hertz))
    to_mel = lambda f: 2595 * np.log1p(f / 700) / np.log(10)  # noqa: E731
    step = (to_mel(hi) - to_mel(lo)) / (mels + 2)
    hz = 700 * np.expm1((np.arange(mels + 2) * step + to_mel(lo)) / 2595 * np.log(10))
    edges = (((length + 1) * hz) // rate).astype(np.int64)
    left, centre, right = edges[:-2], edges[1:-1], edges[2:]  # per filter
    j = np.arange(length // 2 + 1)[:, None]
    rise_len, fall_len = centre - left, right - centre
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where((rise_len > 0) & (j >= left) & (j <= centre), (j - left) / rise_len, 0.0)
        rise = np.where((rise_len == 0) & (j == centre), 1.0, rise)
        falling = (fall_len > 0) & (j >= centre) & (j < right)
        out = np.where(falling, (right - j) / np.where(fall_len > 0, fall_len, 1), rise)
    return out.astype(numpy_dtype(dtype_of_code(output_datatype, "output_datatype")))
