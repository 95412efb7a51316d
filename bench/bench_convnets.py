"""aioge against onnxruntime on exported torchvision convnets, interleaved in one process.

    python bench/export_convnets.py /tmp/convk/models          # once (needs torch)
    python bench/bench_convnets.py /tmp/convk/models [--profile] [names...]

Per model: median wall and process-CPU time per run of each side, alternating rounds (aioge
then onnxruntime, 20 ms pause between), and their ratio; with --profile, time per op type of
one traced aioge run and of onnxruntime's profiler (per node, summed by op type).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import aioge

NAMES = ("mobilenet_v2", "mnasnet0_5", "efficientnet_b0", "googlenet", "resnet18")


def timed(fn, runs):
    walls, cpus = [], []
    for _ in range(runs):
        c, t = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def ort_profile(path, feeds, runs=10):
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        s.run(None, feeds)
    events = json.load(open(s.end_profiling()))
    by = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by[e["args"]["op_name"]] += e["dur"] / runs
    return by


def aioge_profile(trace_file):
    by = collections.Counter()
    doc = json.load(open(trace_file))
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
        if e.get("ph") == "X":
            op = e.get("cat") or e["name"]
            by[op] += e["dur"]
    return by


async def main(folder: Path, names, profile: bool) -> None:
    print(f"load {os.getloadavg()[0]:.2f}")
    for name in names:
        path = folder / f"{name}.onnx"
        data = np.load(folder / f"{name}.npz")
        feeds = {"input": data["input"]}
        async with aioge.Session({"ge.op_compiler_cache_dir": str(folder / os.environ.get("KCACHE", "kcache"))}) as session:
            await session.add_graph(1, aioge.load_onnx(str(path)))
            out = await session.run_graph(1, feeds)
            got = next(iter(out.values())) if isinstance(out, dict) else out[0]
            err = float(np.abs(np.asarray(got) - data["expected"]).max())
            s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            loop = asyncio.get_running_loop()

            def run_aioge():
                asyncio.run_coroutine_threadsafe(session.run_graph(1, feeds), loop).result()

            a_w, a_c, o_w, o_c = [], [], [], []
            for _ in range(5):  # warm-up
                await session.run_graph(1, feeds)
                s.run(None, feeds)
            for _ in range(7):
                await asyncio.sleep(0.02)
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(5):
                    await session.run_graph(1, feeds)
                a_w.append((time.perf_counter() - t0) / 5)
                a_c.append((time.process_time() - c0) / 5)
                await asyncio.sleep(0.02)
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(5):
                    s.run(None, feeds)
                o_w.append((time.perf_counter() - t0) / 5)
                o_c.append((time.process_time() - c0) / 5)
            aw, ac, ow, oc = (statistics.median(v) * 1e3 for v in (a_w, a_c, o_w, o_c))
            print(
                f"{name:18s} aioge {aw:7.2f} ms (cpu {ac:7.2f})  ort {ow:7.2f} ms (cpu {oc:7.2f})  "
                f"wall ratio {aw / ow:5.2f}  cpu ratio {ac / oc:5.2f}  max err {err:.2e}  load {os.getloadavg()[0]:.2f}"
            )
            if profile:
                tf = tempfile.mktemp(suffix=".json")
                await session.run_graph(1, feeds, trace=tf)
                await session.run_graph(1, feeds, trace=tf)
                mine, theirs = aioge_profile(tf), ort_profile(path, feeds)
                for op in sorted(set(mine) | set(theirs), key=lambda k: -mine.get(k, 0)):
                    print(f"    {op:24s} aioge {mine.get(op, 0) / 1e3:7.2f} ms   ort {theirs.get(op, 0) / 1e3:7.2f} ms")


if __name__ == "__main__":
    args = [a for a in sys.argv[2:] if not a.startswith("--")]
    asyncio.run(main(Path(sys.argv[1]), args or NAMES, "--profile" in sys.argv))
