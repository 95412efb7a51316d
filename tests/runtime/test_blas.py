"""BLAS threads are limited once, at session start, to one per engine lane."""

from __future__ import annotations

import os

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
