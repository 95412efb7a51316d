"""The op compiler: one KernelDesc per node, compiled concurrently, once per key, cached.

For every node (``compile_kernels``), in order: the in-process single flight (concurrent
compiles of one key share one), the kernel cache on disk, the key's cross-process file lock
(an optimisation only), the disk again, then the compile itself — choosing and tuning the
implementation (``compiler.tuning``) in a worker thread under the session's CPU limiter —
and an atomic publish of a self-validating entry. A loaded entry is used only if it still
describes a legal choice for the node (its impl applies, its parameters are candidates).

The cache mode (``ge.op_compiler_cache_mode``) and GE's debug switches decide, per node,
whether the disk is read and written: ``op_debug_level`` != 0, or an ``op_debug_config``
without an ``op_debug_list``, bypass the cache for the whole compile; with
``op_debug_list=OpA,OpB`` (node names or op types; ``opType::X`` for an op type only) the
listed nodes always recompile and the others follow the mode.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Mapping, Sequence

import anyio
import numpy as np

from aioge.compiler.kernel import KernelDesc, kernel_key, kernel_key_parts, signature_of
from aioge.compiler.singleflight import SingleFlight
from aioge.compiler.tuning import Choice, candidates_of, select_kernel
from aioge.engines import Engine
from aioge.errors import CompileError, OptionError
from aioge.ir.fingerprint import array_digest
from aioge.ir.graph import Graph, Node, ValueKind
from aioge.ops.registry import get_schema
from aioge.ops.schema import OpSchema
from aioge.options import CompileOptions

if TYPE_CHECKING:
    from aioge.cache.kernel_cache import CacheView, KernelCache

__all__ = [
    "CachePolicy",
    "DebugConfig",
    "KernelJob",
    "KernelStep",
    "cache_policy",
    "choose_impl",
    "compile_kernel_sync",
    "compile_kernels",
    "compile_kernels_sync",
    "kernel_jobs",
    "read_debug_config",
]

log = logging.getLogger(__name__)

_MAX_DEBUG_CONFIG_BYTES = 1 << 20


# -- debug switches and cache policy ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DebugConfig:
    """GE's op debug config file, as far as the cache cares: its digest (part of every key)
    and its ``op_debug_list`` (None when it has none)."""

    path: str = ""
    digest: str = ""
    names: frozenset[str] | None = None  # node names or op types
    op_types: frozenset[str] = frozenset()  # ``opType::X`` entries

    def lists(self, node: Node) -> bool:
        """True when the node is in ``op_debug_list`` (by name or op type)."""
        if self.names is None:
            return False
        return node.name in self.names or node.op_type in self.names or node.op_type in self.op_types


def read_debug_config(path: str) -> DebugConfig:
    """Parse an ``op_debug_config`` file: ``key = value`` lines, ``#`` comments; the
    ``op_debug_list`` value is a comma-separated list of node names or op types.

    Raises:
        OptionError: the file cannot be read.
    """
    if not path:
        return DebugConfig()
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_DEBUG_CONFIG_BYTES + 1)
    except OSError as exc:
        raise OptionError("op_debug_config", path, f"a readable op debug config file ({exc.strerror})") from None
    if len(data) > _MAX_DEBUG_CONFIG_BYTES:
        raise OptionError("op_debug_config", path, f"a config file of at most {_MAX_DEBUG_CONFIG_BYTES} bytes")
    names: set[str] | None = None
    types: set[str] = set()
    for line in data.decode("utf-8", "replace").splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and key.strip() == "op_debug_list":
            names = set() if names is None else names
            for item in filter(None, (s.strip() for s in value.split(","))):
                if item.startswith("opType::"):
                    types.add(item[len("opType::"):])
                else:
                    names.add(item)
    return DebugConfig(path, hashlib.sha256(data).hexdigest(), None if names is None else frozenset(names), frozenset(types))


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Whether a compile reads and writes the kernel cache (before per-node debug lists)."""

    read: bool
    write: bool
    reason: str = ""

    @property
    def uses_disk(self) -> bool:
        return self.read or self.write


def cache_policy(options: CompileOptions, debug: DebugConfig) -> CachePolicy:
    """The compile-wide policy: the mode, unless a debug switch bypasses the cache."""
    if options.op_debug_level != 0:
        return CachePolicy(False, False, f"op_debug_level={options.op_debug_level}")
    if debug.path and debug.names is None:
        return CachePolicy(False, False, "op_debug_config without op_debug_list")
    mode = options.op_cache_mode
    return CachePolicy(mode == "enable", mode in ("enable", "force"), f"mode {mode}")


# -- jobs: what to compile, by key ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KernelJob:
    """One node to compile: its engine, kernel key, and whether a debug list forces a recompile."""

    node: Node
    engine: Engine
    key: str
    listed: bool = False


