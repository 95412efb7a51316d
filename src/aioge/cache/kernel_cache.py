"""The kernel disk cache: ``<root>/kernel_cache/<soc>/``, one self-validating file per kernel.

An entry is an envelope (``plan.io``: magic, format, versions, sha256) of kind
``aioge-kernel`` whose header echoes the kernel key and whose payload is the ``KernelDesc``
as msgpack: data, never code. It is published atomically; a truncated, corrupt, foreign or
stale file is a miss and one warning, never a crash.

``force`` mode does not delete files another compile may be reading (GE's ``force`` does,
and breaks parallel compiles sharing the dir). It starts a new *generation*: a random token
published atomically in ``generation.aiog``. Entry names carry their generation
(``<key>.g<gen>.aiok``), so a compile that started under the old generation keeps reading
its entries, while every compile that starts later misses them. Every compile that uses the
cache holds a shared lock (flock) on its generation's ``.locks/gen-<gen>.lock`` for as long
as it reads and writes entries. A dead generation is reclaimed as soon as nobody holds it:
the force compile, when its kernels are done, removes every older generation it can lock
exclusively, and the last compile of a dead generation removes it when it lets go. Where
flock is missing or lies (some NFS mounts), a reclaimed entry is only a miss, and aging
removes what is left (dead generations first, once idle for 30 minutes).

A cache dir that is not trusted (writable by others; unless ``aioge.cache_shared=1``, owned
by another user or writable by its group) is neither read nor written, in every mode: one
warning, and the compile goes on without the cache, as ccache does with a cache dir it
cannot use. Writing into a private dir instead would grow a second cache the user never
configured and no later run would find.

Access times are tracked explicitly: a hit sets the entry's *mtime* to the cache clock's
now (``os.utime``; the clock is injectable). The OS's own atime cannot be trusted either way
(noatime mounts never update it, relatime ones update it on some reads behind our back);
an entry is written once, so its mtime is free to record its last use. With
``max_op_cache_size=-1`` hits leave it alone, as in GE. Hit, miss and compile counts are kept per soc in
``stats.aios``, updated atomically once per graph compile. Aging and the ``aioge cache``
tools delete only files aioge wrote: entry names that match and start with aioge's magic.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import anyio

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no generation holds; aging reclaims instead
    fcntl = None  # type: ignore[assignment]

from aioge._util.singleflight import SingleFlight
from aioge.cache.file_lock import SyncFileLock, async_file_lock, new_lock
from aioge.cache.kernel_limits import AGING_IDLE_SECONDS, CacheLimits, read_limits, resolve_cache_root, write_default_ini
from aioge.cache.stats_file import read_stats_file, update_stats_file
from aioge.errors import CacheError
from aioge.plan.io import (
    make_envelope,
    open_envelope,
    pack,
    read_trusted_sync,
    unlink_if_ours,
    unpack,
    untrusted_dir_reason,
    write_atomic_sync,
)
from aioge.plan.kernel import KernelDesc, desc_from_plain, desc_to_plain

__all__ = ["AgingReport", "CacheView", "KernelCache", "LoadResult", "SocSummary", "cache_for_dir", "cache_report", "root_problem"]

log = logging.getLogger(__name__)

ENTRY_KIND = "aioge-kernel"
STATS_KIND = "aioge-kernel-stats"
GEN_KIND = "aioge-kernel-generation"
GEN_FILE = "generation.aiog"
STATS_FILE = "stats.aios"
LOCK_DIR = ".locks"
AGING_LOCK = "op_cache_file_del.lock"  # GE's name for the aging lock
_ENTRY_RE = re.compile(r"(?P<key>[a-z0-9_]+_[0-9a-f]{64})\.g(?P<gen>[0-9a-f]{1,32})\.aiok")
_LOCK_RE = re.compile(r"[0-9a-f]{32}\.lock")
_GEN_LOCK_RE = re.compile(r"gen-(?P<gen>[0-9a-f]{1,32})\.lock")
_TMP_RE = re.compile(
    r"\.(?:[a-z0-9_]+_[0-9a-f]{64}\.g[0-9a-f]{1,32}\.aiok|generation\.aiog|stats\.aios)\.[0-9]+\.[0-9a-f]{8}\.tmp"
)
_MAX_ENTRY_BYTES = 1 << 20  # a kernel desc is a few hundred bytes; a bigger file is not ours
_STALE_TMP_SECONDS = 600.0
_ROOT_GEN = "0"


@dataclass(frozen=True, slots=True)
class CacheView:
    """What one graph compile sees of the cache: the generation it reads and writes, whether
    hits refresh access times (not when aging is off), and its hold on the generation
    (``KernelCache.close_view`` lets go)."""

    generation: str
    touch: bool
    hold: _GenerationHold | None = field(default=None, compare=False)
    started: bool = False  # a force compile's own new generation


class _GenerationHold:
    """A shared flock on a generation's lock file: while any is held, no force compile
    reclaims the generation. Closing the descriptor lets go."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # a view dropped without close_view: the flock goes with the fd
            self.release()


