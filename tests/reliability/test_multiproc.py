"""Concurrency: many processes and tasks on one cache dir, with aging and force meanwhile.

8 processes x 8 tasks compile (a new graph id each round, so every round goes through the
kernel cache) and run three overlapping graphs against one kernel cache whose
``op_cache.ini`` allows 1 MB, while the test keeps it over the limit with idle filler
entries of a dead generation and ages it too, and some tasks compile in ``force`` mode (a
new generation each time). Every result must be right, nothing may raise or warn, every
file must be whole, and no kernel key may be compiled more than once per generation by
``enable`` compiles (the cross-process file lock), plus once by the ``force`` compile that
opened the generation (``KernelCache.stored`` counts the compiles done for the disk).

Index updates: two processes append entries for one graph key at once; every entry must
end up in the ``.idx`` (with the index lock; without it, after the next append heals it).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter
from pathlib import Path

from aioge.cache import graph_cache
from aioge.cache.kernel_cache import ENTRY_KIND, KernelCache
from aioge.compiler import cached
from aioge.plan import io
from aioge.plan.kernel import KernelDesc, desc_to_plain
from tests.reliability import _faults as F

PROCS, TASKS = 8, 8
ROUNDS = F.scaled(3)
SOC = "AiogeSim"


def _filler(cache: KernelCache, count: int, start: int) -> int:
    """``count`` valid, idle (2 h old) entries of a dead generation, ~4 KB each; returns bytes."""
    total = 0
    old = time.time() - 7200
    for i in range(start, start + count):
        key = "filler_" + hashlib.sha256(str(i).encode()).hexdigest()
        desc = KernelDesc(
            key, "Relu", "", "AiCore", (((4,), "float32", "ND"),), (((4,), "float32", "ND"),), "relu", {"pad": "x" * 4000}
        )
        data = io.make_envelope(ENTRY_KIND, io.pack(desc_to_plain(desc)), {"key": key, "generation": "dead"})
        path = cache.entry_path(key, "dead")
        io.write_atomic_sync(path, data)
        os.utime(path, (old, old))
        total += len(data)
    return total


def test_8_processes_x_8_tasks_with_aging_and_force(tmp_path) -> None:
    root = tmp_path / "cache"
    cache = KernelCache(root, SOC)
    cache._ensure_dirs()
    (root / "kernel_cache" / "op_cache.ini").write_text("[op_compiler_cache]\nmax_op_cache_size=1\nremain_cache_size_ratio=50\n")
    made = [_filler(cache, 320, 0)]
    cache.record_stats_sync(bytes_exact=made[0])  # the recorded size is what makes a compile age the folder
    ctx = F.mp_context()
    out = ctx.Queue()
    start_at = time.time() + 1.5
    procs = [
        ctx.Process(target=F.multiproc_worker, args=(str(root), p, TASKS, ROUNDS, start_at, out), daemon=True)
        for p in range(PROCS)
    ]
    for p in procs:
        p.start()
    removed: list[str] = []
    stop = threading.Event()

    def ager() -> None:  # keeps the folder over its limit and ages it, beside the children's own aging
        n = 320
        while not stop.is_set():
            size = _filler(cache, 40, n)
            n += 40
            cache.record_stats_sync(written=size)
            removed.extend(cache.age_sync().removed)
            stop.wait(0.05)

    t = threading.Thread(target=ager)
    t.start()
    try:
        results = [out.get(timeout=180) for _ in procs]
    finally:
        stop.set()
        t.join()
        for p in procs:
            p.join(30)
    assert all(p.exitcode == 0 for p in procs)
    errors = [e for r in results for e in r["errors"]]
    warnings = [w for r in results for w in r["warnings"]]
    assert not errors and not warnings, (errors[:5], warnings[:5])
    runs = sum(r["runs"] for r in results)
    assert runs == PROCS * TASKS * ROUNDS
    counts = F.audit(root)
    compiles: Counter[tuple[str, str]] = Counter()
    for r in results:
        for key, gen, c in r["stored"]:
            compiles[(key, gen)] += c
    per_key: Counter[str] = Counter()
    for (key, _), c in compiles.items():
        per_key[key] += c
    generations = {g for _, g in compiles}
    print(
        f"\nmultiproc: {PROCS} processes x {TASKS} tasks x {ROUNDS} rounds = {runs} compiles+runs; "
        f"{sum(compiles.values())} kernel compiles of {len(per_key)} keys over {len(generations)} generations "
        f"(max {max(compiles.values())} per key and generation); aging removed {len(removed)} entries; files {dict(counts)}"
    )
    # Enable compiles of one key and generation are one (the file lock, then a re-read); a
    # force compile never reads, so the one that opened a generation may add a second.
    assert all(c <= (1 if g == "0" else 2) for (_, g), c in compiles.items()), [kv for kv in compiles.items() if kv[1] > 1][:5]
    assert len(generations) >= 2 and removed  # force and aging really ran
    stats = cache.read_stats_sync()
    assert stats["compiles"] >= 1 and stats["hits"] >= 1


def _race(tmp_path: Path, locks: bool) -> tuple[list[str], list[dict]]:
    ctx = F.mp_context()
    out = ctx.Queue()
    start_at = time.time() + 1.0
    count = F.scaled(6, 2)
    procs = [
        ctx.Process(target=F.index_writer, args=(str(tmp_path), "race", p, count, start_at, locks, out), daemon=True)
        for p in range(2)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    names = sorted(n for r in results for n in r["names"])
    assert len(names) == len(set(names)) == 2 * count  # distinct names: nobody replaced another's model
    return names, graph_cache.read_index(tmp_path / "race.idx")["cache_file_list"]


def test_two_processes_appending_to_one_index_lose_no_entry(tmp_path) -> None:
    names, entries = _race(tmp_path, locks=True)
    assert sorted(e["cache_file_name"] for e in entries) == names
    assert sorted({e["signature"][0][1][0] for e in entries}) == sorted(e["signature"][0][1][0] for e in entries)
    F.audit(tmp_path)


def test_without_index_lock_the_next_append_heals_a_lost_entry(tmp_path) -> None:
    names, _ = _race(tmp_path, locks=False)
    g = F.family_graph(1.0, width=8)
    from aioge.compiler.graph import compile_graph_sync
    from aioge.options import resolve_options

    extra = cached.save_sync(
        graph_cache.GraphCache(str(tmp_path), "race"), compile_graph_sync(g, [("x", (99, 8))], resolve_options(F.HEURISTIC)), g
    )
    entries = graph_cache.read_index(tmp_path / "race.idx")["cache_file_list"]
    assert sorted(e["cache_file_name"] for e in entries) == sorted([*names, extra["cache_file_name"]])
    F.audit(tmp_path)
