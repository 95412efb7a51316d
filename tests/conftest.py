"""Shared fixtures: every async test runs on asyncio and trio through anyio's plugin."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _isolated_kernel_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own default kernel cache dir, never the user's ~/atc_data.

    Tests that study the dir priority set or unset ASCEND_CACHE_PATH themselves.
    """
    monkeypatch.setenv("ASCEND_CACHE_PATH", str(tmp_path_factory.mktemp("atc_data")))
