"""The kernel disk cache, as GE documents it: modes, dir priority, op_cache.ini and env
limits, aging, debug switches, corrupt entries, statistics and the ``aioge cache`` tools."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache.kernel_cache import ENTRY_KIND, KernelCache, cache_report
from aioge.cache.kernel_limits import read_limits, resolve_cache_root
from aioge.compiler.tuning import RECHECK_MARGIN
from aioge.errors import OptionError
from aioge.options import resolve_options
from aioge.plan.io import make_envelope, pack
from aioge.plan.kernel import KernelDesc, desc_to_plain

pytestmark = pytest.mark.anyio

RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 8)).astype(np.float32)


def _graph(name: str = "g") -> aioge.Graph:
    g = aioge.Graph(name)
    x = g.input("x", (4, 8), "float32")
    h = ops.relu(ops.apply("MatMul", [ops.mul(x, 0.5), g.constant(W, "w")])[0])
    g.output(ops.tanh(h + 1.0), names=["y"])
    return g


def _ref(x: np.ndarray) -> np.ndarray:
    return np.tanh(np.maximum((x * 0.5) @ W, 0) + 1.0)


# Fusion passes off, so the compiled graph keeps the nodes these tests talk about.
UNFUSED = "ActivationFusionPass:off;ElementwiseFusionPass:off;MatMulAddFusionPass:off"


def _opts(root: Path, **extra: str) -> dict[str, str]:
    return {"ge.op_compiler_cache_dir": str(root), "aioge.tune_mode": "heuristic", "ge.optimizationSwitch": UNFUSED, **extra}


async def _build(options: dict[str, str], graph: aioge.Graph | None = None, graph_options: dict[str, str] | None = None):
    async with aioge.Session(options) as s:
        await s.add_graph(1, graph or _graph(), graph_options)
        model = await s.build_graph(1)
        x = RNG.standard_normal((4, 8)).astype(np.float32)
        out = await s.run_graph(1, {"x": x})
        np.testing.assert_allclose(out["y"], _ref(x), rtol=1e-5, atol=1e-6)
        return model


def _soc(root: Path, soc: str = "AiogeSim") -> Path:
    return root / "kernel_cache" / soc


def _entries(root: Path) -> list[Path]:
    d = _soc(root)
    return sorted(d.glob("*.aiok")) if d.is_dir() else []


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# -- modes --------------------------------------------------------------------------------------


async def test_enable_writes_then_hits(tmp_path: Path) -> None:
    first = await _build(_opts(tmp_path))
    assert first.stats.kernels_compiled == len(first.nodes) and first.stats.kernel_cache_hits == 0
    assert len(_entries(tmp_path)) == len(first.nodes)
    assert (tmp_path / "kernel_cache" / "op_cache.ini").read_text().count("# max_op_cache_size=500") == 1  # a template
    second = await _build(_opts(tmp_path))
    assert second.stats.kernels_compiled == 0 and second.stats.kernel_cache_hits == len(second.nodes)
    assert [n.kernel for n in second.nodes] == [n.kernel for n in first.nodes]
    stats = KernelCache(tmp_path, "AiogeSim").read_stats_sync()
    n = len(first.nodes)
    assert (stats["hits"], stats["misses"], stats["compiles"]) == (n, n, n)


_SCRIPT = """
import json, sys
import anyio, numpy as np
import aioge
from aioge import ops