@dataclass(frozen=True, slots=True)
class LoadResult:
    desc: KernelDesc | None
    status: str  # "hit", "absent" or "invalid"


@dataclass(slots=True)
class AgingReport:
    """What one aging pass found and did."""

    limits: CacheLimits
    scanned: bool = False
    bytes_before: int = 0
    bytes_after: int = 0
    removed: list[str] = field(default_factory=list)
    skipped_reason: str = ""


@dataclass(slots=True)
class SocSummary:
    """One soc folder, for ``aioge cache stats``."""

    soc: str
    entries: int
    bytes: int
    current_entries: int
    generation: str
    hits: int
    misses: int
    compiles: int
    invalid: int
    since: int = 0  # epoch seconds the counters start from (0: nothing recorded)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One entry file as a scan saw it."""

    path: Path
    key: str
    generation: str
    size: int
    atime: float  # last use, as recorded in the file's mtime
    atime_ns: int


class KernelCache:
    """A session's kernel cache: the root dir, the soc, the in-process single flights.

    Create it from a session's resolved options (``from_options``); the compile mode
    (enable, force, disable) is per graph and given per compile. Directories are created on
    the first write, so a disabled cache never touches the disk.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        soc: str,
        *,
        env: Mapping[str, str] | None = None,
        shared: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root)
        self.kernel_dir = self.root / "kernel_cache"
        self.soc = soc
        self.soc_dir = self.kernel_dir / soc
        self.env: Mapping[str, str] = dict(os.environ if env is None else env)
        self.shared = shared
        self.clock = clock
        self.flights: SingleFlight[Any, Any] = SingleFlight()
        # Kernels this cache was handed to publish, by (key, generation): each is one compile
        # done for the disk, so a key compiled more than once per generation shows here.
        self.stored: Counter[tuple[str, str]] = Counter()
        self._stored_lock = threading.Lock()  # stores run in worker threads
        self._warned: set[str] = set()
        self._io: anyio.CapacityLimiter | None = None
        self._file_mode = 0o664 if shared else 0o600
        self._dir_mode = 0o775 if shared else 0o700

    @classmethod
    def from_options(cls, options: Any, env: Mapping[str, str] | None = None, **kwargs: Any) -> KernelCache:
        """The cache a session with these resolved ``CompileOptions`` uses (dir: option >
        ``$ASCEND_CACHE_PATH`` > ``$HOME/atc_data``; env read now, not at import)."""
        env = dict(os.environ if env is None else env)
        root = resolve_cache_root(options.op_cache_dir, env)
        return cls(root, options.soc_version, env=env, shared=options.cache_shared, **kwargs)

    def __repr__(self) -> str:
        return f"KernelCache({str(self.soc_dir)!r})"

    # -- paths ------------------------------------------------------------------------

    def entry_path(self, key: str, generation: str) -> Path:
        """Where the entry of ``key`` in ``generation`` lives."""
        return self.soc_dir / f"{key}.g{generation}.aiok"

    def lock_path(self, key: str, generation: str) -> Path:
        import hashlib

        return self.soc_dir / LOCK_DIR / (hashlib.sha256(f"{generation}/{key}".encode()).hexdigest()[:32] + ".lock")

    def gen_lock_path(self, generation: str) -> Path:
        """The lock file compiles of ``generation`` hold shared, and its reclaimer exclusively."""
        return self.soc_dir / LOCK_DIR / f"gen-{generation}.lock"

    def limits(self) -> CacheLimits:
        """The limits in force now (the inis are re-read: a user may edit them between
        compiles). An invalid value is one warning per session."""
        return read_limits(self.kernel_dir, self.env, warn=self._warn_once)

    # -- one compile's view -----------------------------------------------------------

    async def open_view(self, *, force: bool) -> CacheView | None:
        """The generation a compile works in, held until ``close_view``: a fresh one for
        ``force`` (published for every later compile), else the current one. None when the
        cache cannot be used at all (``root_problem``) or its dir is not trusted (one warning
        each): the compile goes on without it. Raises nothing: a broken generation file is the
        root generation, with a warning."""
        return await self._hop(self.open_view_sync, force)

    def open_view_sync(self, force: bool) -> CacheView | None:
        problem = root_problem(self.root, self.kernel_dir, self.soc_dir)
        if problem is not None:
            self._warn_once("root", f"kernel cache {self.root} cannot be used, compiling without it: {problem}")
            return None
        if not self._usable_sync():
            return None
        touch = self.limits().aging
        if force:
            generation = secrets.token_hex(8)
            hold = None
            try:
                self._ensure_dirs()
                hold = self._hold_sync(generation)  # before it is published: nobody may reclaim it meanwhile
                data = make_envelope(GEN_KIND, pack({"generation": generation}))
                write_atomic_sync(self.soc_dir / GEN_FILE, data, mode=self._file_mode)
                log.info("%s: force mode, new kernel cache generation %s", self.soc_dir, generation)
            except OSError as exc:
                self._warn_once(
                    f"write:{self.soc_dir}",
                    f"kernel cache {self.soc_dir} is not writable, kernels are not cached: cannot start a new generation ({exc})",
                )
            return CacheView(generation, touch, hold, started=True)
        for _ in range(3):
            generation = self.generation_sync()
            hold = self._hold_sync(generation)
            # Held, and still current: a force compile that publishes after this cannot
            # reclaim it. Not current any more: a force compile came between; hold the new one.
            if hold is None or self.generation_sync() == generation:
                return CacheView(generation, touch, hold)
            hold.release()
        return CacheView(generation, touch)

    async def close_view(self, view: CacheView) -> None:
        """Let go of the view's generation; reclaim dead generations nobody holds when this
        compile started one (force) or worked in one that is dead now. Never raises."""
        await self._hop(self.close_view_sync, view)

    def close_view_sync(self, view: CacheView) -> None:
        if view.hold is None:
            return
        view.hold.release()
        if view.started or self.generation_sync() != view.generation:
            self.reclaim_sync()

    def reclaim_sync(self) -> list[str]:
        """Remove the entries of every generation but the current one that no compile holds
        (an exclusive flock on its lock file, without waiting); returns the names removed.
        Generations in use stay; so does everything when flock is unavailable."""
        if fcntl is None or not self.soc_dir.is_dir():
            return []
        current = self.generation_sync()
        entries = self._scan()
        dead: dict[str, list[_Entry]] = {}
        for e in entries:
            if e.generation != current:
                dead.setdefault(e.generation, []).append(e)
        try:
            for p in (self.soc_dir / LOCK_DIR).iterdir():  # generations with a lock file and no entries left
                m = _GEN_LOCK_RE.fullmatch(p.name)
                if m is not None and m["gen"] != current:
                    dead.setdefault(m["gen"], [])
        except OSError:
            pass
        removed: list[str] = []
        freed = 0
        for gen, gen_entries in dead.items():
            fd = self._lock_generation_sync(gen)
            if fd is None:
                continue  # a compile still works in it
            try:
                for e in gen_entries:
                    if unlink_if_ours(e.path):
                        removed.append(e.path.name)
                        freed += e.size
                        _remove_lock_file(self.lock_path(e.key, e.generation))
                with contextlib.suppress(OSError):
                    os.unlink(self.gen_lock_path(gen))  # under the lock: a late reader sees the generation is dead
            finally:
                os.close(fd)
        if removed:
            with contextlib.suppress(OSError):  # only the size estimate is off; aging rescans
                self.record_stats_sync(written=-freed)  # relative: this compile's own bookkeeping may come later
            log.info(
                "kernel cache %s: reclaimed %d entries of %d dead generations",
                self.soc_dir,
                len(removed),
                len({n.rsplit(".g", 1)[1] for n in removed}),
            )
        return removed

    def _hold_sync(self, generation: str) -> _GenerationHold | None:
        """A shared hold on ``generation`` (None when flock or the lock file is unavailable:
        the compile goes on without it, and at worst misses entries reclaimed under it)."""
        fd = self._open_gen_lock(generation)
        if fd is None:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # only a reclaimer holds it exclusively, briefly
        except OSError:
            os.close(fd)
            return None
        return _GenerationHold(fd)

    def _lock_generation_sync(self, generation: str) -> int | None:
        """An exclusive flock on ``generation``'s lock file without waiting (its fd), or None."""
        fd = self._open_gen_lock(generation)
        if fd is None:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def _open_gen_lock(self, generation: str) -> int | None:
        if fcntl is None:
            return None
        try:
            self._ensure_dirs()
            return os.open(
                self.gen_lock_path(generation),
                os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                self._file_mode,
            )
        except OSError:
            return None

    def _usable_sync(self) -> bool:
        """False, with one warning, when a dir on the way to the entries is not trusted: a
        compile then neither reads nor writes the cache (ccache falls back to compiling
        when it cannot use its cache dir; it never picks another one behind the user's back)."""
        try:
            untrusted = self._untrusted_dir()
        except OSError:
            return True  # not there yet (made owner-only on the first write), or unreadable: the I/O paths say so
        if untrusted is None:
            return True
        where, reason = untrusted
        self._warn_once(
            f"dir:{where}", f"kernel cache {where} is not trusted, kernels are neither loaded from it nor written to it: {reason}"
        )
        return False

    def generation_sync(self) -> str:
        """The current generation (``"0"`` until a force compile starts one)."""
        path = self.soc_dir / GEN_FILE
        try:
            data = read_trusted_sync(path, max_bytes=4096, shared=self.shared)
            _, payload = open_envelope(data, GEN_KIND, path=str(path), check_versions=False)
            gen = unpack(payload, what="generation").get("generation")
            if not isinstance(gen, str) or not re.fullmatch(r"[0-9a-f]{1,32}", gen):
                raise CacheError(f"bad generation {gen!r}", path=str(path))
            return gen
        except FileNotFoundError:
            return _ROOT_GEN
        except (CacheError, OSError, AttributeError) as exc:
            self._warn_once(str(path), f"kernel cache generation file unusable, using the root generation: {exc}")
            return _ROOT_GEN

    # -- entries ----------------------------------------------------------------------

    async def load(self, key: str, view: CacheView) -> LoadResult:
        """Look ``key`` up in the view's generation (one worker-thread hop). Never raises."""
        return await self._hop(self.load_sync, key, view)

    def load_sync(self, key: str, view: CacheView) -> LoadResult:
        path = self.entry_path(key, view.generation)
        try:
            untrusted = self._untrusted_dir()
        except FileNotFoundError:
            return LoadResult(None, "absent")
        if untrusted is not None:
            where, reason = untrusted
            self._warn_once(
                f"dir:{where}",
                f"kernel cache {where} is not trusted, kernels are neither loaded from it nor written to it: {reason}",
            )
            return LoadResult(None, "invalid")
        try:
            data = read_trusted_sync(path, max_bytes=_MAX_ENTRY_BYTES, shared=self.shared)
            header, payload = open_envelope(data, ENTRY_KIND, path=str(path))
            if header.get("key") != key:
                raise CacheError(f"holds key {header.get('key')!r}, not {key!r}", path=str(path))
            desc = desc_from_plain(unpack(payload, what="kernel desc"))
            if desc.key != key:
                raise CacheError(f"describes kernel {desc.key!r}, not {key!r}", path=str(path))
        except FileNotFoundError:
            return LoadResult(None, "absent")
        except (CacheError, ValueError, OSError) as exc:
            prefix = "" if str(path) in str(exc) else f"{path}: "  # decode errors do not know the file
            self._warn_once(str(path), f"kernel cache entry unusable, recompiling: {prefix}{exc}")
            return LoadResult(None, "invalid")
        if view.touch:
            self._touch(path)
        return LoadResult(desc, "hit")

    def _untrusted_dir(self) -> tuple[Path, str] | None:
        """(dir, why) for the first directory on the way to the entries that is not trusted:
        the root (which may be a link the user made), ``kernel_cache/`` and the soc folder
        (never links). Raises FileNotFoundError when one does not exist."""
        for d, follow in ((self.root, True), (self.kernel_dir, False), (self.soc_dir, False)):
            reason = untrusted_dir_reason(d, shared=self.shared, follow=follow)
            if reason is not None:
                return d, reason
        return None

    async def store(self, desc: KernelDesc, view: CacheView, *, compiled: bool = True) -> int:
        """Publish a compiled kernel atomically; returns the bytes written (0 when the dir is
        not writable, with one warning). ``compiled=False``: fetched from a remote tier, not
        counted in ``stored``. Never raises."""
        return await self._hop(self.store_sync, desc, view, compiled)

    def store_sync(self, desc: KernelDesc, view: CacheView, compiled: bool = True) -> int:
        path = self.entry_path(desc.key, view.generation)
        with self._stored_lock:
            self.stored[(desc.key, view.generation)] += compiled
        data = make_envelope(ENTRY_KIND, pack(desc_to_plain(desc)), {"key": desc.key, "generation": view.generation})
        try:
            self._ensure_dirs()
            write_atomic_sync(path, data, mode=self._file_mode)
        except OSError as exc:
            self._warn_once(
                f"write:{self.soc_dir}", f"kernel cache {self.soc_dir} is not writable, kernels are not cached: {exc}"
            )
            return 0
        self._touch(path)
        return len(data)

    def key_lock(self, key: str, view: CacheView) -> Any:
        """An async context manager holding the cross-process lock of ``key`` (an optimisation:
        yields False and goes on without it when the lock cannot be had)."""
        try:
            self._ensure_dirs()
        except OSError:
            pass  # async_file_lock yields False when the lock file cannot be made
        return async_file_lock(self.lock_path(key, view.generation), mode=self._file_mode)

    # -- after a compile --------------------------------------------------------------

    async def after_compile(self, *, hits: int, misses: int, compiles: int, invalid: int, written: int) -> AgingReport | None:
        """Record a compile's statistics, write ``op_cache.ini`` if it is missing, and age the
        soc folder if it is over the limit. Runs in a worker thread beside the rest of the
        compile; never raises (a failure is a warning: the cache must not fail a compile)."""
        return await self._hop(self.after_compile_sync, hits, misses, compiles, invalid, written)

    def after_compile_sync(self, hits: int, misses: int, compiles: int, invalid: int, written: int) -> AgingReport | None:
        try:
            estimate = self.record_stats_sync(hits=hits, misses=misses, compiles=compiles, invalid=invalid, written=written)
            if written:
                write_default_ini(self.kernel_dir, mode=self._file_mode)
            return self.age_sync(estimate=estimate)
        except OSError as exc:
            # One warning per session for a cache it cannot write: a failed store said it already.
            self._warn_once(
                f"write:{self.soc_dir}", f"kernel cache {self.soc_dir} is not writable, its statistics are not kept: {exc}"
            )
            return None

    def read_stats_sync(self) -> dict[str, int]:
        """The soc folder's recorded counters (zeros when there is no usable stats file)."""
        path = self.soc_dir / STATS_FILE
        # ``since``: when counting started (the first record, or the last zeroing), epoch seconds.
        zero = {"hits": 0, "misses": 0, "compiles": 0, "invalid": 0, "bytes_estimate": 0, "since": 0}
        try:
            data = read_stats_file(path, STATS_KIND, what="kernel cache statistics", max_bytes=4096)
        except FileNotFoundError:
            return zero
        except (CacheError, OSError) as exc:
            self._warn_once(str(path), f"kernel cache statistics unusable, starting from zero: {exc}")
            return zero
        if not isinstance(data, dict):
            return zero
        return {k: int(data[k]) if isinstance(data.get(k), int) and not isinstance(data.get(k), bool) else 0 for k in zero}

    def record_stats_sync(
        self,
        *,
        hits: int = 0,
        misses: int = 0,
        compiles: int = 0,
        invalid: int = 0,
        written: int = 0,
        bytes_exact: int | None = None,
    ) -> int:
        """Add to the soc folder's counters (read-modify-write under a lock, published
        atomically) and return the folder's estimated size in bytes."""
        self._ensure_dirs()

        def change() -> dict[str, int]:
            stats = self.read_stats_sync()
            stats["hits"] += hits
            stats["misses"] += misses
            stats["compiles"] += compiles
            stats["invalid"] += invalid
            stats["bytes_estimate"] = bytes_exact if bytes_exact is not None else max(0, stats["bytes_estimate"] + written)
            stats["since"] = stats["since"] or int(time.time())
            return stats

        return self._update_stats(change)["bytes_estimate"]

    def _update_stats(self, change: Callable[[], dict[str, int]]) -> dict[str, int]:
        lock = self.soc_dir / LOCK_DIR / "stats.lock"
        return update_stats_file(self.soc_dir / STATS_FILE, STATS_KIND, lock, change, mode=self._file_mode)

    def zero_stats_sync(self) -> None:
        """Set the hit, miss, compile and invalid counters to zero and ``since`` to now
        (``ccache -z``); the size estimate stays. Nothing happens to a folder never used."""
        if not (self.soc_dir / STATS_FILE).exists():
            return
        zero = {"hits": 0, "misses": 0, "compiles": 0, "invalid": 0}
        self._update_stats(lambda: {**self.read_stats_sync(), **zero, "since": int(time.time())})

    # -- aging ------------------------------------------------------------------------

    def age_sync(self, *, estimate: int | None = None, now: float | None = None) -> AgingReport:
        """Age the soc folder as GE does: when it holds ``max_op_cache_size`` or more (GE ages at
        ``totalUsedSize >= maxSize``; its documentation says "reaches"),
        remove entries not accessed for 30 minutes, least recently used first (entries of
        dead generations before current ones), until it holds at most
        ``remain_cache_size_ratio``% of the maximum. ``estimate`` (the recorded size) lets a
        folder that is clearly under the limit skip the directory scan."""
        limits = self.limits()
        report = AgingReport(limits)
        if not limits.aging:
            report.skipped_reason = "aging is off (max_op_cache_size=-1)"
            return report
        if estimate is not None and estimate < limits.max_bytes:
            report.skipped_reason = "under the limit"
            return report
        if not self.soc_dir.is_dir():
            report.skipped_reason = "no soc folder"
            return report
        now = self.clock() if now is None else now
        current = self.generation_sync()
        entries = self._scan()
        report.scanned = True
        report.bytes_before = report.bytes_after = sum(e.size for e in entries)
        if report.bytes_before < limits.max_bytes:  # GE: ages at totalUsedSize >= maxSize
            report.skipped_reason = "under the limit"
            self._exact_size(report.bytes_after)
            return report
        try:
            with SyncFileLock(self.soc_dir / LOCK_DIR / AGING_LOCK, mode=self._file_mode, wait=0.0) as held:
                if not held:
                    report.skipped_reason = "another process is aging this folder"
                    return report
                dead = sorted((e for e in entries if e.generation != current), key=lambda e: e.atime)
                live = sorted((e for e in entries if e.generation == current), key=lambda e: e.atime)
                for group in (dead, live):
                    for e in group:
                        if report.bytes_after <= limits.remain_bytes:
                            break
                        if now - e.atime < AGING_IDLE_SECONDS:
                            break  # sorted by access time: everything after it is recent too
                        if self._remove_entry(e):
                            report.removed.append(e.path.name)
                            report.bytes_after -= e.size
        finally:
            self._exact_size(report.bytes_after)
        if report.removed:
            log.info(
                "kernel cache %s: aged %d entries, %d -> %d bytes (limit %d MB, keep %d%%)",
                self.soc_dir,
                len(report.removed),
                report.bytes_before,
                report.bytes_after,
                limits.max_mb,
                limits.ratio,
            )
        return report

    def _exact_size(self, size: int) -> None:
        try:
            self.record_stats_sync(bytes_exact=size)
        except OSError:
            pass  # only the size estimate is lost; the next compile rescans

    # -- tools ------------------------------------------------------------------------

    def summary_sync(self) -> SocSummary:
        """Entries, bytes and recorded counters of this soc folder."""
        entries = self._scan() if self.soc_dir.is_dir() else []
        gen = self.generation_sync()
        stats = self.read_stats_sync()
        return SocSummary(
            self.soc,
            len(entries),
            sum(e.size for e in entries),
            sum(e.generation == gen for e in entries),
            gen,
            stats["hits"],
            stats["misses"],
            stats["compiles"],
            stats["invalid"],
            stats["since"],
        )

    def clear_sync(self) -> int:
        """Delete aioge's files in this soc folder (entries, generation, locks, stale temp
        files; the statistics file stays, its size set to 0); anything else stays. Returns the
        number of files removed."""
        if not self.soc_dir.is_dir():
            return 0
        removed = sum(self._remove_entry(e) for e in self._scan())
        removed += unlink_if_ours(self.soc_dir / GEN_FILE)
        if (self.soc_dir / STATS_FILE).exists():  # the counters survive a clear, as ccache's do; the size is now 0
            self.record_stats_sync(bytes_exact=0)
        now = time.time()
        for p in self.soc_dir.iterdir():
            if _TMP_RE.fullmatch(p.name):
                try:
                    if now - p.stat().st_mtime > _STALE_TMP_SECONDS:  # a fresh one may be a write in flight
                        p.unlink()
                        removed += 1
                except OSError:
                    pass
        locks = self.soc_dir / LOCK_DIR
        if locks.is_dir():
            for p in locks.iterdir():
                if _LOCK_RE.fullmatch(p.name) or _GEN_LOCK_RE.fullmatch(p.name) or p.name in ("stats.lock", AGING_LOCK):
                    removed += _remove_lock_file(p)
            _rmdir_quietly(locks)
        _rmdir_quietly(self.soc_dir)
        return removed

    # -- internals --------------------------------------------------------------------

    def _scan(self) -> list[_Entry]:
        out: list[_Entry] = []
        try:
            it = os.scandir(self.soc_dir)
        except OSError:
            return out
        with it:
            for d in it:
                m = _ENTRY_RE.fullmatch(d.name)
                if m is None:
                    continue
                try:
                    st = d.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append(_Entry(Path(d.path), m["key"], m["gen"], st.st_size, st.st_mtime, st.st_mtime_ns))
        return out

    def _remove_entry(self, e: _Entry) -> bool:
        """Remove an entry if it is still the one scanned (its access time unchanged) and ours."""
        try:
            st = os.stat(e.path, follow_symlinks=False)
            if st.st_mtime_ns != e.atime_ns:
                return False  # used since the scan: it stays
        except OSError:
            return False
        if not unlink_if_ours(e.path):
            return False
        _remove_lock_file(self.lock_path(e.key, e.generation))
        return True

    def _touch(self, path: Path) -> None:
        try:
            st = os.stat(path)
            os.utime(path, ns=(st.st_atime_ns, int(self.clock() * 1e9)))
        except OSError:
            pass  # another user's file in a shared cache: its access time is theirs to keep

    def _ensure_dirs(self) -> None:
        lock_dir = self.soc_dir / LOCK_DIR
        if not lock_dir.is_dir():
            # Level by level: makedirs gives only the last one ``mode``, the others the umask's
            # default, which may be group-writable (umask 002), and then the cache would not trust them.
            for d in (self.root, self.kernel_dir, self.soc_dir, lock_dir):
                try:
                    os.mkdir(d, self._dir_mode)
                except FileExistsError:
                    pass
                except FileNotFoundError:
                    os.makedirs(d, mode=self._dir_mode, exist_ok=True)

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("%s", message)

    async def _hop(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._io is None:
            self._io = anyio.CapacityLimiter(16)  # file I/O: its own budget, not the CPU's
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._io)


