"""Where the event loop's lag comes from during the bench's concurrency section.

    python bench/lag_probe.py [--preload] [--workload cnn] [--conc 64] [--reps 20]

``--preload`` compiles and runs the 12 real-weights models first (each in its own session,
closed, as ``aioge bench`` does), then the workload's session runs ``measure.concurrency`` at
``--conc`` in flight ``--reps`` times. Meanwhile every loop callback is timed (wall and the
loop thread's CPU); collections are timed with their generation; each lag tick records the
loop thread's CPU and involuntary context switches, to tell work on the loop from the thread
waiting (for the GIL or a core).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import statistics
import sys
import threading
import time
from typing import Any

import anyio

import aioge
from aioge.benchmarks import measure
from aioge.benchmarks.workloads import REAL, load_workloads

SLOW_S = 0.001
slow: list[tuple[float, float, str]] = []  # (wall, thread cpu, callback repr)
iters: list[tuple[float, float, int, int]] = []  # loop iterations in a window: (wall, cpu, handles, programs the loop ran)
WINDOW = [False]
QUEUES: list[Any] = []
gcs: list[tuple[int, float, int]] = []  # (generation, seconds, collected)
_gc_t = [0.0]


def _what(cb: Any) -> str:
    task = getattr(cb, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        frames = []
        while coro is not None:
            frames.append(getattr(coro, "__qualname__", type(coro).__name__))
            coro = getattr(coro, "cr_await", None)
        return "task " + " > ".join(frames)
    return repr(cb)[:160]


takes: list[tuple[float, float]] = []  # programs the loop's thread ran (ProgramQueue._take): cpu, wall


def _timed_take(take: Any) -> Any:
    def timed(h: Any) -> Any:
        w, c = time.perf_counter(), time.thread_time()
        r = take(h)
        IN_C[0] += time.perf_counter() - w
        if r and WINDOW[0]:
            takes.append((time.thread_time() - c, time.perf_counter() - w))
        return r

    return timed


def _threads() -> dict[int, tuple[str, int, int]]:
    """This process's threads: tid -> (name, cpu ns, run-queue wait ns)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu, wait, _ = (int(x) for x in f.read().split())
        except OSError:
            continue
        out[int(tid)] = (name, cpu, wait)
    return out


per_thread: dict[str, list[int]] = {}
IN_C = [0.0]  # wall the loop's thread spent in programs it ran itself (inline or taken), summed


def _patch_runs() -> None:
    from aioge.runtime.native_program import NativeProgram

    run = NativeProgram.run

    def timed(self: Any, feeds: Any, split: bool) -> Any:
        t = time.perf_counter()
        try:
            return run(self, feeds, split)
        finally:
            IN_C[0] += time.perf_counter() - t

    NativeProgram.run = timed  # type: ignore[method-assign]


def _patch_handles() -> None:
    run = asyncio.events.Handle._run

    def timed(self: Any) -> None:
        w, c = time.perf_counter(), time.thread_time()
        run(self)
        dw = time.perf_counter() - w
        dc = time.thread_time() - c
        if dc > SLOW_S and WINDOW[0]:
            slow.append((dc, dw, _what(self._callback)))

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    once = asyncio.base_events.BaseEventLoop._run_once

    def timed_once(self: Any) -> None:
        if not WINDOW[0]:
            return once(self)
        n = len(self._ready)
        taken = sum(q.taken for q in QUEUES)
        w, c = time.perf_counter(), time.thread_time()
        once(self)
        dw = time.perf_counter() - w
        iters.append((dw, time.thread_time() - c, n, sum(q.taken for q in QUEUES) - taken))

    asyncio.base_events.BaseEventLoop._run_once = timed_once  # type: ignore[method-assign]


def _gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_t[0] = time.perf_counter()
    else:
        if WINDOW[0]:
            gcs.append((info["generation"], time.perf_counter() - _gc_t[0], info["collected"]))


