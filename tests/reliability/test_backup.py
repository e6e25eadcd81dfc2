"""``ledgermem backup`` / ``restore``: a consistent copy while writers run, restored
whole; refusals that keep what is there; PostgreSQL pointed to pg_dump."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bench.stores import integrity_problems, views_digest
from ledgermem import InvalidInput, Memory, SchemaMismatch
from ledgermem.backup import backup, restore
from ledgermem.cli import main
from tests.support import raw, rows

pytestmark = pytest.mark.sqlite_only  # reason: SQLite's online backup; PostgreSQL's
# pg_dump path is the refusal tested below


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["--embedder", "none", *args])


def failed(result: Result, code: int = 2) -> str:
    """The one error line of a refused command (never a traceback)."""
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_a_backup_taken_while_a_thread_writes_is_one_moment_of_the_ledger(
        tmp_path: Path) -> None:
    """The copy holds every write acknowledged before the backup started, its ledger is
    a prefix of the live one (one moment: nothing from after without what came before),
    it passes integrity_check, and once restored ``verify`` finds nothing."""
    live = tmp_path / "live.db"
    acknowledged: list[str] = []
    stop, errors = threading.Event(), []
    with Memory.open(live, embedder=None) as memory:
        alice = memory.for_user("alice")

        def write() -> None:
            try:
                n = 0
                while not stop.is_set():
                    n += 1
                    item = alice.remember(" ".join(f"w{n}x{i}" for i in range(5)))
                    alice.add_turn("user", f"turn {n} about w{n}x0")
                    if n % 5 == 0:
                        alice.forget(item.id)
                    else:
                        acknowledged.append(item.id)
            except BaseException as exc:  # reported in the test's thread
                errors.append(exc)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            while len(acknowledged) < 40 and writer.is_alive():
                stop.wait(0.01)
            before = list(acknowledged)
            result = backup(live, tmp_path / "copy.db")
            count = len(acknowledged)
            while len(acknowledged) < count + 20 and writer.is_alive():
                stop.wait(0.01)
        finally:
            stop.set()
            writer.join(timeout=60)
        assert errors == []
        live_ledger = [e.id for _, e in memory.store.ledger(0, 1_000_000)]

    copy = tmp_path / "copy.db"
    assert integrity_problems(copy) == []
    copied = [row[0] for row in rows(copy, "SELECT id FROM events ORDER BY seq")]
    assert result["events"] == len(copied)
    assert len(before) < len(copied) < len(live_ledger)
    assert copied == live_ledger[:len(copied)]  # one moment of the ledger

    restored = tmp_path / "restored.db"
    restore(copy, restored)
    with Memory.open(restored, embedder=None) as memory:
        assert memory.verify()["problems"] == []
        alice = memory.for_user("alice")
        assert [alice.get(item_id).id for item_id in before] == before


def test_backup_and_restore_through_the_cli(tmp_path: Path) -> None:
    db, copy, other = tmp_path / "m.db", tmp_path / "b.db", tmp_path / "other.db"
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("local").remember("Ann prefers green tea")
        memory.for_user("bob").add_turn("user", "hello")
    result = cli("--db", str(db), "backup", str(copy))
    assert result.exit_code == 0, result.output
    assert "backed up 2 events of 2 users" in result.stdout

    assert "exists" in failed(cli("--db", str(db), "backup", str(copy)))
    assert cli("--db", str(db), "backup", str(copy), "--force").exit_code == 0

    assert cli("--db", str(other), "restore-backup", str(copy)).exit_code == 0
    with Memory.open(db, embedder=None) as a, Memory.open(other, embedder=None) as b:
        assert views_digest(a.store) == views_digest(b.store)

    # a store that holds events is not replaced without --force
    with Memory.open(other, embedder=None) as memory:
        memory.for_user("carol").remember("Carol keeps bees")
    before = views_digest_of(other)
    assert "holds 3 events" in failed(cli("--db", str(other), "restore-backup", str(copy)))
    assert views_digest_of(other) == before
    assert cli("--db", str(other), "restore-backup", str(copy), "--force").exit_code == 0
    assert views_digest_of(other) == views_digest_of(db)


def views_digest_of(path: Path) -> object:
    with Memory.open(path, embedder=None) as memory:
        return views_digest(memory.store)


def test_refusals_exit_2_and_change_nothing(tmp_path: Path) -> None:
    db, copy = tmp_path / "m.db", tmp_path / "b.db"
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("local").remember("Ann prefers green tea")
    before = views_digest_of(db)
    assert "no database" in failed(cli("--db", str(tmp_path / "none.db"), "backup",
                                       str(copy)))
    assert not (tmp_path / "none.db").exists()
    assert "the store itself" in failed(cli("--db", str(db), "backup", str(db)))
    assert "folder" in failed(cli("--db", str(db), "backup", str(tmp_path / "no" / "b.db")))
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    assert "not a SQLite database" in failed(cli("--db", str(db), "restore-backup", str(junk)))
    empty = tmp_path / "empty.db"
    with raw(empty) as conn:
        conn.execute("CREATE TABLE other (x)")
    assert "not a ledgermem store" in failed(cli("--db", str(db), "restore-backup", str(empty)))
    assert "not a SQLite database" in failed(cli("--db", str(junk), "restore-backup", str(db)))
    assert views_digest_of(db) == before
    assert junk.read_bytes() == b"not a database at all" * 100
    assert not list(tmp_path.glob(".*.part"))  # no half-written backup left behind


def test_postgresql_is_pointed_to_pg_dump(pg_url: str, tmp_path: Path) -> None:
    for command in (["backup", str(tmp_path / "b.db")], ["restore-backup", __file__]):
        message = failed(cli("--db", pg_url, *command))
        assert ("pg_dump" if command[0] == "backup" else "pg_restore") in message
        assert "docs/reliability.md" in message
    assert not (tmp_path / "b.db").exists()


def test_a_backup_from_a_newer_ledgermem_is_refused(tmp_path: Path) -> None:
    db, copy, target = tmp_path / "m.db", tmp_path / "b.db", tmp_path / "t.db"
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("local").remember("Ann prefers green tea")
    backup(db, copy)
    with raw(copy) as conn:
        conn.execute("INSERT INTO schema_version VALUES (999, 'future', 'x')")
    with pytest.raises(SchemaMismatch):
        restore(copy, target)
    assert not target.exists() or views_digest_of(target) == {"users": {}, "vectors": {
        "knowledge": [], "conversations": []}, "model": (None, None)}
    with pytest.raises(InvalidInput):
        restore(tmp_path / "missing.db", target)


def test_a_forced_backup_over_a_file_with_its_log_beside_it_is_sound(tmp_path: Path) -> None:
    """The old file's write-ahead log is folded into it first: left beside the new
    file, it was replayed onto it and corrupted the backup that was just checked."""
    db, copy, wal = tmp_path / "m.db", tmp_path / "b.db", tmp_path / "b.db-wal"
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("local").remember_many([f"fact {n} about kites" for n in range(50)])
    backup(db, copy)
    holder = sqlite3.connect(copy, isolation_level=None)   # another process's connection
    holder.execute("PRAGMA journal_mode = wal")
    holder.execute("PRAGMA wal_autocheckpoint = 0")
    holder.execute("INSERT INTO meta (key, value) VALUES ('left', 'behind')")
    assert wal.stat().st_size > 0
    with pytest.raises(InvalidInput, match="open in another process"):
        backup(db, copy, force=True)
    left = wal.read_bytes()
    holder.close()
    wal.write_bytes(left)           # as a process that crashed leaves its log
    assert backup(db, copy, force=True)["events"] == 50
    assert not any((tmp_path / f"b.db{suffix}").exists() for suffix in ("-wal", "-shm"))
    assert integrity_problems(copy) == []
    assert views_digest_of(copy) == views_digest_of(db)
    assert not list(tmp_path.glob(".*.part*"))
