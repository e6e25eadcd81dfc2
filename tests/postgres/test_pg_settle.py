"""After a bulk load the PostgreSQL store settles its tables (``Store.settle``): the
planner's statistics and the visibility map are brought up to date at once, so that
index-only scans of the keyword postings read no table page, instead of waiting for
autovacuum."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ledgermem import Memory
from ledgermem.store import postgres
from ledgermem.store.postgres import PostgresStore
from ledgermem.transfer import export_jsonl, import_jsonl
from tests.support import FakeClock


def _visible(url: str, table: str) -> tuple[int, int]:
    """(pages, pages marked all-visible) of ``table``, as the catalog says."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT relpages, relallvisible FROM pg_class WHERE oid = "
                           "%s::regclass", [table]).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _durable(url: str) -> str:
    """``url`` with commits flushed before they return, as a server runs by default:
    the test server commits asynchronously, and VACUUM marks no page all-visible while
    the commits of its rows are not flushed."""
    params = conninfo_to_dict(url)
    params["options"] = f"{params.get('options') or ''} -c synchronous_commit=on".strip()
    return make_conninfo("", **params)


def test_an_import_leaves_the_postings_all_visible(pg_url: str, tmp_path: Path,
                                                   clock: FakeClock) -> None:
    source = Memory.open(tmp_path / "source.db", embedder=None, clock=clock)
    alice = source.for_user("alice")
    alice.remember_many([f"Jar {n} of quince jam sits on shelf {n % 7}" for n in range(400)],
                        dedup=False)
    alice.add_turns([{"role": "user", "content": f"The kettle {n} whistles"}
                     for n in range(200)], session_id="s")
    out = io.StringIO()
    export_jsonl(source.store, out)
    source.close()
    store = PostgresStore(_durable(pg_url))
    try:
        with store.transaction():   # inside a transaction settling waits for the commit
            store.settle()
        assert import_jsonl(store, io.StringIO(out.getvalue())) > 0
        for table in ("knowledge_terms", "conversations_terms", "knowledge"):
            pages, visible = _visible(pg_url, table)
            assert pages > 0 and visible == pages, table
        with Memory(store, embedder=None, clock=clock) as memory:
            assert memory.for_user("alice").search("quince jam")
    finally:
        store.close()  # again, should an assertion have failed before the memory's close


def test_settling_twice_and_on_an_empty_store_is_harmless(pg_store: PostgresStore) -> None:
    pg_store.settle()
    pg_store.settle()
    assert pg_store.user_ids() == []


def test_a_settle_that_fails_is_logged_not_raised(pg_store: PostgresStore,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The load before it has committed: a failure to vacuum must not report it failed."""
    monkeypatch.setattr(postgres, "VACUUM_TABLES", ("knowledge", "no_such_table"))
    with caplog.at_level(logging.WARNING, logger="ledgermem.store"):
        pg_store.settle()
    assert "could not settle" in caplog.text and "no_such_table" in caplog.text
