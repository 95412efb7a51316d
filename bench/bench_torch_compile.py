"""torch.compile's compile time, aioge beside inductor, each measurement in a fresh process. From
the repository root:

    python bench/bench_torch_compile.py bert,gpt2,resnet18 2 [other_src ...]

Per model and round, in turn: aioge with this checkout's ``src`` (and with each ``other_src``,
e.g. main's, to compare) and inductor, each in a fresh process, "cold" (empty kernel caches:
aioge's ``ASCEND_CACHE_PATH`` and ``ge.graph_compiler_cache_dir`` (compiled graphs and inference
traces), inductor's ``TORCHINDUCTOR_CACHE_DIR``) and "warm" (caches filled by an earlier process). A figure is ``torch.compile(model)`` + its first call under ``no_grad``,
wall and CPU seconds (every thread's; imports done before); "again" is a second compile in the same process after
``torch._dynamo.reset()``. Prints the median over rounds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_CHILD = """
import json, os, sys, time
import torch
import aioge.torch
import torch._inductor.compile_fx  # both sides' imports before the clock
from aioge.benchmarks.frontends import _torch_model
side, name = sys.argv[1], sys.argv[2]
model, kw = _torch_model(name)
out = []
with torch.no_grad():
    be = aioge.torch.backend({"ge.graph_compiler_cache_dir": os.environ["AIOGE_GRAPH_CACHE"]}) if side == "aioge" else "inductor"
    for _ in range(2):
        torch._dynamo.reset()
        t, c = time.perf_counter(), time.process_time()
        torch.compile(model, backend=be)(**kw)
        out.append((time.perf_counter() - t, time.process_time() - c))
print(json.dumps(out))
"""


def _one(src: str, side: str, name: str, caches: str) -> list[list[float]]:
    env = {
        **os.environ,
        "PYTHONPATH": src,
        "ASCEND_CACHE_PATH": caches,
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(caches, "inductor"),
        "AIOGE_GRAPH_CACHE": caches,
    }
    done = subprocess.run([sys.executable, "-P", "-c", _CHILD, side, name], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(names: list[str], rounds: int, others: list[str]) -> None:
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    sides = [(f"aioge {src}", src, "aioge") for src in [here, *others]] + [("inductor", here, "inductor")]
    for name in names:
        figures: dict[tuple[str, str], list[list[list[float]]]] = {}
        for _ in range(rounds):
            for label, src, side in sides:
                with tempfile.TemporaryDirectory() as caches:
                    figures.setdefault((label, "cold"), []).append(_one(src, side, name, caches))
                    figures.setdefault((label, "warm"), []).append(_one(src, side, name, caches))
        print(name, "load", open("/proc/loadavg").read().split()[:3], time.strftime("%H:%M:%S"))
        for (label, state), runs in figures.items():
            first, again = ([statistics.median(r[i][k] for r in runs) for k in (0, 1)] for i in (0, 1))
            print(
                f"   {label:28s} {state}  compile wall {first[0]:6.2f} s cpu {first[1]:6.2f} s"
                f"   again wall {again[0]:6.2f} s cpu {again[1]:6.2f} s"
            )


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 2, sys.argv[3:])
