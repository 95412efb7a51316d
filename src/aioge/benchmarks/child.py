"""A fresh interpreter for start-up figures: ``python -P .../aioge/benchmarks/child.py MODE SPEC_JSON``.

- ``aioge``: import aioge, ``load_onnx``, open a Session with the given options, ``add_graph`` +
  ``build_graph`` (a compile, a kernel-cache hit or a graph-cache load), first ``run_graph``;
- ``ort``: import onnxruntime, create an ``InferenceSession``, first run.

With ``"runs": N`` in the spec, either side then runs untimed for ``warm_s`` seconds and times N
runs (``run_s``), back to back or ``pause_s`` apart (a caller's sporadic requests: each run then
starts with the side's threads asleep): the machine-states section's process-alone figures.

Run by path, not with ``-m``, so that the aioge package is not imported before this file
starts timing: both sides import numpy and onnx first (for the feeds), then time their own
import (``import_s``: aioge with every module a run needs, which it would otherwise import
lazily inside ``load_onnx`` and the first Session), so ``start_s``, everything after the
import, counts the same steps on both sides.

Prints one JSON line of seconds per step.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _feeds(path: str) -> dict[str, Any]:
    import numpy as np
    import onnx

    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            if np.issubdtype(dtype, np.integer):  # token ids: small, within any vocabulary
                feeds[vi.name] = (np.arange(n) % 100).reshape(shape).astype(dtype)
            else:
                feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(dtype)
    return feeds


def _as_async(fn: Any) -> Any:
    async def call() -> Any:
        return fn()

    return call


async def _timed_runs_async(call: Any, spec: dict[str, Any]) -> list[float]:
    """``spec["runs"]`` timed calls (and more until ``spec["budget_s"]`` seconds have passed) after
    ``spec["warm_s"]`` seconds of untimed ones ([] without runs)."""
    if not spec.get("runs"):
        return []
    end = time.perf_counter() + spec.get("warm_s", 0.5)
    while time.perf_counter() < end:
        await call()
    times: list[float] = []
    end = time.perf_counter() + spec.get("budget_s", 0.0)  # then on until this much time has passed
    while len(times) < spec["runs"] or time.perf_counter() < end:
        if spec.get("pause_s"):
            time.sleep(spec["pause_s"])  # blocking on purpose: the process has nothing else to do
        t = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t)
    return times


def run_aioge(spec: dict[str, Any]) -> dict[str, Any]:
    feeds = _feeds(spec["model"])
    before = sum(1 for m in sys.modules if m == "aioge" or m.startswith("aioge."))  # 0 when run by path
    t0 = time.perf_counter()
    import anyio

    import aioge
    import aioge.frontends.onnx
    import aioge.session  # noqa: F401  (what the first Session imports)

    t_import, c_import = time.perf_counter(), time.process_time()

    async def go() -> dict[str, Any]:
        marks = {}
        graph = aioge.load_onnx(spec["model"])
        marks["load_s"] = time.perf_counter()
        async with aioge.Session(spec.get("options", {})) as session:
            await session.add_graph(1, graph, spec.get("graph_options", {}))
            await session.build_graph(1)
            marks["compile_s"] = time.perf_counter()
            out = await session.run_graph(1, feeds)
            marks["first_run_s"] = time.perf_counter()
            cpu = time.process_time() - c_import
            stats = session.compiled(1).summary()["stats"]
            runs = await _timed_runs_async(lambda: session.run_graph(1, feeds), spec)
        prev = t_import
        steps = {}
        for k, v in marks.items():
            steps[k] = v - prev
            prev = v
        first = next(iter(out.values()))
        return {
            "aioge_modules_before_import": before,
            "import_s": t_import - t0,
            **steps,
            "start_s": marks["first_run_s"] - t_import,
            "start_cpu_s": cpu,
            "checksum": float(first.astype("float64").sum()),
            "graph_cache_hit": stats["graph_cache_hit"],
            "kernels_compiled": stats["kernels_compiled"],
            "kernel_cache_hits": stats["kernel_cache_hits"],
            "run_s": runs,
        }

    return anyio.run(go)


def run_ort(spec: dict[str, Any]) -> dict[str, Any]:
    feeds = _feeds(spec["model"])
    t0 = time.perf_counter()
    import onnxruntime as ort

    t_import, c_import = time.perf_counter(), time.process_time()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(spec["model"], opts, providers=["CPUExecutionProvider"])
    t_create = time.perf_counter()
    out = sess.run(None, feeds)
    t_run, cpu = time.perf_counter(), time.process_time() - c_import
    import anyio  # after the timed start: aioge's side imports it before its clock too

    runs = anyio.run(_timed_runs_async, _as_async(lambda: sess.run(None, feeds)), spec)
    return {
        "import_s": t_import - t0,
        "create_s": t_create - t_import,
        "first_run_s": t_run - t_create,
        "start_s": t_run - t_import,
        "start_cpu_s": cpu,
        "checksum": float(out[0].astype("float64").sum()),
        "run_s": runs,
    }


def main(argv: list[str]) -> int:
    mode, spec = argv[0], json.loads(argv[1])
    result = {"aioge": run_aioge, "ort": run_ort}[mode](spec)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
