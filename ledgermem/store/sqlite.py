"""The embedded store: one SQLite file in WAL mode with FTS5 and BLOB vectors.

Each thread gets its own connection. Writes run in ``BEGIN IMMEDIATE`` transactions,
serialised within the process by a lock and across processes by SQLite's busy
timeout, with a bounded retry so "database is locked" never reaches the caller.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from ..clock import iso, system_clock
from ..errors import InvalidInput, SchemaMismatch, StorageError, StoreClosed
from ..types import Event, ItemQuery
from . import vector_file
from .base import MatchMode, Table, TurnQuery, Vector, iter_chunks
from .migrations import FTS_COLUMNS, SQLITE_MIGRATIONS, Migration
from .sql import (
    CONTEXT_TURNS,
    EMBED_TEXT,
    NEIGHBOUR_SMOOTHING,
    TERMS_PER_STATEMENT,
    Run,
    SQLStore,
    common_term_rows_sql,
    embedded_table,
    item_where_sql,
    keyword_hits,
    marks,
    turn_where_sql,
)
from .vector_index import UserVectors, VectorIndex
from .word_counts import WordCounts

__all__ = ["SQLiteStore", "fts_match_sql"]

LOCK_RETRY_S = 120.0
_BM25: dict[str, str] = {
    "knowledge": "bm25(knowledge_fts, 1.0, 1.0, 0.0)",
    "conversations": "bm25(conversations_fts, 1.0, 1.0, 0.4, 1.0, 0.0)",
}
"""BM25 with column weights (``FTS_COLUMNS`` and the scope token, which weighs
nothing). Knowledge: content, entity. Turns: content, speaker name, neighbours' text
(light), day in words."""


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


def fts_match_sql(terms: Sequence[str], mode: MatchMode) -> str:
    """An FTS5 MATCH expression that treats every term as a literal phrase (``two``:
    any two of them, as an OR of pairs, FTS5 having no "at least n of"; ``triples``:
    all of one consecutive triple, an OR of ANDs).

    Terms are double-quoted (inner quotes doubled), so FTS5 operators and syntax in
    user text (``AND``, ``NEAR``, ``*``, ``-``, parentheses) are matched as words.
    """
    quoted = ['"' + term.replace('"', '""') + '"' for term in terms]
    if mode == "triples":
        return " OR ".join(f"({' '.join(quoted[start:start + 3])})"
                           for start in range(0, len(quoted), 3))
    if mode == "two" and len(quoted) > 2:
        return " OR ".join(f"({a} {b})" for a, b in combinations(quoted, 2))
    return (" OR " if mode == "or" or len(quoted) == 1 else " ").join(quoted)


def keyword_scope(user_id: str) -> str:
    """The one-word token the full-text indexes hold for ``user_id``'s rows: what the
    ``scope`` column computes, ``'u' || hex(user_id)`` (FTS5 folds the case)."""
    return "u" + user_id.encode("utf-8").hex()


def text_match(table: Table, terms: Sequence[str], mode: MatchMode) -> str:
    """``fts_match_sql`` over ``table``'s text columns (never the scope token)."""
    return columns_match(table, fts_match_sql(terms, mode))


def columns_match(table: Table, expression: str) -> str:
    """An FTS5 ``expression`` over ``table``'s text columns (never the scope token)."""
    return f"{{{' '.join(FTS_COLUMNS[table])}}} : ({expression})"


def scoped_match(table: Table, user_id: str, terms: Sequence[str], mode: MatchMode) -> str:
    """``text_match``, limited to ``user_id``'s rows by their scope token."""
    return in_scope(user_id, text_match(table, terms, mode))


def in_scope(user_id: str, match: str) -> str:
    """An FTS5 ``match`` limited to ``user_id``'s rows by their scope token.

    The token is a filter, not the check: a search still compares ``user_id`` (two
    ids could stem to one token)."""
    return f'scope : "{keyword_scope(user_id)}" AND {match}'


SCOPE_SHARE = 0.5
"""A user holding less than this share of a table's rows is searched through the scope
token; a larger one without it. FTS5 walks the token's row list to intersect it with
the query's: about 35 ns a row, 2.8 ms for a user of 80,000 rows, where ranking the
few other users' rows and dropping them costs less (measured: docs/retrieval.md,
"Keyword search scoped to its user")."""
KEYWORD_STATS_TTL_S = 60.0
"""How long a user's share of a table, and a query's term counts, are reused before
they are counted again (another process's writes do not drop them)."""
COUNTED_WORDS = 10_000
"""Words whose counts a store keeps per table (``_term_counts``) before it starts over."""
SPAN_SHARE = 0.25
SPAN_ROWS = 20_000
"""A search of turns inside a time range reads only the index's stretch of rowids
between the range's turns when that stretch is at most ``SPAN_SHARE`` of the table and
the range holds at most ``SPAN_ROWS`` of the user's turns (``SQLiteStore._turn_span``)."""
SHARE_RECOUNT_ROWS = 1_000
"""A share is also counted again once this process has appended more events since the
count than the table then held (or than this many): a table that grew from empty."""
FEW_PASS_SHARE = 0.1
FEW_PASS_ROWS = 10_000
"""A vector search whose first slice of best rows had fewer than ``FEW_PASS_SHARE`` of
them pass its filters reads every row that passes (when at most ``FEW_PASS_ROWS`` do)
and ranks those, instead of checking ever larger slices (``SQLiteStore._filtered``)."""


