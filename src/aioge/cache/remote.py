"""The remote cache tier: a shared store (Redis first) behind the disk caches.

Read-through, write-behind (sccache's and ccache's remote storage, Inductor's Redis cache):
a kernel or graph entry is looked up on disk first, then in the remote store, and compiled
only when both miss; a remote hit is published to the local disk, so the next process on
this machine starts warm without the network. What a compile publishes locally is sent to
the remote store afterwards, from the tier's own thread: never on the compile's critical
path.

Entries travel in the same checksummed envelope as on disk (``plan.io``: magic, format,
versions, sha256); a kernel entry's header names its key. A remote entry that is corrupt,
truncated, foreign or from other versions is a miss and one warning, never a crash, and the
recompiled entry replaces it. Remote keys live in a namespace per soc and per versions and
code (``keys.remote_namespace``); entries expire after a TTL, entries larger than a bound are
not sent, and the server's own ``maxmemory`` policy bounds the total.

A remote that is down or slow never fails or stalls a compile: each request has a deadline
(``aioge.remote_cache_timeout_ms``), the first failure is one warning, and the tier then
stays out of the way (every lookup a miss, every write dropped) for ``DOWN_SECONDS`` before it
tries again.

Trust (README, "Trust model of the remote tier"): a graph entry's graph must be the one this
graph compiles to (``compiler.cached``); with ``aioge.remote_cache_key`` every entry is
HMAC-SHA256-signed over its remote name and bytes, and an unsigned or badly signed one is a miss.

The store protocol (``RemoteStore``) is three coroutines run on the tier's own asyncio loop
thread, so an asyncio client (``redis.asyncio``) serves callers on any anyio backend (trio
too) and writes outlive the compile that made them. ``RedisStore`` is the first backend.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import hmac
import logging
import os
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Mapping, Protocol

import anyio

from aioge._util.singleflight import SingleFlight
from aioge.cache.stats_file import read_stats_file, update_stats_file
from aioge.errors import CacheError, OptionError
from aioge.keys import remote_namespace
from aioge.plan.io import make_envelope, open_envelope, pack, unpack
from aioge.plan.kernel import KernelDesc, desc_from_plain, desc_to_plain

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "DOWN_SECONDS",
    "RedisStore",
    "RemoteStats",
    "RemoteStore",
    "RemoteTier",
    "TieredKernelStore",
    "format_remote_report",
    "read_remote_stats",
    "redact",
    "remote_report",
    "remote_tier_for",
]

log = logging.getLogger(__name__)

KERNEL_KIND = "aioge-kernel"  # the disk cache's entry kind: one envelope for both tiers
STATS_KIND = "aioge-remote-stats"
STATS_FILE = "remote_stats.aios"  # in <root>/kernel_cache/, by soc
DOWN_SECONDS = 30.0  # after a failure the tier stays out of the way this long
MAX_KERNEL_BYTES = 1 << 20  # as the disk tier: a kernel desc is a few hundred bytes
_MAX_PENDING = 1024  # write-behinds queued at once; more are dropped (and counted)
_FLUSH_SECONDS = 5.0  # how long closing waits for queued writes
_SIGNED = b"aioge-hmac-sha256\0"  # a signed entry: this, the 32-byte tag, the entry
_SIGN_IN_THREAD = 1 << 16  # entries past this are checked off the event loop


class _Dropped(Exception):
    """A write-behind with nothing (or too much) to send."""


class RemoteStore(Protocol):
    """A remote key-value store, as the tier needs it. Its coroutines run on the tier's own
    asyncio loop thread; a failure raises (any exception), a missing key is None."""

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_seconds: int) -> None: ...

    async def aclose(self) -> None: ...


class RedisStore:
    """A ``RemoteStore`` on Redis (``redis.asyncio``): GET, SET with EX, no retries (the tier
    has its own deadline and back-off)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self._client: Any = None

    def _redis(self) -> Any:
        if self._client is None:
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            self._client = redis.asyncio.Redis.from_url(
                self.url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                retry_on_error=[],
                health_check_interval=0,
            )
        return self._client

    async def get(self, key: str) -> bytes | None:
        value = await self._redis().get(key)
        return None if value is None else bytes(value)

    async def set(self, key: str, value: bytes, ttl_seconds: int) -> None:
        await self._redis().set(key, value, ex=ttl_seconds)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def redact(url: str) -> str:
    """``url`` without its password (for messages and statistics)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


@dataclass(slots=True)
class RemoteStats:
    """The tier's counters: lookups that hit, missed, or failed (error or timeout), entries
    found unusable, writes sent, and writes dropped (remote down, too large, queue full)."""

    hits: int = 0
    misses: int = 0
    errors: int = 0
    invalid: int = 0
    writes: int = 0
    dropped: int = 0


class _LoopThread:
    """One asyncio loop in a daemon thread: the remote client lives and awaits here."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._loop is None:
                ready = threading.Event()
                self._thread = threading.Thread(target=self._main, args=(ready,), name=self._name, daemon=True)
                self._thread.start()
                ready.wait()
            assert self._loop is not None
            import asyncio  # here, not at module level: only a remote tier needs it (import aioge stays light)

            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _main(self, ready: threading.Event) -> None:
        import asyncio

        loop = asyncio.new_event_loop()
        self._loop = loop
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    @property
    def started(self) -> bool:
        return self._loop is not None

    def stop(self, timeout: float) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)


