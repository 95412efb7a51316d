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
from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.ir.graph import Graph, IOInfo
from aioge.options import CompileOptions, check_options, resolve_options
from aioge.plan.model import CompiledModel
from aioge.runtime.blas import configure_blas
from aioge.runtime.devices import DevicePool
from aioge.runtime.executor import Executable, TraceSpan
from aioge.runtime.schedule import Placement
from aioge.runtime.workers import EngineWorkers, RunGate
from aioge.serving.batcher import Batcher, BatchStats
from aioge.serving.gears import GearSet, batched_outputs, gear_set, gear_set_of_model, pad_rows

__all__ = ["ANONYMOUS_GRAPHS", "Session"]

log = logging.getLogger(__name__)

Signature = tuple[tuple[str, tuple[int, ...]], ...]

# How many graphs ``Session.run`` keeps registered (with their builds) per session, least
# recently run dropped first. The entry holds the graph itself, so a key of ``id(graph)`` can
# never name another graph while its entry lives; the bound is what keeps a loop that builds a
# fresh graph per call from holding every graph and arena it ever ran.
ANONYMOUS_GRAPHS = 16

_OptionsKey = tuple[tuple[str, str], ...]
_Tail = tuple[tuple[str, tuple[int, ...], str], ...]  # each input's name, shape past dim 0 and dtype: what a batch shares
_FeedKey = tuple[tuple[str, tuple[int, ...], np.dtype], ...]
_FEED_KEYS = 64  # feed layouts whose check is remembered per graph


def _evict_builds(entry: _GraphEntry) -> None:
    """Drop the least recently run builds past the bound, which is at least the batch sizes
    batching compiles (a run in flight keeps its own)."""
    keep = frozenset(entry.gears.signatures) if entry.gears is not None else frozenset()
    extra = [s for s in entry.builds if s not in keep]
    bound = max(entry.resolved.max_builds_per_graph, len(_bucket_sizes(entry.resolved)))
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
    gears: GearSet | None = None  # GE's dynamic gears, all built when the graph is added
    batched: frozenset[str] = frozenset()  # outputs whose dim 0 is the batch (gears, batching)
    batchers: dict[_Tail, Batcher] = field(default_factory=dict)  # aioge.batch_max_rows: one per feed layout
    checked: dict[_FeedKey, Signature] = field(default_factory=dict)  # feed layouts already checked
    served: dict[_FeedKey, tuple[int, _Tail]] = field(
        default_factory=dict
    )  # gears/batching: layouts checked, their rows and tail


class _Engines:
    """What a session starts and must stop: its engine workers and device processes.

    Kept apart from the session so the finalizer of a session that is never closed can reach
    them without keeping the session alive.
    """

    __slots__ = ("workers", "devices")

    def __init__(self, devices: DevicePool | None) -> None:
        self.workers: EngineWorkers | None = None
        self.devices = devices


