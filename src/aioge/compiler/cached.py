"""Compiling through the graph cache: what an entry must match, and whether a loaded model fits.

The graph cache (``cache.graph_cache``) stores and loads compiled models by key and never
looks into a graph. This side does: it computes the match key (``keys.graph_match_key``:
versions, code digest, the source graph's fingerprint, the input signature, the compile
options), the graph's variable descs, and the check that a loaded model can serve the
graph (the runtime binds feeds, outputs and variables by name).

A remote entry (``cache.remote``) comes from a store others may write: it is used only when
its optimised graph, weights included, is the one this graph compiles to (``_decode_remote``).

Weights that survive the passes unchanged are not stored in an entry twice: with the
fingerprint check, an entry references them by the digests the fingerprint hashes
(``ir.fingerprint.data_digests``), and a hit takes them from the graph in hand, whose
fingerprint (equal to the entry's) has just hashed those very bytes. So a hit neither reads
nor hashes them again. With ``graph_cache_check=key`` nothing is fingerprinted: entries are
saved whole, and one that references arrays is served only when the graph's arrays have
those digests (hashed then, never read), else it is a miss.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Awaitable, Callable, Sequence

import anyio
import numpy as np

from aioge.cache import packs
from aioge.cache.graph_cache import GraphCache, Lookup, check_cache_dir
from aioge.cache.graph_tools import record_graph_lookup
from aioge.cache.remote import RemoteTier
from aioge.errors import CacheError, ModelFormatError
from aioge.ir.fingerprint import array_digest, data_digests, graph_fingerprint
from aioge.ir.graph import Graph
from aioge.kernels import native, packbook
from aioge.keys import graph_match_key, remote_graph_key
from aioge.options import CompileOptions
from aioge.plan.model import CompiledModel

__all__ = ["GraphCache", "cache_for", "fits", "load_or_compile", "lookup_sync", "save_sync", "var_descs"]

log = logging.getLogger("aioge.cache.graph_cache")  # its warnings are the graph cache's, under its name

Signature = Sequence[tuple[str, tuple[int, ...]]]


def cache_for(options: CompileOptions, graph: str | None = None) -> GraphCache | None:
    """The graph cache the options ask for, or None when it is off (dir or key empty).

    Raises:
        CompileError: E13026, the dir does not exist. OptionError: an unsafe key.
    """
    if not options.graph_cache_dir or not options.graph_key:
        return None
    return GraphCache(
        check_cache_dir(options.graph_cache_dir, graph),
        options.graph_key,
        check=options.graph_cache_check,
        external_weight=options.external_weight,
        shared=options.cache_shared,
    )


def var_descs(graph: Graph) -> list[list[Any]]:
    """``[name, shape, dtype, format]`` of each of the graph's variables, by name."""
    return [
        [v.name, None if v.desc.shape is None else list(v.desc.shape), v.desc.dtype, v.desc.format]
        for v in sorted(graph.variables.values(), key=lambda v: v.name)
    ]


def fits(model: CompiledModel, graph: Graph) -> str | None:
    """Why a loaded model cannot serve ``graph`` (None if it can): the runtime binds by these names."""
    if [(v.name, v.dtype) for v in model.graph.inputs] != [(v.name, v.dtype) for v in graph.inputs]:
        return "inputs differ"
    if [v.name for v in model.graph.outputs] != [v.name for v in graph.outputs]:
        return "outputs differ"
    for name, v in model.graph.variables.items():
        mine = graph.variables.get(name)
        if mine is None or mine.desc.shape != v.desc.shape or mine.desc.dtype != v.desc.dtype:
            return f"variable {name!r} differs"
    return None


class _Source:
    """The source graph's fingerprint and its arrays by ``array_digest``, each computed once,
    when first needed (a lookup and the save after its miss share them)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._fingerprint: str | None = None
        self._pairs: list[tuple[str, np.ndarray]] | None = None
        self._by_digest: dict[str, np.ndarray] = {}
        self._by_id: dict[int, tuple[str, np.ndarray]] = {}
        self._kinds: set[tuple[str, tuple[int, ...]]] = set()
        self.read_ahead: dict[tuple[str, str], Any] = {}  # packs reads begun, by (path, entry's om_sha256)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            pairs: list[tuple[str, np.ndarray]] = []
            self._fingerprint = graph_fingerprint(self.graph, pairs)
            if self._pairs is None:
                self._index(pairs)
        return self._fingerprint

    def _index(self, pairs: list[tuple[str, np.ndarray]]) -> None:
        self._pairs = pairs
        for d, a in pairs:
            self._by_digest.setdefault(d, a)
            self._by_id[id(a)] = (d, a)
            self._kinds.add((a.dtype.str, a.shape))

    def _ensure(self) -> None:
        if self._pairs is None:
            self._index(data_digests(self.graph))

    def held(self, digest: str) -> np.ndarray | None:
        """The graph's array whose ``array_digest`` is ``digest``, or None."""
        self._ensure()
        return self._by_digest.get(digest)

    def ref(self, array: np.ndarray) -> str | None:
        """The digest under which the graph holds exactly ``array``: the same object (a weight
        the passes left alone), or one of the same dtype, shape and bytes; or None."""
        self._ensure()
        same = self._by_id.get(id(array))
        if same is not None and same[1] is array:
            return same[0]
        if (array.dtype.str, array.shape) not in self._kinds:
            return None
        digest = array_digest(array)
        return digest if digest in self._by_digest else None