# -- files ------------------------------------------------------------------------------


def _remove_lock_file(path: Path) -> int:
    """Remove a lock file nobody holds (take it without waiting, unlink, release)."""
    lock, Timeout = new_lock(path, 0o600, 0)
    try:
        lock.acquire()
    except (Timeout, OSError):
        return 0
    try:
        os.unlink(path)
        return 1
    except OSError:
        return 0
    finally:
        lock.release()


def _rmdir_quietly(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # not empty: it holds files aioge did not write


def root_problem(root: Path, *inner: Path) -> str | None:
    """Why a kernel cache root (and the folders ``inner`` below it, in order) cannot be used
    at all, or None: any error but "not found" (a missing folder is made on the first
    write), or something other than a directory. Names the path and the problem."""
    for d, follow in ((root, True), *((p, False) for p in inner)):
        try:
            st = os.stat(d) if follow else os.lstat(d)
        except FileNotFoundError:
            return None
        except OSError as exc:  # ENOTDIR, ENAMETOOLONG, EACCES, ELOOP, EIO, ...
            return f"{d}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return None  # inside the root: the trust check refuses it with its own warning
        if not stat.S_ISDIR(st.st_mode):
            return f"{d}: not a directory"
    return None


def _check_root(base: Path) -> None:
    problem = root_problem(base, base / "kernel_cache")
    if problem is not None:
        raise CacheError(f"kernel cache root cannot be used: {problem}")


def cache_for_dir(
    root: str | os.PathLike[str] | None, soc: str | None = None, *, env: Mapping[str, str] | None = None
) -> list[KernelCache]:
    """The kernel caches under a root (``--dir``, else ``$ASCEND_CACHE_PATH``, else
    ``$HOME/atc_data``): one per soc folder, or just ``soc``'s. For the ``aioge cache`` tools.

    Raises:
        CacheError: the root or its ``kernel_cache/`` cannot be looked at (``root_problem``).
    """
    env = dict(os.environ if env is None else env)
    base = resolve_cache_root(os.fspath(root) if root else "", env)
    _check_root(base)
    kernel_dir = base / "kernel_cache"
    if soc is not None:
        return [KernelCache(base, soc, env=env)]
    if not kernel_dir.is_dir():
        return []
    return [KernelCache(base, p.name, env=env) for p in sorted(kernel_dir.iterdir()) if p.is_dir()]


def cache_report(root: str | os.PathLike[str] | None, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``aioge cache stats`` as plain data: the root, the effective limits with their sources,
    and per soc folder its entries, bytes and recorded counters.

    Raises:
        CacheError: the root or its ``kernel_cache/`` cannot be looked at (``root_problem``).
    """
    env = dict(os.environ if env is None else env)
    base = resolve_cache_root(os.fspath(root) if root else "", env)
    _check_root(base)
    limits = read_limits(base / "kernel_cache", env)  # warnings logged: the CLI shows them
    socs = []
    for cache in cache_for_dir(base, env=env):
        s = cache.summary_sync()
        socs.append(
            {
                "soc": s.soc,
                "entries": s.entries,
                "bytes": s.bytes,
                "generation": s.generation,
                "current_generation_entries": s.current_entries,
                "hits": s.hits,
                "misses": s.misses,
                "compiles": s.compiles,
                "invalid": s.invalid,
                "hit_ratio": s.hits / (s.hits + s.misses) if s.hits + s.misses else None,
                "since": s.since or None,
            }
        )
    return {
        "root": str(base),
        "kernel_cache": str(base / "kernel_cache"),
        "limits": {
            "max_op_cache_size_mb": limits.max_mb,
            "max_source": limits.max_source,
            "remain_cache_size_ratio": limits.ratio,
            "ratio_source": limits.ratio_source,
            "aging": limits.aging,
            "idle_seconds": AGING_IDLE_SECONDS,
            "ini": limits.ini,
        },
        "socs": socs,
    }
