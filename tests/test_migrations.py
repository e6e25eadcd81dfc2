"""Schema migrations: an old file is upgraded in place; a newer one is refused."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from ledgermem import Event, Item, Memory, SchemaMismatch, SQLiteStore, StorageError
from ledgermem.clock import new_id
from ledgermem.store.migrations import SQLITE_MIGRATIONS
from ledgermem.store.pg_migrations import PG_MIGRATIONS
from tests.support import is_postgres, raw, rows, snapshot

LATEST = max(m.version for m in SQLITE_MIGRATIONS)


def latest(db_url: str) -> int:
    return max(m.version for m in (PG_MIGRATIONS if is_postgres(db_url) else SQLITE_MIGRATIONS))
TS = "2026-05-01T09:00:00.000000+00:00"


def old_item(content: str, category: str = "fact", entity: str | None = None) -> Item:
    return Item(id=new_id(), user_id="alice", category=category, content=content,
                source="user", confidence=0.8, created_at=TS, updated_at=TS, valid_from=TS,
                entity=entity, metadata={"legacy": True})


def event(kind: str, payload: dict[str, Any], *, subject_id: str | None = None,
          session_id: str | None = None) -> Event:
    return Event(id=new_id(), ts=TS, user_id="alice", kind=kind, payload=payload,
                 subject_id=subject_id, session_id=session_id)


V1_ITEM_COLUMNS = (
    "id", "user_id", "agent_id", "category", "content", "domain", "source", "confidence",
    "context", "entity", "sensitive", "due_at", "reminded_at", "superseded_by", "valid_from",
    "valid_to", "created_at", "updated_at", "last_used_at", "use_count", "metadata",
)


def write_as_version_one(conn: sqlite3.Connection, events: list[Event]) -> None:
    """Append events and project them exactly as a version-1 ledgermem did.

    Today's ``store.append`` projects onto today's columns, so it cannot stand in for
    the old code; the version-1 projection is frozen here instead.
    """
    for e in events:
        conn.execute(
            "INSERT INTO events (id, ts, user_id, agent_id, session_id, kind, subject_id, "
            "payload, visibility) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (e.id, e.ts, e.user_id, e.agent_id, e.session_id, e.kind, e.subject_id,
             json.dumps(e.payload), e.visibility))
        data = e.payload
        if e.kind == "memory.added":
            item = {**data["item"], "metadata": json.dumps(data["item"]["metadata"])}
            conn.execute(f"INSERT INTO knowledge ({', '.join(V1_ITEM_COLUMNS)}) VALUES "
                         f"({', '.join('?' * len(V1_ITEM_COLUMNS))})",
                         [item[c] for c in V1_ITEM_COLUMNS])
        elif e.kind.startswith("turn."):
            conn.execute(
                "INSERT INTO conversations (id, user_id, agent_id, session_id, role, name, "
                "content, ts, consolidated_at, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (e.id, e.user_id, e.agent_id, e.session_id, data["role"], data.get("name"),
                 data["content"], data.get("at", e.ts), None, "{}"))
        elif e.kind == "tool.called":
            conn.execute(
                "INSERT INTO tool_history (id, user_id, agent_id, session_id, name, arguments, "
                "success, duration_ms, error, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (e.id, e.user_id, e.agent_id, e.session_id, data["name"],
                 json.dumps(data["arguments"]), data["success"], data["duration_ms"],
                 data["error"], e.ts))


@pytest.fixture
def version_one(tmp_path: Path) -> tuple[Path, list[Item]]:
    """A file at schema version 1 (no FTS) holding items, turns and a tool call."""
    path = tmp_path / "old.db"
    SQLiteStore(path, migrations=SQLITE_MIGRATIONS[:1]).close()
    items = [old_item("Sarah Chen is her manager", entity="person:sarah_chen"),
             old_item("Prefers green tea", "preference")]
    events = [event("memory.added", {"item": asdict(i)}, subject_id=i.id) for i in items]
    events += [
        event("turn.user", {"role": "user", "content": "Flying to Lisbon on Friday",
                            "at": TS}, session_id="alice:telegram"),
        event("turn.assistant", {"role": "assistant", "content": "Enjoy the trip",
                                 "at": TS}, session_id="alice:telegram"),
        event("tool.called", {"name": "calendar", "arguments": {"d": 1}, "success": True,
                              "duration_ms": 5.0, "error": None}),
    ]
    with raw(path) as conn:
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (1,)
        conn.execute("BEGIN")
        write_as_version_one(conn, events)
        conn.execute("COMMIT")
    assert not rows(path, "SELECT name FROM sqlite_master WHERE name LIKE '%_fts'")
    return path, items


# SQLite only: a file written by version 1 of the SQLite schema. PostgreSQL's
# migrations started with this release (tests/postgres checks they run once).
@pytest.mark.sqlite_only
def test_version_one_file_is_upgraded_and_nothing_is_lost(
        version_one: tuple[Path, list[Item]]) -> None:
    path, items = version_one
    events_before = rows(path, "SELECT * FROM events ORDER BY seq")
    with Memory.open(path, embedder=None) as memory:
        assert memory.store.schema_version() == LATEST  # type: ignore[attr-defined]
        alice = memory.for_user("alice")
        assert [alice.get(i.id) for i in items] == items
        assert [h.id for h in alice.search("manager", touch=False)] == [items[0].id]
        assert [h.id for h in alice.search("green tea", touch=False)] == [items[1].id]
        assert alice.search_conversations("Lisbon")[0].content == "Flying to Lisbon on Friday"
        assert [t.content for t in alice.session_history("alice:telegram")] == [
            "Flying to Lisbon on Friday", "Enjoy the trip"]
        assert [c.name for c in alice.tool_errors()] == []
        assert alice.tool_stats()[0]["calls"] == 1
        # the upgraded file takes new writes, and they are searchable too
        alice.remember("Sarah Chen moved to Berlin")
        assert len(alice.search("Sarah", touch=False)) == 2
        # and the old ledger replays under the new schema
        memory.rebuild()
        assert [alice.get(i.id) for i in items] == items
        assert [h.content for h in alice.search_conversations("Lisbon")][:1] == [
            "Flying to Lisbon on Friday"]
    assert rows(path, "SELECT * FROM events ORDER BY seq")[:len(events_before)] == events_before
    versions = [r[0] for r in rows(path, "SELECT version FROM schema_version ORDER BY 1")]
    assert versions == list(range(1, LATEST + 1))


def test_reopening_an_up_to_date_store_changes_nothing(db_url: str) -> None:
    with Memory.open(db_url, embedder=None) as memory:
        memory.for_user("alice").remember("Something to keep")
    before = snapshot(db_url)
    with Memory.open(db_url, embedder=None) as memory:
        assert memory.store.schema_version() == latest(db_url)  # type: ignore[attr-defined]
    assert snapshot(db_url) == before


def test_a_newer_schema_than_known_is_refused(db_url: str) -> None:
    with Memory.open(db_url, embedder=None) as memory:
        memory.for_user("alice").remember("Written by this version")
    newer = latest(db_url) + 1
    with raw(db_url) as conn:
        conn.execute("INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                     (newer, "from_the_future", TS))
    before = snapshot(db_url)
    with pytest.raises(SchemaMismatch) as caught:
        Memory.open(db_url, embedder=None)
    assert isinstance(caught.value, StorageError)
    assert str(newer) in str(caught.value)
    assert snapshot(db_url) == before
