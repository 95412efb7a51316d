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
from aioge.compiler import cached as graph_cache
from aioge.compiler.graph import compile_graph
from aioge.compiler.specialize import input_signature
from aioge.errors import FeedError, GraphError, GraphIdError, SessionClosedError
from aioge.ir.desc import is_static, numpy_dtype
from aioge.ir.graph import Graph, IOInfo
from aioge.options import CompileOptions, check_options, resolve_options
from aioge.plan.model import CompiledModel
from aioge.runtime.blas import configure_blas
from aioge.runtime.devices import DevicePool
from aioge.runtime.executor import Executable, TraceSpan
from aioge.runtime.workers import EngineWorkers

__all__ = ["ANONYMOUS_GRAPHS", "Session"]

log = logging.getLogger(__name__)

Signature = tuple[tuple[str, tuple[int, ...]], ...]

# How many graphs ``Session.run`` keeps registered (with their builds) per session, least
# recently run dropped first. The entry holds the graph itself, so a key of ``id(graph)`` can
# never name another graph while its entry lives; the bound is what keeps a loop that builds a
# fresh graph per call from holding every graph and arena it ever ran.
ANONYMOUS_GRAPHS = 16

_OptionsKey = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class _GraphEntry:
    graph_id: int
    graph: Graph
    options: dict[str, str]
    resolved: CompileOptions
    builds: dict[Signature, Executable] = field(default_factory=dict)
    lock: anyio.Lock | None = None
    last: Signature | None = None
    graph_cache: graph_cache.GraphCache | None = None  # when ge.graph_compiler_cache_dir and ge.graph_key are set


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
            "or 'await session.aclose()'", ResourceWarning, stacklevel=2,
        )


