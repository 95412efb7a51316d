"""BLAS threads: set once per process, before any worker runs a kernel.

Several engine lanes run kernels at once (streams and concurrent runs), so a BLAS call that
asks for every core oversubscribes them. OpenBLAS's limit is process-wide and threadpoolctl
is not thread-safe, so the limit is set once, at session start-up, never per call. A user who
sets ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` keeps that choice.

Intra-op parallelism goes through our own CPU tokens instead (``aioge.kernels.parallel``):
``split_range`` lets a big
kernel (a large convolution GEMM) hand half of its rows to a helper thread, with 1-thread BLAS
per half, but only when it can take an idle CPU token without waiting (``cpu_tokens``: the
semaphore of the engine workers running the run). With every lane busy no token is free and
the kernel runs whole, so concurrent streams never oversubscribe the cores.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

__all__ = ["blas_info", "configure_blas"]

log = logging.getLogger(__name__)

_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
_lock = threading.Lock()
_configured: list[dict[str, Any]] | None = None  # threadpool_info() after the one set-up
_limiter: Any = None  # keeps the threadpool_limits object alive; its limit stays in force


def configure_blas(threads: int = 1) -> list[dict[str, Any]]:
    """Limit BLAS pools to ``threads`` threads each, once per process; later calls do nothing.

    Returns threadpoolctl's description of the BLAS pools after the set-up (for traces and
    diagnostics). Call it before kernels run (it is blocking: about 20 ms the first time).
    """
    global _configured, _limiter
    with _lock:
        if _configured is not None:
            return _configured
        from threadpoolctl import ThreadpoolController

        # One scan of the loaded libraries for both the limit and the description (each scan
        # took 3-4 ms of a fresh process's start; info() reads the pools' current threads).
        pools = ThreadpoolController()
        user = [k for k in _ENV if os.environ.get(k)]
        if user:
            log.info("BLAS threads left as set by %s", ", ".join(user))
        else:
            _limiter = pools.limit(limits=max(1, threads), user_api="blas")
            log.info("BLAS limited to %d thread(s) per call: engine lanes run kernels in parallel", threads)
        _configured = [dict(p) for p in pools.info() if p.get("user_api") == "blas"]
        return _configured


def blas_info() -> list[dict[str, Any]]:
    """The BLAS pools as configured (empty until ``configure_blas`` ran)."""
    return list(_configured or [])
