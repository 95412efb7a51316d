"""Shared pieces of the fault and load tests: scale, fast child processes, the cache-tree audit.

Children are started from a multiprocessing *forkserver* that has imported aioge already,
so a writer that is SIGKILLed can be replaced in milliseconds instead of the half second a
fresh interpreter takes to import numpy, onnx and aioge.
"""

from __future__ import annotations

import configparser
import functools
import hashlib
import logging
import multiprocessing
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

import aioge
from aioge import ops
from aioge.cache import graph_cache, graph_tools
from aioge.cache.kernel_cache import ENTRY_KIND, GEN_KIND, STATS_KIND
from aioge.compiler import cached
from aioge.plan import io, serialize
from aioge.plan.kernel import desc_from_plain

SCALE = float(os.environ.get("AIOGE_RELIABILITY_SCALE", "1") or "1")
HEURISTIC = {"aioge.tune_mode": "heuristic"}
_TMP_RE = re.compile(r"\.(?P<target>.+)\.[0-9]+\.[0-9a-f]{8}\.tmp")
_CTX: Any = None


def scaled(n: int, minimum: int = 1) -> int:
    """``n`` times ``AIOGE_RELIABILITY_SCALE`` (at least ``minimum``)."""
    return max(minimum, round(n * SCALE))


def mp_context() -> Any:
    """A forkserver context whose server has imported aioge and this module."""
    global _CTX
    if _CTX is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(
            ["numpy", "anyio", "anyio._backends._asyncio", "aioge", "aioge.session", "tests.reliability._faults"]
        )
        _CTX = ctx
    return _CTX


# -- the graphs -------------------------------------------------------------------------


def weights(scale: float, n: int = 64) -> np.ndarray:
    return ((np.arange(n * n, dtype=np.float32).reshape(n, n) % 17) - 8) * (scale / (8 * n))


def family_graph(scale: float, *, variant: int = 0, width: int = 64) -> aioge.Graph:
    """A small graph with a constant (``w``) and a variable (``v``): every cached file kind.

    ``variant`` changes the tail (overlapping graphs: they share the matmul and tanh kernels)."""
    g = aioge.Graph(f"family{variant}")
    x = g.input("x", ("N", width))
    h = ops.tanh(ops.einsum(x, g.constant(weights(scale, width), "w"), equation="ni,ij->nj"))
    v = g.variable("v", np.full((width,), 0.25, np.float32))
    if variant == 0:
        y = ops.relu(h + v)
    elif variant == 1:
        y = ops.sigmoid(h) * v
    else:
        y = ops.relu(h * v) + 1.0
    g.output(y, names=["y"])
    return g


@functools.cache
def _family_arrays() -> dict[str, np.ndarray]:
    """Every array of the family graphs these tests compile, by ``array_digest``: a graph cache
    ``.om`` references the weights its graph holds, so it decodes only with them (as a hit does)."""
    from aioge.ir.fingerprint import data_digests

    return {
        d: a
        for scale in (*SCALES, 1.0)
        for width in (8, 16, 32, 64, CRASH_WIDTH)
        for variant in (0, 1, 2)
        for d, a in data_digests(family_graph(scale, variant=variant, width=width))
    }


def family_ref(x: np.ndarray, scale: float, *, variant: int = 0, width: int = 64) -> np.ndarray:
    h = np.tanh(x @ weights(scale, width))
    if variant == 0:
        return np.maximum(h + 0.25, 0)
    if variant == 1:
        return 0.25 / (1 + np.exp(-h))
    return np.maximum(h * 0.25, 0) + 1.0


def feed(n: int, seed: int, width: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width)).astype(np.float32)


# -- the audit --------------------------------------------------------------------------


def kind_of(name: str, parent: str) -> str:
    """The file type a cache file name stands for (a temp file: its target's type)."""
    m = _TMP_RE.fullmatch(name)
    if m:
        return "tmp:" + kind_of(m["target"], parent)
    if parent == serialize.WEIGHT_DIR and name.startswith("weight_"):
        return "weight"
    if name.endswith(".aiok"):
        return "kernel"
    if name == graph_tools.STATS_FILE:
        return "graph-stats"
    for suffix, kind in (
        (".om", "om"),
        (".rdcpkt", "rdcpkt"),
        (".idx", "idx"),
        (".lock", "lock"),
        (".aiog", "generation"),
        (".aios", "stats"),
        (".ini", "ini"),
    ):
        if name.endswith(suffix):
            return kind
    return "unknown"


