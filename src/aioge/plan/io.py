"""File I/O for every cache file, in one place: atomic writes, bounded reads, the safe codec.

Every file aioge writes to a cache is an *envelope*::

    MAGIC (8 bytes) | header length (4 bytes, little endian) | header (msgpack) | payload

The header holds the format version, the kind of file, the aioge/numpy/Python versions it
was made under, the payload's length and its sha256. ``open_envelope`` checks all of them
and raises ``CacheError`` on any mismatch, so a truncated, corrupt, foreign or stale file
is a miss, never a crash and never a silently stale result.

Payloads are msgpack with arrays as an ExtType (dtype from an allow-list, shape, bytes whose
length is checked against dtype and shape). Decoding is bounded: ``max_buffer_size`` and
per-container limits are set and ``strict_map_key`` is on. Nothing read is ever executed.

Writes publish atomically: temp file in the same directory, fsync, ``os.replace``, fsync of
the directory. Async callers make one worker-thread hop per file (aiofiles' executor on
asyncio, anyio's worker threads on other backends).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import secrets
import stat
import struct
from typing import Any, Callable, Mapping, Sequence

import anyio
import msgpack
import numpy as np

from aioge._util import backend
from aioge.errors import CacheError
from aioge.plan.codec import ARRAY_DTYPES as _ARRAY_DTYPES

__all__ = [
    "FORMAT_VERSION",
    "MAX_FILE_BYTES",
    "make_envelope",
    "envelope_header",
    "open_envelope",
    "open_regular",
    "pack",
    "read_bytes",
    "read_bytes_sync",
    "read_trusted_sync",
    "unpack",
    "untrusted_dir_reason",
    "untrusted_reason",
    "unlink_if_ours",
    "write_atomic",
    "write_atomic_sync",
]

log = logging.getLogger(__name__)

MAGIC = b"AIOGE\x00\x01\x00"
FORMAT_VERSION = 1
MAX_FILE_BYTES = 8 << 30  # no cache file aioge writes is larger; a larger one is not ours
MAX_HEADER_BYTES = 64 << 10
_ARRAY_EXT = 1
_MAX_DIMS = 32
MAX_DEPTH = 64  # containers nested deeper than this are not aioge's (its files nest about 16 deep)
_BYTES_PER_CONTAINER = 6
_MIN_CONTAINERS = 1024
_SMALL = _MIN_CONTAINERS  # data this short cannot hold more containers than the budget's least


# -- the codec ------------------------------------------------------------------------


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.name not in _ARRAY_DTYPES:
            raise TypeError(f"cannot store arrays of dtype {obj.dtype}")
        body = msgpack.packb([obj.dtype.name, list(obj.shape), np.ascontiguousarray(obj).tobytes()], use_bin_type=True)
        return msgpack.ExtType(_ARRAY_EXT, body)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (tuple, frozenset, set)):
        return list(obj)
    raise TypeError(f"cannot store {type(obj).__name__}")


def pack(obj: Any) -> bytes:
    """Encode plain data (dicts, lists, str, bytes, numbers, None, numpy arrays) as msgpack.

    Raises:
        TypeError: something that is not plain data.
    """
    packed: bytes = msgpack.packb(obj, default=_default, use_bin_type=True)  # msgpack is untyped
    return packed


def _ext_hook(code: int, data: bytes) -> Any:
    if code != _ARRAY_EXT:
        raise ValueError(f"unknown msgpack extension type {code}")
    dtype, shape, raw = _bounded_unpack(data, None)
    if not isinstance(dtype, str) or dtype not in _ARRAY_DTYPES:
        raise ValueError(f"array dtype {dtype!r} is not allowed")
    if not isinstance(shape, list) or len(shape) > _MAX_DIMS or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"bad array shape {shape!r}")
    if not isinstance(raw, bytes):
        raise ValueError("array data is not bytes")
    count = 1
    for d in shape:
        count *= d
    if count * np.dtype(dtype).itemsize != len(raw):
        raise ValueError(f"array of {dtype}{shape} needs {count * np.dtype(dtype).itemsize} bytes, has {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _bounded_unpack(data: bytes, ext_hook: Any) -> Any:
    """One msgpack object from exactly ``data``, decoded within bounds set by its size.

    No container or string may claim more than the data holds (``max_buffer_size`` caps
    every ``max_*_len``); there may be at most ``len(data) // 6 + 1024`` containers (aioge's
    files hold one per 15 bytes or so: a file of empty lists would otherwise make 64 bytes of
    Python objects per byte), nested at most ``MAX_DEPTH`` deep (the readers walk them
    recursively). So decoding ``n`` bytes allocates at most about 25 * ``n``.
    """
    if len(data) <= _SMALL:
        # At most len(data) containers fit (a byte each at least): within the budget, so no
        # Python call per container (a device frame's header: 22 us -> 6).
        small: dict[str, Any] = {"raw": False, "strict_map_key": True}  # unpackb bounds lengths by len(data)
        if ext_hook is not None:
            small["ext_hook"] = ext_hook
        obj = msgpack.unpackb(data, **small)
        _check_depth(obj)
        return obj
    budget = [len(data) // _BYTES_PER_CONTAINER + _MIN_CONTAINERS]

    def count(obj: Any) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueError(f"more containers than {len(data)} bytes of aioge data hold")
        return obj

    kwargs: dict[str, Any] = {
        "raw": False,
        "strict_map_key": True,
        "max_buffer_size": max(len(data), 1),
        "list_hook": count,
        "object_hook": count,
    }
    if ext_hook is not None:
        kwargs["ext_hook"] = lambda code, body: ext_hook(code, count(body))  # an array costs a container too
    unpacker = msgpack.Unpacker(**kwargs)
    unpacker.feed(data)
    obj = unpacker.unpack()
    if unpacker.tell() != len(data):
        raise ValueError(f"{len(data) - unpacker.tell()} bytes of trailing data")
    _check_depth(obj)
    return obj


def _check_depth(obj: Any) -> None:
    """Refuse containers nested deeper than ``MAX_DEPTH`` (level by level: the check must not recurse)."""
    level = [obj] if type(obj) is list or type(obj) is dict else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"containers nested more than {MAX_DEPTH} deep")
        below: list[Any] = []
        for x in level:
            below.extend([v for v in (x.values() if type(x) is dict else x) if type(v) is list or type(v) is dict])
        level = below


def unpack(data: bytes, *, what: str = "cache data", path: str | None = None) -> Any:
    """Decode msgpack written by ``pack``, with bounds; arrays come back read-only.

    Raises:
        CacheError: malformed, hostile or unknown content.
    """
    try:
        return _bounded_unpack(data, _ext_hook)
    except CacheError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types (ValueError, StackError, ExtraData, ...)
        raise CacheError(f"cannot decode {what}: {type(exc).__name__}: {exc}", path=path) from None


# -- envelopes ------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    from aioge.keys import versions

    return versions()


def make_envelope(kind: str, payload: bytes | Sequence[bytes | memoryview], extra: Mapping[str, Any] | None = None) -> bytes:
    """Wrap a payload with the magic, format, versions and checksum header.

    ``payload`` may come in pieces (a model's weights as views of its arrays): they are hashed
    where they lie and copied once, into the result."""
    pieces = [payload] if isinstance(payload, bytes) else list(payload)
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    header = {
        "format": FORMAT_VERSION,
        "kind": kind,
        "versions": _versions(),
        "size": sum(len(piece) for piece in pieces),
        "sha256": h.hexdigest(),
        **(dict(extra) if extra else {}),
    }
    blob: bytes = msgpack.packb(header, use_bin_type=True)
    return b"".join([MAGIC, struct.pack("<I", len(blob)), blob, *pieces])


def envelope_header(data: bytes, *, path: str | None = None) -> dict[str, Any]:
    """The header of an envelope (its ``sha256`` among the fields), the payload unchecked: for
    a writer that has just made ``data`` and wants the digest without hashing it again.

    Raises:
        CacheError: not an aioge file, or a truncated or corrupt header.
    """
    return _header(data, path)[0]


def _header(data: bytes, path: str | None) -> tuple[dict[str, Any], int]:
    """(header, offset of the payload)."""
    if len(data) < len(MAGIC) + 4 or not data.startswith(MAGIC):
        raise CacheError("not an aioge cache file (bad magic)", path=path)
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    if hlen > MAX_HEADER_BYTES or start + hlen > len(data):
        raise CacheError(f"truncated or corrupt header (declared {hlen} bytes)", path=path)
    try:
        header = _bounded_unpack(data[start : start + hlen], None)
    except Exception as exc:
        raise CacheError(f"corrupt header: {type(exc).__name__}", path=path) from None
    if not isinstance(header, dict):
        raise CacheError("corrupt header: not a map", path=path)
    return header, start + hlen


def open_envelope(
    data: bytes, kind: str, *, path: str | None = None, check_versions: bool = True
) -> tuple[dict[str, Any], bytes]:
    """Check an envelope and return (header, payload).

    Raises:
        CacheError: not an aioge file, another kind, another format or versions,
            truncated, or a checksum mismatch.
    """
    header, start = _header(data, path)
    if header.get("format") != FORMAT_VERSION:
        raise CacheError(f"format {header.get('format')!r}, this aioge reads {FORMAT_VERSION}", path=path)
    if header.get("kind") != kind:
        raise CacheError(f"a {header.get('kind')!r} file where a {kind!r} file was expected", path=path)
    if check_versions and header.get("versions") != _versions():
        raise CacheError(f"made under {header.get('versions')}, this is {_versions()}", path=path)
    payload = data[start:]
    if header.get("size") != len(payload):
        raise CacheError(f"truncated: payload has {len(payload)} bytes, header says {header.get('size')}", path=path)
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise CacheError("checksum mismatch (corrupt file)", path=path)
    return header, payload


# -- files ----------------------------------------------------------------------------


def write_atomic_sync(
    path: str | os.PathLike[str],
    data: bytes | Sequence[bytes | memoryview],
    *,
    mode: int = 0o600,
    exclusive: bool = False,
    durable: bool = True,
) -> None:
    """Publish ``data`` at ``path`` atomically: a reader sees the old file or the new one, whole.
    ``data`` may come in pieces (written one after the other). Not ``durable``: without the two fsyncs (a counter a crash may lose, or leave unreadable,
    which its reader takes for none: the statistics files, written on every graph-cache hit).

    With ``exclusive`` an existing ``path`` is never replaced: the whole file appears under
    a free name or not at all (a hard link of the temp file), so a name can be claimed and
    filled in one step and a crash never leaves an empty placeholder behind.

    Raises:
        FileExistsError: ``exclusive`` and ``path`` exists. OSError: the directory is not
            writable, the disk is full, ... (nothing half-written remains).
    """
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        try:
            for piece in [data] if isinstance(data, bytes) else data:
                view = memoryview(piece).cast("B")
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)  # close can fail too (a quota on NFS): the temp file still goes
        if exclusive:
            _link_new(tmp, path)
            _unlink_quietly(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if durable:
        _fsync_dir(directory)


def _link_new(tmp: str, path: str) -> None:
    """Make the whole ``tmp`` appear at ``path`` unless ``path`` exists (FileExistsError)."""
    try:
        os.link(tmp, path, follow_symlinks=False)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
    # No hard links here (some FUSE and SMB mounts): claim the name, then fill it atomically.
    # A crash in between leaves an empty file, which readers reject as not an aioge file.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(path)
        raise


def untrusted_reason(st: os.stat_result, *, shared: bool = False) -> str | None:
    """Why a cache file or directory with this ``lstat``/``fstat`` must not be trusted, or None.

    Like ssh with its keys: a symbolic link is never followed; a file or directory others
    may write is never trusted; unless the cache is shared (``aioge.cache_shared=1``), one
    its group may write or another user owns (root aside) is not trusted either.
    """
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link (links in a cache are not followed)"
    if not hasattr(os, "getuid"):  # pragma: no cover - no owners or modes to check (Windows)
        return None
    if st.st_mode & stat.S_IWOTH:
        return f"it is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if not shared:
        if st.st_uid not in (os.getuid(), 0):
            return f"it is owned by uid {st.st_uid}, not this user (set aioge.cache_shared=1 to trust it)"
        if st.st_mode & stat.S_IWGRP:
            return f"it is writable by its group (mode {stat.S_IMODE(st.st_mode):04o}; set aioge.cache_shared=1 to trust it)"
    return None


def untrusted_dir_reason(path: str | os.PathLike[str], *, shared: bool = False, follow: bool = False) -> str | None:
    """Why a cache directory must not be trusted (see ``untrusted_reason``), or None.

    ``follow`` is for a root the user named (it may be a link to where the cache lives);
    directories inside a cache are never followed.

    Raises:
        FileNotFoundError: it does not exist.
    """
    st = os.stat(path) if follow else os.lstat(path)
    if not stat.S_ISLNK(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    return untrusted_reason(st, shared=shared)


def read_bytes_sync(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """Read a whole file, refusing one larger than ``max_bytes`` before reading it.

    Raises:
        FileNotFoundError: no such file. CacheError: too large or not a regular file.
    """
    return _read(os.fspath(path), max_bytes, None)


def read_trusted_sync(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, shared: bool = False) -> bytes:
    """``read_bytes_sync`` that also refuses a file ``untrusted_reason`` rejects (checked on
    the opened file, so it cannot be swapped between the check and the read).

    Raises:
        FileNotFoundError: no such file. PermissionError: not trusted (the message says why).
        CacheError: too large or not a regular file. OSError: a symbolic link (ELOOP), ...
    """
    return _read(os.fspath(path), max_bytes, shared)


def _read(path: str, max_bytes: int, shared: bool | None) -> bytes:
    fd, st = open_regular(path)
    try:
        if shared is not None:
            reason = untrusted_reason(st, shared=shared)
            if reason is not None:
                raise PermissionError(f"{path}: not trusted: {reason}")
        if st.st_size > max_bytes:
            raise CacheError(f"{st.st_size} bytes, more than the {max_bytes} a cache file may have", path=path)
        # One read of the whole file first: one bytes object, no join copy (a regular file
        # gives it all at once below Linux's 2 GiB per read); the loop finishes a short read.
        first = os.read(fd, st.st_size) if st.st_size else b""
        if len(first) == st.st_size:
            return first
        chunks = [first]
        remaining = st.st_size - len(first)
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_into(fd: int, view: memoryview, *, chunk: int = 64 << 20, each: Callable[[memoryview], Any] | None = None) -> int:
    """Fill ``view`` from ``fd``'s start, ``chunk`` bytes a read (``each`` sees every chunk
    while it is still in the CPU's cache, e.g. to hash it); the bytes read, fewer than
    ``len(view)`` only when the file ended first (it shrank while read)."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got : got + chunk]], got)
        if not n:
            break
        if each is not None:
            each(view[got : got + n])
        got += n
    return got


# Never block, never follow: opening a FIFO for reading waits for a writer (forever, in a
# worker thread that no timeout can cancel), and a device or a terminal has side effects.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0)


def open_regular(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """Open a cache file for reading: ``(fd, fstat)`` of a regular file, the caller closes ``fd``.

    Every cache reader opens through here. The open never blocks and never follows a
    symbolic link, and the opened file's type is checked before a byte is read, so a FIFO,
    socket, device or directory in a file's place is refused instead of hanging the process.

    Raises:
        FileNotFoundError: no such file. CacheError: not a regular file (naming what it
            is). OSError: a symbolic link (ELOOP), permission denied, ...
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket (or a device without a driver)
            raise CacheError(f"not a regular file but {_file_type(path)}", path=path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CacheError(f"not a regular file but {_file_type(path, st)}", path=path)
        os.set_blocking(fd, True)  # a regular file: reads are as usual
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _file_type(path: str, st: os.stat_result | None = None) -> str:
    if st is None:
        try:
            st = os.lstat(path)
        except OSError:
            return "something that cannot be opened"
    mode = st.st_mode
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return f"a file of type {stat.S_IFMT(mode):o}"


def unlink_if_ours(path: str | os.PathLike[str], *, empty_ok: bool = False) -> bool:
    """Unlink ``path`` only if it is a regular file (not a link) that starts with aioge's
    magic (or, with ``empty_ok``, is empty: a name ``write_atomic_sync`` claimed before a
    crash); True when it was removed. Never raises (a file not provably aioge's stays)."""
    try:
        fd, st = open_regular(path)
    except (OSError, CacheError):
        return False
    try:
        if not (empty_ok and st.st_size == 0) and os.read(fd, len(MAGIC)) != MAGIC:
            return False
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


async def write_atomic(
    path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600, limiter: anyio.CapacityLimiter | None = None
) -> None:
    """``write_atomic_sync`` off the event loop, in one worker-thread hop."""
    await _hop(functools.partial(write_atomic_sync, mode=mode), path, data, limiter=limiter)


async def read_bytes(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, limiter: anyio.CapacityLimiter | None = None
) -> bytes:
    """``read_bytes_sync`` off the event loop, in one worker-thread hop."""
    data: bytes = await _hop(functools.partial(read_bytes_sync, max_bytes=max_bytes), path, limiter=limiter)
    return data


async def _hop(fn: Any, *args: Any, limiter: anyio.CapacityLimiter | None) -> Any:
    if limiter is None:  # the backend's cheapest hop (aiofiles' executor on asyncio)
        return await backend.current().to_thread(fn, *args)
    return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
