"""One compile per kernel key across a Dask cluster.

``ClusterKernelStore`` is a ``KernelStore`` (``compiler.ops``) around a worker's own store
(its disk cache, and the remote tier when configured). Its key lock is a scheduler-side
``distributed.Lock`` per key (then the disk's file lock): the first worker to take it
compiles, and publishes the kernel's envelope in the scheduler's metadata before letting go,
so a worker that waited finds it on the re-check that follows the lock, whatever disk it has.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

import anyio

from aioge.cache.remote import decode_kernel, encode_kernel
from aioge.errors import CacheError
from aioge.keys import remote_namespace
from aioge.plan.kernel import KernelDesc

__all__ = ["ClusterKernelStore"]

_LOCK_SECONDS = 900.0  # a leader slower than this: compile anyway (correctness never needs the lock)


class ClusterKernelStore:
    """The cluster's single flight per kernel key, on top of ``inner`` (a ``KernelStore``).
    ``disk`` is the worker's ``KernelCache`` (kernels fetched from the scheduler go there).
    ``compiled`` lists the keys this store's compiles compiled (published), in order."""

    def __init__(self, inner: Any, disk: Any, client: Any, soc: str) -> None:
        self.inner = inner
        self.disk = disk
        self.client = client
        self.flights = inner.flights
        self.namespace = remote_namespace(soc)
        self.compiled: list[str] = []
        self.from_cluster = 0

    def _meta(self, key: str) -> list[str]:
        return ["aioge-kernels", self.namespace, key]

    async def open_view(self, *, force: bool) -> Any:
        return await self.inner.open_view(force=force)

    async def close_view(self, view: Any) -> None:
        await self.inner.close_view(view)

    async def after_compile(self, **counts: int) -> Any:
        return await self.inner.after_compile(**counts)

    async def load(self, key: str, view: Any) -> Any:
        found = await self.inner.load(key, view)
        if found.desc is not None:
            return found
        data = await anyio.to_thread.run_sync(self.client.get_metadata, self._meta(key), None)
        if not isinstance(data, bytes):
            return found
        try:
            desc = decode_kernel(data, key)
        except CacheError:
            return found
        await self.disk.store(desc, view, compiled=False)
        self.from_cluster += 1
        return _Hit(desc)

    async def store(self, desc: KernelDesc, view: Any) -> int:
        written = await self.inner.store(desc, view)
        self.compiled.append(desc.key)
        await anyio.to_thread.run_sync(self.client.set_metadata, self._meta(desc.key), encode_kernel(desc))
        return int(written)

    @contextlib.asynccontextmanager
    async def key_lock(self, key: str, view: Any) -> AsyncIterator[bool]:
        from distributed import Lock

        lock = Lock(f"aioge-kernel-{self.namespace}-{key}", scheduler_rpc=self.client.scheduler, loop=self.client.loop)
        held = await anyio.to_thread.run_sync(lambda: lock.acquire(timeout=_LOCK_SECONDS))
        try:
            async with self.inner.key_lock(key, view):
                yield bool(held)
        finally:
            if held:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(lock.release)


class _Hit:
    __slots__ = ("desc",)
    status = "hit"

    def __init__(self, desc: KernelDesc) -> None:
        self.desc = desc