def audit(root: str | os.PathLike[str]) -> Counter[str]:
    """Check every file under ``root``: each one decodes whole as its type, or is an empty lock
    file, or a temp file (which readers ignore). Returns the count per type; raises
    AssertionError naming every file that is partial, corrupt or unknown."""
    counts: Counter[str] = Counter()
    bad: list[str] = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            kind = kind_of(name, os.path.basename(dirpath))
            counts[kind] += 1
            try:
                _check(path, kind)
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                bad.append(f"{path} ({kind}, {os.path.getsize(path)} bytes): {type(exc).__name__}: {exc}")
    assert not bad, "partial or corrupt files in the cache:\n" + "\n".join(bad)
    return counts


def _check(path: str, kind: str) -> None:
    if kind.startswith("tmp:"):
        return
    data = Path(path).read_bytes()
    if kind == "kernel":
        header, payload = io.open_envelope(data, ENTRY_KIND, path=path)
        desc = desc_from_plain(io.unpack(payload))
        assert desc.key == header["key"] and os.path.basename(path).startswith(desc.key + ".g"), "key mismatch"
    elif kind == "generation":
        io.unpack(io.open_envelope(data, GEN_KIND, path=path, check_versions=False)[1])
    elif kind == "stats":
        io.unpack(io.open_envelope(data, STATS_KIND, path=path, check_versions=False)[1])
    elif kind == "graph-stats":
        io.unpack(io.open_envelope(data, graph_tools.STATS_KIND, path=path, check_versions=False)[1])
    elif kind == "ini":
        cp = configparser.ConfigParser()
        cp.read_string(data.decode())
        assert cp.has_section("op_compiler_cache")
    elif kind == "idx":
        for e in graph_cache.read_index(path)["cache_file_list"]:
            assert os.path.exists(os.path.join(os.path.dirname(path), e["cache_file_name"])), (
                f"names missing {e['cache_file_name']}"
            )
    elif kind == "om":  # decoded as the cache decodes it, with the graph it was compiled from
        serialize.decode_model(data, path=path, held=_family_arrays().get)
    elif kind == "rdcpkt":
        descs = io.unpack(io.open_envelope(data, graph_cache.RDCPKT_KIND, path=path, check_versions=False)[1])
        assert isinstance(descs, dict) and "before" in descs
    elif kind == "weight":
        assert hashlib.sha256(data).hexdigest() == os.path.basename(path).removeprefix("weight_"), "weight checksum"
    elif kind == "lock":
        assert not data, "a lock file with content"
    else:
        raise AssertionError("a file aioge does not write")


