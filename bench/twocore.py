"""Where a small convnet's second core idles: per-job split gain, walls and per-thread CPU.

    python bench/twocore.py jobs mobilenet_v3_small      # each C job of the native program, whole vs split
    python bench/twocore.py walls mobilenet_v3_small     # wall medians back to back and 20 ms paused,
                                                         # per-thread CPU (named threads)

``walls`` with ``--ab split`` alternates, run by run in one process, the program's split flags
as built (A) and every job with a range of 2 or more marked worth splitting (B): what lower
split thresholds would buy, without a rebuild; ``--ab wake`` runs B without waking the C helper
ahead of each run (``kernels.parallel.WAKE``). Models are the bench cache's (``aioge bench``'s
torch-exported ones), feeds from the ``.npz`` beside each.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import aioge
from aioge.kernels import native, parallel
from aioge.runtime.native_program import NativeProgram

MODELS = Path(os.environ.get("AIOGE_BENCH_MODELS", "/root/.cache/aioge/bench-models/torch2.14.1-17338171bedf"))
JOBS = {v: k[4:].lower() for k, v in vars(native).items() if k.startswith("JOB_") and isinstance(v, int)}


def thread_cpu() -> dict[int, tuple[str, float]]:
    """Per thread of this process: (name, CPU seconds)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for t in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{t}/stat").read_text().rsplit(")", 1)[1].split()
            comm = Path(f"/proc/self/task/{t}/comm").read_text().strip()
        except FileNotFoundError:
            continue
        out[int(t)] = (names.get(int(t), comm), (int(stat[11]) + int(stat[12])) / tick)
    return out


def programs() -> list[NativeProgram]:
    return [o for o in gc.get_objects() if isinstance(o, NativeProgram)]


async def session_for(name: str, cache: str):  # type: ignore[no-untyped-def]
    path = MODELS / f"{name}.onnx"
    z = np.load(path.with_suffix(".npz"))
    feeds = {k[5:]: z[k] for k in z.files if k.startswith("feed:")}
    kc, gcd = Path(cache, "kc"), Path(cache, "gc")
    kc.mkdir(parents=True, exist_ok=True)
    gcd.mkdir(parents=True, exist_ok=True)
    s = aioge.Session({"ge.op_compiler_cache_dir": str(kc), "ge.graph_compiler_cache_dir": str(gcd)})
    await s.__aenter__()
    await s.add_graph(1, aioge.load_onnx(str(path)), {"ge.graph_key": name})
    for _ in range(20):
        await s.run_graph(1, feeds)
    return s, feeds


def median_us(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    """The median wall time of fn; with ``CLOCK=cpu`` the calling thread's CPU time instead
    (what a split leaves to the caller, less noisy on a busy machine)."""
    clock = time.thread_time if os.environ.get("CLOCK") == "cpu" else time.perf_counter
    ts = []
    for _ in range(n):
        t = clock()
        fn()
        ts.append(clock() - t)
    return statistics.median(ts) * 1e6


async def jobs(name: str, cache: str, n: int) -> None:
    s, _ = await session_for(name, cache)
    par = native.par_run()
    native.function("aioge_par_helpers")()  # the helper exists before the first split
    progs = programs()
    prog = progs[0]
    table, calls = prog._keep
    print(f"{name}: {len(calls)} jobs, load {os.getloadavg()[0]:.2f}")
    rows = []
    for i, c in enumerate(calls):
        whole = median_us(lambda c=c: par(c.job, c.addr, c.total, 0), n)
        split = median_us(lambda c=c: par(c.job, c.addr, c.total, 1), n) if c.total >= 2 else whole
        rows.append((i, JOBS.get(c.job, str(c.job)), c.total, bool(c.worth), whole, split))
    tw = sum(r[4] for r in rows)
    tb = sum(min(r[4], r[5]) for r in rows)
    ta = sum(r[5] if r[3] else r[4] for r in rows)
    print(f"  sum whole {tw:.0f} us, as built {ta:.0f} us, best of each {tb:.0f} us")
    by: dict[tuple[str, bool], list[float]] = {}
    for r in rows:
        v = by.setdefault((r[1], r[3]), [0, 0, 0])
        v[0] += 1
        v[1] += r[4]
        v[2] += r[5]
    for (job, worth), (count, w, sp) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"  {job:14s} worth={worth!s:5s} x{count:3d} whole {w:7.0f} us split {sp:7.0f} us")
    if os.environ.get("TOP"):
        for r in sorted(rows, key=lambda r: -r[4])[: int(os.environ["TOP"])]:
            print(f"    #{r[0]:3d} {r[1]:12s} total {r[2]:6d} worth {r[3]!s:5s} whole {r[4]:7.1f} split {r[5]:7.1f}")
    for r in rows:
        if not r[3] and r[5] < r[4] * 0.8:
            print(f"    #{r[0]:3d} {r[1]:12s} total {r[2]:6d} whole {r[4]:6.1f} split {r[5]:6.1f} (not worth)")
        if r[3] and r[5] > r[4]:
            print(f"    #{r[0]:3d} {r[1]:12s} total {r[2]:6d} whole {r[4]:6.1f} split {r[5]:6.1f} (worth, slower)")
    await s.__aexit__(None, None, None)


