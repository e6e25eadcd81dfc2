"""Shared test support: a controllable clock and raw access to a store's SQLite file.

Raw ``sqlite3`` connections are how the tests look *under* the API (ledger payloads,
embedding columns, FTS indexes) without trusting the code under test to report on
itself. Nothing here fakes our storage.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from ledgermem import Event, Memory
from ledgermem.clock import iso, new_id

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
"""Where every ``FakeClock`` starts: a fixed, timezone-aware UTC moment."""

VIEW_TABLES = ("knowledge", "conversations", "tool_history")
ALL_TABLES = ("events", *VIEW_TABLES, "meta", "schema_version")


class FakeClock:
    """A clock the test moves by hand: ``clock()`` is now, ``advance(days=..)`` moves it."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        """Move forward (or back, with negative values) by ``timedelta(**delta)``."""
        self.now = self.now + timedelta(**delta)
        return self.now

    def iso(self) -> str:
        """Now, formatted the way ledgermem stores timestamps."""
        return iso(self.now)


def db_path(mem: Memory) -> Path:
    path: Path = mem.store.path  # type: ignore[attr-defined]
    return path


@contextmanager
def raw(target: Memory | Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the memory's file, closed on exit."""
    path = db_path(target) if isinstance(target, Memory) else target
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def rows(mem: Memory | Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with raw(mem) as conn:
        return conn.execute(sql, tuple(params)).fetchall()


def event_count(mem: Memory | Path) -> int:
    return int(rows(mem, "SELECT count(*) FROM events")[0][0])


def snapshot(mem: Memory | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, for "nothing stored changed" checks."""
    with raw(mem) as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in ALL_TABLES}


def user_rows(mem: Memory | Path, user_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row one user owns, by table."""
    with raw(mem) as conn:
        return {table: conn.execute(f"SELECT * FROM {table} WHERE user_id = ? ORDER BY 1",
                                    (user_id,)).fetchall()
                for table in ("events", *VIEW_TABLES)}


def payloads_of(mem: Memory | Path, subject_id: str) -> list[str]:
    """Raw JSON payloads of every ledger event about one subject."""
    return [r[0] for r in rows(mem, "SELECT payload FROM events WHERE subject_id = ? "
                                    "ORDER BY seq", [subject_id])]


def stored_embedding(mem: Memory, item_id: str) -> bytes | None:
    found = rows(mem, "SELECT embedding FROM knowledge WHERE id = ?", [item_id])
    assert found, f"no knowledge row {item_id}"
    blob: bytes | None = found[0][0]
    return blob


def set_embedding(mem: Memory, item_id: str, text: str, dims: int = 8) -> None:
    """Give one knowledge row a vector through the store's public method."""
    vector = np.arange(1, dims + 1, dtype=np.float32)
    mem.store.set_embeddings("knowledge", [(item_id, text, vector)], "test-model")


def supersede(mem: Memory, user_id: str, old_id: str, new_id_: str, at: str) -> None:
    """Mark ``old_id`` as replaced by ``new_id_`` the way the pipeline does: a ledger event."""
    mem.store.append([Event(
        id=new_id(), ts=at, user_id=user_id, kind="memory.updated",
        payload={"changes": {"superseded_by": new_id_}, "reason": "test supersede"},
        subject_id=old_id)])
