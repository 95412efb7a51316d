"""Per C job kind, a model's native program in order, one thread, warm (back to back) against
cold (a 64 MB buffer written before each pass: every cache level evicted, as an idle pause on a
shared machine leaves them); onnxruntime at 1 thread the same way, in process CPU.

    python bench/cold_jobs.py /tmp/aioge-heldout/squeezenet1_1.onnx -n 20
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import twocore
from twocore import JOBS, programs, session_for

from aioge.kernels import native


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=20)
    a = ap.parse_args()
    twocore.MODELS, name = Path(a.model).parent, Path(a.model).stem
    junk = np.ones(16 << 20, np.float32)
    s, feeds = await session_for(name, tempfile.mkdtemp())
    _, calls = programs()[0]._keep
    par = native.par_run()
    times = {k: [[0] * len(calls) for _ in range(a.n)] for k in ("warm", "cold")}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(twocore.MODELS / f"{name}.onnx"), so, providers=["CPUExecutionProvider"])
    ot: dict[str, list[int]] = {"warm": [], "cold": []}
    for r in range(a.n):
        for kind in ("warm", "cold"):
            for _ in range(2 if kind == "warm" else 1):
                if kind == "cold":
                    junk += 1.0
                for i, c in enumerate(calls):
                    t = time.thread_time_ns()
                    par(c.job, c.addr, c.total, 0)
                    times[kind][r][i] = time.thread_time_ns() - t
            for _ in range(2 if kind == "warm" else 1):
                if kind == "cold":
                    junk += 1.0
                t = time.thread_time_ns()
                sess.run(None, feeds)
                dt = time.thread_time_ns() - t
            ot[kind].append(dt)
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for i, c in enumerate(calls):
        v = per[JOBS.get(c.job, str(c.job))]
        v[0] += 1
        for j, kind in ((1, "warm"), (2, "cold")):
            v[j] += statistics.median(t[i] for t in times[kind]) / 1e3
    print(f"{name}: thread CPU us per job kind, warm / cold (every cache evicted before the pass)")
    for k, (count, w, c) in sorted(per.items(), key=lambda kv: -kv[1][2]):
        print(f"  {k:12s} x{count:3.0f} {w:8.0f} {c:8.0f}  x{c / max(w, 1):.2f}")
    for i, c in enumerate(calls):
        w_, c_ = (statistics.median(t[i] for t in times[k]) / 1e3 for k in ("warm", "cold"))
        if c_ - w_ > 20:
            g = [int(v) for v in c.keep[4][0][:15]] if c.job == native.JOB_CONV_DIRECT and len(c.keep) > 4 else ""
            print(f"    #{i:3d} {JOBS.get(c.job, c.job):12s} {w_:7.0f} {c_:7.0f} {g}")
    w, c = sum(v[1] for v in per.values()), sum(v[2] for v in per.values())
    print(f"  aioge sum {w:.0f} {c:.0f}  x{c / w:.2f}")
    ow, oc = statistics.median(ot["warm"]) / 1e3, statistics.median(ot["cold"]) / 1e3
    print(f"  ort 1 thread run (thread CPU) {ow:.0f} {oc:.0f}  x{oc / ow:.2f}")
    await s.__aexit__(None, None, None)


asyncio.run(main())
