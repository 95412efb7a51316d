"""BLAS threads are limited once, at session start, to one per engine lane."""

from __future__ import annotations

import contextvars
import os

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import aioge
from aioge.runtime.blas import blas_info, configure_blas

pytestmark = pytest.mark.anyio

_USER_SET = any(os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"))


@pytest.mark.skipif(_USER_SET, reason="the user's BLAS thread setting is respected")
async def test_session_start_limits_blas_to_one_thread_per_lane() -> None:
    async with aioge.Session():
        pools = [p for p in threadpool_info() if p["user_api"] == "blas"]
        assert pools and all(p["num_threads"] == 1 for p in pools)
        assert blas_info() and all(p["num_threads"] == 1 for p in blas_info())
    # Set once: a later call (asking for more) changes nothing, so no limit flips under running kernels.
    assert configure_blas(8) == blas_info()
    assert all(p["num_threads"] == 1 for p in threadpool_info() if p["user_api"] == "blas")


def test_split_range_uses_an_idle_token_and_gives_it_back(monkeypatch) -> None:
    import threading

    import numpy as np

    from aioge.kernels import parallel

    tokens = threading.Semaphore(2)
    monkeypatch.setattr(parallel, "_tokens", contextvars.ContextVar("tokens", default=tokens))
    out = np.zeros(10)
    threads: set[str] = set()

    def fn(lo: int, hi: int) -> None:
        threads.add(threading.current_thread().name)
        out[lo:hi] += np.arange(lo, hi)

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: never split")
    assert parallel.split_range(10, fn) == 2
    np.testing.assert_array_equal(out, np.arange(10))  # every index exactly once
    assert len(threads) == 2 and tokens._value == 2
    # No idle token (every lane computing): one piece, on the calling thread.
    tokens.acquire()
    tokens.acquire()
    assert parallel.split_range(10, fn) == 1
    assert parallel.split_range(10, fn, worth=False) == 1
    tokens.release()
    assert parallel.split_range(1, fn) == 1  # nothing to split
    np.testing.assert_array_equal(out, 3 * np.arange(10))


def test_split_range_raises_the_helper_half_error_after_both_halves(monkeypatch) -> None:
    import threading

    from aioge.kernels import parallel

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: never split")
    tokens = threading.Semaphore(1)
    monkeypatch.setattr(parallel, "_tokens", contextvars.ContextVar("tokens", default=tokens))
    done: list[tuple[int, int]] = []

    def fn(lo: int, hi: int) -> None:
        if lo > 0:
            raise ValueError(f"rows {lo}..{hi}")
        done.append((lo, hi))

    with pytest.raises(ValueError, match="rows 4..8"):
        parallel.split_range(8, fn)
    assert done == [(0, 4)] and tokens._value == 1


def test_split_matmul_matches_whole_and_splits_only_transposed_weights() -> None:
    import threading

    from aioge.kernels import parallel

    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4096), dtype=np.float32)
    w = rng.standard_normal((4096, 4096), dtype=np.float32)  # stored (N, K): Gemm transB=1
    with parallel.cpu_tokens(threading.Semaphore(2)):
        y = np.empty((3, 4096), np.float32)
        assert parallel.split_matmul(a, w.T, y) == 2
        np.testing.assert_allclose(y, a @ w.T, rtol=1e-4, atol=1e-3)
        y2 = np.empty_like(y)
        assert parallel.split_matmul(a, w, y2) == 1  # row-major b and 3 rows: bound by reading b, runs whole
        np.testing.assert_allclose(y2, a @ w, rtol=1e-4, atol=1e-3)
        small = np.empty((3, 8), np.float32)
        assert parallel.split_matmul(a, w.T[:, :8], small) == 1


