"""The dynamic batcher: concurrent runs of one graph stacked into one run, outputs split back.

Modelled on Triton's dynamic batcher and Ray Serve's ``@serve.batch``: the first request to
arrive when no batch is forming leads one. It waits up to ``max_delay`` seconds for more rows
(or until ``max_rows`` are queued; for slow batches, a share of them per slot), takes the
queue's head up to ``max_rows`` rows, stacks every input along dim 0, runs the stack once
(the runner pads it to a compiled size) and hands each request its rows of the batched
outputs. The next queued request then leads the next batch, so a batch forms while the last
one runs; at most ``in_flight`` batches run at once, and while a batch waits for its turn it
takes in more rows. The runner learns whether a batch runs alone: no request queued behind it,
no other batch running, and not slow while halves pay (more would queue to run beside it). Alone,
it may run on the loop's thread when short (the loop has nothing to gather) or take an idle core
for its big jobs; otherwise it runs whole on a lane of its own, one core a batch. When batches are
slow (the queued rows would take ``split_after`` s at the recent seconds per row), other slots
idle and splits are measured to pay (rows of batches that overlapped ran less than twice as
slow as alone, which splits over the cores), a batch takes only its share of the queue and the rest starts
at once: with every client queued, two half batches run on two cores instead of one whole
batch on one, and the half that ends first queues again while the other computes.

There is no background task (a session has no task group to own one, and trio wants one):
leading moves from request to request. A request cancelled while queued leaves the queue
(and hands the lead on); a leader cancelled once its batch runs lets the run finish for the
others (shielded) and drops its own rows. Feeds are checked by the caller before they are
queued, so a bad feed fails alone. A batch whose run fails (a value no feed check sees, such
as an index out of range) runs again in halves, and each half that fails is halved again, so
only the requests whose rows fail get the error and the others their outputs: one bad request
among n costs about 2 log2(n) more runs, a batch that fails whatever its rows 2n - 1.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

import anyio
import numpy as np

from aioge._util import backend
from aioge.runtime.schedule import PROBE_EVERY, SHARED_SLOWDOWN, SPLIT_AFTER
from aioge.runtime.workers import Event, RunGate

__all__ = ["PROBE_EVERY", "SHARED_SLOWDOWN", "SPLIT_AFTER", "BatchStats", "Batcher"]

# (stacked feeds, alone: no request queued behind this batch, no other batch running, not slow) -> outputs
Runner = Callable[[dict[str, np.ndarray], bool], Awaitable[dict[str, np.ndarray]]]

_DELAYS_KEPT = 4096  # queue delays kept for the percentiles: the latest ones


@dataclass(frozen=True, slots=True)
class BatchStats:
    """A graph's batching so far: batches run, requests and rows in them, queue delay percentiles (seconds)."""

    batches: int
    requests: int
    rows: int
    mean_batch_rows: float
    queue_delay_p50: float
    queue_delay_p99: float

    def as_dict(self) -> dict[str, float]:
        """The figures as plain data (for JSON or metrics)."""
        return {f: getattr(self, f) for f in self.__slots__}


class _Request:
    __slots__ = ("arrays", "rows", "arrived", "wake", "lead", "taken", "outputs", "error")

    def __init__(self, arrays: Mapping[str, np.ndarray], rows: int, arrived: float, wake: Event) -> None:
        self.arrays = arrays
        self.rows = rows
        self.arrived = arrived
        self.wake = wake
        self.lead = False
        self.taken = False
        self.outputs: dict[str, np.ndarray] | None = None
        self.error: BaseException | None = None