async def main():
    rng = np.random.default_rng(0)
    g = aioge.Graph("cnn")
    x = g.input("x", (2, 3, 12, 12), "float32")
    h = ops.relu(ops.conv2d(x, g.constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"), pads=(1, 1, 1, 1)))
    h = ops.max_pool(h, kernel_shape=(2, 2), strides=(2, 2))
    h = ops.relu(ops.conv2d(h, g.constant(rng.standard_normal((8, 8, 1, 1)).astype(np.float32), "w2")))
    g.output(ops.softmax(ops.flatten(ops.global_average_pool(h), axis=1)), names=["y"])
    async with aioge.Session({"ge.op_compiler_cache_dir": sys.argv[1], "aioge.tune_budget_ms": "5"}) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1)
        y = (await s.run_graph(1, {"x": np.ones((2, 3, 12, 12), np.float32)}))["y"]
    print(json.dumps({"compiled": model.stats.kernels_compiled, "hits": model.stats.kernel_cache_hits,
                      "retuned": model.stats.kernels_retuned, "nodes": len(model.nodes),
                      "kernels": [[n.kernel.impl, n.kernel.tuned, n.kernel.history.margin] for n in model.nodes],
                      "y": y.tolist()}))

anyio.run(main)
"""


def test_a_second_process_compiles_zero_kernels(tmp_path: Path) -> None:
    script = tmp_path / "compile_cnn.py"
    script.write_text(_SCRIPT)
    root = tmp_path / "cache"

    def run() -> dict:
        done = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    cold, warm = run(), run()
    assert cold["compiled"] == cold["nodes"] > 0 and cold["hits"] == 0
    assert warm["compiled"] == 0 and warm["hits"] == warm["nodes"] == cold["nodes"]
    # The tuned choices come back as they were made, but for close calls a hit re-timed (and
    # may have settled the other way: tests/compiler/test_recheck.py).
    changed = [(c, w) for c, w in zip(cold["kernels"], warm["kernels"]) if c[0] != w[0]]
    assert all(0 < c[2] < RECHECK_MARGIN for c, _ in changed), changed
    assert not changed or warm["retuned"] > 0  # (retuned also counts a change of parameters alone)
    assert any(tuned for _, tuned, _ in cold["kernels"])  # tune mode (the default) timed the convs
    np.testing.assert_allclose(warm["y"], cold["y"], rtol=1e-6)


async def test_force_recompiles_everything_and_keeps_a_parallel_compile_intact(tmp_path: Path) -> None:
    seeded = await _build(_opts(tmp_path))
    old = _entries(tmp_path)
    assert len(old) == len(seeded.nodes)
    forced = anyio.Event()
    async with (
        aioge.Session(_opts(tmp_path)) as reader,
        aioge.Session(_opts(tmp_path, **{"ge.op_compiler_cache_mode": "force"})) as forcer,
    ):
        real_load = reader.kernel_cache.load

        async def late_load(key, view):  # the reader's lookups happen after force has finished
            await forced.wait()
            return await real_load(key, view)

        reader.kernel_cache.load = late_load  # type: ignore[method-assign]
        await reader.add_graph(1, _graph())
        await forcer.add_graph(1, _graph())
        results = {}

        async def read() -> None:
            results["reader"] = await reader.build_graph(1)

        async def force() -> None:
            results["forcer"] = await forcer.build_graph(1)
            forced.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.sleep(0.05)  # the reader has opened its view of the cache
            tg.start_soon(force)
        x = RNG.standard_normal((4, 8)).astype(np.float32)
        np.testing.assert_allclose((await reader.run_graph(1, {"x": x}))["y"], _ref(x), rtol=1e-5, atol=1e-6)
    f, r = results["forcer"], results["reader"]
    assert f.stats.kernels_compiled == len(f.nodes) and f.stats.kernel_cache_hits == 0  # force recompiles every kernel
    assert r.stats.kernels_compiled == 0 and r.stats.kernel_cache_hits == len(r.nodes)  # nothing vanished under it
    # The reader loaded every old entry after force had finished (its hits above): force deleted
    # nothing a parallel compile reads. Once the reader let go, the dead generation was reclaimed.
    assert not any(p.exists() for p in old)
    later = await _build(_opts(tmp_path))
    assert later.stats.kernels_compiled == 0  # later compiles read force's fresh generation...
    gen = KernelCache(tmp_path, "AiogeSim").generation_sync()
    assert gen != "0" and len([p for p in _entries(tmp_path) if f".g{gen}." in p.name]) == len(f.nodes)


async def test_disable_leaves_the_dir_untouched(tmp_path: Path) -> None:
    missing = tmp_path / "never"
    model = await _build(_opts(missing, **{"ge.op_compiler_cache_mode": "disable"}))
    assert model.stats.kernels_compiled == len(model.nodes) and not missing.exists()
    await _build(_opts(tmp_path))
    before = _tree(tmp_path)
    again = await _build(_opts(tmp_path), graph_options={"ge.op_compiler_cache_mode": "disable"})  # graph level too
    assert again.stats.kernels_compiled == len(again.nodes) and again.stats.kernel_cache_hits == 0
    assert _tree(tmp_path) == before


# -- where the cache lives ----------------------------------------------------------------------


async def test_dir_priority_option_then_env_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"ASCEND_CACHE_PATH": str(tmp_path / "env"), "HOME": str(tmp_path / "home")}
    assert resolve_cache_root(str(tmp_path / "opt"), env) == tmp_path / "opt"
    assert resolve_cache_root("", env) == tmp_path / "env"
    assert resolve_cache_root("", {"HOME": str(tmp_path / "home")}) == tmp_path / "home" / "atc_data"
    cache = KernelCache.from_options(resolve_options({}, env=env), env=env)
    assert cache.soc_dir == tmp_path / "env" / "kernel_cache" / "AiogeSim"
    # The session reads the environment when it resolves its options, not at import.
    monkeypatch.setenv("ASCEND_CACHE_PATH", str(tmp_path / "env"))
    model = await _build({"aioge.tune_mode": "heuristic", "ge.optimizationSwitch": UNFUSED})
    assert len(_entries(tmp_path / "env")) == len(model.nodes)
    monkeypatch.delenv("ASCEND_CACHE_PATH")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    await _build({"aioge.tune_mode": "heuristic", "ge.socVersion": "Ascend910B"})
    assert list((tmp_path / "home" / "atc_data" / "kernel_cache" / "Ascend910B").glob("*.aiok"))
    with pytest.raises(OptionError, match="op_compiler_cache_dir"):
        aioge.Session({"ge.op_compiler_cache_dir": str(tmp_path / "bad dir!")})


# -- limits -------------------------------------------------------------------------------------


def _ini(d: Path, body: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "op_cache.ini").write_text(body)


def test_limits_ini_beats_env_beats_defaults_and_ini_needs_both_values(tmp_path: Path) -> None:
    env = {"ASCEND_MAX_OP_CACHE_SIZE": "300", "ASCEND_REMAIN_CACHE_SIZE_RATIO": "70"}
    lim = read_limits(tmp_path, {})
    assert (lim.max_mb, lim.ratio, lim.max_source, lim.ratio_source) == (500, 50, "default", "default")
    lim = read_limits(tmp_path, env)
    assert (lim.max_mb, lim.ratio, lim.max_source, lim.ratio_source) == (300, 70, "env", "env")
    lim = read_limits(tmp_path, {"ASCEND_MAX_OP_CACHE_SIZE": "abc", "ASCEND_REMAIN_CACHE_SIZE_RATIO": "80"})
    assert (lim.max_mb, lim.max_source, lim.ratio, lim.ratio_source) == (500, "default", 80, "env")
    _ini(tmp_path, "[op_compiler_cache]\nmax_op_cache_size=100\nremain_cache_size_ratio=20\n")
    lim = read_limits(tmp_path, env)
    assert (lim.max_mb, lim.ratio, lim.max_source, lim.ratio_source) == (100, 20, "ini", "ini")
    for bad in (
        "max_op_cache_size=100\nremain_cache_size_ratio=0",
        "max_op_cache_size=0\nremain_cache_size_ratio=20",
        "max_op_cache_size=100",
        "max_op_cache_size=1.5\nremain_cache_size_ratio=20",
        "max_op_cache_size=100\nremain_cache_size_ratio=101",
    ):
        _ini(tmp_path, "[op_compiler_cache]\n" + bad + "\n")
        lim = read_limits(tmp_path, env)
        assert (lim.max_mb, lim.ratio, lim.max_source) == (300, 70, "env"), bad  # only both valid values count
    _ini(tmp_path, "[op_compiler_cache]\nmax_op_cache_size=-1\nremain_cache_size_ratio=100\n")
    lim = read_limits(tmp_path, env)
    assert lim.max_mb == -1 and not lim.aging
    _ini(tmp_path, "not an ini [[[")
    assert read_limits(tmp_path, env).max_source == "env"


async def test_ini_is_written_with_defaults_only_if_missing(tmp_path: Path) -> None:
    _ini(tmp_path / "kernel_cache", "[op_compiler_cache]\nmax_op_cache_size=7\nremain_cache_size_ratio=9\n")
    await _build(_opts(tmp_path))
    assert "max_op_cache_size=7" in (tmp_path / "kernel_cache" / "op_cache.ini").read_text()


# -- aging --------------------------------------------------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _desc(i: int, pad: int = 100_000) -> KernelDesc:
    key = f"toy_{i:064x}"
    return KernelDesc(
        key, "Toy", "", "AiCore", (((4,), "float32", "ND"),), (((4,), "float32", "ND"),), "numpy", {"pad": "x" * pad}
    )


def _fill(cache: KernelCache, ages_s: list[float]) -> list[Path]:
    view = cache.open_view_sync(force=False)
    paths = []
    for i, age in enumerate(ages_s):
        cache.store_sync(_desc(i), view)
        p = cache.entry_path(_desc(i).key, view.generation)
        t = cache.clock() - age
        os.utime(p, (t, t))
        paths.append(p)
    return paths


def test_aging_removes_idle_entries_lru_first_down_to_the_ratio(tmp_path: Path) -> None:
    clock = Clock(1_000_000.0)
    cache = KernelCache(tmp_path, "AiogeSim", env={}, clock=clock)
    _ini(cache.kernel_dir, "[op_compiler_cache]\nmax_op_cache_size=1\nremain_cache_size_ratio=50\n")
    # 8 entries idle for 1-8 hours, 4 used in the last 10 minutes; ~100 KB each, 1.2 MB in all.
    ages = [3600.0 * (8 - i) for i in range(8)] + [600.0] * 4
    paths = _fill(cache, ages)
    foreign = cache.soc_dir / "toy_notours.g0.aiok"
    foreign.write_bytes(b"someone else's file")
    report = cache.age_sync()
    size = paths[0].stat().st_size if paths[0].exists() else os.path.getsize(paths[-1])
    assert report.bytes_before > (1 << 20) >= report.bytes_after * 2 - size  # down to at most 50% of 1 MB
    assert report.bytes_after <= (1 << 20) // 2
    removed = [p for p in paths if not p.exists()]
    assert removed == paths[: len(removed)] and len(removed) == 7  # the least recently used first
    assert all(p.exists() for p in paths[8:]) and foreign.exists()


def test_a_folder_exactly_at_its_limit_is_aged(tmp_path: Path) -> None:
    # GE ages at totalUsedSize >= maxSize: a folder of exactly 1 MB under a 1 MB limit is aged.
    clock = Clock(1_000_000.0)
    cache = KernelCache(tmp_path, "AiogeSim", env={"ASCEND_MAX_OP_CACHE_SIZE": "1"}, clock=clock)
    paths = _fill(cache, [7200.0] * 9)
    view = cache.open_view_sync(force=False)
    last = cache.entry_path(_desc(8).key, view.generation)
    short = (1 << 20) - sum(p.stat().st_size for p in paths)  # pad the last entry up to exactly 1 MB
    last.unlink()
    cache.store_sync(_desc(8, pad=100_000 + short), view)
    os.utime(last, (clock.now - 7200.0, clock.now - 7200.0))
    assert sum(p.stat().st_size for p in paths) == 1 << 20
    report = cache.age_sync(estimate=1 << 20)
    assert report.bytes_before == 1 << 20 and report.removed and report.bytes_after <= (1 << 20) // 2
    assert report.skipped_reason != "under the limit"
    short_by_one = cache.age_sync(estimate=(1 << 20) - 1)  # one byte under: nothing to do
    assert short_by_one.skipped_reason == "under the limit" and not short_by_one.removed


def test_an_ini_of_other_sections_warns(tmp_path: Path) -> None:
    warned: list[str] = []
    _ini(tmp_path, "[op_cache]\nmax_op_cache_size=100\nremain_cache_size_ratio=20\n")
    lim = read_limits(tmp_path, {}, warn=lambda what, msg: warned.append(msg))
    assert lim.max_source == "default" and len(warned) == 1
    assert "[op_cache]" in warned[0] and "not [op_compiler_cache]" in warned[0] and "op_cache.ini" in warned[0]
    warned.clear()
    _ini(tmp_path, "max_op_cache_size=100\n")  # no header at all warns too
    read_limits(tmp_path, {}, warn=lambda what, msg: warned.append(msg))
    assert len(warned) == 1 and "not an ini file" in warned[0]
    warned.clear()
    _ini(tmp_path, "[op_compiler_cache]\n# max_op_cache_size=500\n")  # the template: silent
    read_limits(tmp_path, {}, warn=lambda what, msg: warned.append(msg))
    assert warned == []


def test_aging_never_removes_entries_used_in_the_last_30_minutes(tmp_path: Path) -> None:
    clock = Clock(1_000_000.0)
    cache = KernelCache(tmp_path, "AiogeSim", env={"ASCEND_MAX_OP_CACHE_SIZE": "1"}, clock=clock)
    paths = _fill(cache, [7200.0] * 2 + [1700.0] * 11)
    report = cache.age_sync()
    assert [p.exists() for p in paths] == [False, False] + [True] * 11
    assert report.bytes_after > (1 << 20)  # still over: compiles are never interrupted, recent entries stay
    clock.now += 200  # now they are all idle for 30 minutes
    cache.age_sync()
    assert sum(p.exists() for p in paths) == 5


def test_no_aging_with_minus_one_and_hits_do_not_touch(tmp_path: Path) -> None:
    clock = Clock(1_000_000.0)
    cache = KernelCache(tmp_path, "AiogeSim", env={"ASCEND_MAX_OP_CACHE_SIZE": "-1"}, clock=clock)
    paths = _fill(cache, [7200.0] * 12)
    used = [p.stat().st_mtime for p in paths]
    report = cache.age_sync()
    assert all(p.exists() for p in paths) and "aging is off" in report.skipped_reason
    view = cache.open_view_sync(force=False)
    assert not view.touch
    assert cache.load_sync(_desc(0).key, view).status == "hit"
    assert paths[0].stat().st_mtime == used[0]


def test_hits_refresh_access_times_with_the_cache_clock(tmp_path: Path) -> None:
    clock = Clock(1_000_000.0)
    cache = KernelCache(tmp_path, "AiogeSim", env={}, clock=clock)
    (path,) = _fill(cache, [7200.0])
    clock.now = 2_000_000.0
    view = cache.open_view_sync(force=False)
    assert view.touch and cache.load_sync(_desc(0).key, view).desc == _desc(0)
    assert path.stat().st_mtime == pytest.approx(2_000_000.0)  # the last use, recorded in the mtime


async def test_aging_runs_after_a_compile(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path, "AiogeSim", env={})
    _ini(cache.kernel_dir, "[op_compiler_cache]\nmax_op_cache_size=1\nremain_cache_size_ratio=50\n")
    paths = _fill(cache, [7200.0] * 12)
    cache.record_stats_sync(bytes_exact=sum(p.stat().st_size for p in paths))
    await _build(_opts(tmp_path) | {"aioge.tune_mode": "heuristic"})
    gone = [p for p in paths if not p.exists()]
    assert len(gone) >= 7 and len(_entries(tmp_path)) >= 4  # the graph's fresh kernels stay


# -- debug switches -----------------------------------------------------------------------------


async def test_op_debug_level_bypasses_the_cache(tmp_path: Path) -> None:
    await _build(_opts(tmp_path))
    before = _tree(tmp_path)
    model = await _build(_opts(tmp_path, op_debug_level="1"))
    assert model.stats.kernels_compiled == len(model.nodes) and model.stats.kernel_cache_hits == 0
    assert _tree(tmp_path) == before


async def test_op_debug_config_without_a_list_bypasses_the_cache(tmp_path: Path) -> None:
    cfg = tmp_path / "debug.cfg"
    cfg.write_text("op_debug_config = ccec_O0,oom\n")
    root = tmp_path / "cache"
    model = await _build(_opts(root, op_debug_config=str(cfg)))
    assert model.stats.kernels_compiled == len(model.nodes) and not root.exists()
    with pytest.raises(OptionError, match="op_debug_config"):
        await _build(_opts(root, op_debug_config=str(tmp_path / "missing.cfg")))


async def test_op_debug_list_recompiles_listed_ops_only(tmp_path: Path) -> None:
    cfg = tmp_path / "debug.cfg"
    cfg.write_text("# GE's op debug config\nop_debug_config = oom\nop_debug_list = Relu, opType::Tanh, no_such_node\n")
    opts = _opts(tmp_path / "cache", op_debug_config=str(cfg))
    first = await _build(opts)
    second = await _build(opts)
    listed = [n for n in second.nodes if n.op_type in ("Relu", "Tanh")]
    assert len(listed) == 2
    assert second.stats.kernels_compiled == len(listed)
    assert second.stats.kernel_cache_hits == len(second.nodes) - len(listed)
    assert first.stats.kernels_compiled == len(first.nodes)
    assert len(_entries(tmp_path / "cache")) == len(first.nodes) - len(listed)  # listed ops are not cached
    # By node name too.
    name = next(n.name for n in second.nodes if n.op_type == "MatMul")
    cfg.write_text(f"op_debug_list = {name}\n")
    third = await _build(opts)
    assert third.stats.kernels_compiled >= 1


# -- broken entries -----------------------------------------------------------------------------


async def test_corrupt_truncated_foreign_and_mismatched_entries_are_misses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = await _build(_opts(tmp_path))
    entries = _entries(tmp_path)
    assert len(entries) == len(first.nodes) == 5
    good = entries[0].read_bytes()
    entries[0].write_bytes(good[: len(good) // 2])  # truncated
    raw = bytearray(entries[1].read_bytes())
    raw[-3] ^= 0xFF
    entries[1].write_bytes(bytes(raw))  # a flipped bit: checksum mismatch
    entries[2].write_bytes(b"\x00garbage, not an aioge file")  # foreign
    other_key = entries[3].name.split(".")[0]
    desc = next(n.kernel for n in first.nodes if n.kernel.key != other_key)
    entries[3].write_bytes(make_envelope(ENTRY_KIND, pack(desc_to_plain(desc)), {"key": desc.key}))  # another key's entry
    with caplog.at_level(logging.WARNING, logger="aioge.cache.kernel_cache"):
        again = await _build(_opts(tmp_path))
    assert again.stats.kernels_compiled == 4 and again.stats.kernel_cache_hits == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4 and all("recompiling" in r.getMessage() for r in warnings)
    third = await _build(_opts(tmp_path))  # the bad entries were replaced by good ones
    assert third.stats.kernels_compiled == 0
    assert KernelCache(tmp_path, "AiogeSim").read_stats_sync()["invalid"] == 4


async def test_an_entry_that_is_not_a_legal_choice_is_recompiled(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = await _build(_opts(tmp_path))
    relu = next(n.kernel for n in first.nodes if n.op_type == "Relu")
    bogus = KernelDesc(relu.key, relu.op_type, relu.domain, relu.engine, relu.inputs, relu.outputs, "no_such_impl")
    cache = KernelCache(tmp_path, "AiogeSim")
    cache.store_sync(bogus, cache.open_view_sync(force=False))
    with caplog.at_level(logging.WARNING):
        again = await _build(_opts(tmp_path))
    assert (
        again.stats.kernels_compiled == 1 and again.node(next(n.name for n in first.nodes if n.op_type == "Relu")).kernel == relu
    )
    assert any("not a candidate" in r.getMessage() for r in caplog.records)


async def test_entries_of_another_version_are_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aioge.plan.io as io

    await _build(_opts(tmp_path))
    monkeypatch.setattr(io, "_versions", lambda: {"aioge": "0.0.1", "numpy": "1", "python": "2"})
    model = await _build(_opts(tmp_path))
    assert model.stats.kernels_compiled == len(model.nodes)


# -- tools --------------------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aioge", *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


async def test_cli_stats_prune_clear(tmp_path: Path) -> None:
    model = await _build(_opts(tmp_path))
    n = len(model.nodes)
    report = cache_report(tmp_path, env={"ASCEND_MAX_OP_CACHE_SIZE": "50"})
    assert report["socs"][0]["entries"] == n and report["socs"][0]["compiles"] == n
    assert report["limits"]["max_source"] == "env"  # the op_cache.ini the compile wrote sets nothing
    (tmp_path / "kernel_cache" / "op_cache.ini").write_text(
        "[op_compiler_cache]\nmax_op_cache_size=500\nremain_cache_size_ratio=50\n"
    )
    out = _cli("cache", "stats", "--dir", str(tmp_path))
    assert out.returncode == 0 and f"AiogeSim: {n} entries" in out.stdout and "500 MB (ini)" in out.stdout
    (tmp_path / "kernel_cache" / "op_cache.ini").unlink()
    out = _cli("cache", "stats", "--json", env={"ASCEND_CACHE_PATH": str(tmp_path), "ASCEND_MAX_OP_CACHE_SIZE": "50"})
    data = json.loads(out.stdout)["kernel"]
    assert data["limits"]["max_op_cache_size_mb"] == 50 and data["limits"]["max_source"] == "env"
    assert data["limits"]["ratio_source"] == "default"
    out = _cli("cache", "prune", "--dir", str(tmp_path))
    assert out.returncode == 0 and "removed 0 entries" in out.stdout
    foreign = _soc(tmp_path) / "notes.txt"
    foreign.write_text("mine")
    out = _cli("cache", "clear", "--dir", str(tmp_path), "--soc", "AiogeSim")
    assert out.returncode == 0 and not _entries(tmp_path)
    assert foreign.read_text() == "mine"  # never delete what aioge did not write
    assert sorted(p.name for p in _soc(tmp_path).iterdir()) == ["notes.txt", "stats.aios"]  # the counters stay
    again = await _build(_opts(tmp_path))
    assert again.stats.kernels_compiled == n


def test_prune_cli_ages_now(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path, "AiogeSim", env={})
    _ini(cache.kernel_dir, "[op_compiler_cache]\nmax_op_cache_size=1\nremain_cache_size_ratio=10\n")
    paths = _fill(cache, [7200.0] * 12)
    out = _cli("cache", "prune", "--dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert sum(p.exists() for p in paths) == 1 and "removed 11 entries" in out.stdout


def test_script_is_self_contained() -> None:
    # The subprocess script above must not depend on this file's helpers.
    assert "import aioge" in textwrap.dedent(_SCRIPT)
