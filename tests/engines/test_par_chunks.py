"""csrc/par.c cuts a split range into up to 8 chunks (32 for the dense convs) whose sizes differ
by one at most: every unit of the range is run exactly once, for odd and small totals as for
large ones."""

from __future__ import annotations

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


def test_both_ends_hand_out_each_chunk_once() -> None:
    """The caller takes chunks from the front and the helper from the back: over many splits
    of short ranges (where the two meet at every chunk), each unit still runs exactly once."""
    par, backoff = native.par_run(), native.function("aioge_par_backoff")
    rng = np.random.default_rng(7)
    one = np.ones(1, np.float32)
    for total in rng.integers(2, 40, 300):
        y = np.zeros((int(total), 1), np.float32)
        call = native.binary("Add", y, one, y)
        backoff(0, 1, 0, 0)
        assert call is not None
        par(call.job, native.ptr(call.args), call.total, 1)
        np.testing.assert_array_equal(y, 1)
