"""The serving benchmark: many concurrent single-row clients, aioge with dynamic batching
(and without) beside onnxruntime driven from a thread pool of one thread per client.

Each client sends ``requests`` one-row requests one after another (a closed loop, as a
service's callers do); throughput is all requests over the wall time of the burst, latency
is per request. CPU time per request (every thread of the process; for aioge also the event
loop's thread alone) is measured beside them: on a shared machine wall-clock ratios swing
with the neighbours' load, CPU per request much less. aioge runs on this event loop with GE's batch gears (1, 2, 4, ... up to the
client count, compiled when the graph is added) and ``aioge.batch_max_rows``; the event
loop's lag is measured meanwhile. The sides alternate round by round; every figure is a
median over rounds. ``batched_bf16`` (the transformer's by default: issue 39's target) is the
batched graph again under GE's ``allow_fp32_to_bf16``, checked by cosine against float32.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import numpy as np

import aioge
from aioge.benchmarks.measure import LagMonitor, ort_session, percentile, settle
from aioge.benchmarks.precision import COSINE_FLOOR, accuracy

__all__ = ["SERVING_WORKLOADS", "serving"]

SERVING_WORKLOADS = ("mlp", "cnn", "transformer")
SERVING_BF16 = ("transformer",)  # served batched under allow_fp32_to_bf16 too


def _model(name: str) -> tuple[aioge.Graph, dict[str, np.ndarray], Any]:
    from aioge.examples import EXAMPLES

    graph, feeds, reference = EXAMPLES[name](batch=1)  # type: ignore[call-arg]
    return graph, feeds, reference


def _gear_options(graph: aioge.Graph, clients: int, batching: bool) -> dict[str, str]:
    (x,) = graph.inputs
    sizes = sorted({1 << i for i in range(clients.bit_length()) if 1 << i <= clients} | {clients})
    options = {
        "ge.inputShape": f"{x.name}:{','.join(['-1', *(str(d) for d in (x.shape or ())[1:])])}",
        "ge.dynamicBatchSize": ",".join(map(str, sizes if len(sizes) > 1 else [1, 2])),
    }
    if batching:
        options["aioge.batch_max_rows"] = str(clients)
    return options


async def _aioge_round(
    session: aioge.Session, gid: int, feeds: dict[str, np.ndarray], clients: int, requests: int, monitor: LagMonitor | None
) -> tuple[float, list[float], float, float]:
    latencies: list[float] = []

    async def client() -> None:
        for _ in range(requests):
            t = time.perf_counter()
            await session.run_graph(gid, feeds)
            latencies.append(time.perf_counter() - t)

    async with anyio.create_task_group() as outer:
        if monitor is not None:
            await outer.start(monitor.run)
        t0, cpu0, loop0 = time.perf_counter(), time.process_time(), time.thread_time()
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(client)
        wall, cpu, loop = time.perf_counter() - t0, time.process_time() - cpu0, time.thread_time() - loop0
        outer.cancel_scope.cancel()
    n = clients * requests
    return n / wall, latencies, cpu / n, loop / n


def _ort_round(
    sess: Any, feeds: dict[str, np.ndarray], pool: ThreadPoolExecutor, clients: int, requests: int
) -> tuple[float, list[float], float, float]:
    def client() -> list[float]:
        out = []
        for _ in range(requests):
            t = time.perf_counter()
            sess.run(None, feeds)
            out.append(time.perf_counter() - t)
        return out

    t0, cpu0 = time.perf_counter(), time.process_time()
    futures = [pool.submit(client) for _ in range(clients)]
    latencies = [x for f in futures for x in f.result()]
    n = clients * requests
    return n / (time.perf_counter() - t0), latencies, (time.process_time() - cpu0) / n, 0.0


async def serving(
    name: str,
    *,
    clients: int = 64,
    requests: int = 20,
    rounds: int = 3,
    cache_dir: str | None = None,
    bf16: bool | None = None,
) -> dict[str, Any]:
    """One builder model served to ``clients`` concurrent single-row clients: requests/s, p50/p99
    latency (seconds), CPU microseconds per request of aioge with batching, aioge without, and
    onnxruntime in a pool; loop lag. ``bf16`` (default: ``name`` in ``SERVING_BF16``): the batched
    graph under ``allow_fp32_to_bf16`` as a fourth side.

    Raises:
        AssertionError: a side's output is wrong.
    """
    from aioge.benchmarks.workloads import to_onnx

    graph, feeds, reference = _model(name)
    want = reference(feeds)
    # the kernels a user's session gets by default: tuned on every gear's shapes (kept in the kernel cache)
    options = {"ge.op_compiler_cache_dir": cache_dir} if cache_dir else {}
    sess = ort_session(to_onnx(graph))
    names = [o.name for o in sess.get_outputs()]
    bf16 = name in SERVING_BF16 if bf16 is None else bf16
    sides: dict[str, list[tuple[float, list[float], float, float]]] = {"batched": [], "unbatched": [], "ort": []}
    sides.update({"batched_bf16": []} if bf16 else {})
    monitor = LagMonitor()
    async with aioge.Session(options) as session:
        t = time.perf_counter()
        await session.add_graph(1, graph, _gear_options(graph, clients, batching=True))
        compile_s = time.perf_counter() - t
        await session.add_graph(2, graph)
        if bf16:
            lowp = {**_gear_options(graph, clients, batching=True), "ge.exec.precision_mode": "allow_fp32_to_bf16"}
            await session.add_graph(3, graph, lowp)
            got = await session.run_graph(3, feeds)
            for k, v in want.items():
                cosine = accuracy(got[k], v)["cosine"]
                assert cosine >= COSINE_FLOOR, f"{name} aioge bf16 output {k}: cosine {cosine:.6f}"
        for gid in (1, 2):
            got = await session.run_graph(gid, feeds)
            for k, v in want.items():
                np.testing.assert_allclose(got[k], v, rtol=1e-3, atol=1e-4, err_msg=f"{name} aioge graph {gid}")
        got_ort = dict(zip(names, sess.run(None, feeds)))
        for k, v in want.items():
            np.testing.assert_allclose(got_ort[k], v, rtol=1e-3, atol=1e-4, err_msg=f"{name} onnxruntime")
        with ThreadPoolExecutor(clients) as pool:
            await _aioge_round(session, 1, feeds, clients, 2, None)  # warm every side
            await _aioge_round(session, 2, feeds, clients, 2, None)
            if bf16:
                await _aioge_round(session, 3, feeds, clients, 2, None)
            await anyio.to_thread.run_sync(_ort_round, sess, feeds, pool, clients, 2)
            for _ in range(rounds):  # each side SETTLE_S after the last: onnxruntime's threads spin on
                await settle()
                sides["batched"].append(await _aioge_round(session, 1, feeds, clients, requests, monitor))
                await settle()
                sides["unbatched"].append(await _aioge_round(session, 2, feeds, clients, requests, None))
                await settle()
                sides["ort"].append(await anyio.to_thread.run_sync(_ort_round, sess, feeds, pool, clients, requests))
                if bf16:
                    await settle()
                    sides["batched_bf16"].append(await _aioge_round(session, 3, feeds, clients, requests, None))
        stats = session.batch_stats(1)
    row: dict[str, Any] = {"workload": name, "clients": clients, "requests_per_client": requests, "compile_s": compile_s}
    for side, samples in sides.items():
        row[f"{side}_rps"] = statistics.median(x[0] for x in samples)
        row[f"{side}_p50_s"] = statistics.median(percentile(x[1], 0.50) for x in samples)
        row[f"{side}_p99_s"] = statistics.median(percentile(x[1], 0.99) for x in samples)
        row[f"{side}_cpu_us"] = statistics.median(x[2] for x in samples) * 1e6  # process CPU per request
        if side != "ort":
            row[f"{side}_loop_cpu_us"] = statistics.median(x[3] for x in samples) * 1e6
    row["batched_vs_ort"] = row["batched_rps"] / row["ort_rps"]
    row["unbatched_vs_ort"] = row["unbatched_rps"] / row["ort_rps"]
    if bf16:
        row["batched_bf16_vs_ort"] = row["batched_bf16_rps"] / row["ort_rps"]
    row["lag_max_ms"], row["gc_max_ms"] = (max(x, default=0.0) * 1e3 for x in (monitor.lags, monitor.gc_pauses))
    row["lag_p99_ms"] = percentile(monitor.lags, 0.99) * 1e3
    row["lag_runq_ms"], row["lag_own_max_ms"] = (x * 1e3 for x in monitor.worst()[1:])
    row["mean_batch_rows"] = stats.mean_batch_rows
    row["queue_delay_p50_ms"] = stats.queue_delay_p50 * 1e3
    row["queue_delay_p99_ms"] = stats.queue_delay_p99 * 1e3
    return row
