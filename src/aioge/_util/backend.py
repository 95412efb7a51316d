"""The event-loop library's specifics behind one lookup (``current()``), as anyio keeps its
backends: where anyio's generic path costs microseconds a run or a library is asyncio-only
(aiofiles). Nothing else in the package asks which library runs."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Callable, Union

import anyio
import sniffio

__all__ = ["ASYNCIO", "TRIO", "Backend", "Event", "FutureEvent", "current"]


class FutureEvent:
    """A one-shot event of an asyncio loop, set from the loop's thread: a bare future.

    anyio's Event on asyncio is an asyncio.Event holding a list of futures; making, awaiting
    and setting this one costs half as much, which counts once per run and per batched
    request. A wait that is cancelled cancels the future; the next wait gets a fresh one (set
    if the event was), so a shielded wait after a cancelled one still waits for ``set``.
    """

    __slots__ = ("_fut", "_set")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """An event of ``loop`` (default: the running loop; finding it costs 0.2 us)."""
        self._fut: asyncio.Future[None] = (loop or asyncio.get_running_loop()).create_future()
        self._set = False

    def set(self) -> None:
        self._set = True
        if not self._fut.done():
            self._fut.set_result(None)

    def is_set(self) -> bool:
        return self._set

    def wait(self) -> asyncio.Future[None]:
        """An awaitable that ends once the event is set (the future itself: no coroutine)."""
        fut = self._fut
        if fut.cancelled():
            fut = self._fut = fut.get_loop().create_future()
            if self._set:
                fut.set_result(None)
        return fut


Event = Union[anyio.Event, FutureEvent]


class Backend:
    """What differs between event-loop libraries (trio's, and anyio's generic path, here)."""

    name = "trio"

    def task(self) -> int:  # the current task's identity
        import trio

        return id(trio.lowlevel.current_task())

    def loop(self) -> object | None:  # a key for the running loop a weak dict may hold, or None: a RunVar
        return None

    def call_soon(self, fn: Callable[[], object]) -> None:  # in the running loop's next turn
        import trio

        trio.lowlevel.current_trio_token().run_sync_soon(fn)

    def event_factory(self) -> Callable[[], Event]:  # one-shot events of the running loop, cheaper than anyio.Event()
        return type(anyio.Event())

    async def to_thread(self, fn: Callable[..., Any], *args: Any) -> Any:  # fn(*args) in a worker thread
        return await anyio.to_thread.run_sync(fn, *args)


class _Asyncio(Backend):
    name = "asyncio"

    def task(self) -> int:
        return id(asyncio.current_task())

    def loop(self) -> object | None:
        return asyncio.get_running_loop()

    def call_soon(self, fn: Callable[[], object]) -> None:
        asyncio.get_running_loop().call_soon(fn)

    def event_factory(self) -> Callable[[], Event]:
        return partial(FutureEvent, asyncio.get_running_loop())

    async def to_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        import aiofiles.os  # its executor hop: cheaper than anyio's on asyncio

        return await aiofiles.os.wrap(fn)(*args)


ASYNCIO, TRIO = _Asyncio(), Backend()


def current() -> Backend:  # asyncio's, else trio's: anyio runs on those two
    return ASYNCIO if sniffio.current_async_library() == "asyncio" else TRIO