async def walls(name: str, cache: str, n: int, ab: str) -> None:
    s, feeds = await session_for(name, cache)
    progs = programs()
    built = [p._keep[0].reshape(-1, 4)[:, 3].copy() for p in progs]

    def setting(b: bool) -> None:
        if ab == "wake":  # B: no helper wake-up ahead of a run
            parallel.WAKE = not b
            return
        for p, w in zip(progs, built):
            t = p._keep[0].reshape(-1, 4)
            t[:, 3] = (t[:, 2] >= 2) if b else w

    sides = (False, True) if ab else (False,)
    print(f"{name}: {len(progs)} native program(s), load {os.getloadavg()[0]:.2f}")
    for pause in (0.0, 0.02):
        res: dict[bool, list[float]] = {b: [] for b in sides}
        for _ in range(n):
            for b in sides:
                setting(b)
                for _ in range(3):
                    if pause:
                        await asyncio.sleep(pause)
                    t = time.perf_counter()
                    await s.run_graph(1, feeds)
                    res[b].append(time.perf_counter() - t)
        for b in sides:
            w = sorted(res[b])
            label = ("no-wake" if ab == "wake" else "split-all") if b else "as built"
            print(
                f"  pause {pause * 1e3:2.0f} ms {label:9s}: median {statistics.median(w) * 1e3:6.2f} ms, p10 {w[len(w) // 10] * 1e3:6.2f}"
            )
    setting(False)
    c0, t0 = thread_cpu(), time.perf_counter()
    for _ in range(100):
        await s.run_graph(1, feeds)
    wall, c1 = (time.perf_counter() - t0) * 10, thread_cpu()
    print(f"  100 runs back to back: {wall:.2f} ms/run; CPU ms/run per thread:")
    for t, (nm, c) in c1.items():
        d = (c - c0.get(t, (nm, 0.0))[1]) * 10
        if d > 0.05:
            print(f"    {nm:24s} {d:6.2f}")
    stats = np.zeros(5, np.int64)
    native.function("aioge_par_stats")(native.ptr(stats))
    print(
        f"  par stats (run, lost, whole in back-off, helper chunks, helper sleeps): {stats.tolist()}; load {os.getloadavg()[0]:.2f}"
    )
    await s.__aexit__(None, None, None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["jobs", "walls"])
    ap.add_argument("models")
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument(
        "--ab", choices=["split", "wake"], help="B, alternated run by run with A (as built): every job split, or no helper wake"
    )
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "aioge-twocore"))
    ap.add_argument(
        "--native",
        choices=["tuned", "always", "never"],
        default="tuned",
        help="native programs: as the compiler decides, or forced",
    )
    a = ap.parse_args()
    if a.native != "tuned":  # the compiler's budget for native kernels dearer than the tuned ones
        import aioge.compiler.graph

        aioge.compiler.graph.NATIVE_SLACK_MS = float("inf") if a.native == "always" else float("-inf")
        a.cache += "-" + a.native
    for m in a.models.split(","):
        if a.what == "jobs":
            asyncio.run(jobs(m, a.cache, a.n))
        else:
            asyncio.run(walls(m, a.cache, a.n, a.ab))


if __name__ == "__main__":
    main()
