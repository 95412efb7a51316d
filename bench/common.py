"""Shared helpers for the benchmarks: timing by medians, machine facts, yardsticks.

Every benchmark runs aioge and its yardsticks in one process, warmed up, several
repetitions, and reports medians and ratios (the machine is shared and noisy).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any, Callable

import numpy as np

__all__ = ["machine", "median_time", "ort_session", "print_table"]


def median_time(fn: Callable[[], Any], *, repeat: int = 7, warmup: int = 2, min_time: float = 0.0) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs after ``warmup`` runs.

    With ``min_time``, each sample loops ``fn`` until at least that long and divides.
    """
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        n = 0
        t0 = time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                break
        samples.append(elapsed / n)
    return statistics.median(samples)


def machine() -> dict[str, Any]:
    """Machine, versions and BLAS facts for a results header."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", "(unset)"),
    }
    try:
        from threadpoolctl import threadpool_info

        blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if blas:
            info["blas"] = f"{blas[0].get('internal_api')} {blas[0].get('version')} {blas[0].get('architecture')} x{blas[0].get('num_threads')}"
    except Exception:  # threadpoolctl is optional for the header only
        pass
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    import aioge

    info["aioge"] = aioge.__version__
    return info


def ort_session(model: Any, threads: int | None = None) -> Any:
    """An onnxruntime CPU session for a ModelProto or path (default options, or intra_op threads)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    data = model if isinstance(model, (str, bytes)) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A markdown table of ``rows``; returns it and prints it."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |")
    text = "\n".join(lines)
    print(text)
    return text
