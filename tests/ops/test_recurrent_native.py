"""RNN, GRU and LSTM in C (csrc/rnn.c, aioge.kernels.rnn) and their numpy fallback against
onnxruntime over drawn geometries: every direction, both layouts (onnxruntime runs layout 0;
layout 1's inputs and outputs are its transposes), sequence lengths with padding and zero,
initial states, peepholes, clip, linear_before_reset, input_forget and every activation with
drawn alphas and betas."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import aioge.kernels.rnn as krnn
from aioge.kernels import native
from tests.ops.conftest import aioge_graph, evaluate, ort_run, rand

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_OUTPUTS = {"RNN": 2, "GRU": 2, "LSTM": 3}
_ACTS = [
    "Relu",
    "Tanh",
    "Sigmoid",
    "Affine",
    "LeakyRelu",
    "ThresholdedRelu",
    "ScaledTanh",
    "HardSigmoid",
    "Elu",
    "Softsign",
    "Softplus",
]
_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


@st.composite
def _cases(draw: Any) -> tuple[str, list[np.ndarray | None], dict[str, Any]]:
    op = draw(st.sampled_from(["RNN", "GRU", "LSTM"]))
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    dirs = 2 if direction == "bidirectional" else 1
    # batch past 8: rnn.c's step product takes eight rows by two panels, then four rows, then one
    seq, batch, inp = draw(st.integers(0, 6)), draw(st.integers(1, 5) | st.integers(8, 21)), draw(st.integers(1, 7))
    n = draw(st.sampled_from([1, 2, 3, 5, 8, 13, 16, 17, 33]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g = _GATES[op]
    attrs: dict[str, Any] = {"hidden_size": n, "direction": direction}
    x = rand(rng, seq, batch, inp)
    # R scaled by 1 / sqrt(n): unbounded activations (Relu gates) stay far from overflow in six steps
    inputs: list[np.ndarray | None] = [x, rand(rng, dirs, g * n, inp), rand(rng, dirs, g * n, n) / np.float32(np.sqrt(n))]
    inputs.append(rand(rng, dirs, 2 * g * n) if draw(st.booleans()) else None)
    lens = draw(st.none() | st.lists(st.integers(0, seq), min_size=batch, max_size=batch))
    inputs.append(None if lens is None else np.array(lens, np.int32))
    states = draw(st.booleans())
    inputs.append(rand(rng, dirs, batch, n) if states else None)
    if op == "LSTM":
        inputs.append(rand(rng, dirs, batch, n) if states else None)
        inputs.append(rand(rng, dirs, 3 * n) if draw(st.booleans()) else None)
        attrs["input_forget"] = draw(st.integers(0, 1))
    if op == "GRU":
        attrs["linear_before_reset"] = draw(st.integers(0, 1))
    acts = draw(st.booleans())
    if acts:
        names = draw(st.lists(st.sampled_from(_ACTS), min_size=len(_DEFAULTS[op]) * dirs, max_size=len(_DEFAULTS[op]) * dirs))
        # onnxruntime's own defaults for these three are 0, where ONNX's operators say 1: always given
        given = bool({"Affine", "ScaledTanh", "ThresholdedRelu"} & set(names))
        params = st.lists(st.floats(0.125, 1.5, width=32), min_size=len(names) if given else 1, max_size=6)
        attrs["activations"] = names
        for key in ("activation_alpha", "activation_beta"):
            if given or draw(st.booleans()):
                attrs[key] = draw(params)
    if acts or draw(st.booleans()):  # unbounded gates (Relu, Softplus) overflow in a few steps unclipped
        attrs["clip"] = draw(st.floats(0.25, 3.0, width=32))
    while inputs[-1] is None:
        inputs.pop()
    return op, inputs, attrs


def _batch_major(v: np.ndarray | None, index: int) -> np.ndarray | None:
    """Layout 1's form of input ``index``: X (seq, batch, in) and the states (dirs, batch, n) swap their first axes."""
    return None if v is None or index not in (0, 5, 6) else np.ascontiguousarray(np.swapaxes(v, 0, 1))


