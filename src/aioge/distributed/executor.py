"""The executor protocol compile fan-out goes through (DESIGN decision 13): ``submit`` a
blocking function and await its result, ``aclose`` when done. Local threads by default; a
Dask client (sync or asynchronous) as the ``distributed`` extra."""

from __future__ import annotations

import os
from typing import Any, Callable, Protocol

import anyio

__all__ = ["DaskExecutor", "Executor", "LocalExecutor"]


class Executor(Protocol):
    """Runs blocking functions somewhere and hands back their results."""

    async def submit(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def aclose(self) -> None: ...


class LocalExecutor:
    """Worker threads of this process, at most ``workers`` at once (default: the core count)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 2
        self._limiter: anyio.CapacityLimiter | None = None

    async def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.workers)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def aclose(self) -> None:
        pass


class DaskExecutor:
    """A ``dask.distributed`` client's workers. Tasks are impure (each compiles, never cached
    by Dask) and retried on another worker when theirs dies (Dask's ``allowed-failures``).
    ``owns``: close the client (and its cluster) on ``aclose``."""

    def __init__(self, client: Any, *, owns: bool = False, cluster: Any = None) -> None:
        self.client = client
        self.owns = owns
        self.cluster = cluster

    @property
    def dashboard(self) -> str | None:
        return getattr(self.client, "dashboard_link", None)

    async def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        future = self.client.submit(fn, *args, pure=False)
        if getattr(self.client, "asynchronous", False):
            return await future  # an asynchronous client lives on this (asyncio) loop
        return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)

    async def aclose(self) -> None:
        if self.owns:
            await anyio.to_thread.run_sync(self.client.close)
            if self.cluster is not None:
                await anyio.to_thread.run_sync(self.cluster.close)

    @classmethod
    def start(cls, scheduler: str) -> DaskExecutor:
        """A client of ``scheduler`` (an address), or of a new LocalCluster of N worker
        processes for ``local:N`` (blocking: starts processes).

        Raises:
            ImportError: the distributed extra is not installed. ValueError: a bad ``local:N``.
        """
        from distributed import Client, LocalCluster

        if scheduler.startswith("local:"):
            n = scheduler.removeprefix("local:")
            if not n.isdigit() or not 1 <= int(n) <= 256:
                raise ValueError(f"--scheduler {scheduler!r}: expected local:N with N from 1 to 256 workers")
            cluster = LocalCluster(n_workers=int(n), threads_per_worker=1, processes=True, dashboard_address=":0")
            return cls(Client(cluster), owns=True, cluster=cluster)
        return cls(Client(scheduler), owns=True)
