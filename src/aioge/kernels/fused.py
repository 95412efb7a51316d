"""Fused kernels: an elementwise program run in one blocked pass over memory, and the
activations that FusedConv, FusedGemm and FusedMatMul apply to their output in place.

A ``FusedElementwise`` node carries its program as plain data (``ops``, ``operands``,
``params``). The kernel runs the whole program on one cache-sized chunk of the output at a
time: every step is a numpy ufunc with ``out=`` into a preallocated scratch register (or
the output chunk itself), so intermediates never leave the cache and nothing is allocated
per run. Each step computes exactly what the op's own kernel computes (same ufuncs, same
order, same dtype), so fused and unfused results agree to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.kernels import elementwise as k
from aioge.kernels import native, native_rows
from aioge.kernels.activation import swish
from aioge.kernels.contract import RunFn, is_constant
from aioge.kernels.parallel import split_native

__all__ = [
    "BLOCK_BYTES",
    "EW_OPS",
    "EwOp",
    "activation_runner",
    "build_fused_elementwise",
    "build_then_activation",
    "check_program",
    "coalesce",
    "with_activation",
    "without_activation",
]

# Bytes of one chunk (and of each scratch register): small enough that a program's
# registers and temporaries stay in L2 together (1 MiB here), big enough that the ~1.5 us
# a ufunc call costs is small beside its work (32K float32 elements). Measured on a 2-core
# EPYC: 32 KiB chunks take 1.4x as long as 128 KiB ones, 256-512 KiB gain under 5% more.
BLOCK_BYTES = 128 * 1024

# A step function: (frame, dst, srcs, params, temps) -> None. ``frame`` holds the chunk
# views of the output, the inputs and the scratch registers; ``temps`` is (temporaries of
# the program's dtype, bool temporaries, float64 temporaries), each of the chunk's shape. A
# step reads every operand before it writes ``dst`` (which may be one of them).
Temps = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]
_KINDS = "f?d"
StepFn = Callable[[list[np.ndarray], int, tuple[int, ...], tuple[float, ...], Temps], None]

_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True, slots=True)
class EwOp:
    """One op a program may hold: operand count, parameter count, the temporaries it needs
    (numpy dtype kinds: "f" the program's dtype, "?" bool) and its step function."""

    name: str
    arity: int
    nparams: int
    temps: str  # e.g. "ff?d": two of the program's dtype, one bool, one float64
    step: StepFn
    ufunc: Any = None  # set when the step is this one ufunc call: the kernel calls it directly


def _unary(ufunc: Any) -> StepFn:
    def step(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
        ufunc(f[s[0]], out=f[d])

    return step


def _binary(ufunc: Any) -> StepFn:
    def step(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
        ufunc(f[s[0]], f[s[1]], out=f[d])

    return step


def _pow(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    # as kernels.elementwise.pow_: a one-element exponent of 2, 3 or 0.5 without numpy's powf loop
    x, e = f[s[0]], f[s[1]]
    if k.pow_by_constant(x, e, out=f[d]) is None:
        np.power(x, e, out=f[d])


def _native_step(name: str, x: np.ndarray, y: np.ndarray, p: tuple[float, ...] = ()) -> bool:
    """``y = name(x)`` by the compiled kernel when there is one and ``y`` is contiguous float32;
    a broadcast ``x`` is first copied into ``y``, so a chunk computes what the op's own kernel
    computes on a whole array. False (nothing done) otherwise: the step runs its numpy code."""
    if y.dtype != np.float32 or not y.flags.c_contiguous or not native.available():
        return False
    if x.shape != y.shape or not x.flags.c_contiguous:
        np.copyto(y, x)
        x = y
    return native_rows.activation(name, x, y, p)


def _relu(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    np.maximum(f[s[0]], 0, out=f[d])


def _leaky_relu(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    # kernels.elementwise.leaky_relu: where(x >= 0, x, x * alpha)
    x, alpha = f[s[0]], p[0]
    if 0.0 <= alpha <= 1.0:  # then max(x, alpha * x) picks the same element, NaN included
        np.multiply(x, alpha, out=t[0][0])
        np.maximum(x, t[0][0], out=f[d])
        return
    np.greater_equal(x, 0, out=t[1][0])
    np.multiply(x, alpha, out=t[0][0])
    np.copyto(t[0][0], x, where=t[1][0])
    np.copyto(f[d], t[0][0])


def _sigmoid(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    # kernels.elementwise.sigmoid, step for step. float32/float64: 1 / (1 + exp(min(-x, B))),
    # B the largest argument whose exp is finite, so nothing overflows (five passes). float16
    # (exp overflows at 11): e = exp(-|x|); pos = 1 / (1 + e); where(x >= 0, pos, e * pos).
    x, (e, pos), (mask,) = f[s[0]], t[0][:2], t[1][:1]
    if _native_step("Sigmoid", x, f[d]):  # float32: one C pass
        return
    bound = k.SIGMOID_EXP_BOUND.get(x.dtype.type)
    if bound is not None:
        np.negative(x, out=e)
        np.minimum(e, bound, out=e)
        np.exp(e, out=e)
        np.add(e, 1.0, out=e)
        np.divide(1.0, e, out=f[d])
        return
    np.greater_equal(x, 0, out=mask)
    np.absolute(x, out=e)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.add(e, 1.0, out=pos)
    np.divide(1.0, pos, out=pos)
    np.multiply(e, pos, out=e)
    np.copyto(e, pos, where=mask)
    np.copyto(f[d], e)


def _swish(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    # kernels.activation.swish: x * sigmoid(alpha * x); the op's own numpy code off the C path
    x = f[s[0]]
    if _native_step("Swish", x, f[d], p):
        return
    np.copyto(f[d], swish(np.broadcast_to(x, f[d].shape), p[0]))


def _hard_sigmoid(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    if _native_step("HardSigmoid", f[s[0]], f[d], p):
        return
    y = f[d]
    np.multiply(f[s[0]], p[0], out=y)
    np.add(y, p[1], out=y)
    np.clip(y, 0, 1, out=y)


def _hard_swish(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    # kernels.activation.hard_swish: x * clip(x * (1/6) + 1/2, 0, 1)
    x, h = f[s[0]], t[0][0]
    if _native_step("HardSwish", x, f[d]):
        return
    np.multiply(x, 1 / 6, out=h)
    np.add(h, 0.5, out=h)
    np.clip(h, 0, 1, out=h)
    np.multiply(x, h, out=f[d])


def _tanh(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    if not _native_step("Tanh", f[s[0]], f[d]):  # float32: the C tanh, as a native program computes it
        np.tanh(f[s[0]], out=f[d])


def _clip(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    # kernels.elementwise.clip: max with lo, then min with hi; an infinite bound is absent.
    x, y = f[s[0]], f[d]
    lo, hi = p
    if lo != -math.inf:
        np.maximum(x, lo, out=y)
        x = y
    if hi != math.inf:
        np.minimum(x, hi, out=y)
        x = y
    if x is not y:
        np.copyto(y, x)


# erf(x) ~ x * P(x^2) / Q(x^2) on [-4, 4] (+-1 beyond, where erf rounds to 1 in float32):
# the rational approximation of Eigen's and XLA's float erf. float32 programs evaluate it in
# float32, as Eigen does: within 4.2e-7 of the true erf (7 float32 ulps of 1, near |x| = 3.3;
# 1.1e-7 below |x| = 0.5), at a third of the time of the float64 evaluation (1.2M values:
# 146 -> 50 ms, ConvNeXt's largest GELU), which was within 1e-7. float16 programs evaluate it
# in float64; float64 programs keep the series of kernels.elementwise.erf (full accuracy).
_ERF_P = (
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02)


def _erf_into(x: np.ndarray, out: np.ndarray, t: Temps, first: int) -> None:
    """erf(x) into ``out``; float32 temporaries from ``t[0][first:]``, else float64 ones."""
    if x.dtype == np.float64:
        k.erf(x, out=out)
        return
    xc, x2, acc = t[0][first : first + 3] if x.dtype == np.float32 else t[2][:3]
    np.clip(x, -4.0, 4.0, out=xc, casting="unsafe")
    np.multiply(xc, xc, out=x2)
    _horner(_ERF_P, x2, acc)
    np.multiply(acc, xc, out=xc)  # x * P(x^2); the clipped x is not needed again
    _horner(_ERF_Q, x2, acc)
    np.divide(xc, acc, out=out, casting="unsafe")


def _horner(coefs: tuple[float, ...], t: np.ndarray, acc: np.ndarray) -> None:
    """acc = coefs[0] * t**(n-1) + ... + coefs[-1], in place."""
    np.multiply(t, coefs[0], out=acc)
    for c in coefs[1:-1]:
        np.add(acc, c, out=acc)
        np.multiply(acc, t, out=acc)
    np.add(acc, coefs[-1], out=acc)


def _erf(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    if _native_step("Erf", f[s[0]], f[d]):  # the same rational form, in one C pass
        return
    _erf_into(f[s[0]], f[d], t, 0)


def _gelu(f: list[np.ndarray], d: int, s: tuple[int, ...], p: tuple[float, ...], t: Temps) -> None:
    # kernels.elementwise.gelu in the same order: 0.5 * x * (1 + erf(x / sqrt 2)), or the
    # tanh form 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))) when p[0] is 1.
    x, (half, inner) = f[s[0]], t[0][:2]
    if _native_step("Gelu", x, f[d], p):  # float32: one C pass
        return
    np.multiply(x, 0.5, out=half)
    if p[0]:
        np.multiply(x, x, out=inner)  # x**3 as two products: np.power(x, 3) is a slow powf loop
        np.multiply(inner, x, out=inner)
        np.multiply(inner, 0.044715, out=inner)
        np.add(x, inner, out=inner)
        np.multiply(inner, _SQRT_2_OVER_PI, out=inner)
        np.tanh(inner, out=inner)
    else:
        np.divide(x, _SQRT2, out=inner)
        _erf_into(inner, inner, t, 2)
    np.add(inner, 1.0, out=inner)
    np.multiply(half, inner, out=f[d])


_UNARY_UFUNCS: dict[str, Any] = {
    "Sqrt": np.sqrt,
    "Exp": np.exp,
    "Log": np.log,
    "Neg": np.negative,
    "Abs": np.absolute,
    "Reciprocal": np.reciprocal,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Round": np.rint,
    "Sign": np.sign,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
}
_BINARY_UFUNCS: dict[str, Any] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Pow": np.power,
    "Max": np.maximum,
    "Min": np.minimum,
}
_STEPS: dict[str, StepFn] = {"Pow": _pow}

EW_OPS: Mapping[str, EwOp] = {
    **{n: EwOp(n, 1, 0, "", _unary(u), u) for n, u in _UNARY_UFUNCS.items()},
    **{n: EwOp(n, 2, 0, "", _STEPS[n]) if n in _STEPS else EwOp(n, 2, 0, "", _binary(u), u) for n, u in _BINARY_UFUNCS.items()},
    "Relu": EwOp("Relu", 1, 0, "", _relu),
    "LeakyRelu": EwOp("LeakyRelu", 1, 1, "f?", _leaky_relu),  # params: alpha
    "Sigmoid": EwOp("Sigmoid", 1, 0, "ff?", _sigmoid),
    "HardSigmoid": EwOp("HardSigmoid", 1, 2, "", _hard_sigmoid),  # params: alpha, beta
    "HardSwish": EwOp("HardSwish", 1, 0, "f", _hard_swish),
    "Tanh": EwOp("Tanh", 1, 0, "", _tanh),  # not the ufunc: float32 in C, as the Tanh op
    "Swish": EwOp("Swish", 1, 1, "", _swish),  # params: alpha (SiLU: 1)
    "Clip": EwOp("Clip", 1, 2, "", _clip),  # params: lo, hi (-inf / inf when absent)
    # Erf's temporaries: three of the program's dtype (float32) or three float64 (float16)
    "Erf": EwOp("Erf", 1, 0, "fffddd", _erf),
    "Gelu": EwOp("Gelu", 1, 1, "fffffddd", _gelu),  # params: 1 for the tanh approximation, else 0
}


@dataclass(frozen=True, slots=True)
class _Step:
    op: EwOp
    srcs: tuple[int, ...]  # >= 0: program input; < 0: result of step -1 - r
    params: tuple[float, ...]


def check_program(ops: Sequence[str], operands: Sequence[int], params: Sequence[float], num_inputs: int) -> str | None:
    """The reason a FusedElementwise program is malformed, or None when it is well formed."""
    try:
        _parse(ops, operands, params, num_inputs)
    except ValueError as exc:
        return str(exc)
    return None


def _parse(ops: Sequence[str], operands: Sequence[int], params: Sequence[float], num_inputs: int | None) -> list[_Step]:
    steps: list[_Step] = []
    oi = pi = 0
    if not ops:
        raise ValueError("a program needs at least one op")
    for i, name in enumerate(ops):
        op = EW_OPS.get(name)
        if op is None:
            raise ValueError(f"op {i} {name!r} cannot be fused; fusable: {sorted(EW_OPS)}")
        srcs = tuple(int(r) for r in operands[oi : oi + op.arity])
        pars = tuple(float(v) for v in params[pi : pi + op.nparams])
        if len(srcs) < op.arity or len(pars) < op.nparams:
            raise ValueError(f"op {i} {name!r} needs {op.arity} operands and {op.nparams} params; the lists end early")
        for r in srcs:
            if r < 0 and -1 - r >= i:
                raise ValueError(f"op {i} {name!r} reads the result of step {-1 - r}, which is not computed yet")
            if r >= 0 and num_inputs is not None and r >= num_inputs:
                raise ValueError(f"op {i} {name!r} reads input {r}; the node has {num_inputs}")
        oi += op.arity
        pi += op.nparams
        steps.append(_Step(op, srcs, pars))
    if oi != len(operands) or pi != len(params):
        raise ValueError(f"{len(operands) - oi} operands and {len(params) - pi} params are left over after the last op")
    return steps


def coalesce(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Collapse the output shape to as few dimensions as broadcasting allows.

    Dimensions of size 1 are dropped, and neighbours merge when every input is full in both
    or broadcast in both, so ``[N,C,H,W] + [C,1,1]`` becomes ``[N, C, H*W] + [1, C, 1]``.
    Returns the collapsed output shape and each input's shape in it (inputs reshape to it
    without a copy when they are contiguous).
    """
    rank = len(out_shape)
    aligned = [(1,) * (rank - len(s)) + tuple(int(d) for d in s) for s in in_shapes]
    keep = [i for i, d in enumerate(out_shape) if d != 1]
    dims: list[int] = []
    ins: list[list[int]] = [[] for _ in in_shapes]
    for i in keep:
        full = [s[i] != 1 for s in aligned]
        if dims and all(f == (x[-1] != 1) for f, x in zip(full, ins)):
            dims[-1] *= out_shape[i]
            for f, x in zip(full, ins):
                if f:
                    x[-1] *= out_shape[i]
            continue
        dims.append(int(out_shape[i]))
        for f, x in zip(full, ins):
            x.append(int(out_shape[i]) if f else 1)
    if not dims:
        return (1,), [(1,) for _ in in_shapes]
    return tuple(dims), [tuple(x) for x in ins]


def _chunking(shape: tuple[int, ...], block: int) -> tuple[int, int]:
    """How to split ``shape`` into chunks of at most ``block`` elements (at least one row):
    the axis to split and the rows of it per chunk; the axes after it are whole."""
    axis = len(shape) - 1
    while axis > 0 and math.prod(shape[axis:]) <= block:
        axis -= 1  # the widest tail that still fits, so chunks are as long as possible
    inner = math.prod(shape[axis + 1 :])
    return axis, max(1, min(shape[axis], block // max(inner, 1)))


_Plan = list[tuple[tuple[Any, ...], tuple[tuple[Any, ...], ...], bool]]


def _plan(cshape: tuple[int, ...], in_cshapes: Sequence[tuple[int, ...]], axis: int, rows: int) -> _Plan:
    """Per chunk: the output index, each input's index (a broadcast dim indexes 0 or keeps
    its 1) and whether it is the short last chunk of its row."""
    plan = []
    for lead in np.ndindex(*cshape[:axis]):
        for r0 in range(0, cshape[axis], rows):
            r1 = min(r0 + rows, cshape[axis])
            iidx = tuple(
                (*(0 if c[j] == 1 else int(lead[j]) for j in range(axis)), slice(0, 1) if c[axis] == 1 else slice(r0, r1))
                for c in in_cshapes
            )
            plan.append(((*(int(i) for i in lead), slice(r0, r1)), iidx, r1 - r0 != rows))
    return plan


def build_fused_elementwise(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Bind a FusedElementwise program to its shapes: registers and chunking are planned here,
    the chunk list on the first run; nothing is planned per run.

    Raises:
        ValueError: the program is malformed.
    """
    steps = _parse(attrs["ops"], attrs["operands"], attrs.get("params", ()), len(ins))
    out_shape = tuple(int(d) for d in outs[0].shape)
    dtype = np.dtype(outs[0].dtype)
    cshape, in_cshapes = coalesce(out_shape, [tuple(int(d) for d in desc.shape) for desc in ins])
    block = max(1, int(params.get("block_bytes", BLOCK_BYTES)) // dtype.itemsize)
    axis, rows = _chunking(cshape, block)
    program, nregs, temp_counts = _allocate(steps, len(ins))
    # The chunk plan is made on the first run, not here: binding must stay cheap and small
    # even for a desc no arena could hold (the executor fails on the arena first).
    plans: list[_Plan] = []
    full_shape = (rows, *cshape[axis + 1 :])
    tail_rows = cshape[axis] % rows
    pool: list[tuple[list[np.ndarray], Temps, list[np.ndarray], Temps]] = []

    def scratch() -> tuple[list[np.ndarray], Temps, list[np.ndarray], Temps]:
        # One set per concurrent run: the executor runs several contexts on one bound kernel.
        regs = [np.empty(full_shape, dtype) for _ in range(nregs)]
        temps = _make_temps(temp_counts, full_shape, dtype)
        return regs, temps, [r[:tail_rows] for r in regs], _head(temps, tail_rows)

    size = math.prod(out_shape)
    in_shapes = [tuple(int(d) for d in desc.shape) for desc in ins]
    # A small float32 program of arithmetic and C activations: a C job a step (_step_calls),
    # on the step path as in a native program, so both give the same bits.
    stepped = native.BoundCalls(lambda *ops: _step_calls(steps, ops[:-1], ops[-1]))
    by_steps = 0 < size <= STEP_CALLS_MAX and dtype == np.float32 and all(_c_step(st) for st in steps)
    # One compiled activation over an input of the output's shape (a Gelu or Sigmoid node alone):
    # one C call over the whole tensor, in two halves over an idle core when it is large.
    whole = _whole_activation(steps, in_shapes, out_shape)
    gated = _gated(steps, in_shapes, out_shape)
    chain = _ChannelChain.of(steps, in_shapes, out_shape, dtype)

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        y = np.empty(out_shape, dtype) if outputs is None else outputs[0]
        if size == 0:
            return (y,)
        if whole is not None and _run_whole(whole, inputs, y):
            return (y,)
        if gated is not None and _gated_calls(gated, inputs, y, run=True):
            return (y,)
        if chain is not None and chain.run(inputs, y):
            return (y,)
        calls = stepped.get(*inputs, y) if by_steps and whole is None else None
        if calls is not None:
            native.run_calls(calls)
            return (y,)
        direct = y.flags.c_contiguous
        yc = y.reshape(cshape) if direct else np.empty(cshape, dtype)
        xs = [np.asarray(x).reshape(s) for x, s in zip(inputs, in_cshapes)]
        try:
            regs, temps, tregs, ttemps = pool.pop()
        except IndexError:
            regs, temps, tregs, ttemps = scratch()
        if not plans:
            plans.append(_plan(cshape, in_cshapes, axis, rows))  # racing first runs make equal plans
        try:
            for oidx, iidx, tail in plans[0]:
                frame = [yc[oidx]]
                frame.extend([x[i] for x, i in zip(xs, iidx)])
                frame.extend(tregs if tail else regs)
                t_now = ttemps if tail else temps
                for uf, fn, d, a, b, srcs, p in program:
                    # A plain ufunc step is called straight (a Python call less per chunk and step).
                    if uf is None:
                        fn(frame, d, srcs, p, t_now)
                    elif b < 0:
                        uf(frame[a], out=frame[d])
                    else:
                        uf(frame[a], frame[b], out=frame[d])
        finally:
            pool.append((regs, temps, tregs, ttemps))
        if not direct:
            np.copyto(y, yc.reshape(out_shape))
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        if whole is not None:  # the whole path's own call, or none (a bias: a fused pass of its own)
            call = native_rows.activation_call(whole[0], inputs[whole[2]], outputs[0], whole[1]) if whole[3] is None else None
            return None if call is None else [call]
        if gated is not None:
            return _gated_calls(gated, inputs, outputs[0])
        one = chain.call(inputs, outputs[0]) if chain is not None else None
        calls = [one] if one is not None else _chain_calls(steps, inputs, outputs[0])
        return _step_calls(steps, inputs, outputs[0]) if calls is None and by_steps else calls

    return native.with_native(run, form)


# Elements up to which a FusedElementwise program of C steps runs as those steps (JOB_ELEMWISE's
# strided loop and a register of the output's size a step): an LSTM cell's gates at batch 1,
# 64 values a gate, took 9 jobs of about a microsecond where numpy's blocked steps took 30-40 us.
STEP_CALLS_MAX = 1 << 12


def _c_step(st: _Step) -> bool:
    name = st.op.name
    if len(st.srcs) == 1:
        return name in native.EW_UNARY or name in native_rows.ACTIVATIONS
    return name in native.EW_ARITH and len(st.srcs) == 2


def _step_calls(
    steps: list[_Step], inputs: Sequence[Any], y: np.ndarray, activations: bool = True
) -> list[native.NativeCall] | None:
    """The program as a C job a step (float32 Add/Sub/Mul/Div broadcast, Sqrt/Reciprocal, or with
    ``activations`` an activation of ``native_rows`` over an operand of the output's shape), each
    into a register of its own (held by its call), the last into ``y``; None for any other
    program, or inputs ``y`` overlaps. Steps may read earlier ones out of order (Llama's rotary
    ``q * cos + rotate_half(q) * sin``)."""
    if native.par_run() is None or not all(isinstance(x, np.ndarray) for x in inputs) or not isinstance(y, np.ndarray):
        return None  # without the compiled tier: numpy's steps
    if any(
        np.may_share_memory(x, y) and not (x.shape == y.shape and x.strides == y.strides and _at(x) == _at(y)) for x in inputs
    ):
        return None
    calls: list[native.NativeCall] = []
    results: list[np.ndarray] = []
    for i, st in enumerate(steps):
        dst = y if i == len(steps) - 1 else np.empty(y.shape, np.float32)
        xs = [inputs[s] if s >= 0 else results[-1 - s] for s in st.srcs]
        code = native.EW_ARITH.get(st.op.name) if len(xs) == 2 else native.EW_UNARY.get(st.op.name)
        if code is not None:
            call = native.elemwise(code, dst, *xs)
        else:
            ok = activations and len(xs) == 1 and xs[0].shape == dst.shape
            call = native_rows.activation_call(st.op.name, xs[0], dst, st.params) if ok else None
        if call is None:
            return None
        calls.append(call)
        results.append(dst)
    return calls


# A program the compiled tier runs as one call over the whole tensor: (activation, its params,
# the input it reads, the input added to it first as a bias of the trailing dims or None, the
# bias's size).
_Whole = tuple[str, tuple[float, ...], int, "int | None", int]


def _chain_calls(steps: list[_Step], inputs: Sequence[Any], y: np.ndarray) -> list[native.NativeCall] | None:
    """A straight chain of float32 Add/Sub/Mul/Div (each step on the one before and an input;
    BERT's embedding sum, its attention scale and mask) and Sqrt/Reciprocal (RMSNorm's rsqrt) as JOB_ELEMWISE calls in ``y``, in
    place, each rounding as its ufunc; None for any other program or inputs ``y`` overlaps
    (but the first step's, when it is ``y`` itself). A last activation on the chain runs on ``y``
    in place (NASNet's NHWC BatchNormalization and ReLU, too large for a job a step)."""
    if any([s for s in st.srcs if s < 0] != ([-i] if i else []) for i, st in enumerate(steps)):
        return _step_calls(steps, inputs, y, activations=False)
    last, calls = steps[-1], []
    act = len(steps) > 1 and len(last.srcs) == 1 and last.op.name in native_rows.ACTIVATIONS
    for i, st in enumerate(steps[:-1] if act else steps):  # not recursive: a chain may be 100k steps long
        code = native.EW_ARITH.get(st.op.name) if len(st.srcs) == 2 else native.EW_UNARY.get(st.op.name)
        if code is None or len(st.srcs) > 2 or [s for s in st.srcs if s < 0] != ([-i] if i else []):
            return None
        xs = [y if s < 0 else inputs[s] for s in st.srcs]
        for s, x in zip(st.srcs, xs):  # y may be an input the first step alone reads (in place), value for value
            same = i == 0 and isinstance(x, np.ndarray) and x.shape == y.shape and x.strides == y.strides
            if s >= 0 and (not isinstance(x, np.ndarray) or (np.may_share_memory(x, y) and not (same and _at(x) == _at(y)))):
                return None
        call = native.elemwise(code, y, *xs)
        if call is None:
            return None
        calls.append(call)
    if act:
        call = native_rows.activation_call(last.op.name, y, y, last.params)
        return None if call is None else [*calls, call]
    return calls


def _at(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def _whole_activation(steps: list[_Step], in_shapes: list[tuple[int, ...]], out_shape: tuple[int, ...]) -> _Whole | None:
    """The one-call form of three programs, or None: an activation alone (a Gelu or Sigmoid node);
    Add of a bias then an activation (a MatMul's bias before GELU: BERT, ViT, ConvNeXt); and
    Sigmoid then Mul by the same input (SiLU: EfficientNet), which is Swish."""
    names = tuple(st.op.name for st in steps)
    full = [i for i, s in enumerate(in_shapes) if s == out_shape]
    if len(steps) == 1 and names[0] in native_rows.ACTIVATIONS and steps[0].srcs[0] in full:
        return names[0], steps[0].params, steps[0].srcs[0], None, 0
    if names == ("Sigmoid", "Mul") and steps[0].srcs[0] in full and sorted(steps[1].srcs) == [-1, steps[0].srcs[0]]:
        return "Swish", (1.0,), steps[0].srcs[0], None, 0
    if len(steps) != 2 or names[0] != "Add" or names[1] not in native_rows.ACTIVATIONS or steps[1].srcs != (-1,):
        return None
    for x, b in (steps[0].srcs, steps[0].srcs[::-1]):
        bias = tuple(in_shapes[b])
        while bias and bias[0] == 1:
            bias = bias[1:]  # a bias of the trailing dims: its leading 1s broadcast
        if x in full and x != b and bias and out_shape[len(out_shape) - len(bias) :] == bias:
            return names[1], steps[1].params, x, b, math.prod(bias)
    return None


def _gated(steps: list[_Step], in_shapes: list[tuple[int, ...]], out_shape: tuple[int, ...]) -> _Gated | None:
    """(activation, params, x, m) when the program is ``act(x) * m`` over inputs of the output's
    shape (Llama's SwiGLU: Swish of the gate times the up projection; SiLU spelled
    ``x * sigmoid(x) * m``), an activation with a C job; ("Swish", (), x, -1 - s) for
    ``x * sigmoid(s * x)``, s a scalar input (CLIP's quick GELU); else None."""
    names = tuple(st.op.name for st in steps)
    params: tuple[float, ...] = (1.0,)
    first = steps[0].srcs
    if names == ("Mul", "Sigmoid", "Mul") and steps[1].srcs == (-1,) and len(first) == 2:  # CLIP's quick GELU
        for x, s in (first, first[::-1]):  # x * sigmoid(s * x), s a scalar input: Swish of alpha s
            if in_shapes[x] == out_shape and not any(in_shapes[s]) and sorted(steps[2].srcs) == [-2, x]:
                return "Swish", (), x, -1 - s
        return None
    if names == ("Sigmoid", "Mul", "Mul") and sorted(steps[1].srcs) == [-1, steps[0].srcs[0]]:
        act, last = "Swish", steps[2]
    elif len(steps) == 2 and names[0] in native_rows.ACTIVATIONS and names[1] == "Mul":
        act, params, last = names[0], steps[0].params, steps[1]
    else:
        return None
    x, m = steps[0].srcs[0], [r for r in last.srcs if r != 1 - len(steps)]
    full = [i for i, s in enumerate(in_shapes) if s == out_shape]
    if len(last.srcs) != 2 or len(m) != 1 or m[0] == x or not {x, m[0]} <= set(full):
        return None
    return act, params, x, m[0]


_Gated = tuple[str, tuple[float, ...], int, int]


def _gated_calls(gated: _Gated, inputs: Sequence[Any], y: np.ndarray, run: bool = False) -> Any:
    """``_gated``'s program as C jobs (the activation into ``y``, then ``y * m`` in place if any),
    run at once when ``run`` (False when they cannot: the Python steps do); None when they cannot."""
    act, params, xi, mi = gated
    x, m = np.asarray(inputs[xi]), np.asarray(inputs[mi if mi >= 0 else xi])
    if mi < 0:  # Swish's alpha: the scalar input -1 - mi, read as the job is made (a program's: a constant)
        if not run and not is_constant(inputs[-1 - mi]):
            return None
        params = (float(np.asarray(inputs[-1 - mi], np.float32)),)
    first = None if mi >= 0 and np.may_share_memory(m, y) else native_rows.activation_call(act, x, y, params)
    then = native.elemwise(native.EW_ARITH["Mul"], y, y, m) if first is not None and mi >= 0 else None
    if first is None or (then is None and mi >= 0):
        return False if run else None
    calls = [first] if then is None else [first, then]
    if run:
        native.run_calls(calls)
        return True
    return calls


_CHAIN_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}


class _ChannelChain:
    """A program of per-channel constants over one NCHW-like tensor, run in C
    (``aioge_channel_chain_f32``): steps ``v = v op k[c]`` (Add, Sub, Mul, Div) in order, then
    an optional activation of ``native_rows.EPILOGUES``. Each step rounds as its ufunc does, so
    the result is the numpy program's, bit for bit. An unfolded BatchNormalization and its
    ReLU (DenseNet's pre-activations) ran as five passes over the tensor: 2.06 ms for
    256x56x56 values."""

    __slots__ = ("x", "ks", "ops", "act", "channels", "hw", "planes")

    def __init__(self, x: int, ks: list[int], ops: list[int], act: tuple[int, int, int], out_shape: tuple[int, ...]) -> None:
        self.x, self.ks, self.act = x, ks, act
        self.ops = np.array(ops, np.int64)
        self.channels, self.hw = out_shape[1], math.prod(out_shape[2:])
        self.planes = out_shape[0] * out_shape[1]

    @classmethod
    def of(
        cls, steps: list[_Step], in_shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], dtype: np.dtype
    ) -> _ChannelChain | None:
        """The chain of this program, or None when it is not one (or float32 is not its dtype)."""
        if dtype != np.float32 or len(out_shape) < 2 or not steps or math.prod(out_shape) == 0:
            return None
        body, act = steps, (0, 0, 0)
        last = steps[-1]
        if len(steps) >= 2 and last.op.name in native_rows.EPILOGUES and last.srcs == (1 - len(steps),):
            body, act = steps[:-1], native_rows.epilogue(last.op.name, last.params)
        x = -1
        ks: list[int] = []
        for i, st in enumerate(body):
            if st.op.name not in _CHAIN_OPS or len(st.srcs) != 2:
                return None
            prev, k = st.srcs
            if i == 0:
                if st.op.name in ("Add", "Mul") and in_shapes[k] == out_shape and in_shapes[prev] != out_shape:
                    prev, k = k, prev  # commutative: the data may come second
                if in_shapes[prev] != out_shape:
                    return None
                x = prev
            elif prev != -i:
                if st.op.name not in ("Add", "Mul") or k != -i:
                    return None
                prev, k = k, prev
            shape = (1,) * (len(out_shape) - len(in_shapes[k])) + in_shapes[k] if k >= 0 else ()
            if k < 0 or len(shape) != len(out_shape) or shape[1] not in (1, out_shape[1]):
                return None
            if any(d != 1 for j, d in enumerate(shape) if j != 1):
                return None
            ks.append(k)
        return cls(x, ks, [_CHAIN_OPS[st.op.name] for st in body], act, out_shape)

    def run(self, inputs: Sequence[np.ndarray], y: np.ndarray) -> bool:
        """``y`` = the program of ``inputs``; False (nothing written) when it cannot run in C."""
        c = self.call(inputs, y, True)
        if c is not None:
            split_native(native.par_run(), c.job, c.addr, c.total, worth=c.worth)
        return c is not None

    def call(self, inputs: Sequence[Any], y: Any, now: bool = False) -> native.NativeCall | None:
        """The program as one JOB_CHAIN call, or None: no compiled tier, an operand not
        C-contiguous float32, ``y`` over part of x, or a constant to broadcast (copied) that may
        change when the call is not run ``now`` (a native form's)."""
        x = inputs[self.x]
        if native.par_run() is None or not all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in (x, y)):
            return None
        if x.dtype != np.float32 or (np.may_share_memory(x, y) and native.ptr(x) != native.ptr(y)):
            return None
        vectors = []
        for v in (inputs[i] for i in self.ks):  # C float32 values read in place (each run's), else broadcast
            flat = v.reshape(-1) if isinstance(v, np.ndarray) and v.dtype == np.float32 and v.flags.c_contiguous else None
            if flat is None or flat.size != self.channels:
                if not (now or is_constant(v)):
                    return None
                flat = np.ascontiguousarray(np.broadcast_to(np.asarray(v, np.float32).reshape(-1), (self.channels,)))
            vectors.append(flat)
        ptrs = np.array([native.ptr(v) for v in vectors], np.int64)
        head = [native.ptr(x), native.ptr(y), self.channels, self.hw, len(self.ks), native.ptr(self.ops), native.ptr(ptrs)]
        args = np.array([*head, *self.act], np.int64)
        worth = x.size >= native_rows.SPLIT_ACTIVATION
        return native.NativeCall(native.JOB_CHAIN, args, self.planes, worth, (x, y, vectors, ptrs, self.ops))


def _run_whole(whole: _Whole, inputs: Sequence[np.ndarray], y: np.ndarray) -> bool:
    name, params, xi, bi, width = whole
    x = np.asarray(inputs[xi])
    if not y.flags.c_contiguous:
        return False
    if bi is None:
        return native_rows.activation(name, x, y, params)
    return native_rows.bias_activation(
        name, x.reshape(-1, width), np.asarray(inputs[bi]).reshape(-1), y.reshape(-1, width), params
    )


_Instr = tuple[Any, StepFn, int, int, int, tuple[int, ...], tuple[float, ...]]


def _allocate(steps: list[_Step], n_in: int) -> tuple[list[_Instr], int, tuple[int, int, int]]:
    # Give every step result a frame slot: 0 is the output chunk, 1..n_in the inputs, then
    # the scratch registers. The last step writes the output chunk; any other result takes
    # the output chunk while nothing lives there (so a straight chain runs in place in the
    # output), else a free register; a register is free after its value's last reader.
    #
    # Returns the program as (ufunc or None, step function, destination slot, first and
    # second source slot (-1 when unary), source slots, params), the
    # number of registers, and how many temporaries of each kind (``_KINDS``) the hungriest
    # step needs.
    last_use: dict[int, int] = {}
    for i, st in enumerate(steps):
        for r in st.srcs:
            if r < 0:
                last_use[-1 - r] = i
    slot_of: dict[int, int] = {}
    free: list[int] = []
    nregs = 0
    out_busy = False
    program = []
    for i, st in enumerate(steps):
        srcs = tuple(1 + r if r >= 0 else slot_of[-1 - r] for r in st.srcs)
        for r in set(st.srcs):
            if r < 0 and last_use[-1 - r] == i:
                slot = slot_of[-1 - r]
                if slot == 0:
                    out_busy = False
                else:
                    free.append(slot)
        if i == len(steps) - 1 or not out_busy:
            slot = 0
            out_busy = True
        elif free:
            slot = free.pop()
        else:
            slot = 1 + n_in + nregs
            nregs += 1
        slot_of[i] = slot
        program.append((st.op.ufunc, st.op.step, slot, srcs[0], srcs[1] if len(srcs) > 1 else -1, srcs, st.params))
    counts = tuple(max((st.op.temps.count(kind) for st in steps), default=0) for kind in _KINDS)
    return program, nregs, counts  # type: ignore[return-value]


def _make_temps(counts: Sequence[int], shape: tuple[int, ...], dtype: np.dtype) -> Temps:
    kinds = (dtype, np.dtype(np.bool_), np.dtype(np.float64))
    return tuple([np.empty(shape, kind) for _ in range(n)] for kind, n in zip(kinds, counts))  # type: ignore[return-value]


def _head(temps: Temps, n: int) -> Temps:
    return tuple([t[:n] for t in group] for group in temps)  # type: ignore[return-value]


def activation_runner(name: str, params: Sequence[float], dtype: Any) -> Callable[[np.ndarray], None] | None:
    """An in-place activation for a fused producer's output, or None for no activation.

    The activation runs over the output in cache-sized chunks with the same step functions
    as FusedElementwise, so FusedConv + Relu computes exactly Conv then Relu.

    Raises:
        ValueError: an unknown activation or the wrong number of parameters.
    """
    if not name:
        return None
    op = EW_OPS.get(name)
    if op is None or op.arity != 1:
        raise ValueError(f"unknown activation {name!r}")
    pars = tuple(float(v) for v in params)
    if len(pars) != op.nparams:
        raise ValueError(f"activation {name} takes {op.nparams} params, got {len(pars)}")
    dt = np.dtype(dtype)
    block = max(1, BLOCK_BYTES // dt.itemsize)
    pool: list[Temps] = []

    def apply(y: np.ndarray) -> None:
        flat = y.reshape(-1)
        if not np.shares_memory(flat, y):  # pragma: no cover - kernels always return contiguous outputs
            raise ValueError("activation needs a contiguous output")
        if native_rows.activation(name, flat, flat, pars):  # float32: one C call, split over an idle core
            return
        if not op.temps:
            op.step([flat, flat], 1, (0,), pars, ([], [], []))
            return
        try:
            temps = pool.pop()
        except IndexError:
            temps = _make_temps([op.temps.count(kind) for kind in _KINDS], (block,), dt)
        try:
            for lo in range(0, flat.size, block):
                chunk = flat[lo : lo + block]
                n = chunk.size
                op.step([chunk, chunk], 1, (0,), pars, temps if n == block else _head(temps, n))
        finally:
            pool.append(temps)

    return apply


def without_activation(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A fused op's attributes less its ``activation`` and ``activation_params``: the base
    op's, as its kernels take them."""
    return {key: v for key, v in attrs.items() if key not in ("activation", "activation_params")}


def build_then_activation(
    build: Callable[[Mapping[str, Any], Mapping[str, Any], Any, Any], RunFn],
    attrs: Mapping[str, Any],
    params: Mapping[str, Any],
    ins: Any,
    outs: Any,
    dtype: Any,
) -> RunFn:
    """A fused op's kernel from its base op's ``build`` (given ``without_activation(attrs)``),
    the activation a pass of its own after it (``with_activation``)."""
    run = build(without_activation(attrs), params, ins, outs)
    return with_activation(run, attrs.get("activation", ""), attrs.get("activation_params", ()), dtype)


def build_then_residual(
    build: Callable[[Mapping[str, Any], Mapping[str, Any], Any, Any], RunFn],
    attrs: Mapping[str, Any],
    params: Mapping[str, Any],
    ins: Any,
    outs: Any,
) -> RunFn:
    """A FusedConv with a residual Z (its last input): the base kernel (``build`` on ``ins``,
    without the activation) into the output, then ``y = act(y + Z)`` in place, float32 in C
    while the output is hot; the base kernel's native form followed by that job."""
    run, n, par = build(without_activation(attrs), params, ins, outs), len(ins), native.par_run()
    name, act_params = attrs.get("activation", ""), attrs.get("activation_params", ())
    code = native_rows.epilogue(name, act_params) if name in native_rows.EPILOGUES or not name else None
    act = activation_runner(name, act_params, outs[0].dtype)

    def call(y: np.ndarray, z: np.ndarray) -> native.NativeCall:  # y = act(y + z)
        a = np.array([native.ptr(y), native.ptr(z), native.ptr(y), *code, y.size], np.int64)  # type: ignore[misc]
        return native.NativeCall(native.JOB_RESIDUAL, a, y.size, y.size >= 1 << 16, (y, z))

    def fused(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        res = run(inputs[:n], outputs)
        y, z = res[0], inputs[n]
        if par is not None and code is not None and native.f32c(y, z):
            once = call(y, z)
            split_native(par, once.job, once.addr, once.total, worth=once.worth)
        else:
            np.add(y, z, out=y)
            if act is not None:
                act(y)
        return res

    form = native.native_form(run)
    if form is None or par is None or code is None:
        return fused

    def jobs(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        base, y, z = form(inputs[:n], outputs), outputs[0], inputs[n]
        return None if base is None or not native.f32c(y, z) else [*base, call(y, z)]

    return native.with_native(fused, jobs)


def with_activation(run: RunFn, name: str, params: Sequence[float], dtype: Any) -> RunFn:
    """``run`` followed by ``activation_runner(name, params, dtype)`` in place on its first
    output: a fused op's kernel that does not apply its activation itself (``run`` when
    ``name`` is empty).

    Raises:
        ValueError: as ``activation_runner``.
    """
    act = activation_runner(name, params, dtype)
    if act is None:
        return run

    def fused(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        res = run(inputs, outputs)
        act(res[0])
        return res

    inner = native.native_form(run)
    if inner is None:
        return fused

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        # the kernel's jobs, then the activation's C call as ``act`` makes it
        calls = inner(inputs, outputs)
        after = native_rows.activation_call(name, outputs[0].reshape(-1), outputs[0].reshape(-1), params)
        if calls is None or after is None or not np.shares_memory(outputs[0].reshape(-1), outputs[0]):
            return None
        return [*calls, after]

    return native.with_native(fused, form)


def build_squeeze_excite(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """SqueezeExcite (``ops.fused``): x times act2(W2 @ act1(W1 @ mean_hw(x) + b1) + b2), per
    image and channel, in one kernel: the mean a GEMV over the spatial axis, the two 1x1 convs
    of the squeezed vector GEMVs, the scale one broadcast multiply (MobileNetV3's and
    EfficientNet's SE blocks ran as four nodes: ~50 us of mostly per-node cost each)."""
    n, c, h, w = (int(d) for d in ins[0].shape)
    c1 = int(ins[1].shape[0])
    dt = np.dtype(outs[0].dtype)
    act1 = activation_runner(attrs.get("activation1", ""), attrs.get("activation1_params", ()), dt)
    act2 = activation_runner(attrs.get("activation2", ""), attrs.get("activation2_params", ()), dt)
    inv = np.full(h * w, 1.0 / (h * w), dt)
    mean, hidden, scale = np.empty(n * c, dt), np.empty((n, c1), dt), np.empty((n, c), dt)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w1, b1, w2, b2 = inputs
        y = np.empty((n, c, h, w), dt) if outputs is None else outputs[0]
        rows = x.reshape(n * c, h * w)
        np.dot(rows, inv, out=mean)
        np.dot(mean.reshape(n, c), w1.reshape(c1, c).T, out=hidden)
        np.add(hidden, b1, out=hidden)
        if act1 is not None:
            act1(hidden)
        np.dot(hidden, w2.reshape(c, c1).T, out=scale)
        np.add(scale, b2, out=scale)
        if act2 is not None:
            act2(scale)
        np.multiply(rows, scale.reshape(n * c, 1), out=y.reshape(n * c, h * w))
        return (y,)

    return run


def build_squeeze_excite_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """SqueezeExcite in C for float32: the squeeze (``aioge_squeeze_f32``: plane means, the two
    small matrix-vector products and their activations) per image, then the excite as the
    channel chain's multiply by each plane's scale, its planes split over an idle core.
    Without the compiled tier, or for other dtypes, ``build_squeeze_excite``."""
    from aioge.kernels.conv_algos import NativeOperand, WeightDerived

    fallback = build_squeeze_excite(attrs, params, ins, outs)
    par = native.par_run()
    if par is None or np.dtype(outs[0].dtype) != np.float32:
        return fallback
    n, c, h, w = (int(d) for d in ins[0].shape)
    c1 = int(ins[1].shape[0])
    codes = (
        *native_rows.epilogue(attrs.get("activation1", ""), attrs.get("activation1_params", ())),
        *native_rows.epilogue(attrs.get("activation2", ""), attrs.get("activation2_params", ())),
    )
    multiply = np.array([2], np.int64)  # the chain's step codes: 2 is *
    # The squeeze in two split stages (jobs.c's squeeze_stage): units of cu channels, then blocks of cv outputs, 8 of
    # each at most, from 16K values read (planes and both weights); the excite split with it, over the planes stage 1 read.
    cu, cv, split = 8 * -(-c // 64), 16 * -(-c // 128), n * c * (h * w + 2 * c1) >= 1 << 14
    # w1 transposed once (C, C1), so stage 1 sums scaled rows; w2 as it is (C, C1): a block of
    # stage 2's outputs is a run of its rows
    w1t = WeightDerived(lambda a: np.ascontiguousarray(a.reshape(c1, c).T, np.float32))
    w2 = WeightDerived(lambda a: np.ascontiguousarray(a.reshape(c, c1), np.float32))
    biases = [NativeOperand() for _ in range(2)]

    # The call's argument blocks by (x, y, weights) identity: a context binds the same arena
    # views every run, so a run after the first only calls (the blocks cost ~7 us to build).
    # An entry holds its arrays (no identity is reused while it lives) and its own scale scratch
    # (a context runs one run at a time); a few contexts' entries are kept.
    calls: dict[tuple[int, ...], tuple[Any, ...]] = {}

    def prepare(x: np.ndarray, y: np.ndarray, inputs: Sequence[Any]) -> tuple[Any, ...]:
        a1, a2 = w1t.get(inputs[1]), w2.get(inputs[3])
        (b1, p1), (b2, p2) = (op.get(b) for op, b in zip(biases, (inputs[2], inputs[4])))
        scale = np.empty(n * c, np.float32)
        xp, sp = native.ptr(x), native.ptr(scale)
        part = np.empty(n * -(-c // cu) * c1, np.float32)
        head = [xp, native.ptr(a1), p1, native.ptr(a2), p2, sp, c, h * w, c1, *codes]
        squeeze = np.array([[*head, s, cu, -(-c // cu), native.ptr(part), cv, -(-c // cv)] for s in (1, 2)], np.int64)
        k = np.array([sp], np.int64)
        chain = np.array([xp, native.ptr(y), n * c, h * w, 1, native.ptr(multiply), native.ptr(k), 0, 0, 0], np.int64)
        return (x, y, *inputs[1:], a1, a2, b1, b2, scale, k, part, squeeze, chain, native.ptr(squeeze), native.ptr(chain))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        y = np.empty((n, c, h, w), np.float32) if outputs is None else outputs[0]
        if x.dtype != np.float32 or not (x.flags.c_contiguous and y.flags.c_contiguous):
            return fallback(inputs, outputs)
        key = (id(x), id(y), *map(id, inputs[1:]))
        entry = calls.get(key)
        if entry is None or not all(is_constant(a) for a in inputs[1:]):  # a variable may change in place
            if len(calls) >= 8:
                calls.clear()
            entry = calls[key] = prepare(x, y, inputs)
        for i, width in enumerate((cu, cv)):  # the stages' argument blocks are the rows of entry[-4]
            split_native(par, native.JOB_SQUEEZE, entry[-2] + entry[-4].strides[0] * i, n * -(-c // width), worth=split)
        split_native(par, native.JOB_CHAIN, entry[-1], n * c, worth=split)
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        # the same two calls over the program's operands, in place (MobileNetV3 and
        # EfficientNet ran step by step for want of this form: every SE block a Python step)
        x, y = inputs[0], outputs[0]
        if not native.f32c(x, y) or x.shape != (n, c, h, w) or not all(is_constant(a) for a in inputs[1:]):
            return None
        e = prepare(x, y, inputs)
        return [
            *(native.NativeCall(native.JOB_SQUEEZE, e[-4][i], n * -(-c // wd), split, e) for i, wd in enumerate((cu, cv))),
            native.NativeCall(native.JOB_CHAIN, e[-3], n * c, split, e),
        ]

    return native.with_native(run, form)