def _const_inputs(node: Node) -> dict[int, str]:
    # Integer and bool constants are structure (shapes, axes, indices) and may change the
    # best kernel; float constants are data (weights) that kernels do not specialise on.
    out = {}
    for i, v in enumerate(node.inputs):
        if v is not None and v.kind is ValueKind.CONSTANT and v.data is not None and v.data.dtype.kind in "biu":
            out[i] = array_digest(v.data)
    return out


def kernel_jobs(graph: Graph, engines: Mapping[str, Engine], options: CompileOptions, debug: DebugConfig | None = None) -> list[KernelJob]:
    """The kernel key of every node (blocking: hashes; run it off the loop)."""
    debug = debug or DebugConfig()
    jobs = []
    for node in graph.nodes:
        schema = get_schema(node.op_type, node.domain)
        engine = engines[node.name]
        parts = kernel_key_parts(
            node, engine.value, soc=options.soc_version, op_debug_level=options.op_debug_level,
            impl_version=schema.version, const_inputs=_const_inputs(node), op_debug_config=debug.digest,
            tune_mode=options.tune_mode, impls=[i.name for i in schema.impls],
        )
        jobs.append(KernelJob(node, engine, kernel_key(parts), debug.lists(node)))
    return jobs


# -- compiling one kernel ---------------------------------------------------------------------


def choose_impl(node: Node) -> str:
    """The name of the first implementation of the node's op that applies to its signature.

    Raises:
        CompileError: no implementation applies.
    """
    schema = get_schema(node.op_type, node.domain)
    cands = candidates_of(schema, [v.desc if v is not None else None for v in node.inputs], node.attrs)
    if not cands:
        raise _no_kernel(node)
    return cands[0][0].name


def _no_kernel(node: Node) -> CompileError:
    descs = [str(v.desc) if v is not None else None for v in node.inputs]
    return CompileError(f"no kernel of {node.op_type} applies to inputs {descs} with attributes {node.attrs}",
                        graph=node.graph.name, nodes=[node.name])


def compile_kernel_sync(node: Node, engine: Engine, options: CompileOptions, key: str, schema: OpSchema | None = None) -> KernelDesc:
    """Compile one node: choose (and in ``tune`` mode time) its implementation. Blocking.

    Raises:
        CompileError: no implementation applies to the node.
    """
    schema = schema or get_schema(node.op_type, node.domain)
    in_descs = [v.desc if v is not None else None for v in node.inputs]
    consts = [v.data if v is not None and v.kind in (ValueKind.CONSTANT, ValueKind.VARIABLE) else None for v in node.inputs]
    choice: Choice | None = select_kernel(
        schema, in_descs, [o.desc for o in node.outputs], node.attrs, consts,
        mode=options.tune_mode, budget_ms=options.tune_budget_ms, seed=int(hashlib.sha256(key.encode()).hexdigest()[:8], 16),
    )
    if choice is None:
        raise _no_kernel(node)
    ins, outs = signature_of(node)
    return KernelDesc(key, node.op_type, node.domain, engine.value, ins, outs, choice.impl, dict(choice.params), 0, choice.tuned)


def check_loaded(desc: KernelDesc, job: KernelJob) -> str:
    """Why a loaded kernel cannot serve the job's node, or '' when it can (a self-check on
    top of the key: the entry must still be a legal choice for this node)."""
    node = job.node
    if (desc.op_type, desc.domain, desc.engine) != (node.op_type, node.domain, job.engine.value):
        return f"it is a {desc.op_type} kernel for {desc.engine}"
    if (desc.inputs, desc.outputs) != signature_of(node):
        return "its signature differs from the node's"
    schema = get_schema(node.op_type, node.domain)
    descs = [v.desc if v is not None else None for v in node.inputs]
    for impl, params in candidates_of(schema, descs, node.attrs):
        if impl.name == desc.impl and _same_params(params, desc.params):
            return ""
    return f"implementation {desc.impl!r} with {dict(desc.params)} is not a candidate for this node"


