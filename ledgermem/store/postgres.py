"""The server store: PostgreSQL with tsvector full-text search and pgvector.

Many processes on many machines share one database. Connections come from a
psycopg 3 pool; a write transaction keeps its connection in a thread-local, so
nested writes become savepoints and reads inside a write see it. The ledger
projection and the portable queries are ``SQLStore``'s, run with ``?`` rewritten
to ``%s``. Connections and transactions are ``pg_connection``'s, keyword search
``pg_keyword``'s, embeddings and vector search ``pg_vectors``'s.

Isolation has two walls: every statement filters on ``user_id``, and row-level
security (forced on the tables' owner too) shows a transaction only the rows of
the user set in ``ledgermem.user_id``. Which of these a ``Store`` method runs as is
declared on the protocol (``base.RowScope``): a method scoped to a user sets it from
its first argument, ``append`` from its events' users, and the maintenance methods that
work across users (embedding, rebuild) set ``ledgermem.all_users`` instead. A
statement that ran with neither sees nothing.

Both stores rank alike, so that fusion above them gives the same results: keyword
search is FTS5's BM25 computed in SQL over postings derived from the rows'
``tsvector`` columns (corpus statistics per user; m0007 says why not the GIN index),
vector search an exact cosine ranking (with SQLite's neighbour smoothing of turns)
until a user's vectors outgrow ``exact_search_limit``, then pgvector's HNSW index.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql as pgsql
from psycopg_pool import ConnectionPool

from ..clock import iso, system_clock
from ..errors import SchemaMismatch, StorageError, StoreClosed
from ..types import Event
from .base import RowScope, declaring, protocol_methods, row_scope
from .migrations import Migration
from .pg_connection import (
    _BINARY,
    _EVERY_USER,
    Conn,
    UserScope,
    _Block,
    _Local,
    _translated,
)
from .pg_connection import _placeholders as _placeholders
from .pg_keyword import _BM25_SQL as _BM25_SQL
from .pg_keyword import _IDF as _IDF
from .pg_keyword import _LEXEMES as _LEXEMES
from .pg_keyword import _TWO as _TWO
from .pg_keyword import CORPUS_TTL_S, PostgresKeywordSearch
from .pg_migrations import PG_MIGRATIONS, TSVECTOR_COLUMNS, hnsw_index_sql
from .pg_vectors import PostgresVectors
from .sql_backend import Run
from .sql_rows import EMBED_TEXT, marks, pk_text_values
from .word_counts import WordCounts

__all__ = ["PostgresStore"]

MIGRATION_LOCK = 0x6C65646765726D
"""``pg_advisory_xact_lock`` key serialising schema changes between openers."""

VACUUM_TABLES = ("events", "knowledge", "conversations", "tool_history", "knowledge_terms",
                 "conversations_terms", "llm_calls", "comparisons", "embedding_staging",
                 "api_keys")
"""The tables that hold users' rows, which ``vacuum`` rewrites."""

UNNEST_ROWS = 8
"""Rows from which an INSERT passes one array per column (``_insert_sql``)."""
_ARRAY_VALUE: dict[str, Callable[[Any], Any]] = {
    "text": str, "bigint": int, "integer": int, "double precision": float, "boolean": bool}
"""Column types an INSERT may pass as arrays, and what each value becomes: a list the
driver sends as one array must hold one Python type (text must already be ``str``)."""
log = logging.getLogger("ledgermem.store")


def _user_of_first(args: tuple[Any, ...], kwargs: dict[str, Any]) -> UserScope:
    """``RowScope.USER``: the user is the first argument, ``user_id``."""
    return str(args[0] if args else kwargs["user_id"]), False


def _users_of_events(args: tuple[Any, ...], kwargs: dict[str, Any]) -> UserScope:
    """``RowScope.EVENTS``: the events' one user, or every user when they are several."""
    users = {event.user_id for event in (args[0] if args else kwargs["events"])}
    return (next(iter(users)), False) if len(users) == 1 else _EVERY_USER


