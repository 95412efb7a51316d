"""Reading an ONNX file with its weights straight into arrays.

``ModelProto.ParseFromString`` copies every initializer's ``raw_data`` into protobuf's memory,
and reading it back copies it again (``numpy_helper.to_array``): on top of reading the file,
two copies of every weight. resnet18's 46 MB took 0.10 s to load that way, BERT-base's 440 MB
0.8 s. Here the protobuf wire format is walked down to the top-level graph's initializers
(ModelProto.graph, GraphProto.initializer, TensorProto.raw_data: a few fields, in Python); each
``raw_data`` is read from the file straight into a 64-byte aligned array of its own, and the
rest (nodes, attributes, small fields) is parsed by protobuf as before, without the payloads.

Anything the walk does not expect (a bad wire type, a length past its message, a truncated
file) raises ``NotLean``: the caller parses the file whole, which reports what is wrong.
"""

from __future__ import annotations

import functools
import io
import os
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

import numpy as np
import onnx

from aioge._util import memory

__all__ = ["NotLean", "RAW_DTYPES", "raw_array", "read_lean"]

_GRAPH = 7 << 3 | 2  # ModelProto.graph
_INITIALIZER = 5 << 3 | 2  # GraphProto.initializer
_RAW_DATA = 9 << 3 | 2  # TensorProto.raw_data
_ALIGN = 64
_MAPPED = 1 << 20  # from here a payload is read into a populated mapping (memory.anonymous)
_SPLIT = 2 << 20  # from here a payload is read by two threads


@functools.lru_cache(maxsize=1)
def _helper() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="aioge-onnx-read")


os.register_at_fork(after_in_child=_helper.cache_clear)  # a forked child has no pool thread


# The element types whose raw_data is the little-endian array itself, as numpy reads it.
_T = onnx.TensorProto
RAW_DTYPES: dict[int, type[np.generic]] = {
    _T.FLOAT: np.float32,
    _T.DOUBLE: np.float64,
    _T.FLOAT16: np.float16,
    _T.INT8: np.int8,
    _T.INT16: np.int16,
    _T.INT32: np.int32,
    _T.INT64: np.int64,
    _T.UINT8: np.uint8,
    _T.UINT16: np.uint16,
    _T.UINT32: np.uint32,
    _T.UINT64: np.uint64,
    _T.BOOL: np.bool_,
    _T.COMPLEX64: np.complex64,
    _T.COMPLEX128: np.complex128,
}


