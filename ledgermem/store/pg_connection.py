"""PostgreSQL connections and transactions: a psycopg 3 pool, a thread's open
transaction (nested writes as savepoints, a block of reads sharing one), the user
scope each transaction is told for row-level security, the per-user locks that keep
writers in ledger order, and the one boundary where driver errors are translated.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector as PgVector
from pgvector.psycopg import register_vector
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import InvalidInput, StorageError, StoreClosed
from .base import Vector
from .sql import SQLStore
from .sql_backend import Run

Conn = psycopg.Connection[tuple[Any, ...]]

USER_LOCK = 0x6C6D
"""First key of the ``pg_advisory_xact_lock(USER_LOCK, hashtext(user_id))`` that
serialises planned writes of one user (``writing_for``)."""

UserScope = tuple[str, bool]
"""(user id, all users): what ``ledgermem.user_id`` and ``ledgermem.all_users`` are set to."""
_SET_SCOPE = ("SELECT set_config('ledgermem.user_id', %s, true), "
              "set_config('ledgermem.all_users', %s, true)")
_USER_LOCK_SQL = "SELECT pg_advisory_xact_lock(?, hashtext(?))"
"""A user's lock (``_in_ledger_order``). It reads no table, so the scope can be told
in the same statement (``_SCOPE_AND_USER_LOCK``): one round trip, not two."""
_SCOPE_AND_USER_LOCK = _SET_SCOPE + ", pg_advisory_xact_lock(%s, hashtext(%s))"
_EVERY_USER: UserScope = ("", True)
BESIDE_WAIT_S = 0.001
"""How long ``reading_beside`` waits for a free pooled connection before giving up."""
POOL_WAIT_S = 30.0
"""How long a store call waits for a pooled connection while others hold them all."""
PROBE_AFTER_S = 1.0
"""After this long without a pooled connection, a store call connects to the server
itself (``_reachable``): if that fails too, the server is down or out of reach, and
the call fails at once instead of waiting out ``POOL_WAIT_S`` (as every call did
during an outage)."""
PROBE_TIMEOUT_S = 5
"""The longest the connection of ``_reachable`` may take (libpq's ``connect_timeout``,
whole seconds): a host that drops packets answers nothing."""
IDLE_CHECK_S = 5.0
"""A pooled connection idle longer than this is checked (an empty query, a round trip)
before it is handed out; one returned moments ago is not. Checking every hand-out cost
a round trip per store call: six per LoCoMo search, 2.0 ms of its 13. A connection
that broke since it was last used is still caught at its next hand-out once idle this
long, as after a server restart; a failure sooner reaches the caller as a
``StorageError`` and the pool drops that connection."""


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


class PostgresConnection(SQLStore):
    """Connections, transactions and user scopes (``PostgresStore``'s)."""

    _local: _Local
    _closed: bool
    _search_path: str | None
    _pool: ConnectionPool[Conn]
    _conninfo: str
    _idle_since: weakref.WeakKeyDictionary[Conn, float]

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
        with _translated(), self._pooled() as conn, self._holding(conn) as run:
            yield run

    @contextmanager
    def _pooled(self) -> Iterator[Conn]:
        """A pooled connection, given back after (committed, or rolled back on an
        error). Waits up to ``POOL_WAIT_S`` while other calls hold every one, but fails
        after ``PROBE_AFTER_S`` when the server does not answer a new connection either.

        Raises:
            StorageError: no connection: the server is unreachable, or every pooled
                connection stayed taken for ``POOL_WAIT_S``.
        """
        try:
            conn = self._pool.getconn(timeout=PROBE_AFTER_S)
        except PoolTimeout:
            self._reachable()
            conn = self._pool.getconn(timeout=POOL_WAIT_S - PROBE_AFTER_S)
        try:
            with conn:
                yield conn
        finally:
            self._pool.putconn(conn)

    def _reachable(self) -> None:
        """Raise ``StorageError`` when a new connection to the server fails."""
        try:
            psycopg.connect(self._conninfo, autocommit=True,
                            connect_timeout=PROBE_TIMEOUT_S).close()
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL is unreachable: {exc}") from exc

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

    # transactions in ledger order -------------------------------------------------
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
