"""A graph-cache entry keeps the weights its model's first run packed (``<stem>.packs``), and a
later process reads them instead of packing: bit-equal results; a corrupt, truncated, foreign,
untrusted or other-ISA file is refused with a warning and the weights packed (and stored) again."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache import packs
from aioge.cache.graph_tools import clear_graph_cache, prune_graph_cache
from aioge.kernels import conv_algos, matmul_algos, native
from aioge.plan import io

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(native.gemm_tile() is None, reason="no compiled kernels")]

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(11)
CW = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
FW = RNG.standard_normal((8, 40)).astype(np.float32)
X = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
CHOSEN = {"Conv": "conv_direct_native", "FusedConv": "conv_direct_native", "Gemm": "gemm_native", "FusedGemm": "gemm_native"}


def graph() -> aioge.Graph:
    g = aioge.Graph("packed")
    x = g.input("x", X.shape, "float32")
    h = ops.relu(ops.conv2d(x, g.constant(CW, "cw"), g.constant(np.zeros(8, np.float32), "cb"), pads=(1, 1, 1, 1)))
    h = ops.flatten(ops.global_average_pool(h), axis=1)
    g.output(ops.gemm(h, g.constant(FW, "fw"), g.constant(np.full(40, 0.5, np.float32), "fb")), names=["y"])
    return g


def reference() -> np.ndarray:
    from aioge.examples.cnn import _conv_ref

    return np.maximum(_conv_ref(X, CW, np.zeros(8, np.float32), 1), 0).mean(axis=(2, 3)) @ FW + 0.5


@pytest.fixture
def packing_kernels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kernels that pack their weight, whatever tuning finds; the names of the weights packed."""
    from aioge.compiler import tuning

    select = tuning.select_kernel

    def choose(schema, *args, **kwargs):
        impl = CHOSEN.get(schema.name)
        return tuning.Choice(impl, {}, False) if impl else select(schema, *args, **kwargs)

    monkeypatch.setattr(tuning, "select_kernel", choose)
    packed: list[str] = []
    for module, name in ((matmul_algos, "pack_columns"), (conv_algos, "pack_rows")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name: packed.append(_name) or _real(*a))
    return packed


async def run(cache: Path) -> tuple[np.ndarray, bool]:
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(cache), "aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, graph(), {"ge.graph_key": "pk"})
        out = (await s.run_graph(1, {"x": X}))["y"]
        hit = s.compiled(1).stats.graph_cache_hit
    packs.wait()
    return out, hit


def packs_file(cache: Path) -> Path:
    (om,) = [n for n in os.listdir(cache) if n.endswith(".om")]
    return Path(packs.path_of(str(cache), om))


def table(path: Path) -> list[list]:
    header = io.envelope_header(path.read_bytes()[: io.MAX_HEADER_BYTES])
    assert header["kind"] == "packs" and header["tier"] == native.tier()
    return header["packs"]


