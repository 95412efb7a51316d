"""Native programs of concurrent callers, run by C runner threads while the loop goes on.

A caller of a short graph on a busy loop spends part of its request in Python (the task
switch, the feed check, staging, the output copies) and part in its program's C jobs. In
synchronous groups (every pending caller's program run by one of them, the C helper taking
half) the second core idled while the group's callers ran their Python: the builder CNN's 64
callers ran about 24K requests/s, where the balance of both cores would give 31K. Here a
caller stages and pushes its program (``csrc/queue.c``) and waits; runner threads (the cores
less one) take programs as they arrive and never wait for Python. When the queue grows past
``HELP_DEPTH`` the loop's thread runs one too: whichever side is behind gets help.

The loop learns of completions through the queue's eventfd, which a runner writes only when a
waiter armed it. On asyncio a reader of the fd, added while callers wait, arms it and wakes the
callers whose programs are done, oldest first (no reader added per wait, no caller's task woken
to poll: the builder CNN's 64 callers, 78 -> 66 us of the loop's Python a run). Elsewhere one
waiting caller at a time (the poller) arms it, wakes the callers whose programs are done, and
hands the polling on when its own is. A cancelled caller still waits for its program,
shielded: the runner is using its context.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from typing import Any

import anyio

from aioge._util import backend
from aioge.kernels import native
from aioge.runtime.native_program import NativeProgram
from aioge.runtime.schedule import HELP_DEPTH
from aioge.runtime.workers import Event, new_event

__all__ = ["ProgramQueue"]


def _functions() -> tuple[Any, ...] | None:
    f = native.function
    fns = (
        f("aioge_queue_new"),
        f("aioge_queue_fd"),
        f("aioge_queue_push"),
        f("aioge_queue_take"),
        f("aioge_queue_arm"),
        f("aioge_queue_free"),
    )
    return None if any(fn is None for fn in fns) else fns


class _Waiter:
    __slots__ = ("prog", "event")

    def __init__(self, prog: NativeProgram) -> None:
        self.prog = prog
        self.event: Event = new_event()


class ProgramQueue:
    """One session's queue of native programs and its runner threads."""

    __slots__ = ("_h", "_fd", "_push", "_take", "_arm", "_free", "_waiting", "_polling", "_seen", "_lock", "_closing", "taken", "_loop", "_asleep")  # fmt: skip

    def __init__(self, runners: int, fns: tuple[Any, ...] | None = None) -> None:
        """``fns``: the C functions (``aioge_queue_new``, ``_fd``, ``_push``, ``_take``,
        ``_arm``, ``_free``); by default the compiled tier's."""
        fns = fns or _functions()
        if fns is None:
            raise OSError("the compiled kernels have no program queue")
        new, fd, self._push, self._take, self._arm, self._free = fns
        self._h = new(max(1, runners))
        if not self._h:
            raise OSError("no program queue: no memory, eventfd or thread for it")
        self._fd = int(fd(self._h))
        self._waiting: list[_Waiter] = []
        self._polling = False
        self._seen = 0
        self._lock = threading.Lock()  # close (from a worker thread) against submit and the last waiter
        self._closing = False
        self.taken = 0  # programs the loop's thread ran itself
        self._loop: asyncio.AbstractEventLoop | None = None  # whose reader watches the fd (asyncio)
        self._asleep: deque[_Waiter] = deque()  # the reader's callers, oldest first

    @classmethod
    def create(cls, runners: int) -> ProgramQueue | None:
        """A queue with ``runners`` threads, or None without the compiled tier (or threads)."""
        try:
            return cls(runners)
        except OSError:
            return None

    def submit(self, prog: NativeProgram, split: bool = False) -> _Waiter | None:
        """Queue staged ``prog``: its waiter (give it to ``wait``), or None when it cannot be
        queued (closed, full): the caller runs it. ``split``: its big jobs split (a lone
        caller's long program, every CPU token held); only a runner runs it."""
        with self._lock:
            if self._closing:
                return None
            prog.pend(split)
            depth = self._push(self._h, prog.record_address)
            if depth <= 0:  # full
                return None
            me = _Waiter(prog)
            self._waiting.append(me)  # from now on close leaves the queue to the last waiter
        if self._loop is not None or (len(self._waiting) == 1 and self._watch()):
            self._asleep.append(me)
        if depth >= HELP_DEPTH and self._take(self._h):  # the runners are behind: this thread runs the oldest one
            self.taken += 1
        return me

    async def wait(self, me: _Waiter) -> None:
        """Until ``me``'s program has run; a cancelled caller waits on, shielded, then raises."""
        try:
            try:
                await self._until_done(me)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._until_done(me)
                raise
        finally:
            with self._lock:
                self._waiting.remove(me)
                h = self._h if self._closing and not self._waiting else None
                if h:
                    self._h = None
            if self._loop is not None and not self._waiting:  # before a free closes the fd
                self._loop.remove_reader(self._fd)
                self._loop = None
                self._asleep.clear()
            if h:
                self._free(h)  # closed while this one waited: its runners are idle now

    def _watch(self) -> bool:
        """On asyncio, add the reader that wakes the callers (while any wait); whether it did."""
        if backend.current() is not backend.ASYNCIO:
            return False
        try:
            asyncio.get_running_loop().add_reader(self._fd, self._readable)
        except NotImplementedError:  # pragma: no cover - a loop without readers (Windows' proactor)
            return False
        self._loop = asyncio.get_running_loop()
        self._poll()  # armed: a program that completes from now on writes the fd
        return True

    def _readable(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass
        self._poll()

    def _poll(self) -> None:
        """Arm the fd; while completions came meanwhile, wake the oldest callers whose programs are
        done (one done out of order wakes with the next completion, which writes the fd)."""
        while (count := self._arm(self._h)) != self._seen:
            self._seen = count
            while self._asleep and not self._asleep[0].prog.pending():
                self._asleep.popleft().event.set()

    async def _until_done(self, me: _Waiter) -> None:
        if self._loop is not None:  # the reader wakes it
            while me.prog.pending():
                await me.event.wait()
                if me.prog.pending():
                    me.event = new_event()
            return
        try:
            while me.prog.pending():
                if self._polling:
                    await me.event.wait()
                    me.event = new_event()
                    continue
                self._polling = True
                try:
                    while me.prog.pending():
                        count = self._arm(self._h)
                        if count != self._seen:
                            self._seen = count
                            self._wake_done()
                            continue
                        await anyio.wait_readable(self._fd)
                        try:
                            os.read(self._fd, 8)
                        except BlockingIOError:  # another reader emptied it
                            pass
                finally:
                    self._polling = False
        finally:
            # Leaving with no poller (this one's poll done, or a poll handed to it after its
            # program ended): the others must not be left waiting on a poll nobody runs.
            if not self._polling:
                self._hand_over(me)

    def _wake_done(self) -> None:
        for w in self._waiting:
            if not w.prog.pending():
                w.event.set()

    def _hand_over(self, me: _Waiter) -> None:
        """Wake the callers whose programs are done and hand the poll to the first one whose
        program is not, in one pass: a program that ends during it is then either seen done
        here or left to the new poller."""
        handed = False
        for w in self._waiting:
            if w is me:
                continue
            if not w.prog.pending():
                w.event.set()
            elif not handed:
                w.event.set()
                handed = True

    def close(self) -> None:
        """Stop the runners after the programs queued (blocking until they have run); with
        callers still waiting, the last of them does it when its program is done."""
        with self._lock:
            self._closing = True
            h = self._h if not self._waiting else None
            if h:
                self._h = None
        if h:
            self._free(h)
