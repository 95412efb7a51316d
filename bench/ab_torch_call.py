"""A torch.compile'd module's call on two aioge source trees (say main and a branch), their
rounds interleaved: one worker process per tree, driven in turn from this script, so both see
the same load. From the repository root:

    python bench/ab_torch_call.py /work/main/src src whisper_encoder 7 200

Per round and tree: 200 calls (after warm-up) of the model of ``frontends.TORCH_MODELS``; the
tree's wall ms (median of the calls), the calling thread's CPU ms and the process's CPU ms
(every thread: the C helper's share of split jobs too), a call's mean. Printed: the medians of
the rounds, and the B/A ratios of the rounds' medians. The second tree's worker also times
inductor for reference.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

WORKER = r"""
import json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
import torch
import aioge.torch
from aioge.benchmarks.frontends import _torch_model
name, inductor = sys.argv[1], sys.argv[2] == "1"
model, kw = _torch_model(name)
sides = {"aioge": torch.compile(model, backend=aioge.torch.backend())}
if inductor:
    torch._dynamo.reset()
    sides["inductor"] = torch.compile(model)
with torch.no_grad():
    for fn in sides.values():
        for _ in range(20):
            fn(**kw)
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        n, out = int(line), {}
        for side, fn in sides.items():
            walls, t0, p0 = [], time.thread_time(), time.process_time()
            for _ in range(n):
                s = time.perf_counter()
                fn(**kw)
                walls.append(time.perf_counter() - s)
            out[side] = (statistics.median(walls) * 1e3, (time.thread_time() - t0) / n * 1e3, (time.process_time() - p0) / n * 1e3)
        print(json.dumps(out), flush=True)
"""


def main(src_a: str, src_b: str, name: str, rounds: int, calls: int) -> None:
    procs = []
    for i, src in enumerate((src_a, src_b)):
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
        cmd = [sys.executable, "-P", "-c", WORKER, name, str(i)]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True))
    for p in procs:
        assert json.loads(p.stdout.readline()) == "ready"  # type: ignore[union-attr]
    got: dict[str, list[tuple[float, float, float]]] = {}
    for r in range(rounds):
        for i, p in enumerate(procs if r % 2 == 0 else procs[::-1]):
            p.stdin.write(f"{calls}\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            which = "AB"[i if r % 2 == 0 else 1 - i]
            for side, v in json.loads(p.stdout.readline()).items():  # type: ignore[union-attr]
                got.setdefault(f"{which} {side}", []).append(tuple(v))
            time.sleep(0.05)
    for p in procs:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    print(f"{name}: A = {src_a}, B = {src_b}; {rounds} rounds of {calls} calls, medians of the rounds")
    print("side            wall ms  thread CPU ms  process CPU ms")
    med = {k: [statistics.median(x[j] for x in v) for j in range(3)] for k, v in got.items()}
    for k, (wall, thread, proc) in med.items():
        print(f"{k:<14} {wall:8.3f} {thread:14.3f} {proc:15.3f}")
    a, b = med["A aioge"], med["B aioge"]
    print(f"B/A: wall {b[0] / a[0]:.2f}, thread CPU {b[1] / a[1]:.2f}, process CPU {b[2] / a[2]:.2f}")


if __name__ == "__main__":
    main(
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]) if len(sys.argv) > 4 else 7,
        int(sys.argv[5]) if len(sys.argv) > 5 else 200,
    )
