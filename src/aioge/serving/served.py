"""A served model: a graph run with gears or dynamic batching, as Triton serves one from its config.

It owns the serving policy: the batch sizes compiled (GE's gears, or ``aioge.batch_*``
buckets), padding a request or batch to one and slicing the outputs back, the feed layouts
already checked, and one ``Batcher`` per layout. A request goes to its layout's batcher, or
(traced, empty, or more rows than a batch) runs alone padded; either way on the runtime
(``runtime.engines.Engines.run``), with the placement the batch's company allows.
"""

from __future__ import annotations

import os
from typing import Any, Awaitable, Callable, Mapping

import numpy as np

from aioge.compiler.specialize import input_signature
from aioge.errors import FeedError
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Graph
from aioge.options import CompileOptions
from aioge.runtime.engines import Engines
from aioge.runtime.executor import Executable
from aioge.runtime.feeds import FEED_KEYS, FeedKey, feed_arrays, feed_key
from aioge.runtime.schedule import Placement
from aioge.serving.batcher import Batcher, BatchStats
from aioge.serving.gears import GearSet, batched_outputs, pad_rows

__all__ = ["ServedModel", "Signature", "bucket_sizes", "static_tail"]

Signature = tuple[tuple[str, tuple[int, ...]], ...]
Tail = tuple[tuple[str, tuple[int, ...], str], ...]  # each input's name, shape past dim 0 and dtype: what a batch shares
Builds = Callable[[Signature], Awaitable[Executable]]
Arrays = dict[str, np.ndarray]
TracePath = str | os.PathLike[str] | None


