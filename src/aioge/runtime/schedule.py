"""Where a run goes: ``Executable.run``'s strategies, the one ``choose`` that picks among them,
and every constant Python schedules by (tinygrad's ``realize.py`` runs its schedule through
one such table).

The kernels decide within a kernel, by constants of their own: whether a GEMM splits over an
idle core (``kernels.parallel.SPLIT_MACS``, ``BATCH_SPLIT_MACS``, ``COMPUTE_ROWS``) and how
``csrc/par.c`` and ``csrc/queue.c`` chunk and spin. Which thread a run goes to, and with
whose company, is decided here.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import TYPE_CHECKING, Any

from aioge._util import backend

if TYPE_CHECKING:
    from aioge.runtime.executor import Executable
    from aioge.runtime.workers import EngineWorkers

__all__ = [
    "CONTENDED_S",
    "HELP_DEPTH",
    "INLINE_BUDGET",
    "INLINE_US",
    "INLINE_YIELD",
    "PROBE_EVERY",
    "SHARED_SLOWDOWN",
    "SPLIT_AFTER",
    "Callers",
    "Placement",
    "Strategy",
    "choose",
]

# Runs whose recent compute took under INLINE_US run on the caller's thread (the event loop)
# when no lane is computing: no lane hand-off, no loop wake-up, and a warm core. A lane woken
# per run computed the MLP example in 370 us where the loop thread takes 190 (the VM's idle
# cores come back slow), and the hand-offs cost about 150 us more. The loop keeps the
# "nothing over a millisecond" rule; INLINE_BUDGET bounds concurrent inline runs in one turn
# of the loop.
INLINE_US = 1000.0
INLINE_BUDGET = 0.004
# An inline run yields the loop once the turn's inline runs have held it this long: a caller's
# runs may follow each other without a turn of the loop between them (and its I/O poll) until then.
INLINE_YIELD = 0.001
# Native programs (runtime.native_program) of concurrent callers are queued for the session's
# C runner threads (runtime.program_queue), each program whole on one core, once another caller
# ran the graph within CONTENDED_S; a lone caller's runs stay inline and split their big jobs.
CONTENDED_S = 0.002
# Programs queued (this one included) from which the pushing caller runs one itself.
HELP_DEPTH = 2
# The dynamic batcher (serving.batcher): batches that would run this long (seconds, at the
# recent seconds per row) are split over idle slots. A split costs a lane hand-off (about 0.1
# ms) and, on small models, efficiency: the MLP example's rows cost 8.6 us each in batches of
# 32 against 5.7 in batches of 64, so with no idle core (a loaded machine) its split batches
# served 30-40% fewer requests, while a CNN's 64 rows take 6 ms and halve on two cores.
SPLIT_AFTER = 0.004
# Splits pay while rows of overlapping batches run at most this much slower than alone: a batch
# alone splits its big jobs over both cores, two halves run whole side by side, so 2 is break-even.
# The transformer example's shared rows take 1.3-1.5x its alone ones (7.2K req/s in halves, 5.7K
# alone), the cnn example's 2.3-2.4x (its halves 26-29K req/s, alone 31-35K).
SHARED_SLOWDOWN = 2.0
PROBE_EVERY = 16  # every 16th slow batch goes the other way (split or whole), to measure both again


class Placement(enum.Enum):
    """Where a caller lets a run go (``Executable.run(placement=)``); ``choose`` decides within it."""

    QUEUE = "queue"  # any caller: inline while alone, a short native run of concurrent callers queued for the C runners
    INLINE = "inline"  # nothing else runs it now (a batch alone): inline when short, else the first lane; never queued
    LANE_SPLIT = "lane-split"  # off the loop, on the engine's first lane, its big jobs split over an idle core
    LANE_WHOLE = "lane-whole"  # off the loop, whole on a lane of its own, one core (a batch beside others)


class Strategy(enum.Enum):
    """The ways ``Executable.run`` runs a plan (``run_sync``, a device process's blocking run, is the ninth)."""

    HOST = "host"  # op by op from the loop, each on its stream's lane (aioge.exec_mode=host)
    DEVICES = "devices"  # handed to a device process (aioge.exec_devices)
    INLINE = "inline"  # every step on the loop's thread, holding every CPU token
    LANES = "lanes"  # each thread group on a lane; short runs all on the first lanes, long ones rotating
    NATIVE_INLINE = "native-inline"  # one C call on the loop's thread, holding every CPU token
    NATIVE_QUEUE = "native-queue"  # staged and queued for the C runner threads
    NATIVE_QUEUE_SPLIT = "native-queue-split"  # a lone caller's long program queued, splitting, holding every CPU token
    NATIVE_LANE_SPLIT = "native-lane-split"  # one C call on the first lane, splitting over an idle core
    NATIVE_LANE_WHOLE = "native-lane-whole"  # one C call on a rotating lane, one core


_MAY_INLINE = (Placement.QUEUE, Placement.INLINE)


def choose(
    exe: Executable, workers: EngineWorkers, *, mode: str, placement: Placement, traced: bool, devices: Any = None
) -> Strategy:
    """The strategy of one run of ``exe``. ``traced``: spans or poison asked for (step by step).

    An inline strategy, or NATIVE_QUEUE_SPLIT, is returned holding every CPU token of ``workers`` (no lane computing
    beside it would make the loop's thread wait for the GIL between kernels): its run gives
    them back. A plan that may have a native program (``exe.native_ok`` not False) gets a
    native strategy; ``Executable.run`` chooses again if its program turns out not to build.
    """
    if mode == "host":
        return Strategy.HOST
    if devices is not None and not traced and devices.eligible(exe):
        return Strategy.DEVICES
    may_inline = placement in _MAY_INLINE and not traced and exe.short
    if exe.native_ok is not False and not traced:
        if may_inline:
            if placement is Placement.QUEUE and exe.callers.contended() and workers.program_queue() is not None:
                return Strategy.NATIVE_QUEUE
            if inline_budget.allows() and workers.cpu.take_all():
                return Strategy.NATIVE_INLINE
        elif (
            placement is Placement.QUEUE
            and not workers.lane_runs
            and workers.program_queue() is not None
            and workers.cpu.take_all()
        ):
            return Strategy.NATIVE_QUEUE_SPLIT
        # Beside another lane or split queued run, whole: two split runs took turns on one lane and its
        # helper (light/ squeezenet, 64 callers: 250 runs/s, 1 caller 300), whole ones fill both cores.
        whole = placement is Placement.LANE_WHOLE or (placement is Placement.QUEUE and workers.lane_runs > 0)
        return Strategy.NATIVE_LANE_WHOLE if whole else Strategy.NATIVE_LANE_SPLIT
    if may_inline and inline_budget.allows() and workers.cpu.take_all():
        return Strategy.INLINE
    return Strategy.LANES


class Callers:
    """Whether callers other than the last one run an executable now (within ``CONTENDED_S``):
    a lone caller's runs stay inline, since a lane hand-off per run would cost it a thread
    wake-up each."""

    __slots__ = ("last", "at", "until")

    def __init__(self) -> None:
        self.last, self.at, self.until = 0, 0.0, 0.0

    def contended(self) -> bool:
        caller, now = backend.current().task(), time.perf_counter()
        if caller != self.last and now - self.at < CONTENDED_S:
            self.until = now + CONTENDED_S
        self.last, self.at = caller, now
        return now < self.until


# Concurrent tasks may each start a short run in one turn of the loop; past INLINE_BUDGET s the
# rest go to the lanes, so inline runs hold the loop for a few milliseconds at most between two
# polls of its I/O and timers, whatever the concurrency. The budget comes back at the loop's
# next turn (a callback the first spend schedules). A window of wall time did this before: a
# lone caller, whose runs hold the loop for one run per turn, spent it in 4 of every 10 ms and
# sent the rest of its runs to a lane, 30-60 us of hand-off dearer each (the builder MLP:
# 0.28 -> 0.17 ms a run in the benchmark).
class InlineBudget(threading.local):
    """Per event-loop thread: how long inline runs have held the loop in its current turn."""

    def __init__(self) -> None:
        self.used, self.pending = 0.0, False

    def allows(self) -> bool:
        return self.used < INLINE_BUDGET

    def spend(self, seconds: float) -> None:
        self.used += seconds
        if self.pending:
            return
        self.pending = True  # the budget comes back in the running loop's next turn
        backend.current().call_soon(self._reset)

    def _reset(self) -> None:
        self.used, self.pending = 0.0, False


inline_budget = InlineBudget()
