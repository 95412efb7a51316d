"""A run that may split wakes csrc/par.c's sleeping helper as it is handed to its thread
(aioge_par_wake, kernels.parallel.wake_helpers), so the run's first split finds it spinning."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from aioge.kernels import native, parallel

pytestmark = pytest.mark.skipif(native.par_run() is None, reason="needs the C tier")

_CHILD = r"""
import json, time
import numpy as np
from aioge.kernels import native
wake, backoff = native.function("aioge_par_wake"), native.function("aioge_par_backoff")
par = native.par_run()
a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
y = np.zeros_like(a)
call = native.binary("Add", a, a, y)
out = {"helpers": native.function("aioge_par_helpers")(), "before": wake()}  # no helper started yet
out["first"] = par(call.job, native.ptr(call.args), call.total, 1)
woken, deadline = 0, time.monotonic() + 20
while not woken and time.monotonic() < deadline:  # AIOGE_SPIN_US=0: the helper sleeps right after a job
    time.sleep(0.002)
    woken = wake()
out["woken"] = woken
y[:] = 0
out["after"] = par(call.job, native.ptr(call.args), call.total, 1)  # split with the woken helper
out["sum_ok"] = bool((y == 2 * a).all())
now = time.monotonic_ns()
backoff(80_000, 4, 2_000_000, now)  # a lost split: a back-off window from now
time.sleep(0.002)
out["in_backoff"] = wake()
print(json.dumps(out))
"""


def test_a_sleeping_helper_is_woken_with_no_job_and_splits_after() -> None:
    env = {**os.environ, "AIOGE_SPIN_US": "0", "AIOGE_SPLIT_BACKOFF_US": "1000000"}
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == 0
    if not out["helpers"]:  # one core: no helper to wake, every job whole
        assert out["first"] == out["after"] == 1 and out["woken"] == 0
    else:
        assert out["first"] == 2 and out["woken"] == 1 and out["after"] == 2
    assert out["sum_ok"]
    assert out["in_backoff"] == 0, "splits back off: no helper is woken to spin for nothing"


# A child's start: one Add split over the helper threads (which leaves the helper idle)
_ONE_SPLIT = r"""
import json, os, time
import numpy as np
from aioge.kernels import native
wake, par = native.function("aioge_par_wake"), native.par_run()
a = np.ones((64, 64), np.float32)
y = np.zeros_like(a)
call = native.binary("Add", a, a, y)
out = {"helpers": native.function("aioge_par_helpers")(), "split": par(call.job, native.ptr(call.args), call.total, 1)}
"""

_DESCHEDULED = (
    _ONE_SPLIT
    + r"""
cpu = sorted(os.sched_getaffinity(0))[0]
for tid in os.listdir("/proc/self/task"):  # every thread, the spinning helper too, on one CPU
    os.sched_setaffinity(int(tid), {cpu})
woken = 0
for _ in range(int(os.environ["TRIES"])):  # this thread computes: the helper waits for the CPU
    t = time.perf_counter()
    while time.perf_counter() - t < 0.02:
        pass
    woken = wake()
    if woken:
        break