def snapshot(root: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every file under ``root``, to tell which ones were written since."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            out[os.path.join(dirpath, name)] = (st.st_ino, st.st_mtime_ns)
    return out


class Warnings(logging.Handler):
    """Collects aioge's warning records (the cache's 'one clear warning')."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("aioge"):
            self.messages.append(f"{record.name}: {record.getMessage()}")

    def __enter__(self) -> Warnings:
        logging.getLogger("aioge").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("aioge").removeHandler(self)


# -- children (run in forkserver processes) ---------------------------------------------

SCALES = (0.5, 1.0, 2.0)
CRASH_WIDTH = 128  # 64 KB of weights per model: big enough that kills land inside writes


def crash_options(root: str) -> dict[str, str]:
    return {
        "ge.op_compiler_cache_dir": os.path.join(root, "kc"),
        "ge.graph_compiler_cache_dir": os.path.join(root, "gc"),
        **HEURISTIC,
    }


def crash_graph_options(scale_index: int, variant: int, *, external: bool, force: bool) -> dict[str, str]:
    return {
        "ge.graph_key": f"k{variant}_{scale_index}",
        "ge.externalWeight": "1" if external else "0",
        "ge.op_compiler_cache_mode": "force" if force else "enable",
    }


def crash_writer(root: str, seed: int, ready: Any) -> None:
    """Compile, save and run graphs into ``root`` forever (until killed): kernel entries,
    generations (force), stats, .om, .rdcpkt, .idx and weight/ files, over and over."""
    import random

    import anyio

    rng = random.Random(seed)

    async def main() -> None:
        ready.set()
        while True:
            si, variant, n = rng.randrange(len(SCALES)), rng.randrange(3), rng.randint(1, 24)
            external = rng.random() < 0.5
            gopts = crash_graph_options(si, variant, external=external, force=rng.random() < 0.2)
            scale = SCALES[si]
            if rng.random() < 0.3:  # new weights: new weight/ files (the family's are written once, then shared)
                scale, gopts["ge.graph_key"], gopts["ge.externalWeight"] = rng.uniform(0.1, 3.0), f"kr{variant}_{si}", "1"
                # Trusting the key, entries are whole: w goes to a weight file (with the fingerprint
                # check an entry references the weights its graph holds, and writes no file for them).
                gopts["aioge.graph_cache_check"] = "key"
            async with aioge.Session(crash_options(root)) as s:
                await s.add_graph(1, family_graph(scale, variant=variant, width=CRASH_WIDTH), gopts)
                await s.run_graph(1, {"x": feed(n, n, CRASH_WIDTH)})

    anyio.run(main)


MP_WIDTH = 32


def multiproc_worker(root: str, proc: int, tasks: int, rounds: int, start_at: float, out: Any) -> None:
    """``tasks`` tasks on one session, each compiling (a new graph id per round, so every
    round goes through the kernel cache) and running overlapping graphs; task 0 of even
    processes compiles every other round in ``force`` mode. Puts a summary on ``out``."""
    import time

    import anyio

    summary: dict[str, Any] = {"proc": proc, "runs": 0, "errors": [], "stored": []}

    async def main() -> None:
        while time.time() < start_at:
            await anyio.sleep(0.005)
        async with aioge.Session({"ge.op_compiler_cache_dir": root, **HEURISTIC}) as s:
            ids = iter(range(1, 1 << 30))

            async def task(t: int) -> None:
                for r in range(rounds):
                    variant, n = (proc + t + r) % 3, 1 + (proc * 7 + t * 3 + r) % 4
                    force = t == 0 and proc % 2 == 0 and r % 2 == 0
                    gid = next(ids)
                    try:
                        await s.add_graph(
                            gid,
                            family_graph(1.0, variant=variant, width=MP_WIDTH),
                            {"ge.op_compiler_cache_mode": "force" if force else "enable"},
                        )
                        x = feed(n, proc * 1000 + t * 100 + r, MP_WIDTH)
                        y = (await s.run_graph(gid, {"x": x}))["y"]
                        if not np.allclose(y, family_ref(x, 1.0, variant=variant, width=MP_WIDTH), rtol=1e-5, atol=1e-6):
                            summary["errors"].append(f"task {t} round {r}: wrong result")
                        summary["runs"] += 1
                        await s.remove_graph(gid)
                    except Exception as exc:  # noqa: BLE001 - reported to the test
                        summary["errors"].append(f"task {t} round {r}: {type(exc).__name__}: {exc}")

            async with anyio.create_task_group() as tg:
                for t in range(tasks):
                    tg.start_soon(task, t)
            summary["stored"] = [[k, g, c] for (k, g), c in s.kernel_cache.stored.items()]

    with Warnings() as w:
        anyio.run(main)
    summary["warnings"] = w.messages
    out.put(summary)


def index_writer(directory: str, key: str, proc: int, count: int, start_at: float, locks: bool, out: Any) -> None:
    """Append ``count`` entries (this process's own input shapes) to one key's index, racing
    another process doing the same; with ``locks=False`` the index lock is not taken."""
    import contextlib
    import time

    from aioge.compiler.graph import compile_graph_sync
    from aioge.options import resolve_options

    g = family_graph(1.0, width=8)
    models = [compile_graph_sync(g, [("x", (1 + proc * count + i, 8))], resolve_options(HEURISTIC)) for i in range(count)]
    cache = graph_cache.GraphCache(directory, key)
    if not locks:
        graph_cache.SyncFileLock = lambda *a, **k: contextlib.nullcontext(False)  # type: ignore[assignment]
    names = []
    while time.time() < start_at:
        time.sleep(0.001)
    for m in models:
        names.append(cached.save_sync(cache, m, g)["cache_file_name"])
    out.put({"proc": proc, "names": names})


NOBODY = 65534


def disk_fault_child(kc: str, gc: str, fault: str, as_nobody: bool, out: Any) -> None:
    """Compile and run one graph (a variable, external weights) with both caches on, under a
    fault: ``disk_full`` (RLIMIT_FSIZE 0, SIGXFSZ ignored: every write fails with EFBIG) or a
    directory layout the parent made unwritable. Puts outputs, warnings and errors on ``out``."""
    import resource
    import signal

    import anyio
    import anyio._backends._asyncio  # noqa: F401 - imported before the fault (it may write bytecode)
    import filelock  # noqa: F401 - aioge imports it on first lock: as nobody, the stdlib under /root may be unreadable

    import aioge.session  # noqa: F401 - likewise loaded on first use of Session (and the compiler, caches, runtime)

    if fault == "disk_full":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    if as_nobody:  # root writes everywhere: the permission faults need another user
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    result: dict[str, Any] = {"fault": fault, "y": [], "error": None}

    async def main() -> None:
        opts = {"ge.op_compiler_cache_dir": kc, "ge.graph_compiler_cache_dir": gc, **HEURISTIC}
        async with aioge.Session(opts) as s:
            await s.add_graph(1, family_graph(1.0, width=16), {"ge.graph_key": "faulty", "ge.externalWeight": "1"})
            for seed in (1, 2):
                x = feed(3, seed, 16)
                y = (await s.run_graph(1, {"x": x}))["y"]
                result["y"].append(bool(np.allclose(y, family_ref(x, 1.0, width=16), rtol=1e-5, atol=1e-6)))
            result["cache_hit"] = s.compiled(1).stats.graph_cache_hit

    with Warnings() as w:
        try:
            anyio.run(main)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            result["error"] = f"{type(exc).__name__}: {exc}"
    result["warnings"] = w.messages
    out.put(result)


def stalled_saver(directory: str, stall: str, ready: Any) -> None:
    """Save one graph cache entry, stalling forever at ``stall`` ("encode": after the name
    would have been claimed, before any model byte is written; "index": after the files are
    published, before the index is), so the parent can kill it exactly there."""
    import time

    from aioge.compiler.graph import compile_graph_sync
    from aioge.options import resolve_options

    g = family_graph(1.0, width=8)
    model = compile_graph_sync(g, [("x", (2, 8))], resolve_options(HEURISTIC))

    def stop(*args: Any, **kwargs: Any) -> Any:
        ready.set()
        while True:
            time.sleep(1)

    if stall == "encode":
        serialize.encode_model = stop  # type: ignore[assignment]
    else:
        graph_cache.GraphCache._append = stop  # type: ignore[method-assign]
    cached.save_sync(graph_cache.GraphCache(directory, "stall"), model, g)


def rewrite_cache_entry(gc: Path, key: str, graph: aioge.Graph, edit: Any) -> None:
    """An attacker's edit of graph-cache entry ``key`` in ``gc``: its .om decoded (with the
    graph's weights, as a hit reads it), changed by ``edit(model)``, encoded again, and the
    index's sha256 of it updated to match."""
    from aioge.ir.fingerprint import data_digests

    om = next(gc.glob(f"{key}_*.om"))
    model = serialize.decode_model(om.read_bytes(), path=str(om), held=dict(data_digests(graph)).get)
    edit(model)
    data = serialize.encode_model(model)[0]
    io.write_atomic_sync(om, data)
    idx = gc / f"{key}.idx"
    header, payload = io.open_envelope(idx.read_bytes(), "idx")
    index = io.unpack(payload)
    index["cache_file_list"][0]["om_sha256"] = io.open_envelope(data, "om")[0]["sha256"]
    extra = {k: v for k, v in header.items() if k not in ("format", "kind", "versions", "size", "sha256")}
    io.write_atomic_sync(idx, io.make_envelope("idx", io.pack(index), extra))