log = logging.getLogger("ledgermem.store")

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


class SQLiteStore(SQLStore):
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.url = f"sqlite:///{self.path}"
        self._busy_ms = int(busy_timeout_s * 1000)
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._connections: list[sqlite3.Connection] = []
        self._tracer: Callable[[str], object] | None = None
        self._connections_lock = threading.Lock()
        self._closed = False
        self._shares: dict[tuple[str, str], tuple[float, float, int, int]] = {}
        """(table, user) → (share, expiry, ``_appended`` and the table's rows then)."""
        self._appended = 0
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
                self._connections.append(conn)
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
            if conn not in self._connections:
                return
            self._connections.remove(conn)
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
        self._closed = True
        self._checkpointer.close()
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

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
        conn = self._conn()
        with _translated():
            rows: list[tuple[Any, ...]] = self._retry(
                lambda: conn.execute(sql, tuple(params)).fetchall())
        return rows

    @contextmanager
    def _writing(self) -> Iterator[Run]:
        """A transaction (a savepoint when nested) on this thread's connection.
        Every driver error inside it, the caller's statements' included, is translated
        by ``_translated`` once, here."""
        conn = self._conn()
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

    # full-text search -------------------------------------------------------------
    def keyword_search_items(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        # Only current-ness narrows a plain query beyond its user: few of the best
        # rows are superseded, so ranking the index alone first pays (``_bm25``).
        plain = query == ItemQuery(include_superseded=query.include_superseded)
        return self._keyword("knowledge", user_id, terms, mode, query, plain, limit)

    def keyword_search_turns(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        return self._keyword("conversations", user_id, terms, mode, query,
                             query == TurnQuery(), limit)

    def _keyword(self, table: Table, user_id: str, terms: Sequence[str], mode: MatchMode,
                 query: ItemQuery | TurnQuery, plain: bool, limit: int
                 ) -> list[tuple[str, float]]:
        """``sql.keyword_hits`` over FTS5 (BM25, counts and statistics of the whole file),
        each match limited to the user's rows by their ``scope`` token unless the user
        holds most of them (``SCOPE_SHARE``)."""
        if not terms:
            return []
        fts = f"{table}_fts"
        share = self._share(table, user_id)
        scoped = share < SCOPE_SHARE

        def match(words: Sequence[str], how: MatchMode) -> str:
            return (scoped_match(table, user_id, words, how) if scoped
                    else text_match(table, words, how))

        spans: list[tuple[int, int] | None] = []  # ``_turn_span``, read on first use

        def where(by_id: bool) -> tuple[str, list[Any]]:
            if isinstance(query, ItemQuery):
                return item_where_sql(user_id, query, prefix="t.", by_id=by_id)
            clause, params = turn_where_sql(user_id, query, prefix="t.", by_id=by_id)
            if not spans:
                spans.append(self._turn_span(user_id, query))
            if spans[0] is None:
                return clause, params
            return f"{fts}.rowid BETWEEN ? AND ? AND {clause}", [*spans[0], *params]

        def newest(words: Sequence[str], how: MatchMode) -> list[str]:
            clause, params = where(False)
            return [r[0] for r in self._read(
                f"SELECT t.id FROM {fts} JOIN {table} AS t ON t.pk = {fts}.rowid "
                f"WHERE {fts} MATCH ? AND {clause} ORDER BY {fts}.rowid DESC LIMIT ?",
                [match(words, how), *params, limit])]

        return keyword_hits(
            terms, mode, limit,
            bm25=lambda words, how: self._bm25(table, match(words, how), where,
                                               plain, limit, 1.0 if scoped else share),
            common_terms=lambda words: self._common_terms(fts, table, words), newest=newest)

    def _turn_span(self, user_id: str, query: TurnQuery | ItemQuery) -> tuple[int, int] | None:
        """For a search of turns inside a time range, the least and greatest ``pk`` of
        the user's turns in that range; None without a range, or when bounding by them
        would not pay.

        Bounding the match's rowids by them changes no answer (the range's own filter
        still applies), but FTS5 then reads only that stretch of each term's postings:
        turns are mostly written in time order, so a day or a month of them is a short
        stretch, and a time-naming search costs what its window holds rather than every
        row matching its words (at 100,000 turns a month's search took 10 ms bounded,
        38 ms at p95 not).

        The exact bounds take a read of every turn in the range (0.3 µs a turn), so two
        probes of the ``(user_id, ts)`` index come first: the range's earliest and
        latest turn. When the ``pk`` stretch between them is more than ``SPAN_SHARE`` of
        the table, bounding would skip too little to pay for that read (a year of
        100,000 turns cost 35 ms to read twice); and the read stops past ``SPAN_ROWS``
        turns, for turns written out of time order."""
        if not isinstance(query, TurnQuery) or (query.time_from is None
                                                and query.time_to is None):
            return None
        times = [(f"ts {op} ?", bound) for op, bound in ((">=", query.time_from),
                                                         ("<=", query.time_to))
                 if bound is not None]
        inside = " AND ".join(["user_id = ?", *(clause for clause, _ in times)])
        params = [user_id, *(bound for _, bound in times)]
        first, last, top = self._read(
            f"SELECT (SELECT pk FROM conversations WHERE {inside} ORDER BY ts LIMIT 1), "
            f"(SELECT pk FROM conversations WHERE {inside} ORDER BY ts DESC LIMIT 1), "
            f"(SELECT max(pk) FROM conversations)", [*params, *params])[0]
        if first is None:
            return 0, -1  # no turn in the range
        if abs(last - first) > SPAN_SHARE * top:
            return None
        low, high, rows = self._read(
            f"SELECT min(pk), max(pk), count(*) FROM (SELECT pk FROM conversations "
            f"WHERE {inside} LIMIT {SPAN_ROWS + 1})", params)[0]
        return None if rows > SPAN_ROWS else (low, high)

    def _postings(self, user_id: str, terms: Sequence[str], cap: int
                  ) -> dict[str, list[int]]:
        """One FTS5 match of each term alone (through the user's scope token, as
        ``_keyword``), ``TERMS_PER_STATEMENT`` terms a statement."""
        return dict(zip(terms, self._rowids(user_id, [
            text_match("knowledge", [term], "or") for term in terms], cap), strict=True))

    def _holding_both(self, user_id: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]
                      ) -> list[set[int] | None]:
        """One FTS5 match of each pair, ``(first OR …) AND (second OR …)``: FTS5 steps
        through a common word's doclist by rowid to the rows holding the rarer words, so
        that word's postings are not read (1–2 ms where two-of over both ranked its
        holders in 7–13 ms at 100,000 items)."""
        return [set(pks) for pks in self._rowids(user_id, [columns_match(
            "knowledge", f"({fts_match_sql(first, 'or')}) AND ({fts_match_sql(second, 'or')})")
            for first, second in pairs], None)]

    def _rowids(self, user_id: str, matches: Sequence[str], cap: int | None
                ) -> list[list[int]]:
        """The rowids of the knowledge rows each FTS5 expression matches (up to ``cap`` + 1
        of them), through the user's scope token where it narrows the search,
        ``TERMS_PER_STATEMENT`` expressions a statement. Each comes back as one JSON
        array (``json_group_array``): a row per rowid cost twice as much to fetch, and
        a comma-separated list half as much again to parse."""
        scoped = self._share("knowledge", user_id) < SCOPE_SHARE
        limit = "" if cap is None else f" LIMIT {int(cap) + 1}"
        found: list[list[int]] = []
        for part in iter_chunks(matches, TERMS_PER_STATEMENT):
            rows = dict(self._read(" UNION ALL ".join(
                f"SELECT {index}, (SELECT json_group_array(rowid) FROM (SELECT rowid FROM "
                f"knowledge_fts WHERE knowledge_fts MATCH ?{limit}))"
                for index in range(len(part))),
                [in_scope(user_id, match) if scoped else match for match in part]))
            found.extend(json.loads(rows[index]) for index in range(len(part)))
        return found

    def _claiming(self, run: Run) -> None:
        """Nothing to do: the write lock ``BEGIN IMMEDIATE`` took keeps other claims out."""

    def _share(self, table: Table, user_id: str) -> float:
        """About the share of ``table``'s rows that are ``user_id``'s; ``SCOPE_SHARE``
        when it is that or more (counted no further). Kept ``KEYWORD_STATS_TTL_S``, or until
        ``SHARE_RECOUNT_ROWS``."""
        key, now = (table, user_id), time.monotonic()
        known = self._shares.get(key)
        if (known is None or known[1] <= now
                or self._appended - known[2] > max(known[3], SHARE_RECOUNT_ROWS)):
            total = f"(SELECT coalesce(max(pk), 0) FROM {table})"
            total_rows, rows = self._read(
                f"SELECT {total}, (SELECT count(*) FROM (SELECT 1 FROM {table} WHERE "
                f"user_id = ? LIMIT (SELECT CAST({total} * ? AS INTEGER) + 1)))",
                [user_id, SCOPE_SHARE])[0]
            share = min(1.0, rows / total_rows) if total_rows else 0.0
            if len(self._shares) >= 10_000:
                self._shares.clear()
            known = self._shares[key] = (min(share, SCOPE_SHARE), now + KEYWORD_STATS_TTL_S,
                                         self._appended, total_rows)
        return known[0]

    def append(self, events: Sequence[Event]) -> None:
        super().append(events)
        self._appended += len(events)

    def _bm25(self, table: Table, match: str,
              where: Callable[[bool], tuple[str, list[Any]]], plain: bool, limit: int,
              share: float) -> list[tuple[str, float]]:
        """The ``limit`` best rows matching ``match`` and ``where``, by BM25.

        A plain query (``where`` narrows no further than the user, and for items their
        being current) ranks the index alone and then reads only its best rows: a join
        ranks every matching row after reading it from the table, which cost a LoCoMo
        search as much as the ranking. ``share`` is the part of the index's best rows
        expected to pass (the user's share of the table, when ``match`` does not hold
        the scope token). The filter marks the rows it drops (a left join); should it
        drop so many that fewer than ``limit`` remain, the joined statement runs."""
        fts, bm25 = f"{table}_fts", _BM25[table]
        if plain:
            # Without the scope token the index's best rows include other users',
            # about 1 - ``share`` of them.
            wanted = int((limit + limit // 4 + 1) / share)
            clause, params = where(True)
            ranked = self._read(
                f"SELECT t.id, -s.score FROM (SELECT rowid, {bm25} AS score FROM {fts} "
                f"WHERE {fts} MATCH ? ORDER BY score LIMIT ?) AS s "
                f"LEFT JOIN {table} AS t ON t.pk = s.rowid AND {clause} ORDER BY s.score",
                [match, wanted, *params])
            kept = [(doc_id, float(score)) for doc_id, score in ranked if doc_id is not None]
            if len(kept) >= limit or len(ranked) < wanted:
                return kept[:limit]
        clause, params = where(False)
        rows = self._read(
            f"SELECT t.id, -{bm25} AS score FROM {fts} JOIN {table} AS t ON t.pk = {fts}.rowid "
            f"WHERE {fts} MATCH ? AND {clause} ORDER BY {bm25} LIMIT ?",
            [match, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def _common_terms(self, fts: str, table: str, terms: Sequence[str]) -> set[str]:
        """The terms held by more rows than ``common_term_rows`` allows (see
        ``_term_counts``)."""
        cutoff, counts = self._term_counts(fts, table, terms)
        return {word for word, count in counts.items() if count > cutoff}

    def term_counts(self, user_id: str, table: Table, terms: Sequence[str]
                    ) -> tuple[int, dict[str, int]]:
        """Counted in the whole file as ``_term_counts`` counts, and kept in ``_words``
        with the cut-off they were counted to: no statement when every word is kept,
        else one per ``TERMS_PER_STATEMENT`` words not kept (and, when the rows grew
        past a step of the cut-off, one for the kept words that stopped past the old
        one)."""
        fts, words = f"{table}_fts", sorted(set(terms))
        cutoff = self._words.cutoff(table, user_id)
        counts, missing = (({}, words) if cutoff is None
                           else self._words.known(table, user_id, words, cutoff))
        if missing or cutoff is None:
            counted_to, fresh = self._count_words(fts, table, missing)
            if cutoff is not None and counted_to != cutoff:
                counts, again = self._words.known(
                    table, user_id, [word for word in words if word not in fresh], counted_to)
                if again:
                    fresh.update(self._count_words(fts, table, again)[1])
            cutoff = counted_to
            self._words.keep(table, user_id, fresh, cutoff)
            counts.update(fresh)
        return cutoff, counts

    def _term_counts(self, fts: str, table: str, terms: Sequence[str]
                     ) -> tuple[int, dict[str, int]]:
        """``common_term_rows`` of the whole file (FTS5's BM25 statistics are the
        file's) and each term's rows, each count stopping past that cut-off.

        Each word's count is kept until this process appends an event (or
        ``KEYWORD_STATS_TTL_S``), and only the words not kept are counted: a search
        counts its words for the ``and`` search and again for the ``or`` one, and a
        time-naming one again without its time words (for the rows inside the
        window)."""
        words = sorted(set(terms))
        now, appended = time.monotonic(), self._appended
        kept = self._counted.get(table)
        if (kept is None or kept[0] != appended or kept[1] <= now
                or len(kept[3]) + len(words) > COUNTED_WORDS):
            kept = self._counted[table] = (appended, now + KEYWORD_STATS_TTL_S, 0, {})
        known = kept[3]
        missing = [word for word in words if word not in known]
        if missing or not known:
            cutoff, counted = self._count_words(fts, table, missing)
            known.update(counted)
            kept = self._counted[table] = (kept[0], kept[1], cutoff, known)
        return kept[2], {word: known[word] for word in words}

    def _count_words(self, fts: str, table: str, words: Sequence[str]
                     ) -> tuple[int, dict[str, int]]:
        """The cut-off and each word's rows, counted past it no further: one statement
        for the corpus size and up to ``TERMS_PER_STATEMENT`` words (a statement per
        word cost a search 1 + n statements twice, for turns and for the knowledge they
        gave)."""
        limit, limit_params = common_term_rows_sql(f"SELECT coalesce(max(pk), 0) FROM {table}")
        cutoff, counts = 0, dict[str, int]()
        for part in list(iter_chunks(words, TERMS_PER_STATEMENT)) or [[]]:
            columns = "".join(f", (SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} "
                              f"MATCH ? LIMIT {limit} + 1))" for _ in part)
            params: list[Any] = list(limit_params)
            for word in part:
                params += [fts_match_sql([word], "or"), *limit_params]
            row = self._read(f"SELECT {limit}{columns}", params)[0]
            cutoff = row[0]
            counts.update(zip(part, row[1:], strict=True))
        return cutoff, counts

    def redact(self, user_id: str, subject_id: str) -> None:
        with self._writing():
            super().redact(user_id, subject_id)
            self._local.purge = True
            self._local.committed.append(lambda: self._forget_vectors(user_id, subject_id))

    def _deleted(self, table: str, user_id: str, ids: Sequence[str]) -> None:
        index = self._indexes.get(table)
        if index is not None:
            self._local.committed.append(lambda: index.forget(user_id, ids))

    def delete_user(self, user_id: str) -> int:
        with self._writing():
            removed = super().delete_user(user_id)
            self._local.purge = True
            self._local.committed.append(lambda: self._forget_vectors(user_id))
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
        conn = self._conn()
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

    # embeddings -------------------------------------------------------------------
    def pending_embeddings(self, table: Table, limit: int) -> list[tuple[str, str]]:
        rows = self._read(
            f"SELECT id, {EMBED_TEXT[table]} FROM {embedded_table(table)} WHERE embedding IS NULL "
            "ORDER BY pk LIMIT ?", [limit])
        return [(r[0], r[1]) for r in rows]

    @contextmanager
    def claim_pending_embeddings(self, table: Table, limit: int
                                 ) -> Iterator[list[tuple[str, str]]]:
        # No lock: holding SQLite's write lock while a model runs would stall every
        # writer. Two workers may embed the same row; set_embeddings is idempotent.
        yield self.pending_embeddings(table, limit)

    def set_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> int:
        name = embedded_table(table)
        done = 0
        with self._writing() as run:
            self._check_live_model(run, model)
            seq = self._next_emb_seq(run, len(rows))
            for row_id, text, vector in rows:
                seq += 1
                blob = np.asarray(vector, dtype=np.float32).tobytes()
                done += len(run(f"UPDATE {name} SET embedding = ?, embedding_model = ?, "
                                f"emb_seq = ? WHERE id = ? AND {EMBED_TEXT[name]} = ? RETURNING 1",
                                [blob, model, seq, row_id, text]))
        return done

    def _next_emb_seq(self, run: Run, count: int) -> int:
        """Reserve ``count`` embedding sequence numbers; returns the one before the first.

        The counter only grows (even when vectors are cleared), so another process's
        index, which reads vectors past the last number it saw, never misses any.
        """
        row = run("SELECT value FROM meta WHERE key = 'emb_seq'", [])
        start = int(row[0][0]) if row else int(run(
            "SELECT max(coalesce((SELECT max(emb_seq) FROM knowledge), 0), "
            "coalesce((SELECT max(emb_seq) FROM conversations), 0))", [])[0][0])
        run("INSERT INTO meta (key, value) VALUES ('emb_seq', ?) ON CONFLICT (key) DO UPDATE "
            "SET value = excluded.value", [str(start + count)])
        return start

    vector_file_rows: int | None = 10_000
    """Scopes with at least this many vectors keep them in a vector file beside the
    database (``vector_file``), so a new process maps them instead of reading every
    BLOB; smaller ones load in well under a second. None: never."""

    def _vectors(self, table: Table, user_id: str, dims: int) -> UserVectors:
        """This user's index, topped up with vectors written since it was last read."""
        index = self._indexes[table]
        with index.lock:
            block = index.users.get(user_id)
            if block is None or block.matrix.shape[1] != dims:
                block = index.users[user_id] = self._open_vectors(table, user_id, dims)
            rows = self._read(
                f"SELECT emb_seq, id, embedding FROM {embedded_table(table)} WHERE user_id = ? AND "
                "emb_seq > ? ORDER BY emb_seq", [user_id, block.cursor])
            if rows:
                block.upsert([r[1] for r in rows], [r[2] for r in rows], [r[0] for r in rows])
                block.cursor = int(rows[-1][0])
            self._persist_vectors(table, user_id, block)
            return block

    def _stored_seqs(self, table: Table, user_id: str, cursor: int, *, aggregate: bool
                     ) -> list[tuple[Any, ...]]:
        """The user's ``emb_seq`` numbers up to ``cursor`` (count and sum when
        ``aggregate``), from the ``(user_id, emb_seq)`` index alone: no BLOB is read."""
        what = "count(*), coalesce(sum(emb_seq), 0)" if aggregate else "emb_seq"
        return self._read(f"SELECT {what} FROM {embedded_table(table)} WHERE user_id = ? AND "
                          "emb_seq IS NOT NULL AND emb_seq <= ?", [user_id, cursor])

    def _open_vectors(self, table: Table, user_id: str, dims: int) -> UserVectors:
        """The user's vector file when it matches the store, else an empty block (which
        the caller fills from the BLOBs).

        The check is exact and reads no BLOB: the file must be of the store's model and
        dimension, written at or below the store's ``emb_seq`` counter (a store rolled
        back to an older copy is not the one it was written for), and the numbers the
        store holds up to the file's cursor must be ones the file accounts for; rows
        the store no longer holds (forgotten, pruned, re-embedded) stop scoring.
        Numbers are unique and only grow, so the store's numbers up to the cursor can
        only lose members: count and sum agreeing means the sets are equal.
        """
        if self.vector_file_rows is None:
            return UserVectors(dims)
        path = vector_file.file_for(vector_file.vectors_dir(self.path), table, user_id)
        loaded = vector_file.read(path, table)
        if loaded is None or loaded.dims != dims:
            return UserVectors(dims)
        if (loaded.counter > int(self.get_meta("emb_seq") or 0)
                or loaded.model != (self.get_meta("embedding_model") or "")):
            return UserVectors(dims)
        block = UserVectors.mapped(loaded.matrix, loaded.ids, loaded.seqs, loaded.ghosts,
                                   loaded.cursor)
        count, total = self._stored_seqs(table, user_id, block.cursor, aggregate=True)[0]
        if (int(count), int(total)) != block.accounted():
            stored = np.asarray([r[0] for r in self._stored_seqs(
                table, user_id, block.cursor, aggregate=False)], dtype=np.int64)
            if not block.retain(stored):
                return UserVectors(dims)
            block.file_rows = 0  # holds rows the store no longer has: write it again
        return block

    def _persist_vectors(self, table: Table, user_id: str, block: UserVectors) -> None:
        """Write the user's vector file when the scope is large enough and the file is
        missing, holds removed rows or misses many rows. Only rows the store still
        holds are written, and a file that a concurrent forget made stale is removed."""
        # Runs on every vector search: the checks that need no pass over the rows first.
        if self.vector_file_rows is None or block.count < self.vector_file_rows or (
                block.file_rows and block.count - block.file_rows
                < max(5_000, block.file_rows // 10)):
            return
        if int(block.alive[: block.count].sum()) < self.vector_file_rows:
            return
        stored = np.asarray([r[0] for r in self._stored_seqs(
            table, user_id, block.cursor, aggregate=False)], dtype=np.int64)
        if not block.retain(stored):
            block.file_rows = block.count  # missed rows (never in one store): no file
            return
        path = vector_file.file_for(vector_file.vectors_dir(self.path), table, user_id)
        if not vector_file.write(
                path, table, model=self.get_meta("embedding_model") or "",
                matrix=block.matrix[: block.count], keep=block.alive[: block.count],
                seqs=block.seqs[: block.count], ghosts=block.ghosts, ids=block.ids,
                cursor=block.cursor, counter=int(self.get_meta("emb_seq") or 0)):
            block.file_rows = block.count  # read-only location: do not try on every search
            return
        # A forget that committed after the numbers above were read may have removed
        # the file before it was renamed into place: then this file holds that row.
        count, total = self._stored_seqs(table, user_id, block.cursor, aggregate=True)[0]
        if (int(count), int(total)) != block.accounted():
            path.unlink(missing_ok=True)
        block.file_rows = block.count

    def _forget_vectors(self, user_id: str, row_id: str | None = None) -> None:
        """After a forget: remove the user's vector files, and stop scoring the row
        (``row_id``) or drop the user's blocks (the whole user)."""
        for table, index in self._indexes.items():
            vector_file.discard(vector_file.vectors_dir(self.path), table, user_id)
            with index.lock:
                block = index.users.get(user_id)
                if block is None:
                    continue
                if row_id is None:
                    del index.users[user_id]
                else:
                    block.forget([row_id])
                    block.file_rows = 0

    def _discard_vector_files(self) -> None:
        """Every vector file is stale (vectors cleared or another model promoted)."""
        vector_file.discard_all(vector_file.vectors_dir(self.path))

    def _turn_neighbours(self, user_id: str, block: UserVectors) -> None:
        """Give ``block`` each turn's neighbours in its session (positions, -1 for none);
        recomputed only when the block changed, and then only for the sessions of the
        rows it gained since (a turn added to a conversation changes its session's
        neighbours, no other's). A block that lost rows (``forget``, ``retain``) has
        none, and gets every session's anew."""
        key = (block.count, block.cursor)
        known = block.neighbours
        if known is not None and block.neighbours_key == key:
            return
        if known is None or len(known) > block.count or (
                block.count - len(known) > block.count // 4):
            rows = self._read("SELECT id, session_id FROM conversations WHERE user_id = ? "
                              "ORDER BY session_id, ts, pk", [user_id])
            neighbours = np.full((block.count, 2 * CONTEXT_TURNS), -1, dtype=np.intp)
        else:
            sessions = sorted({row[0] for ids in iter_chunks(block.ids[len(known):block.count])
                               for row in self._read(
                                   "SELECT DISTINCT session_id FROM conversations WHERE "
                                   f"+user_id = ? AND id IN ({', '.join('?' * len(ids))})",
                                   [user_id, *ids])})
            rows = [row for part in iter_chunks(sessions) for row in self._read(
                "SELECT id, session_id FROM conversations WHERE user_id = ? AND session_id "
                f"IN ({', '.join('?' * len(part))}) ORDER BY session_id, ts, pk",
                [user_id, *part])]
            neighbours = np.concatenate([known, np.full(
                (block.count - len(known), known.shape[1]), -1, dtype=np.intp)])
        # The turns read, in session order: each one's position in the block (-1: no
        # vector) and its session's number; then, per offset, the turn that far away in
        # the same session (whole arrays: a loop per turn took 0.5 s at 100,000).
        position = block.position
        at = np.fromiter((position.get(row[0], -1) for row in rows), dtype=np.intp,
                         count=len(rows))
        session = np.cumsum(np.fromiter(
            (n == 0 or row[1] != rows[n - 1][1] for n, row in enumerate(rows)), dtype=bool,
            count=len(rows)))
        here = np.flatnonzero(at >= 0)
        neighbours[at[here]] = -1
        offsets = [o for o in range(-CONTEXT_TURNS, CONTEXT_TURNS + 1) if o]
        for slot, offset in enumerate(offsets):
            there = here + offset
            inside = (there >= 0) & (there < len(rows))
            inside[inside] = session[there[inside]] == session[here[inside]]
            neighbours[at[here[inside]], slot] = at[there[inside]]
        block.neighbours, block.neighbours_key = neighbours, key

    def _vector_search(self, table: Table, user_id: str, vector: Vector, where: str,
                       params: list[Any], limit: int) -> list[tuple[str, float]]:
        """Cosine ranking of the user's vectors (exact, or in two stages for a large
        scope: ``UserVectors.shortlist``), then the SQL filters on growing slices of
        that ranking until ``limit`` rows pass (or every row was tried).

        Turns are scored with their neighbours (see ``NEIGHBOUR_SMOOTHING``)."""
        query = np.asarray(vector, dtype=np.float32)
        block = self._vectors(table, user_id, query.shape[0])
        if block.count == 0:
            return []
        smoothing = NEIGHBOUR_SMOOTHING if table == "conversations" else 0.0
        with self._indexes[table].lock:
            if smoothing:
                self._turn_neighbours(user_id, block)
            scores = block.shortlist(query, smoothing=smoothing)
            exact = scores is None
            if scores is None:
                scores = block.scores(query, smoothing)
        found = self._filtered(table, block, scores, where, params, limit)
        if len(found) < limit and not exact:  # filters left too few of the shortlist
            with self._indexes[table].lock:
                scores = block.scores(query, smoothing)
            found = self._filtered(table, block, scores, where, params, limit)
        return found

    def _filtered(self, table: Table, block: UserVectors, scores: Any, where: str,
                  params: list[Any], limit: int) -> list[tuple[str, float]]:
        """The best-scored rows that pass the SQL filters, reading growing slices of
        the ranking until ``limit`` rows pass (or every scored row was tried); when few
        of the first slice pass (``FEW_PASS_SHARE``), those of the rows that pass.

        Rows are looked up by the ``emb_seq`` of the vector scored, through the
        ``(user_id, emb_seq)`` index: only a row that still holds that vector passes
        (one deleted, or rewritten and not embedded again yet, by this process or
        another, does not: as on PostgreSQL, whose search reads the stored vector).
        Unfiltered, the index alone answers; by id, each row cost a probe of the id
        index and one of the table (0.38 → 0.15 ms for 75 rows of a LoCoMo search)."""
        found: list[tuple[str, float]] = []
        # Most rows pass (the filters are the caller's; dead rows never score): a first
        # slice of 1.5 × limit, growing 4× while too few pass. Checking 4 × limit ids
        # first cost 1.6 ms of a 100,000-item search.
        start, step = 0, max(limit + limit // 2, 32)
        while len(found) < limit and start < block.count:
            best = block.best(scores, start, start + step)
            best = best[np.isfinite(scores[best])]
            if not len(best):
                break
            chunk, seqs = best.tolist(), block.seqs[best].tolist()
            keep = {r[0] for r in self._read(
                f"SELECT emb_seq FROM {table} INDEXED BY {table}_emb WHERE {where} "
                f"AND emb_seq IN ({marks(len(seqs))})", [*params, *seqs])}
            ids = block.ids
            found += [(ids[i], score) for i, seq, score
                      in zip(chunk, seqs, scores[best].tolist(), strict=True) if seq in keep]
            if (not start and step < block.count
                    and len(found) < min(limit, FEW_PASS_SHARE * len(chunk))):
                # Few rows pass: slices would check most of the scope to find them
                # (3.6 s at 100,000 items for a filter no row passes). ``+emb_seq``:
                # the filters' index, not a walk of the user's rows by vector number.
                passing = self._read(f"SELECT emb_seq FROM {table} WHERE {where} AND "
                                     f"+emb_seq IS NOT NULL LIMIT {FEW_PASS_ROWS + 1}", params)
                if len(passing) <= FEW_PASS_ROWS:
                    return _best_of(block, scores, [r[0] for r in passing], limit)
            start += step
            step *= 4
        return found[:limit]

    def vector_search_items(
        self, user_id: str, vector: Vector, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = item_where_sql(user_id, query)
        return self._vector_search("knowledge", user_id, vector, where, params, limit)

    def vector_search_turns(
        self, user_id: str, vector: Vector, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = turn_where_sql(user_id, query)
        return self._vector_search("conversations", user_id, vector, where, params, limit)

    def _vector_param(self, vector: Vector) -> Any:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def promote_staged(self, model: str, dimensions: int) -> bool:
        if not super().promote_staged(model, dimensions):
            return False
        for index in self._indexes.values():
            index.reset()
        self._discard_vector_files()
        return True

    def _emb_seq_sql(self, run: Run, table: str) -> tuple[str, list[Any]]:
        top = int(run(f"SELECT coalesce(max(pk), 0) FROM {table}", [])[0][0])
        return f"? + {table}.pk", [self._next_emb_seq(run, top)]

    def clear_embeddings(self) -> None:
        with self._writing() as run:
            for table in ("knowledge", "conversations"):
                run(f"UPDATE {table} SET embedding = NULL, embedding_model = NULL, "
                    "emb_seq = NULL", [])
        for index in self._indexes.values():
            index.reset()
        self._discard_vector_files()

    def _embedding_cache(self, run: Run) -> list[tuple[str, str, bytes, str, int]]:
        return [
            (table, *row)
            for table in ("knowledge", "conversations")
            for row in run(f"SELECT id, embedding, embedding_model, emb_seq FROM {table} "
                           "WHERE embedding IS NOT NULL", [])
        ]

    def _restore_embeddings(self, run: Run, kept: Any) -> None:
        """Vectors go back on the rows they were made for (the text is the same: any
        later content change had already cleared them)."""
        for table, row_id, blob, model, seq in kept:
            run(f"UPDATE {table} SET embedding = ?, embedding_model = ?, emb_seq = ? "
                "WHERE id = ?", [blob, model, seq, row_id])


def _best_of(block: UserVectors, scores: Any, seqs: Sequence[int], limit: int
             ) -> list[tuple[str, float]]:
    """The ``limit`` best-scored rows of ``block`` among those holding the vectors
    numbered ``seqs``, as (id, score), best first."""
    rows = np.flatnonzero(np.isin(block.seqs[: block.count], np.asarray(seqs, dtype=np.int64))
                          & np.isfinite(scores[: block.count]))
    rows = rows[np.argsort(-scores[rows], kind="stable")][:limit]
    return [(block.ids[i], float(scores[i])) for i in rows]
