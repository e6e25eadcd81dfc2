"""Backups of a SQLite store, taken while writers run, and restoring one.

``backup`` copies the database file with SQLite's online backup API
(``sqlite3.Connection.backup``) in one step, from a connection of its own: the copy
is the database as one read transaction saw it, a prefix of the ledger with every
view that goes with it, whatever other threads and processes write meanwhile (in WAL
mode a reader holds up no writer). It is written beside the destination and moved
into place once checked (``PRAGMA integrity_check``), so a crash never leaves half a
backup under the destination's name. A backup holds every user's memory, so a new one
is readable by its owner only (a file it replaces keeps its mode), and so is a store
``restore`` creates.

``restore`` copies a backup into a store's file the same way, after checking that
the backup is a sound ledgermem database this version can read, and refuses to
replace a store that holds any event unless told to (``force``). Stop the processes
that use the store before restoring into it: their in-memory vector indexes would
not know the file changed under them. A backup of an older schema is migrated once
restored.

PostgreSQL is backed up with its own tools (``postgres_help``): ``pg_dump`` of the
store's schema, restored with ``pg_restore``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

from .errors import InvalidInput, SchemaMismatch, StorageError
from .store.migrations import SQLITE_MIGRATIONS
from .store.sqlite import SQLiteStore
from .store.vector_file import vectors_dir

__all__ = ["backup", "postgres_help", "refuse_postgres", "restore", "same_file", "sqlite_path"]

BUSY_TIMEOUT_S = 30.0


def postgres_help(url: str, what: str = "backup") -> str:
    """What to run instead of ``ledgermem backup`` / ``restore`` on PostgreSQL."""
    if what == "restore":
        return ("ledgermem restores SQLite stores only; restore a PostgreSQL store with "
                "pg_restore: pg_restore --dbname URL --clean --if-exists FILE (see "
                "docs/reliability.md)")
    return ("ledgermem backs up SQLite stores only; back up a PostgreSQL store with "
            "pg_dump: pg_dump --format=custom --schema=SCHEMA --file FILE URL, which is "
            "consistent while writers run (see docs/reliability.md)")


def refuse_postgres(url: str | None, what: str = "backup") -> None:
    """Raise ``InvalidInput`` with ``postgres_help`` when ``url`` names PostgreSQL."""
    if url is not None and str(url).startswith(("postgresql://", "postgres://")):
        raise InvalidInput(postgres_help(str(url), what))


def sqlite_path(url: str | Path) -> Path:
    """The file of a SQLite store URL (``sqlite:///path`` or a plain path), as
    ``Memory.open`` reads it; ``InvalidInput`` for PostgreSQL (``postgres_help``) or
    another scheme."""
    text = str(url)
    refuse_postgres(text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    elif "://" in text:
        raise InvalidInput(f"unsupported database URL {text!r}: use sqlite:/// or a path")
    return Path(text).expanduser().resolve()


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return conn


def _check_copy(conn: sqlite3.Connection, where: str) -> dict[str, Any]:
    """What a copied (or to be copied) database holds, after checking it is sound and
    a ledgermem store. Raises ``InvalidInput`` naming ``where`` otherwise."""
    try:
        found = [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{where} is not a SQLite database ({exc})") from exc
    if found != ["ok"]:
        raise InvalidInput(f"{where} is damaged: {'; '.join(found[:3])}")
    if not {"events", "schema_version"} <= tables:
        raise InvalidInput(f"{where} is not a ledgermem store (it has no ledger)")
    version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    events, users = conn.execute("SELECT count(*), count(DISTINCT user_id) FROM events"
                                 ).fetchone()
    return {"schema_version": int(version[0]), "events": int(events), "users": int(users)}


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _owner_only(path: Path, like: Path | None = None) -> None:
    """Create ``path`` empty (SQLite takes an empty file as an empty database), readable
    by its owner only, or with the mode of ``like`` when that is a regular file. The
    journal files SQLite makes beside a database take the database file's mode."""
    try:
        found = os.lstat(like) if like is not None else None
    except FileNotFoundError:
        found = None
    mode = stat.S_IMODE(found.st_mode) if found and stat.S_ISREG(found.st_mode) else 0o600
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))


def _copy(source: sqlite3.Connection, target: Path) -> None:
    """The whole of ``source``, as one read transaction sees it, into ``target``."""
    with closing(_connect(target)) as conn:
        source.backup(conn)  # pages=-1: one step, one consistent snapshot


def same_file(path: Path, other: Path) -> bool:
    """Whether ``path`` and ``other`` name one file (through a hard link too)."""
    try:
        return os.path.samefile(path, other)
    except OSError:   # one of them does not exist
        return False


def _journals(path: Path) -> list[Path]:
    """The files SQLite keeps beside a database: its rollback journal, write-ahead log
    and shared memory."""
    return [path.with_name(path.name + suffix) for suffix in ("-journal", "-wal", "-shm")]


