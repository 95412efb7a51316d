"""compile_graph: the whole path from a user's graph to a CompiledModel, as a table of steps."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Sequence

import anyio

from aioge.compiler import tuning
from aioge.compiler.memory import plan_memory
from aioge.compiler.ops import (
    CachePolicy,
    KernelJob,
    KernelStep,
    KernelStore,
    cache_policy,
    compile_kernels,
    compile_kernels_sync,
    kernel_jobs,
    read_debug_config,
)
from aioge.compiler.precision import place_precision
from aioge.compiler.specialize import specialize
from aioge.compiler.streams import plan_streams
from aioge.compiler.threads import plan_threads
from aioge.engines import Engine
from aioge.engines.assign import assign_engines
from aioge.ir.graph import Graph, Node, ValueKind
from aioge.kernels import native, parallel
from aioge.ops.registry import get_schema
from aioge.ops.schema import KernelImpl
from aioge.options import CompileOptions
from aioge.passes import run_passes
from aioge.plan.kernel import KernelDesc
from aioge.plan.model import CompiledModel, CompileStats, NodePlan

__all__ = [
    "NATIVE_EXTRA",
    "NATIVE_SLACK_MS",
    "NATIVE_SPLIT_EXTRA",
    "compile_graph",
    "compile_graph_sync",
    "native_extra",
    "native_recheck_due",
    "optimised_graph",
    "prefer_native",
]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Front:
    """The graph after the first steps: specialised, optimised, engines assigned, kernels keyed."""

    graph: Graph
    fingerprint: str
    stats: CompileStats
    engines: dict[str, Engine]
    jobs: list[KernelJob]
    policy: CachePolicy


async def compile_graph(
    graph: Graph,
    signature: Sequence[tuple[str, tuple[int, ...]]],
    options: CompileOptions,
    *,
    limiter: anyio.CapacityLimiter | None = None,
    kernel_cache: KernelStore | None = None,
) -> CompiledModel:
    """Compile ``graph`` for the given input shapes, off the event loop.

    Specialise, passes and engines run in one worker thread; the node kernels then compile
    concurrently (once per key, through ``kernel_cache`` when given), each in a worker thread
    under ``limiter``; streams and memory are planned in a worker thread while the kernel
    cache does its bookkeeping (statistics, op_cache.ini, aging) beside it.

    Raises:
        GraphError: the graph is malformed or rejects the shapes.
        CompileError: no engine or kernel for some nodes.
        OptionError: ``op_debug_config`` names a file that cannot be read.
    """
    start = time.perf_counter()
    signature = tuple(signature)
    front = await anyio.to_thread.run_sync(_front, graph, signature, options, limiter=limiter)
    due = functools.partial(native_recheck_due, front.graph.nodes) if options.exec_mode == "sink" else None
    step = await compile_kernels(front.jobs, options, cache=kernel_cache, policy=front.policy, limiter=limiter, native_due=due)
    async with anyio.create_task_group() as tg:
        if step.bookkeeping is not None:
            tg.start_soon(step.bookkeeping)
        model = await anyio.to_thread.run_sync(_back, front, step.kernels, signature, options, limiter=limiter)
    _count(model.stats, step)
    model.stats.compile_seconds = time.perf_counter() - start
    return model


def compile_graph_sync(graph: Graph, signature: Sequence[tuple[str, tuple[int, ...]]], options: CompileOptions) -> CompiledModel:
    """The blocking form of ``compile_graph``, without a kernel cache."""
    start = time.perf_counter()
    front = _front(graph, tuple(signature), options)
    kernels = compile_kernels_sync(front.jobs, options)
    model = _back(front, kernels, tuple(signature), options)
    model.stats.kernels_compiled = len({k.key for k in kernels.values()})
    model.stats.kernel_cache_hits = 0
    model.stats.kernel_reuse_in_compile = len(kernels) - model.stats.kernels_compiled
    model.stats.compile_seconds = time.perf_counter() - start
    return model


def optimised_graph(
    graph: Graph, signature: Sequence[tuple[str, tuple[int, ...]]], options: CompileOptions, stats: CompileStats | None = None
) -> Graph:
    """The graph a compile plans: specialised to ``signature``, then the passes and the
    precision mode's placement (the same for the same graph in any process: the remote tier
    checks an entry against it)."""
    stats = CompileStats() if stats is None else stats
    g = specialize(graph, signature)
    stats.nodes_before_passes = len(g.nodes)
    stats.passes_applied = run_passes(g, options.optimization_switch)
    place_precision(g, options)
    return g


def _front(graph: Graph, signature: tuple[tuple[str, tuple[int, ...]], ...], options: CompileOptions) -> _Front:
    fingerprint = graph.fingerprint()
    stats = CompileStats()
    g = optimised_graph(graph, signature, options, stats)
    engines = assign_engines(g, options.exclude_engines)
    debug = read_debug_config(options.op_debug_config)
    jobs = kernel_jobs(g, engines, options, debug)
    return _Front(g, fingerprint, stats, engines, jobs, cache_policy(options, debug))


def _back(
    front: _Front, kernels: dict[str, KernelDesc], signature: tuple[tuple[str, tuple[int, ...]], ...], options: CompileOptions
) -> CompiledModel:
    g, engines = front.graph, front.engines
    order, streams = plan_streams(g, g.topological_order(), engines, options)
    memory = plan_memory(g, order, streams, reuse=not options.disable_reuse_memory)
    threads = plan_threads(order, streams, options.exec_threads)
    g.nodes[:] = order
    if options.exec_mode == "sink" and options.exec_threads == "auto" and len(threads) > 1:
        # a plan that can run as one native program runs in one thread: no Python between its
        # kernels, its big jobs split over an idle core. NASNetMobile's branches on 5 threads
        # took 17.5 ms a run, its program 7.2 ms of CPU.
        swapped = prefer_native(order, kernels)
        if all(_native_over(get_schema(d.op_type, d.domain).impl(d.impl), n) for n in order for d in [swapped[n.name]]):
            threads, kernels = (tuple(sorted(s for group in threads for s in group)),), swapped
    elif options.exec_mode == "sink" and (len(threads) == 1 if threads else streams.num_streams == 1):
        kernels = prefer_native(order, kernels)
    nodes = tuple(
        NodePlan(i, n.name, n.op_type, engines[n.name].value, streams.node_stream[i], kernels[n.name])
        for i, n in enumerate(order)
    )
    log.info("compiled %s: %d nodes, %d streams, arena %d bytes", g.name, len(nodes), streams.num_streams, memory.arena_bytes)
    return CompiledModel(g, nodes, streams, memory, front.fingerprint, signature, dict(options.raw), threads, stats=front.stats)


# A one-thread plan whose every kernel has a native form runs as one C call (runtime.native_program):
# no Python between its kernels, and concurrent runs of it on every core. Where tuning chose
# kernels without one, their native alternatives are taken when they cost at most
# NATIVE_EXTRA of the plan's tuned time more, plus NATIVE_SLACK_MS per node (the Python
# dispatch a program saves each step): a tenth, so that a long plan (run on a lane, where
# Python between kernels costs little) loses little; the builder transformer's swaps cost 3% of
# its kernels' time. MobileNetV3-small's (47 nodes) cost 8-13% in tuning's times on a busy
# machine: a flat 5 us of slack left it op by op in Python on one compile in two.
NATIVE_EXTRA, NATIVE_SLACK_MS = 0.10, 0.005
# Tuning times every candidate on one thread, but only a program splits its big jobs over the
# other cores (csrc/par.c); op by op, most kernels run on one (BLAS is held to one thread a
# call). With a second core the budget grows by NATIVE_SPLIT_EXTRA. ResNet-50 on the AVX2 tier
# of an AVX-512 machine (OpenBLAS on AVX-512): the native kernels 13.7% dearer in tuning, op by
# op 68-69 ms a run, as a program 49-50 ms.
NATIVE_SPLIT_EXTRA = 0.30


def native_extra() -> float:
    """The share of a plan's tuned time its native alternatives may cost more: NATIVE_EXTRA, and
    NATIVE_SPLIT_EXTRA more where a program can split its jobs over a second core."""
    return NATIVE_EXTRA + (NATIVE_SPLIT_EXTRA if parallel.CORES > 1 and native.par_run() is not None else 0.0)


def prefer_native(nodes: Sequence[Node], kernels: dict[str, KernelDesc]) -> dict[str, KernelDesc]:
    """``kernels`` with every node's native alternative taken, when each node has a native
    kernel or one, at NATIVE_EXTRA's cost at most; else ``kernels`` as they are."""
    found = _native_swaps(nodes, kernels)
    if found is None or not found[0] or found[1] > found[2]:
        return kernels
    log.info("native plan: %d kernel(s) swapped for native ones, %.1f us dearer", len(found[0]), found[1] * 1e3)
    return {**kernels, **found[0]}


