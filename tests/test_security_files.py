"""Files that hold memory, as the CLI writes them: an export, a backup and a restored
store are readable by their owner only (memory is personal data), whatever the umask;
a regular file replaced keeps the mode its owner gave it; no export or backup is ever
written over the store it reads (or its journal files), however the path names it; and
a symlink at the destination is replaced, never written through with its target's
mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledgermem import Memory
from ledgermem.cli import main


@pytest.fixture(autouse=True)
def common_umask() -> Iterator[None]:
    """The usual umask (022), under which a plain new file is world-readable."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def run(db: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--db", str(db), "--user", "ann", "--embedder",
                                     "none", *args])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    with Memory.open(path, embedder=None) as memory:
        memory.for_user("ann").remember("Ann's passport number is X1234567")
    return path


def contents(db: Path) -> list[str]:
    with Memory.open(db, embedder=None) as memory:
        return [item.content for item in memory.for_user("ann").all_knowledge()["items"]]


def test_an_export_backup_and_restored_store_are_owner_only(db: Path, tmp_path: Path) -> None:
    export = tmp_path / "ann.jsonl"
    assert run(db, "export", "-o", str(export)).exit_code == 0
    assert mode(export) == 0o600
    backup = tmp_path / "backup.db"
    assert run(db, "backup", str(backup)).exit_code == 0
    assert mode(backup) == 0o600
    restored = tmp_path / "restored" / "memory.db"
    assert run(restored, "restore-backup", str(backup)).exit_code == 0
    assert mode(restored) == 0o600
    assert mode(restored.parent) == 0o700
    assert contents(restored) == ["Ann's passport number is X1234567"]
    assert not list(tmp_path.glob(".*.part"))


def test_a_replaced_file_keeps_the_mode_its_owner_gave_it(db: Path, tmp_path: Path) -> None:
    export, backup = tmp_path / "shared.jsonl", tmp_path / "shared.db"
    for path in (export, backup):
        path.write_text("old")
        path.chmod(0o640)
    assert run(db, "export", "-o", str(export)).exit_code == 0
    assert run(db, "backup", str(backup), "--force").exit_code == 0
    assert (mode(export), mode(backup)) == (0o640, 0o640)


def test_a_symlink_at_the_destination_lends_the_export_no_mode(db: Path, tmp_path: Path
                                                               ) -> None:
    """A link to someone's world-writable file: the export replaces the link, is owner
    only, and the linked file is untouched."""
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("not yours")
    theirs.chmod(0o666)
    link = tmp_path / "export.jsonl"
    link.symlink_to(theirs)
    assert run(db, "export", "-o", str(link)).exit_code == 0
    assert not link.is_symlink() and mode(link) == 0o600
    assert theirs.read_text() == "not yours"


def test_an_export_is_never_written_over_the_store(db: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.db"
    link.symlink_to(db)
    hard = tmp_path / "hard.db"
    os.link(db, hard)
    with Memory.open(db, embedder=None):   # keeps the write-ahead log beside it
        targets = [db, link, hard, Path(f"{db}-wal"), Path(f"{db}-shm"),
                   tmp_path / "." / db.name]
        for target in targets:
            result = run(db, "export", "-o", str(target))
            assert result.exit_code == 2, (target, result.output)
            assert "database being read" in result.stderr
    assert contents(db) == ["Ann's passport number is X1234567"]


def test_a_backup_is_never_written_over_the_store_or_its_journal(db: Path,
                                                                 tmp_path: Path) -> None:
    link = tmp_path / "link.db"
    link.symlink_to(db)
    with Memory.open(db, embedder=None):
        for target in (db, link, Path(f"{db}-wal"), Path(f"{db}-shm")):
            result = run(db, "backup", str(target), "--force")
            assert result.exit_code == 2, (target, result.output)
            assert "is the store itself" in result.stderr
    assert contents(db) == ["Ann's passport number is X1234567"]


def test_a_new_database_its_journals_and_vectors_are_owner_only(tmp_path: Path) -> None:
    from ledgermem.store.sqlite import SQLiteStore
    from ledgermem.testing import HashEmbedder

    path = tmp_path / "new" / "memory.db"        # its folder is made too
    store = SQLiteStore(path)
    store.vector_file_rows = 1                   # a vector file for the one item
    with Memory(store, embedder=HashEmbedder()) as memory:
        ann = memory.for_user("ann")
        ann.remember("Ann's passport number is X1234567")
        memory.flush()
        ann.search("passport")                    # the vectors are read, and kept beside
        assert mode(path) == 0o600 and mode(path.parent) == 0o700
        assert all(mode(Path(f"{path}{suffix}")) == 0o600 for suffix in ("-wal", "-shm"))
    kept = list(path.parent.rglob("*.lmv"))
    assert kept, sorted(path.parent.rglob("*"))
    assert all(mode(f) == 0o600 for f in kept) and all(mode(f.parent) == 0o700 for f in kept)


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    Memory.open(path, embedder=None).close()
    path.chmod(0o640)
    with Memory.open(path, embedder=None) as memory:
        memory.for_user("ann").remember("Lives in Lisbon")
    assert mode(path) == 0o640
