"""Crash safety: writers SIGKILLed at random points leave a cache the next process reads right.

A forkserver child compiles, saves and runs graphs into one cache root forever: kernel
entries (enable and force, so generation files too), statistics, ``op_cache.ini``, ``.om``
(inline and external weights), ``.rdcpkt`` (the graphs have a variable), ``.idx`` and
``weight/`` files. It is killed after a random delay, many times. After every kill every file
must decode whole as its type (or be an empty lock file, or a temp file readers ignore), and
a fresh session on that cache must give numpy's result without a single cache warning.
``AIOGE_RELIABILITY_SCALE`` scales the number of kills (30 at 1).
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter

import anyio
import numpy as np
import pytest

import aioge
from tests.reliability import _faults as F

KILLS = F.scaled(30)


async def _read_back(root: str, rng: random.Random) -> tuple[int, int]:
    """A fresh session on the cache: two random graphs of the writer's family; returns (graph
    cache hits, kernel cache hits)."""
    graph_hits = kernel_hits = 0
    async with aioge.Session(F.crash_options(root)) as s:
        for gid in (1, 2):
            si, variant, n = rng.randrange(len(F.SCALES)), rng.randrange(3), rng.randint(1, 24)
            opts = F.crash_graph_options(si, variant, external=rng.random() < 0.5, force=False)
            await s.add_graph(gid, F.family_graph(F.SCALES[si], variant=variant, width=F.CRASH_WIDTH), opts)
            x = F.feed(n, n, F.CRASH_WIDTH)
            y = (await s.run_graph(gid, {"x": x}))["y"]
            np.testing.assert_allclose(
                y, F.family_ref(x, F.SCALES[si], variant=variant, width=F.CRASH_WIDTH), rtol=1e-5, atol=1e-6
            )
            stats = s.compiled(gid).stats
            graph_hits += stats.graph_cache_hit
            kernel_hits += stats.kernel_cache_hits
    return graph_hits, kernel_hits


# ~16 s at scale 1 (30 writer processes killed); the kills grow with AIOGE_RELIABILITY_SCALE.
@pytest.mark.timeout(round(240 * max(1.0, F.SCALE)))
def test_writers_killed_at_random_points_leave_a_readable_cache(tmp_path) -> None:
    root = str(tmp_path)
    (tmp_path / "gc").mkdir()
    ctx = F.mp_context()
    rng = random.Random(20240917)
    caught: Counter[str] = Counter()  # kills that left a temp file: the kill landed inside that file's write
    written: Counter[str] = Counter()  # files published between one kill and the next
    graph_hits = kernel_hits = 0
    before = F.snapshot(root)
    start = time.monotonic()
    for k in range(KILLS):
        ready = ctx.Event()
        p = ctx.Process(target=F.crash_writer, args=(root, k, ready), daemon=True)
        p.start()
        assert ready.wait(30), "the writer did not start"
        time.sleep(rng.uniform(0.05, 0.5) if k % 3 else rng.uniform(0.005, 0.05))
        p.kill()  # SIGKILL
        p.join(10)
        assert p.exitcode == -signal.SIGKILL, f"the writer ended by itself ({p.exitcode}) before kill {k}"
        counts = F.audit(root)  # every file whole, or a temp file
        after = F.snapshot(root)
        for path, ident in after.items():
            kind = F.kind_of(path.rsplit("/", 1)[1], path.rsplit("/", 2)[1])
            if before.get(path) != ident:
                (caught if kind.startswith("tmp:") else written)[kind.removeprefix("tmp:")] += 1
        with F.Warnings() as w:
            g, kh = anyio.run(_read_back, root, rng)
        assert not w.messages, f"after kill {k}: {w.messages}"
        graph_hits += g
        kernel_hits += kh
        before = F.snapshot(root)  # the read-back may have written too
    elapsed = time.monotonic() - start
    print(
        f"\ncrash: {KILLS} kills survived in {elapsed:.1f}s; caught mid-write by type {dict(caught)}; "
        f"files published between kills {dict(written)}; final tree {dict(counts)}; "
        f"read-backs: {graph_hits} graph cache hits, {kernel_hits} kernel hits"
    )
    assert sum(written[t] for t in ("kernel", "om", "idx")) > KILLS // 3, "the writers hardly wrote anything"
    assert counts["om"] and counts["rdcpkt"] and counts["idx"] and counts["weight"] and counts["kernel"]
    assert graph_hits > 0 and kernel_hits > 0


def test_kill_while_saving_leaves_no_empty_model_and_an_unindexed_one_is_indexed_next(tmp_path) -> None:
    """Two exact kill points: before the model's bytes exist (a claimed-but-empty ``.om``
    would be a partial file), and between the entry's files and its index entry."""
    from aioge.cache import graph_cache
    from aioge.compiler import cached
    from aioge.compiler.graph import compile_graph_sync
    from aioge.options import resolve_options

    ctx = F.mp_context()
    for stall in ("encode", "index"):
        ready = ctx.Event()
        p = ctx.Process(target=F.stalled_saver, args=(str(tmp_path), stall, ready), daemon=True)
        p.start()
        assert ready.wait(30)
        p.kill()
        p.join(10)
        counts = F.audit(tmp_path)
        assert counts["om"] == (0 if stall == "encode" else 1), counts
    assert not (tmp_path / "stall.idx").exists()
    g = F.family_graph(1.0, width=8)
    entry = cached.save_sync(
        graph_cache.GraphCache(str(tmp_path), "stall"), compile_graph_sync(g, [("x", (3, 8))], resolve_options(F.HEURISTIC)), g
    )
    names = [e["cache_file_name"] for e in graph_cache.read_index(tmp_path / "stall.idx")["cache_file_list"]]
    assert len(names) == 2 and names[-1] == entry["cache_file_name"]  # the killed writer's whole model is indexed too
    F.audit(tmp_path)
