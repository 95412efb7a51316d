"""Measurements: latency medians beside the yardsticks, concurrent throughput with event-loop
lag, peak RSS, and fresh-process compile and start-up times.

aioge runs on the benchmark's event loop; the yardsticks (onnxruntime, ``onnx.reference``,
numpy by hand) are synchronous and run in a worker thread while the loop idles, so a timing
of one never includes the other. Samples of the two sides alternate round by round, so load
from other processes on a shared machine hits both alike; every figure is a median. Each
side's round starts ``SETTLE_S`` after the other's ended (onnxruntime's pool threads spin on
for 20-40 ms, OpenBLAS's for the numpy side longer), then runs untimed for ``WARM_S``; a
concurrent round starts after a full garbage collection too (``settle``), as pyperf's do.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

import anyio
import numpy as np

from aioge.benchmarks.workloads import Workload

__all__ = [
    "LagMonitor",
    "SETTLE_S",
    "settle",
    "WARM_S",
    "RssSampler",
    "concurrency",
    "fresh_process",
    "geomean",
    "latency",
    "median_of_runs",
    "median_of_runs_async",
    "ort_session",
    "percentile",
    "steal_seconds",
]


# Between one side's round and the other's: aioge's five runs right after onnxruntime's round
# took SqueezeNet (light/, DuplicateFilterPass off) 8.0 ms against 5.8 with a pause between.
SETTLE_S = 0.1
# Untimed calls before a side's timed ones: after the pause, the first runs of a small model
# pay for idle threads and cores coming back (the builder transformer's five runs right after a
# 0.1 s pause: 1.23 ms against 0.84 without it; after 0.02 s of warm-up 1.16, after 0.1 s 0.84-0.88).
WARM_S = 0.1


async def settle() -> None:
    """Before a side's round of a concurrent measurement: collect the garbage earlier work left
    (the full bench holds every workload's graph, 160K objects, and a full collection of them,
    due at any time, stalled a round's event loop 39 ms), then ``SETTLE_S`` of quiet."""
    gc.collect()
    await anyio.sleep(SETTLE_S)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def steal_seconds() -> float:
    """CPU time the hypervisor gave to others, summed over this VM's CPUs (Linux /proc/stat;
    0 elsewhere). A lag that comes with steal is the host's, not the event loop's."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def ort_session(model: Any, threads: int | None = None) -> Any:
    """An onnxruntime CPU session: default options, or ``intra_op_num_threads=threads``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only: light/ models carry unused initializers it warns about
    if threads:
        opts.intra_op_num_threads = threads
    blob = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])


def median_of_runs(fn: Callable[[], Any], runs: int) -> float:
    """Median of ``runs`` timed calls, after untimed ones for ``WARM_S`` (one at least)."""
    end = time.perf_counter() + WARM_S
    fn()
    while time.perf_counter() < end:
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


async def median_of_runs_async(fn: Callable[[], Awaitable[Any]], runs: int) -> float:
    end = time.perf_counter() + WARM_S
    await fn()
    while time.perf_counter() < end:
        await fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class RssSampler:
    """Peak resident set size of this process, sampled every ``interval`` s by a thread
    (``ru_maxrss`` is the whole process's lifetime peak, useless per workload)."""

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.peak = self.start = self.current()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="aioge-bench-rss", daemon=True)

    @staticmethod
    def current() -> int:
        try:
            with open("/proc/self/statm", "rb") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:  # not Linux: the lifetime peak is the best there is
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.current())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


