"""Where a convnet's time goes, per C job kind, against onnxruntime's own per-node profile.

    python bench/ops_vs_ort.py mobilenet_v3_small,efficientnet_b0 [-n 30]
    python bench/ops_vs_ort.py /tmp/aioge-heldout/inception_v3.onnx -n 10   # a model by path (its .npz beside it)

Then one line per pool node (MaxPool, AveragePool, the global pools): its geometry, aioge's job
(thread CPU, whole) and onnxruntime's node at 1 and 2 threads, matched by kind and shapes in order.

aioge: every job of the model's native program in order, as a run takes them, whole (no split), in the
calling thread's CPU time (``time.thread_time``: other processes loading the machine do not count),
medians; each job twice interleaved, with the depthwise conv's former choice (``aioge_simd_avx2(4)``:
eight planes at a time up to about 90x90, else the flat-phase form) and as built; then the whole
program as one unsplit C call the same way. onnxruntime: ``enable_profiling``, sequential, 1 and
2 intra-op threads, the median of each node's kernel time summed per op type (wall time of the
node: on a loaded machine it counts time the thread was descheduled), and the session's
process CPU per run. Each round runs aioge's pass and then one run of each onnxruntime
session (their pool threads not spinning), so both sides see the same load on a shared machine. Models and feeds are the bench cache's (``bench/twocore.py``).
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
from pathlib import Path

import onnxruntime as ort
import twocore
from twocore import JOBS, programs, session_for

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


async def aioge_side(name: str, n: int, cache: str, between):  # type: ignore[no-untyped-def]
    s, feeds = await session_for(name, cache)
    ort_round = between(feeds)
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
        ort_round()  # onnxruntime's runs interleaved with aioge's passes: both see the same load
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    pools = []  # (key, geometry, us as built) of each pool job in program order
    for i, c in enumerate(calls):
        if c.job == native.JOB_POOL:
            g = [int(v) for v in c.keep[2]]
            kind = "global" if g[2:4] == g[:2] and g[12:14] == [1, 1] else "avg" if g[14] else "max"
            ceil = g[12] > (g[0] + g[8] + g[10] - (g[2] - 1) * g[6] - 1) // g[4] + 1
            geo = (
                f"{c.total}x{g[0]}x{g[1]} k{g[2]}x{g[3]} s{g[4]}x{g[5]} p{g[8:12]} -> {g[12]}x{g[13]}"
                + " ceil" * ceil
                + " incl" * g[15]
            )
            pools.append(((kind, g[0], g[1], g[12], g[13]), geo, statistics.median(times[1][i]) / 1e3))
        elif c.job == native.JOB_GLOBAL_MEAN and c.keep[0].ndim == 4:
            sh = c.keep[0].shape
            pools.append(
                (("gavg", sh[2], sh[3], 1, 1), f"{c.total}x{sh[2]}x{sh[3]} global mean", statistics.median(times[1][i]) / 1e3)
            )
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
    return feeds, pools


_KIND = {"MaxPool": "max", "AveragePool": "avg", "GlobalAveragePool": "gavg", "GlobalMaxPool": "global"}


def ort_sessions(name: str, feeds):  # type: ignore[no-untyped-def]
    """onnxruntime at 1 and 2 intra-op threads, profiled, warmed; returns (one round: a run of
    each, timed in process CPU, the sessions, their CPU lists)."""
    sessions, cpu = [], [[], []]
    for threads in (1, 2):
        so = ort.SessionOptions()
        so.enable_profiling, so.intra_op_num_threads = True, threads
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no spinner beside aioge's passes
        so.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"ops_vs_ort_{name}_{threads}")
        sess = ort.InferenceSession(str(twocore.MODELS / f"{name}.onnx"), so, providers=["CPUExecutionProvider"])
        for _ in range(10):
            sess.run(None, feeds)
        sessions.append(sess)

    def round_() -> None:
        for k, sess in enumerate(sessions):
            t = time.process_time()
            sess.run(None, feeds)
            cpu[k].append(time.process_time() - t)

    return round_, sessions, cpu


def ort_side(name: str, sessions, cpus) -> list[dict]:  # type: ignore[no-untyped-def]
    """Prints the per-op-type profile; returns, per thread count, each pool node's median by key, in order."""
    nodes: list[dict] = []
    for threads, sess, cpu in zip((1, 2), sessions, cpus):
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
        os.remove(path)
        durs: dict[str, list[int]] = collections.defaultdict(list)
        ops: dict[str, str] = {}
        keys: dict[str, tuple] = {}
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                durs[e["name"]].append(e["dur"])
                ops[e["name"]] = op = e["args"]["op_name"]
                if op in _KIND:
                    i, o = e["args"]["input_type_shape"][0]["float"], e["args"]["output_type_shape"][0]["float"]
                    keys[e["name"]] = (_KIND[op], i[2], i[3], o[2], o[3])
        found: dict[tuple, list[float]] = collections.defaultdict(list)
        for node, key in keys.items():  # insertion order: the first run's execution order
            found[key].append(statistics.median(durs[node][10:] or durs[node]))
        nodes.append(found)
        per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        for node, d in durs.items():
            per[ops[node]][0] += 1
            per[ops[node]][1] += statistics.median(d[10:] or d)
        print(f"  ort {threads} thread(s): process CPU {statistics.median(cpu) * 1e3:.2f} ms/run; node medians us:")
        print("    " + ", ".join(f"{k} x{c:.0f} {v:.0f}" for k, (c, v) in sorted(per.items(), key=lambda kv: -kv[1][1])))
        dw, act = depthwise_nodes(name)  # the depthwise Convs' nodes (renamed by the NCHWc layout) and their Swish
        med = {n[: -len("_kernel_time")]: statistics.median(d[10:] or d) for n, d in durs.items()}
        found = [med[n] for n in dw if n in med]
        dws = [med[n] for n in dw if n in med]
        print(f"    depthwise Conv x{len(dws)}/{len(dw)} {sum(dws):.0f}, its Swish {sum(med.get(n, 0) for n in act):.0f}")
    return nodes


def pool_table(pools, nodes) -> None:  # type: ignore[no-untyped-def]
    """Each pool job against onnxruntime's node of the same kind and shapes (the i-th of each key)."""
    if not pools:
        return
    print(f"  pool nodes (aioge {native.tier()}; ort 1 thread, 2 threads; ratio to 1 thread):")
    seen: dict[tuple, int] = collections.defaultdict(int)
    for key, geo, us in pools:
        i = seen[key]
        seen[key] += 1
        o1, o2 = (d[key][i] if i < len(d.get(key, ())) else float("nan") for d in nodes)
        print(f"    {geo:48s} {us:8.1f} {o1:8.1f} {o2:8.1f} {us / o1:6.2f}")


def depthwise_nodes(name: str) -> tuple[list[str], list[str]]:
    """onnxruntime's profile names of the model's depthwise Convs (their output's NCHWc form) and
    of the QuickGelu (Swish) fused from the Mul that reads one."""
    import onnx

    graph = onnx.load(str(twocore.MODELS / f"{name}.onnx")).graph
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
        if m.endswith(".onnx"):
            twocore.MODELS, m = Path(m).parent, Path(m).stem
        got: dict = {}

        def between(feeds, m=m):  # type: ignore[no-untyped-def]
            got["round"], got["sessions"], got["cpu"] = ort_sessions(m, feeds)
            return got["round"]

        _, pools = asyncio.run(aioge_side(m, a.n, a.cache, between))
        pool_table(pools, ort_side(m, got["sessions"], got["cpu"]))


if __name__ == "__main__":
    main()
