"""A cross-process file lock for async code, as an optimisation only.

``async_file_lock(path)`` polls a non-blocking lock (``flock`` on Unix, as ``filelock`` takes it;
``filelock.FileLock`` elsewhere) from a worker thread, backing off between tries, so the
event loop never blocks and no abandoned thread can end up holding a lock nobody releases.
Correctness never depends on it: every cache entry is published atomically and validates itself, so when the lock cannot be had
(a read-only directory, an NFS mount that refuses flock, a holder that takes too long) the
caller goes on without it and at worst compiles the same thing twice.

``SyncFileLock(path, wait=...)`` is the blocking form for short critical sections in a worker
thread (an index's read-modify-write, the statistics, aging), with a bounded wait.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, AsyncIterator

import anyio

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: filelock's lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["SyncFileLock", "async_file_lock"]

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def async_file_lock(
    path: str | os.PathLike[str],
    *,
    timeout: float = 120.0,
    poll: float = 0.005,
    max_poll: float = 0.1,
    mode: int = 0o600,
) -> AsyncIterator[bool]:
    """Hold the lock file ``path`` for the body; yields True when held, False when the body
    runs without it (lock unavailable, or not acquired within ``timeout`` seconds).

    The lock's directory must exist. Cancelling the wait leaves the lock free.
    """
    # A new object per acquisition, not thread-local: acquire and release may run on
    # different worker threads, and a shared thread_local=False object would be reentrant.
    lock, Timeout = new_lock(path, mode, 0)
    held = False
    delay = poll
    try:
        with anyio.move_on_after(timeout):
            while True:
                try:
                    await anyio.to_thread.run_sync(_try_acquire, lock)
                    held = True
                    break
                except Timeout:
                    await anyio.sleep(delay)
                    delay = min(delay * 2, max_poll)
                except OSError as exc:
                    log.debug("no lock %s (%s); going on without it", path, exc)
                    break
    except BaseException:
        # Cancelled: a try that succeeded in its thread just before must not keep the lock.
        if lock.is_locked:
            lock.release(force=True)
        raise
    if not held and lock.is_locked:
        lock.release(force=True)
        held = False
    if not held:
        log.debug("going on without lock %s", path)
    try:
        yield held
    finally:
        if held:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_release, lock)


class SyncFileLock:
    """Hold the lock file ``path`` for a block (sync, in a worker thread); ``as`` gives whether
    it is held. The wait is bounded by ``wait`` seconds (0: one try); on a timeout or an error
    (no locks on this file system) the block runs without it and is told so. A new lock
    object per use, not thread-local: it excludes other threads of this process too."""

    def __init__(self, path: str | os.PathLike[str], *, mode: int = 0o600, wait: float = 2.0) -> None:
        self._lock, self._timeout = new_lock(path, mode, wait)
        self._held = False

    def __enter__(self) -> bool:
        Timeout = self._timeout
        try:
            self._lock.acquire()
            self._held = True
        except (Timeout, OSError) as exc:
            log.debug("lock %s not held (%s); going on without it", self._lock.lock_file, exc)
        return self._held

    def __exit__(self, *exc: object) -> None:
        if self._held:
            self._held = False
            self._lock.release()


def new_lock(path: str | os.PathLike[str], mode: int, wait: float) -> tuple[Any, type[Exception]]:
    """A lock object on ``path`` and the exception its ``acquire`` raises when it times out."""
    if fcntl is None:  # pragma: no cover - Windows
        from filelock import FileLock, Timeout

        return FileLock(os.fspath(path), timeout=wait, thread_local=False, mode=mode), Timeout
    return _Flock(os.fspath(path), mode, wait), _Busy


class _Busy(Exception):
    """Another holder has the lock (not an OSError: that means no lock can be had)."""


class _Flock:
    """An exclusive ``flock`` of a lock file, as ``filelock`` takes one on Unix (each excludes
    the other), without importing filelock (8.5 ms of a fresh process's start)."""

    def __init__(self, path: str, mode: int, wait: float) -> None:
        self.lock_file, self._mode, self._wait, self._fd, self.is_locked = path, mode, wait, -1, False

    def acquire(self, timeout: float | None = None) -> None:
        end = time.monotonic() + (self._wait if timeout is None else timeout)
        while not self.is_locked:
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, self._mode)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # refused (no flock here): the OSError
                self._fd, self.is_locked = fd, True
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= end:
                    raise _Busy(self.lock_file) from None
                time.sleep(0.05)
            except BaseException:
                os.close(fd)
                raise

    def release(self, force: bool = False) -> None:
        if self.is_locked:
            self.is_locked = False
            os.close(self._fd)  # the flock goes with the descriptor


def _try_acquire(lock: Any) -> None:
    lock.acquire(timeout=0)


def _release(lock: Any) -> None:
    try:
        lock.release()
    except OSError as exc:  # pragma: no cover - the file system went away; the lock dies with the fd
        log.debug("releasing %s: %s", lock.lock_file, exc)
