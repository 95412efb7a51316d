"""Shared fixtures: every async test runs on asyncio and trio through anyio's plugin."""

from __future__ import annotations

import os

import pytest

# C splits back off after one that waited for a descheduled helper (csrc/par.c): on a busy test
# machine that would turn a split a test asserts into a whole run. Off for the suite and its
# children; tests/engines/test_native_backoff.py runs it in a child with the default.
os.environ.setdefault("AIOGE_SPLIT_BACKOFF_US", "0")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _tuning_sees_an_idle_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tuning times candidates by the wall clock, split over the idle cores, unless the machine
    is busy (``compiler.tuning._idle_cores``): tests that rank candidates by their sleeps see an
    idle one whatever the load of the machine running them; the busy case's tests set the load."""
    monkeypatch.setattr("aioge.compiler.tuning._load_average", lambda: 0.0)


@pytest.fixture(autouse=True)
def _isolated_kernel_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own default kernel cache dir, never the user's ~/atc_data.

    Tests that study the dir priority set or unset ASCEND_CACHE_PATH themselves.
    """
    monkeypatch.setenv("ASCEND_CACHE_PATH", str(tmp_path_factory.mktemp("atc_data")))


@pytest.fixture
def numpy_kernels(monkeypatch: pytest.MonkeyPatch):
    """Within the test, kernels built see no compiled tier (as on a machine without a C compiler):
    the pure-numpy fallback of every kernel that has a native path."""
    from aioge.kernels import native

    monkeypatch.setenv("AIOGE_NATIVE", "0")
    native.lib.cache_clear()
    native.function.cache_clear()
    yield
    monkeypatch.undo()
    native.lib.cache_clear()
    native.function.cache_clear()
