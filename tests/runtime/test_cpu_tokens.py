"""CPU tokens are lent to big kernels per run: sessions with their own workers never share them."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.ir.graph import Graph
from aioge.kernels import parallel
from aioge.runtime.workers import CpuTokens, EngineWorkers

pytestmark = pytest.mark.anyio

OPTIONS = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}


def _gemm() -> tuple[Graph, np.ndarray, np.ndarray]:
    # (2048 x 512) @ (512 x 256) with transB=1: 2**28 multiply-adds, a few ms (never an inline run).
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 512), dtype=np.float32)
    g = Graph("gemm")
    g.output(ops.gemm(g.input("x", (2048, 512)), g.constant(w, "w"), transB=1), names=["y"])
    return g, w, rng.standard_normal((2048, 512), dtype=np.float32)


class _CountingPool:
    """Stands in for the helper pool: counts the halves handed to a helper thread."""

    def __init__(self, pool) -> None:  # type: ignore[no-untyped-def]
        self.pool, self.submitted = pool, 0

    def submit(self, fn, *args):  # type: ignore[no-untyped-def]
        self.submitted += 1
        return self.pool.submit(fn, *args)


@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_two_workers_with_different_cpu_tokens_do_not_interfere(mode: str, monkeypatch) -> None:
    """A run on one-token workers never splits (its only token computes), even after a session
    with two tokens started; a run on the two-token workers does split. Before, the workers
    made last pushed their semaphore into a module global and the first run borrowed from it."""
    monkeypatch.setattr(parallel, "CORES", 2)  # split_range needs two cores to split
    counting = _CountingPool(parallel._helper_pool())
    monkeypatch.setattr(parallel, "_helper_pool", lambda: counting)
    g, w, x = _gemm()
    one = EngineWorkers(min_lanes=1, cpu_slots=1)
    two = EngineWorkers(min_lanes=1, cpu_slots=2)  # made last
    try:
        async with aioge.Session(OPTIONS) as s:
            await s.add_graph(1, g)
            await s.build_graph(1, {"x": x})
            exe = s.executable(1)
            out = await exe.run({"x": x}, workers=one, mode=mode)
            np.testing.assert_allclose(out["y"], x @ w.T, rtol=1e-4, atol=1e-3)
            assert counting.submitted == 0, "one token, held by the computing lane: nothing to borrow"
            out = await exe.run({"x": x}, workers=two, mode=mode)
            np.testing.assert_allclose(out["y"], x @ w.T, rtol=1e-4, atol=1e-3)
            assert counting.submitted == 1, "two tokens, one idle: the GEMM splits"
            await exe.run({"x": x}, workers=one, mode=mode)
            assert counting.submitted == 1
            assert exe.inline_runs == 0
        assert one.cpu._value == 1 and two.cpu._value == 2  # every token given back
    finally:
        one.close()
        two.close()


def test_outside_a_run_kernels_borrow_no_tokens() -> None:
    calls: list[tuple[int, int]] = []
    assert parallel.split_range(10, lambda lo, hi: calls.append((lo, hi))) == 1
    assert calls == [(0, 10)]


def test_cpu_tokens_count_block_and_wake_like_a_semaphore() -> None:
    tokens = CpuTokens(2)
    assert isinstance(tokens, threading.Semaphore)
    assert tokens.take_all() and not tokens.acquire(blocking=False)
    assert not tokens.acquire(timeout=0.01)  # none free: the timeout ends the wait
    tokens.give_all()
    assert tokens.acquire(blocking=False) and not tokens.take_all()  # one in use: not all
    got: list[float] = []

    def waiter() -> None:
        with tokens:  # the second token, then a third that waits for a release
            tokens.acquire()
            got.append(time.perf_counter())
            tokens.release()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    assert got == [], "no token free: the waiter waits"
    released = time.perf_counter()
    tokens.release()
    t.join(5)
    assert got and got[0] >= released and not t.is_alive()
    assert tokens.take_all(), "every token came back"