def native_recheck_due(nodes: Sequence[Node], kernels: dict[str, KernelDesc]) -> list[str]:
    """The nodes whose native alternative a kernel-cache hit re-times (``compiler.ops``): the
    plan refuses its native alternatives on their cost, and these records have been re-timed
    fewer than ``tuning.NATIVE_RECHECKS`` times (a time tuned under load is not trusted for ever)."""
    found = _native_swaps(nodes, kernels)
    if found is None or not found[0] or found[1] <= found[2]:
        return []
    return [n for n in found[0] if kernels[n].history.native_checks < tuning.NATIVE_RECHECKS]


def _native_swaps(nodes: Sequence[Node], kernels: dict[str, KernelDesc]) -> tuple[dict[str, KernelDesc], float, float] | None:
    """The native alternatives a plan would take, the ms they cost more and the ms it may
    (NATIVE_EXTRA, NATIVE_SLACK_MS); None when some node has neither a native kernel nor one."""
    swaps: dict[str, KernelDesc] = {}
    extra = total = 0.0
    for node in nodes:
        d = kernels[node.name]
        total += d.history.tuned_ms
        schema = get_schema(d.op_type, d.domain)
        if _native_over(schema.impl(d.impl), node):
            continue
        if not d.history.native_alt or not _native_over(schema.impl(d.history.native_alt), node):
            return None
        extra += max(0.0, d.history.native_ms - d.history.tuned_ms)
        swaps[node.name], _ = tuning.revisit(d, "native")
    return swaps, extra, native_extra() * total + NATIVE_SLACK_MS * len(nodes)


def _native_over(impl: KernelImpl, node: Node) -> bool:
    """``impl`` has a native form over ``node``'s inputs: the ones it packs are constants."""
    return impl.native and all(
        i < len(node.inputs) and node.inputs[i] is not None and node.inputs[i].kind is ValueKind.CONSTANT  # type: ignore[union-attr]
        for i in impl.packs
    )


def _count(stats: CompileStats, step: KernelStep) -> None:
    stats.kernels_compiled = step.compiled
    stats.kernel_cache_hits = step.hits
    stats.kernel_shared_in_session = step.shared
    stats.kernel_reuse_in_compile = step.reused
    stats.kernels_rechecked = step.rechecked
    stats.kernels_retuned = step.retuned
