"""csrc/par.c cuts a split range into up to 8 chunks (32 for the dense convs) whose sizes differ
by one at most: every unit of the range is run exactly once, for odd and small totals as for
large ones."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from aioge.kernels import native

pytestmark = pytest.mark.skipif(native.par_run() is None, reason="needs the C tier")


@pytest.mark.parametrize("total", [*range(2, 21), 33, 49, 203, 784, 1001, 2092])
def test_a_split_runs_every_unit_once(total: int) -> None:
    """y += 1 in place over ``total`` rows of 3 values (a row twice would add 2, a row skipped 0),
    split over the helper, and whole: the same as numpy's."""
    par, backoff = native.par_run(), native.function("aioge_par_backoff")
    base = np.arange(total * 3, dtype=np.float32).reshape(total, 3)
    one = np.ones(1, np.float32)
    outs = []
    for split in (1, 0):
        y = base.copy()
        call = native.binary("Add", y, one, y)
        backoff(0, 1, 0, 0)  # a split that did not lose: ends any back-off an earlier test left
        assert call is not None and call.total == total
        threads = par(call.job, native.ptr(call.args), call.total, split)
        assert threads == (2 if split and native.function("aioge_par_helpers")() else 1)
        outs.append(y)
    np.testing.assert_array_equal(outs[0], base + 1)
    np.testing.assert_array_equal(outs[0], outs[1])


def _split_once(total: int) -> np.ndarray:
    """y += 1 over ``total`` rows, split; y afterwards."""
    par, backoff = native.par_run(), native.function("aioge_par_backoff")
    y = np.zeros((total, 1), np.float32)
    call = native.binary("Add", y, np.ones(1, np.float32), y)
    backoff(0, 1, 0, 0)  # a split that did not lose: ends any back-off an earlier test left
    assert call is not None
    par(call.job, native.ptr(call.args), call.total, 1)
    return y


def test_both_halves_hand_out_each_chunk_once() -> None:
    """The caller takes its half of the chunks and the helper the other, each stealing from the
    other's end: over many splits of short ranges, each unit still runs exactly once."""
    rng = np.random.default_rng(7)
    for total in rng.integers(2, 40, 300):
        np.testing.assert_array_equal(_split_once(int(total)), 1)


@pytest.mark.skipif(native.par_run() is None or not native.function("aioge_par_helpers")(), reason="one core: no helper")
def test_the_helper_runs_one_run_from_the_second_half() -> None:
    """The partition: chunks [0, mid) are the caller's and [mid, n) the helper's (mid the
    ceiling of half), each run in order from its start while the other steals from its end, so
    the helper's chunks are one run [a, b) with a <= mid <= b (empty when it took none) and the
    caller ran the rest; every chunk once. An owner takes a quarter of both halves' chunks left
    (at least one) as one range, a thief one chunk a range: fewer ranges than chunks. Under load
    the caller may run none (it asserted one, and failed twice at load 8)."""
    last = np.zeros(6, np.int64)
    par_last = native.lib().aioge_par_last  # a test hook, not in native.SIGNATURES
    par_last.argtypes, par_last.restype = (ctypes.c_void_p,), None
    rng = np.random.default_rng(11)
    ranges = chunks = 0
    for total in [*range(2, 40), *rng.integers(40, 3000, 100)]:
        np.testing.assert_array_equal(_split_once(int(total)), 1)
        par_last(native.ptr(last))
        n, mid, caller, helper, caller_calls, helper_calls = (int(v) for v in last)
        assert n == min(int(total), 8) and mid == (n + 1) // 2
        full = (1 << n) - 1
        assert caller & helper == 0 and caller | helper == full, (total, bin(caller), bin(helper))
        a, b = ((helper & -helper).bit_length() - 1, helper.bit_length()) if helper else (mid, mid)
        assert helper == ((1 << b) - 1) & ~((1 << a) - 1) and a <= mid <= b, (total, bin(helper))
        # a caller descheduled after posting may find every chunk taken (the helper steals its half)
        assert (caller_calls > 0) == (caller > 0) and caller_calls <= caller.bit_count() and helper_calls <= helper.bit_count()
        ranges, chunks = ranges + caller_calls, chunks + caller.bit_count()
    assert ranges < chunks * 0.9, (ranges, chunks)  # one chunk a range: equal (0.75 measured)