def lookup_sync(
    cache: GraphCache, graph: Graph, signature: Signature, options: CompileOptions, source: _Source | None = None
) -> Lookup:
    """``cache.lookup_sync`` for ``graph`` at ``signature`` under ``options`` (blocking).
    ``source``: the graph's digests, if the caller has them already."""
    src = source or _Source(graph)

    def match_key() -> dict[str, Any]:
        fingerprint = src.fingerprint() if cache.check == "fingerprint" else None
        return graph_match_key(fingerprint, signature, options.raw, native=native.tier())

    def begin(entry: dict[str, Any]) -> Any:  # the packs read while the .om is (resnet18: 57 MB, 25 ms)
        path, made_for = _packs_file(cache, entry)
        return src.read_ahead.pop((path, entry["om_sha256"]), None) or packs.load_soon(path, made_for, cache.shared)

    found = cache.lookup_sync(graph.name, match_key, var_descs(graph), functools.partial(_fits_graph, graph), src.held, begin)
    if found.model is not None and found.entry is not None:
        _attach_packs(cache, found.entry, found.model, found.begun)
    return found


def _packs_file(cache: GraphCache, entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    made_for = packs.made_for(entry["om_sha256"], native.tier(), native.gemm_tile())
    return packs.path_of(cache.dir, entry["cache_file_name"]), made_for


def _read_ahead(cache: GraphCache, graph: str, signature: Signature, options: CompileOptions) -> dict[tuple[str, str], Any]:
    """``check_cache_dir``, then the packs read begun for the first entry that may serve the
    graph (all but its code digest and fingerprint match), while the lock is taken and the code
    and graph hashed (resnet18: the build 60 -> 42 ms)."""
    check_cache_dir(cache.dir, graph)
    e = cache.candidate(graph_match_key(None, signature, options.raw, code=False, native=native.tier()))
    if e is None:
        return {}
    path = packs.path_of(cache.dir, e["cache_file_name"])
    made_for = functools.partial(packs.made_for, e["om_sha256"], native.tier(), native.gemm_tile())
    return {(path, e["om_sha256"]): packs.load_soon(path, made_for, cache.shared)}


def _attach_packs(cache: GraphCache, entry: dict[str, Any], model: CompiledModel, begun: Any = None) -> None:
    """The entry's stored packed weights for ``model``'s kernels (``begun``: their read, if
    begun), and a place for those its runs pack."""
    gears = enumerate((model, *model.gears))
    constants = {f"{i}/{n}": v.data for i, m in gears for n, v in m.graph.constants.items() if v.data is not None}
    path, made_for = _packs_file(cache, entry)
    save = functools.partial(packs.save_later, path, made_for, cache.mode)
    stored = begun.result() if begun is not None else packs.load(path, made_for, cache.shared)
    packbook.register(packbook.Book(stored, save), constants)


def _counted_lookup(
    cache: GraphCache, graph: Graph, signature: Signature, options: CompileOptions, source: _Source | None = None
) -> Lookup:
    """``lookup_sync``, counted as a hit or a miss for ``aioge cache stats`` (a count that
    cannot be written is logged, never fails the build)."""
    found = lookup_sync(cache, graph, signature, options, source)
    try:
        record_graph_lookup(cache.dir, cache.key, found.model is not None, mode=cache.mode)
    except OSError as exc:
        log.info("graph cache %r: lookup not counted (%s)", cache.key, exc)
    return found


def _fits_graph(graph: Graph, model: CompiledModel) -> str | None:
    return fits(model, graph)


def save_sync(
    cache: GraphCache,
    model: CompiledModel,
    graph: Graph,
    drop: Sequence[str] = (),
    *,
    locked: bool = False,
    source: _Source | None = None,
) -> dict[str, Any]:
    """``cache.save_sync`` of ``model``, compiled from ``graph`` (blocking). Returns the new entry.

    With the fingerprint check the tensors ``graph`` holds are saved as references to it
    (``_Source.ref``); with ``graph_cache_check=key`` the entry is whole (the key alone picks
    it, also for a graph whose arrays differ)."""
    descs = (var_descs(graph), var_descs(model.graph)) if graph.variables else None
    refs = (source or _Source(graph)).ref if cache.check == "fingerprint" else None
    entry = cache.save_sync(model, descs, drop, locked=locked, graph_refs=refs)
    _attach_packs(cache, entry, model)
    return entry


async def load_or_compile(
    cache: GraphCache,
    graph: Graph,
    signature: Signature,
    options: CompileOptions,
    compile: Callable[[], Awaitable[CompiledModel]],
    *,
    limiter: anyio.CapacityLimiter | None = None,
    remote: RemoteTier | None = None,
) -> CompiledModel:
    """Load the compiled model from the cache, or ``await compile()`` and save it.

    The whole lookup (index, fingerprint, model and weights) is one worker-thread hop, the
    save another; ``<key>.lock`` is held over both so that concurrent processes compile once.
    With a ``remote`` tier a disk miss looks there next (a hit is saved to disk), and a
    compiled model is sent there behind the compile (not with external weights: an ``.om``
    alone does not hold them).

    Raises:
        CompileError: E13026 (the dir vanished), or whatever ``compile`` raises. A cache
        that cannot be read or written is logged and never fails the build.
    """
    # Checked before locking: taking the lock would create the directory.
    source = _Source(graph)
    source.read_ahead = await anyio.to_thread.run_sync(_read_ahead, cache, graph.name, signature, options)
    async with cache.locked() as held:
        found = await anyio.to_thread.run_sync(_counted_lookup, cache, graph, signature, options, source, limiter=limiter)
        if found.model is not None:
            return found.model
        rkey = None
        if remote is not None and found.save and not cache.external_weight:
            rkey, fingerprint = await anyio.to_thread.run_sync(
                _remote_key, cache, graph, signature, options, source, limiter=limiter
            )
            model = await _remote_load(remote, rkey, graph, signature, options, fingerprint)
            if model is None:
                model = await compile()
            else:
                rkey = None  # it is there already
        else:
            model = await compile()
        if not found.save:
            return model
        try:
            await anyio.to_thread.run_sync(
                functools.partial(save_sync, locked=held, source=source), cache, model, graph, found.drop, limiter=limiter
            )
        except (OSError, CacheError) as exc:
            log.warning("graph cache %r: could not save the compiled model (%s)", cache.key, exc)
        if remote is not None and rkey is not None:
            remote.put_later("graph", rkey, functools.partial(_encode, model))
        return model


def _remote_key(
    cache: GraphCache, graph: Graph, signature: Signature, options: CompileOptions, source: _Source
) -> tuple[str, str | None]:
    fingerprint = source.fingerprint() if cache.check == "fingerprint" else None
    match = graph_match_key(fingerprint, signature, options.raw, native=native.tier())
    return remote_graph_key(cache.key, match, var_descs(graph)), fingerprint


async def _remote_load(
    remote: RemoteTier, rkey: str, graph: Graph, signature: Signature, options: CompileOptions, fingerprint: str | None
) -> CompiledModel | None:
    data = await remote.get("graph", rkey)
    if data is None:
        return None
    try:
        model = await anyio.to_thread.run_sync(_decode_remote, data, graph, signature, options, fingerprint)
    except (CacheError, ModelFormatError) as exc:
        remote.invalid("graph", rkey, str(exc))
        return None
    model.stats.graph_cache_hit = True
    log.info("graph cache %r: loaded from the remote cache %s", rkey, remote.url)
    return model


def _decode_remote(
    data: bytes, graph: Graph, signature: Signature, options: CompileOptions, fingerprint: str | None
) -> CompiledModel:
    from aioge.compiler.graph import optimised_graph
    from aioge.plan.serialize import decode_model

    model = decode_model(data)  # every check of an .om load
    if fingerprint is not None and model.fingerprint != fingerprint:
        raise CacheError("compiled from another graph (fingerprint differs)")
    if [[n, list(s)] for n, s in model.signature] != [[n, list(s)] for n, s in signature] or model.gears:
        raise CacheError(f"made for input shapes {list(model.signature)}, not {list(signature)}")
    why = fits(model, graph)
    if why is not None:
        raise CacheError(f"cannot serve graph {graph.name!r}: {why}")
    # The store is not trusted with results: the entry's graph (nodes, attributes, descs and
    # every weight, by digest) must be the one this graph compiles to. Its fingerprint names the
    # graph it was compiled from, but only re-deriving proves that its weights are that graph's.
    if graph_fingerprint(model.graph) != graph_fingerprint(optimised_graph(graph, signature, options)):
        raise CacheError(f"its graph or weights are not what graph {graph.name!r} compiles to")
    model.options = dict(options.raw)  # the compile-shaping ones are equal (the key says so); the rest are this session's
    return model


def _encode(model: CompiledModel) -> bytes:
    from aioge.plan.serialize import encode_model

    return encode_model(model)[0]
