"""The server store: PostgreSQL with tsvector full-text search and pgvector.

Many processes on many machines share one database. Connections come from a
psycopg 3 pool; a write transaction keeps its connection in a thread-local, so
nested writes become savepoints and reads inside a write see it. The ledger
projection and the portable queries are ``SQLStore``'s, run with ``?`` rewritten
to ``%s``.

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
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
from pgvector import Vector as PgVector
from pgvector.psycopg import register_vector
from psycopg import sql as pgsql
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo
from psycopg_pool import ConnectionPool, PoolTimeout

from ..clock import iso, system_clock
from ..errors import InvalidInput, SchemaMismatch, StorageError, StoreClosed
from ..types import Event, ItemQuery
from .base import (
    MatchMode,
    RowScope,
    Table,
    TurnQuery,
    Vector,
    declaring,
    protocol_methods,
    row_scope,
)
from .migrations import Migration
from .pg_migrations import PG_MIGRATIONS, TSVECTOR_COLUMNS, hnsw_index_sql
from .sql import (
    CONTEXT_TURNS,
    EMBED_TEXT,
    NEIGHBOUR_SMOOTHING,
    Run,
    SQLStore,
    common_term_rows,
    embedded_table,
    item_where_sql,
    keyword_hits,
    marks,
    pk_text_values,
    turn_where_sql,
)
from .word_counts import WordCounts

__all__ = ["PostgresStore"]

Conn = psycopg.Connection[tuple[Any, ...]]

MIGRATION_LOCK = 0x6C65646765726D
"""``pg_advisory_xact_lock`` key serialising schema changes between openers."""
USER_LOCK = 0x6C6D
"""First key of the ``pg_advisory_xact_lock(USER_LOCK, hashtext(user_id))`` that
serialises planned writes of one user (``writing_for``)."""

VACUUM_TABLES = ("events", "knowledge", "conversations", "tool_history", "knowledge_terms",
                 "conversations_terms", "llm_calls", "comparisons", "embedding_staging",
                 "api_keys")
"""The tables that hold users' rows, which ``vacuum`` rewrites."""

EXACT_SEARCH_LIMIT = 10_000
"""Up to this many candidate vectors a search is exact; beyond it, HNSW."""

UserScope = tuple[str, bool]
"""(user id, all users): what ``ledgermem.user_id`` and ``ledgermem.all_users`` are set to."""
_SET_SCOPE = ("SELECT set_config('ledgermem.user_id', %s, true), "
              "set_config('ledgermem.all_users', %s, true)")