def _release_unclosed(engines: _Engines) -> None:
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
        self._runs: RunGate | None = None
        # The engines' lanes (started with the session) and the device processes
        # (aioge.exec_devices, started on the first run that can use them).
        self._engines = _Engines(DevicePool(resolved.exec_devices) if resolved.exec_devices else None)
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
        self._limiters()
        await self._start()
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
        engines = self._engines
        workers, engines.workers = engines.workers, None
        devices, engines.devices = engines.devices, None
        if workers is not None:  # lanes finish what is queued, then stop; joining blocks, so off the loop
            await anyio.to_thread.run_sync(workers.close)
        if devices is not None:
            await anyio.to_thread.run_sync(devices.close)
        if self.remote_cache is not None:  # its queued writes go out first (bounded wait)
            await self.remote_cache.aclose()

    def _limiters(self) -> tuple[anyio.CapacityLimiter, RunGate]:
        if self._cpu is None:
            cores = os.cpu_count() or 2
            self._cpu = anyio.CapacityLimiter(cores)  # compile work
            # Runs in flight on the engine lanes (each holds an arena). Twice the cores, so a lane
            # that finishes a run finds the next one queued instead of idling through the
            # thread-to-loop-to-thread hand-off; the lanes' CPU tokens still bound the compute.
            self._runs = RunGate(2 * cores)
        assert self._runs is not None
        return self._cpu, self._runs

    async def _start(self) -> EngineWorkers:
        """The engine workers, started on first use; BLAS threads are set once before any kernel runs.

        Raises:
            SessionClosedError: the session closed (also while this waited).
        """
        self._check_open()
        if self._engines.workers is None:
            # Several lanes run kernels at once (streams, concurrent runs): one BLAS thread each.
            await anyio.to_thread.run_sync(configure_blas, 1)
            self._check_open()  # a session closed meanwhile must not start engines nobody stops
            if self._engines.workers is None:
                self._engines.workers = EngineWorkers()
        return self._engines.workers

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
            entry.gears = gear_set(graph, resolved)
            if entry.gears is not None and resolved.batch_max_rows and not entry.gears.batch:
                raise OptionError(
                    "aioge.batch_max_rows",
                    str(resolved.batch_max_rows),
                    "batching stacks along dim 0: it works with ge.dynamicBatchSize gears, not ge.dynamicDims",
                )
            if entry.gears is not None:
                await self._build_gears(entry, entry.gears)
            elif resolved.batch_max_rows:
                tail = _static_tail(graph)
                if tail is not None:
                    await self._batcher(entry, tail)
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
        if entry.gears is not None and not shapes:  # every gear was built when it was added: the model holds them all
            return entry.builds[entry.gears.signatures[0]].model
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

        Compiles first if these input shapes have not been compiled yet.

        Raises:
            FeedError: a missing, extra or mis-shaped/typed feed. ExecutionError: a kernel failed.
            SessionClosedError: the session is closed, or closed while this run was in flight.
        """
        entry = self._entry(graph_id)
        if entry.batchers and trace is None:  # a layout checked before goes straight to its batcher
            key = _feed_key(feeds)
            known = entry.served.get(key) if key is not None else None
            if known is not None:
                rows, tail = known
                batcher = entry.batchers.get(tail)
                if batcher is not None and rows <= batcher.max_rows:
                    return await batcher.submit(dict(feeds), rows)
        return await self._run_entry(entry, feeds, trace)

    def batch_stats(self, graph_id: int) -> BatchStats:
        """The graph's dynamic batching so far (``aioge.batch_max_rows``): batches run, requests
        and rows in them, mean batch rows, queue delay p50/p99 in seconds; all feed layouts summed.

        Raises:
            GraphError: no such graph, or batching is off for it.
        """
        entry = self._entry(graph_id)
        if not entry.resolved.batch_max_rows:
            raise GraphError(f"graph id {graph_id} does not batch (aioge.batch_max_rows is not set)", graph=entry.graph.name)
        stats = [b.stats() for b in entry.batchers.values()]
        if len(stats) == 1:
            return stats[0]
        batches, requests, rows = (sum(getattr(x, f) for x in stats) for f in ("batches", "requests", "rows"))
        busiest = max(stats, key=lambda x: x.requests, default=None)
        return BatchStats(
            batches,
            requests,
            rows,
            rows / batches if batches else 0.0,
            busiest.queue_delay_p50 if busiest else 0.0,
            busiest.queue_delay_p99 if busiest else 0.0,
        )

    async def _run_entry(
        self, entry: _GraphEntry, feeds: Mapping[str, Any], trace: str | os.PathLike[str] | None = None
    ) -> dict[str, np.ndarray]:
        if entry.gears is not None or entry.resolved.batch_max_rows:
            return await self._run_serving(entry, feeds, trace)
        arrays, signature = self._check_feeds(entry, feeds)
        exe = await self._executable(entry, signature)
        return await self._run_exe(entry, exe, arrays, trace)

    async def _run_exe(
        self,
        entry: _GraphEntry,
        exe: Executable,
        arrays: dict[str, np.ndarray],
        trace: str | os.PathLike[str] | None = None,
        placement: Placement = Placement.QUEUE,
    ) -> dict[str, np.ndarray]:
        _, runs = self._limiters()
        workers = self._engines.workers
        if workers is None:
            workers = await self._start()
        spans: list[TraceSpan] | None = [] if trace is not None else None
        devices = self._engines.devices
        await runs.enter()
        try:
            self._check_open(entry.graph.name)
            start = anyio.current_time() if spans is not None else 0.0
            outputs = await exe.run(
                arrays, mode=entry.resolved.exec_mode, workers=workers, trace=spans, placement=placement, devices=devices
            )
        finally:
            runs.leave()
        if trace is not None and spans is not None:
            from aioge.runtime.trace import write_trace

            await anyio.to_thread.run_sync(write_trace, os.fspath(trace), exe.model, spans, start)
        return outputs

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
            if resolved.batch_max_rows and not (gear_set_of_model(model) or _NO_GEARS).batch:
                raise OptionError(
                    "aioge.batch_max_rows",
                    str(resolved.batch_max_rows),
                    f"{os.fspath(path)} has no batch gears to pad batches to; compile it with --dynamic-batch-size",
                )
            exe = await anyio.to_thread.run_sync(partial(Executable, model, self._variables, threads=resolved.exec_threads))
            self._check_open(model.graph.name)
            entry = _GraphEntry(graph_id, model.graph, checked, resolved, lock=anyio.Lock())
            signature = tuple((name, tuple(shape)) for name, shape in model.signature)
            entry.builds[signature] = exe
            entry.last = signature
            for gear in model.gears:  # the other gears of a geared .om
                entry.builds[_sig(gear)] = await anyio.to_thread.run_sync(
                    partial(Executable, gear, self._variables, threads=resolved.exec_threads)
                )
            entry.gears = gear_set_of_model(model)
            if entry.gears is not None and entry.gears.batch:
                entry.batched = batched_outputs(dict(zip(entry.gears.batch, model.all_gears())))
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
                cpu, _ = self._limiters()

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
                # Binding kernels takes milliseconds on big models: off the loop.
                exe = await anyio.to_thread.run_sync(
                    partial(Executable, model, self._variables, threads=entry.resolved.exec_threads)
                )
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
        key = _feed_key(feeds)
        if key is not None:
            signature = entry.checked.get(key)
            if signature is not None:
                return dict(feeds), signature
        arrays = self._feed_arrays(entry.graph, feeds)
        signature = input_signature(entry.graph, {n: a.shape for n, a in arrays.items() if isinstance(a, np.ndarray)})
        if key is not None:
            if len(entry.checked) >= _FEED_KEYS:
                entry.checked.pop(next(iter(entry.checked)))
            entry.checked[key] = signature
        return arrays, signature

    def _feed_arrays(self, graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The feeds as arrays of the inputs' dtypes, every input fed and nothing else.

        Raises:
            FeedError: a missing, extra or mistyped feed.
        """
        if not isinstance(feeds, Mapping):
            raise FeedError(f"feeds must be a mapping of input name to array, got {type(feeds).__name__}", graph=graph.name)
        names = [v.name for v in graph.inputs]
        missing = [n for n in names if n not in feeds]
        extra = sorted(set(feeds) - set(names))
        if missing:
            descs = ", ".join(f"{n}: {graph.value(n).desc}" for n in missing)
            # A misspelt name shows up twice: as the unknown key given and as the input missing.
            also = f"; got feeds for unknown inputs {extra} instead" if extra else ""
            raise FeedError(f"missing feeds for inputs {descs}{also}", graph=graph.name, input=missing[0])
        if extra:
            raise FeedError(f"feeds for unknown inputs {extra}; inputs are {names}", graph=graph.name, input=extra[0])
        arrays: dict[str, np.ndarray] = {}
        for v in graph.inputs:
            x = feeds[v.name]
            want = numpy_dtype(v.dtype)
            if not v.desc.is_tensor:
                arrays[v.name] = _container_feed(graph, v.name, v.desc, x)
                continue
            if not isinstance(x, np.ndarray):
                try:
                    x = np.asarray(x, dtype=want)
                except (TypeError, ValueError) as exc:
                    raise FeedError(f"input {v.name!r} expects {v.desc}: {exc}", graph=graph.name, input=v.name) from None
            if x.dtype != want and not (v.dtype == "str" and x.dtype.kind in "UO"):
                raise FeedError(f"input {v.name!r} expects {v.desc}, got dtype {x.dtype}", graph=graph.name, input=v.name)
            arrays[v.name] = x
        return arrays

    # -- serving: gears and batching ------------------------------------------------------

    async def _build_gears(self, entry: _GraphEntry, gears: GearSet) -> None:
        """Compile every gear (through the graph cache when it is on: one entry holds them all)
        and bind each; a run never compiles."""
        cpu, _ = self._limiters()
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
            entry.builds[_sig(m)] = await anyio.to_thread.run_sync(
                partial(Executable, m, self._variables, threads=resolved.exec_threads)
            )
        entry.last = gears.signatures[0]
        if gears.batch:
            entry.batched = batched_outputs(dict(zip(gears.batch, model.all_gears())))

    async def _run_serving(
        self, entry: _GraphEntry, feeds: Mapping[str, Any], trace: str | os.PathLike[str] | None
    ) -> dict[str, np.ndarray]:
        """A run of a graph with gears or batching: feeds checked here (a bad one fails alone),
        then queued for a batch, or run alone padded to a gear or batch size.

        Raises:
            FeedError: a bad feed, or a graph with sequence or optional inputs (rows are a tensor's).
        """
        lists = [v.name for v in entry.graph.inputs if not v.desc.is_tensor]
        if lists:
            raise FeedError(
                f"gears and batching (aioge.batch_max_rows) take tensor inputs; {lists} are sequences or optionals",
                graph=entry.graph.name,
                input=lists[0],
            )
        key = _feed_key(feeds)
        known = entry.served.get(key) if key is not None else None
        if known is not None:
            arrays = dict(feeds)
            rows, tail = known
        else:
            arrays = self._feed_arrays(entry.graph, feeds)
            shapes = {n: a.shape for n, a in arrays.items()}
            if entry.gears is not None:
                rows = entry.gears.pick(shapes)[1]
            else:
                rows = _rows(entry.graph, arrays)
                input_signature(entry.graph, shapes)
            tail = tuple((n, a.shape[1:], a.dtype.str) for n, a in arrays.items())
            if key is not None:
                if len(entry.served) >= _FEED_KEYS:
                    entry.served.pop(next(iter(entry.served)))
                entry.served[key] = (rows, tail)
        max_rows = self._max_rows(entry)
        if max_rows and 0 < rows <= max_rows and trace is None:  # an empty batch runs padded, unbatched
            batcher = entry.batchers.get(tail) or await self._batcher(entry, tail)
            return await batcher.submit(arrays, rows)
        return await self._run_padded(entry, arrays, trace)

    async def _run_padded(
        self,
        entry: _GraphEntry,
        arrays: dict[str, np.ndarray],
        trace: str | os.PathLike[str] | None = None,
        placement: Placement = Placement.QUEUE,
    ) -> dict[str, np.ndarray]:
        """Run checked feeds padded along dim 0 to the smallest gear or batch size that holds
        them; outputs sliced back to their rows."""
        shapes = {n: a.shape for n, a in arrays.items()}
        size: int | None = None
        if entry.gears is not None:
            index, rows = entry.gears.pick(shapes)
            signature = entry.gears.signatures[index]
            if entry.gears.batch:
                size = entry.gears.batch[index]
                arrays = {n: pad_rows(a, size) if n in entry.gears.batched_inputs else a for n, a in arrays.items()}
        else:
            rows = _rows(entry.graph, arrays)
            size = next((b for b in _bucket_sizes(entry.resolved) if b >= rows), None)
            if size is not None:
                arrays = {n: pad_rows(a, size) for n, a in arrays.items()}
            signature = tuple((v.name, arrays[v.name].shape) for v in entry.graph.inputs)
        exe = await self._executable(entry, signature)
        outputs = await self._run_exe(entry, exe, arrays, trace, placement)
        if size is not None and size != rows:
            outputs = {n: o[:rows] if n in entry.batched else o for n, o in outputs.items()}
        return outputs

    async def _run_batch(self, entry: _GraphEntry, arrays: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        """A batcher's run. Alone (see ``Batcher``): on the loop's thread when its runs are
        short (the loop has nothing else to do, and a lane would cost a hand-off and a wake-up
        each way: the builder MLP's 64-row batches took 0.30 ms inline against 0.42 on a
        lane), else on the first lane, splitting its big jobs over an idle core. Otherwise
        whole on a lane of its own, beside the other batches."""
        return await self._run_padded(entry, arrays, placement=Placement.INLINE if alone else Placement.LANE_WHOLE)

    def _max_rows(self, entry: _GraphEntry) -> int:
        max_rows = entry.resolved.batch_max_rows
        if max_rows and entry.gears is not None:
            return min(max_rows, max(entry.gears.batch))
        return max_rows

    async def _batcher(self, entry: _GraphEntry, tail: _Tail) -> Batcher:
        """The batcher of one feed layout; without gears, every batch size is compiled first."""
        if entry.gears is None:
            models = {}
            for size in _bucket_sizes(entry.resolved):
                signature = tuple((name, (size, *rest)) for name, rest, _ in tail)
                models[size] = (await self._executable(entry, signature)).model
            entry.batched = batched_outputs(models)  # with one size, an output of that dim 0 counts as batched
        batcher = entry.batchers.get(tail)
        if batcher is None:
            batcher = entry.batchers[tail] = Batcher(
                partial(self._run_batch, entry),
                max_rows=self._max_rows(entry),
                max_delay=entry.resolved.batch_max_delay_us / 1e6,
                batched=entry.batched,
                sizes=entry.gears.batch if entry.gears is not None else _bucket_sizes(entry.resolved),
            )
        return batcher


_NO_GEARS = GearSet("", (), (), frozenset())


def _sig(model: CompiledModel) -> Signature:
    return tuple((name, tuple(shape)) for name, shape in model.signature)


def _container_feed(graph: Graph, name: str, desc: TensorDesc, x: Any) -> Any:
    """A sequence feed as a list of arrays of the element dtype, an optional's as None or its value.

    Raises:
        FeedError: a feed that is not what the input holds.
    """
    if x is None:
        if desc.container.startswith("optional"):
            return None
        raise FeedError(f"input {name!r} expects {desc}, got None", graph=graph.name, input=name)
    if desc.container == "optional":
        items, one = [x], True
    elif isinstance(x, (list, tuple)):
        items, one = list(x), False
    else:
        raise FeedError(f"input {name!r} expects {desc}: a list of arrays, got {type(x).__name__}", graph=graph.name, input=name)
    want = numpy_dtype(desc.dtype)
    out = []
    for i, t in enumerate(items):
        try:
            a = t if isinstance(t, np.ndarray) else np.asarray(t, dtype=want)
        except (TypeError, ValueError) as exc:
            raise FeedError(f"input {name!r} element {i} expects {desc.element}: {exc}", graph=graph.name, input=name) from None
        if a.dtype != want and not (desc.dtype == "str" and a.dtype.kind in "UO"):
            raise FeedError(
                f"input {name!r} element {i} expects {desc.element}, got dtype {a.dtype}", graph=graph.name, input=name
            )
        if desc.shape is not None and (
            a.ndim != len(desc.shape) or any(isinstance(d, int) and d != n for d, n in zip(desc.shape, a.shape))
        ):
            raise FeedError(
                f"input {name!r} element {i} expects {desc.element}, got shape {list(a.shape)}", graph=graph.name, input=name
            )
        out.append(a)
    return out[0] if one else out


def _feed_key(feeds: Mapping[str, Any]) -> _FeedKey | None:
    """Names, shapes and dtypes of feeds that are all arrays, or None."""
    if type(feeds) is not dict and not isinstance(feeds, Mapping):  # an ABC check costs a microsecond
        return None
    key = []
    for n, x in feeds.items():
        if type(x) is not np.ndarray:
            return None
        key.append((n, x.shape, x.dtype))
    return tuple(key)


def _rows(graph: Graph, arrays: Mapping[str, np.ndarray]) -> int:
    """The batch of feeds that share dim 0.

    Raises:
        FeedError: a scalar feed, or feeds whose dim 0 differ.
    """
    rows = {n: a.shape[0] if a.ndim else None for n, a in arrays.items()}
    if None in rows.values() or len(set(rows.values())) > 1:
        raise FeedError(f"batching stacks inputs along dim 0, so every input needs the same dim 0; got {rows}", graph=graph.name)
    return next(iter(rows.values()))  # type: ignore[return-value]


def _bucket_sizes(options: CompileOptions) -> tuple[int, ...]:
    """The batch sizes compiled for batching without gears: aioge.batch_preferred_sizes up to
    batch_max_rows (default powers of 2), and batch_max_rows itself."""
    top = options.batch_max_rows
    if not top:
        return ()
    chosen = options.batch_preferred_sizes or tuple(1 << i for i in range(top.bit_length()))
    return tuple(sorted({b for b in chosen if b <= top} | {top}))


def _static_tail(graph: Graph) -> _Tail | None:
    """The feed layout of a graph whose inputs are static past dim 0, or None."""
    tail = []
    for v in graph.inputs:
        if not v.shape or not all(isinstance(d, int) for d in v.shape[1:]):
            return None
        tail.append((v.name, tuple(int(d) for d in v.shape[1:]), np.dtype(numpy_dtype(v.dtype)).str))
    return tuple(tail)
