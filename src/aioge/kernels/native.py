"""The compiled-kernel tier: C kernels built at install time (``csrc/``), called with ctypes.

numpy cannot reach onnxruntime on some ops (a depthwise conv is a few hundred tiny strided
multiply-adds that numpy runs one whole-array pass at a time), so those ops have a C kernel too.
``pip install`` builds ``aioge.kernels._native`` with the machine's compiler; the build is
optional, and without it (or with ``AIOGE_NATIVE=0`` in the environment) ``lib()`` is None and
every kernel runs its numpy code. Kernels decide when they are built, not per run: a kernel
built with the native path keeps it.

ctypes releases the GIL for each call, so the halves of a kernel split by
``kernels.parallel.split_range`` run on two cores. Nothing is loaded but the library the build
put beside this file; its ``aioge_native_abi()`` must equal ``ABI``, else it is ignored with a
warning (a stale build from older sources).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import mmap
import os
import warnings
from typing import Any

import numpy as np

__all__ = [
    "ABI",
    "JOB_ACTIVATION",
    "JOB_CHAIN",
    "JOB_CONV_DIRECT",
    "JOB_CONV_GROUPED",
    "JOB_CONV_IMAGES",
    "JOB_CONV_LOCAL",
    "JOB_CONV_T",
    "JOB_DEPTHWISE",
    "JOB_GEMM",
    "JOB_GEMV_N",
    "JOB_GEMV_T",
    "JOB_PACK",
    "JOB_POOL",
    "JOB_SQUEEZE",
    "aligned_empty",
    "available",
    "function",
    "gemm_tile",
    "lib",
    "par_run",
    "ptr",
]

# The jobs of ``aioge_par_run`` (``csrc/par.c``), which splits a C kernel over a C helper thread.
JOB_GEMM, JOB_CONV_DIRECT, JOB_CONV_T, JOB_DEPTHWISE, JOB_ACTIVATION = range(5)
(JOB_PACK, JOB_GEMV_T, JOB_CHAIN, JOB_POOL, JOB_CONV_IMAGES, JOB_SQUEEZE, JOB_CONV_GROUPED, JOB_GEMV_N, JOB_CONV_LOCAL) = range(
    5, 14
)

# Bumped with every change to an exported signature in csrc/ (and in module.c's aioge_native_abi).
ABI = 10


@functools.cache
def lib() -> ctypes.CDLL | None:
    """The compiled kernels, or None: not built, disabled by ``AIOGE_NATIVE=0``, or stale."""
    if os.environ.get("AIOGE_NATIVE", "1").strip() == "0":
        return None
    spec = importlib.util.find_spec("aioge.kernels._native")
    if spec is None or not spec.origin or not spec.origin.endswith((".so", ".pyd", ".dylib")):
        return None
    try:
        dll = ctypes.CDLL(spec.origin)
        abi = dll.aioge_native_abi()
    except (OSError, AttributeError) as exc:
        warnings.warn(
            f"aioge: the compiled kernels at {spec.origin} do not load ({exc}); using the numpy kernels",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if abi != ABI:
        warnings.warn(
            f"aioge: the compiled kernels at {spec.origin} are ABI {abi}, this code expects {ABI} (reinstall aioge to rebuild them); using the numpy kernels",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return dll


def available() -> bool:
    """True when the compiled kernels are loaded and enabled."""
    return lib() is not None


@functools.cache
def function(name: str, *argtypes: Any, restype: Any = None) -> Any:
    """The C function ``name`` with its argument types set, or None without the library (or
    when the library was built from sources older than the function).

    Pointers are passed as ``ctypes.c_void_p`` (give ``ptr(array)``), sizes as ``ctypes.c_int64``."""
    dll = lib()
    if dll is None:
        return None
    try:
        fn = getattr(dll, name)
    except AttributeError:  # a build from older sources: this kernel runs its numpy code
        return None
    fn.argtypes = list(argtypes)
    fn.restype = restype
    return fn


_CHAR, _ADDRESSOF = ctypes.c_char, ctypes.addressof


def ptr(a: np.ndarray) -> int:
    """The address of ``a``'s first element (the caller has checked dtype and contiguity).

    A writeable array's address comes through the buffer protocol (0.42 us here), the others'
    through ``a.ctypes`` (0.89 us, which builds a helper object); a native kernel call takes
    four or five of them."""
    if a.flags.writeable:
        try:
            return _ADDRESSOF(_CHAR.from_buffer(a))  # type: ignore[arg-type]  # ndarray exports a buffer
        except (TypeError, ValueError, BufferError):  # empty, or not one block of memory
            pass
    return int(a.ctypes.data)


# From this size numpy asks the kernel for transparent huge pages (madvise), and where the
# kernel's defrag policy is "madvise" (here) the first such allocation of a process may stall
# on compaction: a 440 MB buffer took 0.6-4.3 s where the next ones took 0.06, and BERT-base's
# first run, which packs 340 MB of weights, measured 0.43-1.35 s from one process to the next.
_HUGE_BYTES = 1 << 22


def aligned_empty(shape: tuple[int, ...], dtype: Any = np.float32, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose first element sits on an ``align``-byte
    boundary (a packed operand the micro-kernels load a cache line at a time). From 4 MiB it
    is an anonymous mapping of its own (page-aligned, zero-filled as it is touched) that
    numpy did not ask huge pages for (see ``_HUGE_BYTES``); freed with the array."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if count * dt.itemsize >= _HUGE_BYTES and align <= mmap.PAGESIZE:
        return np.frombuffer(mmap.mmap(-1, count * dt.itemsize), dt).reshape(shape)
    raw = np.empty(count * dt.itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + count * dt.itemsize].view(dt).reshape(shape)


def gemm_tile() -> tuple[int, int] | None:
    """The rows and columns (MR, NR) of the micro-kernels' register tile in ``csrc/gemm.c``,
    which the packed operands' layouts follow; None without the library."""
    mr = function("aioge_conv_gemm_mr", restype=ctypes.c_int)
    nr = function("aioge_conv_gemm_nr", restype=ctypes.c_int)
    return None if mr is None or nr is None else (int(mr()), int(nr()))


def par_run() -> Any:
    """``aioge_par_run(job, args, total, split)`` of ``csrc/par.c``, or None without the library:
    see ``kernels.parallel.split_native``. A library that has it has every job's kernel too
    (par.c's job table links them), so callers need not look those up."""
    return function("aioge_par_run", ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, restype=ctypes.c_int)
