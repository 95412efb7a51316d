"""Recurrent kernels: RNN, GRU and LSTM (ONNX layouts, every direction, sequence lengths,
peepholes, clipping and the named activation functions).

The input projection X W^T of every time step is one matrix product; the recurrence then
loops over time steps (inherently sequential), each step a batched matrix product over the
whole batch. Steps past a sample's sequence length leave its state unchanged and write
zeros to Y, as ONNX specifies; a sample of length 0 ends with zero states, as onnxruntime
gives. Activation alphas and betas go, in order, to the functions that take one (as
onnxruntime reads them). Arithmetic is in the input's dtype (float32 stays float32).

With the compiled tier (chosen when the kernel is built), float32 recurrences run in C as one
``JOB_RNN`` (``csrc/rnn.c``, split by ``csrc/par.c``'s C helper): the projection X W^T (through
the BLAS numpy links), then each step's product with R^T and its gates; the two directions of a
bidirectional layer on two cores when an idle one can be taken, or, when a direction's R^T is
past a core's L2 (or there is one direction), both cores sharing each step by hidden units,
each stage's halves claimed so a partner that is late or away costs the caller no wait.
The numpy loop is the fallback.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.kernels import native
from aioge.kernels.base import into
from aioge.kernels.contract import KernelImpl, RunFn
from aioge.kernels.conv_algos import WeightDerived
from aioge.kernels.parallel import matmul_2d, split_native

__all__ = ["ACTIVATIONS", "gru", "kernel", "lstm", "rnn"]


def _sigmoid(x: np.ndarray, a: float, b: float) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# name -> (function(x, alpha, beta), default alpha, default beta), as ONNX lists them
ACTIVATIONS: dict[str, tuple[Callable[[np.ndarray, float, float], np.ndarray], float, float]] = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0.0, 0.0),
    "tanh": (lambda x, a, b: np.tanh(x), 0.0, 0.0),
    "sigmoid": (_sigmoid, 0.0, 0.0),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, 0.0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, 0.0),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0.0, 0.0),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), 0.0, 0.0),
}

_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}
Act = Callable[[np.ndarray], np.ndarray]


def _activations(attrs: dict[str, Any], defaults: Sequence[str], directions: int) -> list[list[Act]]:
    """Per direction, the bound activation functions."""
    return [[_bind(ACTIVATIONS[name][0], a, b) for name, a, b in d] for d in _specs(attrs, defaults, directions)]


def _specs(attrs: dict[str, Any], defaults: Sequence[str], directions: int) -> list[list[tuple[str, float, float]]]:
    """Per direction, each activation's (lower-case name, alpha, beta).

    Raises:
        ValueError: an unknown activation name or the wrong number of them.
    """
    names = list(attrs.get("activations") or list(defaults) * directions)
    per = len(defaults)
    if len(names) == per and directions == 2:
        names = names * 2
    if len(names) != per * directions:
        raise ValueError(f"expected {per * directions} activations, got {names}")
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    specs: list[tuple[str, float, float]] = []
    for name in names:
        try:
            _, a, b = ACTIVATIONS[name.lower()]
        except KeyError:
            raise ValueError(f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}") from None
        key = name.lower()
        # as onnxruntime reads them: each function that takes an alpha (a beta) takes the next one
        a = alphas.pop(0) if key in _TAKES_ALPHA and alphas else a
        b = betas.pop(0) if key in _TAKES_BETA and betas else b
        specs.append((key, a, b))
    return [specs[d * per : (d + 1) * per] for d in range(directions)]


def _bind(fn: Callable[[np.ndarray, float, float], np.ndarray], a: float, b: float) -> Act:
    return lambda x: fn(x, a, b).astype(x.dtype, copy=False)


class _Setup:
    """Inputs in (seq, batch, ...) layout, per-direction weights and masks."""

    def __init__(self, x: np.ndarray, w: np.ndarray, attrs: dict[str, Any], gates: int) -> None:
        self.layout = int(attrs.get("layout", 0))
        self.x = np.swapaxes(x, 0, 1) if self.layout else x  # (seq, batch, input)
        self.seq, self.batch = self.x.shape[:2]
        self.directions = w.shape[0]
        direction = attrs.get("direction", "forward")
        want = 2 if direction == "bidirectional" else 1
        if self.directions != want:
            raise ValueError(f"direction {direction!r} needs {want} weight sets, W has {self.directions}")
        self.reverse = [direction == "reverse" or d == 1 for d in range(self.directions)]
        self.hidden = w.shape[1] // gates
        if attrs.get("hidden_size") not in (None, self.hidden):
            raise ValueError(f"hidden_size={attrs['hidden_size']} but W implies {self.hidden}")
        self.clip = attrs.get("clip")

    def lengths(self, sequence_lens: np.ndarray | None) -> np.ndarray:
        """Raises:
        ValueError: sequence_lens is not one length in [0, seq] per batch row."""
        if sequence_lens is None:
            return np.full(self.batch, self.seq, np.int64)
        lens = np.ascontiguousarray(sequence_lens, np.int64).reshape(-1)
        if lens.shape != (self.batch,) or (lens.size and (lens.min() < 0 or lens.max() > self.seq)):
            raise ValueError(f"sequence_lens must hold {self.batch} lengths in [0, {self.seq}], got {sequence_lens.tolist()}")
        return lens

    def order(self, d: int, lens: np.ndarray) -> np.ndarray:
        """(seq, batch) source step per processing step: reversed within each valid length."""
        t = np.arange(self.seq)[:, None]
        if not self.reverse[d]:
            return np.broadcast_to(t, (self.seq, self.batch))
        return np.where(t < lens[None, :], lens[None, :] - 1 - t, t)

    def clipped(self, v: np.ndarray) -> np.ndarray:
        return v if self.clip is None else np.clip(v, -self.clip, self.clip)

    def project(self, w: np.ndarray, d: int, order: np.ndarray) -> np.ndarray:
        """X_t W^T for every step, in processing order: (seq, batch, gates * hidden)."""
        xw = np.matmul(self.x, w[d].T)
        return np.take_along_axis(xw, order[:, :, None], axis=0)

    def outputs(self, ys: list[np.ndarray], last: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        y = np.stack(ys, axis=1)  # (seq, directions, batch, hidden)
        y_h = np.stack(last, axis=0)  # (directions, batch, hidden)
        if self.layout:
            return y.transpose(2, 0, 1, 3), np.swapaxes(y_h, 0, 1)
        return y, y_h


def _initial(v: np.ndarray | None, setup: _Setup, d: int, dtype: np.dtype) -> np.ndarray:
    if v is None:
        return np.zeros((setup.batch, setup.hidden), dtype)
    v = np.swapaxes(v, 0, 1) if setup.layout else v
    return v[d].astype(dtype, copy=True)


def _scatter_back(steps: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Processing-order outputs (seq, batch, hidden) back to time order."""
    out = np.empty_like(steps)
    np.put_along_axis(out, order[:, :, None], steps, axis=0)
    return out


