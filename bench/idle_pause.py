"""Per-run figures of a lone caller's runs, back to back or after an idle pause (issue 42's
quiet-solo state), for source trees A/B in alternating fresh processes:

    python bench/idle_pause.py --trees /work/wt/integ /work/wt/mnv3 --pauses 0 30 --rounds 3 -n 60
    python bench/idle_pause.py --envs AIOGE_WAKE_SPIN_US=1500 AIOGE_WAKE_SPIN_US=0   # sides by environment

Each process loads the real-weights model (``--model``) into a Session, warms up 0.5 s, then
times ``-n`` runs, each after ``pause`` ms of ``time.sleep`` (as the states child does). Per run:
wall, process CPU, the lane thread's CPU inside ``NativeProgram.run`` (``prog_cpu``), the loop
thread's CPU, the par.c helpers' CPU and voluntary context switches (``/proc``: each a sleep),
minor page faults, and ``aioge_par_stats`` deltas (splits; helper chunks and sleeps where the
tree counts them). Prints the medians (and the best wall) per (tree, env, pause), one JSON line each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def _helpers() -> tuple[float, int]:
    cpu, sleeps = 0.0, 0
    for t in os.listdir("/proc/self/task"):
        try:
            if open(f"/proc/self/task/{t}/comm").read().strip() != "aioge-par":
                continue
            cpu += int(open(f"/proc/self/task/{t}/schedstat").read().split()[0]) / 1e6
            sleeps += int(open(f"/proc/self/task/{t}/status").read().split("\nvoluntary_ctxt_switches:")[1].split()[0])
        except (OSError, IndexError):
            pass
    return cpu, sleeps


def child(model: str, pause_s: float, n: int, cache: str) -> dict[str, float]:
    import anyio
    import numpy as np

    import aioge
    from aioge.benchmarks.child import _feeds
    from aioge.benchmarks.real_models import real_model_path
    from aioge.kernels import native
    from aioge.runtime import native_program

    path = str(real_model_path(model))
    feeds, stats, prog = _feeds(path), native.function("aioge_par_stats"), [0.0]
    original = native_program.NativeProgram.run

    def timed(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        c = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            prog[0] = time.thread_time() - c

    native_program.NativeProgram.run = timed  # type: ignore[method-assign]

    def par() -> list[int]:
        out = np.zeros(5, np.int64)  # a tree with 3 counters leaves the last two 0
        stats(native.ptr(out))
        return out.tolist()

    async def go() -> list[dict[str, float]]:
        rows = []
        async with aioge.Session({"ge.graph_compiler_cache_dir": cache}) as s:
            await s.add_graph(1, aioge.load_onnx(path), {"ge.graph_key": model})
            end = time.perf_counter() + 0.5
            while time.perf_counter() < end:
                await s.run_graph(1, feeds)
            for _ in range(n):
                if pause_s:
                    time.sleep(pause_s)
                h0, p0, f0 = _helpers(), par(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                c0, m0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                await s.run_graph(1, feeds)
                wall, cpu, main = time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - m0
                h1, p1, f1 = _helpers(), par(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                rows.append(
                    {
                        "wall_ms": wall * 1e3,
                        "cpu_ms": cpu * 1e3,
                        "loop_ms": main * 1e3,
                        "prog_cpu_ms": prog[0] * 1e3,
                        "helper_cpu_ms": h1[0] - h0[0],
                        "helper_sleeps": h1[1] - h0[1],
                        "minflt": f1 - f0,
                        "splits": p1[0] - p0[0],
                        "helper_chunks": p1[3] - p0[3],
                    }
                )
        return rows

    rows = anyio.run(go)
    best = min(r["wall_ms"] for r in rows)
    return {**{k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}, "best_wall_ms": round(best, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", nargs="+", default=[os.getcwd()])
    ap.add_argument("--pauses", nargs="+", type=float, default=[0.0, 30.0], help="ms")
    ap.add_argument("--model", default="mobilenet_v3_small")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-n", type=int, default=60)
    ap.add_argument("--envs", nargs="+", default=[""], help="sides set by the environment: NAME=VALUE[,NAME=VALUE]")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # pause_s n cache
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.model, float(args.child[0]), int(args.child[1]), args.child[2])))
        return
    caches = {t: tempfile.mkdtemp(prefix="aioge-idle-") for t in args.trees}
    for r in range(args.rounds):
        for pause in args.pauses:
            for tree, side in [(t, e) for t in args.trees for e in args.envs]:  # alternating: drift hits every side alike
                env = {**os.environ, "PYTHONPATH": os.path.join(tree, "src")}
                env.update(kv.split("=", 1) for kv in side.split(",") if kv)
                cmd = [
                    sys.executable,
                    "-P",
                    __file__,
                    "--model",
                    args.model,
                    "--child",
                    str(pause / 1e3),
                    str(args.n),
                    caches[tree],
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                print(
                    json.dumps({"tree": tree, "env": side, "pause_ms": pause, "round": r, "load": os.getloadavg()[0], **row}),
                    flush=True,
                )


if __name__ == "__main__":
    main()
