"""PostgreSQL-only fixtures. The server, its database, the non-superuser role and
the schema per test (``pg_admin_url``, ``pg_database``, ``pg_url``: a pooled, migrated
schema for a test that uses ``pg_store`` or ``pg_memory``, a fresh, empty one for a
test that asks for ``pg_url`` alone) are in ``tests/conftest.py``, shared with the
contract tests that run on both backends.

The stores under test connect as a role that owns its tables but is no superuser,
so row-level security (forced on the owner) is live in every test: a statement that
forgot its user would see nothing and the test would fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledgermem import Memory
from ledgermem.store.postgres import PostgresStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    yield store
    store.close()


@pytest.fixture
def pg_memory(pg_store: PostgresStore, clock: FakeClock) -> Iterator[Memory]:
    """Hybrid search over PostgreSQL with the offline ``HashEmbedder``."""
    memory = Memory(pg_store, embedder=HashEmbedder(), clock=clock)
    yield memory
    memory.close()