def _run(
    setup: _Setup,
    lens: np.ndarray,
    step: Callable[[int, int, np.ndarray, Any], tuple[np.ndarray, Any]],
    states: list[Any],
    dtype: np.dtype,
) -> tuple[list[np.ndarray], list[Any]]:
    """Drive ``step(direction, t, projected_t, state) -> (h, state)`` over time, masking ended samples."""
    ys, finals = [], []
    for d in range(setup.directions):
        order = setup.order(d, lens)
        state = states[d]
        hs = np.zeros((setup.seq, setup.batch, setup.hidden), dtype)
        for t in range(setup.seq):
            live = (t < lens)[:, None]
            h, new = step(d, t, order, state)
            state = tuple(np.where(live, n, o) for n, o in zip(new, state))
            hs[t] = np.where(live, h, 0)
        ys.append(_scatter_back(hs, order))
        finals.append(tuple(np.where((lens > 0)[:, None], v, 0).astype(dtype, copy=False) for v in state))
    return ys, finals


def rnn(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    **attrs: Any,
) -> tuple[np.ndarray, ...]:
    """ONNX RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb); returns (Y, Y_h)."""
    s = _Setup(x, w, attrs, 1)
    acts = _activations(attrs, ["Tanh"], s.directions)
    lens = s.lengths(sequence_lens)
    bias = np.zeros((s.directions, 2 * s.hidden), x.dtype) if b is None else b
    proj = [s.project(w, d, s.order(d, lens)) + bias[d, : s.hidden] + bias[d, s.hidden :] for d in range(s.directions)]

    def step(d: int, t: int, order: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        (h,) = state
        h = acts[d][0](s.clipped(proj[d][t] + h @ r[d].T))
        return h, (h,)

    ys, finals = _run(s, lens, step, [(_initial(initial_h, s, d, x.dtype),) for d in range(s.directions)], x.dtype)
    return s.outputs(ys, [f[0] for f in finals])


def gru(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    **attrs: Any,
) -> tuple[np.ndarray, ...]:
    """ONNX GRU (gates z, r, h); returns (Y, Y_h)."""
    s = _Setup(x, w, attrs, 3)
    acts = _activations(attrs, ["Sigmoid", "Tanh"], s.directions)
    lens = s.lengths(sequence_lens)
    n = s.hidden
    bias = np.zeros((s.directions, 6 * n), x.dtype) if b is None else b
    before_reset = bool(attrs.get("linear_before_reset", 0))
    proj = [s.project(w, d, s.order(d, lens)) + bias[d, : 3 * n] for d in range(s.directions)]

    def step(d: int, t: int, order: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        (h,) = state
        f, g = acts[d]
        rb = bias[d, 3 * n :]
        xz, xr, xh = proj[d][t][:, :n], proj[d][t][:, n : 2 * n], proj[d][t][:, 2 * n :]
        rz, rr, rh = r[d][:n], r[d][n : 2 * n], r[d][2 * n :]
        z = f(s.clipped(xz + h @ rz.T + rb[:n]))
        rt = f(s.clipped(xr + h @ rr.T + rb[n : 2 * n]))
        if before_reset:
            cand = g(s.clipped(xh + rt * (h @ rh.T + rb[2 * n :])))
        else:
            cand = g(s.clipped(xh + (rt * h) @ rh.T + rb[2 * n :]))
        h = (1 - z) * cand + z * h
        return h, (h,)

    ys, finals = _run(s, lens, step, [(_initial(initial_h, s, d, x.dtype),) for d in range(s.directions)], x.dtype)
    return s.outputs(ys, [f[0] for f in finals])


def lstm(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    p: np.ndarray | None = None,
    **attrs: Any,
) -> tuple[np.ndarray, ...]:
    """ONNX LSTM (gates i, o, f, c; peepholes i, o, f); returns (Y, Y_h, Y_c)."""
    s = _Setup(x, w, attrs, 4)
    acts = _activations(attrs, ["Sigmoid", "Tanh", "Tanh"], s.directions)
    lens = s.lengths(sequence_lens)
    n = s.hidden
    bias = np.zeros((s.directions, 8 * n), x.dtype) if b is None else b
    peep = np.zeros((s.directions, 3 * n), x.dtype) if p is None else p
    couple = bool(attrs.get("input_forget", 0))
    proj = [s.project(w, d, s.order(d, lens)) + bias[d, : 4 * n] + bias[d, 4 * n :] for d in range(s.directions)]

    def step(d: int, t: int, order: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        h, c = state
        f, g, hact = acts[d]
        gates = proj[d][t] + h @ r[d].T
        pi, po, pf = peep[d][:n], peep[d][n : 2 * n], peep[d][2 * n :]
        i = f(s.clipped(gates[:, :n] + pi * c))
        forget = 1 - i if couple else f(s.clipped(gates[:, 2 * n : 3 * n] + pf * c))
        cand = g(s.clipped(gates[:, 3 * n :]))
        c = forget * c + i * cand
        o = f(s.clipped(gates[:, n : 2 * n] + po * c))
        h = o * hact(c)
        return h, (h, c)

    init = [(_initial(initial_h, s, d, x.dtype), _initial(initial_c, s, d, x.dtype)) for d in range(s.directions)]
    ys, finals = _run(s, lens, step, init, x.dtype)
    y, y_h = s.outputs(ys, [f[0] for f in finals])
    y_c = np.stack([f[1] for f in finals], axis=0)
    return y, y_h, (np.swapaxes(y_c, 0, 1) if s.layout else y_c)


# ---- the compiled recurrence (csrc/rnn.c) ----------------------------------------------------

# op -> (numpy kernel, gates, rnn.c's cell code, default activations)
_OPS: dict[str, tuple[Callable[..., tuple[np.ndarray, ...]], int, int, list[str]]] = {
    "RNN": (rnn, 1, 0, ["Tanh"]),
    "GRU": (gru, 3, 1, ["Sigmoid", "Tanh"]),
    "LSTM": (lstm, 4, 2, ["Sigmoid", "Tanh", "Tanh"]),
}
_CODES = {name: i for i, name in enumerate(ACTIVATIONS)}  # rnn.c's A_* codes, in the same order
_GEO = 20  # aioge.h's RNN_GEO
# From this many multiply-adds (projection and steps, both directions) a layer is worth a C
# helper's hop (par.c: a microsecond when it spins, tens when it sleeps).
_SPLIT_MACS = 1 << 20
# A step's multiply-adds from which both cores share each step (a barrier per step), and the
# bytes of one direction's R^T past which a bidirectional layer runs so rather than a direction
# per core (each core then streams its R^T from L3 every step).
_TEAM_MACS = 1 << 17
_TEAM_R_BYTES = 3 << 19


def _native() -> Any:
    """(packed_floats, pack, par_run, shared_floats): csrc/rnn.c's entry points and par.c's, or
    None without the compiled tier."""
    fns = (
        native.function("aioge_rnn_packed_floats"),
        native.function("aioge_rnn_pack"),
        native.par_run(),
        native.function("aioge_rnn_shared_floats"),
    )
    return None if None in fns else fns


def _packed(fns: Any, op: str, attrs: Mapping[str, Any], r: np.ndarray) -> np.ndarray:
    """R (directions, G*H, H) packed for the C recurrence (R^T in panels; done once per constant R)."""
    geo = np.zeros(_GEO, np.int64)
    geo[[0, 3, 4, 6]] = _OPS[op][2], r.shape[2], r.shape[0], bool(attrs.get("linear_before_reset", 0))
    floats = int(fns[0](native.ptr(geo)))
    pk = native.aligned_empty((max(floats, 16),), np.float32)
    if floats < 0 or fns[1](native.ptr(geo), _addr(np.ascontiguousarray(r, np.float32)), native.ptr(pk), pk.size) < 0:
        raise ValueError(f"{op}: R {r.shape} does not fit the recurrence's geometry {geo.tolist()}")
    return pk


def _addr(a: np.ndarray | None) -> int | None:
    return None if a is None or a.size == 0 else native.ptr(a)


def _run_native(
    fns: Any,
    op: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any],
    y_out: np.ndarray | None,
    pack: Callable[[np.ndarray], np.ndarray],
    plans: dict[Any, Any] | None = None,
) -> tuple[np.ndarray, ...]:
    """``op`` over float32 inputs in C, R packed by ``pack`` (a kernel's ``WeightDerived``);
    ``y_out`` (Y's output buffer, or None) is written in place when it fits. ``plans`` (a
    kernel's) keeps per input shape the geometry and a pool of scratch buffers (xw, hs, team):
    their making was most of the ~45 us a call spent in Python."""
    x, w, r, b, sequence_lens, initial_h, initial_c, p = list(inputs) + [None] * (8 - len(inputs))
    s = _Setup(x, w, attrs, _OPS[op][1])
    dirs, seq, batch, n = s.directions, s.seq, s.batch, s.hidden
    lens = s.lengths(None if sequence_lens is None or sequence_lens.size == 0 else sequence_lens)
    gh = _OPS[op][1] * n
    bias, peep = (None if v is None else np.ascontiguousarray(v, np.float32) for v in (b, p))
    shapes = (("W", w, (dirs, gh, x.shape[-1])), ("R", r, (dirs, gh, n)), ("B", bias, (dirs, 2 * gh)), ("P", peep, (dirs, 3 * n)))
    for name, v, shape in shapes:
        if v is not None and v.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {v.shape}")
    x, w = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(w, np.float32)
    plans = {} if plans is None or len(plans) > 8 else plans  # shapes that keep changing: no cache
    plan = plans.get((x.shape, w.shape)) or plans.setdefault((x.shape, w.shape), _plan(fns, op, s, x, attrs))
    geo, fp, together, worth, blas, pool, make = plan
    xw, hs, team = pool.pop() if pool else make()
    if xw.size and blas is None:  # no BLAS to call from C (or no inputs): the projection here
        matmul_2d(x.reshape(-1, x.shape[2]), w.reshape(dirs * gh, -1).T, xw.reshape(-1, dirs * gh))
    y_shape = (batch, seq, dirs, n) if s.layout else (seq, dirs, batch, n)
    y = y_out if y_out is not None and y_out.shape == y_shape and native.f32c(y_out) else np.empty(y_shape, np.float32)
    states = [_state(initial_h, s)] + ([_state(initial_c, s)] if op == "LSTM" else [])
    pk = pack(r)
    if team is not None:
        team[:] = 0
    c = states[1] if op == "LSTM" else None
    # JOB_RNN's argument block, in aioge.h's RJ_ order (an array its address, 0 for None)
    block = [geo, fp, None if blas is None else x, w, x.shape[2], seq * batch, *(blas or (0, 0)), xw, pk, pk.size, bias, peep]
    block += [lens if sequence_lens is not None else None, y, states[0], c, hs, hs.size, team]
    args = np.array([_addr(v) or 0 if v is None or isinstance(v, np.ndarray) else v for v in block], np.int64)
    try:
        split_native(fns[2], native.JOB_RNN, native.ptr(args), 2 if together else dirs, worth=worth)
    finally:
        pool.append((xw, hs, team))
    for v in states:
        v[:, lens == 0] = 0
    return (y, *(np.swapaxes(v, 0, 1) if s.layout else v for v in states))


def _plan(fns: Any, op: str, s: _Setup, x: np.ndarray, attrs: dict[str, Any]) -> tuple[Any, ...]:
    """(geo, fp, together, worth, blas, pool, make) for inputs of ``x``'s shape: ``make()`` a
    fresh (xw, hs, team) of scratch, ``pool`` those free (one to start)."""
    dirs, seq, batch, n = s.directions, s.seq, s.batch, s.hidden
    gh = _OPS[op][1] * n
    y_shape = (batch, seq, dirs, n) if s.layout else (seq, dirs, batch, n)
    xs, ys = (np.empty(v, np.float32).strides for v in (x.shape[:2] + (dirs * gh,), y_shape))  # (t, b), (t, b, direction)
    steps = (xs[1], xs[0], ys[1], ys[0], ys[2]) if s.layout else (xs[0], xs[1], ys[0], ys[2], ys[1])
    flags = (
        attrs.get("direction") == "reverse",
        attrs.get("linear_before_reset", 0),
        attrs.get("input_forget", 0),
        s.clip is not None,
    )
    geo = np.zeros(_GEO, np.int64)
    geo[:14] = (_OPS[op][2], seq, batch, n, dirs, *map(bool, flags), *(v // 4 for v in steps))
    fp = np.zeros(13, np.float32)
    fp[0] = s.clip or 0.0
    for d, dspecs in enumerate(_specs(attrs, _OPS[op][3], dirs)):
        for slot, (name, a, bb) in enumerate(dspecs):
            geo[14 + 3 * d + slot] = _CODES[name]
            fp[1 + 6 * d + 2 * slot : 3 + 6 * d + 2 * slot] = a, bb
    shared = max(int(fns[3](native.ptr(geo))), 16)  # the steps' shared rows
    # one direction at a time on both cores, each its half of the hidden units (per-step
    # claims), when a direction's R^T is more than a core's L2 holds or there is one direction
    together = batch * gh * n >= _TEAM_MACS and (dirs == 1 or gh * n * 4 > _TEAM_R_BYTES)

    def make() -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        xw = np.empty(x.shape[:2] + (dirs * gh,), np.float32)
        return xw, native.aligned_empty((shared,), np.float32, 64), np.zeros(32, np.int64) if together else None

    worth = seq * batch * gh * (n + x.shape[2]) >= _SPLIT_MACS
    return geo, fp, together, worth, native.sgemm() if x.size else None, [make()], make


def _state(v: np.ndarray | None, s: _Setup) -> np.ndarray:
    """An initial state as a fresh (directions, batch, hidden) float32 array the C kernel updates."""
    if v is None:
        return np.zeros((s.directions, s.batch, s.hidden), np.float32)
    v = np.swapaxes(v, 0, 1) if s.layout else v
    if v.shape != (s.directions, s.batch, s.hidden):
        raise ValueError(f"an initial state must have {(s.directions, s.batch, s.hidden)} (layout {s.layout}), got {v.shape}")
    return np.array(v, np.float32, order="C")


def kernel(op: str) -> KernelImpl:
    """RNN, GRU or LSTM: the C recurrence for float32 when the compiled tier is loaded at build
    time, else (and for other dtypes) the numpy loop; the node's declared outputs."""
    numpy_fn = _OPS[op][0]

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Sequence[Any]) -> RunFn:
        kw, count, fns = dict(attrs), len(outs), _native()
        packed = WeightDerived(lambda r: _packed(fns, op, kw, r))
        plans: dict[Any, Any] = {}

        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            if fns is not None and inputs[0].dtype == np.float32:
                res = _run_native(fns, op, inputs, kw, outputs[0] if outputs else None, packed.get, plans)
            else:
                res = numpy_fn(*inputs, **kw)
            return into(outputs, tuple(res)[:count])

        return run

    return KernelImpl("numpy", build)