_USER_LOCK_SQL = "SELECT pg_advisory_xact_lock(?, hashtext(?))"
"""A user's lock (``_in_ledger_order``). It reads no table, so the scope can be told
in the same statement (``_SCOPE_AND_USER_LOCK``): one round trip, not two."""
_SCOPE_AND_USER_LOCK = _SET_SCOPE + ", pg_advisory_xact_lock(%s, hashtext(%s))"
_EVERY_USER: UserScope = ("", True)
_IDF = """idf AS MATERIALIZED (
    SELECT l.lexeme, greatest(ln((greatest(?::float8, d.df) - d.df + 0.5) / (d.df + 0.5)), 1e-6)
           AS idf
    FROM unnest({lexemes}) AS l(lexeme) CROSS JOIN LATERAL (
        SELECT count(*) AS df FROM {table}_terms AS p
        WHERE p.user_id = ? AND p.lexeme = l.lexeme) AS d
)"""
"""Each lexeme's idf (FTS5's, floored at 1e-6), its document count an index-only count
of its postings for the user: a row per lexeme, computed before any posting is read."""
_BM25_SQL = """
WITH {idf}, scored AS MATERIALIZED (
    SELECT p.pk, sum(i.idf * p.freq * 2.2
                     / (p.freq + 1.2 * (0.25 + 0.75 * (p.doc_len + 1) / ?::float8))
                     ORDER BY p.lexeme) AS score
    FROM {table}_terms AS p JOIN idf AS i ON i.lexeme = p.lexeme
    WHERE p.user_id = ? AND p.lexeme = ANY({lexemes})
    GROUP BY p.pk{having}
)
SELECT t.id, s.score FROM (SELECT pk, score FROM scored ORDER BY score DESC, pk) AS s
CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?
"""
"""FTS5's bm25 (k1 = 1.2, b = 0.75, idf floored at 1e-6) over the postings of the
query's lexemes in ``<table>_terms`` (m0007), read once: a term's document count is
its number of postings for the user (``_IDF``), a row's score the sum over its
postings, with the term frequency (weight-B positions, a turn's neighbours' text,
counting 0.4) and row length (``doc_len``, tokens, plus one: FTS5 counts the user's
scope token, see ``sqlite.keyword_scope``) stored in each posting. ``two`` keeps the
rows with two postings (``_TWO``; a row has one per lexeme); AND, over two lexemes or
more, is ``_BM25_EVERY_SQL``. The filters are checked on the rows in score order,
until ``limit`` pass.
The row count is cached (``CORPUS_TTL_S``) and another process's writes do not drop
it, so a term may be in more rows than it says: the count is taken as at least the
term's, and the idf then floors at 1e-6 as for a term in every row.
Each row's terms are summed in lexeme order, whatever plan the aggregate gets, so rows
with the same terms and length score the same to the last bit and ``pk`` breaks the
tie. (Before, the order was the plan's: a sort by ``pk`` alone could shuffle a row's
terms, and 33 of 396 lists of a comparison differed in a score's last bit.)

Before, the postings were read with a window counting each lexeme's, materialised,
and for ``two`` sorted by ``pk`` for a second window. Now the counts come first, from
the index alone, and only the aggregate by ``pk`` holds the postings. On 30,000 turns
two-of went from 41.5 / 283.8 to 33.9 / 145.5 ms p50 / p95, OR from 5.3 / 16.5 to
3.5 / 15.6 (the same rows in the same order in all 396 lists compared; docs/retrieval.md,
round ten).

The shape keeps plans sane under stale statistics (a user who just wrote thousands of
rows may look like a user of one row to the planner): the lexemes are an ``= ANY``
index condition as well as the join's (a join alone, under a one-row estimate, read all
the user's postings once per lexeme), nothing joins two intermediate results (``idf``
has a row per lexeme; a one-row estimate makes such a join a quadratic nested loop),
and each candidate is fetched by ``pk`` alone in a subquery that ``OFFSET 0`` keeps the
filters out of (given ``user_id = ?`` and a one-row estimate, the planner scanned the
user's rows instead)."""
_LEXEMES = "tsvector_to_array(to_tsvector('ledgermem_english', ?))"
_TWO = " HAVING count(*) >= 2"
_BM25_EVERY_SQL = """
WITH {idf}, every AS MATERIALIZED ({every}
), scored AS MATERIALIZED (
    SELECT e.pk, (SELECT sum(i.idf * h.freq * 2.2
                             / (h.freq + 1.2 * (0.25 + 0.75 * (h.doc_len + 1) / ?::float8))
                             ORDER BY h.lexeme)
                  FROM {table}_terms AS h JOIN idf AS i ON i.lexeme = h.lexeme
                  WHERE h.pk = e.pk) AS score
    FROM every AS e
)
SELECT t.id, s.score FROM (SELECT pk, score FROM scored ORDER BY score DESC, pk) AS s
CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?
"""
"""``_BM25_SQL`` for ``and`` (two lexemes or more), the same scores to the last bit
without scoring every posting. ``_BM25_SQL`` scores each posting of every
lexeme and keeps the rows holding all of them: a question with one word in most of
the user's rows (at 30,000 turns, one in 27,000) scored 30,000 postings to keep five
rows. Here each lexeme's document count is an index-only count, the rows holding all
of them an ``INTERSECT`` of index-only scans of ``pk`` alone, and only those rows'
postings are read (through the ``(pk)`` index) and scored, summed in lexeme order as
there. Nothing joins two intermediate results: ``idf`` has a row per lexeme."""
_BM25_BOTH_SQL = """
WITH {idf}, scored AS MATERIALIZED (
    SELECT p.pk, sum(i.idf * p.freq * 2.2
                     / (p.freq + 1.2 * (0.25 + 0.75 * (p.doc_len + 1) / ?::float8))
                     ORDER BY p.lexeme) AS score, count(*) AS held
    FROM {table}_terms AS p JOIN idf AS i ON i.lexeme = p.lexeme
    WHERE p.user_id = ? AND p.lexeme = ANY(?::text[])
    GROUP BY p.pk
)
(SELECT t.id, s.score, true FROM (SELECT pk, score FROM scored WHERE held = ?
                                 ORDER BY score DESC, pk) AS s
 CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
 WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?)
UNION ALL
(SELECT t.id, s.score, false FROM (SELECT pk, score FROM scored ORDER BY score DESC, pk) AS s
 CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
 WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?)
"""
"""``and`` and ``or`` over the same lexemes in one statement, for a search none of
whose words is common: ``_BM25_SQL``'s scores (the same sums, in lexeme order, so the
same to the last bit as ``_BM25_EVERY_SQL``'s for the rows holding every lexeme), the
rows holding all of them (``held``: a row has one posting a lexeme) first, marked
true, then the ``or`` ranking, each filtered and cut to its ``LIMIT``."""
_NEWEST_SQL = """
SELECT t.id FROM {table} AS t WHERE {where} AND EXISTS (
    SELECT 1 FROM {table}_terms AS p WHERE p.pk = t.pk AND p.lexeme = ANY(
        tsvector_to_array(to_tsvector('ledgermem_english', ?))))
ORDER BY t.pk DESC LIMIT ?
"""
"""The newest rows (by ``pk``, as SQLite orders by rowid) holding a common term."""
_NEWEST_ALL_SQL = """
SELECT t.id FROM (SELECT pk FROM ({every}) AS e ORDER BY pk DESC) AS s
CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
WHERE {where} ORDER BY s.pk DESC LIMIT ?
"""
"""The newest rows holding every one of the query's (common) lexemes (``_every``),
each fetched by ``pk`` as ``_BM25_SQL`` fetches its candidates. Given ``t.pk IN``
instead, the planner merge-joined the rows found with a backward scan of the user's
table: 67,000 rows read for 50 (150 ms at 100,000 turns)."""
BESIDE_WAIT_S = 0.001
"""How long ``reading_beside`` waits for a free pooled connection before giving up."""
CORPUS_TTL_S = 60.0
"""How long a user's row count and mean row length (BM25's corpus statistics) are
reused; this process's own writes to the user drop them at once."""
UNNEST_ROWS = 8
"""Rows from which an INSERT passes one array per column (``_insert_sql``)."""
_ARRAY_VALUE: dict[str, Callable[[Any], Any]] = {
    "text": str, "bigint": int, "integer": int, "double precision": float, "boolean": bool}
