"""Calls into the compiled row and activation kernels (``csrc/norm.c``) for float32 arrays.

Each function does the work and returns True, or returns False without touching anything when
it cannot: no compiled tier (``native.available()`` false, or a build older than the kernel),
another dtype, or non-contiguous memory. The caller then runs its numpy code. Large tensors go
in two halves over an idle core (``parallel.split_range``; ctypes releases the GIL), the
activations over the C helper thread (``parallel.split_native``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from aioge.kernels import native
from aioge.kernels.parallel import split_native, split_range

__all__ = [
    "ACTIVATIONS",
    "EPILOGUES",
    "activation",
    "activation_call",
    "bias_activation",
    "epilogue",
    "layer_norm",
    "softmax",
    "unary",
]


# Elements below which a second thread costs more than it saves. These kernels run 0.3-1 ns an
# element; the helper thread's hop costs tens of microseconds on a quiet machine, and when the
# other core is busy with other processes it waits for a time slice: in BERT-base on 2 loaded
# cores, a bias+GELU of 393K values took 0.2 ms whole and 0.3-8 ms split. So only tensors of
# milliseconds of work split.
SPLIT_ELEMENTS = 1 << 21
# Activations share their elements with the C helper thread (csrc/par.c: about a microsecond
# while it spins, no Python hop) from this many, about 30-60 us of work: EfficientNet's SiLU
# over 96x112x112 values, fused into its expansion conv, ran whole after a 0.7 ms GEMM.
SPLIT_ACTIVATION = 1 << 16

# The activations applied on their own, by name -> code (``native.ACT``, aioge.h's enum); Gelu's
# parameter picks the tanh form. Relu and LeakyRelu compute what numpy's fused steps compute,
# to the bit (NaN propagates; Relu of -0 is +0, as numpy's maximum gives): their C job lets a
# FusedGemm or FusedMatMul with one end a native program (the builder MLP's batch gears had
# none). Clip stays numpy's: its C loop does not vectorise (4 ns a value against 0.2).
_ACT = {k: native.ACT[k] for k in ("Erf", "Gelu", "Sigmoid", "Swish", "HardSigmoid", "HardSwish", "Relu", "LeakyRelu", "Tanh")}
_GELU_TANH = native.ACT["GeluTanh"]
# The transcendental ones (all but the HardSigmoids) cost 0.5-1 ns a value: SPLIT_ACTIVATION
# splits them from a quarter as many (the builder transformer's tanh GELU over 32K values: 28 -> 20 us).
_COSTLY = frozenset({*(_ACT[k] for k in ("Erf", "Gelu", "Sigmoid", "Swish", "Tanh")), _GELU_TANH})
ACTIVATIONS = frozenset(_ACT)
# What the compiled convolutions apply to an output tile before it leaves the cache (a fused
# producer's activation, by its op name): the activations above less Erf (not one of
# ops.fused.ACTIVATIONS), and Clip, computed as numpy's fused steps do.
_EPILOGUE = {**{k: v for k, v in _ACT.items() if k != "Erf"}, "Clip": native.ACT["Clip"]}
EPILOGUES = frozenset(_EPILOGUE)
_F32 = np.dtype(np.float32)


def _f32c(*arrays: np.ndarray | None) -> bool:
    return all(a is None or (a.dtype is _F32 and a.flags.c_contiguous) for a in arrays)


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else native.ptr(a)


def _act(name: str, params: Sequence[float]) -> tuple[int, float, float] | None:
    code = _ACT.get(name)
    if code is None:
        return None
    if name == "Gelu":
        return (_GELU_TANH if params and params[0] else code), 0.0, 0.0
    p = [float(v) for v in params] + [0.0, 0.0]
    return code, p[0], p[1]


def epilogue(name: str, params: Sequence[float] = ()) -> tuple[int, int, int]:
    """The (code, parameter bits, parameter bits) of activation ``name`` as the compiled
    convolutions' geometry carries it: (0, 0, 0) for none (``name`` empty).

    Raises:
        ValueError: an activation not in ``EPILOGUES``.
    """
    if not name:
        return 0, 0, 0
    if name not in _EPILOGUE:
        raise ValueError(f"the compiled kernels do not apply {name}; they apply {sorted(EPILOGUES)}")
    code = _GELU_TANH if name == "Gelu" and params and params[0] else _EPILOGUE[name]
    p = [float(v) for v in params][:2] if name != "Gelu" else []
    bits = np.array(p + [0.0] * (2 - len(p)), np.float32).view(np.int32)
    return code, int(bits[0]), int(bits[1])


def activation(name: str, x: np.ndarray, y: np.ndarray, params: Sequence[float] = ()) -> bool:
    """``y = name(x)`` elementwise (``y`` may be ``x``), for the names in ``ACTIVATIONS``;
    params as ``kernels.fused.EW_OPS`` takes them. False when it cannot (see the module)."""
    call = activation_call(name, x, y, params)
    if call is None:
        return False
    split_native(native.par_run(), call.job, call.addr, call.total, worth=call.worth)
    return True


def activation_call(name: str, x: np.ndarray, y: np.ndarray, params: Sequence[float] = ()) -> native.NativeCall | None:
    """``activation``'s C job, or None when it cannot (as ``activation``)."""
    act = _act(name, params)
    if act is None or x.size != y.size or not _f32c(x, y) or native.par_run() is None:
        return None
    code, p0, p1 = act
    bits = np.array([p0, p1], np.float32).view(np.int32)
    args = np.array([native.ptr(x), native.ptr(y), code, bits[0], bits[1]], np.int64)
    worth = x.size * (4 if code in _COSTLY else 1) >= SPLIT_ACTIVATION
    return native.NativeCall(native.JOB_ACTIVATION, args, x.size, worth, (x, y))