class ServedModel:
    """One graph's serving: gears or batch buckets, padding, layouts and batchers.

    ``builds`` is the graph's build cache (a signature's executable, compiled once); runs go
    to ``engines``.
    """

    def __init__(self, graph: Graph, options: CompileOptions, gears: GearSet | None, engines: Engines, builds: Builds) -> None:
        self._lists = [v.name for v in graph.inputs if not v.desc.is_tensor]
        self.graph, self.options, self.gears = graph, options, gears
        self._engines, self._builds = engines, builds
        self.sizes = gears.batch if gears is not None else bucket_sizes(options)  # what a batch is padded to
        self.max_rows = (
            min(options.batch_max_rows, max(gears.batch))
            if gears is not None and options.batch_max_rows
            else options.batch_max_rows
        )
        self.batched: frozenset[str] = frozenset()  # outputs whose dim 0 is the batch
        self.batchers: dict[Tail, Batcher] = {}
        self._layouts: dict[FeedKey, tuple[int, Tail]] = {}  # feed layouts checked: their rows and tail

    def stats(self) -> BatchStats:
        """The batching figures of every feed layout, summed (the queue delays: the busiest layout's)."""
        stats = [b.stats() for b in self.batchers.values()]
        if len(stats) == 1:
            return stats[0]
        batches, requests, rows = (sum(getattr(x, f) for x in stats) for f in ("batches", "requests", "rows"))
        busiest = max(stats, key=lambda x: x.requests, default=None)
        return BatchStats(
            batches,
            requests,
            rows,
            rows / batches if batches else 0.0,
            busiest.queue_delay_p50 if busiest else 0.0,
            busiest.queue_delay_p99 if busiest else 0.0,
        )

    async def run(self, feeds: Mapping[str, Any], trace: TracePath = None) -> Arrays:
        """A request: feeds checked here, once per layout (a bad one fails alone), then queued
        for a batch, or run alone padded to a gear or batch size.

        Raises:
            FeedError: a bad feed, or a graph with sequence or optional inputs (rows are a tensor's).
        """
        key = feed_key(feeds)
        known = self._layouts.get(key) if key is not None else None
        if known is not None:
            arrays = dict(feeds)
            rows, tail = known
        else:
            if self._lists:
                raise FeedError(
                    f"gears and batching (aioge.batch_max_rows) take tensor inputs; {self._lists} are sequences or optionals",
                    graph=self.graph.name,
                    input=self._lists[0],
                )
            arrays = feed_arrays(self.graph, feeds)
            shapes = {n: a.shape for n, a in arrays.items()}
            if self.gears is not None:
                rows = self.gears.pick(shapes)[1]
            else:
                rows = _rows(self.graph, arrays)
                input_signature(self.graph, shapes)
            tail = tuple((n, a.shape[1:], a.dtype.str) for n, a in arrays.items())
            if key is not None:
                if len(self._layouts) >= FEED_KEYS:
                    self._layouts.pop(next(iter(self._layouts)))
                self._layouts[key] = (rows, tail)
        if 0 < rows <= self.max_rows and trace is None:  # an empty batch runs padded, unbatched
            batcher = self.batchers.get(tail) or await self.batcher(tail)
            return await batcher.submit(arrays, rows)
        return await self._run_padded(arrays, trace)

    async def batcher(self, tail: Tail) -> Batcher:
        """The batcher of one feed layout; without gears, every batch size is compiled first."""
        if self.gears is None:
            models = {}
            for size in self.sizes:
                models[size] = (await self._builds(tuple((name, (size, *rest)) for name, rest, _ in tail))).model
            self.batched = batched_outputs(models)  # with one size, an output of that dim 0 counts as batched
        batcher = self.batchers.get(tail)
        if batcher is None:
            batcher = self.batchers[tail] = Batcher(
                self._run_batch,
                max_rows=self.max_rows,
                max_delay=self.options.batch_max_delay_us / 1e6,
                batched=self.batched,
                sizes=self.sizes,
            )
        return batcher

    async def _run_batch(self, arrays: Arrays, alone: bool) -> Arrays:
        """A batcher's run. Alone (see ``Batcher``): on the loop's thread when its runs are
        short (the loop has nothing else to do, and a lane would cost a hand-off and a wake-up
        each way: the builder MLP's 64-row batches took 0.30 ms inline against 0.42 on a
        lane), else on the first lane, splitting its big jobs over an idle core. Otherwise
        whole on a lane of its own, beside the other batches."""
        return await self._run_padded(arrays, None, Placement.INLINE if alone else Placement.LANE_WHOLE)

    async def _run_padded(self, arrays: Arrays, trace: TracePath = None, placement: Placement = Placement.QUEUE) -> Arrays:
        """Run checked feeds padded along dim 0 to the smallest gear or batch size that holds
        them; outputs sliced back to their rows."""
        shapes = {n: a.shape for n, a in arrays.items()}
        size: int | None = None
        if self.gears is not None:
            index, rows = self.gears.pick(shapes)
            signature = self.gears.signatures[index]
            if self.gears.batch:
                size = self.gears.batch[index]
                arrays = {n: pad_rows(a, size) if n in self.gears.batched_inputs else a for n, a in arrays.items()}
        else:
            rows = _rows(self.graph, arrays)
            size = next((b for b in self.sizes if b >= rows), None)
            if size is not None:
                arrays = {n: pad_rows(a, size) for n, a in arrays.items()}
            signature = tuple((v.name, arrays[v.name].shape) for v in self.graph.inputs)
        exe = await self._builds(signature)
        outputs = await self._engines.run(exe, arrays, mode=self.options.exec_mode, placement=placement, trace=trace)
        if size is not None and size != rows:
            outputs = {n: o[:rows] if n in self.batched else o for n, o in outputs.items()}
        return outputs


def _rows(graph: Graph, arrays: Mapping[str, np.ndarray]) -> int:
    """The batch of feeds that share dim 0.

    Raises:
        FeedError: a scalar feed, or feeds whose dim 0 differ.
    """
    rows = {n: a.shape[0] if a.ndim else None for n, a in arrays.items()}
    if None in rows.values() or len(set(rows.values())) > 1:
        raise FeedError(f"batching stacks inputs along dim 0, so every input needs the same dim 0; got {rows}", graph=graph.name)
    return next(iter(rows.values()))  # type: ignore[return-value]


def bucket_sizes(options: CompileOptions) -> tuple[int, ...]:
    """The batch sizes compiled for batching without gears: aioge.batch_preferred_sizes up to
    batch_max_rows (default powers of 2), and batch_max_rows itself."""
    top = options.batch_max_rows
    if not top:
        return ()
    chosen = options.batch_preferred_sizes or tuple(1 << i for i in range(top.bit_length()))
    return tuple(sorted({b for b in chosen if b <= top} | {top}))


def static_tail(graph: Graph) -> Tail | None:
    """The feed layout of a graph whose inputs are static past dim 0, or None."""
    tail = []
    for v in graph.inputs:
        if not v.shape or not all(isinstance(d, int) for d in v.shape[1:]):
            return None
        tail.append((v.name, tuple(int(d) for d in v.shape[1:]), np.dtype(numpy_dtype(v.dtype)).str))
    return tuple(tail)