"""Column types an INSERT may pass as arrays, and what each value becomes: a list the
driver sends as one array must hold one Python type (text must already be ``str``)."""
IDLE_CHECK_S = 5.0
"""A pooled connection idle longer than this is checked (an empty query, a round trip)
before it is handed out; one returned moments ago is not. Checking every hand-out cost
a round trip per store call: six per LoCoMo search, 2.0 ms of its 13. A connection
that broke since it was last used is still caught at its next hand-out once idle this
long, as after a server restart; a failure sooner reaches the caller as a
``StorageError`` and the pool drops that connection."""
LEXEMES_KEPT = 100_000
"""Words whose lexemes a store keeps (``_lexemes``); past it they are dropped at once."""
COUNTED_WORDS = 10_000
"""Words whose counts for the common-term rule (``_common_terms``) a store keeps."""
log = logging.getLogger("ledgermem.store")
_COSINE = "coalesce(nullif(1 - (embedding <=> ?::vector), 'NaN'), 0)"
"""Cosine similarity, 0 for a zero vector (pgvector says NaN), as SQLite's dot product."""


class _Block:
    """What a ``reading`` block (one transaction of reads) learnt that holds until it
    ends, and not past it: another process may write meanwhile."""

    def __init__(self) -> None:
        self.empty: set[tuple[str, str]] = set()
        """(table, user) found to hold no row (``_corpus``)."""
        self.either: dict[tuple[Any, ...], list[tuple[str, float]]] = {}
        """``or`` searches ranked by the statement of an ``and`` (``_keyword_search``)."""


class _Local(threading.local):
    conn: Conn | None = None
    """The connection of this thread's open transaction, if any."""
    scope: tuple[str, bool] = ("", False)
    """(user id, all users) that statements of this thread should run as."""
    applied: tuple[str, bool] | None = None
    """What the open transaction has been told (None: unknown, tell it again)."""
    locked: frozenset[str] = frozenset()
    """The users whose lock (``_in_ledger_order``) the open transaction holds."""
    whole: bool = False
    """The open transaction is one block (``reading``, ``writing_for``): store calls
    inside share it as it is, without a savepoint each."""

    def __init__(self) -> None:
        self.block: _Block | None = None
        """Inside a ``reading`` block: what it learnt that holds until it ends."""
        self.changed: dict[tuple[str, str], tuple[int, int]] = {}
        """(table, user) → (rows, tokens) the ``append`` under way added, net of what
        it removed (``_changed``)."""


class _VectorText(Loader):
    """``vector`` values load as float32 numpy arrays, as SQLite's BLOBs do."""

    def load(self, data: Buffer) -> Vector:
        return PgVector.from_text(bytes(data).decode()).to_numpy()


class _VectorBinary(Loader):
    format = Format.BINARY

    def load(self, data: Buffer) -> Vector:
        return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)


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


_BINARY = "?{binary}"
"""A placeholder whose value is sent in binary (``_placeholders``)."""


@functools.lru_cache(maxsize=1024)
def _placeholders(sql: str) -> str:
    """Portable ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled);
    ``_BINARY`` as ``%b``, a value sent in binary (the driver dumps an array of 400
    texts ~8 times faster in binary than as text)."""
    return sql.replace("%", "%%").replace(_BINARY, "%b").replace("?", "%s")


@contextmanager
def _translated(what: str = "PostgreSQL") -> Iterator[None]:
    """The one boundary where driver errors become ``StorageError``."""
    try:
        yield
    except psycopg.DataError as exc:
        if "NUL" in str(exc):  # refused client-side: the text was never sent
            raise InvalidInput("PostgreSQL cannot store text containing NUL (U+0000)"
                               ) from exc
        raise StorageError(f"{what}: {exc}") from exc
    except psycopg.Error as exc:
        raise StorageError(f"{what}: {exc}") from exc