def bias_activation(name: str, x: np.ndarray, bias: np.ndarray, y: np.ndarray, params: Sequence[float] = ()) -> bool:
    """``y = name(x + bias)`` for 2-D ``x`` and ``y`` (which may be ``x``) and ``bias`` of one row's
    size: an Add of a bias and the activation after it in one pass. False when it cannot."""
    act = _act(name, params)
    rows, width = x.shape
    if act is None or y.shape != x.shape or bias.size != width or not _f32c(x, y, bias):
        return False
    fn = native.function("aioge_bias_activation_f32")
    if fn is None:
        return False
    xp, bp, yp = native.ptr(x), native.ptr(bias), native.ptr(y)
    split_range(rows, lambda lo, hi: fn(xp, bp, yp, width, *act, lo, hi), worth=x.size >= SPLIT_ELEMENTS)
    return True


def unary(name: str, x: np.ndarray, params: Sequence[float] = ()) -> np.ndarray | None:
    """A new array ``name(x)`` computed by ``activation``, or None when it cannot."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        return None
    y = np.empty(x.shape, np.float32)
    return y if activation(name, x, y, params) else None


def layer_norm_function() -> Any:
    """``aioge_layernorm_f32(x, scale, bias, y, mean, inv_std, width, eps, r0, r1)`` (pointers,
    0 or None for an absent one, then its rows [r0, r1)), or None without the compiled tier."""
    return native.function("aioge_layernorm_f32")


def layer_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None,
    y: np.ndarray,
    eps: float,
    mean: np.ndarray | None = None,
    inv_std: np.ndarray | None = None,
) -> bool:
    """LayerNormalization of the rows of 2-D ``x`` into ``y``, with ``scale`` (and ``bias``)
    of one row's size; ``mean`` and ``inv_std`` (one value a row) are written when given.
    False when it cannot (see the module)."""
    rows, width = x.shape
    if not _f32c(x, y, scale, bias, mean, inv_std) or scale.size != width or (bias is not None and bias.size != width):
        return False
    fn = layer_norm_function()
    if fn is None:
        return False
    ptrs = [native.ptr(x), native.ptr(scale), _ptr(bias), native.ptr(y), _ptr(mean), _ptr(inv_std)]
    split_range(rows, lambda lo, hi: fn(*ptrs, width, eps, lo, hi), worth=x.size >= SPLIT_ELEMENTS)
    return True


def softmax_function() -> Any:
    """``aioge_softmax_f32(x, y, width, log_form, r0, r1)`` (pointers, then its rows [r0, r1)),
    or None without the compiled tier."""
    return native.function("aioge_softmax_f32")


def softmax(x: np.ndarray, y: np.ndarray, log: bool = False) -> bool:
    """Softmax (or LogSoftmax) of the rows of 2-D ``x`` into ``y`` (which may be ``x``). False
    when it cannot (see the module)."""
    rows, width = x.shape
    if not _f32c(x, y) or y.shape != x.shape:
        return False
    fn = softmax_function()
    if fn is None:
        return False
    xp, yp = native.ptr(x), native.ptr(y)
    split_range(rows, lambda lo, hi: fn(xp, yp, width, int(log), lo, hi), worth=x.size >= SPLIT_ELEMENTS)
    return True
