"""SQLite's driver errors are translated at one boundary (``store/sqlite.py``
``_translated``), chained, and never reach the caller as ``sqlite3`` exceptions."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import pytest

import ledgermem
from ledgermem import InvalidInput, Memory, StorageError
from ledgermem.store.sqlite import SQLiteStore
from tests.support import snapshot

PACKAGE = Path(ledgermem.__file__).parent
BOUNDARY = {("store/sqlite.py", "_translated"), ("store/sqlite.py", "_retry"),
            ("backup.py", "_events_in"), ("backup.py", "backup"), ("backup.py", "_check_copy"),
            ("backup.py", "restore"), ("backup.py", "_fold_journal")}
"""Where ``sqlite3`` exceptions may be caught: the translation, and the lock retry
(which re-raises the driver's error for the translation once it gives up); and the
backup, which copies database files that are not open as stores (a backup being
checked, a file to restore, the file a forced backup replaces) and says what is wrong
with each in its own terms."""


def _handlers() -> set[tuple[str, str]]:
    """(module, function) of every ``except`` clause naming a ``sqlite3`` exception."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ExceptHandler) and node.type is not None and \
                        "sqlite3." in ast.unparse(node.type):
                    found.add((path.relative_to(PACKAGE).as_posix(), function.name))
    return found


def test_sqlite_errors_are_caught_at_one_boundary() -> None:
    assert _handlers() <= BOUNDARY, "translate sqlite3 errors in store/sqlite.py _translated"


def test_driver_errors_are_storage_errors_chained_to_the_driver(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    with pytest.raises(StorageError) as caught:
        store._read("SELECT * FROM no_such_table")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    with pytest.raises(StorageError) as caught, store._writing() as run:
        run("INSERT INTO meta (key, value) VALUES ('k', 'v')", [])
        run("INSERT INTO meta (key, value) VALUES ('k', 'again')", [])
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert store.get_meta("k") is None          # the transaction was rolled back
    store.close()


def test_a_file_that_is_not_a_database_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database, " * 200)
    with pytest.raises(StorageError) as caught:
        SQLiteStore(path)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_a_closed_store_is_a_storage_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    store.close()
    with pytest.raises(StorageError):
        store.user_ids()


def test_text_sqlite_cannot_encode_is_invalid_input_and_rolls_back(tmp_path: Path) -> None:
    # A backstop under the API's own checks: a lone surrogate that reaches the driver is
    # refused as PostgreSQL's driver refuses NUL, not raised as UnicodeEncodeError.
    mem = Memory.open(tmp_path / "m.db", embedder=None)
    mem.for_user("alice").remember("kites")
    before = snapshot(mem)
    with pytest.raises(InvalidInput), mem.store._writing() as run:  # type: ignore[attr-defined]
        run("INSERT INTO meta (key, value) VALUES ('ok', 'fine')", [])
        run("INSERT INTO meta (key, value) VALUES (?, 'x')", ["\ud800"])
    with pytest.raises(InvalidInput):
        mem.store._read("SELECT ?", [2**64])  # type: ignore[attr-defined]
    assert snapshot(mem) == before
    mem.close()
