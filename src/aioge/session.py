"""Session: the public face. Add graphs, build them, run them, concurrently and off the event loop."""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any, Mapping

import anyio
import numpy as np

from aioge.cache.kernel_cache import KernelCache
from aioge.cache.remote import TieredKernelStore, remote_tier_for
from aioge.compiler import cached as graph_cache
from aioge.compiler.graph import compile_graph
from aioge.compiler.specialize import input_signature, with_static_shapes
from aioge.errors import FeedError, GraphError, GraphIdError, OptionError, SessionClosedError
from aioge.ir.graph import Graph, IOInfo
from aioge.options import CompileOptions, check_options, resolve_options
from aioge.plan.model import CompiledModel
from aioge.runtime.devices import DevicePool
from aioge.runtime.engines import Engines
from aioge.runtime.executor import Executable
from aioge.runtime.feeds import FEED_KEYS, FeedKey, feed_arrays, feed_key
from aioge.runtime.workers import EngineWorkers
from aioge.serving.batcher import BatchStats
from aioge.serving.gears import GearSet, batched_outputs, gear_set, gear_set_of_model
from aioge.serving.served import ServedModel, Signature, bucket_sizes, static_tail

__all__ = ["ANONYMOUS_GRAPHS", "Session"]

log = logging.getLogger(__name__)

# How many graphs ``Session.run`` keeps registered (with their builds) per session, least
# recently run dropped first. The entry holds the graph itself, so a key of ``id(graph)`` can
# never name another graph while its entry lives; the bound is what keeps a loop that builds a
# fresh graph per call from holding every graph and arena it ever ran.
ANONYMOUS_GRAPHS = 16

_OptionsKey = tuple[tuple[str, str], ...]


def _evict_builds(entry: _GraphEntry) -> None:
    """Drop the least recently run builds past the bound, which is at least the batch sizes
    batching compiles (a run in flight keeps its own)."""
    gears = entry.served.gears if entry.served is not None else None
    keep = frozenset(gears.signatures) if gears is not None else frozenset()
    extra = [s for s in entry.builds if s not in keep]
    bound = max(entry.resolved.max_builds_per_graph, len(bucket_sizes(entry.resolved)))
    for signature in extra[: max(0, len(extra) - bound)]:
        del entry.builds[signature]
        log.info("graph %r: dropped the build for %s (aioge.max_builds_per_graph)", entry.graph.name, signature)


@dataclass(slots=True)
class _GraphEntry:
    graph_id: int
    graph: Graph
    options: dict[str, str]
    resolved: CompileOptions
    # Builds by input signature, least recently run first: past ``aioge.max_builds_per_graph``
    # (default 8) beside the gears, the oldest is dropped and compiled again if it comes back.
    builds: OrderedDict[Signature, Executable] = field(default_factory=OrderedDict)
    lock: anyio.Lock | None = None
    last: Signature | None = None
    graph_cache: graph_cache.GraphCache | None = None  # when ge.graph_compiler_cache_dir and ge.graph_key are set
    served: ServedModel | None = None  # with gears (all built when the graph is added) or batching
    checked: dict[FeedKey, Signature] = field(default_factory=dict)  # feed layouts already checked


def _release_unclosed(engines: Engines) -> None:
    """Finalizer of a session dropped without ``aclose()``: stop its threads and processes
    (without blocking: they end after their queued work), then warn as an unclosed file does."""
    workers, devices = engines.workers, engines.devices
    engines.workers = engines.devices = None
    held = []
    if workers is not None:
        workers.stop_nowait()
        held.append(f"{workers.threads} engine thread(s)")
    if devices is not None and devices.started:
        devices.stop_nowait()
        held.append(f"{devices.count} device process(es)")
    if held:
        warnings.warn(
            f"unclosed aioge.Session holding {' and '.join(held)}; use 'async with aioge.Session(...)' "
            "or 'await session.aclose()'",
            ResourceWarning,
            stacklevel=2,
        )