def _fold_journal(dst: Path) -> None:
    """Before a backup replaces ``dst``: fold the journal files beside it (a write-ahead
    log, a rollback journal left by a crash) into it. Left beside the new file, they
    would be replayed onto it the next time it opens, as if they were its own, and
    corrupt it.

    Raises:
        InvalidInput: another process has ``dst`` open (its log stays), or ``dst``
            cannot be opened to fold it.
    """
    journals = _journals(dst)
    if not any(path.exists() for path in journals):
        return
    try:
        with closing(_connect(dst)) as conn:   # a read rolls back a journal left hot
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error as exc:
        raise InvalidInput(f"{dst} has journal files beside it that cannot be folded into "
                           f"it ({exc}): remove {', '.join(p.name for p in journals)}, or "
                           "choose another file") from exc
    if any(path.exists() for path in journals):   # the last connection to close removes
        raise InvalidInput(f"{dst} is open in another process: close it first, or choose "
                           "another file")


def backup(source: str | Path, destination: str | Path, *, force: bool = False
           ) -> dict[str, Any]:
    """Copy the SQLite store at ``source`` to a new file at ``destination``, consistent
    while writers run (see the module's docstring).

    Args:
        source: the store's database file.
        destination: the file to write; it must not exist unless ``force``.
        force: replace ``destination`` if it exists.

    Returns:
        ``{"source", "destination", "bytes", "schema_version", "events", "users"}``.

    Raises:
        InvalidInput: no database at ``source``, ``destination`` exists (without
            ``force``) or is ``source`` itself, or ``source`` is no ledgermem store.
        StorageError: SQLite failed (the source stayed locked, the disk is full…).
    """
    src, dst = Path(source).expanduser().resolve(), Path(destination).expanduser().resolve()
    if not src.is_file():
        raise InvalidInput(f"no database at {src}")
    if dst == src or any(same_file(dst, path) for path in (src, *_journals(src))):
        raise InvalidInput(f"{dst} is the store itself (or one of its journal files): "
                           "back it up to another file")
    if dst.exists() and not force:
        raise InvalidInput(f"{dst} exists: choose another file, or --force to replace it")
    if dst.is_dir():
        raise InvalidInput(f"{dst} is a folder: name the backup file")
    if not dst.parent.is_dir():
        raise InvalidInput(f"no folder {dst.parent} to write the backup in")
    part = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        with closing(_connect(src)) as conn:
            _check_copy(conn, str(src))  # before copying: a damaged store is refused
            _owner_only(part, like=dst)
            _copy(conn, part)
        with closing(_connect(part)) as conn:
            found = _check_copy(conn, f"the copy of {src}")
        _sync(part)
        _fold_journal(dst)
        os.replace(part, dst)
    except sqlite3.Error as exc:
        raise StorageError(f"backup of {src} failed: {exc}") from exc
    finally:
        for leftover in (part, *_journals(part)):
            leftover.unlink(missing_ok=True)
    return {"source": str(src), "destination": str(dst), "bytes": dst.stat().st_size,
            **found}


def restore(source: str | Path, destination: str | Path, *, force: bool = False
            ) -> dict[str, Any]:
    """Copy the backup at ``source`` into the SQLite store at ``destination``
    (created if missing), then migrate it to this version's schema.

    Args:
        source: a file ``backup`` wrote (any sound ledgermem SQLite file will do).
        destination: the store's database file.
        force: replace a store that holds events (otherwise refused).

    Returns:
        ``{"source", "destination", "schema_version", "events", "users",
        "replaced_events"}``: what the backup held, and how many events the
        store held before.

    Raises:
        InvalidInput: no file at ``source``, or it is damaged or no ledgermem store;
            ``destination`` is ``source``, or holds events (without ``force``), or is
            a file that is no SQLite database.
        SchemaMismatch: the backup comes from a newer ledgermem.
        StorageError: SQLite failed.
    """
    src, dst = Path(source).expanduser().resolve(), Path(destination).expanduser().resolve()
    if not src.is_file():
        raise InvalidInput(f"no backup at {src}")
    if dst == src:
        raise InvalidInput(f"{src} is the store itself")
    try:
        with closing(_connect(src)) as conn:
            found = _check_copy(conn, str(src))
            known = max(m.version for m in SQLITE_MIGRATIONS)
            if found["schema_version"] > known:
                raise SchemaMismatch(
                    f"{src} has schema version {found['schema_version']}, newer than this "
                    f"ledgermem understands ({known}); upgrade ledgermem")
            replaced = _events_in(dst)
            if replaced and not force:
                raise InvalidInput(
                    f"{dst} holds {replaced} events: restoring would replace them; "
                    "add --force to replace them, or restore into another --db")
            if not dst.exists():
                dst.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                _owner_only(dst)
            _copy(conn, dst)
        # The vector files beside the store describe what it held before; the restored
        # store builds its own at its next searches.
        shutil.rmtree(vectors_dir(dst), ignore_errors=True)
    except sqlite3.Error as exc:
        raise StorageError(f"restore of {src} into {dst} failed: {exc}") from exc
    SQLiteStore(dst).close()  # an older backup is migrated now, not at the next open
    return {"source": str(src), "destination": str(dst), **found,
            "replaced_events": replaced}


def _events_in(path: Path) -> int:
    """Events a store file holds (0 if there is no file, or it has no ledger yet)."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with closing(_connect(path)) as conn:
        try:
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        except sqlite3.DatabaseError as exc:
            raise InvalidInput(f"{path} is not a SQLite database ({exc}); restore into "
                               "another --db") from exc
        if "events" not in tables:
            return 0
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
