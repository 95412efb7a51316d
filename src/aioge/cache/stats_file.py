"""The statistics files of the cache tiers (kernel ``stats.aios``, ``aioge.graph-stats``,
``remote_stats.aios``): one small msgpack payload in the checksummed envelope, read without
trusting it, changed read-modify-write under a lock and published atomically, unsynced (a hit
writes one: 10 ms of fsyncs). Each tier keeps its own payload shape and its own validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TypeVar

from aioge.cache.file_lock import SyncFileLock
from aioge.plan.io import make_envelope, open_envelope, pack, read_bytes_sync, unpack, write_atomic_sync

__all__ = ["read_stats_file", "update_stats_file"]

T = TypeVar("T")


def read_stats_file(path: Path, kind: str, *, what: str, max_bytes: int = 1 << 20) -> Any:
    """The unpacked payload of the statistics file at ``path`` (any version of aioge wrote it:
    counters outlive upgrades).

    Raises:
        FileNotFoundError: there is none yet. CacheError: corrupt, foreign or oversized.
        OSError: it cannot be read (a special file is refused, not opened).
    """
    _, payload = open_envelope(read_bytes_sync(path, max_bytes=max_bytes), kind, path=str(path), check_versions=False)
    return unpack(payload, what=what)


def update_stats_file(path: Path, kind: str, lock: Path, change: Callable[[], T], *, mode: int = 0o600) -> T:
    """Under the file lock ``lock``: ``change()`` reads the current counters and returns the new
    ones, which replace the file at ``path`` atomically. Returns them.

    Raises:
        OSError: the lock or the file cannot be written.
    """
    with SyncFileLock(lock, mode=mode):
        data = change()
        write_atomic_sync(path, make_envelope(kind, pack(data)), mode=mode, durable=False)  # counters: see its doc
    return data
