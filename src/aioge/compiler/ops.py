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
``op_debug_list=OpA,OpB`` (node names or op types; ``OpType::X`` for an op type only; keys
and the prefix in any case, as GE's docs spell them both ways) the listed nodes always
recompile and the others follow the mode.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Literal, Mapping, Protocol, Sequence

import anyio
import numpy as np

from aioge._util.singleflight import SingleFlight
from aioge.compiler import tuning
from aioge.compiler.tuning import Choice
from aioge.engines import Engine
from aioge.errors import CompileError, OptionError
from aioge.ir.fingerprint import array_digest
from aioge.ir.graph import Graph, Node, ValueKind
from aioge.kernels import native
from aioge.keys import kernel_key, kernel_key_parts, signature_of
from aioge.ops.registry import get_schema
from aioge.ops.schema import OpSchema
from aioge.options import CompileOptions
from aioge.plan import kernel as kernel_plan
from aioge.plan.kernel import KernelDesc, TuningRecord, candidates_of


class KernelView(Protocol):
    """What one graph compile sees of a kernel cache: the generation it reads and writes."""

    @property
    def generation(self) -> str: ...


class KernelLookup(Protocol):
    """A kernel cache lookup: the desc on a hit; ``status`` is "hit", "absent" or "invalid"."""

    @property
    def desc(self) -> KernelDesc | None: ...

    @property
    def status(self) -> str: ...


class KernelStore(Protocol):
    """What the compiler needs of a kernel cache (``cache.kernel_cache.KernelCache`` is one):
    the compiler reaches the cache through this and nothing else."""

    flights: SingleFlight[Any, Any]  # in-process single flights, shared by the session's compiles

    async def open_view(self, *, force: bool) -> KernelView | None: ...

    async def close_view(self, view: Any) -> None: ...

    async def load(self, key: str, view: Any) -> KernelLookup: ...

    async def store(self, desc: KernelDesc, view: Any) -> int: ...

    def key_lock(self, key: str, view: Any) -> AbstractAsyncContextManager[bool]: ...

    async def after_compile(self, *, hits: int, misses: int, compiles: int, invalid: int, written: int) -> Any: ...


__all__ = [
    "DEBUG_SWITCHES",
    "CachePolicy",
    "DebugConfig",
    "KernelJob",
    "KernelLookup",
    "KernelStep",
    "KernelStore",
    "KernelView",
    "cache_policy",
    "check_loaded",
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


# GE's op_debug_config switches (its ATC and option docs); aioge keys them, it has no ccec.
DEBUG_SWITCHES = frozenset({"oom", "dump_bin", "dump_cce", "dump_loc", "ccec_O0", "ccec_g", "check_flag"})


def read_debug_config(path: str) -> DebugConfig:
    """Parse an ``op_debug_config`` file: ``key = value`` lines, ``#`` comments. Keys are
    GE's ``op_debug_config`` (comma-separated switches) and ``op_debug_list`` (comma-separated
    node names or op types, ``OpType::X`` for an op type only), in any case: GE's docs spell
    them ``OP_DEBUG_LIST`` and ``OpType::`` in the text and lower case in the examples.
    Anything else (another key, a line without ``=``, an unknown switch or prefix) is one
    warning naming the file and what was expected, and is ignored.

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
    switches = {s.lower(): s for s in DEBUG_SWITCHES}
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key = key.strip().lower()
        items = [s.strip() for s in value.split(",") if s.strip()]
        if sep and key == "op_debug_list":
            names = set() if names is None else names
            for item in items:
                prefix, colons, op_type = item.partition("::")
                if not colons:
                    names.add(item)
                elif prefix.lower() == "optype" and op_type:
                    types.add(op_type)
                else:
                    log.warning(
                        "%s:%d: op_debug_list entry %r is ignored: expected a node name, an op type, or OpType::<type>",
                        path,
                        number,
                        item,
                    )
        elif sep and key == "op_debug_config":
            unknown = [s for s in items if s.lower() not in switches]
            if unknown:
                log.warning(
                    "%s:%d: unknown op_debug_config switches %s are ignored (known: %s)",
                    path,
                    number,
                    ", ".join(map(repr, unknown)),
                    ", ".join(sorted(DEBUG_SWITCHES)),
                )
        else:
            log.warning(
                "%s:%d: %r is ignored: expected op_debug_config = <switches> or op_debug_list = <ops> "
                "(without op_debug_list the kernel cache is bypassed for every op, as in GE)",
                path,
                number,
                raw.strip()[:80],
            )
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
        return CachePolicy(False, False, f"ge.opDebugLevel (op_debug_level)={options.op_debug_level}")
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


def kernel_jobs(
    graph: Graph, engines: Mapping[str, Engine], options: CompileOptions, debug: DebugConfig | None = None
) -> list[KernelJob]:
    """The kernel key of every node (blocking: hashes; run it off the loop)."""
    debug = debug or DebugConfig()
    jobs = []
    for node in graph.nodes:
        schema = get_schema(node.op_type, node.domain)
        engine = engines[node.name]
        parts = kernel_key_parts(
            node,
            engine.value,
            soc=options.soc_version,
            op_debug_level=options.op_debug_level,
            impl_version=schema.version,
            const_inputs=_const_inputs(node),
            op_debug_config=debug.digest,
            tune_mode=options.tune_mode,
            impls=[i.name for i in schema.impls],
            native=native.tier(),
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
    return CompileError(
        f"no kernel of {node.op_type} applies to inputs {descs} with attributes {node.attrs}",
        graph=node.graph.name,
        nodes=[node.name],
    )


def compile_kernel_sync(
    node: Node, engine: Engine, options: CompileOptions, key: str, schema: OpSchema | None = None
) -> KernelDesc:
    """Compile one node: choose (and in ``tune`` mode time) its implementation. Blocking.

    Raises:
        CompileError: no implementation applies to the node.
    """
    schema = schema or get_schema(node.op_type, node.domain)
    in_descs = [v.desc if v is not None else None for v in node.inputs]
    choice: Choice | None = tuning.select_kernel(
        schema,
        in_descs,
        [o.desc for o in node.outputs],
        node.attrs,
        _const_values(node),
        mode=options.tune_mode,
        budget_ms=options.tune_budget_ms,
        seed=_seed(key),
    )
    if choice is None:
        raise _no_kernel(node)
    ins, outs = signature_of(node)
    alt, alt_params = choice.alternative or ("", {})
    n_impl, n_params, n_ms = choice.native_alt or ("", {}, 0.0)
    seen = TuningRecord(
        round(choice.best_ms, 6), alt, dict(alt_params), round(choice.margin, 4), 0, n_impl, dict(n_params), round(n_ms, 6)
    )
    params = dict(choice.params)
    return KernelDesc(key, node.op_type, node.domain, engine.value, ins, outs, choice.impl, params, 0, choice.tuned, seen)


def revisit_kernel_sync(
    node: Node, engine: Engine, options: CompileOptions, desc: KernelDesc, stage: Literal["hit", "fresh"]
) -> tuple[KernelDesc, str]:
    """``tuning.revisit`` of a node's close call, blocking. A ``fresh`` one is tuned again over
    every candidate on a quarter of the budget: a kernel that splits over the other core, timed
    while that core was busy, can rank third (the builder transformer's first FusedMatMul came
    out numpy's at 75 us, runner-up np.dot, its compiled kernel at 44 us behind both)."""
    schema = get_schema(node.op_type, node.domain)
    ins, outs, h = [v.desc if v is not None else None for v in node.inputs], [o.desc for o in node.outputs], desc.history

    def retime() -> tuning.Recheck:
        chosen, runner = (desc.impl, desc.params), (h.runner_up, h.runner_up_params)
        consts, budget = _const_values(node), options.tune_budget_ms
        return tuning.recheck(
            schema, ins, outs, node.attrs, consts, chosen, runner, h.tuned_ms, budget_ms=budget, seed=_seed(desc.key)
        )

    budget = options if stage == "hit" else dataclasses.replace(options, tune_budget_ms=options.tune_budget_ms / 4)
    return tuning.revisit(desc, stage, retime=retime, retune=lambda: compile_kernel_sync(node, engine, budget, desc.key, schema))


def retime_native_sync(node: Node, options: CompileOptions, desc: KernelDesc) -> KernelDesc | None:
    """A hit's choice re-timed against its native alternative (``tuning.recheck``'s rounds): the
    desc with both times new and one more native check, or None when the two cannot be timed here."""
    schema, h = get_schema(node.op_type, node.domain), desc.history
    ins, outs = [v.desc if v is not None else None for v in node.inputs], [o.desc for o in node.outputs]
    pair = (desc.impl, desc.params), (h.native_alt, h.native_alt_params)
    found = tuning.recheck(
        schema, ins, outs, node.attrs, _const_values(node), *pair, 0.0, budget_ms=options.tune_budget_ms, seed=_seed(desc.key)
    )
    if found.outcome == "skipped":
        log.debug("kernel %s: native alternative not re-timed: %s", desc.key, found.why)
        return None
    was = f"(recorded {h.tuned_ms:.4f} and {h.native_ms:.4f})"
    log.info(
        "kernel %s re-timed: %s %.4f ms, native %s %.4f ms %s",
        desc.key,
        desc.impl,
        found.chosen_ms,
        h.native_alt,
        found.runner_ms,
        was,
    )
    record = dataclasses.replace(
        h, tuned_ms=round(found.chosen_ms, 6), native_ms=round(found.runner_ms, 6), native_checks=h.native_checks + 1
    )
    return dataclasses.replace(desc, history=record)


def _const_values(node: Node) -> list[np.ndarray | None]:
    return [v.data if v is not None and v.kind in (ValueKind.CONSTANT, ValueKind.VARIABLE) else None for v in node.inputs]


def _seed(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def check_loaded(desc: KernelDesc, job: KernelJob) -> str:
    """Why a loaded kernel cannot serve the job's node, or '' when it can (a self-check on
    top of the key: the entry must still be a legal choice for this node)."""
    return kernel_plan.check_kernel(desc, job.node, job.engine.value)


# -- compiling a graph's kernels ----------------------------------------------------------


@dataclass(slots=True)
class KernelStep:
    """The kernel step's result: a desc per node name, counts, and the cache bookkeeping to
    run beside the rest of the compile (statistics, op_cache.ini, aging).

    Every node's kernel is counted once, by where it came from: ``compiled`` + ``hits`` +
    ``shared`` + ``reused`` == the number of nodes."""

    kernels: dict[str, KernelDesc]
    compiled: int = 0  # kernels this compile compiled itself
    hits: int = 0  # served by the cache: loaded from disk, or (when reading) a concurrent compile's
    shared: int = 0  # not reading the cache (disable, a listed op): got from a concurrent compile in the session
    reused: int = 0  # nodes whose key another node of this compile has: one kernel serves them all
    misses: int = 0  # looked up on disk and not found (or unusable)
    rechecked: int = 0  # close calls revisited (``revisit_kernel_sync``): tuned here, or cache hits
    retuned: int = 0  # of those, the ones whose choice changed (and was written back)
    fresh: dict[str, KernelJob] = field(default_factory=dict)  # keys this compile tuned, by their leader job
    invalid: int = 0
    written: int = 0  # bytes published
    policy: CachePolicy = field(default_factory=lambda: CachePolicy(False, False))
    bookkeeping: Callable[[], Coroutine[Any, Any, Any]] | None = None


async def compile_kernels(
    jobs: Sequence[KernelJob],
    options: CompileOptions,
    *,
    cache: KernelStore | None = None,
    policy: CachePolicy | None = None,
    limiter: anyio.CapacityLimiter | None = None,
    native_due: Callable[[dict[str, KernelDesc]], list[str]] | None = None,
) -> KernelStep:
    """Compile every job's kernel concurrently: once per key, through the cache. ``native_due``
    (``compiler.graph.native_recheck_due``): the nodes whose native alternative a hit re-times.

    Raises:
        CompileError: a node has no applicable kernel (the first failing node in graph
            order; the other compiles are cancelled).
    """
    policy = policy or (cache_policy(options, DebugConfig()) if cache is not None else CachePolicy(False, False))
    if cache is None:
        policy = CachePolicy(False, False, "no kernel cache")
    flights: SingleFlight[Any, Any] = cache.flights if cache is not None else SingleFlight()
    # None also when the cache dir is not trusted (it said so): the compile then bypasses it.
    view = await cache.open_view(force=options.op_cache_mode == "force") if cache is not None and policy.uses_disk else None
    step = KernelStep({}, policy=policy)
    if view is None and cache is not None:
        log.debug("kernel cache bypassed: %s", policy.reason)
    try:
        await _compile_groups(jobs, options, cache, view, policy, flights, limiter, step)
        if options.tune_mode == "tune":
            await _second_opinions(step, options, cache, view, policy, limiter)
            if native_due is not None:
                await _native_rechecks(jobs, native_due(step.kernels), step, options, cache, view, policy, limiter)
    finally:
        if view is not None and cache is not None:
            with anyio.CancelScope(shield=True):  # the generation hold is released even when cancelled
                await cache.close_view(view)
    if view is not None and cache is not None:
        counts = {
            "hits": step.hits,
            "misses": step.misses,
            "compiles": step.compiled,
            "invalid": step.invalid,
            "written": step.written,
        }
        step.bookkeeping = lambda: cache.after_compile(**counts)
    return step


async def _compile_groups(
    jobs: Sequence[KernelJob],
    options: CompileOptions,
    cache: KernelStore | None,
    view: KernelView | None,
    policy: CachePolicy,
    flights: SingleFlight[Any, Any],
    limiter: anyio.CapacityLimiter | None,
    step: KernelStep,
) -> None:
    # Nodes with one key (and one way to get it) are one job: the first in graph order gets
    # the kernel, the others reuse it. That is reuse within the compile, not a cache hit.
    groups: dict[tuple[Any, ...], list[KernelJob]] = {}
    for job in jobs:
        read = view is not None and policy.read and not job.listed
        write = view is not None and policy.write and not job.listed
        groups.setdefault((job.key, view.generation if view is not None else None, read, write), []).append(job)
    errors: dict[str, Exception] = {}

    async def one(flight: tuple[Any, ...], group: list[KernelJob], tg: anyio.abc.TaskGroup) -> None:
        job, (_, _, read, write) = group[0], flight
        try:
            (desc, how), joined = await flights.run(
                flight, lambda: _obtain(job, options, cache, view, read, write, limiter, step)
            )
        except Exception as exc:
            errors[job.node.name] = exc
            tg.cancel_scope.cancel()
            return
        if desc.key != job.key:  # pragma: no cover - a flight is keyed by the kernel key
            raise CompileError(f"kernel {desc.key} returned for key {job.key}", nodes=[job.node.name])
        for j in group:
            step.kernels[j.node.name] = desc
        step.reused += len(group) - 1
        if joined and read:
            step.hits += 1  # a concurrent compile's lookup or compile, for a compile that reads the cache
        elif joined:
            step.shared += 1
        elif how == "hit":
            step.hits += 1
        else:
            step.compiled += 1
            step.fresh[job.key] = job

    async with anyio.create_task_group() as tg:
        for flight, group in groups.items():
            tg.start_soon(one, flight, group, tg)
    if errors:
        first = next(j.node.name for j in jobs if j.node.name in errors)
        raise errors[first]


async def _obtain(
    job: KernelJob,
    options: CompileOptions,
    cache: KernelStore | None,
    view: KernelView | None,
    read: bool,
    write: bool,
    limiter: anyio.CapacityLimiter | None,
    step: KernelStep,
) -> tuple[KernelDesc, str]:
    """Leader's work for one key: disk, lock, disk again, compile, publish."""
    if cache is None or view is None or not (read or write):
        return await _compile(job, options, limiter), "compiled"
    if read:
        found = await _load(job, cache, view, step)
        if found is not None:
            return await _recheck(job, found, options, cache, view, write, limiter, step), "hit"
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
            written = await cache.store(desc, view)
            step.written += written  # not ``+= await``: that reads the sum before the await and loses concurrent stores
    return desc, "compiled"


async def _load(
    job: KernelJob, cache: KernelStore, view: KernelView, step: KernelStep, recheck: bool = False
) -> KernelDesc | None:
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


async def _recheck(
    job: KernelJob,
    desc: KernelDesc,
    options: CompileOptions,
    cache: KernelStore,
    view: KernelView,
    write: bool,
    limiter: anyio.CapacityLimiter | None,
    step: KernelStep,
) -> KernelDesc:
    """A hit, with its close call re-timed in tune mode; what the re-timing learnt is written
    back (when the compile writes), so an entry is re-timed ``RECHECKS`` times at most."""
    if options.tune_mode != "tune" or not tuning.close_call(desc):
        return desc
    new, outcome = await anyio.to_thread.run_sync(
        revisit_kernel_sync, job.node, job.engine, options, desc, "hit", limiter=limiter
    )
    if outcome == "skipped":
        return desc
    step.rechecked += 1
    step.retuned += (new.impl, new.params) != (desc.impl, desc.params)
    if write:
        step.written += await cache.store(new, view)
    return new


async def _second_opinions(
    step: KernelStep,
    options: CompileOptions,
    cache: KernelStore | None,
    view: KernelView | None,
    policy: CachePolicy,
    limiter: anyio.CapacityLimiter | None,
) -> None:
    """The close calls this compile tuned, tuned once more after all of its tuning
    (``revisit_kernel_sync``, stage ``fresh``): a second opinion seconds later, past a burst of load on the other core
    during one op's tuning, which makes a kernel that splits look no faster than one that does
    not. The outcome replaces the kernel of every node with the key and is written over the
    entry (``checks`` 1: a hit does not re-time it)."""
    for key, job in step.fresh.items():
        desc = step.kernels[job.node.name]
        if not tuning.close_call(desc):
            continue
        new, _ = await anyio.to_thread.run_sync(
            revisit_kernel_sync, job.node, job.engine, options, desc, "fresh", limiter=limiter
        )
        step.rechecked += 1
        step.retuned += (new.impl, new.params) != (desc.impl, desc.params)
        for name, d in step.kernels.items():
            if d.key == key:
                step.kernels[name] = new
        if cache is not None and view is not None and policy.write and not job.listed:
            step.written += await cache.store(new, view)


async def _native_rechecks(
    jobs: Sequence[KernelJob],
    names: list[str],
    step: KernelStep,
    options: CompileOptions,
    cache: KernelStore | None,
    view: KernelView | None,
    policy: CachePolicy,
    limiter: anyio.CapacityLimiter | None,
) -> None:
    """The hits among ``names`` re-timed against their native alternatives (``retime_native_sync``),
    each key once; the new times replace the kernel of every node with the key and are written
    over the entry. Kernels tuned in this compile keep their times: they are this process's."""
    by_name, done = {j.node.name: j for j in jobs}, set(step.fresh)
    for name in names:
        job, desc = by_name[name], step.kernels[name]
        if desc.key in done:
            continue
        done.add(desc.key)
        new = await anyio.to_thread.run_sync(retime_native_sync, job.node, options, desc, limiter=limiter)
        if new is None:
            continue
        for n, d in step.kernels.items():
            if d.key == desc.key:
                step.kernels[n] = new
        if cache is not None and view is not None and policy.write and not job.listed:
            step.written += await cache.store(new, view)


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
