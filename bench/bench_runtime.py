"""Runtime benchmark: memory plans, single- vs multi-stream, per-node dispatch overhead.

    .venv/bin/python bench/bench_runtime.py [--reps N] [--quick]

1. Memory: arena / lower bound / no-reuse bytes for the builder models and (if the ONNX
   frontend is available) the onnx wheel's ``backend/test/data/light/*.onnx`` models.
2. Streams: a graph of 4 independent heavy branches (matmul chains, and Inception-like conv
   branches) run single-stream (``ge.enableSingleStream=true``) and multi-stream; medians and
   the speed-up. BLAS is at one thread per lane, as sessions set it; a single-stream row with
   BLAS at every core is printed beside it for an honest comparison.
3. Dispatch: a chain of 1,000 tiny Adds ([1, 16] float32) in sink and host mode, beside a
   plain Python loop of the same numpy calls and beside onnxruntime on the same chain.

Medians over repetitions; ratios against the first row of each table.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import time
from typing import Any, Callable

import anyio
import numpy as np

import aioge
from aioge import ops
from aioge.benchmarks.measure import median_of_runs as _median
from aioge.benchmarks.measure import median_of_runs_async as _median_async
from aioge.benchmarks.workloads import CHAIN_OPTIONS, add_chain, light_dir, to_onnx
from aioge.compiler.graph import compile_graph_sync
from aioge.examples import EXAMPLES
from aioge.ir.graph import Graph
from aioge.options import check_options, resolve_options
from aioge.plan.model import CompiledModel

HEURISTIC = {"aioge.tune_mode": "heuristic"}


def _compile(g: Graph, **options: str) -> CompiledModel:
    opts = resolve_options(check_options({**HEURISTIC, **options}, "session"))
    signature = tuple((v.name, tuple(int(d) for d in v.shape)) for v in g.inputs)  # type: ignore[union-attr]
    return compile_graph_sync(g, signature, opts)


def _mib(n: int) -> str:
    return f"{n / 2**20:9.2f}"


# -- 1. memory ---------------------------------------------------------------------------


def _light_models() -> list[str]:
    return sorted(glob.glob(os.path.join(light_dir(), "*.onnx")))


def bench_memory() -> None:
    print("== memory: arena vs lower bound (MiB) ==")
    print(
        f"{'model':24s} {'streams':>7s} {'arena':>9s} {'bound':>9s} {'no-reuse':>9s} {'arena/bound':>11s} {'no-reuse/arena':>14s}  strategy"
    )
    graphs: list[tuple[str, Callable[[], Graph]]] = [(name, lambda b=b: b()[0]) for name, b in EXAMPLES.items()]
    loader = getattr(aioge, "load_onnx", None)
    models = _light_models()
    for path in models:
        graphs.append((os.path.basename(path)[:-5], lambda p=path: loader(p)))  # type: ignore[misc]
    for name, build in graphs:
        for label, options in (("", {}), (" (1 stream)", {"ge.enableSingleStream": "true"})):
            try:
                model = _compile(build(), **options)
            except Exception as exc:  # a model the frontend or kernels cannot take yet: say so, go on
                print(f"{name + label:24s} skipped: {type(exc).__name__}: {str(exc)[:90]}")
                break
            m = model.memory
            ratio = m.arena_bytes / m.lower_bound_bytes if m.lower_bound_bytes else 1.0
            spread = m.no_reuse_bytes / m.arena_bytes if m.arena_bytes else 1.0
            print(
                f"{name + label:24s} {model.streams.num_streams:7d} {_mib(m.arena_bytes)} {_mib(m.lower_bound_bytes)} "
                f"{_mib(m.no_reuse_bytes)} {ratio:11.3f} {spread:14.2f}  {m.strategy}"
            )
    if not models:
        print("(no light/ models in the onnx wheel)")


# -- 2. streams --------------------------------------------------------------------------


def _matmul_branches(n: int, depth: int) -> tuple[Graph, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    g = Graph("matmul4")
    x = g.input("x", (n, n))
    tails = []
    for _ in range(4):
        h = x
        for _ in range(depth):
            h = ops.tanh(ops.matmul(h, g.constant((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32))))
        tails.append(h)
    g.output(ops.concat(*tails, axis=1), names=["y"])
    return g, {"x": rng.standard_normal((n, n)).astype(np.float32)}


def _conv_branches(c: int, hw: int) -> tuple[Graph, dict[str, np.ndarray]]:
    """An Inception module: 1x1 | 1x1-3x3 | 1x1-3x3-3x3 | pool-1x1, concatenated."""
    rng = np.random.default_rng(1)
    g = Graph("inception4")
    x = g.input("x", (1, c, hw, hw))

    def conv(h: Any, cin: int, cout: int, k: int) -> Any:
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        return ops.relu(ops.conv2d(h, g.constant(w), g.constant(np.zeros(cout, np.float32)), pads=(k // 2,) * 4))

    b1 = conv(x, c, c, 1)
    b2 = conv(conv(x, c, c, 1), c, c, 3)
    b3 = conv(conv(conv(x, c, c, 1), c, c, 3), c, c, 3)
    b4 = conv(ops.max_pool(x, kernel_shape=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1)), c, c, 1)
    g.output(ops.concat(b1, b2, b3, b4, axis=1), names=["y"])
    return g, {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}


_PROBE = (np.ones((384, 384), np.float32), np.ones((384, 384), np.float32))


def _parallel_probe(count: int = 8) -> float:
    """How much faster two plain threads run ``count`` 384^3 matmuls than one: the parallelism
    the machine offers right now (other processes share these cores)."""
    import threading

    def work(n: int) -> None:
        out = np.empty((384, 384), np.float32)
        for _ in range(n):
            np.matmul(*_PROBE, out=out)

    t = time.perf_counter()
    work(count)
    serial = time.perf_counter() - t
    threads = [threading.Thread(target=work, args=(count // 2,)) for _ in range(2)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return serial / (time.perf_counter() - t)


async def _interleaved(g: Graph, feeds: dict[str, np.ndarray], reps: int) -> dict[str, Any]:
    """Time single-stream, multi-stream and single-stream-with-BLAS-on-every-core runs in turn,
    run by run, so that load from other processes hits all three alike."""
    from threadpoolctl import threadpool_limits

    cores = os.cpu_count() or 2
    async with aioge.Session({**HEURISTIC, "ge.enableSingleStream": "true"}) as single, aioge.Session(HEURISTIC) as multi:
        await single.add_graph(1, g)
        await multi.add_graph(1, g)
        ref = await single.run_graph(1, feeds)
        out = await multi.run_graph(1, feeds)
        np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-4, atol=1e-5)
        times: dict[str, list[float]] = {"single": [], "multi": [], "wide": [], "probe": []}

        async def once(s: aioge.Session) -> float:
            t = time.perf_counter()
            await s.run_graph(1, feeds)
            return time.perf_counter() - t

        for k in range(reps + 2):
            a, b = await once(single), await once(multi)
            # Between runs nothing executes, so changing the process-wide BLAS limit is safe here.
            with threadpool_limits(limits=cores, user_api="blas"):
                c = await once(single)
            if k >= 2:  # warm-up
                times["single"].append(a)
                times["multi"].append(b)
                times["wide"].append(c)
                times["probe"].append(_parallel_probe())
        return {
            **{k: statistics.median(v) for k, v in times.items()},
            "probe_max": max(times["probe"]),
            "streams": multi.compiled(1).streams.num_streams,
        }


def bench_streams(reps: int, quick: bool) -> None:
    cores = os.cpu_count() or 2
    print("\n== streams: 4 independent heavy branches (median ms per run, variants interleaved) ==")
    cases = [
        (f"matmul 4x3 @{256 if quick else 384}", *_matmul_branches(256 if quick else 384, 3)),
        ("inception c=64 28x28", *_conv_branches(64, 28)),
    ]
    for name, g, feeds in cases:
        r = anyio.run(_interleaved, g, feeds, reps)
        single, multi, wide = r["single"], r["multi"], r["wide"]
        print(f"{name}: single-stream (1 stream, BLAS 1 thread)     {single * 1e3:8.2f} ms")
        print(f"{name}: single-stream (1 stream, BLAS {cores} threads)    {wide * 1e3:8.2f} ms   x{single / wide:5.2f} vs single")
        print(
            f"{name}: multi-stream  ({r['streams']} streams, BLAS 1 thread)    {multi * 1e3:8.2f} ms   "
            f"x{single / multi:5.2f} vs single, x{wide / multi:5.2f} vs single with BLAS on {cores} threads"
        )
        print(
            f"{name}: machine probe: two plain threads run matmuls x{r['probe']:.2f} faster than one (median; best x{r['probe_max']:.2f})"
        )


# -- 3. dispatch overhead ----------------------------------------------------------------


async def _aioge_chain(n: int, mode: str, reps: int) -> float:
    w = add_chain(n)  # the suite's chain workload
    g, x = w.graph, w.feeds["x"]
    # Fusion would turn the chain into one node: off, so every Add is dispatched.
    options = {**HEURISTIC, "aioge.exec_mode": mode, **CHAIN_OPTIONS}
    async with aioge.Session(options) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1)
        assert len(model.nodes) == n, len(model.nodes)
        out = await s.run_graph(1, {"x": x})
        np.testing.assert_allclose(out["y"], np.full((1, 16), 0.5 * n, np.float32))
        return await _median_async(lambda: s.run_graph(1, {"x": x}), reps)


def _ort_chain(n: int, reps: int) -> float | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    model = to_onnx(add_chain(n).graph, opset=17)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {"x": np.zeros((1, 16), np.float32)}
    return _median(lambda: sess.run(None, feed), reps)


def bench_dispatch(reps: int) -> None:
    print("\n== dispatch: chain of tiny Adds [1,16] float32 (median us) ==")
    c = np.full((1, 16), 0.5, np.float32)

    def plain(n: int) -> Callable[[], object]:
        def loop() -> object:
            y = np.zeros((1, 16), np.float32)
            for _ in range(n):
                y = np.add(y, c)
            return y

        return loop

    rows: list[tuple[str, float, float]] = []
    for name, run in (
        ("plain numpy loop", lambda n: _median(plain(n), reps * 4)),
        ("onnxruntime", lambda n: _ort_chain(n, reps * 4)),
        ("aioge sink", lambda n: anyio.run(_aioge_chain, n, "sink", reps * 2)),
        ("aioge host", lambda n: anyio.run(_aioge_chain, n, "host", max(3, reps // 4))),
    ):
        one, many = run(1), run(1000)
        if one is None or many is None:
            print(f"{name:18s} unavailable")
            continue
        rows.append((name, one, many))
    base = rows[0][2]
    print(f"{'':18s} {'1 node':>10s} {'1000 nodes':>11s} {'us/node':>9s} {'marginal':>9s} {'vs numpy':>9s}")
    for name, one, many in rows:
        print(
            f"{name:18s} {one * 1e6:10.1f} {many * 1e6:11.1f} {many * 1e3:9.3f} {(many - one) / 999 * 1e6:9.3f} {many / base:9.2f}x"
        )
    ort = next((r for r in rows if r[0] == "onnxruntime"), None)
    sink = next((r for r in rows if r[0] == "aioge sink"), None)
    if ort and sink:
        print(f"aioge sink per node / onnxruntime per node: {sink[2] / ort[2]:.2f}x (target: sink under 1.5 us per node)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="smaller shapes")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, numpy {np.__version__}")
    bench_memory()
    bench_streams(args.reps, args.quick)
    bench_dispatch(args.reps)


if __name__ == "__main__":
    main()