class RemoteTier:
    """One session's remote tier: a store, its namespace (soc and versions), deadline, TTL,
    size bound, counters, and the write-behind queue."""

    def __init__(
        self,
        store: RemoteStore,
        *,
        soc: str,
        url: str = "",
        timeout: float = 0.5,
        ttl_seconds: int = 7 * 86400,
        max_entry_bytes: int = 64 << 20,
        clock: Callable[[], float] = time.monotonic,
        key: bytes = b"",
    ) -> None:
        self.store = store
        self.url = redact(url) if url else type(store).__name__
        self.soc = soc
        self.namespace = remote_namespace(soc)
        self.timeout = timeout
        self.ttl_seconds = ttl_seconds
        self.max_entry_bytes = max_entry_bytes
        self._key = key  # HMAC key: entries are signed and only signed ones are taken
        self.stats = RemoteStats()
        self.recorded = RemoteStats()  # what ``record_stats_sync`` has written already
        self._clock = clock
        self._down_until = 0.0
        self._warned = False
        self._lock = threading.Lock()  # counters are bumped from the loop thread too
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._thread = _LoopThread(f"aioge-remote-{soc}")
        self._closed = False

    def __repr__(self) -> str:
        return f"RemoteTier({self.url!r}, {self.namespace!r})"

    def name(self, kind: str, key: str) -> str:
        """The remote key of a ``kind`` ("kernel", "graph") entry."""
        return f"{self.namespace}:{kind}:{key}"

    @property
    def down(self) -> bool:
        return self._closed or self._clock() < self._down_until

    # -- reads ------------------------------------------------------------------------

    async def get(self, kind: str, key: str) -> bytes | None:
        """The stored bytes of an entry, or None (absent, remote down or slow: never raises,
        never waits much longer than the deadline)."""
        if self.down:
            return None
        fut = self._thread.submit(self._deadline(self.store.get(self.name(kind, key))))
        try:
            data = await anyio.to_thread.run_sync(fut.result, self.timeout + 0.1, abandon_on_cancel=True)
        except BaseException as exc:
            fut.cancel()
            if isinstance(exc, Exception):
                self._failed("lookup", exc)
                return None
            raise
        if not isinstance(data, (bytes, bytearray)):
            self._count(misses=1)
            return None
        self._count(hits=1)
        data = bytes(data)
        if not self._key:
            return data
        name = self.name(kind, key)
        if len(data) > _SIGN_IN_THREAD:
            entry = await anyio.to_thread.run_sync(self._unsign, name, data)
        else:
            entry = self._unsign(name, data)
        if entry is None:
            self.invalid(kind, key, "unsigned or badly signed (aioge.remote_cache_key is set)")
        return entry

    def _tag(self, name: str, data: bytes | memoryview) -> bytes:
        mac = hmac.new(self._key, name.encode() + b"\0", hashlib.sha256)
        mac.update(data)
        return mac.digest()

    def _sign(self, name: str, data: bytes) -> bytes:
        """``data`` signed (with a key; the tag covers the remote name too), else as it is."""
        return _SIGNED + self._tag(name, data) + data if self._key else data

    def _unsign(self, name: str, data: bytes) -> bytes | None:
        """The entry in signed ``data``, or None when unsigned or the tag is wrong."""
        n = len(_SIGNED)
        body, tag = memoryview(data)[n + 32 :], data[n : n + 32]
        return bytes(body) if data.startswith(_SIGNED) and hmac.compare_digest(tag, self._tag(name, body)) else None

    async def _deadline(self, coro: Coroutine[Any, Any, Any]) -> Any:
        import asyncio

        return await asyncio.wait_for(coro, self.timeout)

    def invalid(self, kind: str, key: str, reason: str) -> None:
        """An entry the remote held is unusable: counted (a hit that is not one), one warning."""
        self._count(hits=-1, invalid=1, misses=1)
        log.warning("remote cache %s: %s entry %s is unusable, compiling it: %s", self.url, kind, key, reason)

    # -- writes -----------------------------------------------------------------------

    def put(self, kind: str, key: str, data: bytes) -> None:
        """Send an entry in the background (write-behind). Returns at once; never raises."""
        if self.down or len(data) > self.max_entry_bytes or len(self._pending) >= _MAX_PENDING:
            self._count(dropped=1)
            return
        name = self.name(kind, key)  # a kernel entry: a few hundred bytes, signed here
        fut = self._thread.submit(self._deadline(self.store.set(name, self._sign(name, data), self.ttl_seconds)))
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._written)

    def put_later(self, kind: str, key: str, make: Callable[[], bytes | None]) -> None:
        """``put`` of the bytes ``make()`` returns (None: nothing to send), made in a thread
        of the tier's own: a big entry is encoded off the compile's path too."""
        if self.down or len(self._pending) >= _MAX_PENDING:
            self._count(dropped=1)
            return
        fut = self._thread.submit(self._make_and_set(kind, key, make))
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._written)

    async def _make_and_set(self, kind: str, key: str, make: Callable[[], bytes | None]) -> None:
        import asyncio

        name = self.name(kind, key)

        def signed() -> bytes | None:
            data = make()
            return None if data is None or len(data) > self.max_entry_bytes else self._sign(name, data)

        data = await asyncio.get_running_loop().run_in_executor(None, signed)
        if data is None:
            raise _Dropped
        await self._deadline(self.store.set(name, data, self.ttl_seconds))

    def _written(self, fut: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.discard(fut)
        if fut.cancelled() or isinstance(fut.exception(), _Dropped):
            self._count(dropped=1)
        elif fut.exception() is not None:
            self._failed("write", fut.exception())  # type: ignore[arg-type]
        else:
            self._count(writes=1)

    async def flush(self, timeout: float = _FLUSH_SECONDS) -> None:
        """Wait (at most ``timeout`` seconds, off the loop) for the writes queued so far."""
        with self._lock:
            pending = list(self._pending)
        if pending:
            await anyio.to_thread.run_sync(concurrent.futures.wait, pending, timeout, abandon_on_cancel=True)

    async def aclose(self) -> None:
        """Flush queued writes (bounded), close the store, stop the tier's thread."""
        if self._closed:
            return
        await self.flush()
        self._closed = True
        if not self._thread.started:
            return  # never used: nothing to close
        fut = self._thread.submit(self._deadline(self.store.aclose()))
        with contextlib.suppress(Exception):
            await anyio.to_thread.run_sync(fut.result, self.timeout + 0.1, abandon_on_cancel=True)
        await anyio.to_thread.run_sync(self._thread.stop, 1.0)

    # -- bookkeeping ------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _failed(self, what: str, exc: BaseException) -> None:
        self._count(errors=1)
        self._down_until = self._clock() + DOWN_SECONDS
        reason = (
            "timed out"
            if isinstance(exc, (TimeoutError, concurrent.futures.TimeoutError))  # asyncio's is the builtin since 3.11
            else f"{type(exc).__name__}: {exc}"
        )
        with self._lock:
            first, self._warned = not self._warned, True
        if first:
            log.warning(
                "remote cache %s unavailable (%s %s after %.0f ms deadline); compiling with the local caches only, "
                "retrying in %.0f s",
                self.url,
                what,
                reason,
                1e3 * self.timeout,
                DOWN_SECONDS,
            )
        else:
            log.debug("remote cache %s: %s failed: %s", self.url, what, reason)

    def record_stats_sync(self, kernel_dir: str | Path, *, mode: int = 0o600) -> None:
        """Add the counters since the last call to ``<kernel_dir>/remote_stats.aios`` (by soc).

        Raises:
            OSError: the file cannot be written.
        """
        with self._lock:
            now = RemoteStats(**asdict(self.stats))
            delta = {k: v - getattr(self.recorded, k) for k, v in asdict(now).items()}
            self.recorded = now
        if not any(delta.values()):
            return
        kernel_dir = Path(kernel_dir)
        kernel_dir.mkdir(parents=True, exist_ok=True, mode=0o700 if mode == 0o600 else 0o770)

        def change() -> dict[str, dict[str, Any]]:
            data = read_remote_stats(kernel_dir)
            mine = data.setdefault(self.soc, {k: 0 for k in delta})
            for k, v in delta.items():
                mine[k] = max(0, int(mine.get(k, 0)) + v)
            mine["url"] = self.url
            return data

        update_stats_file(kernel_dir / STATS_FILE, STATS_KIND, kernel_dir / ".remote_stats.lock", change, mode=mode)


def read_remote_stats(kernel_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The recorded remote-tier counters under a ``kernel_cache`` dir, by soc ({} when none;
    an unusable file is a warning and {})."""
    path = Path(kernel_dir) / STATS_FILE
    try:
        data = read_stats_file(path, STATS_KIND, what="remote cache statistics")
    except FileNotFoundError:
        return {}
    except (CacheError, OSError) as exc:
        log.warning("remote cache statistics unusable, starting from zero: %s", exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}


def remote_report(root: str | os.PathLike[str] | None, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The remote tier for ``aioge cache stats``: the URL ``$AIOGE_REMOTE_CACHE`` names (without
    its password) and, per soc, the counters sessions recorded under the root's kernel cache."""
    from aioge.cache.kernel_limits import resolve_cache_root

    env = dict(os.environ if env is None else env)
    base = resolve_cache_root(os.fspath(root) if root else "", env)
    url = env.get("AIOGE_REMOTE_CACHE", "")
    socs = read_remote_stats(base / "kernel_cache")
    return {"url": redact(url) if url else None, "socs": [{"soc": soc, **c} for soc, c in sorted(socs.items())]}


def format_remote_report(report: Mapping[str, Any]) -> list[str]:
    """``remote_report`` as the lines ``aioge cache stats`` prints: with the tier off, no counts
    (the kernel lines say how many kernels it served; ``--json`` keeps every count)."""
    if not report["url"]:
        return ["remote cache: off (set aioge.remote_cache or $AIOGE_REMOTE_CACHE)"]
    lines = [f"remote cache: {report['url']}"]
    if not report["socs"]:
        lines.append("  nothing recorded")
    for s in report["socs"]:
        lines.append(
            f"  {s['soc']}: hits {s.get('hits', 0)}, misses {s.get('misses', 0)}, errors {s.get('errors', 0)}, "
            f"invalid {s.get('invalid', 0)}, writes {s.get('writes', 0)}, dropped {s.get('dropped', 0)}"
            f"{'  (' + str(s['url']) + ')' if s.get('url') else ''}"
        )
    return lines


# -- kernels ------------------------------------------------------------------------------


def encode_kernel(desc: KernelDesc) -> bytes:
    """A kernel's remote entry: the disk tier's envelope, its header naming the key."""
    return make_envelope(KERNEL_KIND, pack(desc_to_plain(desc)), {"key": desc.key})


def decode_kernel(data: bytes, key: str) -> KernelDesc:
    """The kernel desc in a remote entry of ``key``.

    Raises:
        CacheError: corrupt, foreign, from other versions, or another key's entry.
    """
    header, payload = open_envelope(data, KERNEL_KIND)
    if header.get("key") != key:
        raise CacheError(f"holds key {header.get('key')!r}, not {key!r}")
    try:
        desc = desc_from_plain(unpack(payload, what="kernel desc"))
    except ValueError as exc:
        raise CacheError(str(exc)) from None
    if desc.key != key:
        raise CacheError(f"describes kernel {desc.key!r}, not {key!r}")
    return desc


@dataclass(frozen=True, slots=True)
class _Found:
    desc: KernelDesc | None
    status: str


class TieredKernelStore:
    """A ``KernelStore`` (``compiler.ops``): the disk kernel cache, then the remote tier.

    Everything but ``load`` and ``store`` is the disk cache's. A remote hit is published to
    disk (not counted as a compile); a local publish is sent to the remote behind the compile.
    """

    def __init__(self, local: Any, remote: RemoteTier) -> None:
        self.local = local
        self.remote = remote
        self.flights: SingleFlight[Any, Any] = local.flights
        self._missed: set[str] = set()  # keys the remote missed, until stored: the re-check after the lock skips it
        self._served = 0  # remote hits since the last after_compile: the disk tier missed them

    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)

    async def open_view(self, *, force: bool) -> Any:
        return await self.local.open_view(force=force)

    async def close_view(self, view: Any) -> None:
        await self.local.close_view(view)

    def key_lock(self, key: str, view: Any) -> Any:
        return self.local.key_lock(key, view)

    async def load(self, key: str, view: Any) -> Any:
        found = await self.local.load(key, view)
        if found.desc is not None or getattr(view, "started", False) or key in self._missed:
            return found  # a force compile's new generation is not read from the remote either
        data = await self.remote.get("kernel", key)
        if data is None:
            self._missed.add(key)
            return found
        try:
            desc = await anyio.to_thread.run_sync(decode_kernel, data, key)
        except CacheError as exc:
            self.remote.invalid("kernel", key, str(exc))
            self._missed.add(key)
            return _Found(None, "invalid")
        await self.local.store(desc, view, compiled=False)
        self._served += 1
        return _Found(desc, "hit")

    async def store(self, desc: KernelDesc, view: Any) -> int:
        written = await self.local.store(desc, view)
        self._missed.discard(desc.key)
        self.remote.put("kernel", desc.key, encode_kernel(desc))
        return int(written)

    async def after_compile(self, **counts: int) -> Any:
        # The disk's statistics are the disk's: a kernel the remote served is a disk miss.
        served, self._served = min(self._served, counts.get("hits", 0)), 0
        counts["hits"] = counts.get("hits", 0) - served
        counts["misses"] = counts.get("misses", 0) + served
        report = await self.local.after_compile(**counts)
        try:
            await anyio.to_thread.run_sync(
                lambda: self.remote.record_stats_sync(self.local.kernel_dir, mode=0o664 if self.local.shared else 0o600)
            )
        except OSError as exc:
            log.debug("remote cache statistics not recorded: %s", exc)
        return report


def remote_tier_for(options: Any) -> RemoteTier | None:
    """The remote tier resolved ``CompileOptions`` ask for (``aioge.remote_cache``), or None.

    Raises:
        OptionError: the ``redis`` extra is not installed.
    """
    url = options.remote_cache
    if not url:
        return None
    try:
        import redis.asyncio  # noqa: F401
    except ImportError:
        raise OptionError("aioge.remote_cache", redact(url), "the redis extra installed (pip install 'aioge[redis]')") from None
    timeout = options.remote_cache_timeout_ms / 1e3
    return RemoteTier(
        RedisStore(url, timeout),
        soc=options.soc_version,
        url=url,
        timeout=timeout,
        ttl_seconds=options.remote_cache_ttl,
        max_entry_bytes=options.remote_cache_max_entry_mb << 20,
        key=options.remote_cache_key.encode(),
    )
