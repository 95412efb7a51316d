"""Compile benchmark on a ResNet-50-shaped model (conv/bn/relu bottlenecks at 224x224).

Prints:
- cold compile time (empty kernel cache, tune mode), warm compile time (a fresh session on
  the same cache dir: every kernel a hit) and their ratio;
- the model's run time with tuned kernels against heuristic kernels (median of runs) and
  their ratio.

    .venv/bin/python bench/bench_compile.py [--size 224] [--batch 1] [--runs 7] [--budget-ms 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter

import anyio
import numpy as np

import aioge
import aioge.compiler.graph as graph_compiler
from aioge import ops

KERNEL_STEP: list[float] = []  # seconds of each compile's kernel step (instrumented below)
_compile_kernels = graph_compiler.compile_kernels


async def _timed_kernel_step(*args, **kwargs):
    t0 = time.perf_counter()
    try:
        return await _compile_kernels(*args, **kwargs)
    finally:
        KERNEL_STEP.append(time.perf_counter() - t0)


graph_compiler.compile_kernels = _timed_kernel_step  # bench-only: the kernel step's share of a compile


def resnet50(batch: int, size: int, seed: int = 0) -> aioge.Graph:
    """ResNet-50 v1.5's layer shapes: a 7x7/2 stem, 3-4-6-3 bottlenecks, global pool, FC 1000."""
    rng = np.random.default_rng(seed)
    g = aioge.Graph("resnet50")
    count = [0]

    def conv_bn(h, cin, cout, k, stride=1, relu=True):
        count[0] += 1
        i = count[0]
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        h = ops.conv2d(h, g.constant(w, f"conv{i}.w"), strides=(stride, stride), pads=(k // 2,) * 4)
        bn = [
            (1 + 0.1 * rng.standard_normal(cout)),
            0.1 * rng.standard_normal(cout),
            0.1 * rng.standard_normal(cout),
            1 + 0.1 * rng.random(cout),
        ]
        h = ops.batch_normalization(h, *(g.constant(a.astype(np.float32), f"bn{i}.{j}") for j, a in enumerate(bn)))
        return ops.relu(h) if relu else h

    x = g.input("image", (batch, 3, size, size), "float32")
    h = conv_bn(x, 3, 64, 7, 2)
    h = ops.max_pool(h, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            y = conv_bn(h, cin, width, 1)
            y = conv_bn(y, width, width, 3, s)
            y = conv_bn(y, width, 4 * width, 1, relu=False)
            short = conv_bn(h, cin, 4 * width, 1, s, relu=False) if b == 0 else h
            h = ops.relu(y + short)
            cin = 4 * width
    h = ops.flatten(ops.global_average_pool(h), axis=1)
    fc = (rng.standard_normal((cin, 1000)) / np.sqrt(cin)).astype(np.float32)
    g.output(ops.gemm(h, g.constant(fc, "fc.w"), g.constant(np.zeros(1000, np.float32), "fc.b")), names=["logits"])
    return g


async def compile_once(graph: aioge.Graph, options: dict[str, str]) -> tuple[float, aioge.Session, object]:
    s = aioge.Session(options)
    await s.__aenter__()
    await s.add_graph(1, graph)
    t0 = time.perf_counter()
    model = await s.build_graph(1)
    return time.perf_counter() - t0, s, model


async def run_interleaved(
    sessions: list[aioge.Session], feeds: dict[str, np.ndarray], runs: int
) -> list[tuple[float, np.ndarray]]:
    """Median run time of each session's model, runs interleaved so drift hits all alike."""
    outs = [(await s.run_graph(1, feeds))["logits"] for s in sessions]  # warm-up: arenas, bound kernels
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(runs):
        for i, s in enumerate(sessions):
            t0 = time.perf_counter()
            outs[i] = (await s.run_graph(1, feeds))["logits"]
            times[i].append(time.perf_counter() - t0)
    return [(statistics.median(t), o) for t, o in zip(times, outs)]


async def main(args: argparse.Namespace) -> None:
    graph = resnet50(args.batch, args.size)
    feeds = {"image": np.random.default_rng(1).standard_normal((args.batch, 3, args.size, args.size)).astype(np.float32)}
    print(f"ResNet-50-shaped model, batch {args.batch}, {args.size}x{args.size}: {len(graph.nodes)} nodes")
    with tempfile.TemporaryDirectory(prefix="aioge_bench_") as root:
        tuned = {"ge.op_compiler_cache_dir": root, "aioge.tune_mode": "tune", "aioge.tune_budget_ms": str(args.budget_ms)}
        cold, s_cold, m_cold = await compile_once(graph, tuned)
        cold_step = KERNEL_STEP[-1]
        st = m_cold.stats  # type: ignore[attr-defined]
        print(
            f"cold compile (tune, budget {args.budget_ms} ms/op): {cold:8.3f} s   "
            f"({len(m_cold.nodes)} kernels: {st.kernels_compiled} compiled, {st.kernel_cache_hits} shared)"
        )  # type: ignore[attr-defined]
        warm_times: list[float] = []
        warm_steps: list[float] = []
        for _ in range(args.warm_repeats):
            warm, s_warm, m_warm = await compile_once(graph, tuned)
            ws = m_warm.stats  # type: ignore[attr-defined]
            assert ws.kernels_compiled == 0, "a warm compile should load every kernel"
            warm_times.append(warm)
            warm_steps.append(KERNEL_STEP[-1])
            await s_warm.aclose()
        warm = statistics.median(warm_times)
        print(
            f"warm compile (fresh session, all hits):  {warm:8.3f} s   "
            f"(median of {args.warm_repeats}; {ws.kernel_cache_hits} hits, 0 compiled)"
        )
        warm_step = statistics.median(warm_steps)
        print(
            f"cold / warm: {cold / warm:.1f}x whole compile; kernel step alone {1e3 * cold_step:.0f} ms -> "
            f"{1e3 * warm_step:.1f} ms ({cold_step / warm_step:.0f}x; the rest is specialise, passes, planning)"
        )
        heuristic = {"ge.op_compiler_cache_mode": "disable", "aioge.tune_mode": "heuristic"}
        hc, s_heur, m_heur = await compile_once(graph, heuristic)
        print(f"heuristic compile (no timing, no cache): {hc:8.3f} s")
        choices = Counter(n.kernel.impl for n in m_cold.nodes if n.kernel.tuned)  # type: ignore[attr-defined]
        print(f"tuned choices: {dict(choices)}")
        (t_tuned, y_tuned), (t_heur, y_heur) = await run_interleaved([s_cold, s_heur], feeds, args.runs)
        err = float(np.max(np.abs(y_tuned - y_heur)) / max(1.0, float(np.max(np.abs(y_heur)))))
        print(f"run, tuned kernels:     {1e3 * t_tuned:8.1f} ms (median of {args.runs}, interleaved)")
        print(f"run, heuristic kernels: {1e3 * t_heur:8.1f} ms (median of {args.runs})")
        print(f"heuristic / tuned: {t_heur / t_tuned:.2f}x   (outputs agree to {err:.1e} relative)")
        await s_cold.aclose()
        await s_heur.aclose()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--warm-repeats", type=int, default=3)
    p.add_argument("--budget-ms", type=float, default=200.0)
    anyio.run(main, p.parse_args())