def _same_params(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def norm(v: Any) -> Any:
        return tuple(norm(x) for x in v) if isinstance(v, (list, tuple)) else v.item() if isinstance(v, np.generic) else v

    return {k: norm(v) for k, v in a.items()} == {k: norm(v) for k, v in b.items()}


# -- compiling a graph's kernels ----------------------------------------------------------


@dataclass(slots=True)
class KernelStep:
    """The kernel step's result: a desc per node name, counts, and the cache bookkeeping to
    run beside the rest of the compile (statistics, op_cache.ini, aging)."""

    kernels: dict[str, KernelDesc]
    compiled: int = 0  # kernels this compile compiled itself
    hits: int = 0  # loaded from disk
    shared: int = 0  # got from a concurrent compile of the same key
    misses: int = 0  # looked up on disk and not found (or unusable)
    invalid: int = 0
    written: int = 0  # bytes published
    policy: CachePolicy = field(default_factory=lambda: CachePolicy(False, False))
    bookkeeping: Callable[[], Coroutine[Any, Any, Any]] | None = None


async def compile_kernels(
    jobs: Sequence[KernelJob],
    options: CompileOptions,
    *,
    cache: KernelCache | None = None,
    policy: CachePolicy | None = None,
    limiter: anyio.CapacityLimiter | None = None,
) -> KernelStep:
    """Compile every job's kernel concurrently: once per key, through the cache.

    Raises:
        CompileError: a node has no applicable kernel (the first failing node in graph
            order; the other compiles are cancelled).
    """
    policy = policy or (cache_policy(options, DebugConfig()) if cache is not None else CachePolicy(False, False))
    if cache is None:
        policy = CachePolicy(False, False, "no kernel cache")
    flights: SingleFlight[Any, Any] = cache.flights if cache is not None else SingleFlight()
    view = await cache.open_view(force=options.op_cache_mode == "force") if cache is not None and policy.uses_disk else None
    step = KernelStep({}, policy=policy)
    errors: dict[str, Exception] = {}
    if view is None and cache is not None:
        log.debug("kernel cache bypassed: %s", policy.reason)

    async def one(job: KernelJob, tg: anyio.abc.TaskGroup) -> None:
        read = policy.read and not job.listed
        write = policy.write and not job.listed
        flight = (job.key, view.generation if view is not None else None, read, write)
        try:
            (desc, how), joined = await flights.run(flight, lambda: _obtain(job, options, cache, view, read, write, limiter, step))
        except Exception as exc:
            errors[job.node.name] = exc
            tg.cancel_scope.cancel()
            return
        if desc.key != job.key:  # pragma: no cover - a flight is keyed by the kernel key
            raise CompileError(f"kernel {desc.key} returned for key {job.key}", nodes=[job.node.name])
        step.kernels[job.node.name] = desc
        if joined:
            step.shared += 1
        elif how == "hit":
            step.hits += 1
        else:
            step.compiled += 1

    async with anyio.create_task_group() as tg:
        for job in jobs:
            tg.start_soon(one, job, tg)
    if errors:
        first = next(j.node.name for j in jobs if j.node.name in errors)
        raise errors[first]
    if view is not None and cache is not None:
        counts = {"hits": step.hits, "misses": step.misses, "compiles": step.compiled, "invalid": step.invalid,
                  "written": step.written}
        step.bookkeeping = lambda: cache.after_compile(**counts)
    return step


async def _obtain(
    job: KernelJob, options: CompileOptions, cache: KernelCache | None, view: CacheView | None,
    read: bool, write: bool, limiter: anyio.CapacityLimiter | None, step: KernelStep,
) -> tuple[KernelDesc, str]:
    """Leader's work for one key: disk, lock, disk again, compile, publish."""
    if cache is None or view is None or not (read or write):
        return await _compile(job, options, limiter), "compiled"
    if read:
        found = await _load(job, cache, view, step)
        if found is not None:
            return found, "hit"
    async with cache.key_lock(job.key, view) as held:
        if read and held:
            # Another process may have compiled it while we waited for the lock.
            found = await _load(job, cache, view, step, recheck=True)
            if found is not None:
                return found, "hit"
        if read:
            step.misses += 1
        desc = await _compile(job, options, limiter)
        if write:
            step.written += await cache.store(desc, view)
    return desc, "compiled"


async def _load(job: KernelJob, cache: KernelCache, view: CacheView, step: KernelStep, recheck: bool = False) -> KernelDesc | None:
    result = await cache.load(job.key, view)
    if result.desc is None:
        if result.status == "invalid" and not recheck:
            step.invalid += 1
        return None
    reason = check_loaded(result.desc, job)
    if reason:
        if not recheck:
            step.invalid += 1
        log.warning("kernel cache entry %s cannot serve node %r (%s); recompiling", job.key, job.node.name, reason)
        return None
    return result.desc


async def _compile(job: KernelJob, options: CompileOptions, limiter: anyio.CapacityLimiter | None) -> KernelDesc:
    return await anyio.to_thread.run_sync(compile_kernel_sync, job.node, job.engine, options, job.key, limiter=limiter)


def compile_kernels_sync(jobs: Sequence[KernelJob], options: CompileOptions) -> dict[str, KernelDesc]:
    """The blocking form without a cache: each key compiled once, one after another."""
    by_key: dict[str, KernelDesc] = {}
    out = {}
    for job in jobs:
        if job.key not in by_key:
            by_key[job.key] = compile_kernel_sync(job.node, job.engine, options, job.key)
        out[job.node.name] = by_key[job.key]
    return out
