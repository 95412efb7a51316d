"""The C tier's one error rule and its empty outputs (issue 37 items 4 and 5, issue 40 item 3).

Negative is an error everywhere: ``aioge_par_run`` passes a job's negative code on (it turned
the depthwise conv's -1 into +1, and callers testing ``< 0`` left the output unwritten), and
the Python side raises an ``ExecutionError`` on any negative return. Every allocation of the
tier can be made to fail (``native.fail_alloc``); each site then reports no memory. A
depthwise conv whose output has a zero-size dim computes nothing (its padded extent was
negative and its scratch about 2^64 bytes: a SIGSEGV). The kernels run in a child process, so
a crash fails the test instead of killing pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aioge.errors import ExecutionError
from aioge.kernels import native
from aioge.kernels.parallel import split_native

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")


def _child(what: str) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.engines._native_child", what],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"the child ended with {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_each_allocation_site_that_fails_raises_execution_error_never_silent_output() -> None:
    rows = _child("alloc")
    assert len(rows) == 10  # every site of _native_child.SITES, and the program queue
    for r in rows:
        assert r["failed"] and not r["other"], r  # some allocation of it failed, each one an ExecutionError


def test_depthwise_convs_with_an_empty_output_dim_return_it_empty() -> None:
    rows = _child("empty")
    assert len(rows) == 7
    for r in rows:
        assert r["y"] == r["ref"] and 0 in r["y"], r


def test_every_c_candidate_runs_inputs_with_a_zero_size_dim() -> None:
    """Convs, pools, GEMMs and row kernels: the output of its inferred (empty) shape, no crash
    (a direct conv with no input channels divided by zero; an empty B failed to pack)."""
    rows = _child("zero")
    assert len(rows) >= 60
    for r in rows:
        assert r["got"] == r["want"], r
    assert {r["impl"] for r in rows} >= {"conv_depthwise_native", "conv_direct_native", "pool_native", "gemm_native"}


def test_par_run_passes_a_jobs_error_on_and_python_raises_it() -> None:
    par = native.par_run()
    x, w, y = np.ones((1, 4, 5, 5), np.float32), np.ones((4, 1, 3, 3), np.float32), np.full((1, 4, 3, 3), np.nan, np.float32)
    geometry = np.array([4, 5, 5, 1, 3, 3, 0, 1, 1, 1, 0, 0, 3, 3, 0, 0, 0, 0], np.int64)  # stride 0: no conv has it
    args = np.array([native.ptr(x), native.ptr(w), 0, native.ptr(y), native.ptr(geometry), 16, 4, x.size, y.size], np.int64)
    assert par(native.JOB_DEPTHWISE, native.ptr(args), 1, 0) == -2  # was +2: "success", output unwritten
    with pytest.raises(ExecutionError, match=r"job 3: .*a geometry that does not fit its buffers \(-2\)"):
        split_native(par, native.JOB_DEPTHWISE, native.ptr(args), 1)
    assert np.isnan(y).all()
    assert par(99, native.ptr(args), 1, 0) == -1000
    entries = np.array([native.JOB_DEPTHWISE, native.ptr(args), 1, 0], np.int64)
    failed = np.zeros(1, np.int64)
    assert native.run_jobs()(native.ptr(entries), 1, 0, native.ptr(failed)) == -2 and failed[0] == 0
    geometry[6] = 1  # the real geometry runs
    assert split_native(par, native.JOB_DEPTHWISE, native.ptr(args), 1) == 1 and np.isfinite(y).all()


def test_a_job_whose_geometry_reaches_past_its_buffers_writes_nothing() -> None:
    """The checked boundary: each windowed job is told its buffers' sizes and checks its
    geometry against them at entry (a geometry made up by a crafted .om)."""
    par = native.par_run()
    x, w = np.ones((1, 4, 5, 5), np.float32), np.ones((4, 1, 3, 3), np.float32)
    y = np.full((1, 4, 3, 3), np.nan, np.float32)
    geometry = np.array([4, 5, 5, 1, 3, 3, 1, 1, 1, 1, 0, 0, 3, 3, 0, 0, 0, 0], np.int64)
    for xn, yn, planes in ((x.size, y.size - 1, 4), (x.size - 1, y.size, 4), (x.size, y.size, 5)):
        args = np.array([native.ptr(x), native.ptr(w), 0, native.ptr(y), native.ptr(geometry), 16, planes, xn, yn], np.int64)
        assert par(native.JOB_DEPTHWISE, native.ptr(args), 1, 0) == -2
    assert np.isnan(y).all()
    pool = np.array([5, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 3, 3, 0, 0, 0], np.int64)
    for xn, yn, planes in ((x.size, y.size - 1, 4), (x.size - 1, y.size, 4), (x.size, y.size, 5)):
        args = np.array([native.ptr(x), native.ptr(y), native.ptr(pool), 0, planes, xn, yn], np.int64)
        assert par(native.JOB_POOL, native.ptr(args), planes, 0) == -2
    assert np.isnan(y).all()
    args = np.array([native.ptr(x), native.ptr(y), native.ptr(pool), 0, 4, x.size, y.size], np.int64)
    assert par(native.JOB_POOL, native.ptr(args), 4, 0) == 1 and (y == 1).all()
