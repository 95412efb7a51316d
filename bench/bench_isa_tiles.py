"""One-thread CPU time of the C GEMM and direct convs beside OpenBLAS, on the ISA tier this
process runs. From the repository root:

    AIOGE_SPIN_US=0 OPENBLAS_NUM_THREADS=1 AIOGE_ISA=avx2 python bench/bench_isa_tiles.py
    AIOGE_SPIN_US=0 OPENBLAS_NUM_THREADS=1 AIOGE_ISA=baseline python bench/bench_isa_tiles.py

Weights are read-only, so each kernel packs them once; figures are medians of 15 calls in ms.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np


def _cpu_ms(fn: Callable[[], Any], n: int = 15) -> float:
    times = []
    for _ in range(n):
        t = time.thread_time()
        fn()
        times.append(time.thread_time() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests' kernel builder
    from tests.engines._native_child import kernel

    from aioge.kernels import native

    rng = np.random.default_rng(0)

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    cases = {
        "conv 64x56x56 3x3": ("Conv", "conv_direct_native", [f(1, 64, 56, 56), f(64, 64, 3, 3), f(64)], {"pads": [1] * 4}),
        "gemm 128x768x768": ("Gemm", "gemm_native", [f(128, 768), f(768, 768), f(768)], {}),
        "conv 1x1 256x14x14": ("Conv", "conv_direct_native", [f(1, 256, 14, 14), f(256, 256, 1, 1), f(256)], {}),
    }
    out = {}
    for name, (op, impl, ins, attrs) in cases.items():
        for a in ins[1:]:
            a.setflags(write=False)
        run = kernel(op, impl, {}, ins, attrs)
        run()
        out[name] = _cpu_ms(run)
    a, b = cases["gemm 128x768x768"][2][:2]
    out["OpenBLAS gemm 128x768x768"] = _cpu_ms(lambda: a @ b)
    print(native.describe())
    for name, ms in out.items():
        print(f"{name:28s} {ms:8.2f} ms")


if __name__ == "__main__":
    main()
