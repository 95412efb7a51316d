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
warning (a stale build from older sources), and so is a build for instructions the CPU lacks
(``aioge_native_isa()`` against /proc/cpuinfo: a warning, not SIGILL). A missing tier is said
once a process too, unless ``AIOGE_NATIVE=0`` asked for it; ``aioge --version`` tells which.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import mmap
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from aioge._util import memory
from aioge.errors import ExecutionError, OptionError
from aioge.kernels.parallel import split_native

__all__ = [
    "ABI",
    "ACT",
    "ERRORS",
    "ISA",
    "cpu_flags",
    "describe",
    "SIGNATURES",
    "check",
    "fail_alloc",
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
    "JOB_GLOBAL_MEAN",
    "JOB_LAYERNORM",
    "JOB_PHASES",
    "JOB_STRIDED",
    "JOB_BINARY",
    "JOB_RESIDUAL",
    "JOB_SGEMM",
    "JOB_QGEMM",
    "JOB_LOWP_GEMM",
    "JOB_LOWP_ROUND",
    "JOB_SOFTMAX",
    "JOB_ELEMWISE",
    "JOB_GATHER",
    "JOB_CUMULATIVE",
    "JOB_ARG_REDUCE",
    "JOB_GATHER_ELEMENTS",
    "JOB_WINOGRAD",
    "JOB_IRB",
    "JOB_RNN",
    "EW_CAST",
    "EW_AND",
    "EW_OR",
    "EW_XOR",
    "EW_WHERE",
    "EW_ARITH",
    "EW_UNARY",
    "elemwise",
    "gather",
    "NativeCall",
    "aligned_empty",
    "available",
    "function",
    "gemm_tile",
    "lib",
    "par_run",
    "ptr",
    "BoundCalls",
    "f32c",
    "run_calls",
    "run_jobs",
    "sgemm",
    "with_native",
]

# ``csrc/aioge.h`` is the contract: its job enum, activation codes, error codes and
# prototypes; tests/engines/test_native_header.py checks the numbers and signatures here
# against it. The jobs of ``aioge_par_run`` (``csrc/jobs.c``, split by ``csrc/par.c``) over a C
# helper thread:
JOB_GEMM, JOB_CONV_DIRECT, JOB_CONV_T, JOB_DEPTHWISE, JOB_ACTIVATION = 0, 1, 2, 3, 4
JOB_PACK, JOB_GEMV_T, JOB_CHAIN, JOB_POOL, JOB_CONV_IMAGES, JOB_SQUEEZE = 5, 6, 7, 8, 9, 10
JOB_CONV_GROUPED, JOB_GEMV_N, JOB_CONV_LOCAL, JOB_SOFTMAX, JOB_LAYERNORM, JOB_PHASES = 11, 12, 13, 14, 15, 16
JOB_GLOBAL_MEAN, JOB_STRIDED, JOB_BINARY, JOB_SGEMM = 17, 18, 19, 20
JOB_RESIDUAL = 21
JOB_QGEMM = 22
JOB_LOWP_GEMM, JOB_LOWP_ROUND = 23, 24
JOB_ELEMWISE, JOB_GATHER = 25, 26
JOB_CUMULATIVE, JOB_ARG_REDUCE, JOB_GATHER_ELEMENTS = 27, 28, 29
JOB_WINOGRAD = 30
JOB_IRB = 31
JOB_RNN = 32

# The activation codes of aioge.h's ``enum aioge_act``, by op name (the one Python copy:
# ``native_rows`` and the convolutions' epilogues read them here).
_ACTS = ("", "Erf", "Gelu", "GeluTanh", "Sigmoid", "Swish", "HardSigmoid", "HardSwish", "Relu", "LeakyRelu", "Clip", "Tanh")
ACT = {name: code for code, name in enumerate(_ACTS)}

# The error codes of ``enum aioge_error``: one rule, negative is an error, everywhere.
ERRORS = {
    -1: "no memory for its scratch",
    -2: "a geometry that does not fit its buffers",
    -3: "IndexError: an index outside its axis",  # the same kind as numpy's on the step path
    -1000: "an unknown job",
}

# aioge.h's AIOGE_ABI, which ``aioge_native_abi()`` returns: bumped with every change to it.
ABI = 29