def _check(op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any], layout: int) -> None:
    x = inputs[0]
    assert x is not None
    if x.shape[0]:
        want = ort_run(op, inputs, attrs, _OUTPUTS[op])
    else:  # onnxruntime aborts on an empty GRU and leaves LSTM's Y_c unset: its zero-length rows' outputs
        dirs, n = inputs[1].shape[0], attrs["hidden_size"]  # type: ignore[union-attr]
        want = [np.zeros((0, dirs, x.shape[1], n), np.float32)] + [np.zeros((dirs, x.shape[1], n), np.float32)] * (
            _OUTPUTS[op] - 1
        )
    if layout:  # Y (seq, dirs, batch, n) -> (batch, seq, dirs, n); the states' first two axes swap
        inputs = [_batch_major(v, i) if i in (0, 5, 6) else v for i, v in enumerate(inputs)]
        want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    graph, feeds = aioge_graph(op, inputs, {**attrs, "layout": layout}, num_outputs=_OUTPUTS[op])
    got = evaluate(graph, feeds)
    # onnxruntime's Softplus is log(1 + exp(x)): past x = 88.7 it overflows to inf where the true
    # value (about x) is finite, and ours is; such a case compares nothing
    assume(not any(np.isinf(w).any() and (np.isinf(w) & np.isfinite(g) & (g > 88)).any() for w, g in zip(want, got)))
    for i, (w, g) in enumerate(zip(want, got)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, g.shape, w.shape)
        # float32 sums in another order, carried through the steps: with unbounded activations
        # (Affine, Relu) the states grow past 1 and the rounding with them, so the absolute
        # tolerance is 1e-4 of the largest output (an LSTM's 0.63915 against 0.63908 at 3.6)
        atol = 1e-5 + 1e-4 * float(np.abs(w).max(initial=1.0))
        np.testing.assert_allclose(
            g, w, rtol=1e-4, atol=atol, equal_nan=True, err_msg=f"{op} output {i} ({attrs}, layout {layout})"
        )


def _job() -> Any:
    """csrc/jobs.c's aioge_job(job, args, lo, hi): one call of a job over part of its range."""
    fn = native.lib().aioge_job  # type: ignore[union-attr]
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64], ctypes.c_int
    return fn


def _runner(how: str, delay_us: int) -> Any:
    """``split_native`` as the recurrence calls it, run ``how``: whole in one call; split by
    par.c (its helper may or may not come); the two parts in turn (the caller's first, its
    partner absent until it is done, or the partner's first); or the partner on a thread of
    its own started ``delay_us`` after the caller began (joining at whatever stage it finds)."""
    job, par = _job(), native.par_run()

    def run(par_run: Any, job_id: int, args: int, total: int, *, worth: bool = True) -> int:
        assert job_id == native.JOB_RNN
        if how in ("whole", "split") or total == 1:
            assert par(job_id, args, total, int(how == "split")) > 0
            return 1
        if how != "thread":
            for lo in (0, 1) if how == "caller_first" else (1, 0):
                assert job(job_id, args, lo, lo + 1) == 0
            return 2
        codes: list[int] = []

        def partner() -> None:
            time.sleep(delay_us / 1e6)
            codes.append(job(job_id, args, 1, 2))

        t = threading.Thread(target=partner)
        t.start()
        codes.append(job(job_id, args, 0, 1))
        t.join()
        assert codes == [0, 0]
        return 2

    return run


@pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")
@given(case=_cases(), layout=st.integers(0, 1))
@settings(max_examples=150, deadline=None)
def test_compiled_recurrence_matches_onnxruntime(case: Any, layout: int) -> None:
    op, inputs, attrs = case
    calls: list[int] = []
    real = krnn.split_native

    def counted(*args: Any, **kw: Any) -> int:
        calls.append(args[1])
        return int(real(*args, **kw))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(krnn, "split_native", counted)
        _check(op, inputs, attrs, layout)
    assert calls and set(calls) == {native.JOB_RNN}, "the kernel did not run the compiled recurrence"


@pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")
@given(
    case=_cases(),
    layout=st.integers(0, 1),
    team=st.booleans(),
    how=st.sampled_from(["split", "caller_first", "helper_first", "thread"]),
    delay_us=st.sampled_from([0, 20, 200, 1000]),
)
@settings(max_examples=120, deadline=None)
def test_the_job_whole_split_or_with_a_late_partner_matches_onnxruntime(
    case: Any, layout: int, team: bool, how: str, delay_us: int
) -> None:
    """JOB_RNN in either form (a direction per part, or both parts sharing each step by hidden
    units with claimed halves) run whole, split by par.c, or with the partner late, absent until
    the caller is done, or first: onnxruntime's results, and bit for bit the whole run's."""
    op, inputs, attrs = case
    if layout:
        inputs = [_batch_major(v, i) if i in (0, 5, 6) else v for i, v in enumerate(inputs)]
    kw = {**attrs, "layout": layout}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(krnn, "_TEAM_MACS", 0 if team else 1 << 62)
        mp.setattr(krnn, "_TEAM_R_BYTES", -1)
        mp.setattr(krnn, "split_native", _runner("whole", 0))
        whole = krnn.kernel(op).build(kw, {}, [], [None] * _OUTPUTS[op])(inputs, None)
        mp.setattr(krnn, "split_native", _runner(how, delay_us))
        got = krnn.kernel(op).build(kw, {}, [], [None] * _OUTPUTS[op])(inputs, None)
        for g, w in zip(got, whole):
            np.testing.assert_array_equal(g, w, err_msg=f"{op} {how} against whole ({attrs}, layout {layout})")
        _check(op, case[1], attrs, layout)


