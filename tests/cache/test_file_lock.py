"""async_file_lock: excludes other holders (tasks and processes), never blocks the loop,
leaks nothing when cancelled, and lets the caller go on without it when it cannot be had."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from aioge.cache.file_lock import SyncFileLock, async_file_lock

pytestmark = pytest.mark.anyio


async def test_two_tasks_exclude_each_other(tmp_path: Path) -> None:
    path = tmp_path / "k.lock"
    inside = 0
    most = 0

    async def worker() -> None:
        nonlocal inside, most
        async with async_file_lock(path) as held:
            assert held
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.02)
            inside -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(worker)
    assert most == 1


async def test_waits_for_another_process_then_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "k.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import filelock, time, sys\nl = filelock.FileLock({str(path)!r})\nl.acquire()\n"
            "print('held', flush=True)\ntime.sleep(0.4)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.perf_counter()
        async with async_file_lock(path) as held:
            waited = time.perf_counter() - t0
        assert held and waited > 0.2
    finally:
        holder.wait(10)
        holder.stdout.close()  # type: ignore[union-attr]


async def test_cancelled_wait_leaves_the_lock_free_and_timeout_goes_on_without(tmp_path: Path) -> None:
    path = tmp_path / "k.lock"
    async with async_file_lock(path):
        with anyio.move_on_after(0.05) as scope:
            async with async_file_lock(path):
                pytest.fail("got a lock another holder has")
        assert scope.cancelled_caught
        async with async_file_lock(path, timeout=0.05) as held:
            assert not held  # the body runs, unlocked: correctness never depends on the lock
    async with async_file_lock(path, timeout=1) as held:
        assert held


async def test_an_impossible_lock_file_is_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    async with async_file_lock(tmp_path / "file" / "k.lock", timeout=1) as held:
        assert not held


def test_sync_lock_excludes_other_holders_and_goes_on_without_it(tmp_path: Path) -> None:
    path = tmp_path / "k.lock"
    with SyncFileLock(path) as held:
        assert held
        start = time.monotonic()
        with SyncFileLock(path, wait=0.0) as other:  # one try: taken
            assert other is False
        with SyncFileLock(path, wait=0.2) as other:  # a bounded wait, then the block runs without it
            assert other is False
        assert time.monotonic() - start >= 0.2
    with SyncFileLock(path, wait=0.0) as again:  # released on exit
        assert again
    (tmp_path / "a_file").write_bytes(b"")
    with SyncFileLock(tmp_path / "a_file" / "k.lock", wait=0.0) as nowhere:  # no lock can be had (OSError): told so
        assert nowhere is False
