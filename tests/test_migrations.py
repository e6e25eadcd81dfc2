"""Schema migrations: an old file is upgraded in place; a newer one is refused."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from ledgermem import Event, Item, Memory, SchemaMismatch, SQLiteStore, StorageError
from ledgermem.clock import new_id
from ledgermem.store.migrations import SQLITE_MIGRATIONS
from tests.support import raw, rows, snapshot

LATEST = max(m.version for m in SQLITE_MIGRATIONS)
TS = "2026-05-01T09:00:00.000000+00:00"


def old_item(content: str, category: str = "fact", entity: str | None = None) -> Item:
    return Item(id=new_id(), user_id="alice", category=category, content=content,
                source="user", confidence=0.8, created_at=TS, updated_at=TS, valid_from=TS,
                entity=entity, metadata={"legacy": True})


def event(kind: str, payload: dict, **extra: str) -> Event:  # type: ignore[type-arg]
    return Event(id=new_id(), ts=TS, user_id="alice", kind=kind, payload=payload, **extra)


@pytest.fixture
def version_one(tmp_path: Path) -> tuple[Path, list[Item]]:
    """A file at schema version 1 (no FTS) holding items, turns and a tool call."""
    path = tmp_path / "old.db"
    store = SQLiteStore(path, migrations=SQLITE_MIGRATIONS[:1])
    try:
        assert store.schema_version() == 1
        items = [old_item("Sarah Chen is her manager", entity="person:sarah_chen"),
                 old_item("Prefers green tea", "preference")]
        store.append([event("memory.added", {"item": asdict(i)}, subject_id=i.id)
                      for i in items])
        store.append([
            event("turn.user", {"role": "user", "content": "Flying to Lisbon on Friday",
                                "at": TS}, session_id="alice:telegram"),
            event("turn.assistant", {"role": "assistant", "content": "Enjoy the trip",
                                     "at": TS}, session_id="alice:telegram"),
            event("tool.called", {"name": "calendar", "arguments": {"d": 1}, "success": True,
                                  "duration_ms": 5.0, "error": None}),
        ])
    finally:
        store.close()
    assert not rows(path, "SELECT name FROM sqlite_master WHERE name LIKE '%_fts'")
    return path, items


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
        assert [h.content for h in alice.search_conversations("Lisbon")] == [
            "Flying to Lisbon on Friday"]
        assert [t.content for t in alice.session_history("alice:telegram")] == [
            "Flying to Lisbon on Friday", "Enjoy the trip"]
        assert [c.name for c in alice.tool_errors()] == []
        assert alice.tool_stats()[0]["calls"] == 1
        # the upgraded file takes new writes, and they are searchable too
        alice.remember("Sarah Chen moved to Berlin")
        assert len(alice.search("Sarah", touch=False)) == 2
    assert rows(path, "SELECT * FROM events ORDER BY seq")[:len(events_before)] == events_before
    versions = [r[0] for r in rows(path, "SELECT version FROM schema_version ORDER BY 1")]
    assert versions == list(range(1, LATEST + 1))


def test_reopening_an_up_to_date_file_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(path, embedder=None) as memory:
        memory.for_user("alice").remember("Something to keep")
    before = snapshot(path)
    with Memory.open(path, embedder=None) as memory:
        assert memory.store.schema_version() == LATEST  # type: ignore[attr-defined]
    assert snapshot(path) == before


def test_a_newer_schema_than_known_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with Memory.open(path, embedder=None) as memory:
        memory.for_user("alice").remember("Written by this version")
    with raw(path) as conn:
        conn.execute("INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                     (LATEST + 1, "from_the_future", TS))
    before = snapshot(path)
    with pytest.raises(SchemaMismatch) as caught:
        Memory.open(path, embedder=None)
    assert isinstance(caught.value, StorageError)
    assert str(LATEST + 1) in str(caught.value)
    assert snapshot(path) == before