class NotLean(Exception):
    """The file is not laid out as ``read_lean`` expects: parse it whole."""


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Reader:
    __slots__ = ("f", "pos")

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.pos = f, 0

    def take(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise NotLean
        self.pos += n
        return data

    def varint(self) -> int:
        result = shift = 0
        while True:
            b = self.f.read(1)
            if not b or shift > 63:
                raise NotLean
            self.pos += 1
            result |= (b[0] & 0x7F) << shift
            if b[0] < 0x80:
                return result
            shift += 7

    def length(self, end: int) -> int:
        n = self.varint()
        if self.pos + n > end:
            raise NotLean
        return n

    def field(self, key: int, end: int) -> bytes:
        """The rest of a field whose key was read, re-encoded whole (key included)."""
        wire = key & 7
        if wire == 0:
            body = _varint_bytes(self.varint())
        elif wire == 1 or wire == 5:
            body = self.take(8 if wire == 1 else 4)
        elif wire == 2:
            n = self.length(end)
            body = _varint_bytes(n) + self.take(n)
        else:  # groups (deprecated) or garbage
            raise NotLean
        if self.pos > end:
            raise NotLean
        return _varint_bytes(key) + body

    def payload(self, n: int) -> np.ndarray:
        """The next ``n`` bytes in an array of their own, 64-byte aligned."""
        # Not np.empty: numpy asks for huge pages for big arrays, and BERT-base's weights then
        # loaded in 0.18 to 1.05 s from one fresh process to the next (the kernel compacting
        # memory for them), against a steady 0.31 s. A big one goes to a mapping populated at
        # once, not a bytearray (zeroed, a page fault per 4 KiB): 0.40 -> 0.28 s of CPU. One
        # read in two halves faults its pages in on both threads (the same CPU as populating
        # them first, on one: resnet18's 46 MB, 11 ms before the reads began).
        buf = np.frombuffer(bytearray(n + _ALIGN) if n < _MAPPED else memory.anonymous(n, populate=n < _SPLIT), np.uint8)
        skip = -buf.ctypes.data % _ALIGN
        out = buf[skip : skip + n]
        if n and self._read(out.data) != n:
            raise NotLean
        self.pos += n
        # Read-only down to the bytearray nobody else holds: a graph constant (kernels keep what
        # they derive from it only then: contract.is_constant; a writeable base here had every
        # conv repack its weight on every run, mobilenet_v3_small 2.0 -> 3.0 ms).
        buf.setflags(write=False)
        out.setflags(write=False)
        return out

    def _read(self, view: memoryview) -> int:
        """Fill ``view`` from the file; a big one's second half on another thread (copying out
        of the page cache is most of a load: resnet18's 46 MB, 12 ms on one core, 7 on two)."""
        n = len(view)
        if n < _SPLIT or not isinstance(self.f, io.BufferedReader):
            return self.f.readinto(view)  # type: ignore[attr-defined]
        half = n // 2 & -4096
        rest = _helper().submit(os.preadv, self.f.fileno(), [view[half:]], self.f.tell() + half)
        got = self.f.readinto(view[:half])
        self.f.seek(n - half, io.SEEK_CUR)
        return got + rest.result()

    def message(self, key: int, body: bytes) -> bytes:
        return _varint_bytes(key) + _varint_bytes(len(body)) + body


def _tensor(r: _Reader, end: int) -> tuple[bytes, np.ndarray | None]:
    parts, raw = [], None
    while r.pos < end:
        key = r.varint()
        if key == _RAW_DATA:
            raw = r.payload(r.length(end))  # a repeated bytes field: the last one counts
        else:
            parts.append(r.field(key, end))
    if r.pos != end:
        raise NotLean
    return b"".join(parts), raw


def _graph(r: _Reader, end: int, raw: dict[int, np.ndarray], count: list[int]) -> bytes:
    parts = []
    while r.pos < end:
        key = r.varint()
        if key == _INITIALIZER:
            n = r.length(end)
            body, data = _tensor(r, r.pos + n)
            if data is not None:
                raw[count[0]] = data
            count[0] += 1
            parts.append(r.message(key, body))
        else:
            parts.append(r.field(key, end))
    if r.pos != end:
        raise NotLean
    return b"".join(parts)


def read_lean(f: BinaryIO | bytes, size: int | None = None) -> tuple[onnx.ModelProto, dict[int, np.ndarray]]:
    """Parse a serialized ModelProto (an open binary file, ``size`` bytes long, or bytes) without
    its top-level initializers' ``raw_data``, which come back apart as uint8 arrays by the
    initializer's index in ``model.graph.initializer``.

    Raises:
        NotLean: the layout is unexpected, or protobuf refuses what is left: parse it whole.
    """
    if isinstance(f, (bytes, bytearray, memoryview)):
        size = len(f)
        f = io.BytesIO(f)
    if not size:  # empty (or unknown): the whole parse says so
        raise NotLean
    r = _Reader(f)
    parts: list[bytes] = []
    raw: dict[int, np.ndarray] = {}
    count = [0]  # initializers so far: a graph field may repeat, and protobuf merges the repeats
    while r.pos < size:
        key = r.varint()
        if key == _GRAPH:
            n = r.length(size)
            parts.append(r.message(key, _graph(r, r.pos + n, raw, count)))
        else:
            parts.append(r.field(key, size))
    model = onnx.ModelProto()
    try:
        model.ParseFromString(b"".join(parts))
    except Exception:  # DecodeError and the like: the whole parse says what is wrong
        raise NotLean from None
    if len(model.graph.initializer) != count[0]:
        raise NotLean
    return model, raw


def raw_array(tensor: onnx.TensorProto, data: np.ndarray, count: int) -> np.ndarray | None:
    """The tensor's elements from its raw bytes ``data`` (``count`` of them, shape from its
    dims) without a copy on a little-endian host, read-only as ``data`` is; None for an element
    type not read that way or bytes of the wrong size (the caller decodes it through onnx)."""
    dtype = RAW_DTYPES.get(tensor.data_type)
    if dtype is None or data.size != count * np.dtype(dtype).itemsize:
        return None
    array = data.view(np.dtype(dtype).newbyteorder("<")).reshape(tuple(tensor.dims))
    return array if array.dtype.isnative else array.astype(dtype)