def _every_user(args: tuple[Any, ...], kwargs: dict[str, Any]) -> UserScope:
    """``RowScope.ALL_USERS``."""
    return _EVERY_USER


_SCOPE_OF: dict[RowScope, Callable[[tuple[Any, ...], dict[str, Any]], UserScope]] = {
    RowScope.USER: _user_of_first,
    RowScope.EVENTS: _users_of_events,
    RowScope.ALL_USERS: _every_user,
}
"""How a call's row-level security scope follows from its arguments, per declared
``RowScope``; ``RowScope.NONE`` methods are left as they are."""


def _row_level_scoped(cls: type[PostgresStore]) -> type[PostgresStore]:
    """Wrap every ``Store`` method of ``cls`` in the row-level security scope that the
    protocol declares for it (``base.RowScope``). A protocol method that declares none
    is refused here, so no method can run with a scope nobody chose."""
    for name, declared in protocol_methods().items():
        scope = row_scope(declared)
        if scope is None:
            raise TypeError(f"Store.{name} declares no row scope: decorate it in "
                            "ledgermem/store/base.py (scoped_to_user, across_users, …)")
        method = getattr(cls, name, None)
        if scope is RowScope.NONE or method is None:  # None: not implemented, mypy says so
            continue
        setattr(cls, name, _scoped(method, scope))
    return cls