_P, _I64, _INT, _F, _I32, _SIZE = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float, ctypes.c_int32, ctypes.c_size_t
# Every C function Python calls: (result type, argument types), as aioge.h declares them.
SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "aioge_native_abi": (_INT, ()),
    "aioge_native_isa": (_I64, ()),
    "aioge_cpu_isa": (_I64, ()),
    "aioge_fail_alloc": (None, (_I64,)),
    "aioge_conv_gemm_mr": (_INT, ()),
    "aioge_conv_gemm_nr": (_INT, ()),
    "aioge_conv_phases_f32": (None, (_P, _P, _P)),
    "aioge_par_run": (_INT, (_INT, _P, _I64, _INT)),
    "aioge_run_jobs": (_INT, (_P, _I64, _INT, _P)),
    "aioge_par_helpers": (_INT, ()),
    "aioge_par_backoff": (_I64, (_I64, _I64, _I64, _I64)),
    "aioge_par_stats": (None, (_P,)),
    "aioge_activation_f32": (None, (_P, _P, _INT, _F, _F, _I64, _I64)),
    "aioge_bias_activation_f32": (None, (_P, _P, _P, _I64, _INT, _F, _F, _I64, _I64)),
    "aioge_layernorm_f32": (None, (_P, _P, _P, _P, _P, _P, _I64, _F, _I64, _I64)),
    "aioge_softmax_f32": (None, (_P, _P, _I64, _INT, _I64, _I64)),
    "aioge_queue_new": (_P, (_INT,)),
    "aioge_queue_fd": (_INT, (_P,)),
    "aioge_queue_push": (_I64, (_P, _P)),
    "aioge_queue_take": (_INT, (_P,)),
    "aioge_queue_arm": (_I64, (_P,)),
    "aioge_queue_free": (None, (_P,)),
    "aioge_rnn_packed_floats": (_I64, (_P,)),
    "aioge_rnn_pack": (_INT, (_P, _P, _P, _I64)),
    "aioge_rnn_shared_floats": (_I64, (_P,)),
    "aioge_simd_avx2": (_INT, (_INT,)),
    "aioge_qgemm_packed": (_I64, (_I64, _I64)),
    "aioge_qgemm_pack": (_INT, (_P, _INT, _I64, _I64, _I64, _I64, _P, _I64, _P, _I64)),
    "aioge_qgemm_rows": (_INT, (_P, _I64, _I64)),
    "aioge_qgemm_path": (_INT, (_INT,)),
    "aioge_qgemm_packed8": (_I64, (_I64, _I64)),
    "aioge_qgemm_pack8": (_INT, (_P, _INT, _I64, _I64, _I64, _I64, _P, _I64, _P, _I64, _P, _P, _P, _P, _I64)),
    "aioge_qgemm_range": (_INT, (_P, _I64, _P)),
    "aioge_qgemm_quantize": (_INT, (_P, _I64, _F, _F, _INT, _P)),
    "aioge_qgemm_dequantize": (_INT, (_P, _INT, _I64, _F, _F, _P)),
    "aioge_lowp_force_scalar": (None, (_INT,)),
    "aioge_lowp_isa": (_INT, ()),
    "aioge_lowp_round_f32": (None, (_INT, _P, _P, _I64)),
    "aioge_lowp_pack": (_INT, (_INT, _P, _I64, _I64, _I64, _I64, _P, _I64)),
    "aioge_lowp_gemm": (_INT, (_INT, _P, _I64, _P, _I64, _P, _P, _I64, _I64, _I64, _I64, _INT, _F, _F, _I64, _I64)),
    "aioge_par_wake": (_INT, ()),
    "aioge_transpose8": (_INT, (_P, _I64, _I64, _I64, _P)),
    "aioge_qdq_add": (_INT, (_P, _F, _F, _P, _F, _F, _INT, _I64, _F, _F, _P)),
}


# What ``aioge_native_isa()``'s bits mean, each named as /proc/cpuinfo names the CPU flag.
ISA = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni", "asimd")

_SLOWER = "every kernel runs its numpy code, 2-10x slower (the demo CNN 0.34 -> 2.95 ms a run, resnet18 36 -> 79 ms)"
_REBUILD = "pip install --force-reinstall --no-binary aioge aioge"