@given(case=_cases(), layout=st.integers(0, 1))
@settings(max_examples=60, deadline=None)
def test_without_the_tier_the_recurrence_runs_numpy(case: Any, layout: int) -> None:
    op, inputs, attrs = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "function", lambda *a, **k: None)
        assert krnn._native() is None
        _check(op, inputs, attrs, layout)


def test_sequence_lengths_out_of_range_are_refused(rng: np.random.Generator) -> None:
    x, w, r = rand(rng, 3, 2, 4), rand(rng, 1, 12, 4), rand(rng, 1, 12, 4)
    run = krnn.kernel("GRU").build({"hidden_size": 4}, {}, [], [None, None])
    with pytest.raises(ValueError, match=r"sequence_lens must hold 2 lengths in \[0, 3\]"):
        run([x, w, r, None, np.array([4, 1], np.int32)], None)


@pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")
def test_compiled_recurrence_packs_r_and_refuses_bad_geometry() -> None:
    floats, pack, _, shared = krnn._native()
    job, p = _job(), native.ptr
    good = [2, 4, 1, 2, 1, 0, 0, 0, 0, 8, 8, 2, 2, 2, 2, 1, 1, 2, 1, 1]  # LSTM seq 4 batch 1 hidden 2
    geo = np.array(good, np.int64)
    assert floats(p(geo)) == 128  # a panel of 16 units per gate (2 of them real) by 2 rows
    assert shared(p(geo)) == 16 + 4 * 16  # the rows (6 floats, to 16), the products (4 gates of 16)
    r = np.arange(16, dtype=np.float32).reshape(1, 8, 2)
    pk = native.aligned_empty((128,), np.float32)
    assert pack(p(geo), p(r), p(pk), 127) < 0  # too short
    assert pack(p(geo), p(r), p(pk), 128) == 0
    want = np.pad(r[0].reshape(4, 2, 2).transpose(0, 2, 1), ((0, 0), (0, 0), (0, 14)))  # gate g: its R^T, zeros past 2 units
    np.testing.assert_array_equal(pk.reshape(4, 2, 16), want)
    fp, xw, st_, hs = np.zeros(13, np.float32), np.zeros(32, np.float32), np.zeros(8, np.float32), np.zeros(80, np.float32)
    team = np.zeros(32, np.int64)

    def call(g: np.ndarray, lo: int = 0, hi: int = 1, **slots: Any) -> int:
        a = dict(geo=p(g), fp=p(fp), xw=p(xw), pk=p(pk), pk_floats=128, y=p(st_), h=p(st_), c=p(st_), hs=p(hs), hs_floats=80)
        a.update(slots)
        order = ["geo", "fp", "x", "w", "in", "rows", "sgemm", "wide", "xw", "pk", "pk_floats", "bias", "peep", "lens"]
        args = np.array([a.get(k, 0) or 0 for k in order + ["y", "h", "c", "hs", "hs_floats", "team"]], np.int64)
        return int(job(native.JOB_RNN, p(args), lo, hi))

    assert call(geo) == 0
    assert call(geo, 0, 2, team=p(team)) == 0  # the two parts in one call
    for slot, bad in ((0, 3), (1, -1), (3, -2), (4, 3), (14, 11), (9, -8)):
        g = geo.copy()
        g[slot] = bad
        assert floats(p(g)) < 0 and shared(p(g)) < 0 and pack(p(g), p(r), p(pk), 32) < 0 and call(g) < 0, (slot, bad)
    assert call(geo, lens=p(np.array([5], np.int64))) < 0  # a length past seq
    assert call(geo, 0, 2) < 0  # a direction it has not
    assert call(geo, 0, 3, team=p(team)) < 0 and call(geo, 1, 1, team=p(team)) < 0  # parts it has not
    assert call(geo, pk_floats=127) < 0  # a short packed R
    assert call(geo, hs=0) < 0 and call(geo, hs_floats=79) < 0  # no shared rows, too few
    assert call(geo, sgemm=1, x=0, w=0) < 0  # a projection without its operands
    geo[1] = 0  # seq 0: nothing to do, nothing read
    assert call(geo, xw=0, pk=0, pk_floats=0, y=0, h=0, c=0, hs=0) == 0


