"""Fixtures: a real SQLite file under ``tmp_path`` with a hand-driven clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledgermem import Memory, UserMemory
from tests.support import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def mem(tmp_path, clock: FakeClock) -> Iterator[Memory]:
    # embedder=None: keyword-only search, no background thread, no model to load.
    memory = Memory.open(tmp_path / "m.db", clock=clock, embedder=None)
    yield memory
    memory.close()


@pytest.fixture
def alice(mem: Memory) -> UserMemory:
    return mem.for_user("alice")


@pytest.fixture
def bob(mem: Memory) -> UserMemory:
    return mem.for_user("bob")


@pytest.fixture
def vector_mem(tmp_path, clock: FakeClock) -> Iterator[Memory]:
    """Hybrid search with the deterministic offline ``HashEmbedder`` (no model download)."""
    from ledgermem.testing import HashEmbedder

    memory = Memory.open(tmp_path / "v.db", clock=clock, embedder=HashEmbedder())
    yield memory
    memory.close()
