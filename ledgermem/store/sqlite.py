"""The embedded store: one SQLite file in WAL mode with FTS5 and BLOB vectors.

Each thread gets its own connection. Writes run in ``BEGIN IMMEDIATE`` transactions,
serialised within the process by a lock and across processes by SQLite's busy
timeout, with a bounded retry so "database is locked" never reaches the caller.

Keyword search over FTS5 is ``sqlite_keyword``'s, embeddings and vector search
``sqlite_vectors``'s; the ledger and the portable queries are ``SQLStore``'s.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..clock import iso, system_clock
from ..errors import InvalidInput, SchemaMismatch, StorageError, StoreClosed
from .migrations import SQLITE_MIGRATIONS, Migration
from .sql_backend import Run
from .sqlite_keyword import (
    KEYWORD_STATS_TTL_S,
    SCOPE_SHARE,
    SHARE_RECOUNT_ROWS,
    SQLiteKeywordSearch,
    fts_match_sql,
    keyword_scope,
    scoped_match,
)
from .sqlite_vectors import SQLiteVectors
from .vector_index import VectorIndex
from .word_counts import WordCounts

__all__ = ["SCOPE_SHARE", "SHARE_RECOUNT_ROWS", "SQLiteStore", "fts_match_sql", "keyword_scope",
           "scoped_match"]

LOCK_RETRY_S = 120.0


@contextmanager
def _translated(what: str = "SQLite") -> Iterator[None]:
    """The one boundary where the driver's errors become ledgermem's, chained:
    ``sqlite3.Error`` → ``StorageError``; a value the driver cannot bind (text with a
    lone surrogate, an integer beyond 64 bits) → ``InvalidInput``, as PostgreSQL's
    driver refuses NUL. The API refuses such values before they get here; this keeps
    a forgotten check from escaping the tree."""
    try:
        yield
    except sqlite3.Error as exc:
        if _locked(exc):
            raise StorageError(f"{what}: the database stayed locked for "
                               f"{LOCK_RETRY_S:.0f}s ({exc})") from exc
        raise StorageError(f"{what}: {exc}") from exc
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"SQLite cannot store text that is not valid Unicode: "
                           f"{exc.reason}") from exc
    except OverflowError as exc:
        raise InvalidInput(f"SQLite cannot store a number that large: {exc}") from exc


def _locked(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc))


log = logging.getLogger("ledgermem.store")

CLOSE_WAIT_S = 60.0
"""How long ``close`` waits for other threads' statements and transactions to end."""
CHECKPOINT_DELAY_S = 0.05
"""How long the checkpoint thread lets a burst of commits gather before it copies the
WAL into the database file (``_Checkpointer``)."""
CHECKPOINT_BACKSTOP_PAGES = 4_000
"""WAL pages past which a committing connection checkpoints itself (SQLite's
``wal_autocheckpoint``, 1,000 by default): only when the checkpoint thread falls
behind, so the WAL stays under about 16 MiB."""
CHECKPOINT_IDLE_S = 30.0
"""A checkpoint thread with no write to follow this long ends (the next write starts
another)."""


class _Checkpointer:
    """Copies the WAL into the database file from a thread of its own, shortly after
    writes, so that no caller's commit does it.

    SQLite checkpoints in the commit that takes the WAL past ``wal_autocheckpoint``
    pages. At 100,000 items a ``remember`` writes 32 pages (ten of FTS5's index, one or
    two for each of eleven table indexes), so about every 30th paid for copying a
    thousand: a ``COMMIT`` took 0.49–0.52 ms on average, 0.11 without checkpoints
    (docs/retrieval.md, round sixteen). Here a ``PASSIVE`` checkpoint, which neither
    waits for nor blocks readers and writers, runs ``CHECKPOINT_DELAY_S`` after a write;
    a store's connections checkpoint themselves only past
    ``CHECKPOINT_BACKSTOP_PAGES``. The thread holds its own connection and ends when
    the store closes or after ``CHECKPOINT_IDLE_S`` without writes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = threading.Lock()
        """Held while the thread checkpoints (``paused``)."""
        self.checkpoints = 0
        """Checkpoints run so far (for tests and diagnostics)."""

    def wrote(self) -> None:
        """A transaction of this store committed: checkpoint soon."""
        with self._lock:
            if self._stop.is_set():
                return
            self._wake.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="ledgermem-checkpoint")
                self._thread.start()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """One ``PASSIVE`` checkpoint; should it fail, a later one or a commit past
        ``CHECKPOINT_BACKSTOP_PAGES`` copies the WAL (nothing is lost either way)."""
        try:
            with _translated():
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.checkpoints += 1
        except StorageError as exc:
            log.debug("background checkpoint of %s failed: %s", self._path, exc)

    def _run(self) -> None:
        try:
            with _translated():
                conn = sqlite3.connect(self._path, isolation_level=None,
                                       check_same_thread=False)
        except StorageError as exc:  # commits past the backstop checkpoint instead
            log.debug("no checkpoint thread for %s: %s", self._path, exc)
            with self._lock:
                self._thread = None
            return
        try:
            while not self._stop.is_set():   # ``close`` sets it before it wakes us
                if not self._wake.wait(CHECKPOINT_IDLE_S):
                    with self._lock:
                        if not self._wake.is_set():
                            self._thread = None
                            return
                if self._stop.wait(CHECKPOINT_DELAY_S):
                    return
                self._wake.clear()     # a commit from here on asks for another round
                with self._running:
                    self._checkpoint(conn)
        finally:
            conn.close()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No checkpoint from this thread in the block (it waits for one under way): a
        ``TRUNCATE`` checkpoint, which empties the WAL, fails while another runs."""
        with self._running:
            yield

    def close(self) -> None:
        """Stop the thread, waiting for a checkpoint under way to finish."""
        with self._lock:
            self._stop.set()
            self._wake.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


