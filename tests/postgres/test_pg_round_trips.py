"""What one write costs in statements on PostgreSQL, where each is a round trip: the
user's scope is told once, and the user's lock taken once, per transaction."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from ledgermem import Memory
from ledgermem.store.postgres import PostgresStore


def _trace(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, bool] | None]]:
    """Each statement the calling thread runs (not the background workers'), with the
    scope it first had to tell the connection (or None)."""
    seen: list[tuple[str, tuple[str, bool] | None]] = []
    execute = PostgresStore._execute
    me = threading.get_ident()

    def traced(self: PostgresStore, conn: Any, sql: str, params: Sequence[Any]) -> Any:
        local = self._local
        if threading.get_ident() == me:
            seen.append((" ".join(sql.split()),
                         local.scope if local.applied != local.scope else None))
        return execute(self, conn, sql, params)

    monkeypatch.setattr(PostgresStore, "_execute", traced)
    return seen


def test_remember_tells_the_scope_once_and_takes_the_lock_once(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    alice = pg_memory.for_user("alice")
    alice.remember("Alice keeps bees on the roof")
    seen = _trace(monkeypatch)
    alice.remember("Alice grows basil in the kitchen")
    assert [scope for _, scope in seen if scope is not None] == [("alice", False)]
    assert sum("pg_advisory_xact_lock" in sql for sql, _ in seen) == 1
    # The lock comes before the event is inserted (ledger order).
    assert "pg_advisory_xact_lock" in seen[0][0]
    assert seen[0][1] == ("alice", False)


def test_a_batch_takes_the_lock_once(pg_memory: Memory,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    alice = pg_memory.for_user("alice")
    seen = _trace(monkeypatch)
    alice.remember_many([f"Hive {n} sits by the orchard wall" for n in range(5)])
    alice.add_turns([{"role": "user", "content": "How are the bees?"},
                     {"role": "assistant", "content": "Busy."}], session_id="alice:bees")
    # One transaction each: one lock statement each.
    assert sum("pg_advisory_xact_lock" in sql for sql, _ in seen) == 2