# setup.py's ISA tiers, lowest first: (name, module, the CPU flags it needs; cpu_flags's names).
# The baseline tier runs on every CPU of its architecture; AIOGE_ISA=NAME forces a lower one.
TIERS = (
    ("baseline", "aioge.kernels._native", frozenset[str]()),
    ("avx2", "aioge.kernels._native_avx2", frozenset({"avx", "avx2", "fma"})),
    ("avx512", "aioge.kernels._native_avx512", frozenset({"avx2", "avx512f", "avx512bw", "avx512vl"})),
)


def cpu_flags(base: ctypes.CDLL | None = None) -> frozenset[str] | None:
    """The CPU's instruction-set flags: from CPUID through ``base``'s ``aioge_cpu_isa()`` (right
    under an emulator too), else /proc/cpuinfo's; None where neither can be read."""
    bits = int(base.aioge_cpu_isa()) if base is not None and hasattr(base, "aioge_cpu_isa") else -1
    if bits >= 0:
        return frozenset(name for i, name in enumerate(ISA) if bits >> i & 1)
    try:
        # utf-8: the one codec every interpreter has loaded (a child that dropped privileges could
        # not import encodings.ascii from an unreadable stdlib: "unknown encoding: ascii")
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


@dataclass
class _Opened:
    """What ``_open`` found: the library or None, why, its ISA, a warning, its tier, every tier."""

    dll: ctypes.CDLL | None
    why: str
    built: list[str] = field(default_factory=list)
    warn: str | None = None
    tier: str = ""
    tiers: list[str] = field(default_factory=list)


def _cdll(path: str) -> ctypes.CDLL:
    dll = ctypes.CDLL(path)
    dll.aioge_native_isa.restype = dll.aioge_cpu_isa.restype = ctypes.c_int64
    return dll


def _open() -> _Opened:
    """Load the best ISA tier this CPU runs, at most AIOGE_ISA's (raises on an unknown name)."""
    if os.environ.get("AIOGE_NATIVE", "1").strip() == "0":
        return _Opened(None, "disabled by AIOGE_NATIVE=0")
    names = [t[0] for t in TIERS]
    want = os.environ.get("AIOGE_ISA", "").strip().lower()
    if want and want not in names:
        raise OptionError("AIOGE_ISA", want, f"expected one of {', '.join(names)} (or unset: the best this CPU runs)")
    specs = [(t, importlib.util.find_spec(t[1])) for t in TIERS]
    found = [(t, str(s.origin)) for t, s in specs if s is not None and str(s.origin).endswith((".so", ".pyd"))]
    if not found or found[0][0][0] != "baseline":
        why = "not built (no C compiler at install: install one, e.g. `apt-get install build-essential`, and reinstall aioge)"
        return _Opened(None, why, warn=why)
    try:
        dll = _cdll(found[0][1])
        abi = dll.aioge_native_abi()
    except (OSError, AttributeError) as exc:
        why = f"{found[0][1]} does not load ({exc}; reinstall aioge: {_REBUILD})"
        return _Opened(None, why, warn=why)
    if abi != ABI:
        why = f"{found[0][1]} is ABI {abi}, this code expects {ABI} (stale build; reinstall aioge: {_REBUILD})"
        return _Opened(None, why, warn=why)
    have, note = cpu_flags(dll), None
    runs = [(t, path) for t, path in found if t[2] <= (have or frozenset())]
    if want and names.index(want) > names.index(runs[-1][0][0]):
        missing = ", ".join(sorted(TIERS[names.index(want)][2] - (have or frozenset())))
        note = f"AIOGE_ISA={want} asks for {missing}, which this CPU lacks: it runs {runs[-1][0][0]}"
    (tier, _, _), path = [r for r in runs if not want or names.index(r[0][0]) <= names.index(want)][-1]
    if path != found[0][1]:
        dll = _cdll(path)
    built = [name for i, name in enumerate(ISA) if int(dll.aioge_native_isa()) >> i & 1]
    if len(found) == 1 and "avx2" in built:  # an AIOGE_NATIVE_ARCH=1 build: its one tier is -march=native
        tier = "avx512" if "avx512f" in built else "avx2"
    lacks = [name for name in built if have is not None and name not in have]
    if lacks:
        why = f"{path} was built for {', '.join(lacks)}, which this CPU lacks (rebuild on this machine: {_REBUILD})"
        return _Opened(None, why, built, warn=why)
    if want and names.index(tier) > names.index(want):
        why = f"AIOGE_ISA={want}, but this build (AIOGE_NATIVE_ARCH=1) has only its {tier} tier"
        return _Opened(None, why, built, warn=why)
    return _Opened(dll, f"ABI {abi}", built, note, tier, [t[0] for t, _ in found])