out["woken"] = woken
print(json.dumps(out))
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs sched_setaffinity")
@pytest.mark.parametrize(("desched_us", "tries", "asleep"), [(None, 100, True), ("0", 5, False)])
def test_a_helper_descheduled_while_spinning_sleeps(desched_us: str | None, tries: int, asleep: bool) -> None:
    """A spinning helper that another thread kept off its CPU (longer than DESCHED_NS between
    two looks) sleeps at once, however long its spin had left (AIOGE_SPIN_US 10 s here), so a
    post wakes it with the scheduler's wake-up preference; AIOGE_SPIN_DESCHED_US=0 keeps it
    spinning."""
    env = {**os.environ, "AIOGE_SPIN_US": "10000000", "TRIES": str(tries)}
    env.pop("AIOGE_SPIN_DESCHED_US", None)
    if desched_us is not None:
        env["AIOGE_SPIN_DESCHED_US"] = desched_us
    proc = subprocess.run([sys.executable, "-c", _DESCHEDULED], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["helpers"]:  # one core: no helper, every job whole
        assert out["split"] == 1 and out["woken"] == 0
        return
    assert out["split"] == 2
    assert out["woken"] == (1 if asleep else 0)


_WAKE_SPIN = (
    _ONE_SPLIT
    + r"""
end = time.monotonic() + 20
while out["helpers"] and not wake() and time.monotonic() < end:  # AIOGE_SPIN_US=0: asleep right after the job
    time.sleep(0.002)
awake = 0
while out["helpers"] and not awake and time.monotonic() < end:  # woken (wake() 0: not asleep) or slept again
    time.sleep(0.002)
    awake = int(not wake()) if os.environ["AIOGE_WAKE_SPIN_US"] != "0" else 1
time.sleep(0.05)
out["later"] = wake()  # 0: the helper still spins its wake window
out["split_after"] = par(call.job, native.ptr(call.args), call.total, 1)
out["sum_ok"] = bool((y == 2 * a).all())
stats = np.zeros(5, np.int64)
native.function("aioge_par_stats")(native.ptr(stats))
out["stats"] = stats.tolist()  # splits, lost, whole in back-off, helper chunks, helper sleeps
print(json.dumps(out))
"""
)


@pytest.mark.parametrize(("wake_spin_us", "later"), [("1000000", 0), ("0", 1)])
def test_a_helper_woken_with_no_job_spins_its_wake_window(wake_spin_us: str, later: int) -> None:
    """A helper woken with no job spins AIOGE_WAKE_SPIN_US (not AIOGE_SPIN_US, 0 here) before it
    sleeps again, so a lane that takes longer than SPIN_US to start after an idle pause finds
    it spinning at the first split; AIOGE_WAKE_SPIN_US=0: asleep again at once."""
    env = {**os.environ, "AIOGE_SPIN_US": "0", "AIOGE_SPIN_DESCHED_US": "0", "AIOGE_WAKE_SPIN_US": wake_spin_us}
    proc = subprocess.run([sys.executable, "-c", _WAKE_SPIN], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["helpers"]:  # one core: no helper, every job whole
        assert out["split"] == out["split_after"] == 1 and out["later"] == 0
    else:
        assert out["split"] == out["split_after"] == 2 and out["later"] == later
        splits, _, _, chunks, sleeps = out["stats"]
        assert splits == 2 and 0 <= chunks <= 2 * 8, "the helper took some of the 2 splits' 8 chunks each"
        assert sleeps >= 1, "it slept after the first job (AIOGE_SPIN_US=0): the wake found it asleep"
    assert out["sum_ok"]


def test_wake_helpers_is_off_with_wake_off(monkeypatch) -> None:
    monkeypatch.setattr(parallel, "WAKE", False)
    assert parallel.wake_helpers() == 0


@pytest.mark.anyio
async def test_a_native_run_handed_to_a_lane_wakes_the_helpers_first(monkeypatch) -> None:
    import aioge
    from aioge.examples import EXAMPLES
    from aioge.runtime import executor
    from aioge.runtime.schedule import Placement

    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))  # a native program, whatever tuning finds
    calls: list[int] = []
    monkeypatch.setattr(executor, "wake_helpers", lambda: calls.append(1) or 0)
    graph, feeds, reference = EXAMPLES["cnn"](batch=2)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        await s.run_graph(1, feeds)
        exe, workers = s.executable(1), s._engines.workers
        assert exe.native_ok
        calls.clear()
        got = await exe.run(feeds, workers=workers, placement=Placement.LANE_SPLIT)
        assert len(calls) == (1 if parallel.CORES >= 2 else 0)
        calls.clear()
        await exe.run(feeds, workers=workers, placement=Placement.LANE_WHOLE)  # one core: nothing to wake
        assert calls == []
    for k, want in reference(feeds).items():
        np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-5)