class _ThreadConnection:
    """One thread's connection, released when the thread's ``threading.local`` data is
    (when the thread ends, or the store is dropped)."""

    __slots__ = ("conn", "release")

    def __init__(self, conn: sqlite3.Connection,
                 release: Callable[[sqlite3.Connection], None]) -> None:
        self.conn, self.release = conn, release

    def __del__(self) -> None:
        self.release(self.conn)


def _create_owner_only(path: Path) -> None:
    """Create ``path``'s folder (owner-only where it is new) and ``path`` as an empty,
    owner-only file where none is there yet. SQLite gives a database's journal files
    (``-wal``, ``-shm``) its file's mode, so memory is never readable by other users
    of the machine; a file that exists keeps its mode."""
    if not path.parent.is_dir():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc}") from exc
    os.close(descriptor)


class SQLiteStore(SQLiteKeywordSearch, SQLiteVectors):
    """SQLite backend. ``path`` is created (with its folder) if missing, unless
    ``create=False``: then a missing file is refused (``InvalidInput``), as a reader
    that opens a store must not leave an empty one behind."""

    _unlimited = "LIMIT -1"
    _hint_ids = True

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        migrations: Sequence[Migration] = SQLITE_MIGRATIONS,
        create: bool = True,
    ) -> None:
        self.path = Path(path).expanduser().resolve()
        if not create and not self.path.is_file():
            raise InvalidInput(f"no database at {self.path}")
        if create:
            _create_owner_only(self.path)
        self.url = f"sqlite:///{self.path}"
        self._busy_ms = int(busy_timeout_s * 1000)
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._connections: dict[sqlite3.Connection, int] = {}
        """Each open connection and the thread it belongs to."""
        self._use = threading.Condition()
        self._users: dict[int, int] = {}
        """Threads running a statement or a transaction (``_enter``), and how deep."""
        self._tracer: Callable[[str], object] | None = None
        self._connections_lock = threading.Lock()
        self._closed = False
        self._shares: dict[tuple[str, str], tuple[float, float, int, int]] = {}
        """(table, user) → (share, expiry, ``_appended`` and the table's rows then)."""
        self._appended = 0
        """Events appended by this store that may change indexed text (not those of
        ``TEXT_KEPT_KINDS``): the keyword statistics kept are counted again past them."""
        self._counted: dict[str, tuple[int, float, int, dict[str, int]]] = {}
        """table → (``_appended``, expiry, cut-off, each word's count): ``_term_counts``."""
        self._words = WordCounts(KEYWORD_STATS_TTL_S, per_user=False)
        self._indexes: dict[str, VectorIndex] = {"knowledge": VectorIndex(),
                                                 "conversations": VectorIndex()}
        self._checkpointer = _Checkpointer(self.path)
        self._migrate(migrations)

    # connections ------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreClosed("the store is closed")
            with _translated(f"cannot open {self.path}"):
                conn = sqlite3.connect(
                    self.path, isolation_level=None, timeout=self._busy_ms / 1000,
                    check_same_thread=False,
                )
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                self._retry(lambda c=conn: c.execute("PRAGMA journal_mode = WAL"))
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_BACKSTOP_PAGES}")
                # Forgotten text must not linger in free pages of the file.
                conn.execute("PRAGMA secure_delete = ON")
            self._local.conn = conn
            self._local.depth = 0
            self._local.tracer = None
            with self._connections_lock:
                self._connections[conn] = threading.get_ident()
            # A thread that ends takes its connection with it (worker pools such as
            # anyio's retire idle threads and start new ones): its ``threading.local``
            # data goes, and the holder with it. (A ``weakref.finalize`` per thread did
            # the same, but registering one while the interpreter exits, from a thread
            # still running, broke the exit's walk of the finalizers with a traceback.)
            self._local.holder = _ThreadConnection(conn, self._release)
        if self._local.tracer is not self._tracer:
            # Set by the connection's own thread (see ``trace``).
            self._local.tracer = self._tracer
            conn.set_trace_callback(self._tracer)
        return conn

    def _release(self, conn: sqlite3.Connection) -> None:
        """Close ``conn`` unless ``close`` has (its thread ended)."""
        with self._connections_lock:
            if self._connections.pop(conn, None) is None:
                return
        conn.close()

    def connections(self) -> int:
        """Open connections (one per thread that used the store and is still alive)."""
        with self._connections_lock:
            return len(self._connections)

    def trace(self, callback: Callable[[str], object] | None) -> None:
        """Call ``callback(sql)`` with every statement any connection of this store
        runs from now on (None stops): a cheap way to see what a call costs.

        Each thread's connection takes the new callback when that thread next asks for
        it, before its next statement or transaction: setting it from here, while
        another thread's statement holds that connection and calls the old callback,
        would wait on the connection holding the interpreter lock that callback
        waits for."""
        self._tracer = callback

    def close(self) -> None:
        """Close every connection once the statements and transactions under way in
        other threads end (up to ``CLOSE_WAIT_S``); calls made after it raise
        ``StoreClosed``. A connection still in use past the wait is closed by its own
        thread when that use ends: closing it mid-statement crashed the interpreter."""
        me = threading.get_ident()
        with self._use:
            self._closed = True
            self._use.wait_for(lambda: not self._users.keys() - {me}, timeout=CLOSE_WAIT_S)
            busy = set(self._users)
        self._checkpointer.close()
        with self._connections_lock:
            idle = [conn for conn, owner in self._connections.items() if owner not in busy]
            for conn in idle:
                del self._connections[conn]
                conn.close()

    def _enter(self) -> sqlite3.Connection:
        """This thread's connection, counted in use until ``_leave``: ``close`` waits."""
        me = threading.get_ident()
        with self._use:
            if self._closed:
                raise StoreClosed("the store is closed")
            self._users[me] = self._users.get(me, 0) + 1
        try:
            return self._conn()
        except BaseException:
            self._leave()
            raise

    def _leave(self) -> None:
        me = threading.get_ident()
        with self._use:
            depth = self._users[me] - 1
            if depth:
                self._users[me] = depth
                return
            del self._users[me]
            self._use.notify_all()
            closed = self._closed
        if closed:   # ``close`` left this thread's connection to it
            with self._connections_lock:
                mine = [conn for conn, owner in self._connections.items() if owner == me]
            for conn in mine:
                self._release(conn)

    def _retry(self, action: Any) -> Any:
        """Run ``action`` retrying while another process holds the write lock; past
        ``LOCK_RETRY_S`` the driver's error goes on to ``_translated``."""
        deadline = time.monotonic() + LOCK_RETRY_S
        delay = 0.005
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = self._enter()
        try:
            with _translated():
                rows: list[tuple[Any, ...]] = self._retry(
                    lambda: conn.execute(sql, tuple(params)).fetchall())
        finally:
            self._leave()
        return rows

    @contextmanager
    def _writing(self) -> Iterator[Run]:
        """A transaction (a savepoint when nested) on this thread's connection.
        Every driver error inside it, the caller's statements' included, is translated
        by ``_translated`` once, here."""
        conn = self._enter()
        try:
            with self._writing_on(conn) as run:
                yield run
        finally:
            self._leave()

    @contextmanager
    def _writing_on(self, conn: sqlite3.Connection) -> Iterator[Run]:
        depth: int = self._local.depth

        def run(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return conn.execute(sql, tuple(params)).fetchall()

        with _translated():
            if depth:
                conn.execute(f"SAVEPOINT sp{depth}")
                self._local.depth = depth + 1
                try:
                    yield run
                except BaseException:
                    conn.execute(f"ROLLBACK TO sp{depth}")
                    conn.execute(f"RELEASE sp{depth}")
                    raise
                else:
                    conn.execute(f"RELEASE sp{depth}")
                finally:
                    self._local.depth = depth
                return
            with self._write_lock:
                self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
                changes = conn.total_changes
                self._local.depth = 1
                self._local.purge = False
                self._local.committed = []
                try:
                    yield run
                    if self._local.purge:  # once per transaction, however many forgets
                        self._purge_fts(run)
                    self._retry(lambda: conn.execute("COMMIT"))
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                finally:
                    self._local.depth = 0
            if conn.total_changes != changes:   # a transaction that wrote nothing (a
                self._checkpointer.wrote()      # store opened at its latest schema) left no WAL
            for action in self._local.committed:
                action()

    # schema -----------------------------------------------------------------------
    def schema_version(self) -> int:
        """The highest migration applied to this file."""
        rows = self._read("SELECT max(version) FROM schema_version")
        return int(rows[0][0] or 0)

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        with self._writing() as run:
            run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at TEXT NOT NULL)", [])
        known = max((m.version for m in SQLITE_MIGRATIONS), default=0)
        if self.schema_version() > known:
            raise SchemaMismatch(
                f"{self.path} has schema version {self.schema_version()}, newer than this "
                f"ledgermem understands ({known}); upgrade ledgermem")
        for migration in migrations:
            with self._writing() as run:
                done = run("SELECT 1 FROM schema_version WHERE version = ?", [migration.version])
                if done:
                    continue
                for step in migration.statements:
                    if isinstance(step, str):
                        run(step, [])
                    else:
                        step(run)
                run("INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                    [migration.version, migration.name, iso(system_clock())])

    def _claiming(self, run: Run) -> None:
        """Nothing to do: the write lock ``BEGIN IMMEDIATE`` took keeps other claims out."""

    def redact(self, user_id: str, subject_id: str) -> None:
        with self._writing():
            super().redact(user_id, subject_id)
            self._local.purge = True
            self._local.committed.append(lambda: self._forget_vectors(user_id, subject_id))
            self._local.committed.append(self._counted.clear)  # no word of it stays

    def _deleted(self, table: str, user_id: str, ids: Sequence[str]) -> None:
        index = self._indexes.get(table)
        if index is not None:
            self._local.committed.append(lambda: index.forget(user_id, ids))

    def delete_user(self, user_id: str) -> int:
        with self._writing():
            removed = super().delete_user(user_id)
            self._local.purge = True
            self._local.committed.append(lambda: self._forget_vectors(user_id))
            self._local.committed.append(self._counted.clear)
            self._local.committed.append(self.vacuum)
        return removed

    def vacuum(self) -> None:
        """Rewrite the database file, then empty the WAL into it.

        ``secure_delete`` zeroes a deleted cell and a freed page, but not the stale
        copies of cells that an earlier page split or merge left in the unallocated gap
        of a b-tree page; only a rewrite removes those. ``delete_user`` runs this after
        it commits, so a forgotten user's text and ids leave the file. It costs a pass
        over the whole file and waits for other writers; after many single ``forget``s
        run it yourself (``ledgermem vacuum``). Row ids survive it: every table that
        another refers to by rowid has an ``INTEGER PRIMARY KEY``."""
        conn = self._enter()
        try:
            self._vacuum(conn)
        finally:
            self._leave()

    def _vacuum(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            raise StorageError("vacuum cannot run inside a transaction")
        with _translated(), self._write_lock, self._checkpointer.paused():
            self._retry(lambda: conn.execute("VACUUM"))
            # Busy while another process's connection checkpoints: the WAL must empty.
            deadline = time.monotonic() + LOCK_RETRY_S
            while self._retry(lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                              .fetchone())[0] and time.monotonic() < deadline:
                time.sleep(0.01)

    def _purge_fts(self, run: Run) -> None:
        """Rewrite the full-text indexes from their tables so deleted terms leave the
        index's pages too (``secure_delete`` then zeroes the freed pages). Run once at
        the commit of a transaction that forgot something (``redact``, ``delete_user``).

        A rebuild, not FTS5's ``optimize``: on SQLite 3.40 an ``optimize`` after each
        of ~1,300 writes corrupts the index ("database disk image is malformed"), and
        both cost a pass over the index."""
        self._rebuild_fts(run)

    def rebuild(self) -> None:
        super().rebuild()
        for index in self._indexes.values():
            index.reset()

    def settle(self) -> None:
        """Nothing to do on SQLite (see ``Store.settle``)."""

    def rebuild_fts(self) -> None:
        """Rebuild both FTS5 indexes from their tables."""
        with self._writing() as run:
            self._rebuild_fts(run)

    def _rebuild_fts(self, run: Run) -> None:
        for fts in ("knowledge_fts", "conversations_fts"):
            run(f"INSERT INTO {fts} ({fts}) VALUES ('rebuild')", [])
