"""Batch compile (issue 22): the 9 light/ ONNX models of the onnx wheel and the builder
examples, compiled three ways, each into a fresh kernel cache:

    .venv/bin/python bench/bench_batch.py [--workers 2] [--tune]

- sequential: one model after another in this process (LocalExecutor(1));
- gather: all at once in this process (LocalExecutor, one thread per core; asyncio.gather-like);
- dask: a LocalCluster of N worker processes (compile_many with a client; one compile per
  kernel key across the cluster). Cluster start-up is reported apart from the batch.

Per way: wall time, models ok, kernels compiled (summed over models) and from caches.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time

import anyio
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import machine  # noqa: E402

import aioge.examples  # noqa: E402
from aioge.distributed import LocalExecutor, compile_many  # noqa: E402


def models() -> list[str]:
    light = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_*.onnx")))
    ex = os.path.dirname(aioge.examples.__file__)
    return light + [f"{ex}/mlp.py:build_mlp", f"{ex}/cnn.py:build_cnn", f"{ex}/transformer.py:build_transformer"]


def run(way: str, names: list[str], options: dict[str, str], workers: int) -> None:
    with tempfile.TemporaryDirectory() as cache:
        opts = {**options, "ge.op_compiler_cache_dir": cache}
        setup = 0.0
        client = cluster = None
        if way == "dask":
            from distributed import Client, LocalCluster

            t0 = time.perf_counter()
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
            setup = time.perf_counter() - t0
        executor = {"sequential": LocalExecutor(1), "gather": LocalExecutor(os.cpu_count() or 2)}.get(way)
        t0 = time.perf_counter()
        results = anyio.run(lambda: compile_many(names, opts, client, executor=executor))
        wall = time.perf_counter() - t0
        if client is not None:
            client.close()
            cluster.close()
    ok = sum(r.ok for r in results)
    print(
        f"| {way} | {wall:.2f} | {setup:.2f} | {ok}/{len(results)} | {sum(r.kernels_compiled for r in results)} "
        f"| {sum(r.kernel_cache_hits for r in results)} |",
        flush=True,
    )
    for r in results:
        if not r.ok:
            print(f"  {r.model}: {r.error}", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tune", action="store_true")
    args = p.parse_args()
    print(machine())
    options = {} if args.tune else {"aioge.tune_mode": "heuristic"}
    names = models()
    print(f"{len(names)} models; tune mode {'tune' if args.tune else 'heuristic'}")
    print("| way | wall s | cluster start s | ok | kernels compiled | from caches |")
    print("| --- | --- | --- | --- | --- | --- |")
    for way in ("sequential", "gather", "dask"):
        run(way, names, options, args.workers)


if __name__ == "__main__":
    main()
