"""Shared test support: a controllable clock and raw access to a store's database.

Raw connections (``sqlite3`` on the file, ``psycopg`` on the server) are how the
tests look *under* the API (ledger payloads, embedding columns, full-text indexes)
without trusting the code under test to report on itself. Nothing here fakes our
storage.

A *target* is a ``Memory``, a SQLite file (a ``Path`` or a plain path string), or a
PostgreSQL URL whose search_path names the test's schema. SQL is written with ``?``
placeholders in the subset both dialects read; on PostgreSQL the raw connection sees
every user's rows (``ledgermem.all_users``), as the store's maintenance does.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import numpy as np
from click.testing import Result

from ledgermem import Event, Memory
from ledgermem.clock import iso, new_id

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
"""Where every ``FakeClock`` starts: a fixed, timezone-aware UTC moment."""

VIEW_TABLES = ("knowledge", "conversations", "tool_history")
ALL_TABLES = ("events", *VIEW_TABLES, "meta", "schema_version")
PG_SCHEMES = ("postgresql://", "postgres://")

Target = Memory | Path | str


class FakeClock:
    """A clock the test moves by hand: ``clock()`` is now, ``advance(days=..)`` moves it."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        """Move forward (or back, with negative values) by ``timedelta(**delta)``."""
        self.now = self.now + timedelta(**delta)
        return self.now

    def iso(self) -> str:
        """Now, formatted the way ledgermem stores timestamps."""
        return iso(self.now)


def with_login(url: str, *, user: str | None = None, dbname: str | None = None,
               search_path: str | None = None) -> str:
    """``url`` with another role (password = its name), database or search_path."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = f"{user}:{user}@{netloc.rpartition('@')[2]}"
    path = parts.path if dbname is None else f"/{dbname}"
    query = parts.query
    if search_path is not None:
        option = "options=" + quote(f"-c search_path={search_path}")
        query = f"{query}&{option}" if query else option
    return urlunsplit(parts._replace(netloc=netloc, path=path, query=query))


def postgres_url(target: Target) -> str | None:
    """The (unmasked) PostgreSQL URL of ``target``, or None when it is SQLite."""
    if isinstance(target, Memory):
        conninfo = getattr(target.store, "_conninfo", None)   # PostgresStore only
        return str(conninfo) if conninfo is not None else None
    text = str(target)
    return text if text.startswith(PG_SCHEMES) else None


def is_postgres(target: Target) -> bool:
    return postgres_url(target) is not None


def db_path(mem: Memory) -> Path:
    path: Path = mem.store.path  # type: ignore[attr-defined]
    return path


class PgConnection:
    """A psycopg connection that takes ``?`` placeholders, like ``sqlite3``'s."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(sql.replace("%", "%%").replace("?", "%s"), list(params))


@contextmanager
def raw(target: Target) -> Iterator[Any]:
    """A plain connection to the target's database (autocommit), closed on exit:
    a ``sqlite3.Connection``, or a ``PgConnection`` that sees every user's rows."""
    url = postgres_url(target)
    if url is not None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("SELECT set_config('ledgermem.all_users', 'on', false)")
            yield PgConnection(pg)
        return
    path = db_path(target) if isinstance(target, Memory) else Path(target)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def rows(target: Target, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with raw(target) as conn:
        cursor = conn.execute(sql, tuple(params))
        return list(cursor.fetchall()) if cursor.description is not None else []


def event_count(target: Target) -> int:
    return int(rows(target, "SELECT count(*) FROM events")[0][0])


def snapshot(target: Target) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, for "nothing stored changed" checks."""
    with raw(target) as conn:
        return {table: list(conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall())
                for table in ALL_TABLES}


def user_rows(target: Target, user_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row one user owns, by table."""
    with raw(target) as conn:
        return {table: list(conn.execute(f"SELECT * FROM {table} WHERE user_id = ? "
                                         "ORDER BY 1", (user_id,)).fetchall())
                for table in ("events", *VIEW_TABLES)}


def payloads_of(target: Target, subject_id: str) -> list[str]:
    """Raw JSON payloads of every ledger event about one subject."""
    return [r[0] for r in rows(target, "SELECT payload FROM events WHERE subject_id = ? "
                                       "ORDER BY seq", [subject_id])]


def fts_hits(target: Target, table: str, word: str) -> list[tuple[Any, ...]]:
    """Rows whose full-text index holds ``word``: the FTS5 table on SQLite, the
    generated ``tsvector`` column on PostgreSQL."""
    if is_postgres(target):
        return rows(target, f"SELECT pk FROM {table} WHERE fts @@ "
                            "plainto_tsquery('ledgermem_english', ?)", [word])
    return rows(target, f"SELECT rowid FROM {table}_fts WHERE {table}_fts MATCH ?", [word])


def stored_embedding(target: Target, row_id: str, table: str = "knowledge") -> bytes | None:
    """A row's stored vector as float32 bytes (SQLite's BLOB; pgvector's values), or None."""
    column = "embedding::float4[]" if is_postgres(target) else "embedding"
    found = rows(target, f"SELECT {column} FROM {table} WHERE id = ?", [row_id])
    assert found, f"no {table} row {row_id}"
    value = found[0][0]
    if value is None or isinstance(value, bytes):
        return value
    return np.asarray(value, dtype=np.float32).tobytes()


def set_embedding(mem: Memory, item_id: str, text: str, dims: int = 8) -> None:
    """Give one knowledge row a vector through the store's public method."""
    vector = np.arange(1, dims + 1, dtype=np.float32)
    mem.store.set_embeddings("knowledge", [(item_id, text, vector)], "test-model")


def supersede(mem: Memory, user_id: str, old_id: str, new_id_: str, at: str) -> None:
    """Mark ``old_id`` as replaced by ``new_id_`` the way the pipeline does: a ledger event."""
    mem.store.append([Event(
        id=new_id(), ts=at, user_id=user_id, kind="memory.updated",
        payload={"changes": {"superseded_by": new_id_}, "reason": "test supersede"},
        subject_id=old_id)])


@contextmanager
def traced(store: Any, keep: Callable[[str], bool]) -> Iterator[list[str]]:
    """The statements the calling thread runs inside the block on ``store`` (a
    ``SQLiteStore``) that ``keep`` accepts; other threads' (background workers') are
    left out."""
    me, seen = threading.get_ident(), list[str]()

    def note(sql: str) -> None:
        if threading.get_ident() == me and keep(sql):
            seen.append(sql)

    store.trace(note)
    try:
        yield seen
    finally:
        store.trace(None)


def open_with_embedder(url: str, dimensions: int, start: Any, out: Any) -> None:
    """A spawned child: open ``url`` with a hash embedder of ``dimensions`` once every
    child is ready (``start``, a barrier), and put ``(dimensions, outcome)`` on ``out``:
    ``"ok"``, or the error's class name."""
    from ledgermem.memory import open_store
    from ledgermem.testing import HashEmbedder

    store = open_store(url)
    start.wait(timeout=60)
    try:
        Memory(store, embedder=HashEmbedder(dimensions=dimensions)).close()
        out.put((dimensions, "ok"))
    except Exception as exc:  # reported to the parent, which asserts on it
        store.close()
        out.put((dimensions, type(exc).__name__))


def assert_one_line(result: Result) -> str:
    """A CLI failure (click's ``Result``) reported on one stderr line (besides the open
    database's name), and nothing escaped as an exception."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.exception)
    lines: list[str] = result.stderr.strip().splitlines()
    errors = [line for line in lines if not line.startswith("database: ")]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return errors[0]
