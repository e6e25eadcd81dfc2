"""SQLite's WAL is copied into the database file by a thread of the store's own
(``sqlite._Checkpointer``), not in a caller's commit."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from ledgermem import Memory
from ledgermem.store import sqlite as sqlite_store
from ledgermem.store.sqlite import CHECKPOINT_BACKSTOP_PAGES, SQLiteStore


def _until(condition: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _store(memory: Memory) -> SQLiteStore:
    assert isinstance(memory.store, SQLiteStore)
    return memory.store


def test_writes_reach_the_database_file_without_the_caller_checkpointing(
        tmp_path: Path) -> None:
    """A few writes leave the WAL far below any automatic checkpoint, yet a copy of the
    database file alone (no WAL) soon holds them."""
    path = tmp_path / "m.db"
    with Memory.open(str(path), embedder=None) as memory:
        store = _store(memory)
        conn = store._conn()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == (
            CHECKPOINT_BACKSTOP_PAGES)
        alice = memory.for_user("alice")
        texts = [f"walrus number {n} basks on the floe" for n in range(5)]
        alice.remember_many(texts)
        alice.remember("the heron fishes at dawn")

        def copied() -> set[str]:
            shutil.copy(path, tmp_path / "copy.db")
            copy = sqlite3.connect(tmp_path / "copy.db")
            try:
                return {row[0] for row in copy.execute("SELECT content FROM knowledge")}
            except sqlite3.OperationalError:   # no checkpoint yet: not even the schema
                return set()
            finally:
                copy.close()

        # Polled: a checkpoint that began between the two writes holds only the first,
        # and the round after it may still be on its way.
        _until(lambda: copied() == {*texts, "the heron fishes at dawn"})
        # The thread counts a checkpoint once its statement returns, which can be a
        # moment after the file holds the pages.
        _until(lambda: store._checkpointer.checkpoints >= 1)


def test_the_thread_ends_with_the_store_and_when_idle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_IDLE_S", 0.2)
    memory = Memory.open(str(tmp_path / "m.db"), embedder=None)
    checkpointer = _store(memory)._checkpointer
    memory.for_user("alice").remember("the heron fishes at dawn")
    first = checkpointer._thread
    assert first is not None
    _until(lambda: checkpointer._thread is None)     # idle: it ended
    first.join(5)
    assert not first.is_alive()
    memory.for_user("alice").remember("the lynx sleeps at noon")
    again = checkpointer._thread
    assert again is not None and again is not first
    _until(lambda: checkpointer.checkpoints >= 2)
    memory.close()
    assert not again.is_alive()
    # A closed store starts no thread.
    checkpointer.wrote()
    assert checkpointer._thread is again and not again.is_alive()


def test_closing_a_store_does_not_wait_for_the_idle_timeout(tmp_path: Path) -> None:
    memory = Memory.open(str(tmp_path / "m.db"), embedder=None)
    memory.for_user("alice").remember("the heron fishes at dawn")
    thread = _store(memory)._checkpointer._thread
    assert thread is not None
    started = time.monotonic()
    memory.close()
    assert not thread.is_alive()
    assert time.monotonic() - started < sqlite_store.CHECKPOINT_IDLE_S / 2


def test_no_background_checkpoint_while_paused(tmp_path: Path) -> None:
    """``vacuum`` pauses the thread: its ``TRUNCATE`` checkpoint, which empties the WAL
    of a forgotten user's text, would fail while another checkpoint runs."""
    with Memory.open(str(tmp_path / "m.db"), embedder=None) as memory:
        checkpointer = _store(memory)._checkpointer
        memory.for_user("alice").remember("the heron fishes at dawn")
        _until(lambda: checkpointer.checkpoints >= 1)
        with checkpointer.paused():
            memory.for_user("alice").remember("the lynx sleeps at noon")
            time.sleep(sqlite_store.CHECKPOINT_DELAY_S * 4)
            assert checkpointer.checkpoints == 1
        _until(lambda: checkpointer.checkpoints >= 2)
        memory.for_user("alice").forget_user()         # vacuums: the WAL is emptied
        assert (tmp_path / "m.db-wal").stat().st_size == 0


def test_a_store_only_read_starts_no_thread(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(str(path), embedder=None) as memory:
        memory.for_user("alice").remember("the heron fishes at dawn")
    with Memory.open(str(path), embedder=None) as memory:   # already at its schema
        assert memory.for_user("alice").all_knowledge()["total"] == 1
        assert _store(memory)._checkpointer._thread is None
        memory.for_user("alice").remember("the lynx sleeps at noon")
        assert _store(memory)._checkpointer._thread is not None