def _check_graph_id(graph_id: object) -> None:
    """GE's graph ids are uint32: a str or float id is a mistake, never a key.

    Raises:
        GraphIdError: not an int in [0, 2**32)."""
    if not isinstance(graph_id, (int, np.integer)) or isinstance(graph_id, bool) or not 0 <= int(graph_id) < 2**32:
        raise GraphIdError(
            f"graph id {graph_id!r} ({type(graph_id).__name__}): expected an int in [0, 2**32), as GE's uint32 ids"
        )


class Session:
    """A GE-style session: graphs by id, compiled once per input signature, run many times.

    ``async with aioge.Session({"ge.exec.exclude_engines": "AiCpu"}) as s: ...``. Options are
    GE's string options, checked here (``OptionError`` on a bad one). A session that started
    engines (ran a graph) and is garbage-collected without ``aclose()`` stops them and emits
    a ``ResourceWarning``, as an unclosed file does.
    """

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        self._options = check_options(options, "session")
        resolved = resolve_options(self._options)  # env fallbacks are checked now, so a bad one fails early
        # The session owns its kernel cache: dir (option > ASCEND_CACHE_PATH > ~/atc_data), soc, single flights.
        self.kernel_cache = KernelCache.from_options(resolved)
        # aioge.remote_cache: a shared tier behind the disk (read-through, write-behind).
        self.remote_cache = remote_tier_for(resolved)
        self._kernel_store = (
            self.kernel_cache if self.remote_cache is None else TieredKernelStore(self.kernel_cache, self.remote_cache)
        )
        self._graphs: dict[int, _GraphEntry] = {}
        self._reserved: set[int] = set()  # ids whose add_graph or load_model is in flight
        # Session.run's graphs by (id(graph), graph options), least recently run first, and
        # the registrations in flight (one per key: concurrent first runs share it).
        self._anonymous: OrderedDict[tuple[int, _OptionsKey], _GraphEntry] = OrderedDict()
        self._anonymous_adding: dict[tuple[int, _OptionsKey], anyio.Event] = {}
        self._next_anonymous = -1
        self._variables: dict[str, np.ndarray] = {}
        self._cpu: anyio.CapacityLimiter | None = None
        self._engines = Engines(DevicePool(resolved.exec_devices) if resolved.exec_devices else None)
        self._finalizer = weakref.finalize(self, _release_unclosed, self._engines)
        self._finalizer.atexit = False  # at exit the daemon threads and the pool's own finalizer suffice
        self._closed = False

    @property
    def _workers(self) -> EngineWorkers | None:
        return self._engines.workers

    @property
    def _devices(self) -> DevicePool | None:
        return self._engines.devices

    # -- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> Session:
        self._limiter()
        await self._engines.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Drop every graph and its compiled models, and stop the engines and devices.

        Work already queued on the engines finishes; a run still in flight fails at its next
        op with ``SessionClosedError`` (it never waits for engines that are gone).
        """
        self._graphs.clear()
        self._anonymous.clear()
        self._closed = True
        self._finalizer.detach()
        await self._engines.aclose()  # lanes finish what is queued, then stop
        if self.remote_cache is not None:  # its queued writes go out first (bounded wait)
            await self.remote_cache.aclose()

    def _limiter(self) -> anyio.CapacityLimiter:
        if self._cpu is None:
            self._cpu = anyio.CapacityLimiter(os.cpu_count() or 2)  # compile work
        return self._cpu

    def _check_open(self, graph: str | None = None) -> None:
        if self._closed:
            raise SessionClosedError(graph=graph)

    # -- graphs -----------------------------------------------------------------------

    async def add_graph(self, graph_id: int, graph: Graph, options: Mapping[str, str] | None = None) -> None:
        """Register ``graph`` under ``graph_id`` with graph-level options.

        ``ge.inputShape`` alone fixes the shapes of the inputs it names (ATC's static
        ``--input_shape``). With gears (``ge.dynamicBatchSize`` or ``ge.dynamicDims`` and
        ``ge.inputShape``) every gear is compiled now, into one model; with batching (``aioge.batch_max_rows``) and
        inputs static past dim 0, every batch size is compiled now.

        Raises:
            OptionError: a bad graph option. GraphError: the id is taken (also by an
            ``add_graph`` or ``load_model`` still in flight), or the graph is malformed, or its
            variables clash with the session's. CompileError (E13026): the graph cache is on
            and its directory does not exist; or a gear does not compile. SessionClosedError:
            the session is closed.
        """
        self._check_open()
        _check_graph_id(graph_id)
        if not isinstance(graph, Graph):
            raise GraphError(f"add_graph expects an aioge.Graph, got {type(graph).__name__}")
        await self._register(graph_id, graph, check_options(options, "graph"))

    def _reserve(self, graph_id: int, name: str | None) -> None:
        """Claim ``graph_id`` before the first await of an add, so two adds of one id in flight
        at once cannot both succeed (the second would silently replace the first)."""
        if graph_id in self._graphs or graph_id in self._reserved:
            raise GraphError(f"graph id {graph_id} is already added; remove_graph it first", graph=name)
        self._reserved.add(graph_id)

    async def _register(self, graph_id: int, graph: Graph, checked: dict[str, str]) -> _GraphEntry:
        self._reserve(graph_id, graph.name)
        try:
            resolved = resolve_options(self._options, checked)
            if resolved.graph_key and not resolved.graph_cache_dir:
                warnings.warn(
                    f"graph {graph.name!r}: ge.graph_key {resolved.graph_key!r} has no effect without the session "
                    "option ge.graph_compiler_cache_dir: the graph cache is off",
                    UserWarning,
                    stacklevel=3,
                )
            await anyio.to_thread.run_sync(graph.validate)
            if resolved.input_shape and not (resolved.dynamic_batch_size or resolved.dynamic_dims):
                raw = resolved.raw["ge.inputShape"]  # alone: static shapes, as ATC's --input_shape
                graph = await anyio.to_thread.run_sync(with_static_shapes, graph, resolved.input_shape, raw)
            cache = await anyio.to_thread.run_sync(graph_cache.cache_for, resolved, graph.name)
            self._check_open(graph.name)
            self._adopt_variables(graph)
            entry = _GraphEntry(graph_id, graph, checked, resolved, lock=anyio.Lock(), graph_cache=cache)
            if resolved.batch_max_rows and graph.variables:
                raise OptionError(
                    "aioge.batch_max_rows",
                    str(resolved.batch_max_rows),
                    f"graph {graph.name!r} has variables: runs stacked into one would update them once, not per caller",
                )
            gears = gear_set(graph, resolved)
            if gears is not None and resolved.batch_max_rows and not gears.batch:
                raise OptionError(
                    "aioge.batch_max_rows",
                    str(resolved.batch_max_rows),
                    "batching stacks along dim 0: it works with ge.dynamicBatchSize gears, not ge.dynamicDims",
                )
            if gears is not None or resolved.batch_max_rows:
                entry.served = ServedModel(graph, resolved, gears, self._engines, partial(self._executable, entry))
            if gears is not None:
                await self._build_gears(entry, gears)
            elif entry.served is not None and (tail := static_tail(graph)) is not None:
                await entry.served.batcher(tail)
            self._check_open(graph.name)
            self._graphs[graph_id] = entry
            return entry
        finally:
            self._reserved.discard(graph_id)

    async def remove_graph(self, graph_id: int) -> None:
        """Forget a graph and its compiled models.

        Raises:
            GraphError: no such graph id.
        """
        self._entry(graph_id)
        del self._graphs[graph_id]

    async def build_graph(self, graph_id: int, shapes: Mapping[str, Any] | None = None) -> CompiledModel:
        """Compile the graph for the given input shapes (default: its static input shapes).

        ``shapes`` maps input names to shapes or to example arrays. Returns the compiled model.

        Raises:
            FeedError: a dynamic input without a shape. GraphError, CompileError: as compile_graph.
        """
        entry = self._entry(graph_id)
        gears = entry.served.gears if entry.served is not None else None
        if gears is not None and not shapes:  # every gear was built when it was added: the model holds them all
            return entry.builds[gears.signatures[0]].model
        given = {k: (np.shape(v) if not isinstance(v, (tuple, list)) else tuple(v)) for k, v in (shapes or {}).items()}
        unknown = sorted(set(given) - {v.name for v in entry.graph.inputs})
        if unknown:
            raise FeedError(f"shapes given for unknown inputs {unknown}", graph=entry.graph.name, input=unknown[0])
        signature = input_signature(entry.graph, given)
        return (await self._executable(entry, signature)).model

    async def run_graph(
        self, graph_id: int, feeds: Mapping[str, Any], *, trace: str | os.PathLike[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run a graph on ``feeds`` (input name -> array); returns outputs by name.

        Compiles first if these input shapes have not been compiled yet. The feeds are read while
        the run executes, not copied when it is queued: leave them unchanged
        until the await returns.

        Raises:
            FeedError: a missing, extra or mis-shaped/typed feed. ExecutionError: a kernel failed.
            SessionClosedError: the session is closed, or closed while this run was in flight.
        """
        entry = self._entry(graph_id)
        if entry.served is not None:  # gears or batching: the served model's (serving.served)
            return await entry.served.run(feeds, trace)
        return await self._run_entry(entry, feeds, trace)

    def run_graph_here(self, graph_id: int, feeds: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """``run_graph`` in the calling thread, blocking, for a synchronous caller on a thread
        other than the session's loop (``aioge.torch``): feeds of a layout an earlier
        ``run_graph`` checked and built, in sink mode, with no gears, batching or device
        processes, run by ``Executable.run_here``; None otherwise (then await ``run_graph``).

        Raises:
            SessionClosedError, GraphError: as ``run_graph``. ExecutionError: a kernel failed.
        """
        entry, engines = self._entry(graph_id), self._engines
        if entry.served is not None or entry.resolved.exec_mode != "sink" or engines.devices is not None:
            return None
        if engines.workers is None or engines.closed:
            return None
        key = feed_key(feeds)
        signature = entry.checked.get(key) if key is not None else None
        exe = entry.builds.get(signature) if signature is not None else None
        return exe.run_here(feeds, engines.workers) if exe is not None else None

    def batch_stats(self, graph_id: int) -> BatchStats:
        """The graph's dynamic batching so far (``aioge.batch_max_rows``): batches run, requests
        and rows in them, mean batch rows, queue delay p50/p99 in seconds; all feed layouts summed.

        Raises:
            GraphError: no such graph, or batching is off for it.
        """
        entry = self._entry(graph_id)
        if not entry.resolved.batch_max_rows or entry.served is None:
            raise GraphError(f"graph id {graph_id} does not batch (aioge.batch_max_rows is not set)", graph=entry.graph.name)
        return entry.served.stats()

    async def _run_entry(
        self, entry: _GraphEntry, feeds: Mapping[str, Any], trace: str | os.PathLike[str] | None = None
    ) -> dict[str, np.ndarray]:
        if entry.served is not None:
            return await entry.served.run(feeds, trace)
        arrays, signature = self._check_feeds(entry, feeds)
        exe = await self._executable(entry, signature)
        return await self._engines.run(exe, arrays, mode=entry.resolved.exec_mode, trace=trace)

    async def run(
        self, graph: Graph, feeds: Mapping[str, Any], options: Mapping[str, str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run a graph object directly: added (with ``options``) and built on first sight.

        Each (graph object, graph options) pair is registered once, under a negative graph id
        of its own, and compiled once per input signature, however many first runs are in
        flight at once: they share one registration and one compile. Other ``options`` for the
        same graph make another registration and build. The session keeps the
        ``ANONYMOUS_GRAPHS`` (16) most recently run of these and drops the others with their
        builds (a dropped graph that runs again is compiled again; the kernel cache makes
        that cheap), so graphs made per call are not kept forever. A graph must not be
        changed after its first run here; add a new graph object instead.

        Raises:
            OptionError: a bad graph option. GraphError, FeedError, ExecutionError,
            SessionClosedError: as ``add_graph`` and ``run_graph``.
        """
        self._check_open()
        if not isinstance(graph, Graph):
            raise GraphError(f"run expects an aioge.Graph, got {type(graph).__name__}")
        checked = check_options(options, "graph")
        entry = await self._anonymous_entry((id(graph), tuple(sorted(checked.items()))), graph, checked)
        return await self._run_entry(entry, feeds)

    async def _anonymous_entry(self, key: tuple[int, _OptionsKey], graph: Graph, checked: dict[str, str]) -> _GraphEntry:
        """The entry of ``Session.run``'s graph and options: registered once (single flight)."""
        while True:
            entry = self._anonymous.get(key)
            # The entry holds its graph, so while it lives id(graph) names no other graph;
            # ``is`` also catches an entry whose id was remove_graph'ed meanwhile.
            if entry is not None and entry.graph is graph and self._graphs.get(entry.graph_id) is entry:
                self._anonymous.move_to_end(key)
                return entry
            adding = self._anonymous_adding.get(key)
            if adding is None:
                break
            await adding.wait()  # the first caller registers; if it failed, the next one tries
            self._check_open(graph.name)
        done = self._anonymous_adding[key] = anyio.Event()
        try:
            graph_id = self._next_anonymous
            while graph_id in self._graphs or graph_id in self._reserved:
                graph_id -= 1
            self._next_anonymous = graph_id - 1
            entry = await self._register(graph_id, graph, checked)
            self._anonymous[key] = entry
            while len(self._anonymous) > ANONYMOUS_GRAPHS:
                _, old = self._anonymous.popitem(last=False)
                if self._graphs.get(old.graph_id) is old:  # runs in flight keep their entry
                    del self._graphs[old.graph_id]
            return entry
        finally:
            del self._anonymous_adding[key]
            done.set()

    async def load_model(
        self, path: str | os.PathLike[str], graph_id: int | None = None, *, options: Mapping[str, str] | None = None
    ) -> int:
        """Load a compiled model (an ``.om`` from ``aioge compile``) and register it as a graph.

        Returns its graph id (``graph_id``, or else the smallest free positive id); run it with
        ``run_graph`` on inputs of the shapes it was compiled for. The file is read and checked
        in one worker thread. ``options`` are graph options that do not change what was
        compiled: the ``aioge.batch_*`` ones (batching a loaded model needs its gears).

        Raises:
            ModelFormatError: the file is missing, corrupt, foreign or stale. GraphError: the id
            is taken (also by an add still in flight), or the model's variables clash with the
            session's. OptionError: a bad option, one that would need a recompile, or batching
            on a model without batch gears. SessionClosedError: the session is closed.
        """
        from aioge.options import OPTIONS, SERVER
        from aioge.plan.serialize import load_model

        self._check_open()
        checked = check_options(options, "graph")
        for key, value in checked.items():
            if OPTIONS[key].stage != SERVER:
                raise OptionError(key, value, "the model is compiled already: only aioge.batch_* options apply to load_model")
        if graph_id is not None:
            _check_graph_id(graph_id)
            self._reserve(graph_id, None)
        try:
            model = await load_model(path)
            self._check_open(model.graph.name)
            if graph_id is None:  # picked and claimed with no await between: another load cannot take it too
                graph_id = 1
                while graph_id in self._graphs or graph_id in self._reserved:
                    graph_id += 1
                self._reserved.add(graph_id)
            self._adopt_variables(model.graph)
            resolved = resolve_options(self._options, checked)
            gears = gear_set_of_model(model)
            if resolved.batch_max_rows and not (gears is not None and gears.batch):
                raise OptionError(
                    "aioge.batch_max_rows",
                    str(resolved.batch_max_rows),
                    f"{os.fspath(path)} has no batch gears to pad batches to; compile it with --dynamic-batch-size",
                )
            exe = await self._bind(model, resolved)
            self._check_open(model.graph.name)
            entry = _GraphEntry(graph_id, model.graph, checked, resolved, lock=anyio.Lock())
            signature = tuple((name, tuple(shape)) for name, shape in model.signature)
            entry.builds[signature] = exe
            entry.last = signature
            for gear in model.gears:  # the other gears of a geared .om
                entry.builds[_sig(gear)] = await self._bind(gear, resolved)
            if gears is not None or resolved.batch_max_rows:
                entry.served = ServedModel(model.graph, resolved, gears, self._engines, partial(self._executable, entry))
                if gears is not None and gears.batch:
                    entry.served.batched = batched_outputs(dict(zip(gears.batch, model.all_gears())))
            self._check_open(model.graph.name)
            self._graphs[graph_id] = entry
            return graph_id
        finally:
            if graph_id is not None:
                self._reserved.discard(graph_id)

    def get_inputs(self, graph_id: int) -> list[IOInfo]:
        """The graph's inputs (names, shapes, dtypes): as compiled once it is built, else as added.

        Raises:
            GraphError: no such graph id.
        """
        return self._io(graph_id).get_inputs()

    def get_outputs(self, graph_id: int) -> list[IOInfo]:
        """The graph's outputs (names, shapes, dtypes): as compiled once it is built, else as added.

        Raises:
            GraphError: no such graph id.
        """
        return self._io(graph_id).get_outputs()

    def _io(self, graph_id: int) -> Graph:
        entry = self._entry(graph_id)
        return entry.graph if entry.last is None else entry.builds[entry.last].model.graph

    def compiled(self, graph_id: int) -> CompiledModel:
        """The compiled model of the graph's latest build.

        Raises:
            GraphError: no such graph, or it has not been built yet.
        """
        entry = self._entry(graph_id)
        if entry.last is None:
            raise GraphError(f"graph id {graph_id} has not been built yet", graph=entry.graph.name)
        return entry.builds[entry.last].model

    def executable(self, graph_id: int) -> Executable:
        """The bound executable of the graph's latest build (for pools and statistics)."""
        entry = self._entry(graph_id)
        if entry.last is None:
            raise GraphError(f"graph id {graph_id} has not been built yet", graph=entry.graph.name)
        return entry.builds[entry.last]

    def variable(self, name: str) -> np.ndarray:
        """A copy of a variable's current value.

        Raises:
            GraphError: no such variable in this session.
        """
        try:
            return self._variables[name].copy()
        except KeyError:
            raise GraphError(f"no variable named {name!r} in this session; known: {sorted(self._variables)}") from None

    # -- internals --------------------------------------------------------------------

    def _entry(self, graph_id: int) -> _GraphEntry:
        self._check_open()
        try:
            return self._graphs[graph_id]
        except KeyError:
            raise GraphError(f"no graph with id {graph_id} in this session; added: {sorted(self._graphs)}") from None

    def _adopt_variables(self, graph: Graph) -> None:
        for name, v in graph.variables.items():
            have = self._variables.get(name)
            if have is None:
                self._variables[name] = np.array(v.data, copy=True)
            elif have.shape != v.data.shape or have.dtype != v.data.dtype:  # type: ignore[union-attr]
                raise GraphError(
                    f"variable {name!r} is {have.dtype}{list(have.shape)} in this session, {v.desc} in this graph",
                    graph=graph.name,
                )

    async def _bind(self, model: CompiledModel, resolved: CompileOptions) -> Executable:
        # Binding kernels takes milliseconds on big models: off the loop.
        return await anyio.to_thread.run_sync(partial(Executable, model, self._variables, threads=resolved.exec_threads))

    async def _executable(self, entry: _GraphEntry, signature: Signature) -> Executable:
        exe = entry.builds.get(signature)
        if exe is not None:
            if entry.last != signature:
                entry.builds.move_to_end(signature)
                entry.last = signature
            return exe
        assert entry.lock is not None
        async with entry.lock:  # one compile per graph and signature; waiters get the result
            exe = entry.builds.get(signature)
            if exe is None:
                cpu = self._limiter()

                async def compile_now() -> CompiledModel:
                    return await compile_graph(
                        entry.graph, signature, entry.resolved, limiter=cpu, kernel_cache=self._kernel_store
                    )

                if entry.graph_cache is not None:
                    model = await graph_cache.load_or_compile(
                        entry.graph_cache, entry.graph, signature, entry.resolved, compile_now, remote=self.remote_cache
                    )
                else:
                    model = await compile_now()
                exe = await self._bind(model, entry.resolved)
                entry.builds[signature] = exe
                _evict_builds(entry)
            entry.last = signature
            return exe

    def _check_feeds(self, entry: _GraphEntry, feeds: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], Signature]:
        """The feeds as arrays and their signature, checked against the graph; a layout of
        names, shapes and dtypes seen before skips the check (about 15 us on small graphs).

        Raises:
            FeedError: a missing, extra or mis-shaped/typed feed.
        """
        key = feed_key(feeds)
        if key is not None:
            signature = entry.checked.get(key)
            if signature is not None:
                return dict(feeds), signature
        arrays = feed_arrays(entry.graph, feeds)
        signature = input_signature(entry.graph, {n: a.shape for n, a in arrays.items() if isinstance(a, np.ndarray)})
        if key is not None:
            if len(entry.checked) >= FEED_KEYS:
                entry.checked.pop(next(iter(entry.checked)))
            entry.checked[key] = signature
        return arrays, signature

    # -- gears -----------------------------------------------------------------------------

    async def _build_gears(self, entry: _GraphEntry, gears: GearSet) -> None:
        """Compile every gear (through the graph cache when it is on: one entry holds them all)
        and bind each; a run never compiles."""
        cpu = self._limiter()
        graph, resolved = entry.graph, entry.resolved

        async def compile_all() -> CompiledModel:
            models: list[CompiledModel | None] = [None] * len(gears.signatures)
            errors: list[Exception] = []

            async def one(i: int, sig: Signature) -> None:
                try:
                    models[i] = await compile_graph(graph, sig, resolved, limiter=cpu, kernel_cache=self.kernel_cache)
                except Exception as exc:  # the first gear's error is the compile's, not an ExceptionGroup
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                for i, sig in enumerate(gears.signatures):
                    tg.start_soon(one, i, sig)
            if errors:
                raise errors[0]
            first, *rest = (m for m in models if m is not None)
            first.gears = tuple(rest)
            return first

        if entry.graph_cache is not None:
            model = await graph_cache.load_or_compile(entry.graph_cache, graph, gears.signatures[0], resolved, compile_all)
        else:
            model = await compile_all()
        if [_sig(m) for m in model.all_gears()] != list(
            gears.signatures
        ):  # pragma: no cover - the cache key holds the gear options
            raise GraphError("the cached model's gears differ from the options' gears", graph=graph.name)
        for m in model.all_gears():
            entry.builds[_sig(m)] = await self._bind(m, resolved)
        entry.last = gears.signatures[0]
        if gears.batch and entry.served is not None:
            entry.served.batched = batched_outputs(dict(zip(gears.batch, model.all_gears())))


def _sig(model: CompiledModel) -> Signature:
    return tuple((name, tuple(shape)) for name, shape in model.signature)
