"""A PostgreSQL server that goes away: store calls fail at once with a clear
``StorageError`` (not after the pool's whole wait), and work again once it is back;
a pool that is only busy is still waited for."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermem import Memory, StorageError
from ledgermem.store import pg_connection
from ledgermem.store.postgres import PostgresStore
from ledgermem.types import ItemQuery
from tests.conftest import _server_directory, started_pgserver


@pytest.fixture
def own_server() -> Iterator[tuple[Path, Any]]:
    """A PostgreSQL server of this test's own, to stop and start again."""
    with _server_directory() as directory:
        server = started_pgserver(directory, "stop")
        yield directory, server
        server.cleanup()


def test_calls_fail_at_once_while_the_server_is_down_and_work_once_it_is_back(
        own_server: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    directory, server = own_server
    waits: list[float | None] = []
    memory = Memory.open(str(server.get_uri()), embedder=None)
    getconn = memory.store._pool.getconn   # type: ignore[attr-defined]

    def counted(timeout: float | None = None) -> Any:
        waits.append(timeout)
        return getconn(timeout=timeout)

    monkeypatch.setattr(memory.store._pool, "getconn", counted)  # type: ignore[attr-defined]
    try:
        alice = memory.for_user("alice")
        kept = alice.remember("Lives in Lisbon", "fact")
        server.cleanup()                              # the server stops
        waits.clear()
        for call in (lambda: alice.search("Lisbon"), lambda: alice.remember("Cycles", "fact")):
            with pytest.raises(StorageError, match=r"unreachable|terminating|closed|bad"):
                call()
        # No call waited out the pool's whole wait: the ones that waited gave up after
        # the probe found the server gone.
        assert pg_connection.POOL_WAIT_S - pg_connection.PROBE_AFTER_S not in waits
        with pytest.raises(StorageError, match="PostgreSQL is unreachable"):
            alice.get(kept.id)
        server = started_pgserver(directory, "stop")           # back, on the same files
        assert alice.get(kept.id).content == "Lives in Lisbon"
        assert [hit.item.id for hit in alice.search("Lisbon") if hit.item] == [kept.id]
    finally:
        memory.close()
        server.cleanup()


def test_a_busy_pool_is_waited_for(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pooled connection taken, the server up: a call waits past the probe and
    gets one when it is given back."""
    monkeypatch.setattr(pg_connection, "PROBE_AFTER_S", 0.05)
    store = PostgresStore(pg_url, max_size=1)
    memory = Memory(store, embedder=None)
    try:
        alice = memory.for_user("alice")
        alice.remember("Lives in Lisbon", "fact")
        held = threading.Event()

        def hold() -> None:
            with store.reading():
                store.query_items("alice", ItemQuery())
                held.set()
                time.sleep(0.4)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(5)
        found = [hit.item.content for hit in alice.search("Lisbon") if hit.item]
        assert found == ["Lives in Lisbon"]
        holder.join()
    finally:
        memory.close()


