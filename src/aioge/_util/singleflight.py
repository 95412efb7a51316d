"""Single flight: concurrent calls for one key share one in-flight computation.

The first caller of a key is the *leader* and computes inline; later callers wait for it.
Waiters get the leader's value, or its exception (an ordinary ``Exception``; failures are
not cached). A leader that is cancelled (or interrupted) abandons the flight: its waiters
wake up and one of them becomes the new leader, so a caller's timeout never strands the
others. An entry exists only while its flight is in progress: the leader removes it in a
synchronous ``finally`` before waking the waiters, so nothing is left behind when idle.

Entries hold anyio Events, which belong to one event loop: make one ``SingleFlight`` per
owner (a session's kernel cache), never a process-wide one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Awaitable, Callable, Generic, Hashable, TypeVar

import anyio

__all__ = ["SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(slots=True)
class _Flight:
    event: anyio.Event = field(default_factory=anyio.Event)
    done: bool = False
    value: Any = None
    error: BaseException | None = None
    traceback: TracebackType | None = None


class SingleFlight(Generic[K, V]):
    """Per-key single flight over anyio (asyncio and trio)."""

    __slots__ = ("_flights",)

    def __init__(self) -> None:
        self._flights: dict[K, _Flight] = {}

    def __len__(self) -> int:
        """The number of flights in progress."""
        return len(self._flights)

    def __contains__(self, key: object) -> bool:
        return key in self._flights

    async def run(self, key: K, fn: Callable[[], Awaitable[V]]) -> tuple[V, bool]:
        """Return ``(value, shared)``: ``fn()``'s value, computed once for all concurrent callers
        of ``key``; ``shared`` is True for a caller that got another caller's result.

        Raises:
            Exception: whatever the leader's ``fn()`` raised (re-raised in every waiter with the
                leader's traceback).
        """
        while True:
            flight = self._flights.get(key)
            if flight is None:
                return await self._lead(key, fn), False
            await flight.event.wait()
            if flight.done:
                return flight.value, True
            if flight.error is not None:
                raise flight.error.with_traceback(flight.traceback)
            # The leader was cancelled: the entry is gone, so the next loop elects a new leader.

    async def _lead(self, key: K, fn: Callable[[], Awaitable[V]]) -> V:
        flight = _Flight()
        self._flights[key] = flight
        try:
            value = await fn()
        except Exception as exc:
            flight.error, flight.traceback = exc, exc.__traceback__
            raise
        else:
            flight.value, flight.done = value, True
            return value
        finally:
            # Synchronous, so it cannot be interrupted: the entry never outlives the flight.
            del self._flights[key]
            flight.event.set()