class Monitor(measure.LagMonitor):
    """measure.LagMonitor's ticks, each with the loop thread's CPU and involuntary switches."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[tuple[float, float, int, float, float]] = []  # lag, loop cpu, invol. switches, run-queue wait, in C

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        WINDOW[0] = True
        try:
            await self._ticks()
        finally:
            WINDOW[0] = False

    async def _ticks(self) -> None:
        fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        try:
            while True:
                await self._tick(fd)
        finally:
            os.close(fd)

    async def _tick(self, fd: int) -> None:
        if True:
            q, inc = int(os.pread(fd, 100, 0).split()[1]), IN_C[0]
            t, c = time.perf_counter(), time.thread_time()
            n = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
            await anyio.sleep(self.tick)
            lag = max(0.0, time.perf_counter() - t - self.tick)
            self.lags.append(lag)
            self.runq.append((int(os.pread(fd, 100, 0).split()[1]) - q) / 1e9)
            n = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw - n
            self.ticks.append((lag, time.thread_time() - c, n, (int(os.pread(fd, 100, 0).split()[1]) - q) / 1e9, IN_C[0] - inc))


async def main(args: argparse.Namespace) -> None:
    if args.preload:
        for i, name in enumerate(REAL):
            (w,) = load_workloads([name])
            async with aioge.Session({"ge.op_compiler_cache_dir": "/tmp/lagprobe-kernels"}) as s:
                await s.add_graph(i + 100, w.graph)
                await s.build_graph(i + 100)
                for _ in range(3):
                    await s.run_graph(i + 100, w.feeds)
            del w
            gc.collect()
            print(f"loaded {name}: {len(gc.get_objects())} objects tracked", file=sys.stderr, flush=True)
    (w,) = load_workloads([args.workload])
    gc.collect()
    print(f"gc counts {gc.get_count()} thresholds {gc.get_threshold()} tracked {len(gc.get_objects())}", file=sys.stderr)
    async with aioge.Session({"ge.op_compiler_cache_dir": "/tmp/lagprobe-kernels", **w.options}) as s:
        await s.add_graph(1, w.graph)
        await s.build_graph(1)
        await measure.latency(w, s, 1, rounds=2, runs=20, reference=False)
        measure.LagMonitor = Monitor  # type: ignore[misc]
        from aioge.runtime import program_queue

        QUEUES.extend(o for o in gc.get_objects() if isinstance(o, program_queue.ProgramQueue))
        for q in QUEUES:
            q._take = _timed_take(q._take)
        _patch_handles()
        _patch_runs()
        gc.callbacks.append(_gc)
        maxes = []
        all_ticks = []
        for rep in range(args.reps):
            mon: list[Monitor] = []
            orig = Monitor.__init__

            def init(self: Monitor, orig: Any = orig) -> None:
                orig(self)
                mon.append(self)

            Monitor.__init__ = init  # type: ignore[method-assign]
            n_slow, n_gc = len(slow), len(gcs)
            before = _threads()
            with measure.RssSampler() if args.rss else contextlib.nullcontext():
                r = await measure.concurrency(w, s, 1, args.conc, rounds=3)
            for tid, (name, cpu, wait) in _threads().items():
                b = before.get(tid, (name, 0, 0))
                acc = per_thread.setdefault(f"{name}/{tid}", [0, 0])
                acc[0] += cpu - b[1]
                acc[1] += wait - b[2]
            Monitor.__init__ = orig  # type: ignore[method-assign]
            ticks = mon[0].ticks
            all_ticks += ticks
            maxes.append(r["lag_max_ms"])
            worst = max(ticks)[:3]
            print(
                f"rep {rep}: lag max {r['lag_max_ms']:.2f} ms p99 {r['lag_p99_ms']:.2f} (worst tick: cpu {worst[1] * 1e3:.2f} ms,"
                f" {worst[2]} invol. switches); gc max {r['gc_max_ms']:.2f}; ratio {r['ratio']:.2f};"
                f" slow callbacks {len(slow) - n_slow}; gcs {[(g, round(d * 1e3, 2)) for g, d, _ in gcs[n_gc:] if g == 2 or d > 1e-3]}",
                file=sys.stderr,
                flush=True,
            )
        gc.callbacks.remove(_gc)
    lags = sorted(x[0] * 1e3 for x in all_ticks)
    print(f"lag max per rep: median {statistics.median(maxes):.2f} max {max(maxes):.2f} ms; {sorted(round(m, 1) for m in maxes)}")
    print(f"ticks {len(lags)}: p50 {lags[len(lags) // 2]:.2f} p99 {lags[int(0.99 * len(lags))]:.2f} max {lags[-1]:.2f} ms")
    print(
        f"gc by generation: {[sum(1 for g, _, _ in gcs if g == k) for k in range(3)]}, max {max((d for _, d, _ in gcs), default=0) * 1e3:.2f} ms"
    )
    big = sorted(all_ticks, reverse=True)[:8]
    print("worst ticks (lag ms, loop cpu ms, invol switches, run-queue wait ms, rest ms, in programs the loop ran ms):")
    for a, b, c, d, e in big:
        print(
            "  ",
            (round(a * 1e3, 2), round(b * 1e3, 2), c, round(d * 1e3, 2), round((a + 0.001 - b - d) * 1e3, 2), round(e * 1e3, 2)),
        )
    rest = sorted(t[0] + 0.001 - t[1] - t[3] for t in all_ticks)
    print(
        f"blocked (not running, not runnable) beyond the tick: p99 {rest[int(0.99 * len(rest))] * 1e3:.2f} max {rest[-1] * 1e3:.2f} ms;"
        f" ticks over 2 ms: {sum(r > 0.002 for r in rest)}, over 5 ms: {sum(r > 0.005 for r in rest)}"
    )
    own = sorted(t[0] - t[3] for t in all_ticks)
    print(f"lag less run-queue wait: p99 {own[int(0.99 * len(own))] * 1e3:.2f} max {own[-1] * 1e3:.2f} ms")
    it = sorted(iters, key=lambda x: x[1], reverse=True)
    print(f"iterations {len(iters)}; by loop cpu, worst 10 (wall ms, cpu ms, handles, programs run on the loop):")
    print("  ", [(round(a * 1e3, 2), round(b * 1e3, 2), c, d) for a, b, c, d in it[:10]])
    print("  cpu p50/p99 ms", round(it[len(it) // 2][1] * 1e3, 3), round(it[len(it) // 100][1] * 1e3, 3))
    if takes:
        tc = sorted(x[0] for x in takes)
        print(f"programs run by the loop's thread: {len(tc)}, cpu p50 {tc[len(tc) // 2] * 1e3:.3f} max {tc[-1] * 1e3:.3f} ms")
    kinds: dict[str, list[float]] = {}
    for dc, _, what in slow:
        kinds.setdefault(what.split(" > ")[-1] if what.startswith("task") else what[:60], []).append(dc)
    print("callbacks over the bound by where they stopped: count, max cpu ms")
    for k, v in sorted(kinds.items(), key=lambda kv: -max(kv[1])):
        print(f"  {len(v):5d} {max(v) * 1e3:7.2f}  {k}")
    print("threads over the reps (cpu ms, run-queue wait ms), the section and its ort rounds alike:")
    for k, (c, q) in sorted(per_thread.items(), key=lambda kv: -kv[1][0])[:8]:
        print(f"  {k:30s} {c / 1e6:9.1f} {q / 1e6:9.1f}")
    print(f"callbacks over {SLOW_S * 1e3} ms of loop-thread CPU: {len(slow)}")
    for dc, dw, what in sorted(slow, reverse=True)[:25]:
        print(f"  {dw * 1e3:7.2f} ms wall {dc * 1e3:7.2f} ms cpu  {what}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--preload", action="store_true")
    p.add_argument("--workload", default="cnn")
    p.add_argument("--conc", type=int, default=64)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rss", action="store_true", help="measure.RssSampler running meanwhile, as in the bench")
    asyncio.run(main(p.parse_args()))
