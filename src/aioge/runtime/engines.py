"""What a session runs on: its engine lanes, its device processes and the gate on runs in flight."""

from __future__ import annotations

import os
from typing import Mapping

import anyio
import numpy as np

from aioge.errors import SessionClosedError
from aioge.runtime.blas import configure_blas
from aioge.runtime.devices import DevicePool
from aioge.runtime.executor import Executable, TraceSpan
from aioge.runtime.schedule import Placement
from aioge.runtime.workers import EngineWorkers, RunGate

__all__ = ["Engines"]


class Engines:
    """A session's engine workers (started on its first run), device processes
    (``aioge.exec_devices``, started on the first run that can use them) and its bound on runs
    in flight. Kept apart from the session so the finalizer of a session that is never closed
    can stop them without keeping the session alive; every run, served or not, goes through ``run``.
    """

    __slots__ = ("workers", "devices", "runs", "closed")

    def __init__(self, devices: DevicePool | None) -> None:
        self.workers: EngineWorkers | None = None
        self.devices = devices
        # Runs in flight on the lanes (each holds an arena). Twice the cores, so a lane that
        # finishes a run finds the next one queued instead of idling through the
        # thread-to-loop-to-thread hand-off; the lanes' CPU tokens still bound the compute.
        self.runs = RunGate(2 * (os.cpu_count() or 2))
        self.closed = False

    async def start(self) -> EngineWorkers:
        """The engine workers, started on first use; BLAS threads are set once before any kernel runs.

        Raises:
            SessionClosedError: closed (also while this waited).
        """
        if self.closed:
            raise SessionClosedError()
        if self.workers is None:
            # Several lanes run kernels at once (streams, concurrent runs): one BLAS thread each.
            await anyio.to_thread.run_sync(configure_blas, 1)
            if self.closed:  # closed meanwhile: start no engines nobody stops
                raise SessionClosedError()
            if self.workers is None:
                self.workers = EngineWorkers()
        return self.workers

    async def run(
        self,
        exe: Executable,
        feeds: Mapping[str, np.ndarray],
        *,
        mode: str = "sink",
        placement: Placement = Placement.QUEUE,
        trace: str | os.PathLike[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Run ``exe`` on checked feeds (``Executable.run``), and write its trace to ``trace``.

        Raises:
            SessionClosedError: closed before the run started. ExecutionError: as ``Executable.run``.
        """
        workers = self.workers or await self.start()
        spans: list[TraceSpan] | None = [] if trace is not None else None
        await self.runs.enter()
        try:
            if self.closed:
                raise SessionClosedError(graph=exe.model.graph.name)
            start = anyio.current_time() if spans is not None else 0.0
            outputs = await exe.run(feeds, mode=mode, workers=workers, trace=spans, placement=placement, devices=self.devices)
        finally:
            self.runs.leave()
        if trace is not None and spans is not None:
            from aioge.runtime.trace import write_trace

            await anyio.to_thread.run_sync(write_trace, os.fspath(trace), exe.model, spans, start)
        return outputs

    async def aclose(self) -> None:
        """Stop the lanes (after their queued work) and the devices; joining blocks, so off the loop."""
        self.closed = True
        workers, self.workers = self.workers, None
        devices, self.devices = self.devices, None
        if workers is not None:
            await anyio.to_thread.run_sync(workers.close)
        if devices is not None:
            await anyio.to_thread.run_sync(devices.close)