class Batcher:
    """Stacks concurrent ``submit`` calls into runs of ``run`` (see the module docstring).

    ``batched`` names the outputs whose dim 0 is the batch; the others go whole to every request.
    """

    def __init__(
        self,
        run: Runner,
        *,
        max_rows: int,
        max_delay: float,
        batched: frozenset[str],
        in_flight: int = 2,
        split_after: float | None = SPLIT_AFTER,
        sizes: tuple[int, ...] = (),
    ) -> None:
        if max_rows < 1 or in_flight < 1:
            raise ValueError("max_rows and in_flight must be at least 1")
        self._run = run
        self.max_rows = max_rows
        self.max_delay = max_delay
        self.batched = batched
        self._split_after = split_after
        self._sizes = sorted(sizes)  # the compiled batch sizes (gears or buckets) a batch is padded to
        # Run time per row (moving averages) of batches that ran alone and of batches that ran
        # beside another: whether splits pay is measured, not assumed. With a free core per
        # batch the two agree; with none (a loaded machine) a shared row takes about twice as
        # long, and a split only adds hand-offs and smaller, less efficient batches.
        self._row_any: float | None = None
        self._row_s: float | None = None
        self._row_shared: float | None = None
        self._running = self._started = 0
        self._runs_of: dict[int, int] = {}  # batches run per compiled size: its first in_flight build programs
        self._probe = 0  # slow batches taken since the last probe
        self._in_flight = in_flight
        # The rows a leader waits for (up to max_delay): max_rows, or for slow batches a share
        # of it per slot, so that a split half whose callers queue again starts at once
        # instead of waiting out max_delay for rows that are in the other half's run.
        self._target = max_rows
        self._split = False  # the last batch left rows for an idle slot: they start at once
        self._wake: Callable[[], Event] | None = None  # makes a request's wake-up: found on the first submit
        self._queue: deque[_Request] = deque()
        self._queued_rows = 0
        self._leading = False
        self._full: Event | None = None
        self._slots = RunGate(in_flight)  # a Semaphore checkpoints on every acquire
        self._batches = self._requests = self._rows = 0
        self._delays: deque[float] = deque(maxlen=_DELAYS_KEPT)

    def stats(self) -> BatchStats:
        """The batching figures so far."""
        d = np.fromiter(self._delays, dtype=np.float64) if self._delays else np.zeros(1)
        return BatchStats(
            self._batches,
            self._requests,
            self._rows,
            self._rows / self._batches if self._batches else 0.0,
            float(np.percentile(d, 50)),
            float(np.percentile(d, 99)),
        )

    async def submit(self, arrays: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """Queue one request of ``rows`` rows (1 <= rows <= max_rows, checked feeds) and return its outputs.

        Raises:
            whatever the batch's run raised.
        """
        wake = self._wake
        if wake is None:  # not anyio.Event(): it looks the backend up, per call (a session runs on one loop)
            wake = self._wake = backend.current().event_factory()
        req = _Request(arrays, rows, time.perf_counter(), wake())  # not anyio.current_time(): a look-up too
        self._queue.append(req)
        self._queued_rows += rows
        if not self._leading:
            self._leading = req.lead = True
        elif self._queued_rows >= self._target and self._full is not None:
            self._full.set()
        try:
            while True:
                if req.lead and not req.taken:
                    await self._lead(req)
                else:
                    await req.wake.wait()
                if req.taken and req.wake.is_set():
                    break
        except BaseException:
            self._drop(req)
            raise
        if req.error is not None:
            raise req.error
        assert req.outputs is not None
        return req.outputs

    def _drop(self, req: _Request) -> None:
        """A request that leaves (cancelled): out of the queue, and the lead passed on if it had it."""
        if req.taken:
            return  # its batch runs for the others; its rows are dropped
        try:
            self._queue.remove(req)
        except ValueError:
            return
        self._queued_rows -= req.rows
        if req.lead:
            self._pass_lead()

    def _pass_lead(self) -> None:
        if self._queue:
            head = self._queue[0]
            head.lead = True
            self._leading = True
            head.wake.set()
            assert self._wake is not None
            head.wake = self._wake()  # its own wake stays for its outputs
        else:
            self._leading = False
            self._split = False

    async def _lead(self, req: _Request) -> None:
        if self._split:
            self._split = False
        elif self._queued_rows < self._target and self.max_delay > 0:
            assert self._wake is not None
            full = self._full = self._wake()
            with anyio.move_on_after(self.max_delay):
                await full.wait()
            self._full = None
        elif self._queued_rows < self._target:
            await anyio.lowlevel.checkpoint()  # with no delay, the requests of this turn of the loop still join
        await self._slots.enter()
        try:
            batch = self._take()
            self._pass_lead()
            with anyio.CancelScope(shield=True):  # the others' rows run even if this caller is cancelled
                await self._run_batch(batch)
        finally:
            self._slots.leave()

    def _slow(self, rows: int) -> bool:
        """Whether a batch of ``rows`` rows would run for ``split_after`` s or more, at the
        recent seconds per row of every batch."""
        return self._split_after is not None and self._row_any is not None and self._row_any * rows >= self._split_after

    def _splits_pay(self) -> bool:
        """Whether rows of batches that overlapped another ran at most SHARED_SLOWDOWN times
        slower than rows of batches alone (or that is not known yet)."""
        return self._row_shared is None or self._row_s is None or self._row_shared <= SHARED_SLOWDOWN * self._row_s

    def _take(self) -> list[_Request]:
        """The queue's head up to max_rows, or its share when other slots are idle (the rest
        leads the next batch at once, on another lane)."""
        batch: list[_Request] = []
        rows = 0
        limit = self.max_rows
        idle = self._slots.idle
        if idle and self._queued_rows > 1 and self._slow(self._queued_rows):
            split = self._splits_pay()
            self._probe += 1
            if self._probe >= PROBE_EVERY:  # now and then the other choice, so neither figure goes stale
                self._probe = 0
                split = not split
            if split:
                limit = min(limit, -(-self._queued_rows // (idle + 1)))
                self._split = self._queued_rows > limit
        queue, cap = self._queue, self.max_rows
        while queue:  # the first request may pass limit (not max_rows): a batch takes at least one
            r = queue[0]
            more = rows + r.rows
            if more > cap or (batch and more > limit):
                break
            queue.popleft()
            r.taken = True
            rows = more
            batch.append(r)
        # Triton's preferred batch sizes: a batch that would pad more rows than it leaves for
        # the next one takes only a compiled size (40 rows run as 32 now and 8 with the next
        # batch's, not as 64), and the rows left start the next batch at once.
        down = max((z for z in self._sizes if z <= rows), default=rows)
        up = min((z for z in self._sizes if z >= rows), default=2 * rows)
        while len(batch) > 1 and rows > down and up - rows > rows - down:
            r = batch.pop()
            r.taken, self._split = False, True
            rows -= r.rows
            self._queue.appendleft(r)
        self._queued_rows -= rows
        return batch

    async def _run_batch(self, batch: list[_Request]) -> None:
        start = time.perf_counter()
        self._delays.extend(start - r.arrived for r in batch)
        total = sum(r.rows for r in batch)
        self._batches += 1
        self._requests += len(batch)
        self._rows += total
        alone, started = self._running == 0, self._started
        self._running += 1
        self._started += 1
        # The first in_flight runs of a compiled size each may build a program (one per run at
        # once): not timed. Timed, the cnn example's first row (1.7 ms, cold) left its alone
        # seconds per row stale for good, and its 64 clients split in halves that idled a core.
        size = next((z for z in self._sizes if z >= total), 0)  # 0: no compiled sizes, every batch timed
        self._runs_of[size] = runs = self._runs_of.get(size, 0) + 1
        cold = size > 0 and runs <= self._in_flight
        try:
            # alone also when slow, if halves do not pay: its big jobs then split over every core
            outputs = await self._run(_stack(batch), not self._queue and alone and not (self._slow(total) and self._splits_pay()))
            per_row = (time.perf_counter() - start) / total
            if not cold:
                self._row_any = per_row if self._row_any is None else 0.8 * self._row_any + 0.2 * per_row
                if alone and self._started == started + 1:  # no other batch ran meanwhile
                    self._row_s = per_row if self._row_s is None else 0.8 * self._row_s + 0.2 * per_row
                else:
                    self._row_shared = per_row if self._row_shared is None else 0.8 * self._row_shared + 0.2 * per_row
            share = self._slow(self.max_rows) and self._splits_pay()
            self._target = -(-self.max_rows // self._in_flight) if share else self.max_rows
        except Exception as exc:
            await self._bisect(batch, exc)
        else:
            self._hand_out(batch, outputs)
        finally:
            self._running -= 1
            for r in batch:
                r.wake.set()

    async def _bisect(self, batch: list[_Request], exc: Exception) -> None:
        """A failed run's requests, run again in halves (a half that fails is halved again):
        a lone request that fails gets its error."""
        if len(batch) == 1:
            batch[0].error = exc
            return
        mid = len(batch) // 2
        for half in (batch[:mid], batch[mid:]):
            try:
                outputs = await self._run(_stack(half), False)
            except Exception as again:
                await self._bisect(half, again)
            else:
                self._hand_out(half, outputs)

    def _hand_out(self, batch: list[_Request], outputs: Mapping[str, np.ndarray]) -> None:
        at = 0
        parts = [(n, o, n in self.batched) for n, o in outputs.items()]  # the batched ones are cut
        for r in batch:
            r.outputs = {n: o[at : at + r.rows] if cut else o for n, o, cut in parts}
            at += r.rows


def _stack(batch: list[_Request]) -> dict[str, np.ndarray]:
    if len(batch) == 1:
        return dict(batch[0].arrays)
    return {n: np.concatenate([r.arrays[n] for r in batch]) for n in batch[0].arrays}
