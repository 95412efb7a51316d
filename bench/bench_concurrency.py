"""Runtime targets of issue 8: per-node overhead, 64-way concurrent throughput, event-loop lag.

    .venv/bin/python bench/bench_concurrency.py [--chain-reps N] [--rounds R] [--concurrency C]
        [--models squeezenet,shufflenet,resnet50,mlp,cnn] [--skip-chain] [--skip-concurrency]

1. Chain: 1,000 tiny Adds ([1, 16] float32, fusion off) in sink mode; median run time / 1,000
   (us per node), beside onnxruntime (1 thread, optimisations off) on the same chain.
2. Concurrency: C (default 64) concurrent ``run_graph`` calls from one event loop, beside
   onnxruntime (default options) driven from a ``ThreadPoolExecutor`` of C threads, both
   timed round by round in turn (so load from other processes hits both alike). Figures:
   runs/s (median over rounds), the ratio aioge / onnxruntime, and the event-loop lag seen by a
   watchdog task that sleeps 1 ms and records the oversleep (max and p99 over all rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import numpy as np

import aioge
from aioge import ops
from aioge.examples import EXAMPLES
from aioge.ir.graph import Graph

HEURISTIC = {"aioge.tune_mode": "heuristic"}
LIGHT = ("squeezenet", "shufflenet", "resnet50", "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "vgg19", "zfnet512")


# -- 1. chain ----------------------------------------------------------------------------


def _add_chain(n: int) -> Graph:
    g = Graph(f"adds{n}")
    h = g.input("x", (1, 16))
    c = np.full((1, 16), 0.5, np.float32)
    for _ in range(n):
        h = ops.add(h, g.constant(c))
    g.output(h, names=["y"])
    return g


async def _aioge_chain(n: int, reps: int) -> list[float]:
    options = {**HEURISTIC, "ge.optimizationSwitch": "ElementwiseFusionPass:off;ConstantFoldingPass:off"}
    x = np.zeros((1, 16), np.float32)
    async with aioge.Session(options) as s:
        await s.add_graph(1, _add_chain(n))
        assert len((await s.build_graph(1)).nodes) == n
        out = await s.run_graph(1, {"x": x})
        np.testing.assert_allclose(out["y"], np.full((1, 16), 0.5 * n, np.float32))
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            await s.run_graph(1, {"x": x})
            times.append(time.perf_counter() - t)
        return times


def _ort_chain(n: int, reps: int) -> list[float]:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    c = np.full((1, 16), 0.5, np.float32)
    nodes = [helper.make_node("Add", ["x" if k == 0 else f"h{k}", "c"], [f"h{k + 1}" if k < n - 1 else "y"]) for k in range(n)]
    graph = helper.make_graph(
        nodes, "adds", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [numpy_helper.from_array(c, "c")],
    )
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {"x": np.zeros((1, 16), np.float32)}
    sess.run(None, feed)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t)
    return times


def bench_chain(n: int, reps: int, repeats: int) -> None:
    print(f"== per-node overhead: chain of {n} Adds, sink mode (median us/node) ==")
    for r in range(repeats):
        a = statistics.median(anyio.run(_aioge_chain, n, reps)) / n * 1e6
        o = statistics.median(_ort_chain(n, reps)) / n * 1e6
        print(f"repeat {r}: aioge {a:6.3f} us/node   onnxruntime {o:6.3f} us/node   ratio {a / o:5.2f}")


# -- 2. concurrency ----------------------------------------------------------------------


def _workload(name: str) -> tuple[Graph, bytes, dict[str, np.ndarray]]:
    """(aioge graph, ONNX model bytes for onnxruntime, feeds)."""
    import onnx

    if name in EXAMPLES:
        g, feeds, _ = EXAMPLES[name]()
        return g, _to_onnx(g).SerializeToString(), feeds
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    model = onnx.load(path)
    rng = np.random.default_rng(0)
    init = {i.name for i in model.graph.initializer}
    feeds = {}
    for i in model.graph.input:
        if i.name in init:
            continue
        shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return aioge.load_onnx(path), model.SerializeToString(), feeds


def _to_onnx(g: Graph) -> Any:
    """The builder graph as an ONNX model for onnxruntime (the examples use ONNX op names and attributes)."""
    from onnx import helper, numpy_helper

    from aioge.ir.desc import numpy_dtype

    def info(v: Any) -> Any:
        return helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(numpy_dtype(v.dtype)), list(v.shape))

    nodes = [
        helper.make_node(n.op_type, [v.name if v is not None else "" for v in n.inputs], [o.name for o in n.outputs],
                         **{k: (list(a) if isinstance(a, tuple) else a) for k, a in n.attrs.items()})
        for n in g.nodes
    ]
    inits = [numpy_helper.from_array(np.asarray(v.data), name) for name, v in g.constants.items()]
    graph = helper.make_graph(nodes, g.name, [info(v) for v in g.inputs], [info(v) for v in g.outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


async def _watchdog(lags: list[float], stop: anyio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await anyio.sleep(0.001)
        lags.append(time.perf_counter() - t - 0.001)


async def _aioge_rounds(g: Graph, feeds: dict[str, np.ndarray], conc: int, rounds: int) -> tuple[list[float], list[float], int]:
    lags: list[float] = []
    async with aioge.Session(HEURISTIC) as s:
        await s.add_graph(1, g)
        await s.run_graph(1, feeds)
        times = []
        for _ in range(rounds):
            stop = anyio.Event()
            async with anyio.create_task_group() as outer:
                outer.start_soon(_watchdog, lags, stop)
                t = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for _ in range(conc):
                        tg.start_soon(s.run_graph, 1, feeds)
                times.append(time.perf_counter() - t)
                stop.set()
        return times, lags, s.executable(1).contexts_made


def _ort_round(sess: Any, feeds: dict[str, np.ndarray], pool: ThreadPoolExecutor, conc: int) -> float:
    t = time.perf_counter()
    for f in [pool.submit(sess.run, None, feeds) for _ in range(conc)]:
        f.result()
    return time.perf_counter() - t


def bench_concurrency(models: list[str], conc: int, rounds: int) -> None:
    import onnxruntime as ort

    print(f"\n== throughput: {conc} concurrent runs (runs/s, median over {rounds} rounds) and event-loop lag ==")
    print(f"{'model':14s} {'aioge':>9s} {'ort':>9s} {'ratio':>6s} {'lag max ms':>10s} {'lag p99 ms':>10s} {'arenas':>6s}")
    for name in models:
        g, blob, feeds = _workload(name)
        sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
        a_times: list[float] = []
        o_times: list[float] = []
        lags: list[float] = []
        arenas = 0
        with ThreadPoolExecutor(conc) as pool:
            _ort_round(sess, feeds, pool, conc)
            for _ in range(rounds):  # in turn, one round each
                t, lag, arenas = anyio.run(_aioge_rounds, g, feeds, conc, 1)
                a_times += t
                lags += lag
                o_times.append(_ort_round(sess, feeds, pool, conc))
        a = conc / statistics.median(a_times)
        o = conc / statistics.median(o_times)
        lags.sort()
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0.0
        mx = lags[-1] if lags else 0.0
        print(f"{name:14s} {a:9.1f} {o:9.1f} {a / o:6.2f} {mx * 1e3:10.2f} {p99 * 1e3:10.2f} {arenas:6d}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chain", type=int, default=1000)
    p.add_argument("--chain-reps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--models", default="squeezenet,shufflenet,resnet50,mlp,cnn")
    p.add_argument("--skip-chain", action="store_true")
    p.add_argument("--skip-concurrency", action="store_true")
    args = p.parse_args()
    if not args.skip_chain:
        bench_chain(args.chain, args.chain_reps, args.repeats)
    if not args.skip_concurrency:
        bench_concurrency([m for m in args.models.split(",") if m], args.concurrency, args.rounds)


if __name__ == "__main__":
    main()