@pytest.mark.parametrize("compiled", [True, False])
def test_an_empty_batch_gives_empty_outputs(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    if not compiled:
        monkeypatch.setattr(native, "function", lambda *a, **k: None)
    elif not native.available():
        pytest.skip("the compiled tier is not built")
    ins = [np.zeros((3, 0, 4), np.float32), rand(rng, 2, 20, 4), rand(rng, 2, 20, 5)]
    got = krnn.kernel("LSTM").build({"direction": "bidirectional"}, {}, [], [None] * 3)(ins, None)
    assert [g.shape for g in got] == [(3, 2, 0, 5), (2, 0, 5), (2, 0, 5)]


@pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")
def test_one_kernel_called_again_with_other_shapes_and_from_threads_keeps_its_results(rng: np.random.Generator) -> None:
    """A kernel keeps a plan per input shape and a pool of scratch (xw, hs, team): calls that
    alternate shapes, with and without sequence lengths, and calls at once from threads (each
    then takes scratch of its own) give what a fresh kernel gives for each."""
    w, r = rand(rng, 2, 4 * 17, 5), rand(rng, 2, 4 * 17, 17) / 4
    attrs = {"hidden_size": 17, "direction": "bidirectional"}
    cases = [[rand(rng, s, b, 5), w, r] for s, b in ((60, 9), (3, 2), (60, 9), (1, 1))]
    cases.append([cases[0][0], w, r, None, np.array([60, 2, 0, 5, 59, 1, 30, 60, 4], np.int32)])
    run = krnn.kernel("LSTM").build(attrs, {}, [], [None] * 3)
    want = [krnn.kernel("LSTM").build(attrs, {}, [], [None] * 3)(c, None) for c in cases]
    for _ in range(2):
        for c, wt in zip(cases, want):
            for g, v in zip(run(c, None), wt):
                np.testing.assert_array_equal(g, v)
    for _ in range(4):
        got: dict[int, Any] = {}
        gate = threading.Barrier(12)

        def call(i: int) -> None:
            gate.wait()
            got[i] = run(cases[i % len(cases)], None)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(12):
            for g, v in zip(got[i], want[i % len(cases)]):
                np.testing.assert_array_equal(g, v)


@pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("seq", "batch", "layout"), [(40, 9, 0), (300, 1, 1), (300, 1, 0), (5, 60, 0)])
def test_a_long_sequence_whole_and_split_matches_onnxruntime(
    rng: np.random.Generator, op: str, direction: str, seq: int, batch: int, layout: int
) -> None:
    """Sequences of 300-360 rows (steps by batch; the hypothesis cases stop at 126), a wide batch
    of few steps, and batch 1 in either layout: onnxruntime's results, and the same bits whole and
    with the partner on its own thread."""
    dirs, n, g = 2 if direction == "bidirectional" else 1, 19, _GATES[op]
    inputs = [rand(rng, seq, batch, 6), rand(rng, dirs, g * n, 6), rand(rng, dirs, g * n, n) / 5, rand(rng, dirs, 2 * g * n)]
    attrs = {"hidden_size": n, "direction": direction}
    want = ort_run(op, inputs, attrs, _OUTPUTS[op])
    if layout:
        want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
        inputs = [_batch_major(v, i) if i in (0, 5, 6) else v for i, v in enumerate(inputs)]
    kw = {**attrs, "layout": layout}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(krnn, "_TEAM_MACS", 1 << 62)
        mp.setattr(krnn, "split_native", _runner("whole", 0))
        whole = krnn.kernel(op).build(kw, {}, [], [None] * _OUTPUTS[op])(inputs, None)
        mp.setattr(krnn, "split_native", _runner("thread", 50))
        got = krnn.kernel(op).build(kw, {}, [], [None] * _OUTPUTS[op])(inputs, None)
    for a, b, w in zip(got, whole, want):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(b, w, rtol=1e-4, atol=1e-5)