@_row_level_scoped
class PostgresStore(SQLStore):
    """PostgreSQL backend.

    Args:
        url: a libpq URL or connection string (``postgresql://user:pw@host/db``).
        schema: where the tables live; created if missing (the ``vector`` extension
            must exist in the database or be creatable by this role).
        min_size / max_size: bounds of the connection pool.
    """

    _unlimited = ""
    _digest_text = True
    exact_search_limit = EXACT_SEARCH_LIMIT
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

    # connections ------------------------------------------------------------------
    def _configure(self, conn: Conn) -> None:
        if self._search_path is not None:
            conn.execute("SELECT set_config('search_path', %s, false)", [self._search_path])
        register_vector(conn)
        info = TypeInfo.fetch(conn, "vector")
        if info is not None:
            conn.adapters.register_loader(info.oid, _VectorText)
            conn.adapters.register_loader(info.oid, _VectorBinary)
        self._idle_since[conn] = time.monotonic()    # just connected: nothing to check

    def _check(self, conn: Conn) -> None:
        """Ping a connection idle longer than ``IDLE_CHECK_S``."""
        since = self._idle_since.get(conn)
        if since is None or time.monotonic() - since > IDLE_CHECK_S:
            ConnectionPool.check_connection(conn)

    def close(self) -> None:
        self._closed = True
        self._pool.close()

    @contextmanager
    def _scope(self, scope: UserScope) -> Iterator[None]:
        """Statements of this thread run as ``scope`` (see ``_Local.scope``) inside."""
        local = self._local
        previous, local.scope = local.scope, scope
        try:
            yield
        finally:
            local.scope = previous

    def _execute(self, conn: Conn, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        local = self._local
        with _translated():
            if local.applied != local.scope:
                told = [local.scope[0], "on" if local.scope[1] else "off"]
                if sql == _USER_LOCK_SQL:
                    conn.execute(_SCOPE_AND_USER_LOCK, [*told, *params])
                    local.applied = local.scope
                    return []
                conn.execute(_SET_SCOPE, told)
                local.applied = local.scope
            cursor = conn.execute(_placeholders(sql), list(params))
            return cursor.fetchall() if cursor.description is not None else []

    def _run(self, conn: Conn) -> Run:
        def run(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return self._execute(conn, sql, params)

        return run

    @contextmanager
    def _writing(self) -> Iterator[Run]:
        """A transaction (a savepoint when nested) on this thread's connection. Used
        for reads of several statements too: PostgreSQL needs no write lock up front."""
        local = self._local
        if local.conn is not None and local.whole:
            # One transaction for the whole block: no savepoint (two round trips) per
            # call. A failure inside ends the block (its transaction rolls back).
            yield self._run(local.conn)
            return
        if local.conn is not None:
            try:
                with _translated(), local.conn.transaction():
                    yield self._run(local.conn)
            except BaseException:
                # A rolled-back savepoint undoes set_config too, and releases the locks
                # taken inside it.
                local.applied, local.locked = None, frozenset()
                raise
            return
        if self._closed:
            raise StoreClosed("the store is closed")
        with _translated(), self._pool.connection() as conn, self._holding(conn) as run:
            yield run

    @contextmanager
    def _holding(self, conn: Conn) -> Iterator[Run]:
        """A transaction on ``conn``, a pooled connection this thread holds meanwhile."""
        local = self._local
        local.conn, local.applied, local.locked = conn, None, frozenset()
        try:
            with conn.transaction():
                yield self._run(conn)
        finally:
            local.conn, local.applied, local.locked = None, None, frozenset()
            self._idle_since[conn] = time.monotonic()    # back to the pool (_check)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """The store calls of this thread inside share one transaction (and one pooled
        connection, and the scope told once per user) instead of each opening its own:
        a conversation search made six or seven, each a hand-out, ``BEGIN``,
        ``set_config`` and ``COMMIT`` around its statements (it now uses two blocks,
        before and after the wait for its query's vector). Inside a transaction
        already, nothing changes."""
        if self._local.conn is not None:
            yield
            return
        with self._writing(), self._one_block():
            yield

    @contextmanager
    def reading_beside(self) -> Iterator[bool]:
        """``reading`` on a pooled connection free at once (within ``BESIDE_WAIT_S``):
        a helper thread's reads run in a server process of their own, beside the
        caller's. Never waits for a connection held by a caller that may be waiting
        for this helper; yields False then (and when this thread holds one already)."""
        if self._closed or self._local.conn is not None:
            yield False
            return
        try:
            conn = self._pool.getconn(timeout=BESIDE_WAIT_S)
        except PoolTimeout:
            yield False
            return
        try:
            with _translated(), conn, self._holding(conn), self._one_block():
                yield True
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def _one_block(self) -> Iterator[None]:
        """The open transaction as one reading block (``_Local.whole``, ``_Block``)."""
        local = self._local
        local.whole, local.block = True, _Block()
        try:
            yield
        finally:
            local.whole, local.block = False, None

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self._local.conn is not None:
            return self._execute(self._local.conn, sql, params)
        with self._writing() as run:
            return run(sql, params)

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
        with _translated("cannot vacuum"), self._pool.connection() as conn:
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
            with _translated("cannot settle"), self._pool.connection() as conn:
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
    @contextmanager
    def writing_for(self, user_id: str) -> Iterator[None]:
        """As on SQLite; the store calls inside share its transaction as it is
        (``_Local.whole``). A savepoint around each (two round trips) made six of a
        ``remember``'s fifteen. A failure inside ends the block, as it would anyway:
        no caller goes on inside a block after a store error."""
        local = self._local
        with self._writing() as run:
            # As the user, whose rows the block reads next: one set_config, not two.
            with self._scope((user_id, False)):
                self._in_ledger_order(run, [user_id])
            whole, local.whole = local.whole, True
            try:
                yield
            finally:
                local.whole = whole

    def _in_ledger_order(self, run: Run, user_ids: Sequence[str]) -> None:
        """Take the user locks (in sorted order, so two writers cannot wait on each
        other) before an event is inserted. Without them a writer could draw its
        ``seq`` first and change a view row second, after a writer that drew a later
        ``seq``: the view would end as the earlier event says. The locks are the
        transaction's; one already held is not asked for again (``writing_for``
        followed by ``append`` takes its user's once, in one statement)."""
        local = self._local
        for user_id in user_ids:
            if user_id not in local.locked:
                run(_USER_LOCK_SQL, [USER_LOCK, user_id])
                local.locked |= {user_id}

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

    # full-text search -------------------------------------------------------------
    def _keyword_search(self, table: str, user_id: str, terms: Sequence[str],
                        mode: MatchMode, where: str, params: list[Any], limit: int
                        ) -> list[tuple[str, float]]:
        """``sql.keyword_hits`` over the postings, as on SQLite. BM25 as FTS5 computes it (same
        k1, b, column weights and idf floor); corpus statistics and term counts are this
        user's. Terms reach PostgreSQL as bound values parsed by ``to_tsvector``: no
        query syntax in them is interpreted."""
        if not terms:
            return []
        with self._writing() as run:
            n_rows, avgdl = self._corpus(run, table, user_id)
            if not n_rows:
                return []

            def bm25(words: Sequence[str], how: MatchMode) -> list[tuple[str, float]]:
                if how == "triples":
                    lexemes = self._lexemes(run, words)  # every word's, in one round trip
                    groups = [group for start in range(0, len(words), 3)
                              if (group := self._lexemes(run, words[start:start + 3]))]
                    if not groups:
                        return []
                    branches = [_every(table, user_id, group) for group in groups]
                    every = " UNION ".join(f"({sql})" for sql, _ in branches)
                    idf = _IDF.format(table=table, lexemes="?::text[]")
                    rows = run(_BM25_EVERY_SQL.format(table=table, idf=idf, every=every,
                                                      where=where),
                               [n_rows, lexemes, user_id,
                                *(value for _, values in branches for value in values),
                                avgdl + 1, *params, limit])
                    return [(r[0], float(r[1])) for r in rows]
                block = self._local.block
                either_key = ((table, user_id, tuple(words), where, repr(params), limit)
                              if block is not None else ())
                if how == "and":
                    lexemes = self._lexemes(run, words)
                    if len(lexemes) > 1 and block is not None and not self._common_terms(
                            run, table, user_id, words, common_term_rows(n_rows)):
                        # No word is common: ranking every posting costs about what the
                        # INTERSECT does, and gives the ``or`` search's rows as well
                        # (a search asks for them next when these are too few).
                        rows = run(_BM25_BOTH_SQL.format(
                            table=table, where=where,
                            idf=_IDF.format(table=table, lexemes="?::text[]")),
                            [n_rows, lexemes, user_id, avgdl + 1, user_id, lexemes,
                             len(lexemes), *params, limit, *params, limit])
                        block.either[either_key] = [(r[0], float(r[1])) for r in rows
                                                    if not r[2]]
                        return [(r[0], float(r[1])) for r in rows if r[2]]
                    if len(lexemes) > 1:
                        every, every_params = _every(table, user_id, lexemes)
                        idf = _IDF.format(table=table, lexemes="?::text[]")
                        rows = run(_BM25_EVERY_SQL.format(table=table, idf=idf, every=every,
                                                          where=where),
                                   [n_rows, lexemes, user_id, *every_params, avgdl + 1,
                                    *params, limit])
                        return [(r[0], float(r[1])) for r in rows]
                if how == "or" and block is not None and either_key in block.either:
                    return block.either.pop(either_key)
                text = " ".join(words)
                rows = run(_BM25_SQL.format(table=table, lexemes=_LEXEMES, where=where,
                                            idf=_IDF.format(table=table, lexemes=_LEXEMES),
                                            having=_TWO if how == "two" else ""),
                           [n_rows, text, user_id, avgdl + 1, user_id, text, *params, limit])
                return [(r[0], float(r[1])) for r in rows]

            def newest(words: Sequence[str], how: MatchMode) -> list[str]:
                text = " ".join(words)
                if how == "and":
                    lexemes = self._lexemes(run, words)
                    if not lexemes:
                        return []
                    every, every_params = _every(table, user_id, lexemes)
                    return [r[0] for r in run(
                        _NEWEST_ALL_SQL.format(table=table, where=where, every=every),
                        [*every_params, *params, limit])]
                return [r[0] for r in run(_NEWEST_SQL.format(table=table, where=where),
                                          [*params, text, limit])]

            return keyword_hits(
                terms, mode, limit, bm25=bm25, newest=newest,
                common_terms=lambda words: self._common_terms(
                    run, table, user_id, words, common_term_rows(n_rows)))

    def _lexemes(self, run: Run, words: Sequence[str]) -> list[str]:
        """The distinct lexemes of ``words`` as ``to_tsvector('ledgermem_english')``
        gives them (none for a word its parser drops), sorted. Each word's are kept
        (``LEXEMES_KEPT`` words), so a search asks the server only for words it has not
        met."""
        known = self._word_lexemes  # shared by threads: read once per word, never twice
        found = {word: known.get(word) for word in words}
        missing = sorted(word for word, lexemes in found.items() if lexemes is None)
        if missing:
            fetched = {r[0]: tuple(r[1]) for r in run(
                "SELECT w, tsvector_to_array(to_tsvector('ledgermem_english', w)) "
                "FROM unnest(?::text[]) AS w", [missing])}
            self._keep_lexemes(fetched)
            found.update(fetched)
        return sorted({lexeme for lexemes in found.values() for lexeme in lexemes or ()})

    def _keep_lexemes(self, fetched: dict[str, tuple[str, ...]]) -> None:
        """Keep each word's lexemes (``_lexemes``), up to ``LEXEMES_KEPT`` words."""
        known = self._word_lexemes
        if len(known) + len(fetched) > LEXEMES_KEPT:
            known.clear()
        known.update(fetched)

    def _common_terms(self, run: Run, table: str, user_id: str, terms: Sequence[str],
                      cutoff: int) -> set[str]:
        """The terms whose postings for this user outnumber ``cutoff``. Each word's
        count is kept while the user's cached corpus statistics are, and only the words
        not kept are counted (a search asks for its words' for the ``and`` search and
        again for the ``or`` one, and a time-naming one again without its time words)."""
        corpus = self._corpora.get((table, user_id))
        words = sorted(set(terms))
        counts: dict[str, int] = {}
        for word in words:
            kept = self._counted.get((table, user_id, word, cutoff))
            if kept is not None and corpus is not None and kept[0] is corpus:
                counts[word] = kept[1]
        missing = [word for word in words if word not in counts]
        if missing:
            fresh = self._term_counts(run, table, user_id, missing, cutoff)
            counts.update(fresh)
            if corpus is not None:
                if len(self._counted) + len(fresh) > COUNTED_WORDS:
                    self._counted.clear()
                for word, count in fresh.items():
                    self._counted[(table, user_id, word, cutoff)] = (corpus, count)
        return {term for term, count in counts.items() if count > cutoff}

    def term_counts(self, user_id: str, table: Table, terms: Sequence[str]
                    ) -> tuple[int, dict[str, int]]:
        """As on SQLite, over this user's postings: ``common_term_rows`` of the user's
        rows, and each term's postings stopping past it (``_term_counts``)."""
        with self._writing() as run:
            cutoff = common_term_rows(self._corpus(run, table, user_id)[0])
            counts, missing = self._words.known(table, user_id, sorted(set(terms)), cutoff)
            if missing:
                fresh = self._term_counts(run, table, user_id, missing, cutoff)
                self._words.keep(table, user_id, fresh, cutoff)
                counts.update(fresh)
            return cutoff, counts

    def _term_counts(self, run: Run, table: str, user_id: str, terms: Sequence[str],
                     cutoff: int) -> dict[str, int]:
        """Each term's postings for this user (those of all its lexemes), each count
        stopping past ``cutoff``: one statement for every term. Its lexemes come back
        too, kept for ``_lexemes`` (a search's AND asks for them next)."""
        words = sorted(set(terms))
        if not words:
            return {}
        rows = run(f"SELECT term, l.lexemes, (SELECT count(*) FROM (SELECT 1 FROM "
                   f"{table}_terms AS p WHERE p.user_id = ? AND p.lexeme = ANY(l.lexemes) "
                   "LIMIT ?) AS c) FROM unnest(?::text[]) AS term CROSS JOIN LATERAL (SELECT "
                   "tsvector_to_array(to_tsvector('ledgermem_english', term)) AS lexemes) AS l",
                   [user_id, cutoff + 1, words])
        self._keep_lexemes({r[0]: tuple(r[1]) for r in rows})
        return {r[0]: int(r[2]) for r in rows}

    def _corpus(self, run: Run, table: str, user_id: str) -> tuple[int, float]:
        """(rows, mean tokens per row) of this user's table, cached (``CORPUS_TTL_S``)
        since counting is linear in the user's rows. An empty table is not cached past
        the open block (``reading``: a search asks for knowledge's twice): search skips
        it, so a stale zero would hide rows another process (or a rebuild) wrote
        meanwhile; stale non-zero statistics only shift scores."""
        key, block = (table, user_id), self._local.block
        if block is not None and key in block.empty:
            return 0, 1.0
        cached = self._corpora.get(key)
        if cached is None or cached[2] <= time.monotonic():
            n_rows, length = run(f"SELECT count(*), coalesce(sum(doc_len), 0) FROM {table} "
                                 "WHERE user_id = ?", [user_id])[0]
            cached = (int(n_rows), int(length), time.monotonic() + CORPUS_TTL_S)
            if n_rows:
                self._corpora[key] = cached
            elif block is not None:
                block.empty.add(key)
        n_rows, length = cached[0], cached[1]
        return n_rows, (length / n_rows if n_rows else 0.0) or 1.0

    def _postings(self, user_id: str, terms: Sequence[str], cap: int
                  ) -> dict[str, list[int]]:
        """Every term's postings (those of all its lexemes) in one statement, each term's
        read through the postings index (a lateral lookup per term, as ``_term_counts``)."""
        if not terms:
            return {}
        found: dict[str, list[int]] = {}
        for term, pk in self._read(
                "SELECT w.term, p.pk FROM unnest(?::text[]) AS w(term) CROSS JOIN LATERAL ("
                "SELECT p.pk FROM knowledge_terms AS p WHERE p.user_id = ? AND p.lexeme = ANY("
                "tsvector_to_array(to_tsvector('ledgermem_english', w.term))) LIMIT ?) AS p",
                [list(terms), user_id, cap + 1]):
            found.setdefault(term, []).append(pk)
        return found

    def keyword_search_items(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = item_where_sql(user_id, query, prefix="t.")
        return self._keyword_search("knowledge", user_id, terms, mode, where, params, limit)

    def keyword_search_turns(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = turn_where_sql(user_id, query, prefix="t.")
        return self._keyword_search("conversations", user_id, terms, mode, where, params,
                                    limit)

    # vector search ----------------------------------------------------------------
    def _approximate(self, run: Run, table: str, user_id: str, limit: int) -> bool:
        """Whether this user has too many vectors for an exact search; if so, the
        transaction is set up for an HNSW scan that keeps going until enough rows
        pass the filters (pgvector's iterative scan). The answer is kept
        ``CORPUS_TTL_S``, or until this process writes the user's rows (the count
        read up to ``exact_search_limit`` rows each search: 10,001 at 100,000 turns);
        a stale one only picks the other of two valid searches."""
        limit_rows, now = self.exact_search_limit, time.monotonic()
        known = self._many.get((table, user_id))
        if known is not None and known[0] == limit_rows and known[2] > now:
            many = known[1]
        else:
            many = run(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE user_id = ? AND "
                       "embedding IS NOT NULL LIMIT ?) AS c",
                       [user_id, limit_rows + 1])[0][0] > limit_rows
            if len(self._many) >= 10_000:
                self._many.clear()
            self._many[(table, user_id)] = (limit_rows, many, now + CORPUS_TTL_S)
        if many:
            run("SELECT set_config('hnsw.ef_search', ?, true), "
                "set_config('hnsw.iterative_scan', 'strict_order', true)",
                [str(min(1000, max(40, limit)))])
        return bool(many)

    def vector_search_items(
        self, user_id: str, vector: Vector, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Items by cosine similarity, the filters in the same query: exact while the
        user's vectors are few (a full ranking, as on SQLite), else by HNSW."""
        q = np.asarray(vector, dtype=np.float32)
        dims = int(q.shape[0])
        where, params = item_where_sql(user_id, query)
        source = f"FROM knowledge WHERE {where} AND vector_dims(embedding) = {dims}"
        with self._writing() as run:
            if self._approximate(run, "knowledge", user_id, limit):
                rows = run(
                    f"SELECT id, 1 - d FROM (SELECT id, embedding::vector({dims}) <=> "
                    f"?::vector({dims}) AS d {source} ORDER BY d LIMIT ?) AS s "
                    "WHERE d <> 'NaN' ORDER BY d", [q, *params, limit])
            else:
                rows = run(
                    f"SELECT id, {_COSINE} AS score {source} ORDER BY score DESC, pk LIMIT ?",
                    [q, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def vector_search_turns(
        self, user_id: str, vector: Vector, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Turns by cosine plus ``NEIGHBOUR_SMOOTHING`` × the best cosine among the
        ``CONTEXT_TURNS`` turns on each side in the session, as on SQLite. Exact while
        the user's vectors are few; else ``_turns_near``."""
        q = np.asarray(vector, dtype=np.float32)
        dims = int(q.shape[0])
        nearest = max(limit * 4, 64)
        with self._writing() as run:
            if self._approximate(run, "conversations", user_id, nearest):
                return self._turns_near(run, user_id, q, query, nearest, limit)
            where, params = turn_where_sql(user_id, query, prefix="c.")
            around = ", ".join(f"{f}(cos, {k}) OVER w" for f in ("lag", "lead")
                               for k in range(1, CONTEXT_TURNS + 1))
            # The filters' columns ride along instead of a join back to the table: under
            # a generic plan with stale statistics PostgreSQL chose a nested loop that
            # recomputed the window per row (seconds instead of milliseconds).
            keys = "pk, id, user_id, session_id, role, ts"
            rows = run(
                f"WITH scored AS (SELECT {keys}, CASE WHEN vector_dims(embedding) "
                f"= {dims} THEN {_COSINE} END AS cos FROM conversations WHERE user_id = ?), "
                f"c AS (SELECT {keys}, cos + ? * coalesce(greatest({around}), 0) "
                "AS score FROM scored WINDOW w AS (PARTITION BY session_id "
                f"ORDER BY ts, pk)) SELECT c.id, c.score FROM c WHERE c.score IS NOT NULL "
                f"AND {where} ORDER BY c.score DESC, c.pk LIMIT ?",
                [q, user_id, NEIGHBOUR_SMOOTHING, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def _turns_near(self, run: Run, user_id: str, q: Vector, query: TurnQuery, nearest: int,
                    limit: int) -> list[tuple[str, float]]:
        """The approximate ranking of ``vector_search_turns``: the HNSW index's
        ``nearest`` turns that pass the filters, each scored with its ``CONTEXT_TURNS``
        neighbours on each side, read by the session index; and those neighbours, each
        scored with the nearest turns beside it, as a turn can rank by its neighbour's
        cosine as well as its own.

        Scoring every turn of the nearest turns' sessions instead read tens of
        thousands of rows when sessions are long (a session holds a channel's whole
        conversation): 0.37 s a search at 100,000 turns in sessions of 100."""
        dims = int(q.shape[0])
        cos = f"CASE WHEN vector_dims(embedding) = {dims} THEN {_COSINE} END"
        filters, params = turn_where_sql(user_id, query)
        where, where_params = turn_where_sql(user_id, query, prefix="c.")
        side = ("(SELECT pk, {cos} AS cos FROM conversations WHERE user_id = ? AND "
                "session_id = h.session_id AND (ts, pk) {op} (h.ts, h.pk) "
                "ORDER BY ts {order}, pk {order} LIMIT {n})")
        sides = " UNION ALL ".join(
            side.format(cos=cos, op=op, order=order, n=CONTEXT_TURNS)
            for op, order in (("<", "DESC"), (">", "ASC")))
        rows = run(
            f"WITH hits AS MATERIALIZED (SELECT pk, session_id, ts, {cos} AS cos FROM "
            f"conversations WHERE {filters} AND vector_dims(embedding) = {dims} "
            f"ORDER BY embedding::vector({dims}) <=> ?::vector({dims}) LIMIT ?), "
            "around AS MATERIALIZED (SELECT h.pk AS hit, h.cos AS hit_cos, n.pk, n.cos "
            f"FROM hits AS h CROSS JOIN LATERAL ({sides}) AS n), "
            "scored AS (SELECT h.pk, h.cos + ? * coalesce(m.best, 0) AS score FROM hits AS h "
            "LEFT JOIN (SELECT hit, max(cos) AS best FROM around GROUP BY hit) AS m "
            "ON m.hit = h.pk UNION ALL "
            "SELECT a.pk, max(a.cos) + ? * max(a.hit_cos) FROM around AS a WHERE a.pk NOT "
            "IN (SELECT pk FROM hits) GROUP BY a.pk) "
            f"SELECT c.id, s.score FROM scored AS s JOIN conversations AS c ON c.pk = s.pk "
            f"WHERE s.score IS NOT NULL AND {where} ORDER BY s.score DESC, c.pk LIMIT ?",
            [q, *params, q, nearest, q, user_id, q, user_id,
             NEIGHBOUR_SMOOTHING, NEIGHBOUR_SMOOTHING, *where_params, limit])
        return [(r[0], float(r[1])) for r in rows]

    # embeddings (maintenance across users) ----------------------------------------
    def pending_embeddings(self, table: Table, limit: int) -> list[tuple[str, str]]:
        """Rows without a vector that no worker has claimed (see
        ``claim_pending_embeddings``)."""
        return [(r[0], r[1]) for r in self._read(_pending_sql(table), [limit])]

    @contextmanager
    def claim_pending_embeddings(self, table: Table, limit: int
                                 ) -> Iterator[list[tuple[str, str]]]:
        """Claim up to ``limit`` rows without a vector for this worker alone.

        The rows stay locked (``FOR UPDATE SKIP LOCKED``) until the block ends, so
        concurrent workers claim disjoint rows; call ``set_embeddings`` inside the
        block to commit the vectors with the claim. A worker that dies or raises
        releases its claim with its transaction.

        Example:
            >>> with store.claim_pending_embeddings("knowledge", 64) as rows:  # doctest: +SKIP
            ...     store.set_embeddings("knowledge", embed(rows), model)
        """
        # RowScope.ALL_USERS again: the wrapper's scope ends before this block runs.
        with self._scope(_EVERY_USER), self._writing() as run:
            yield [(r[0], r[1]) for r in run(_pending_sql(table), [limit])]

    def set_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> int:
        name = embedded_table(table)
        done = 0
        with self._writing() as run:
            self._check_live_model(run, model)
            for row_id, text, vector in sorted(rows, key=lambda row: row[0]):
                done += len(run(
                    f"UPDATE {name} SET embedding = ?, embedding_model = ?, emb_seq = "
                    f"nextval('embedding_seq') WHERE id = ? AND {EMBED_TEXT[name]} = ? "
                    "RETURNING 1", [np.asarray(vector, dtype=np.float32), model, row_id, text]))
        return done

    def _vector_param(self, vector: Vector) -> Any:
        return np.asarray(vector, dtype=np.float32)

    def _emb_seq_sql(self, run: Run, table: str) -> tuple[str, list[Any]]:
        return "nextval('embedding_seq')", []

    def clear_embeddings(self) -> None:
        with self._writing() as run:
            for table in ("knowledge", "conversations"):
                run(f"UPDATE {table} SET embedding = NULL, embedding_model = NULL, "
                    "emb_seq = NULL WHERE embedding IS NOT NULL", [])


def _every(table: str, user_id: str, lexemes: Sequence[str]) -> tuple[str, list[Any]]:
    """The ``INTERSECT`` that finds the user's rows holding every one of ``lexemes``,
    with its parameters: a branch a lexeme, each an index-only scan of its postings
    carrying nothing but ``pk``."""
    branch = f"SELECT pk FROM {table}_terms WHERE user_id = ? AND lexeme = ?"
    return (" INTERSECT ".join([branch] * len(lexemes)),
            [value for lexeme in lexemes for value in (user_id, lexeme)])


def _version(conn: Conn) -> int:
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0] or 0) if row else 0


def _pending_sql(table: str) -> str:
    """Rows still without a vector, oldest first, skipping those another worker holds."""
    return (f"SELECT id, {EMBED_TEXT[embedded_table(table)]} FROM {table} WHERE embedding IS NULL "
            "ORDER BY pk LIMIT ? FOR UPDATE SKIP LOCKED")




def _public_url(url: str) -> str:
    """``url`` with any password masked: the URL shows up in messages and logs."""
    parts = urlsplit(url)
    if parts.scheme.startswith("postgres") and parts.password is not None:
        login, _, host = parts.netloc.rpartition("@")
        url = urlunsplit(parts._replace(netloc=f"{login.split(':', 1)[0]}:***@{host}"))
    return re.sub(r"(password\s*=\s*)[^\s&]+", r"\1***", url)
