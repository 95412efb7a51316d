"""plan.io: atomic writes, bounded reads, envelopes and the safe codec."""

from __future__ import annotations

import os

import numpy as np
import pytest

from aioge.errors import CacheError
from aioge.plan import io

pytestmark = pytest.mark.anyio


def test_pack_roundtrip_with_arrays() -> None:
    obj = {"a": [1, 2.5, "x", None, b"raw"], "w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([True, False])}
    back = io.unpack(io.pack(obj))
    np.testing.assert_array_equal(back["w"], obj["w"])
    assert back["w"].dtype == np.float32 and back["b"].dtype == bool and back["a"] == obj["a"]


def test_unpack_rejects_hostile_arrays() -> None:
    import msgpack

    bad_size = msgpack.ExtType(1, msgpack.packb(["float32", [1000000], b"1234"], use_bin_type=True))
    with pytest.raises(CacheError, match="needs 4000000 bytes"):
        io.unpack(msgpack.packb(bad_size))
    bad_dtype = msgpack.ExtType(1, msgpack.packb(["object", [1], b"x"], use_bin_type=True))
    with pytest.raises(CacheError, match="not allowed"):
        io.unpack(msgpack.packb(bad_dtype))
    with pytest.raises(CacheError, match="unknown msgpack extension"):
        io.unpack(msgpack.packb(msgpack.ExtType(7, b"")))
    deep = b"\x91" * 100000 + b"\xc0"  # 100k nested one-element arrays
    with pytest.raises(CacheError):
        io.unpack(deep)
    huge_len = b"\xdb\xff\xff\xff\xff"  # str32 declaring 4 GiB, with no bytes behind it
    with pytest.raises(CacheError):
        io.unpack(huge_len)


def test_envelope_detects_every_kind_of_damage() -> None:
    env = io.make_envelope("kernel", b"payload-bytes")
    header, payload = io.open_envelope(env, "kernel")
    assert payload == b"payload-bytes" and header["kind"] == "kernel"
    with pytest.raises(CacheError, match="bad magic"):
        io.open_envelope(b"garbage" * 10, "kernel")
    with pytest.raises(CacheError, match="truncated"):
        io.open_envelope(env[:-3], "kernel")
    flipped = bytearray(env)
    flipped[-2] ^= 0x40
    with pytest.raises(CacheError, match="checksum"):
        io.open_envelope(bytes(flipped), "kernel")
    with pytest.raises(CacheError, match="'kernel' file where a 'om' file"):
        io.open_envelope(env, "om")


def test_envelope_from_other_versions_is_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    env = io.make_envelope("kernel", b"x")
    monkeypatch.setattr(io, "_versions", lambda: {"aioge": "9.9", "numpy": "0", "python": "0"})
    with pytest.raises(CacheError, match="made under"):
        io.open_envelope(env, "kernel")


async def test_atomic_write_and_bounded_read(tmp_path) -> None:
    path = tmp_path / "f.bin"
    await io.write_atomic(path, b"hello")
    assert await io.read_bytes(path) == b"hello"
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)
    await io.write_atomic(path, b"world!")
    assert path.read_bytes() == b"world!"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # no temp files left
    with pytest.raises(CacheError, match="more than"):
        await io.read_bytes(path, max_bytes=3)


def test_failed_write_leaves_nothing(tmp_path) -> None:
    # A non-empty directory in the way: the temp file is written, then the rename fails, for
    # root too (a read-only dir would not stop root, and fails before any temp file exists).
    target = tmp_path / "x"
    target.mkdir()
    (target / "kept").write_bytes(b"")
    with pytest.raises(OSError):
        io.write_atomic_sync(target, b"data")
    assert [p.name for p in tmp_path.iterdir()] == ["x"]
    assert [p.name for p in target.iterdir()] == ["kept"]


def test_symlinks_are_not_followed_on_read(tmp_path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(OSError):
        io.read_bytes_sync(link)


def test_a_graph_cache_hit_counts_without_fsync_and_other_files_still_sync(tmp_path, monkeypatch) -> None:
    """The statistics files are counters: written atomically (a reader sees a whole file) but
    not fsynced, since every graph-cache hit writes one; every other file is still durable."""
    from aioge.cache.graph_tools import read_graph_stats, record_graph_lookup
    from aioge.plan import io as plan_io

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(plan_io.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    record_graph_lookup(tmp_path, "k", True)
    record_graph_lookup(tmp_path, "k", False)
    assert read_graph_stats(tmp_path)["keys"] == {"k": {"hits": 1, "misses": 1}} and synced == []
    plan_io.write_atomic_sync(tmp_path / "other", b"x")
    assert len(synced) == 2 and (tmp_path / "other").read_bytes() == b"x"  # the file and its directory


def test_read_into_fills_the_buffer_chunk_by_chunk_and_reports_a_short_file(tmp_path) -> None:
    data = np.random.default_rng(0).integers(0, 256, 1000, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        buf, seen = bytearray(1000), []
        assert io.read_into(fd, memoryview(buf), chunk=300, each=lambda v: seen.append(bytes(v))) == 1000
        assert bytes(buf) == data and [len(c) for c in seen] == [300, 300, 300, 100] and b"".join(seen) == data
        longer = bytearray(1500)  # the file ended first: the count says so, the rest is untouched
        assert io.read_into(fd, memoryview(longer)) == 1000 and longer[:1000] == data and longer[1000:] == bytes(500)
    finally:
        os.close(fd)
