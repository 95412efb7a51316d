"""Splits back off on a busy machine: a split whose caller waited for a descheduled helper stops
splitting for a window (csrc/par.c, AIOGE_SPLIT_BACKOFF_US). The suite runs with the back-off off
(tests/conftest.py) so that tests asserting a split stay deterministic; these run in a child."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aioge.kernels import native

pytestmark = pytest.mark.skipif(native.par_run() is None, reason="needs the C tier")

_CHILD = r"""
import json, time
import numpy as np
from aioge.kernels import native
backoff, stats = native.function("aioge_par_backoff"), native.function("aioge_par_stats")
par = native.par_run()
a = np.ones((256, 256), np.float32)
y = np.empty_like(a)
call = native.binary("Add", a, a, y)
def split():
    return par(call.job, native.ptr(call.args), call.total, 1)
def counters():
    out = np.zeros(5, np.int64)
    stats(native.ptr(out))
    return out.tolist()[:3]
now = time.monotonic_ns()
out = {"helpers": native.function("aioge_par_helpers")()}
# A caller that spent 80 us on its 4 chunks (20 us a chunk) and then waited 2 ms for the helper's.
out["lost"] = [max(backoff(80_000, 4, 2_000_000, now) - now, 0) for _ in range(2)]  # the window, 0: none
out["in_window"] = split()
out["kept"] = backoff(80_000, 4, 250_000, now)  # within 1.5 chunks + 250 us: not lost
out["after"] = split()
out["counters"] = counters()
out["sum_ok"] = bool((y == 2).all())
print(json.dumps(out))
"""


def _child(backoff_us: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "AIOGE_SPLIT_BACKOFF_US"}
    if backoff_us is not None:
        env["AIOGE_SPLIT_BACKOFF_US"] = backoff_us
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_lost_split_stops_splits_for_a_doubling_window_and_a_good_one_ends_it() -> None:
    out = _child(None)  # the default: a 10 ms first window
    assert out["lost"] == [10_000_000, 20_000_000]
    assert out["in_window"] == 1  # run whole, as the window says
    assert out["kept"] == 0
    if out["helpers"]:  # two cores or more: the split runs again
        assert out["after"] == 2
    splits, lost, skipped = out["counters"]  # the last split is judged too: lost if the machine is busy
    assert lost in (2, 3) and skipped == 1 and splits == 3 + (1 if out["helpers"] else 0)
    assert out["sum_ok"]


def test_the_back_off_is_set_or_turned_off_from_the_environment() -> None:
    assert _child("500")["lost"] == [500_000, 1_000_000]
    off = _child("0")
    assert off["lost"] == [0, 0] and off["in_window"] == (2 if off["helpers"] else 1)