def test_par_matmul_splits_big_products_by_batch_or_rows_and_matches_whole() -> None:
    import threading

    from aioge.kernels import parallel

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: never split")
    rng = np.random.default_rng(4)
    with parallel.cpu_tokens(threading.Semaphore(2)):
        # Winograd's shape: 16 batched GEMMs; split by the batch.
        u, v = rng.standard_normal((16, 128, 256), dtype=np.float32), rng.standard_normal((16, 256, 784), dtype=np.float32)
        mm = np.full((16, 128, 784), np.nan, np.float32)
        assert parallel.par_matmul(u, v, mm) == 2
        np.testing.assert_allclose(mm, u @ v, rtol=1e-4, atol=1e-3)
        # A 1x1 conv: (M, C) @ (N, C, HW) into (N, M, HW); split by the rows of the weight.
        w, x = rng.standard_normal((256, 512), dtype=np.float32), rng.standard_normal((2, 512, 196), dtype=np.float32)
        y = np.full((2, 256, 196), np.nan, np.float32)
        assert parallel.par_matmul(w, x, y) == 2
        np.testing.assert_allclose(y, w @ x, rtol=1e-4, atol=1e-3)
        # im2col: (rows, K) @ (K, M).
        cols, wm = rng.standard_normal((3136, 576), dtype=np.float32), rng.standard_normal((576, 64), dtype=np.float32)
        out = np.full((3136, 64), np.nan, np.float32)
        assert parallel.par_matmul(cols, wm, out) == 2
        np.testing.assert_allclose(out, cols @ wm, rtol=1e-4, atol=1e-3)
        # Attention: (1, heads, tokens, d) @ (1, heads, d, tokens), the keys a transposed view;
        # split by the 12 heads from BATCH_SPLIT_MACS (12.6M) on.
        q = rng.standard_normal((1, 12, 128, 64), dtype=np.float32)
        keys = rng.standard_normal((1, 12, 128, 64), dtype=np.float32)
        scores = np.full((1, 12, 128, 128), np.nan, np.float32)
        assert parallel.par_matmul(q, np.swapaxes(keys, -1, -2), scores) == 2
        np.testing.assert_allclose(scores, q @ np.swapaxes(keys, -1, -2), rtol=1e-4, atol=1e-3)
        few = np.empty((1, 2, 16, 16), np.float32)
        assert parallel.par_matmul(q[:, :2, :16], np.swapaxes(keys, -1, -2)[:, :2, :, :16], few) == 1
        small = np.empty((8, 8), np.float32)
        assert parallel.par_matmul(cols[:8], wm[:, :8], small) == 1  # too small to be worth a helper
        np.testing.assert_allclose(small, cols[:8] @ wm[:, :8], rtol=1e-5, atol=1e-4)


def test_matmul_2d_splits_compute_bound_products_by_columns_of_a_row_major_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """BERT's (128, 768) @ (768, 768): from COMPUTE_ROWS rows a row-major weight splits by its
    columns; fewer rows split by the rows of ``a``; both equal the whole product."""
    import threading

    from aioge.kernels import parallel

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: never split")
    by_columns: list[tuple[int, ...]] = []
    real = parallel.split_matmul

    def spy(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> int:
        by_columns.append(a.shape)
        return real(a, b, y)

    monkeypatch.setattr(parallel, "split_matmul", spy)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((768, 768), dtype=np.float32)  # ONNX MatMul's (K, N) weight, row-major
    with parallel.cpu_tokens(threading.Semaphore(2)):
        a = rng.standard_normal((parallel.COMPUTE_ROWS + 32, 768), dtype=np.float32)
        y = np.full((a.shape[0], 768), np.nan, np.float32)
        assert parallel.matmul_2d(a, w, y) == 2
        assert by_columns == [a.shape]
        np.testing.assert_allclose(y, a @ w, rtol=1e-4, atol=1e-3)
        short = rng.standard_normal((64, 768), dtype=np.float32)
        w_wide = rng.standard_normal((768, 1024), dtype=np.float32)
        y2 = np.full((64, 1024), np.nan, np.float32)
        assert parallel.matmul_2d(short, w_wide, y2) == 2  # by rows: too few for the columns rule
        assert by_columns == [a.shape]
        np.testing.assert_allclose(y2, short @ w_wide, rtol=1e-4, atol=1e-3)