def _check_graph_id(graph_id: object) -> None:
    """GE's graph ids are uint32: a str or float id is a mistake, never a key.

    Raises:
        GraphIdError: not an int in [0, 2**32)."""
    if not isinstance(graph_id, (int, np.integer)) or isinstance(graph_id, bool) or not 0 <= int(graph_id) < 2**32:
        raise GraphIdError(f"graph id {graph_id!r} ({type(graph_id).__name__}): expected an int in [0, 2**32), as GE's uint32 ids")


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
        self._graphs: dict[int, _GraphEntry] = {}
        self._reserved: set[int] = set()  # ids whose add_graph or load_model is in flight
        # Session.run's graphs by (id(graph), graph options), least recently run first, and
        # the registrations in flight (one per key: concurrent first runs share it).
        self._anonymous: OrderedDict[tuple[int, _OptionsKey], _GraphEntry] = OrderedDict()
        self._anonymous_adding: dict[tuple[int, _OptionsKey], anyio.Event] = {}
        self._next_anonymous = -1
        self._variables: dict[str, np.ndarray] = {}
        self._cpu: anyio.CapacityLimiter | None = None
        self._runs: anyio.CapacityLimiter | None = None
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

    def _limiters(self) -> tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]:
        if self._cpu is None:
            cores = os.cpu_count() or 2
            self._cpu = anyio.CapacityLimiter(cores)  # compile work
            # Runs in flight on the engine lanes (each holds an arena). Twice the cores, so a lane
            # that finishes a run finds the next one queued instead of idling through the
            # thread-to-loop-to-thread hand-off; the lanes' CPU tokens still bound the compute.
            self._runs = anyio.CapacityLimiter(2 * cores)
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

        Raises:
            OptionError: a bad graph option. GraphError: the id is taken (also by an
            ``add_graph`` or ``load_model`` still in flight), or the graph is malformed, or its
            variables clash with the session's. CompileError (E13026): the graph cache is on
            and its directory does not exist. SessionClosedError: the session is closed.
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
                warnings.warn(f"graph {graph.name!r}: ge.graph_key {resolved.graph_key!r} has no effect without the session "
                              "option ge.graph_compiler_cache_dir: the graph cache is off", UserWarning, stacklevel=3)
            await anyio.to_thread.run_sync(graph.validate)
            cache = await anyio.to_thread.run_sync(graph_cache.cache_for, resolved, graph.name)
            self._check_open(graph.name)
            self._adopt_variables(graph)
            entry = _GraphEntry(graph_id, graph, checked, resolved, lock=anyio.Lock(), graph_cache=cache)
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
        return await self._run_entry(self._entry(graph_id), feeds, trace)

    async def _run_entry(
        self, entry: _GraphEntry, feeds: Mapping[str, Any], trace: str | os.PathLike[str] | None = None
    ) -> dict[str, np.ndarray]:
        arrays, signature = self._check_feeds(entry.graph, feeds)
        exe = await self._executable(entry, signature)
        _, runs = self._limiters()
        workers = await self._start()
        spans: list[TraceSpan] | None = [] if trace is not None else None
        devices = self._engines.devices
        async with runs:
            self._check_open(entry.graph.name)
            if devices is not None and spans is None and entry.resolved.exec_mode == "sink" and devices.eligible(exe):
                return await devices.run(exe, arrays, entry.resolved.exec_threads)
            start = anyio.current_time()
            outputs = await exe.run(arrays, mode=entry.resolved.exec_mode, workers=workers, trace=spans)
        if trace is not None and spans is not None:
            from aioge.runtime.trace import write_trace

            await anyio.to_thread.run_sync(write_trace, os.fspath(trace), exe.model, spans, start)
        return outputs

    async def run(self, graph: Graph, feeds: Mapping[str, Any], options: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
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

    async def load_model(self, path: str | os.PathLike[str], graph_id: int | None = None) -> int:
        """Load a compiled model (an ``.om`` from ``aioge compile``) and register it as a graph.

        Returns its graph id (``graph_id``, or else the smallest free positive id); run it with
        ``run_graph`` on inputs of the shapes it was compiled for. The file is read and checked
        in one worker thread.

        Raises:
            ModelFormatError: the file is missing, corrupt, foreign or stale. GraphError: the id
            is taken (also by an add still in flight), or the model's variables clash with the
            session's. SessionClosedError: the session is closed.
        """
        from aioge.plan.serialize import load_model

        self._check_open()
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
            resolved = resolve_options(self._options)
            exe = await anyio.to_thread.run_sync(partial(Executable, model, self._variables, threads=resolved.exec_threads))
            self._check_open(model.graph.name)
            entry = _GraphEntry(graph_id, model.graph, {}, resolved, lock=anyio.Lock())
            signature = tuple((name, tuple(shape)) for name, shape in model.signature)
            entry.builds[signature] = exe
            entry.last = signature
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
                    f"variable {name!r} is {have.dtype}{list(have.shape)} in this session, "
                    f"{v.desc} in this graph",
                    graph=graph.name,
                )

    async def _executable(self, entry: _GraphEntry, signature: Signature) -> Executable:
        exe = entry.builds.get(signature)
        if exe is not None:
            entry.last = signature
            return exe
        assert entry.lock is not None
        async with entry.lock:  # one compile per graph and signature; waiters get the result
            exe = entry.builds.get(signature)
            if exe is None:
                cpu, _ = self._limiters()

                async def compile_now() -> CompiledModel:
                    return await compile_graph(
                        entry.graph, signature, entry.resolved, limiter=cpu, kernel_cache=self.kernel_cache
                    )

                if entry.graph_cache is not None:
                    model = await graph_cache.load_or_compile(entry.graph_cache, entry.graph, signature, entry.resolved, compile_now)
                else:
                    model = await compile_now()
                # Binding kernels takes milliseconds on big models: off the loop.
                exe = await anyio.to_thread.run_sync(partial(Executable, model, self._variables, threads=entry.resolved.exec_threads))
                entry.builds[signature] = exe
            entry.last = signature
            return exe

    def _check_feeds(self, graph: Graph, feeds: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], Signature]:
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
            if not isinstance(x, np.ndarray):
                try:
                    x = np.asarray(x, dtype=want)
                except (TypeError, ValueError) as exc:
                    raise FeedError(f"input {v.name!r} expects {v.desc}: {exc}", graph=graph.name, input=v.name) from None
            if x.dtype != want and not (v.dtype == "str" and x.dtype.kind in "UO"):
                raise FeedError(f"input {v.name!r} expects {v.desc}, got dtype {x.dtype}", graph=graph.name, input=v.name)
            arrays[v.name] = x
        shapes = {n: a.shape for n, a in arrays.items()}
        signature = input_signature(graph, shapes)
        if not all(is_static(s) for _, s in signature):  # pragma: no cover - feeds are always concrete
            raise FeedError("feeds must have concrete shapes", graph=graph.name)
        return arrays, signature
