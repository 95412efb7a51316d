"""Intra-op parallelism through the engine lanes' CPU tokens, never through BLAS threads.

BLAS runs one thread per call (``runtime.blas``). A big kernel may still use an idle core:
``split_range`` hands half of its range to a helper thread when it can take an idle CPU token
without waiting. The tokens are the running run's: the runtime sets its engine workers'
semaphore with ``cpu_tokens`` around each program it runs (a context variable, so two sessions
with their own workers never see each other's tokens); outside a run there are none, and a
kernel runs whole. With every lane busy no token is free and the kernel runs whole too, so
streams never oversubscribe.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import numpy as np

__all__ = [
    "COMPUTE_ROWS",
    "CORES",
    "SPLIT_MACS",
    "cpu_tokens",
    "lend_tokens",
    "matmul_2d",
    "par_matmul",
    "return_tokens",
    "split_matmul",
    "split_native",
    "split_range",
    "wake_helpers",
]

# A GEMM of at least this many multiply-adds is worth splitting across an idle core (a
# helper-thread hop costs tens of microseconds; this is about a millisecond of work).
SPLIT_MACS = 1 << 24
# A batch of small GEMMs splits in halves of the batch from this many multiply-adds: BLAS runs
# them at a third of its big-GEMM speed, so 4M of them (BERT-base's 12-head 128x64 @ 64x128
# attention scores: 12.6M) take 0.2-0.5 ms on one core, well past the Python helper's hop.
BATCH_SPLIT_MACS = 1 << 22
COMPUTE_ROWS = 96  # split_matmul: from this many rows a product splits by the columns of any B

_lock = threading.Lock()

# The CPU tokens of the run whose kernels this thread (this context) is running.
_tokens: contextvars.ContextVar[threading.Semaphore | None] = contextvars.ContextVar("aioge_cpu_tokens", default=None)
_helpers: ThreadPoolExecutor | None = None


# The machine's cores, read once: os.cpu_count() reads sysfs on every call (6 us here), and the
# split functions ran it for every kernel, 19 times a MobileNetV3 run.
CORES = os.cpu_count() or 1


@contextlib.contextmanager
def cpu_tokens(tokens: threading.Semaphore | None) -> Iterator[None]:
    """Within the block, ``split_range`` may borrow idle tokens of ``tokens`` (the CPU semaphore
    of the engine workers running this run); the previous setting comes back after it."""
    lent = lend_tokens(tokens)
    try:
        yield
    finally:
        return_tokens(lent)


def lend_tokens(tokens: threading.Semaphore | None) -> Any:
    """``cpu_tokens`` without a generator (a microsecond less, for a run's hot path): what
    to give ``return_tokens`` in the same thread and context."""
    return _tokens.set(tokens)


def return_tokens(lent: Any) -> None:
    _tokens.reset(lent)


def _helper_pool() -> ThreadPoolExecutor:
    global _helpers
    with _lock:
        if _helpers is None:
            _helpers = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) - 1), thread_name_prefix="aioge-intra-op")
        return _helpers


def split_range(total: int, fn: Callable[[int, int], None], *, worth: bool = True) -> int:
    """Run ``fn(lo, hi)`` over ``[0, total)``: in two halves, one on a helper thread, when
    ``worth`` and an idle CPU token can be taken without waiting; else in one piece here.

    ``fn`` must write disjoint outputs for disjoint ranges. Returns the number of pieces.
    Errors of either half are raised here, after both halves ended.
    """
    tokens = _tokens.get()
    if not worth or total < 2 or tokens is None or CORES < 2 or not tokens.acquire(blocking=False):
        fn(0, total)
        return 1
    try:
        mid = total // 2
        fut = _helper_pool().submit(fn, mid, total)
        try:
            fn(0, mid)
        finally:
            exc = fut.exception()  # waits for the helper's half
        if exc is not None:
            raise exc
    finally:
        tokens.release()
    return 2


# Whether a run about to split wakes the C helpers first (AIOGE_PAR_WAKE=0: not; bench/twocore.py
# flips it run by run to compare).
WAKE = os.environ.get("AIOGE_PAR_WAKE", "1") != "0"
_wake: list[Any] = []


def wake_helpers() -> int:
    """Wake ``csrc/par.c``'s sleeping helpers (``aioge_par_wake``) as a run that may split is
    handed to its thread: they spin from now, so the run's first split finds one ready instead
    of waking it (a run after a 20 ms pause was 25-60% slower than back to back). Returns the
    helpers woken (0 without the C tier, or with ``WAKE`` off)."""
    if not _wake:
        from aioge.kernels import native

        _wake.append(native.function("aioge_par_wake") if CORES >= 2 else None)
    return int(_wake[0]()) if WAKE and _wake[0] is not None else 0


def split_native(par_run: Callable[[int, int, int, int], int], job: int, args: int, total: int, *, worth: bool = True) -> int:
    """``split_range`` for a C kernel: ``par_run`` is ``aioge_par_run`` (``csrc/par.c``), which
    runs ``job`` (its arguments at address ``args``) over ``[0, total)``, the upper half on a
    spinning C helper thread when told to split: no Python thread hop. It is told to when
    ``worth`` and an idle CPU token can be taken without waiting, as ``split_range`` decides.
    Returns the pieces (1 or 2).

    Raises:
        ExecutionError: the job failed (``par_run`` returned a negative code: no memory for
            its scratch, a geometry that does not fit its buffers).
    """
    tokens = _tokens.get()
    took = worth and total >= 2 and tokens is not None and CORES >= 2 and tokens.acquire(blocking=False)
    try:
        r = par_run(job, args, total, 1 if took else 0)
    finally:
        if took:
            tokens.release()  # type: ignore[union-attr]
    if r < 0:
        from aioge.kernels.native import check

        check(r, f"job {job}")
    return int(r)


def split_matmul(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> int:
    """``y = a @ b`` for 2-D operands, the columns of ``b`` and ``y`` in two halves over an idle
    core when ``b`` is a transposed view of a C-contiguous weight (ONNX Gemm's ``transB=1``, so
    each half reads one contiguous block of it) and the product has at least
    ``2 * SPLIT_MACS`` multiply-adds. Measured on 2 cores: AlexNet's and VGG's FC layers, batch
    1 and 64, 1.4-2x faster split; a row-major ``b`` gained nothing there (the product is
    bound by reading ``b``), so it splits only from ``COMPUTE_ROWS`` rows of ``a`` up, where
    BERT's and ViT's (128-197, 768) @ (768, 768 or 3072) ran 1.5-1.9x faster split by columns
    (1.3-1.7x by rows). Returns the number of pieces."""
    (m, k), n = a.shape, b.shape[1]
    splits = b.T.flags.c_contiguous or (m >= COMPUTE_ROWS and b.flags.c_contiguous)
    if m * k * n < 2 * SPLIT_MACS or n < 128 or not splits:
        np.matmul(a, b, out=y)
        return 1

    def part(lo: int, hi: int) -> None:
        np.matmul(a, b[:, lo:hi], out=y[:, lo:hi])

    return split_range(n, part)


def matmul_2d(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> int:
    """MatMul's ``y = a @ b`` for 2-D operands over an idle core: by the columns of ``b``
    where ``split_matmul`` takes it (a transposed weight, or ``COMPUTE_ROWS`` rows and more),
    else by the rows of ``a`` (``par_matmul``). Returns the number of pieces."""
    m, n = a.shape[0], b.shape[1]
    if n >= 128 and (b.T.flags.c_contiguous or (m >= COMPUTE_ROWS and b.flags.c_contiguous)):
        return split_matmul(a, b, y)
    return par_matmul(a, b, y)


def par_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> int:
    """``np.matmul(a, b, out=out)``, in two pieces over an idle core: by the batch when ``a``,
    ``b`` and ``out`` have the same leading axes (Winograd's 16 tile GEMMs, attention's heads)
    from ``BATCH_SPLIT_MACS`` multiply-adds, else from ``2 * SPLIT_MACS`` by the rows of ``a`` (2-D)
    and of ``out``. Used by the convolutions' GEMMs (im2col NHWC, 1x1, Winograd); on 2 cores
    the four 64-channel 56x56 conv branches ran in 25.1 ms against 29.8 whole. (light/
    models gain nothing: DuplicateFilterPass leaves their convs one filter wide.) Returns
    the number of pieces."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = 1
    for d in out.shape[:-2]:
        batch *= int(d)
    macs = batch * m * k * n
    if (
        a.ndim == b.ndim == out.ndim >= 3
        and a.shape[:-2] == b.shape[:-2] == out.shape[:-2]
        and batch >= 2
        and macs >= BATCH_SPLIT_MACS
        and out.flags.c_contiguous
    ):
        # one batch of matrices (the leading axes flattened: attention's (1, heads, ...)): halves of it
        a3, b3, o3 = a.reshape(batch, m, k), b.reshape(batch, k, n), out.reshape(batch, m, n)

        def part(lo: int, hi: int) -> None:
            np.matmul(a3[lo:hi], b3[lo:hi], out=o3[lo:hi])

        return split_range(batch, part)
    if macs < 2 * SPLIT_MACS:
        np.matmul(a, b, out=out)
        return 1
    if a.ndim != 2 or m < 2:
        np.matmul(a, b, out=out)
        return 1

    def rows(lo: int, hi: int) -> None:
        np.matmul(a[lo:hi], b, out=out[..., lo:hi, :])

    return split_range(m, rows)
