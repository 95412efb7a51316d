"""A graph-cache entry's packed weights: ``<key>_<ts>.packs`` beside its ``.om``.

The GEMMs and direct convs pack each constant weight on a model's first run (BERT-base: 72
weights, 340 MB, 0.4 s of CPU). The first process that runs an entry's model stores the packs
it made there (in the background, after the run), and the next ones read them instead
(``kernels.packbook`` hands them to the kernels; ``compiler.cached`` joins the two).

The file is aioge's envelope header (magic, format, kind ``packs``, versions) with what the
packs are made for: ``om_sha256`` (the entry's ``.om``, which names its weights by digest),
``tier`` and ``tile`` (the ISA tier and register tile the layouts follow) and ``code`` (the
code digest: the packers); and per pack ``[name, layout, shape, offset, nbytes, blake3]``,
its float32 bytes at ``offset`` from the first 64-byte boundary after the header. A file
made for anything else, untrusted, truncated or malformed is refused whole, one warning,
and the packs are made and stored again. The file is read into an anonymous mapping of its
own, not mapped: a file rewritten or truncated in place under a running
model would change its weights after their check, or end it with SIGBUS (as for ``weight/``
files). Each pack's BLAKE3 is checked on two threads (every other pack) while the executable is built;
a pack is used only once its check passed (else a warning, and it is packed). Written
atomically and not fsynced (a torn file fails its checks).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import blake3
import numpy as np

from aioge.errors import CacheError
from aioge.keys import code_digest, versions
from aioge.plan import io

__all__ = ["Key", "load", "load_soon", "made_for", "path_of", "save_later", "wait"]

log = logging.getLogger("aioge.cache.graph_cache")

Key = tuple[str, str]  # (a constant's name in the model, the layout a kernel packs it to)
KIND = "packs"
MadeFor = dict[str, Any] | Callable[[], dict[str, Any]]  # ``made_for``'s, or a function giving it
_ALIGN = 64
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aioge-packs")  # checks, then writes; joined at exit
_reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aioge-packs-read")  # load_soon's
os.register_at_fork(
    after_in_child=lambda: globals().update(
        _pool=ThreadPoolExecutor(1, thread_name_prefix="aioge-packs"),
        _reads=ThreadPoolExecutor(1, thread_name_prefix="aioge-packs-read"),
    )
)


def wait() -> None:
    """Return once the checks and writes begun so far are done (a process's exit waits for them too)."""
    for pool in (_reads, _pool):
        pool.submit(int).result()


def path_of(directory: str, om: str) -> str:
    return os.path.join(directory, om[: -len(".om")] + ".packs")


def made_for(om_sha256: str, tier: str, tile: Any) -> dict[str, Any]:
    """What a packs file must have been made for: the entry's ``.om``, the ISA tier and register tile, the code."""
    return {"om_sha256": om_sha256, "tier": tier, "tile": list(tile or ()), "code": code_digest()}


def _digest(a: np.ndarray) -> str:
    return blake3.blake3(a.reshape(-1).view(np.uint8).data).hexdigest()


def load(path: str, made_for: MadeFor, shared: bool) -> dict[Key, tuple[np.ndarray, Future[bool]]]:
    """The packs stored at ``path``, each with its check begun (a future: passed), or {}
    when there is no such file or it is refused (one warning; blocking: it is read)."""
    try:
        stored = _load(path, made_for, shared)
    except FileNotFoundError:
        return {}
    except (OSError, CacheError, ValueError, TypeError, KeyError) as exc:
        log.warning("graph cache: stored packed weights %s refused (%s); packing them again", path, exc)
        return {}
    # every other pack checked on the reading thread, so that two cores check them (the first
    # run waits for them: resnet18's 57 MB, 11 ms on one core)
    pools = (_pool, _reads)
    return {k: (a, pools[i % 2].submit(lambda a, d: _digest(a) == d, a, d)) for i, (k, (a, d)) in enumerate(stored.items())}


def load_soon(path: str, made_for: MadeFor, shared: bool) -> Future[dict[Key, tuple[np.ndarray, Future[bool]]]]:
    """``load`` on a thread of its own: a graph-cache lookup reads the packs while it decodes the ``.om``."""
    return _reads.submit(load, path, made_for, shared)


def save_later(path: str, made_for: dict[str, Any], mode: int, packs: dict[Key, np.ndarray]) -> None:
    """Store ``packs`` at ``path``, replacing the file, in the background."""
    _pool.submit(_save, path, made_for, packs, mode)


def _load(path: str, made_for: MadeFor, shared: bool) -> dict[Key, tuple[np.ndarray, str]]:
    fd, st = io.open_regular(path)
    try:
        why = io.untrusted_reason(st, shared=shared)
        if why is not None:
            raise PermissionError(f"not trusted: {why}")
        head = os.pread(fd, io.MAX_HEADER_BYTES + len(io.MAGIC) + 4, 0)
        header = io.envelope_header(head, path=path)
        if header.get("kind") != KIND or header.get("format") != io.FORMAT_VERSION:
            raise CacheError(f"a {header.get('kind')!r} file of format {header.get('format')!r}, not packed weights", path=path)
        base = -(-(len(io.MAGIC) + 4 + struct.unpack_from("<I", head, len(io.MAGIC))[0]) // _ALIGN) * _ALIGN
        out: dict[Key, tuple[np.ndarray, str]] = {}
        spans = []
        for name, layout, shape, offset, nbytes, digest in header["packs"]:
            count = int(np.prod(shape, dtype=np.int64))
            if not (isinstance(offset, int) and offset % _ALIGN == 0 and 0 <= offset and nbytes == 4 * count > 0):
                raise CacheError(f"pack {name!r} ({layout}) is malformed", path=path)
            if base + offset + nbytes > st.st_size:
                raise CacheError(f"truncated: pack {name!r} ends past the file's {st.st_size} bytes", path=path)
            spans.append((str(name), str(layout), [int(d) for d in shape], base + offset, count, str(digest)))
        # Not MAP_POPULATE: it holds the process's mmap lock while it faults every page in, and
        # the lookup decoding the .om meanwhile stalled on its first allocation (18 ms); the read
        # faults the pages in as it goes, for the same time in all.
        mm = mmap.mmap(-1, st.st_size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        with memoryview(mm) as view:  # a private copy (see the module docstring)
            got = io.read_into(fd, view)
        if got < st.st_size:
            raise CacheError(f"truncated: it shrank to {got} bytes while read", path=path)
    finally:
        os.close(fd)
    for k, v in (made_for() if callable(made_for) else made_for).items():  # after the read: a read-ahead's is late
        if header.get(k) != v:
            raise CacheError(f"made for another {k} ({header.get(k)!r}, this is {v!r})", path=path)
    for name, layout, shape, offset, count, digest in spans:
        out[(name, layout)] = (np.frombuffer(mm, np.float32, count, offset).reshape(shape), digest)
    return out


def _save(path: str, made_for: dict[str, Any], packs: dict[Key, np.ndarray], mode: int) -> None:
    table: list[list[Any]] = []
    pieces: list[bytes | memoryview] = []
    offset = 0
    for (name, layout), a in packs.items():
        a = np.ascontiguousarray(a, np.float32)
        table.append([name, layout, list(a.shape), offset, a.nbytes, _digest(a)])
        pad = -a.nbytes % _ALIGN
        pieces += [a.reshape(-1).view(np.uint8).data, bytes(pad)]
        offset += a.nbytes + pad
    header = io.pack({"format": io.FORMAT_VERSION, "kind": KIND, "versions": versions(), **made_for, "packs": table})
    if len(header) > io.MAX_HEADER_BYTES:
        log.info("graph cache: %d packed weights are more than a packs file's header holds; not storing them", len(table))
        return
    start = len(io.MAGIC) + 4 + len(header)
    head = b"".join([io.MAGIC, struct.pack("<I", len(header)), header, bytes(-start % _ALIGN)])
    try:
        io.write_atomic_sync(path, [head, *pieces], mode=mode, durable=False)
        log.info("graph cache: stored %d packed weights (%d MB) in %s", len(table), offset >> 20, path)
    except OSError as exc:
        log.warning("graph cache: cannot store packed weights in %s (%s)", path, exc)
