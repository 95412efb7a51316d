"""Choosing an op's kernel: by timing its candidates on the real shapes, or by rule.

An op schema lists its implementations in order of preference; the first is the
*reference*. Each implementation may offer several parameter sets (``KernelImpl.candidates``).

- ``heuristic``: the first implementation that applies, with its first parameter set. No
  timing, so the choice is deterministic.
- ``tune``: every applicable (implementation, parameters) pair is built and run on inputs of
  the node's real shapes (its constant inputs as they are, random data for the others),
  checked against the reference's outputs, and timed within ``aioge.tune_budget_ms`` (an
  ``eager`` one, a compiled kernel, gets one run even past it, timed after an untimed one
  that packs its weight); every timed run follows an untimed run of the same candidate. A
  candidate that raises or disagrees with the reference is rejected; the fastest (by its
  best time: noise only adds) of the others wins — by more than ``TIE_MARGIN``: within it, the
  one earlier in the schema's order of preference does, so that noise between near-equal
  kernels does not flip the choice from one compile (and kernel cache entry) to the next.
  The choice keeps its best time, its runner-up and the margin between them.
- Every later decision about a choice is ``revisit``'s, from the choice's history (its
  ``TuningRecord``). A close call (a margin under ``RECHECK_MARGIN``) gets a second opinion
  ``RECHECKS`` times in the entry's life: at the end of the compile that tuned it, after the
  other ops' tuning, it is tuned again on a quarter of the budget (stage ``fresh``); on a
  kernel cache hit of an entry stored without one, it is re-timed against its runner-up
  (stage ``hit``, ``recheck``). The runner-up takes over when it is now faster by more than
  ``TIE_MARGIN``, and a choice whose own time has drifted past ``DRIFT`` times its tuned time
  (another host, another BLAS, a tune under load) is tuned again from scratch. Clear wins are
  not re-timed: a hit stays as cheap as a lookup. For a one-thread plan, ``revisit`` also
  swaps in a choice's native alternative (stage ``native``; ``compiler.graph.prefer_native``
  decides whether the plan's sum of them is worth it). A hit whose plan refuses them on their
  cost re-times its choices against them (``recheck``) ``NATIVE_RECHECKS`` times in an entry's
  life and writes the times back: a native time recorded under load is not trusted for ever.
  Candidates are timed as a run at batch 1 runs them: a kernel may split over the idle cores
  (``kernels.parallel.split_range``), so one that splits well is not ranked by its
  one-core time.

Runs in a worker thread: the caller never blocks the loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.kernels.contract import bind_kernel, no_compute
from aioge.kernels.parallel import cpu_tokens
from aioge.ops.schema import KernelImpl, OpSchema
from aioge.plan.kernel import KernelDesc, TuningRecord, candidates_of, same_params

__all__ = ["TIE_MARGIN", "Choice", "Recheck", "choose_heuristic", "close_call", "recheck", "revisit", "select_kernel", "tune"]

log = logging.getLogger(__name__)

MAX_SAMPLES = 9  # timed runs per candidate, budget permitting
CONFIRM_ROUNDS, CONFIRMED = 3, 3  # then this many more of the fastest this many (up to half the budget again)
# A later candidate must beat an earlier one's best time by this fraction to be chosen over
# it: a few percent is within the run-to-run noise of one kernel on a shared machine.
TIE_MARGIN = 0.05
# A choice that beat its runner-up by less than this is a close call: re-timed against it
# (RECHECK_ROUNDS rounds of each, interleaved) RECHECKS times in the entry's life. Only close
# calls under 1.10, once: a clear win is not overturned by noise, and re-timing on hits those
# under 1.25, three times (20 of resnet18's 23 tuned kernels), took its warm compile in the
# benchmark's start-up section from 0.26 to 0.71 s. A choice re-timed at more
# than DRIFT times its tuned time (and DRIFT_FLOOR_MS more) is tuned again.
RECHECK_MARGIN, RECHECKS, RECHECK_ROUNDS = 1.10, 1, 2
# mobilenet_v3_small kept off its native plan by a native time recorded under load, hit after hit
NATIVE_RECHECKS = 1
DRIFT, DRIFT_FLOOR_MS = 1.5, 0.01
# Timings are only comparable when nothing else competes for the cores: ops tune one at a
# time per process (as autotuners measure), while everything else about their compiles —
# cache lookups, heuristic picks, publishing — stays concurrent.
_MEASURE = threading.Lock()
_FLOATS = frozenset({"float16", "float32", "float64"})
# (rtol, atol relative to the reference's largest magnitude) per dtype
_TOLERANCE = {"float16": (1e-2, 1e-2), "float32": (1e-3, 1e-4), "float64": (1e-7, 1e-10)}


@dataclass(frozen=True, slots=True)
class Choice:
    """The chosen implementation and parameters, and what tuning saw (for logs and tests)."""

    impl: str
    params: Mapping[str, Any]
    tuned: bool
    timings_ms: Mapping[str, float] = field(default_factory=dict)  # candidate label -> best ms
    rejected: Mapping[str, str] = field(default_factory=dict)  # candidate label -> why
    runner_up: str | None = None  # the next best verified candidate's label
    margin: float = 0.0  # runner-up's best time / the chosen one's (0.0: no runner-up)
    best_ms: float = 0.0  # the chosen one's best time (0.0: not timed)
    alternative: tuple[str, Mapping[str, Any]] | None = None  # the runner-up's (impl, params)
    # The fastest verified candidate with a native form (KernelImpl.native) when the choice has
    # none: (impl, params, best ms); a plan of native kernels runs as one C call (compiler.graph).
    native_alt: tuple[str, Mapping[str, Any], float] | None = None


def choose_heuristic(schema: OpSchema, in_descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> Choice | None:
    """The rule: the first applicable implementation with its first parameter set (None when
    nothing applies)."""
    cands = candidates_of(schema, in_descs, attrs)
    if not cands:
        return None
    impl, params = cands[0]
    return Choice(impl.name, params, False)


def select_kernel(
    schema: OpSchema,
    in_descs: Sequence[TensorDesc | None],
    out_descs: Sequence[TensorDesc],
    attrs: Mapping[str, Any],
    const_values: Sequence[np.ndarray | None],
    *,
    mode: str,
    budget_ms: float,
    seed: int = 0,
) -> Choice | None:
    """The kernel for one node: ``tune`` or ``heuristic`` (see the module docstring). Falls
    back to the rule when there is one candidate, or inputs tuning cannot make up (a
    non-float input that is not a constant). Returns None when nothing applies."""
    cands = candidates_of(schema, in_descs, attrs)
    if not cands:
        return None
    if mode != "tune" or len(cands) == 1 or no_compute(out_descs):  # an empty output: nothing to time
        return Choice(cands[0][0].name, cands[0][1], False)
    inputs = make_inputs(in_descs, const_values, seed)
    if inputs is None or not all(d.static for d in out_descs):
        log.debug("%s: cannot make tuning inputs for %s; choosing by rule", schema.name, [str(d) for d in in_descs])
        return Choice(cands[0][0].name, cands[0][1], False)
    # Random data may leave an op's domain (a negative variance, a log of a negative): numpy's
    # warnings about it are noise here (errstate is per thread), NaNs compare equal in the check.
    with _measuring() as cost:
        return tune(schema, cands, in_descs, out_descs, attrs, inputs, budget_ms=budget_ms, cost=cost)


@contextlib.contextmanager
def _measuring() -> Iterator[Callable[[], float] | None]:
    # Ops are timed one at a time, so the other cores are as idle as a lone run's: a candidate
    # may split over them as it would at run time (unless other processes hold them: _idle_cores).
    # Yields the clock samples are timed by: None (wall time) while candidates may split, else
    # the process's CPU time: a candidate then runs whole, and the time other processes take
    # the core from it is no part of its cost (at load 8 on 2 cores the wall time of ResNet's
    # 64x56x56 -> 192 3x3 conv ran 28-400 ms against 9 of CPU, and chose im2col by chance).
    idle = _idle_cores()
    with _MEASURE, np.errstate(all="ignore"), cpu_tokens(threading.Semaphore(idle)):
        yield None if idle else time.process_time


def _idle_cores() -> int:
    """The cores a candidate may split over while it is timed: all but this one, or none while
    the machine is busy (a 1-minute load average of at least its cores). On a busy machine a
    compiled kernel's split backs off for a while after its helper lost a core (csrc/par.c)
    while a numpy one's Python helper still splits, so one candidate's samples flipped between
    split and whole: on 2 cores at load 6, ResNet-18's 64x56x56 3x3 conv timed 2.0 or 4.5 ms
    split against 2.8-3.0 whole, and numpy's im2col, taps or kn2row (1.2-1.7x the CPU time of
    the best compiled kernel) took 5-6 of its 20 dense convs. Timed whole, every candidate is ranked by its one-core time, which is what
    a busy machine gives it at run time too."""
    cores = os.cpu_count() or 1
    return 0 if _load_average() >= cores else max(0, cores - 1)


def _load_average() -> float:
    """The 1-minute load average (0.0 where the platform has none; tests set it)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def make_inputs(
    in_descs: Sequence[TensorDesc | None], const_values: Sequence[np.ndarray | None], seed: int
) -> list[np.ndarray | None] | None:
    """Read-only inputs of the real shapes: constants as they are, standard normal data for
    float inputs; None when some input can be neither."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray | None] = []
    for i, d in enumerate(in_descs):
        c = const_values[i] if i < len(const_values) else None
        if d is None:
            out.append(None)
        elif c is not None:
            if c.flags.writeable:  # a constant, as at run time: kernels may keep what they derive from it
                c = c.view()
                c.setflags(write=False)
            out.append(c)
        elif d.static and d.dtype in _FLOATS:
            a = rng.standard_normal(tuple(int(s) for s in d.shape)).astype(numpy_dtype(d.dtype))  # type: ignore[union-attr]
            a.setflags(write=False)  # a candidate that writes into its inputs is caught, not timed
            out.append(a)
        else:
            return None
    return out


def tune(
    schema: OpSchema,
    cands: Sequence[tuple[KernelImpl, dict[str, Any]]],
    in_descs: Sequence[TensorDesc | None],
    out_descs: Sequence[TensorDesc],
    attrs: Mapping[str, Any],
    inputs: Sequence[np.ndarray | None],
    *,
    budget_ms: float,
    clock: Callable[[], float] = time.perf_counter,
    cost: Callable[[], float] | None = None,
) -> Choice:
    """Time ``cands`` on ``inputs`` within ``budget_ms`` and return the fastest one that
    agrees with the reference (the schema's first implementation, or the first candidate
    when that one does not apply). ``clock`` bounds the budget and times the samples, unless
    ``cost`` is given to time them (``_measuring``'s)."""
    cost = cost or clock
    start = clock()
    deadline = start + budget_ms / 1e3
    reference = next(((impl, p) for impl, p in cands if impl is schema.impls[0]), cands[0])
    order = [reference, *[c for c in cands if c is not reference]]
    labels = [_label(impl, p) for impl, p in order]
    runs: dict[str, Callable[[], Sequence[np.ndarray]]] = {}
    samples: dict[str, list[float]] = {}
    rejected: dict[str, str] = {}
    expected: Sequence[np.ndarray] | None = None
    for (impl, params), label in zip(order, labels):
        if expected is not None and clock() > deadline and not impl.eager:
            rejected[label] = "not tried: tuning budget spent"
            continue
        try:
            run = _bind(impl, params, attrs, in_descs, out_descs, inputs)
            t0 = cost()
            got = run()
            elapsed = cost() - t0
        except Exception as exc:  # a candidate that cannot run this signature is rejected, never fatal
            if expected is None:
                raise
            rejected[label] = f"raised {type(exc).__name__}: {exc}"
            continue
        if expected is None:
            expected = [np.array(g, copy=True) for g in got]
        else:
            reason = _disagreement(got, expected)
            if reason:
                rejected[label] = reason
                log.warning("%s: candidate %s disagrees with the reference (%s); rejected", schema.name, label, reason)
                continue
        if impl.eager:  # a compiled kernel packs its weight on the first call: time a second one
            t0 = cost()
            run()
            elapsed = cost() - t0
        runs[label] = run
        samples[label] = [elapsed]
    while clock() < deadline and any(len(s) < MAX_SAMPLES for s in samples.values()):
        for label, run in runs.items():
            if len(samples[label]) < MAX_SAMPLES and clock() < deadline:
                # Right after an untimed call of the same kernel, as a run leaves the cores
                # between kernels: the C helper still spinning (csrc/par.c), the operands in
                # cache. Timed straight after the other candidates, a kernel that splits found
                # the helper asleep and paid its wake-up: MLP's 32x784x256 Gemm measured 132 us
                # split against 79 back to back, and lost to numpy's 116.
                samples[label].append(_after_one(run, cost))
    # A second opinion on the fastest few, interleaved again: a burst of load on the other core
    # (where a splitting kernel puts half its work) over all of one candidate's samples kept
    # a compiled conv at 74 us against its 30 (the builder CNN at batch 1, in the kernel cache).
    for label in sorted(samples, key=lambda k: min(samples[k]))[:CONFIRMED] * CONFIRM_ROUNDS if len(runs) > 1 else ():
        if clock() < deadline + budget_ms / 2e3:
            samples[label].append(_after_one(runs[label], cost))
    # Noise (other threads, other processes) only ever adds time: the fastest run is the best
    # estimate of a kernel's own cost. The first run also pays first-touch page faults.
    medians = {k: min(v[1:] if len(v) > 1 else v) * 1e3 for k, v in samples.items()}
    ranked = sorted(medians, key=lambda k: (medians[k], labels.index(k)))
    best = ranked[0]
    for k in sorted(medians, key=labels.index):  # the most preferred within the margin of the fastest
        if medians[k] <= medians[ranked[0]] * (1 + TIE_MARGIN):
            best = k
            break
    rest = [k for k in ranked if k != best]
    runner_up = rest[0] if rest else None
    margin = medians[runner_up] / medians[best] if runner_up is not None and medians[best] > 0 else 0.0
    impl, params = order[labels.index(best)]
    alternative = order[labels.index(runner_up)] if runner_up is not None else None
    log.debug(
        "%s tuned in %.1f ms: %s -> %s; rejected %s",
        schema.name,
        (clock() - start) * 1e3,
        {k: round(v, 4) for k, v in medians.items()},
        best,
        rejected,
    )
    alt = (alternative[0].name, alternative[1]) if alternative is not None else None
    native_alt = None
    natives = [k for k in medians if order[labels.index(k)][0].native]
    if natives and not impl.native:
        fastest = min(natives, key=lambda k: (medians[k], labels.index(k)))
        n_impl, n_params = order[labels.index(fastest)]
        native_alt = (n_impl.name, n_params, medians[fastest])
    return Choice(impl.name, params, len(medians) > 1, medians, rejected, runner_up, margin, medians[best], alt, native_alt)


@dataclass(frozen=True, slots=True)
class Recheck:
    """What re-timing a close call found: ``kept`` (the choice holds), ``switched`` (the
    runner-up is faster now), ``drifted`` (the choice's own time drifted: tune again) or
    ``skipped`` (the pair cannot be timed in this process: a tier missing, inputs it cannot
    make, a runner-up that no longer agrees), with the two best times in ms."""

    outcome: str
    chosen_ms: float = 0.0
    runner_ms: float = 0.0
    why: str = ""


def close_call(desc: KernelDesc) -> bool:
    """Whether a choice is a close call still due a second opinion (see the module docstring)."""
    h = desc.history
    return desc.tuned and bool(h.runner_up) and 0.0 < h.margin < RECHECK_MARGIN and h.checks < RECHECKS


def revisit(
    desc: KernelDesc,
    stage: Literal["hit", "fresh", "native"],
    *,
    retime: Callable[[], Recheck] | None = None,
    retune: Callable[[], KernelDesc] | None = None,
) -> tuple[KernelDesc, str]:
    """Decide a tuned choice again (the one place that does): the kernel to use and the outcome
    ('' when there was nothing to decide). ``hit``: a close call re-timed against its runner-up
    (``retime``): ``switched``, ``drifted`` (tuned again: ``retune``), ``kept`` or ``skipped``.
    ``fresh`` (the compile's second opinion): a close call tuned again (``retune``), one check.
    ``native``: the choice swapped for its native alternative when it has one."""
    h = desc.history
    if stage == "native":
        if not h.native_alt:
            return desc, ""
        margin = round(h.tuned_ms / h.native_ms, 4) if h.native_ms > 0 else 0.0
        record = TuningRecord(h.native_ms, desc.impl, dict(desc.params), margin, h.checks)
        return replace(desc, impl=h.native_alt, params=dict(h.native_alt_params), history=record), "native"
    if not close_call(desc):
        return desc, ""
    if retune is None or (stage == "hit" and retime is None):
        raise ValueError(f"revisit({stage!r}): a close call needs retune (and retime on a hit)")
    if stage == "fresh" or retime is None:
        new = retune()
        log.info("kernel %s tuned again: %s -> %s", desc.key, desc.impl, new.impl)
        return replace(new, history=replace(new.history, checks=h.checks + 1)), "retuned"
    found = retime()
    if found.outcome == "skipped":
        log.debug("kernel %s not re-timed: %s", desc.key, found.why)
        return desc, found.outcome
    what = f"{desc.impl} {found.chosen_ms:.4f} ms (tuned {h.tuned_ms:.4f}), runner-up {h.runner_up} {found.runner_ms:.4f}"
    log.info("kernel %s re-timed: %s: %s", desc.key, what, found.outcome)
    if found.outcome == "drifted":
        return retune(), found.outcome
    if found.outcome == "switched":
        margin = round(found.chosen_ms / found.runner_ms, 4) if found.runner_ms > 0 else 0.0
        record = replace(h, tuned_ms=round(found.runner_ms, 6), runner_up=desc.impl, runner_up_params=dict(desc.params))
        record = replace(record, margin=margin, checks=h.checks + 1)
        return replace(desc, impl=h.runner_up, params=dict(h.runner_up_params), history=record), found.outcome
    margin = found.runner_ms / found.chosen_ms if found.chosen_ms > 0 else h.margin
    record = replace(h, tuned_ms=round(min(h.tuned_ms, found.chosen_ms), 6), margin=round(margin, 4), checks=h.checks + 1)
    return replace(desc, history=record), found.outcome


def recheck(
    schema: OpSchema,
    in_descs: Sequence[TensorDesc | None],
    out_descs: Sequence[TensorDesc],
    attrs: Mapping[str, Any],
    const_values: Sequence[np.ndarray | None],
    chosen: tuple[str, Mapping[str, Any]],
    runner: tuple[str, Mapping[str, Any]],
    tuned_ms: float,
    *,
    budget_ms: float,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> Recheck:
    """Re-time a cached choice against its runner-up on the node's real shapes: each timed
    run after an untimed one of the same kernel, the two interleaved, ``RECHECK_ROUNDS``
    rounds (a quarter of ``budget_ms`` permitting, one at least). Best times decide, as in ``tune``."""
    offered = candidates_of(schema, in_descs, attrs)
    pair = []
    for name, params in (chosen, runner):
        found = next(((i, p) for i, p in offered if i.name == name and same_params(p, params)), None)
        if found is None:
            return Recheck("skipped", why=f"{name} is not offered in this process")
        pair.append(found)
    inputs = make_inputs(in_descs, const_values, seed)
    if inputs is None or not all(d.static for d in out_descs):
        return Recheck("skipped", why="no inputs to time it on")
    with _measuring() as cost:
        timer = cost if cost is not None and clock is time.perf_counter else clock  # a caller's own clock times all
        runs = [_bind(impl, params, attrs, in_descs, out_descs, inputs) for impl, params in pair]
        first = [np.array(g, copy=True) for g in runs[0]()]  # also packs an eager kernel's weight
        reason = _disagreement(runs[1](), first)
        if reason:
            return Recheck("skipped", why=f"the runner-up disagrees now ({reason})")
        samples: list[list[float]] = [[], []]
        deadline = clock() + budget_ms / 4e3
        for round_ in range(RECHECK_ROUNDS):
            if round_ and clock() > deadline:
                break
            for run, times in zip(runs, samples):
                times.append(_after_one(run, timer))
    chosen_ms, runner_ms = min(samples[0]) * 1e3, min(samples[1]) * 1e3
    if tuned_ms > 0 and chosen_ms > tuned_ms * DRIFT and chosen_ms - tuned_ms > DRIFT_FLOOR_MS:
        return Recheck("drifted", chosen_ms, runner_ms)
    if runner_ms * (1 + TIE_MARGIN) < chosen_ms:
        return Recheck("switched", chosen_ms, runner_ms)
    return Recheck("kept", chosen_ms, runner_ms)


def _after_one(run: Callable[[], object], clock: Callable[[], float]) -> float:
    """The time of one run of a kernel right after an untimed one (every timed sample's rule)."""
    run()
    t0 = clock()
    run()
    return clock() - t0


def _label(impl: KernelImpl, params: Mapping[str, Any]) -> str:
    if not params:
        return impl.name
    return impl.name + "(" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + ")"


def _bind(
    impl: KernelImpl,
    params: Mapping[str, Any],
    attrs: Mapping[str, Any],
    in_descs: Sequence[TensorDesc | None],
    out_descs: Sequence[TensorDesc],
    inputs: Sequence[np.ndarray | None],
) -> Callable[[], Sequence[np.ndarray]]:
    """The candidate bound as the executor binds it, with its own preallocated outputs."""
    fn = bind_kernel(impl, attrs, params, list(in_descs), list(out_descs))
    outs = [np.empty(tuple(int(s) for s in d.shape), numpy_dtype(d.dtype)) for d in out_descs]  # type: ignore[union-attr]
    args = list(inputs)
    return lambda: fn(args, outs)  # type: ignore[arg-type]


def _disagreement(got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> str:
    """Why ``got`` differs from the reference's outputs, or '' when it agrees."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, the reference has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {i} is {g.dtype}{list(g.shape)}, the reference's is {e.dtype}{list(e.shape)}"
        if e.dtype.name in _TOLERANCE:
            rtol, atol = _TOLERANCE[e.dtype.name]
            finite = e[np.isfinite(e)]
            scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
            if not np.allclose(g, e, rtol=rtol, atol=atol * scale, equal_nan=True):
                worst = float(np.nanmax(np.abs(g.astype(np.float64) - e.astype(np.float64)))) if g.size else 0.0
                return f"output {i} differs by up to {worst:.3g} (rtol {rtol}, atol {atol * scale:.3g})"
        elif not np.array_equal(g, e):
            return f"output {i} differs"
    return ""
