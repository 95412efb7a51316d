"""Every cached format fed truncated, bit-flipped and hostile content.

Files: a kernel cache entry, ``<key>.idx``, ``<key>_<ts>.om``, ``<key>_<ts>.rdcpkt``, a
``weight/`` file and ``op_cache.ini``. Hostile content is wrapped in a *valid* envelope
(right magic, versions and sha256: a checksum stops accidents, not an attacker): msgpack
headers claiming 2^31 items or bytes, wrong types, 10^5 nested arrays, 100 nested arrays,
a million empty lists. Through a session each is a miss with one warning and the right
result; through the CLI a clear error and exit status 1; decoding stays within a bound set
by the input's size (tracemalloc). Mutations per file scale with ``AIOGE_RELIABILITY_SCALE``.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import struct
import tracemalloc
from pathlib import Path

import anyio
import msgpack
import numpy as np
import pytest

import aioge
from aioge import cli, ops
from aioge.errors import CacheError
from aioge.plan import io

SCALE = float(os.environ.get("AIOGE_RELIABILITY_SCALE", "1"))
FLIPS = max(4, int(10 * SCALE))
W = (np.arange(64, dtype=np.float32).reshape(8, 8) - 32) / 64
X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
REF = np.maximum(np.tanh(X @ W) + 1 / (1 + np.exp(-X)) * 0.5, 0)
TRIED: dict[str, int] = {}


def _graph() -> aioge.Graph:
    g = aioge.Graph("fuzzed")
    x = g.input("x", (4, 8))
    h = ops.tanh(ops.einsum(x, g.constant(W, "w"), equation="ni,ij->nj"))
    g.output(ops.relu(h + ops.sigmoid(x) * g.variable("v", np.full((8,), 0.5, np.float32))), names=["y"])
    return g


def _run(root: Path, graph_cache: bool) -> tuple[np.ndarray, object]:
    opts = {"ge.op_compiler_cache_dir": str(root / "kc"), "aioge.tune_mode": "heuristic"}
    if graph_cache:
        opts["ge.graph_compiler_cache_dir"] = str(root / "gc")

    async def go() -> tuple[np.ndarray, object]:
        async with aioge.Session(opts) as s:
            await s.add_graph(1, _graph(), {"ge.graph_key": "fz", "ge.externalWeight": "1"} if graph_cache else {})
            return (await s.run_graph(1, {"x": X}))["y"], s.compiled(1)

    return anyio.run(go)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    (root / "gc").mkdir(mode=0o700)
    _run(root, graph_cache=True)  # .idx, .om, .rdcpkt, weight/, and kernels through the kernel cache
    _run(root, graph_cache=False)
    return root


def _files(root: Path) -> dict[str, Path]:
    kernels = sorted((root / "kc" / "kernel_cache" / "AiogeSim").glob("*.aiok"))
    gc = root / "gc"
    return {
        "kernel entry": kernels[0],
        ".idx": gc / "fz.idx",
        ".om": next(gc.glob("fz_*.om")),
        ".rdcpkt": next(gc.glob("fz_*.rdcpkt")),
        "weight": next((gc / "weight").iterdir()),
        "op_cache.ini": root / "kc" / "kernel_cache" / "op_cache.ini",
    }


def _hostile_payloads() -> dict[str, bytes]:
    return {
        "array32 claims 2^31": b"\xdd" + struct.pack(">I", 2**31) + b"\xc0" * 64,
        "map32 claims 2^31": b"\xdf" + struct.pack(">I", 2**31) + b"\xc0" * 64,
        "bin32 claims 2^31": b"\xc6" + struct.pack(">I", 2**31) + b"x" * 64,
        "str32 claims 2^31": b"\xdb" + struct.pack(">I", 2**31) + b"x" * 64,
        "ext32 claims 2^31": b"\xc9" + struct.pack(">I", 2**31) + b"\x01" + b"x" * 64,
        "array ext claims 2^31 elements": msgpack.packb(msgpack.ExtType(1, msgpack.packb(["float32", [2**31], b""]))),
        "nested 10^5": b"\x91" * 100_000 + b"\xc0",
        "nested 100": b"\x91" * 100 + b"\xc0",
        "a million empty lists": b"\xdd" + struct.pack(">I", 1 << 20) + b"\x90" * (1 << 20),
        "wrong type int": msgpack.packb(42),
        "wrong type str": msgpack.packb("cache_file_list"),
        "wrong type list": msgpack.packb([1, 2, 3]),
        "wrong field types": msgpack.packb({"cache_file_list": [{"cache_file_name": 3}], "key": 1, "params": [], "before": 1}),
        "unknown ext": msgpack.packb(msgpack.ExtType(9, b"boom")),
        "trailing bytes": msgpack.packb({}) + b"\x00",
    }


def _rewrap(data: bytes, kind: str, payload: bytes) -> bytes:
    """A valid envelope of ``kind`` (header copied: key, versions) around a hostile payload."""
    header, _ = io.open_envelope(data, kind, check_versions=False)
    extra = {k: v for k, v in header.items() if k not in ("format", "kind", "versions", "size", "sha256")}
    return io.make_envelope(kind, payload, extra)


KIND = {"kernel entry": "aioge-kernel", ".idx": "idx", ".om": "om", ".rdcpkt": "rdcpkt"}


def _mutations(name: str, data: bytes) -> list[tuple[str, bytes]]:
    rng = random.Random(len(data) * 31 + len(name))
    out = [(f"truncated to {n}", data[:n]) for n in sorted({0, 1, 7, 12, len(data) // 3, len(data) // 2, len(data) - 1})]
    for i in range(FLIPS):
        b = bytearray(data)
        for _ in range(1 + i % 3):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        out.append((f"bit flips #{i}", bytes(b)))
    out.append(("random bytes", rng.randbytes(len(data))))
    if name in KIND:
        out += [(f"valid envelope, {k}", _rewrap(data, KIND[name], p)) for k, p in _hostile_payloads().items()]
    if name == ".om":  # the .om frames its msgpack: a declared metadata length of 2^62
        header, framed = io.open_envelope(data, "om")
        out.append(
            (
                "valid envelope, meta length 2^62",
                io.make_envelope("om", struct.pack("<Q", 2**62) + framed[8:], {"graph": header["graph"]}),
            )
        )
    if name == "op_cache.ini":
        out += [
            ("not an ini", b"[[[\n=\n"),
            ("bad values", b"[op_compiler_cache]\nmax_op_cache_size=-7\nremain_cache_size_ratio=x\n"),
            ("huge values", b"[op_compiler_cache]\nmax_op_cache_size=" + b"9" * 5000 + b"\nremain_cache_size_ratio=50\n"),
            ("binary", bytes(range(256)) * 4),
        ]
    if name == "weight":
        out.append(("wrong size", data + b"\0" * 4))
    return out


def _aioge_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]


_FILE_TYPES = ["kernel entry", ".idx", ".om", ".rdcpkt", "weight", "op_cache.ini"]


@pytest.mark.parametrize("name", _FILE_TYPES)
def test_session_recompiles_with_one_warning(name: str, pristine: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = _files(pristine)[name].read_bytes()
    muts = _mutations(name, data)
    silent = harmless = 0
    for i, (what, bad) in enumerate(muts):
        root = tmp_path / str(i)
        shutil.copytree(pristine, root, symlinks=True)
        target = _files(root)[name]
        target.write_bytes(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            y, model = _run(root, graph_cache=name not in ("kernel entry", "op_cache.ini"))
        np.testing.assert_allclose(y, REF, rtol=1e-5, atol=1e-6, err_msg=f"{name}, {what}")
        warnings = _aioge_warnings(caplog)
        if name == "op_cache.ini":  # limits are data: a flip that leaves it a valid ini is no warning
            silent += not warnings
            assert all("op_cache.ini" in w for w in warnings), (what, warnings)
            assert len(set(warnings)) <= 1, (what, warnings)
            continue
        # A flip the checks cannot see (an unchecked header byte: the payload's sha256 still holds)
        # may hit; everything else is a miss with exactly one warning that names the file.
        hit = model.stats.kernels_compiled == 0 if name == "kernel entry" else model.stats.graph_cache_hit
        if hit and not warnings:
            harmless += 1
        else:
            assert len(warnings) == 1, (name, what, warnings)
            assert target.name in warnings[0] or (name == ".idx" and "index" in warnings[0]), (what, warnings)
        shutil.rmtree(root)
    TRIED[name] = len(muts)
    assert harmless <= max(3, len(muts) // 5), harmless
    print(
        f"\n{name}: {len(muts)} mutations, each a miss with one warning and the right result ({harmless} harmless hits)"
        + (f" ({silent} left the ini valid)" if name == "op_cache.ini" else "")
    )


@pytest.mark.parametrize("name", [".idx", ".om"])
def test_cli_gives_a_clear_error_and_exit_1(
    name: str, pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _files(pristine)[name].read_bytes()
    n = 0
    for what, bad in _mutations(name, data):
        path = tmp_path / f"m{n}{name}"
        path.write_bytes(bad)
        argv = ["cache", "show-index", str(path)] if name == ".idx" else ["info", str(path)]
        status = cli.main(argv)
        err = capsys.readouterr().err
        if status == 0 and name == ".idx":
            continue  # a hostile index that decodes (e.g. wrong field types) is shown as it is: it is data
        assert status == 1, (what, err)
        assert err.startswith("aioge: error: ") and str(path) in err and "Traceback" not in err, (what, err)
        n += 1
    assert n >= len(_mutations(name, data)) - 3


@pytest.mark.parametrize("what", sorted(_hostile_payloads()))
def test_decoding_stays_within_a_bound_set_by_the_size(what: str) -> None:
    payload = _hostile_payloads()[what]
    tracemalloc.start()
    try:
        try:
            io.unpack(payload)
            decoded = True
        except CacheError:
            decoded = False
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = 25 * len(payload) + (1 << 20)
    assert peak <= bound, f"{what}: decoding {len(payload)} bytes allocated {peak}"
    if "claims" in what or "nested" in what or "million" in what or what in ("unknown ext", "trailing bytes"):
        assert not decoded, what


def test_a_valid_deeply_nested_file_is_refused_before_any_reader_recurses() -> None:
    obj: list = []
    for _ in range(io.MAX_DEPTH):
        obj = [obj]
    with pytest.raises(CacheError, match=f"nested more than {io.MAX_DEPTH} deep"):
        io.unpack(msgpack.packb(obj))
    assert io.unpack(msgpack.packb(obj[0])) == obj[0]  # one level less is fine


def test_every_file_type_was_fuzzed() -> None:
    """Runs last in this module: every cached file type went through its mutations, none too few."""
    if not TRIED:
        pytest.skip("run with the fuzz tests")
    assert sorted(TRIED) == sorted(_FILE_TYPES), TRIED
    assert all(n >= FLIPS for n in TRIED.values()), TRIED


def test_small_data_decodes_as_the_per_container_path_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Data of at most ``_SMALL`` bytes skips the per-container hooks (the budget
    cannot run out there): every payload decodes to the same object, or fails, either way."""
    good = [
        msgpack.packb({"rid": 7, "seconds": 0.5, "arrays": [["y", "float32", [1, 10]]], "blobs": []}),
        io.pack({"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": [None, True, 1.5, "s", b"x"]}),
    ]
    payloads = [p for p in [*good, *_hostile_payloads().values()] if len(p) <= io._SMALL]

    def outcome(p: bytes) -> object:
        try:
            obj = io.unpack(p)
        except CacheError:
            return CacheError
        return msgpack.packb(obj, default=lambda a: [a.dtype.str, a.shape, a.tobytes()])

    fast = [outcome(p) for p in payloads]
    monkeypatch.setattr(io, "_SMALL", -1)  # every payload through the hooks
    assert fast == [outcome(p) for p in payloads]
    assert fast[0] != CacheError and fast[1] != CacheError and fast.count(CacheError) >= 8