CHILD = """
import json, sys
sys.path.insert(0, sys.argv[2])
import anyio
from tests.cache import test_graph_cache_packs as t
from aioge.kernels import conv_algos, matmul_algos
packed = []
for m, n in ((matmul_algos, "pack_columns"), (conv_algos, "pack_rows")):
    setattr(m, n, lambda *a, _r=getattr(m, n), _n=n: packed.append(_n) or _r(*a))
out, hit = anyio.run(t.run, t.Path(sys.argv[1]))
print(json.dumps({"hit": hit, "packed": packed, "y": out.tobytes().hex()}))
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a child process: once is enough
async def test_a_second_process_reads_the_packs_the_first_run_stored_bit_equal(tmp_path, packing_kernels) -> None:
    first, hit = await run(tmp_path)
    assert not hit and sorted(packing_kernels) == ["pack_columns", "pack_rows"]
    np.testing.assert_allclose(first, reference(), rtol=1e-4, atol=1e-4)
    stored = table(packs_file(tmp_path))
    tile = native.gemm_tile()
    assert sorted((name.split("/")[1], layout) for name, layout, *_ in stored) == [
        ("cw", f"rows{tile[0]}"),
        ("fw", f"cols{tile[1]}"),
    ]
    proc = subprocess.run([sys.executable, "-P", "-c", CHILD, str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert child["hit"] and child["packed"] == []  # both weights read from the entry, none packed
    assert bytes.fromhex(child["y"]) == first.tobytes()
    path = packs_file(tmp_path)
    assert prune_graph_cache(tmp_path, now=time.time() + 86400) == [] and path.exists()  # the entry's, kept
    clear_graph_cache(tmp_path)
    assert not path.exists()


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    header_end = len(io.MAGIC) + 4 + int.from_bytes(data[len(io.MAGIC) : len(io.MAGIC) + 4], "little")
    data[-(-header_end // 64) * 64 + 4] ^= 0x40  # a byte of the first pack
    path.write_bytes(bytes(data))


def _other_isa(path: Path) -> None:
    header = io.envelope_header(path.read_bytes()[: io.MAX_HEADER_BYTES])
    made_for = {k: header[k] for k in ("om_sha256", "tile", "code")} | {
        "tier": "x86-64-v4" if native.tier() != "x86-64-v4" else "x86-64"
    }
    stored = packs._load(str(path), {k: header[k] for k in ("om_sha256", "tier", "tile", "code")}, False)
    packs._save(str(path), made_for, {k: a for k, (a, _) in stored.items()}, 0o600)


TAMPER = {
    "corrupt": (_corrupt, "does not match its checksum"),
    "truncated": (lambda p: os.truncate(p, p.stat().st_size - 200), "truncated"),
    "foreign": (lambda p: p.write_bytes(b"not a packs file"), "bad magic"),
    "untrusted": (lambda p: os.chmod(p, 0o646), "not trusted"),
    "other ISA": (_other_isa, "made for another tier"),
}


@pytest.mark.parametrize("how", list(TAMPER))
async def test_a_bad_packs_file_is_refused_and_the_weights_packed_again(tmp_path, packing_kernels, caplog, how: str) -> None:
    first, _ = await run(tmp_path)
    path = packs_file(tmp_path)
    tamper, why = TAMPER[how]
    tamper(path)
    packing_kernels.clear()
    with caplog.at_level(logging.WARNING):
        again, hit = await run(tmp_path)
    assert hit and again.tobytes() == first.tobytes()
    assert any(why in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING), caplog.text
    assert packing_kernels  # packed again (corrupt: the one pack that failed its check)
    # stored again, whole (an untrusted one replaced by one of this user's): the next start maps them
    assert (
        len(table(path)) == 2
        and len(packs._load(str(path), packs.made_for(table_sha(tmp_path), native.tier(), native.gemm_tile()), False)) == 2
    )
    packing_kernels.clear()
    third, _ = await run(tmp_path)
    assert third.tobytes() == first.tobytes() and packing_kernels == []


def table_sha(cache: Path) -> str:
    return io.envelope_header((cache / [n for n in os.listdir(cache) if n.endswith(".om")][0]).read_bytes())["sha256"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_packs_file_changed_under_a_loaded_model_does_not_reach_it(tmp_path, packing_kernels) -> None:
    """The packs are read into memory of the process's own, not mapped from the file: a file
    rewritten in place (other numbers, same size) or cut short after the load changes nothing
    (mapped, the first would change the weights after their check, the second end in SIGBUS)."""
    first, _ = await run(tmp_path)
    path = packs_file(tmp_path)
    data = path.read_bytes()
    start = -(-(len(io.MAGIC) + 4 + int.from_bytes(data[len(io.MAGIC) : len(io.MAGIC) + 4], "little")) // 64) * 64
    packing_kernels.clear()
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path), "aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, graph(), {"ge.graph_key": "pk"})
        assert (await s.run_graph(1, {"x": X}))["y"].tobytes() == first.tobytes()
        assert s.compiled(1).stats.graph_cache_hit and packing_kernels == []  # the stored packs are in use
        with open(path, "r+b") as f:  # in place: same inode, same size, other numbers in every pack
            f.seek(start)
            f.write(b"\x3f" * (len(data) - start))
        assert (await s.run_graph(1, {"x": X}))["y"].tobytes() == first.tobytes()
        os.truncate(path, 0)
        assert (await s.run_graph(1, {"x": X}))["y"].tobytes() == first.tobytes()
    packs.wait()


async def test_the_packs_read_begun_beside_the_om_serves_only_a_hit(tmp_path, packing_kernels, monkeypatch, caplog) -> None:
    """A lookup reads a matching entry's packs on a thread of its own while it decodes the
    ``.om`` (``packs.load_soon``). When the ``.om`` then fails its checks (changed on disk after
    the save), the packs read for it are dropped: a warning, a recompile, the weights packed
    again into a new entry; and that new entry's packs serve the next start."""
    first, _ = await run(tmp_path)
    begun: list[tuple[str, str]] = []
    real = packs.load_soon

    def spy(path: str, *args: object) -> object:
        fut = real(path, *args)  # type: ignore[arg-type]
        fut.add_done_callback(lambda f: begun.append((os.path.basename(path), packs._reads._thread_name_prefix)))
        return fut

    monkeypatch.setattr(packs, "load_soon", spy)
    (om,) = [n for n in os.listdir(tmp_path) if n.endswith(".om")]
    data = bytearray((tmp_path / om).read_bytes())
    data[-10] ^= 0x01
    (tmp_path / om).write_bytes(bytes(data))
    packing_kernels.clear()
    with caplog.at_level(logging.WARNING):
        again, hit = await run(tmp_path)
    assert not hit and again.tobytes() == first.tobytes() and sorted(packing_kernels) == ["pack_columns", "pack_rows"]
    assert begun == [(om[: -len(".om")] + ".packs", "aioge-packs-read")] and "recompiling" in caplog.text
    packing_kernels.clear()
    third, hit = await run(tmp_path)
    assert hit and third.tobytes() == first.tobytes() and packing_kernels == [] and len(begun) == 2
