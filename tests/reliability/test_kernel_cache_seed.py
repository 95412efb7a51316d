"""Kernel-cache behaviour a GE user relies on (issue 16, seed behaviour bugs).

- The ``op_cache.ini`` a compile generates never overrides ``ASCEND_MAX_OP_CACHE_SIZE`` /
  ``ASCEND_REMAIN_CACHE_SIZE_RATIO``: it holds the keys commented out.
- An ``op_cache.ini`` directly in ``ge.op_compiler_cache_dir`` (where GE's docs put it) is
  read; ``kernel_cache/op_cache.ini`` (where GE's code reads it) wins, with a warning when
  both set different values.
- ``OP_DEBUG_LIST`` and ``OpType::`` as GE's docs spell them are accepted; anything the
  debug config does not know is one warning.
- ``kernel_cache_hits`` counts only what the cache served; a kernel repeated inside a graph is
  ``kernel_reuse_in_compile``; hits are 0 in ``disable`` and ``force``.
- An invalid env limit is one warning naming the variable, its value and what is allowed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache.kernel_cache import KernelCache, cache_report
from aioge.cache.kernel_limits import read_limits
from aioge.compiler.ops import read_debug_config

pytestmark = pytest.mark.anyio

W = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
X = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
UNFUSED = "ActivationFusionPass:off;ElementwiseFusionPass:off;MatMulAddFusionPass:off"
ENV = {"ASCEND_MAX_OP_CACHE_SIZE": "3", "ASCEND_REMAIN_CACHE_SIZE_RATIO": "20"}


def _graph() -> aioge.Graph:
    g = aioge.Graph("seed")
    x = g.input("x", (4, 8), "float32")
    g.output(ops.tanh(ops.relu(ops.apply("MatMul", [x, g.constant(W, "w")])[0]) + 1.0), names=["y"])
    return g


def _repeated() -> aioge.Graph:
    """Three Relu nodes on one shape: one kernel key, three nodes."""
    g = aioge.Graph("repeated")
    x = g.input("x", (4, 8), "float32")
    g.output(ops.relu(ops.relu(ops.relu(x) - 0.5) - 0.25), names=["y"])
    return g


def _opts(root: Path, **extra: str) -> dict[str, str]:
    return {"ge.op_compiler_cache_dir": str(root), "aioge.tune_mode": "heuristic", "ge.optimizationSwitch": UNFUSED, **extra}


async def _build(options: dict[str, str], graph: aioge.Graph | None = None) -> aioge.CompiledModel:
    async with aioge.Session(options) as s:
        await s.add_graph(1, graph or _graph())
        await s.run_graph(1, {"x": X})
        return s.compiled(1)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]


# -- the generated op_cache.ini and the env --------------------------------------------------


async def test_env_limits_still_apply_after_compiles_write_op_cache_ini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    await _build(_opts(tmp_path))
    await _build(_opts(tmp_path))
    ini = tmp_path / "kernel_cache" / "op_cache.ini"
    assert ini.is_file() and "[op_compiler_cache]" in ini.read_text()  # still generated, as in GE: a template
    limits = KernelCache(tmp_path, "AiogeSim", env=ENV).limits()
    assert (limits.max_mb, limits.ratio, limits.max_source, limits.ratio_source) == (3, 20, "env", "env")
    assert cache_report(tmp_path, env=ENV)["limits"]["max_op_cache_size_mb"] == 3
    limits = KernelCache(tmp_path, "AiogeSim", env={}).limits()  # without the env: the defaults, not the file
    assert (limits.max_mb, limits.ratio, limits.max_source) == (500, 50, "default")
    # Uncommenting the values sets them, above the env, as GE documents.
    ini.write_text(
        ini.read_text()
        .replace("# max_op_cache_size=500", "max_op_cache_size=40")
        .replace("# remain_cache_size_ratio=50", "remain_cache_size_ratio=60")
    )
    limits = KernelCache(tmp_path, "AiogeSim", env=ENV).limits()
    assert (limits.max_mb, limits.ratio, limits.max_source, limits.ini) == (40, 60, "ini", str(ini))


def test_an_ini_generated_by_an_older_aioge_does_not_override_the_env(tmp_path: Path) -> None:
    (tmp_path / "kernel_cache").mkdir()
    (tmp_path / "kernel_cache" / "op_cache.ini").write_text(
        "# aioge kernel cache limits (GE's format). max_op_cache_size: MB, -1 = no aging;\n"
        "# remain_cache_size_ratio: percent of the maximum left after aging (1..100).\n"
        "[op_compiler_cache]\nmax_op_cache_size=500\nremain_cache_size_ratio=50\n"
    )
    limits = read_limits(tmp_path / "kernel_cache", ENV)
    assert (limits.max_mb, limits.ratio, limits.max_source) == (3, 20, "env")


async def test_aging_follows_the_env_limit_after_the_first_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_MAX_OP_CACHE_SIZE", "1")
    await _build(_opts(tmp_path))
    cache = KernelCache(tmp_path, "AiogeSim")
    cache.record_stats_sync(written=2 << 20)  # the recorded size says 2 MB: over a 1 MB limit
    report = cache.age_sync(estimate=cache.read_stats_sync()["bytes_estimate"])
    assert report.limits.max_mb == 1 and report.limits.max_source == "env"
    assert report.scanned  # 1 MB from the env, not the 500 MB of a generated file


# -- op_cache.ini where GE's docs put it --------------------------------------------------------


def _write_ini(path: Path, max_mb: int, ratio: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[op_compiler_cache]\nmax_op_cache_size={max_mb}\nremain_cache_size_ratio={ratio}\n")


async def test_op_cache_ini_in_the_cache_dir_itself_is_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write_ini(tmp_path / "op_cache.ini", 7, 30)
    await _build(_opts(tmp_path))  # generates kernel_cache/op_cache.ini: a template that sets nothing
    limits = KernelCache(tmp_path, "AiogeSim", env=ENV).limits()
    assert (limits.max_mb, limits.ratio, limits.max_source, limits.ini) == (7, 30, "ini", str(tmp_path / "op_cache.ini"))
    report = cache_report(tmp_path, env=ENV)["limits"]
    assert (report["max_op_cache_size_mb"], report["ini"]) == (7, str(tmp_path / "op_cache.ini"))
    # Both set: kernel_cache/op_cache.ini (where GE's code reads it) wins, and the other is named.
    _write_ini(tmp_path / "kernel_cache" / "op_cache.ini", 9, 40)
    cache = KernelCache(tmp_path, "AiogeSim", env=ENV)
    with caplog.at_level(logging.WARNING):
        limits = cache.limits()
        cache.limits()
    assert (limits.max_mb, limits.ratio) == (9, 40)
    (w,) = _warnings(caplog)
    assert str(tmp_path / "op_cache.ini") in w and "is ignored" in w and str(tmp_path / "kernel_cache" / "op_cache.ini") in w
    caplog.clear()
    _write_ini(tmp_path / "op_cache.ini", 9, 40)  # the same values: nothing to say
    with caplog.at_level(logging.WARNING):
        assert KernelCache(tmp_path, "AiogeSim", env=ENV).limits().max_mb == 9
    assert not _warnings(caplog)


# -- OP_DEBUG_LIST as GE documents it -----------------------------------------------------------


async def test_op_debug_list_spelled_as_in_ge_docs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = tmp_path / "test0.cfg"
    cfg.write_text("OP_DEBUG_CONFIG = ccec_g,oom\nOP_DEBUG_LIST = Relu,OpType::Tanh\n")
    opts = _opts(tmp_path / "cache", op_debug_config=str(cfg))
    with caplog.at_level(logging.WARNING):
        first = await _build(opts)
        second = await _build(opts)
    assert not _warnings(caplog)
    listed = [n for n in second.nodes if n.op_type in ("Relu", "Tanh")]
    assert len(listed) == 2 and len(second.nodes) > 2
    assert first.stats.kernels_compiled == len(first.nodes)
    assert second.stats.kernels_compiled == len(listed)  # the cache serves every op not listed
    assert second.stats.kernel_cache_hits == len(second.nodes) - len(listed)
    debug = read_debug_config(str(cfg))
    assert debug.names == frozenset({"Relu"}) and debug.op_types == frozenset({"Tanh"})


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("op_debug_lst = Relu\n", "op_debug_lst"),
        ("op_debug_list = Relu, Type::Tanh\n", "Type::Tanh"),
        ("op_debug_config = oom, ccec_x\nop_debug_list = Relu\n", "ccec_x"),
        ("just some words\nop_debug_list = Relu\n", "just some words"),
    ],
)
def test_unrecognised_debug_config_lines_warn(body: str, named: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = tmp_path / "dbg.cfg"
    cfg.write_text(body)
    with caplog.at_level(logging.WARNING):
        read_debug_config(str(cfg))
    (w,) = _warnings(caplog)
    assert named in w and str(cfg) in w and "ignored" in w


# -- hits, and reuse inside one compile ------------------------------------------------------------


def _reuse(model: aioge.CompiledModel) -> tuple[int, int]:
    """(unique kernel keys, nodes that share an earlier node's key) of a compiled model."""
    unique = len({n.kernel.key for n in model.nodes})
    return unique, len(model.nodes) - unique


@pytest.mark.parametrize("mode", ["disable", "force"])
async def test_kernels_repeated_in_a_graph_are_not_cache_hits(mode: str, tmp_path: Path) -> None:
    model = await _build(_opts(tmp_path, **{"ge.op_compiler_cache_mode": mode}), _repeated())
    relus = [n for n in model.nodes if n.op_type == "Relu"]
    assert len(relus) == 3 and len({n.kernel.key for n in relus}) == 1
    unique, reused = _reuse(model)
    assert reused >= 2
    stats = model.stats
    assert (stats.kernels_compiled, stats.kernel_cache_hits, stats.kernel_reuse_in_compile) == (unique, 0, reused)
    summary = model.summary()["stats"]
    assert (summary["kernel_cache_hits"], summary["kernel_reuse_in_compile"]) == (0, reused)


async def test_enable_counts_disk_hits_and_reuse_apart(tmp_path: Path) -> None:
    cold = await _build(_opts(tmp_path), _repeated())
    warm = await _build(_opts(tmp_path), _repeated())
    unique, reused = _reuse(cold)
    assert (cold.stats.kernels_compiled, cold.stats.kernel_cache_hits, cold.stats.kernel_reuse_in_compile) == (unique, 0, reused)
    assert (warm.stats.kernels_compiled, warm.stats.kernel_cache_hits, warm.stats.kernel_reuse_in_compile) == (0, unique, reused)
    stats = KernelCache(tmp_path, "AiogeSim").read_stats_sync()
    assert (stats["hits"], stats["compiles"]) == (unique, unique)  # the recorded counters agree


# -- invalid env limits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("ASCEND_MAX_OP_CACHE_SIZE", "abc", "-1 for no aging"),
        ("ASCEND_MAX_OP_CACHE_SIZE", "-5", "-1 for no aging"),
        ("ASCEND_MAX_OP_CACHE_SIZE", "0", "an integer from 1"),
        ("ASCEND_REMAIN_CACHE_SIZE_RATIO", "0", "1 to 100"),
        ("ASCEND_REMAIN_CACHE_SIZE_RATIO", "101", "1 to 100"),
        ("ASCEND_REMAIN_CACHE_SIZE_RATIO", "50.5", "1 to 100"),
    ],
)
def test_an_invalid_env_limit_warns_once(
    name: str, value: str, allowed: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = KernelCache(tmp_path, "AiogeSim", env={name: value})
    with caplog.at_level(logging.WARNING):
        limits = cache.limits()
        cache.limits()  # each compile reads the limits: still one warning per session
    assert (limits.max_mb, limits.ratio, limits.max_source, limits.ratio_source) == (500, 50, "default", "default")
    (w,) = _warnings(caplog)
    assert name in w and repr(value) in w and allowed in w, w


async def test_an_invalid_env_limit_warns_in_a_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ASCEND_MAX_OP_CACHE_SIZE", "lots")
    with caplog.at_level(logging.WARNING):
        await _build(_opts(tmp_path))
    assert any("ASCEND_MAX_OP_CACHE_SIZE='lots'" in w for w in _warnings(caplog)), _warnings(caplog)