def _runq_ns(fd: int) -> int:
    """Run-queue wait so far (ns: runnable, off every CPU) of the thread whose schedstat is ``fd``."""
    try:
        return int(os.pread(fd, 100, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class LagMonitor:
    """Event-loop lag: a task sleeps ``tick`` s over and over and records each oversleep.
    Garbage-collector pauses meanwhile are recorded too (``gc_pauses``), to tell a lag the
    collector caused (the whole process's heap) from one the runtime did; and each tick's wait
    for a CPU (``runq``, Linux schedstat, else 0), to tell the machine's share (other processes
    or threads on the CPUs) from the loop's own (its callbacks' work, GIL waits). On a loaded
    2-vCPU VM the cnn's 64-caller bursts lagged 9-69 ms at worst, the loop's own share <= 7 ms."""

    def __init__(self, tick: float = 0.001) -> None:
        self.tick = tick
        self.lags: list[float] = []
        self.runq: list[float] = []
        self.gc_pauses: list[float] = []
        self._gc_start = 0.0

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_pauses.append(time.perf_counter() - self._gc_start)

    def worst(self) -> tuple[float, float, float]:
        """Seconds: the longest lag, its run-queue wait, and the longest lag less its wait."""
        i = max(range(len(self.lags)), key=self.lags.__getitem__, default=None)
        own = max((x - q for x, q in zip(self.lags, self.runq)), default=0.0)
        return (0.0, 0.0, 0.0) if i is None else (self.lags[i], self.runq[i], max(0.0, own))

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:  # not Linux: no run-queue waits (0)
            fd = -1
        gc.callbacks.append(self._gc)
        try:
            task_status.started()
            while True:
                q, t = _runq_ns(fd), time.perf_counter()
                await anyio.sleep(self.tick)
                self.lags.append(max(0.0, time.perf_counter() - t - self.tick))
                self.runq.append((_runq_ns(fd) - q) * 1e-9)
        finally:
            gc.callbacks.remove(self._gc)
            if fd >= 0:
                os.close(fd)


async def latency(w: Workload, session: Any, gid: int, *, rounds: int, runs: int, reference: bool) -> dict[str, Any]:
    """Median latency of aioge and each yardstick (seconds) for one workload, and the check error."""
    import onnxruntime  # noqa: F401  (fail here, not inside a worker thread, if it is missing)

    cores = os.cpu_count() or 1
    out = await session.run_graph(gid, w.feeds)
    err = w.check(out)
    ort_default = ort_session(w.onnx_model)
    ort_cores = ort_session(w.onnx_model, threads=cores)
    names = [o.name for o in ort_default.get_outputs()]
    got = dict(zip(names, await anyio.to_thread.run_sync(ort_default.run, None, w.feeds)))
    ort_err = w.check(got)
    sides: dict[str, Callable[[], Any]] = {
        "ort": lambda: ort_default.run(None, w.feeds),
        "ort_cores": lambda: ort_cores.run(None, w.feeds),
    }
    if w.numpy_fn is not None:
        by_hand = w.numpy_fn
        sides["numpy"] = lambda: by_hand(w.feeds)
    samples: dict[str, list[float]] = {"aioge": [], **{k: [] for k in sides}}
    for _ in range(rounds):
        await anyio.sleep(SETTLE_S)
        samples["aioge"].append(await median_of_runs_async(lambda: session.run_graph(gid, w.feeds), runs))
        for k, side in sides.items():
            await anyio.sleep(SETTLE_S)
            samples[k].append(await anyio.to_thread.run_sync(median_of_runs, side, runs))
    result: dict[str, Any] = {k: statistics.median(v) for k, v in samples.items()}
    if reference:
        from onnx.reference import ReferenceEvaluator

        ref_runs = 1 if w.group == "light" else 3
        try:  # the yardstick's own failure is reported beside the row, never a failed suite
            ev = ReferenceEvaluator(w.onnx_model)
            result["onnx_reference"] = await anyio.to_thread.run_sync(
                lambda: statistics.median(_timed(lambda: ev.run(None, w.feeds)) for _ in range(ref_runs))
            )
        except Exception as exc:  # noqa: BLE001 - onnx.reference raises whatever its op code raises
            result["onnx_reference_error"] = f"{type(exc).__name__}: {exc}"[:300]
    result["max_abs_err"] = err
    result["ort_max_abs_err"] = ort_err
    return result


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# A side's round of a concurrency measurement: bursts of the concurrent calls back to back for
# at least this long. One burst of 64 small-model runs lasts 8-25 ms, and single bursts of the
# same process ranged from 2.7K to 8.1K runs/s (the builder MLP): the round was the noise.
ROUND_S = 0.25


async def _aioge_burst(session: Any, gid: int, feeds: dict[str, np.ndarray], conc: int) -> float:
    t = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(conc):
            tg.start_soon(session.run_graph, gid, feeds)
    return time.perf_counter() - t


async def _aioge_round(session: Any, gid: int, feeds: dict[str, np.ndarray], conc: int) -> float:
    """Runs a second over bursts of ``conc`` calls lasting ``ROUND_S`` in all."""
    runs, spent = 0, 0.0
    while spent < ROUND_S:
        spent += await _aioge_burst(session, gid, feeds, conc)
        runs += conc
    return runs / spent


def _ort_burst(sess: Any, feeds: dict[str, np.ndarray], pool: ThreadPoolExecutor, conc: int) -> float:
    t = time.perf_counter()
    for f in [pool.submit(sess.run, None, feeds) for _ in range(conc)]:
        f.result()
    return time.perf_counter() - t


def _ort_round(sess: Any, feeds: dict[str, np.ndarray], pool: ThreadPoolExecutor, conc: int) -> float:
    runs, spent = 0, 0.0
    while spent < ROUND_S:
        spent += _ort_burst(sess, feeds, pool, conc)
        runs += conc
    return runs / spent


async def concurrency(w: Workload, session: Any, gid: int, conc: int, *, rounds: int) -> dict[str, Any]:
    """Throughput (runs/s) of ``conc`` concurrent ``run_graph`` calls from this event loop, beside
    onnxruntime driven from a ``ThreadPoolExecutor`` of ``conc`` threads (each side's round:
    bursts back to back for ``ROUND_S``; the median round); the loop's lag meanwhile."""
    sess = ort_session(w.onnx_model)
    monitor = LagMonitor()
    a_rates: list[float] = []
    o_rates: list[float] = []
    steal = 0.0
    with ThreadPoolExecutor(conc) as pool:
        await anyio.to_thread.run_sync(_ort_burst, sess, w.feeds, pool, conc)  # warm both
        await _aioge_burst(session, gid, w.feeds, conc)
        for _ in range(rounds):  # each side SETTLE_S after the other's round, as in latency()
            await settle()
            async with anyio.create_task_group() as tg:
                await tg.start(monitor.run)
                before = steal_seconds()
                a_rates.append(await _aioge_round(session, gid, w.feeds, conc))
                steal += steal_seconds() - before
                tg.cancel_scope.cancel()
            await settle()
            o_rates.append(await anyio.to_thread.run_sync(_ort_round, sess, w.feeds, pool, conc))
    aioge_rps = statistics.median(a_rates)
    ort_rps = statistics.median(o_rates)
    _, runq, own = monitor.worst()
    return {
        "concurrency": conc,
        "aioge_runs_per_s": aioge_rps,
        "ort_runs_per_s": ort_rps,
        "ratio": aioge_rps / ort_rps,
        "lag_max_ms": max(monitor.lags, default=0.0) * 1e3,
        "lag_p99_ms": percentile(monitor.lags, 0.99) * 1e3,
        "lag_samples": len(monitor.lags),
        "lag_runq_ms": runq * 1e3,  # of the longest lag, the loop's thread waiting for a CPU
        "lag_own_max_ms": own * 1e3,  # the longest lag less its wait
        "gc_max_ms": max(monitor.gc_pauses, default=0.0) * 1e3,
        "steal_ms": steal * 1e3,
    }


def fresh_process(mode: str, spec: dict[str, Any], *, env: dict[str, str] | None = None, timeout: float = 900) -> dict[str, Any]:
    """Run ``benchmarks/child.py MODE SPEC`` in a new interpreter; its JSON result."""
    from aioge.benchmarks import child

    # By path: aioge is not imported before the child times its import. -P: neither the
    # child's directory nor the current one first on sys.path (a stray msgpack.py there would
    # be imported).
    proc = subprocess.run(
        [sys.executable, "-P", child.__file__, mode, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child {mode} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
