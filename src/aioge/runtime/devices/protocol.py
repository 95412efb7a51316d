"""The device wire protocol: length-prefixed frames of a msgpack header and raw array bytes.

A frame: the two lengths, a msgpack header (plain data, ``plan.io``'s bounded codec), then the
raw bytes of its arrays and blobs back to back. The header's "arrays" lists (name, dtype,
shape) in data order and "blobs" the byte lengths that follow them, so big tensors and models
are written straight from their memory and read straight into a fresh buffer: no msgpack
copies, and the arrays read are writable and owned by whoever decodes them. Array dtypes come
from ``plan.codec``'s allow-list; nothing is pickled. Both sides use it: ``pool`` (the parent)
and ``child`` (the device process).
"""

from __future__ import annotations

import struct
from typing import IO, Any, Mapping

import numpy as np

from aioge.plan import io
from aioge.plan.codec import ARRAY_DTYPES

__all__ = ["ARRAY_DTYPES", "encode_frame", "read_frame", "write_frame"]

_HEAD = struct.Struct("<QQ")  # header bytes, data bytes
_MAX_HEADER = 64 << 20
_MAX_DATA = 1 << 36  # 64 GiB: no model or feed aioge accepts is larger


def write_frame(
    stream: IO[bytes], header: dict[str, Any], arrays: Mapping[str, np.ndarray] | None = None, blobs: tuple[bytes, ...] = ()
) -> None:
    """Write one frame of ``header``, ``arrays`` and ``blobs`` to ``stream`` and flush it.

    Raises:
        TypeError: an array of a dtype no frame carries (before a byte is written).
    """
    for c in encode_frame(header, arrays, blobs):
        stream.write(c)
    stream.flush()


def encode_frame(
    header: dict[str, Any], arrays: Mapping[str, np.ndarray] | None = None, blobs: tuple[bytes, ...] = ()
) -> list[Any]:
    """The byte chunks of one frame (``write_frame``'s), the arrays' memory not copied.

    Raises:
        TypeError: an array of a dtype no frame carries.
    """
    chunks: list[Any] = []
    specs = []
    for name, a in (arrays or {}).items():
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        dtype = _NAMES.get(a.dtype) or _name(a.dtype)
        if dtype not in ARRAY_DTYPES:
            raise TypeError(f"array {name!r} has dtype {a.dtype}, which a device cannot take")
        specs.append([name, dtype, list(a.shape)])
        if a.nbytes:
            chunks.append(a.reshape(-1).view(np.uint8).data)
    head = io.pack({**header, "arrays": specs, "blobs": [len(b) for b in blobs]})
    chunks.extend(blobs)
    return [_HEAD.pack(len(head), sum(len(c) for c in chunks)), head, *chunks]


# dtype -> name and name -> item size, filled as met (numpy's dtype.name and np.dtype(name)
# took a third of a small frame's coding time)
_NAMES: dict[np.dtype, str] = {}
_SIZES: dict[str, int] = {}


def _name(dtype: np.dtype) -> str:
    _NAMES[dtype] = dtype.name
    return dtype.name


def _size(name: str) -> int:
    _SIZES[name] = np.dtype(name).itemsize
    return _SIZES[name]


def _read_exact(stream: IO[bytes], n: int) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            return None
        got += k
    return buf


def read_frame(stream: IO[bytes], what: str) -> tuple[dict[str, Any], dict[str, np.ndarray], list[memoryview]] | None:
    """(header, arrays, blobs) of one frame, or None at end of stream (also mid-frame: the writer is gone).

    Raises:
        CacheError, ValueError: a malformed frame.
    """
    head = _read_exact(stream, _HEAD.size)
    if head is None:
        return None
    hlen, dlen = _HEAD.unpack(head)
    if hlen > _MAX_HEADER or dlen > _MAX_DATA:
        raise ValueError(f"{what}: a frame of {hlen} + {dlen} bytes is beyond what a device message may have")
    raw = _read_exact(stream, hlen)
    data = _read_exact(stream, dlen)
    if raw is None or data is None:
        return None
    header = io.unpack(bytes(raw), what=what)
    if not isinstance(header, dict):
        raise ValueError(f"{what}: the header is not a map")
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for name, dtype, shape in header.pop("arrays"):
        if dtype not in ARRAY_DTYPES or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"{what}: array {name!r} has a bad dtype or shape ({dtype!r}, {shape!r})")
        count = 1
        for d in shape:
            count *= d
        nbytes = count * (_SIZES.get(dtype) or _size(dtype))
        if offset + nbytes > dlen:
            raise ValueError(f"{what}: array {name!r} runs past the frame's data")
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
        offset += nbytes
    blobs = []
    for n in header.pop("blobs"):
        if not isinstance(n, int) or offset + n > dlen:
            raise ValueError(f"{what}: a blob runs past the frame's data")
        blobs.append(memoryview(data)[offset : offset + n])
        offset += n
    if offset != dlen:
        raise ValueError(f"{what}: {dlen - offset} bytes of data that no array or blob claims")
    return header, arrays, blobs
