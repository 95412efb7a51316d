"""A torch.compile'd module's call on aioge, before and after the in-thread path, beside
inductor and eager, in one process with the sides interleaved. From the repository root:

    python bench/bench_torch_call.py bert,gpt2 5      # models (frontends.TORCH_MODELS), rounds

"hop" switches ``Session.run_graph_here`` off (every call waits for the backend's loop thread,
the path before it); "here" is the call as it is. Wall ms: median of the rounds' medians of
100 calls (10 for resnet18); CPU ms: the mean CPU time of a call (every thread of the process).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable

import torch

import aioge.torch  # before anything imports TensorFlow (aioge.torch._check_import_order)
from aioge.benchmarks.frontends import _torch_model
from aioge.session import Session


def _median(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    for _ in range(5):
        fn()
    walls, cpu = [], 0.0
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpu += time.process_time() - c
    return statistics.median(walls) * 1e3, cpu / n * 1e3


def main(names: list[str], rounds: int) -> None:
    here = Session.run_graph_here
    with torch.no_grad():
        for name in names:
            model, kw = _torch_model(name)
            n = 10 if name == "resnet18" else 100
            torch._dynamo.reset()
            be = aioge.torch.backend()
            compiled = torch.compile(model, backend=be)
            compiled(**kw)
            torch._dynamo.reset()
            inductor = torch.compile(model)
            inductor(**kw)

            def hop() -> Any:
                Session.run_graph_here = lambda self, graph_id, feeds: None  # type: ignore[method-assign]
                return compiled(**kw)

            def in_thread() -> Any:
                Session.run_graph_here = here  # type: ignore[method-assign]
                return compiled(**kw)

            sides = {"aioge hop": hop, "aioge here": in_thread, "inductor": lambda: inductor(**kw), "eager": lambda: model(**kw)}
            results: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
            for _ in range(rounds):
                for side, fn in sides.items():
                    results[side].append(_median(fn, n))
            Session.run_graph_here = here  # type: ignore[method-assign]
            be.close()
            print(name, "load", open("/proc/loadavg").read().split()[:3])
            for side, figures in results.items():
                wall = statistics.median(f[0] for f in figures)
                cpu = statistics.median(f[1] for f in figures)
                print(f"   {side:12s} wall {wall:8.3f} ms   cpu {cpu:8.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else ["bert", "gpt2"], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
