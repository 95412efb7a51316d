"""Where a convnet's time goes, per C job kind, against onnxruntime's own per-node profile.

    python bench/ops_vs_ort.py mobilenet_v3_small,efficientnet_b0 [-n 30]

aioge: every job of the model's native program in order, as a run takes them, whole (no split), in the
calling thread's CPU time (``time.thread_time``: other processes loading the machine do not count),
medians; each job twice interleaved, with the depthwise conv's former choice (``aioge_simd_avx2(4)``:
eight planes at a time up to about 90x90, else the flat-phase form) and as built; then the whole
program as one unsplit C call the same way. onnxruntime: ``enable_profiling``, sequential, 1 and
2 intra-op threads, the median of each node's kernel time summed per op type (wall time of the
node: on a loaded machine it counts time the thread was descheduled), and the session's
process CPU per run. Models and feeds are the bench cache's (``bench/twocore.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import tempfile
import time

import onnxruntime as ort
from twocore import JOBS, MODELS, programs, session_for

from aioge.kernels import native


def median_thread_us(fn, n: int, setups) -> list[float]:  # type: ignore[no-untyped-def]
    """Per setup (a callable run before each timed call), the median thread CPU of fn, interleaved."""
    ts: list[list[int]] = [[] for _ in setups]
    for _ in range(n):
        for i, setup in enumerate(setups):
            setup()
            t = time.thread_time_ns()
            fn()
            ts[i].append(time.thread_time_ns() - t)
    return [statistics.median(t) / 1e3 for t in ts]


async def aioge_side(name: str, n: int, cache: str):  # type: ignore[no-untyped-def]
    s, feeds = await session_for(name, cache)
    prog = programs()[0]
    _, calls = prog._keep
    par, simd = native.par_run(), native.function("aioge_simd_avx2")
    sides = (lambda: simd(4), lambda: simd(1))
    # Each pass runs the program's jobs in order from the staged feeds, timing each: a job sees
    # the values a run gives it (run alone n times, an in-place job compounded its own output
    # until Swish took its slow path on huge and subnormal values) and the caches a run leaves.
    times: list[list[list[int]]] = [[[] for _ in calls] for _ in sides]
    for _ in range(n):
        for side, setup in enumerate(sides):
            setup()
            for i, c in enumerate(calls):
                t = time.thread_time_ns()
                par(c.job, c.addr, c.total, 0)
                times[side][i].append(time.thread_time_ns() - t)
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for i, c in enumerate(calls):
        v = per[JOBS.get(c.job, str(c.job))]
        v[0] += 1
        v[1] += statistics.median(times[0][i]) / 1e3
        v[2] += statistics.median(times[1][i]) / 1e3
    run = native.run_jobs()
    whole = median_thread_us(lambda: run(prog._entries, prog._n, 0, prog._fptr), n, sides)
    simd(1)
    print(f"{name}: aioge thread CPU us per job kind (former depthwise / as built), load {os.getloadavg()[0]:.1f}")
    for k, (count, a, b) in sorted(per.items(), key=lambda kv: -kv[1][2]):
        print(f"  {k:12s} x{count:3.0f} {a:8.0f} {b:8.0f}")
    print(f"  sum of jobs {sum(v[1] for v in per.values()):.0f} {sum(v[2] for v in per.values()):.0f}")
    print(f"  whole program, one unsplit call: {whole[0]:.0f} {whole[1]:.0f}")
    await s.__aexit__(None, None, None)
    return feeds


def ort_side(name: str, feeds, n: int) -> None:  # type: ignore[no-untyped-def]
    for threads in (1, 2):
        so = ort.SessionOptions()
        so.enable_profiling, so.intra_op_num_threads = True, threads
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"ops_vs_ort_{name}")
        sess = ort.InferenceSession(str(MODELS / f"{name}.onnx"), so, providers=["CPUExecutionProvider"])
        for _ in range(10):
            sess.run(None, feeds)
        cpu = []
        for _ in range(n):
            t = time.process_time()
            sess.run(None, feeds)
            cpu.append(time.process_time() - t)
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
        os.remove(path)
        durs: dict[str, list[int]] = collections.defaultdict(list)
        ops: dict[str, str] = {}
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                durs[e["name"]].append(e["dur"])
                ops[e["name"]] = e["args"]["op_name"]
        per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        for node, d in durs.items():
            per[ops[node]][0] += 1
            per[ops[node]][1] += statistics.median(d[10:] or d)
        print(f"  ort {threads} thread(s): process CPU {statistics.median(cpu) * 1e3:.2f} ms/run; node medians us:")
        print("    " + ", ".join(f"{k} x{c:.0f} {v:.0f}" for k, (c, v) in sorted(per.items(), key=lambda kv: -kv[1][1])))
        dw, act = depthwise_nodes(name)  # the depthwise Convs' nodes (renamed by the NCHWc layout) and their Swish
        med = {n[: -len("_kernel_time")]: statistics.median(d[10:] or d) for n, d in durs.items()}
        found = [med[n] for n in dw if n in med]
        print(f"    depthwise Conv x{len(found)}/{len(dw)} {sum(found):.0f}, its Swish {sum(med.get(n, 0) for n in act):.0f}")


def depthwise_nodes(name: str) -> tuple[list[str], list[str]]:
    """onnxruntime's profile names of the model's depthwise Convs (their output's NCHWc form) and
    of the QuickGelu (Swish) fused from the Mul that reads one."""
    import onnx

    graph = onnx.load(str(MODELS / f"{name}.onnx")).graph
    outs = {n.output[0] for n in graph.node if n.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in n.attribute)}
    acts = [n.name + "/QuickGeluFusion/" for n in graph.node if n.op_type == "Mul" and outs & set(n.input)]
    return [o + "_nchwc" for o in outs], acts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "aioge-ops-vs-ort"))
    a = ap.parse_args()
    for m in a.models.split(","):
        feeds = asyncio.run(aioge_side(m, a.n, a.cache))
        ort_side(m, feeds, a.n)


if __name__ == "__main__":
    main()
