"""Concurrent run_graph calls on one session: runs/s of an example graph with N tasks in flight.

    PYTHONPATH=<tree>/src python bench/bench_concurrent_calls.py transformer 64

Each of N tasks awaits ``run_graph`` in a loop for 2 s, three rounds; prints runs/s per round and
the executable's native-run count. Run two trees' processes alternately to compare them.
"""

from __future__ import annotations

import sys
import time

import anyio

import aioge
from aioge.examples import EXAMPLES


async def main(name: str, tasks: int) -> None:
    graph, feeds, _ = EXAMPLES[name](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        for _ in range(20):
            await s.run_graph(1, feeds)
        rates = []
        for _ in range(3):
            done = 0
            start = time.perf_counter()

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() - start < 2.0:
                    await s.run_graph(1, feeds)
                    done += 1

            async with anyio.create_task_group() as tg:
                for _ in range(tasks):
                    tg.start_soon(worker)
            rates.append(done / (time.perf_counter() - start))
        print(name, tasks, "runs/s", [round(r) for r in rates], "native_runs", s.executable(1).native_runs)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]))
