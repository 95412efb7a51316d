"""Runtime fixtures: an engine worker pool per test, stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aioge.runtime.workers import EngineWorkers


@pytest.fixture
def workers() -> Iterator[EngineWorkers]:
    pool = EngineWorkers()
    yield pool
    pool.close()