@functools.cache
def lib() -> ctypes.CDLL | None:
    """The compiled kernels' best ISA tier for this CPU, or None: not built, disabled by
    ``AIOGE_NATIVE=0``, stale, or built for instructions this CPU lacks (said once a process)."""
    opened = _open()
    if opened.warn and opened.dll is None:
        warnings.warn(f"aioge: the compiled kernels are unavailable: {opened.warn}; {_SLOWER}", RuntimeWarning, stacklevel=2)
    elif opened.warn:
        warnings.warn(f"aioge: {opened.warn}", RuntimeWarning, stacklevel=2)
    return opened.dll


def describe() -> str:
    """One line for ``aioge --version``: whether the compiled tier runs, which ISA path, its ABI."""
    try:
        opened = _open()
    except OptionError as exc:
        return f"compiled kernels: not loaded — {exc}"  # lib() raises it at first use
    if opened.dll is None:
        return f"compiled kernels: no — numpy kernels; {opened.why}"
    import platform

    isa = f" ({', '.join(opened.built)})" if opened.built else ""
    want = os.environ.get("AIOGE_ISA", "").strip()
    forced = f" ({opened.warn})" if opened.warn else f" (AIOGE_ISA={want})" if want else ""
    if len(opened.tiers) == 1 and opened.built and opened.tier != "baseline":
        return (
            f"compiled kernels: yes, built with -march=native for {platform.machine()}, running {opened.tier}{isa}, {opened.why}"
        )
    return (
        f"compiled kernels: yes, {platform.machine()} tiers {', '.join(opened.tiers)}, running {opened.tier}{isa}{forced}, "
        f"{opened.why}"
    )


def fail_alloc(nth: int) -> None:
    """Make the ``nth`` allocation of the C tier from now fail (0: none), once: for tests of
    the paths that report no memory (``csrc/alloc.c``)."""
    fn = function("aioge_fail_alloc")
    if fn is not None:
        fn(nth)


def available() -> bool:
    """True when the compiled kernels are loaded and enabled."""
    return lib() is not None


@functools.cache
def tier() -> str:
    """The ISA tier the compiled kernels run, "" when they do not: a kernel key part (a kernel
    tuned without them, or on another tier, chose among other candidates)."""
    return _open().tier if lib() is not None else ""


@functools.cache
def function(name: str) -> Any:
    """The C function ``name`` with its types from ``SIGNATURES`` (aioge.h's), or None without
    the library (or when the library was built from sources older than the function).

    Pointers are passed as ``ctypes.c_void_p`` (give ``ptr(array)``), sizes as ``ctypes.c_int64``."""
    dll = lib()
    if dll is None:
        return None
    restype, argtypes = SIGNATURES[name]
    try:
        fn = getattr(dll, name)
    except AttributeError:  # a build from older sources: this kernel runs its numpy code
        return None
    fn.argtypes = list(argtypes)
    fn.restype = restype
    return fn


