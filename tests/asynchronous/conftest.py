"""What the async API's tests share: every test runs on asyncio and on trio (anyio's two
backends; trio where installed), over a memory with no embedder (no background
embedding thread)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from ledgermem import Memory
from tests.support import FakeClock

TRIO = pytest.param("trio", marks=pytest.mark.skipif(
    importlib.util.find_spec("trio") is None, reason="trio is not installed"))


@pytest.fixture(params=["asyncio", TRIO])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture
def memory(db_url: str, clock: FakeClock) -> Iterator[Memory]:
    sync = Memory.open(db_url, clock=clock, embedder=None)
    yield sync
    sync.close()