def _scoped(method: Callable[..., Any], scope: RowScope) -> Callable[..., Any]:
    """``method`` run as the user scope that ``scope`` takes from its arguments. It
    covers the call only: a method returning a context manager (``claim_pending_embeddings``)
    enters its scope again in the block it yields from."""
    scope_of = _SCOPE_OF[scope]

    @functools.wraps(method)
    def scoped(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        with self._scope(scope_of(args, kwargs)):
            return method(self, *args, **kwargs)

    return declaring(scope)(scoped)  # what it enforces, for test_store_protocol


@_row_level_scoped
class PostgresStore(PostgresKeywordSearch, PostgresVectors):
    """PostgreSQL backend.

    Args:
        url: a libpq URL or connection string (``postgresql://user:pw@host/db``).
        schema: where the tables live; created if missing (the ``vector`` extension
            must exist in the database or be creatable by this role).
        min_size / max_size: bounds of the connection pool.
    """

    _unlimited = ""
    _digest_text = True
    common_postings_costly = True
    reads_beside = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        min_size: int = 1,
        max_size: int = 10,
        migrations: Sequence[Migration] = PG_MIGRATIONS,
    ) -> None:
        self.url = _public_url(url)
        self.schema = schema
        self._conninfo = url
        self._local = _Local()
        self._closed = False
        self._search_path: str | None = None
        self._corpora: dict[tuple[str, str], tuple[int, int, float]] = {}
        """(table, user) → (rows, tokens in them, until when to trust it)."""
        self._counted: dict[tuple[str, str, str, int], tuple[tuple[int, int, float], int]] = {}
        """(table, user, word, cut-off) → (the ``_corpora`` entry counted under, the
        word's count): ``_common_terms``."""
        self._words = WordCounts(CORPUS_TTL_S, per_user=True)
        self._many: dict[tuple[str, str], tuple[int, bool, float]] = {}
        """(table, user) → (the limit counted to, whether the user's vectors passed it,
        until when to trust it): ``_approximate``."""
        self._columns: dict[str, dict[str, str]] = {}
        """Per table, its columns' types: ``_column_types``."""
        self._word_lexemes: dict[str, tuple[str, ...]] = {}
        """Each word's lexemes: ``_lexemes``."""
        self._idle_since: weakref.WeakKeyDictionary[Conn, float] = (
            weakref.WeakKeyDictionary())
        """When each pooled connection was last given back (``_check``). Stamped by
        ``_writing``, not by a pool ``reset`` callback: with one, the pool hands every
        returned connection to a worker thread first (``remember`` 12% slower)."""
        self._migrate(migrations)
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            url, min_size=min_size, max_size=max_size, open=False, name="ledgermem",
            kwargs={"autocommit": True}, configure=self._configure,
            check=self._check,
        )
        with _translated(f"cannot connect to {self.url}"):
            self._pool.open(wait=True, timeout=30)

    # schema -----------------------------------------------------------------------
    def schema_version(self) -> int:
        """The highest migration applied to this schema."""
        return int(self._read("SELECT max(version) FROM schema_version")[0][0] or 0)

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        """Apply pending migrations, each in its own transaction holding an advisory
        lock, so that processes opening the same database at once do not race."""
        known = max((m.version for m in PG_MIGRATIONS), default=0)
        with _translated(f"cannot open {self.url}"), psycopg.connect(
                self._conninfo, autocommit=True) as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                if self.schema != "public":
                    if not conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                                        [self.schema]).fetchall():
                        conn.execute(pgsql.SQL("CREATE SCHEMA {}").format(
                            pgsql.Identifier(self.schema)))
                    row = conn.execute("SELECT quote_ident(%s) || ', ' || current_setting("
                                       "'search_path')", [self.schema]).fetchone()
                    self._search_path = str(row[0]) if row else None
                    conn.execute("SELECT set_config('search_path', %s, false)",
                                 [self._search_path])
                conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER "
                             "PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
            current = _version(conn)
            if current > known:
                raise SchemaMismatch(
                    f"{self.url} has schema version {current}, newer than this ledgermem "
                    f"understands ({known}); upgrade ledgermem")
            for migration in migrations:
                if migration.version > current:
                    self._apply_migration(conn, migration)

    def _apply_migration(self, conn: Conn, migration: Migration) -> None:
        with conn.transaction(), self._scope(_EVERY_USER):
            self._local.applied = None
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
            if conn.execute("SELECT 1 FROM schema_version WHERE version = %s",
                            [migration.version]).fetchall():
                return  # another process applied it while this one waited
            for step in migration.statements:
                if isinstance(step, str):
                    conn.execute(step)
                else:
                    step(self._run(conn))
            conn.execute("INSERT INTO schema_version (version, name, applied_at) VALUES "
                         "(%s, %s, %s)", [migration.version, migration.name,
                                          iso(system_clock())])

    def vacuum(self) -> None:
        """``VACUUM FULL`` of every table (outside a transaction, as PostgreSQL needs),
        then a ``CHECKPOINT`` where the role may run one. Deleted rows' bytes stay in a
        table's files until it is rewritten (docs/reliability.md)."""
        if self._closed:
            raise StoreClosed("the store is closed")
        # A pool connection: autocommit (VACUUM refuses a transaction block), on the
        # store's search path.
        with _translated("cannot vacuum"), self._pooled() as conn:
            for table in VACUUM_TABLES:
                conn.execute(pgsql.SQL("VACUUM FULL {}").format(pgsql.Identifier(table)))
            # Without the privilege the server's next checkpoint writes the files.
            with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                conn.execute("CHECKPOINT")

    def settle(self) -> None:
        """``VACUUM (ANALYZE)`` of every table that holds users' rows, on a pool
        connection (outside a transaction, as PostgreSQL needs). It blocks no read or
        write; without the tables' owner PostgreSQL skips them with a warning. A
        failure is logged, not raised: the load before it has committed, and
        autovacuum will do the same later."""
        if self._closed:
            raise StoreClosed("the store is closed")
        if self._local.conn is not None:
            return
        try:
            with _translated("cannot settle"), self._pooled() as conn:
                for table in VACUUM_TABLES:
                    conn.execute(pgsql.SQL("VACUUM (ANALYZE) {}").format(
                        pgsql.Identifier(table)))
        except StorageError as exc:
            log.warning("could not settle the store after a bulk load: %s", exc)

    def _vector_index(self, run: Run, dims: int) -> None:
        """HNSW indexes for vectors of ``dims`` dimensions; those of others go."""
        run("SELECT pg_advisory_xact_lock(?)", [MIGRATION_LOCK])
        for table in ("knowledge", "conversations"):
            name = f"{table}_hnsw_{int(dims)}"
            for (stale,) in run("SELECT indexname FROM pg_indexes WHERE schemaname = "
                                "current_schema() AND tablename = ? AND indexname LIKE ? "
                                "AND indexname <> ?", [table, f"{table}_hnsw_%", name]):
                run(pgsql.SQL("DROP INDEX {}").format(pgsql.Identifier(stale)).as_string(None),
                    [])
            run(hnsw_index_sql(table, dims), [])

    def _claiming(self, run: Run) -> None:
        run("SELECT pg_advisory_xact_lock(?)", [MIGRATION_LOCK])

    def set_meta(self, key: str, value: str) -> None:
        with self._writing() as run:
            super().set_meta(key, value)
            if key == "embedding_dimensions":
                self._vector_index(run, int(value))

    # ledger and views ---------------------------------------------------------------
    def append(self, events: Sequence[Event]) -> None:
        # Keyword statistics change only with text: recall bookkeeping, confidence and
        # lineage events keep the cached corpus counts; the rows and tokens that new,
        # rewritten and removed text adds or takes away are counted into them below.
        self._local.changed = {}
        super().append(events)  # scoped to the events' users (RowScope.EVENTS)
        self._count_changes()

    def _insert_sql(self, run: Run, table: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]], suffix: str = "") -> tuple[str, list[Any]]:
        """From ``UNNEST_ROWS`` rows on, one array per column, unnested in order: a
        multi-row VALUES list of 400 rows holds thousands of placeholders, which the
        driver parses in Python on every statement (13% of a bulk ``add_turns``)."""
        types = self._column_types(run, table)
        kinds = [types.get(column, "") for column in columns]
        if len(rows) < UNNEST_ROWS or not all(kind in _ARRAY_VALUE for kind in kinds):
            return super()._insert_sql(run, table, columns, rows, suffix)
        arrays = []
        for i, kind in enumerate(kinds):
            values = [row[i] for row in rows]
            if kind == "text":
                if not all(value is None or isinstance(value, str) for value in values):
                    # Another type as text: leave its conversion to the VALUES list.
                    return super()._insert_sql(run, table, columns, rows, suffix)
            else:
                values = [None if v is None else _ARRAY_VALUE[kind](v) for v in values]
            arrays.append(values)
        names = ", ".join(columns)
        return (f"INSERT INTO {table} ({names}) SELECT {names} FROM unnest("
                + ", ".join(f"{_BINARY}::{kind}[]" for kind in kinds)
                + f") WITH ORDINALITY AS u({names}, ledgermem_row) ORDER BY ledgermem_row"
                + suffix, arrays)

    def _column_types(self, run: Run, table: str) -> dict[str, str]:
        """``table``'s columns and their types (``format_type``), read once."""
        known = self._columns.get(table)
        if known is None:
            known = self._columns[table] = {
                str(name): str(kind) for name, kind in run(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = ?::regclass AND attnum > 0 AND NOT attisdropped",
                    [table])}
        return known

    _insert_returning: ClassVar[Mapping[str, str]] = {
        "knowledge": "user_id, 1, doc_len", "conversations": "user_id, 1, doc_len"}

    def _update_sql(self, table: str, sets: str, columns: Sequence[str], count: int) -> str:
        """An update of searchable text returns each row's change of length (the new,
        from the ``fts`` trigger, less the old, read by the same statement)."""
        if not TSVECTOR_COLUMNS.get(table, frozenset()).intersection(columns):
            return super()._update_sql(table, sets, columns, count)
        return (f"UPDATE {table} AS t SET {sets} FROM (SELECT pk, doc_len FROM {table} "
                f"WHERE user_id = ? AND id IN ({marks(count)})) AS o "
                "WHERE t.pk = o.pk RETURNING t.user_id, 0, t.doc_len - o.doc_len")

    def _context_sql(self, count: int) -> str:
        """A stored turn's neighbour text is part of its lexemes: the update returns each
        turn's change of length, as ``_update_sql`` does."""
        return (f"UPDATE conversations SET context = v.column2 FROM (VALUES "
                f"{pk_text_values(count)}) AS v "
                "JOIN conversations AS o ON o.pk = v.column1 WHERE conversations.pk = "
                "v.column1 RETURNING conversations.user_id, 0, conversations.doc_len - o.doc_len")

    def _delete_sql(self, table: str, count: int) -> str:
        sql = super()._delete_sql(table, count)
        return f"{sql} RETURNING user_id, -1, -doc_len" if table in TSVECTOR_COLUMNS else sql

    def _changed(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        changed = self._local.changed
        for user_id, count, length in rows:
            before = changed.get((table, user_id), (0, 0))
            changed[(table, user_id)] = (before[0] + int(count), before[1] + int(length))

    def _count_changes(self) -> None:
        """Count the rows and tokens the append added or removed (``_changed``) into the
        cached corpus statistics, instead of recounting the user's every row at the
        next search: at 100,000 items that count took half of a restating
        ``remember``. (A transaction that rolls back later leaves them counted until
        ``CORPUS_TTL_S``; stale statistics only shift scores.)"""
        changed, self._local.changed = self._local.changed, {}
        if self._local.block is not None:   # a write inside a reading block
            self._local.block = _Block()
        for key, (rows, length) in changed.items():
            self._many.pop(key, None)
            cached = self._corpora.get(key)
            if cached is None:
                continue
            if cached[0] + rows <= 0:   # an empty table is not cached (``_corpus``)
                del self._corpora[key]
            else:
                self._corpora[key] = (cached[0] + rows, cached[1] + length, cached[2])

    def redact(self, user_id: str, subject_id: str) -> None:
        super().redact(user_id, subject_id)
        self._forget_words(user_id)

    def delete_user(self, user_id: str) -> int:
        removed = super().delete_user(user_id)
        self._forget_words(user_id)
        return removed

    def _forget_words(self, user_id: str) -> None:
        """Drop the common-term rule's kept counts of ``user_id``'s words (dedup's go in
        ``SQLStore``): no word of a redacted text or a deleted user stays in this
        process."""
        for counted in [key for key in self._counted if key[1] == user_id]:
            del self._counted[counted]

    def _embedding_cache(self, run: Run) -> None:
        """Vectors stay server-side across a rebuild, in a temporary table."""
        run("CREATE TEMPORARY TABLE ledgermem_kept ON COMMIT DROP AS " + " UNION ALL ".join(
            f"SELECT '{table}'::text AS table_name, id, {EMBED_TEXT[table]} AS text, "
            f"embedding, embedding_model, emb_seq FROM {table} WHERE embedding IS NOT NULL"
            for table in ("knowledge", "conversations")), [])

    def _restore_embeddings(self, run: Run, kept: Any) -> None:
        for table in ("knowledge", "conversations"):
            run(f"UPDATE {table} SET embedding = k.embedding, embedding_model = "
                "k.embedding_model, emb_seq = k.emb_seq FROM ledgermem_kept AS k WHERE "
                f"k.table_name = ? AND k.id = {table}.id AND k.text = {EMBED_TEXT[table]}",
                [table])
        run("DROP TABLE ledgermem_kept", [])

    def _rebuild_fts(self, run: Run) -> None:
        """Nothing to do: a rebuild writes every row anew, and a trigger sets its tsvector
        and postings (m0013)."""


def _version(conn: Conn) -> int:
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0] or 0) if row else 0


def _public_url(url: str) -> str:
    """``url`` with any password masked: the URL shows up in messages and logs."""
    parts = urlsplit(url)
    if parts.scheme.startswith("postgres") and parts.password is not None:
        login, _, host = parts.netloc.rpartition("@")
        url = urlunsplit(parts._replace(netloc=f"{login.split(':', 1)[0]}:***@{host}"))
    return re.sub(r"(password\s*=\s*)[^\s&]+", r"\1***", url)