def check(code: int, what: str) -> int:
    """``code`` (a C call's result) when it is not negative, else the error raised.

    Raises:
        ExecutionError: the C tier reported an error (negative is an error, everywhere):
            names ``what`` and the error.
    """
    if code < 0:
        raise ExecutionError(f"{what}: the compiled kernel failed with {ERRORS.get(code, f'error {code}')} ({code})")
    return code


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
    is an anonymous mapping of its own (page-aligned) that numpy did not ask huge pages for
    (see ``_HUGE_BYTES`` and ``_util.memory``), populated at once (a page fault per 4 KiB as the
    packing wrote it cost BERT-base's first run 0.2 s of its 0.67 s of CPU); freed with the array."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if count * dt.itemsize >= _HUGE_BYTES and align <= mmap.PAGESIZE:
        return np.frombuffer(memory.anonymous(count * dt.itemsize), dt).reshape(shape)
    raw = np.empty(count * dt.itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + count * dt.itemsize].view(dt).reshape(shape)


def gemm_tile() -> tuple[int, int] | None:
    """The rows and columns (MR, NR) of the micro-kernels' register tile (``csrc/tile.h``),
    which the packed operands' layouts follow; None without the library."""
    mr = function("aioge_conv_gemm_mr")
    nr = function("aioge_conv_gemm_nr")
    return None if mr is None or nr is None else (int(mr()), int(nr()))


def par_run() -> Any:
    """``aioge_par_run(job, args, total, split)`` of ``csrc/par.c``, or None without the library:
    see ``kernels.parallel.split_native``. A library that has it has every job's kernel too
    (jobs.c's job table links them), so callers need not look those up."""
    return function("aioge_par_run")


def f32c(*arrays: Any) -> bool:
    """Every one a float32, C-contiguous array: what a native form reads or writes in place."""
    return all(isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)


@dataclass(frozen=True, slots=True)
class NativeCall:
    """One C job of a native program (``runtime.native_program``): ``aioge_par_run``'s job,
    its argument block and range, whether it is worth splitting over an idle core, and every
    array whose address the block holds (kept alive as long as the program)."""

    job: int
    args: np.ndarray
    total: int
    worth: bool = False
    keep: tuple[Any, ...] = ()
    addr: int = field(init=False)  # the argument block's address

    def __post_init__(self) -> None:
        object.__setattr__(self, "addr", ptr(self.args))


# A kernel's native form: given the operands a context binds it to for good (arena views,
# constants, a feed's staging buffer), the C jobs that compute what the kernel would, bit for
# bit; None when it cannot (an operand it cannot read in place).
NativeForm = Callable[[Sequence[Any], Sequence[np.ndarray]], "list[NativeCall] | None"]


def with_native(run: Any, form: NativeForm) -> Any:
    """``run`` (a kernel's RunFn) with its native form attached as ``run.native``."""
    run.native = form
    return run


def native_form(run: Any) -> NativeForm | None:
    """The native form a kernel's RunFn carries, or None."""
    return getattr(run, "native", None)


def run_jobs() -> Any:
    """``aioge_run_jobs(entries, n, split, failed)`` of ``csrc/par.c``, or None without the library."""
    return function("aioge_run_jobs")


def strided_copy(src: np.ndarray, dst: np.ndarray) -> NativeCall | None:
    """The copy of the view ``src`` (up to 6-D, any strides) into the C-contiguous ``dst`` of
    its shape and dtype, or None when it is not such a pair."""
    if not (isinstance(src, np.ndarray) and src.shape == dst.shape and src.dtype == dst.dtype and dst.flags.c_contiguous):
        return None
    if src.ndim > 6 or src.dtype.hasobject or src.size == 0:
        return None
    sizes, (strides, _) = _merged(src.shape, src.strides, dst.strides)
    args = np.array(
        [ptr(src) if src.flags.c_contiguous else _base_address(src), ptr(dst), src.itemsize, *sizes, *strides], np.int64
    )
    return NativeCall(JOB_STRIDED, args, sizes[0], src.size >= ROWS_SPLIT, (src, dst))


def _merged(shape: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """``shape`` and each operand's byte ``strides`` with the axes of size 1 dropped and
    neighbours every operand steps over as one merged (numpy's iterator does so), padded to
    6-D after the outermost axis (the jobs' range, split over an idle core): a copy then runs in
    rows as long as the layouts allow (ShuffleNet's channel Concat, one row of an image's planes
    where per-element loops over its 6-D index cost 27x numpy's copy); one long run is cut into
    rows of up to 4096."""
    axes = [k for k, n in enumerate(shape) if n != 1]
    dims, steps = [shape[k] for k in axes[:1]], [[st[k] for k in axes[:1]] for st in strides]
    for k in axes[1:]:
        if all(s[-1] == st[k] * shape[k] for s, st in zip(steps, strides)):
            dims[-1] *= shape[k]
            for s, st in zip(steps, strides):
                s[-1] = st[k]
        else:
            dims.append(shape[k])
            for s, st in zip(steps, strides):
                s.append(st[k])
    if len(dims) == 1 and dims[0] >= ROWS_SPLIT:  # one long run: rows of it, so that the range has pieces
        row = next((r for r in range(4096, 255, -1) if dims[0] % r == 0), 0)
        if row:
            dims = [dims[0] // row, row]
            steps = [[s[0] * row, s[0]] for s in steps]
    pad = 6 - len(dims)  # the outermost axis first (the jobs' range), the padding after it; a run alone last
    if len(dims) == 1:
        return [1] * pad + dims, [[0] * pad + s for s in steps]
    return dims[:1] + [1] * pad + dims[1:], [s[:1] + [0] * pad + s[1:] for s in steps]


# Elements from which a strided copy or an elementwise job splits over an idle core (ConvNeXt's
# Transposes and layer scales, 75K to 301K values a block, had run on one core), as activations
ROWS_SPLIT = 1 << 16


def _base_address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


# JOB_ELEMWISE's ops and dtypes (csrc/jobs.c)
EW_CAST, EW_AND, EW_OR, EW_XOR, EW_WHERE = range(5)
EW_ARITH = {"Add": 5, "Sub": 6, "Mul": 7, "Div": 8}  # float32; but Div, int64 and int32 too
_EW_INTS = (np.dtype(np.int64), np.dtype(np.int32))
EW_COMPARE = {"Equal": 9, "Less": 10, "LessOrEqual": 11, "Greater": 12, "GreaterOrEqual": 13}  # numbers -> bool
EW_NOT = 14
EW_UNARY = {"Sqrt": 15, "Reciprocal": 16}  # float32: RMSNorm's rsqrt (T5, Llama)
EW_ISNAN = 17  # float32 or float64 -> bool: GPT-2's attention mask check
_EW_TYPES = {np.dtype(t): code for code, t in enumerate((np.float32, np.int64, np.int32, np.bool_, np.float64))}


def elemwise(op: int, y: Any, *xs: Any) -> NativeCall | None:
    """``y = op(*xs)`` as one job: EW_CAST (x to y's dtype, as numpy's astype), EW_AND, EW_OR,
    EW_XOR, EW_NOT (bools), EW_ISNAN (float32/64 to a bool), EW_WHERE (a bool condition, then two of y's dtype), EW_UNARY's (float32), EW_ARITH's (float32;
    Add, Sub and Mul of int64 or int32 too, wrapping as numpy's),
    EW_COMPARE's (two numbers of any of the dtypes to a bool y, as numpy promotes them), for operands broadcast to
    ``y`` (any strides: a slice of Concat's output; up to 6-D; float32, float64, int64, int32, bool); None otherwise."""
    if not (isinstance(y, np.ndarray) and y.flags.writeable and y.size and y.ndim <= 6 and y.dtype in _EW_TYPES):
        return None
    arity = 1 if op in (EW_CAST, EW_NOT, EW_ISNAN, *EW_UNARY.values()) else 3 if op == EW_WHERE else 2
    if not all(isinstance(x, np.ndarray) and x.dtype in _EW_TYPES for x in xs) or len(xs) != arity:
        return None
    kinds = [x.dtype for x in (y, *xs)]
    if (
        (op in (EW_AND, EW_OR, EW_XOR, EW_NOT) and any(k != np.bool_ for k in kinds))
        or (op in EW_ARITH.values() and any(k != y.dtype for k in kinds))
        or (op in EW_ARITH.values() and y.dtype != np.float32 and (op == EW_ARITH["Div"] or y.dtype not in _EW_INTS))
        or (op in EW_COMPARE.values() and y.dtype != np.bool_)
        or (op in EW_UNARY.values() and any(k != np.float32 for k in kinds))
        or (op == EW_ISNAN and (y.dtype != np.bool_ or kinds[1] not in (np.float32, np.float64)))
        or (op == EW_WHERE and (kinds[1] != np.bool_ or kinds[2] != y.dtype or kinds[3] != y.dtype))
    ):
        return None
    try:
        views = [np.broadcast_to(x, y.shape) for x in xs]
    except ValueError:
        return None
    views += views[:1] * (3 - len(views))
    sizes, (ys, *strides) = _merged(y.shape, y.strides, *(v.strides for v in views))
    block = [op, _base_address(y), _EW_TYPES[y.dtype], *sizes, *ys]
    for v, st in zip(views, strides):
        block += [_base_address(v), _EW_TYPES[v.dtype], *st]
    return NativeCall(JOB_ELEMWISE, np.array(block, np.int64), block[3], y.size >= ROWS_SPLIT, (y, *xs))


def gather(data: Any, idx: Any, out: Any, axis: int = 0, k: int = 1) -> NativeCall | None:
    """``out``: ``data``'s slices picked by the int64 ``idx`` along ``axis`` (Gather, k 1) or by
    its k-tuples over data's leading k axes (GatherND), as one job; a negative index counts from
    its axis's end, one outside it fails the job (AIOGE_EINDEX). None for other operands."""
    arrays = (data, idx, out)
    if not all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in arrays) or idx.dtype != np.int64:
        return None
    if data.dtype != out.dtype or data.dtype.hasobject or not 1 <= k <= 6 or axis + k > data.ndim or not out.size:
        return None
    dims = data.shape[axis : axis + k]
    outer, inner = math.prod(data.shape[:axis]), math.prod(data.shape[axis + k :]) * data.itemsize
    m = idx.size // k
    if out.nbytes != outer * m * inner or idx.size != m * k:
        return None
    block = [ptr(data), ptr(out), math.prod(dims) * inner, inner, ptr(idx), m, k, *dims, *[1] * (6 - k)]
    return NativeCall(JOB_GATHER, np.array(block, np.int64), outer, False, arrays)


def _along(arrays: Sequence[Any], axis: int) -> tuple[int, int, int] | None:
    """The first of ``arrays`` (C-contiguous, of one rank, none empty) as (outer, n, inner) around ``axis``."""
    a = arrays[0]
    if not all(isinstance(b, np.ndarray) and b.flags.c_contiguous and b.size and b.ndim == a.ndim for b in arrays):
        return None
    return (math.prod(a.shape[:axis]), a.shape[axis], math.prod(a.shape[axis:][1:])) if -a.ndim <= axis < a.ndim else None


def cumulative(x: Any, y: Any, axis: int, exclusive: bool, reverse: bool, prod: bool = False) -> NativeCall | None:
    """CumSum (CumProd: ``prod``) of float32/64 or int64/32 ``x`` along ``axis`` into ``y``, ONNX's
    ``exclusive`` and ``reverse``, as numpy's cumsum (sequential float sums; integers wrap); else None."""
    geo = _along((x, y), axis)
    if geo is None or x.shape != y.shape or x.dtype != y.dtype or x.dtype not in _EW_TYPES or x.dtype == np.bool_:
        return None
    block = [ptr(x), ptr(y), _EW_TYPES[x.dtype], *geo, exclusive, reverse, prod, x.size, y.size]
    return NativeCall(JOB_CUMULATIVE, np.array(block, np.int64), geo[0], False, (x, y))


def arg_reduce(x: Any, y: Any, axis: int, largest: bool, last: bool = False) -> NativeCall | None:
    """ArgMax (``largest``) or ArgMin of ``x`` (float32/64, int64/32, bool) along ``axis`` into the
    int64 ``y`` (either keepdims): the first extreme or the ``last``, a NaN the extreme (numpy's)."""
    geo, ok = _along((x,), axis), isinstance(y, np.ndarray) and y.flags.c_contiguous and y.dtype == np.int64
    if geo is None or x.dtype not in _EW_TYPES or not ok or y.size != geo[0] * geo[2]:
        return None
    block = [ptr(x), ptr(y), _EW_TYPES[x.dtype], *geo, bool(largest), bool(last), x.size, y.size]
    return NativeCall(JOB_ARG_REDUCE, np.array(block, np.int64), geo[0], False, (x, y))


def gather_elements(data: Any, idx: Any, out: Any, axis: int) -> NativeCall | None:
    """GatherElements along ``axis`` as one job: int64 or int32 ``idx`` of ``out``'s shape and of
    ``data``'s off the axis; a negative index counts from the axis's end, one outside it fails (AIOGE_EINDEX)."""
    geo = _along((data, idx, out), axis)
    if geo is None or idx.dtype not in _EW_INTS or out.dtype != data.dtype or data.itemsize not in (1, 2, 4, 8):
        return None
    rest = [np.delete(a.shape, axis % a.ndim).tolist() for a in (data, idx)]
    if data.dtype.hasobject or idx.shape != out.shape or rest[0] != rest[1]:
        return None
    block = [ptr(data), ptr(idx), ptr(out), data.itemsize, idx.dtype == np.int64, *geo, idx.shape[axis], data.size, idx.size]
    return NativeCall(JOB_GATHER_ELEMENTS, np.array(block, np.int64), geo[0], False, (data, idx, out))


_BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}


def binary(op: str, a: Any, b: Any, y: np.ndarray) -> NativeCall | None:
    """float32 ``y = a op b`` (``op`` Add, Sub, Mul or Div) as one job, for operands of
    ``y``'s shape, single values, or rows broadcast along the leading axes (all C-contiguous);
    None otherwise."""
    code = _BINARY.get(op)
    if code is None or not f32c(a, b, y) or y.size == 0:
        return None
    width = int(y.shape[-1]) if y.ndim else 1
    rows = y.size // width
    steps = []
    for t in (a, b):
        if t.size == 1:
            steps += [0, 0]
        elif t.shape == y.shape:
            steps += [width, 1]
        elif t.size == width and t.shape[-1:] == y.shape[-1:]:
            steps += [0, 1]
        else:
            return None
    args = np.array([ptr(a), ptr(b), ptr(y), code, width, *steps], np.int64)
    return NativeCall(JOB_BINARY, args, rows, False, (a, b, y))


@functools.cache
def sgemm() -> tuple[int, bool] | None:
    """The address of ``cblas_sgemm`` in the OpenBLAS numpy uses and whether it takes 64-bit
    integers (numpy's wheels bundle an ILP64 build, its symbols prefixed ``scipy_`` and
    suffixed ``64_``); None without the compiled tier or without such a BLAS. The kernels that
    call it (``JOB_SGEMM``) compute what numpy's matmul computes, through the same BLAS,
    from a C job: a native program's step (``with_native``)."""
    if lib() is None:
        return None
    try:
        from threadpoolctl import threadpool_info

        paths = [p["filepath"] for p in threadpool_info() if p.get("internal_api") == "openblas" and p.get("filepath")]
    except Exception:  # noqa: BLE001 - no BLAS to find: the kernels use numpy's matmul
        return None
    for path in paths:
        try:
            blas = ctypes.CDLL(path)
        except OSError:
            continue
        for name, wide in (
            ("scipy_cblas_sgemm64_", True),
            ("cblas_sgemm64_", True),
            ("scipy_cblas_sgemm", False),
            ("cblas_sgemm", False),
        ):
            fn = getattr(blas, name, None)
            if fn is not None:
                return ctypes.cast(fn, ctypes.c_void_p).value or 0, wide
    return None


class BoundCalls:
    """A kernel's C jobs for one set of operands, kept while the same arrays come back (a
    context's arena views do, run after run): the argument blocks are built once, not per call.

    ``make(*operands)`` returns the jobs or None; entries are keyed by the last operand (the
    output), replaced whole (concurrent runs never see another's) and dropped at eight."""

    __slots__ = ("_make", "_bound")

    def __init__(self, make: Callable[..., list[NativeCall] | None]) -> None:
        self._make = make
        self._bound: dict[int, tuple[tuple[Any, ...], list[NativeCall] | None]] = {}

    def get(self, *operands: Any) -> list[NativeCall] | None:
        e = self._bound.get(id(operands[-1]))
        if e is not None and len(e[0]) == len(operands) and all(x is y for x, y in zip(e[0], operands)):
            return e[1]
        calls = self._make(*operands)
        if len(self._bound) >= 8:
            self._bound.clear()
        self._bound[id(operands[-1])] = (operands, calls)
        return calls


def run_calls(calls: Sequence[NativeCall]) -> None:
    """Run ``calls`` in order from Python, each split over an idle core when worth it
    (``kernels.parallel.split_native``): a kernel's own run of its native form.

    Raises:
        ExecutionError: a job failed (no memory for its scratch, a geometry that does not fit).
    """
    par = par_run()
    for c in calls:
        split_native(par, c.job, c.addr, c.total, worth=c.worth)
